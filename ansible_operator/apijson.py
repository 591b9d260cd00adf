"""The API server's JSON, decoded with a bound on nesting, so that no object can break the process.

The real kube-apiserver stores objects nested up to 10,000 levels (a CRD with
``x-kubernetes-preserve-unknown-fields`` takes anything). Python cannot hold that: ``json.loads`` raises
``RecursionError`` near 1,000 levels, ``copy.deepcopy`` and every other recursive walk (kopf's, ours,
ansible-core's) long before that. One such object in a watch stream or a list used to end kopf's watcher
and with it the whole operator (issue 20).

:func:`loads` decodes every answer and watch event the runner reads (kopf's, through
:mod:`ansible_operator.kopfcompat`, and :mod:`ansible_operator.kube`'s): a document nested no deeper than
:data:`MAX_DEPTH` is decoded as it is; in a deeper one, each container below that depth is replaced by the
string :data:`TRUNCATED` before decoding. Nothing of the object's identity is lost (metadata sits near the
top), so the object is still cached, queued and reconciled on its own; its spec, cut, is then still more
than :data:`ansible_operator.extravars.MAX_SPEC_DEPTH` deep, and the run is refused for that object
alone with a Failure condition, while every other object is served as before.

Cost: one ``bytes.count`` pair per document; a depth scan (C-speed passes drop escapes, everything but
quotes and brackets, then the strings) only for documents with more brackets than :data:`MAX_DEPTH` (a
list page: ~0.7 of its decoding's time); the truncating pass only for documents that need it.
"""

from __future__ import annotations

import json
import re
from itertools import accumulate
from typing import Any

MAX_DEPTH = 310
"""The deepest nesting decoded as is, counted from the document's root (a watch event's object is at 2,
its spec at 3). Over :data:`ansible_operator.extravars.MAX_SPEC_DEPTH` + the deepest a spec sits in a
document (a list's item: 4) + the cut container, so a cut spec is always refused; far enough under
Python's recursion limit (1,000) for ``deepcopy`` (two frames a level) from a deep call stack."""

TRUNCATED = f"<ansible-operator: not decoded, nested deeper than {MAX_DEPTH} levels>"

_STRING = rb'"[^"\\]*(?:\\.[^"\\]*)*"'
_TOKENS = re.compile(_STRING + rb"|[\[\]{}]")
_ESCAPES = re.compile(rb"\\.", re.DOTALL)
_NOT_QUOTES_OR_BRACKETS = bytes(b for b in range(256) if b not in b'"[]{}')
_BARE_STRINGS = re.compile(rb'"[^"]*"')
_STEP = [0] * 256
_STEP[ord("{")] = _STEP[ord("[")] = 1
_STEP[ord("}")] = _STEP[ord("]")] = -1
_CUT = json.dumps(TRUNCATED).encode()


def depth(raw: bytes) -> int:
    """The deepest nesting of a JSON document (0 for a scalar), brackets inside strings not counted."""
    # escapes only occur in strings: without them, a string is quote to quote; then only quotes and
    # brackets are kept (C speed), so the strings are dropped from a much shorter text
    unescaped = _ESCAPES.sub(b"", raw) if b"\\" in raw else raw
    brackets = _BARE_STRINGS.sub(b"", unescaped.translate(None, _NOT_QUOTES_OR_BRACKETS))
    return max(accumulate(map(_STEP.__getitem__, brackets)), default=0)


def truncate(raw: bytes, limit: int = MAX_DEPTH) -> bytes:
    """``raw`` with every container deeper than ``limit`` replaced by the JSON string :data:`TRUNCATED`."""
    out: list[bytes] = []
    level = 0
    kept = 0  # raw[kept:] not yet copied
    cut_from: int | None = None  # the start of the container being cut
    for match in _TOKENS.finditer(raw):
        token = match.group()
        if token[0] == 0x22:  # a string: its brackets are text
            continue
        if token in (b"{", b"["):
            level += 1
            if level == limit + 1 and cut_from is None:
                cut_from = match.start()
        else:
            if level == limit + 1 and cut_from is not None:
                out += (raw[kept:cut_from], _CUT)
                kept = match.end()
                cut_from = None
            level -= 1
    out.append(raw[kept:])
    return b"".join(out)


def loads(raw: bytes | bytearray | str) -> Any:
    """Decode one JSON document from the API server, containers deeper than :data:`MAX_DEPTH` cut."""
    data = raw.encode() if isinstance(raw, str) else bytes(raw)
    if data.count(b"{") + data.count(b"[") > MAX_DEPTH and depth(data) > MAX_DEPTH:
        data = truncate(data)
    return json.loads(data)

