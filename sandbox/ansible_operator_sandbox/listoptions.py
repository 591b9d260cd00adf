"""The consistency options of a list or watch: ``resourceVersion``, ``resourceVersionMatch``,
``sendInitialEvents`` and ``continue``, and the continue tokens.

Checked as kube-apiserver checks them: the combinations first (apimachinery's ``ValidateListOptions``:
422 Invalid on ``ListOptions.meta.k8s.io``), then the values (an unparsable resourceVersion or continue
token: 400), then against the store (a resourceVersion the server has not reached: 504 Timeout; one
from before a compaction: 410 Expired, worded as etcd words it for lists, watches and continue tokens).
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from typing import Any, Mapping

from ansible_operator_sandbox import schema
from ansible_operator_sandbox.errors import ApiError, bad_request

EXACT = "Exact"
NOT_OLDER_THAN = "NotOlderThan"
_UINT64_MAX = 2**64 - 1

#: etcd storage's words for a resourceVersion compacted away (k8s.io/apiserver storage/etcd3)
LIST_TOO_OLD = "The resourceVersion for the provided list is too old."
WATCH_TOO_OLD = "The resourceVersion for the provided watch is too old."
CONTINUE_TOO_OLD = (
    "The provided continue parameter is too old to display a consistent list result. You can start a new"
    " list without the continue parameter, or use the continue token in this response to retrieve the"
    " remainder of the results. Continuing with the provided token results in an inconsistent list -"
    " objects that were created, modified, or deleted between the time the first chunk was returned and"
    " now may show up in the list."
)


@dataclass(frozen=True)
class ListOptions:
    resource_version: int | None
    """None when not given (or empty); 0 for ``"0"`` (any state, served from memory)."""
    match: str
    send_initial_events: bool | None
    continue_token: str


def parse(query: Mapping[str, str], *, watch: bool) -> ListOptions:
    raw_rv = query.get("resourceVersion", "")
    match = query.get("resourceVersionMatch", "")
    sie_raw = query.get("sendInitialEvents")
    send_initial_events = None if sie_raw is None else sie_raw.lower() in ("true", "1")
    token = query.get("continue", "")
    errors = (_watch_errors if watch else _list_errors)(raw_rv, match, send_initial_events, token)
    if errors:
        raise ApiError(422, "Invalid", schema.invalid_message("ListOptions.meta.k8s.io", "", errors),
                       {"group": "meta.k8s.io", "kind": "ListOptions", "causes": [e.cause() for e in errors]})
    return ListOptions(_resource_version(raw_rv), match, send_initial_events, token)


def _list_errors(raw_rv: str, match: str, send_initial_events: bool | None, token: str
                 ) -> list[schema.FieldError]:
    errors = []
    if match:
        if not raw_rv:
            errors.append(_forbidden("resourceVersionMatch is forbidden unless resourceVersion is provided"))
        if token:
            errors.append(_forbidden("resourceVersionMatch is forbidden when continue is provided"))
        if match not in (EXACT, NOT_OLDER_THAN):
            errors.append(schema.not_supported("resourceVersionMatch", match, [EXACT, NOT_OLDER_THAN, ""]))
        if match == EXACT and raw_rv == "0":
            errors.append(_forbidden('resourceVersionMatch "exact" is forbidden for resourceVersion "0"'))
    if send_initial_events is not None:
        errors.append(schema.forbidden("sendInitialEvents", "sendInitialEvents is forbidden for list"))
    return errors


def _watch_errors(raw_rv: str, match: str, send_initial_events: bool | None, token: str
                  ) -> list[schema.FieldError]:
    errors = []
    if send_initial_events is not None and match != NOT_OLDER_THAN:
        errors.append(_forbidden(f"sendInitialEvents requires setting resourceVersionMatch to"
                                 f" {NOT_OLDER_THAN}"))
    if match:
        if send_initial_events is None:
            errors.append(_forbidden("resourceVersionMatch is forbidden for watch unless sendInitialEvents is"
                                     " provided"))
        if match != NOT_OLDER_THAN:
            errors.append(schema.not_supported("resourceVersionMatch", match, [NOT_OLDER_THAN]))
        if token:
            errors.append(_forbidden("resourceVersionMatch is forbidden when continue is provided"))
    return errors


def _forbidden(detail: str) -> schema.FieldError:
    return schema.forbidden("resourceVersionMatch", detail)


def _resource_version(raw: str) -> int | None:
    """As the storage layer parses it (``strconv.ParseUint``); 400 otherwise."""
    if not raw:
        return None
    why = None
    if not raw.isascii() or not raw.isdigit():
        why = "invalid syntax"
    elif int(raw) > _UINT64_MAX:
        why = "value out of range"
    if why is not None:
        error = schema.invalid("resourceVersion", raw, f'strconv.ParseUint: parsing {json.dumps(raw)}: {why}')
        raise bad_request(f"invalid resource version: {error}")
    return int(raw)


def too_large(requested: int, current: int) -> ApiError:
    """A resourceVersion the server has not reached (the real one waits up to 3 s for it first)."""
    cause = {"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}
    return ApiError(504, "Timeout", f"Timeout: Too large resource version: {requested}, current: {current}",
                    {"causes": [cause], "retryAfterSeconds": 1})


# ---- continue tokens -------------------------------------------------------------------------------

def encode_continue(resource_version: int, after: tuple[str, str]) -> str:
    """A token for the page after the object ``after`` (namespace, name) of a list at ``resource_version``
    (base64url without padding, as the real server's; what it holds is the sandbox's own)."""
    body = json.dumps({"rv": resource_version, "ns": after[0], "name": after[1]}, separators=(",", ":"))
    return base64.urlsafe_b64encode(body.encode()).decode().rstrip("=")


def decode_continue(token: str) -> tuple[int, tuple[str, str]]:
    """The list's resourceVersion and the last object returned; 400 for a token that is not one."""
    try:
        raw = base64.b64decode(token + "=" * (-len(token) % 4), altchars=b"-_", validate=True)
    except (binascii.Error, ValueError):
        raise _bad_token("illegal base64 data") from None
    try:
        data: Any = json.loads(raw)
    except ValueError:
        text = raw.decode("utf-8", "replace").lstrip()
        first = text[:1]
        raise _bad_token(f"invalid character {first!r} looking for beginning of value" if first
                         and first not in '{["-0123456789tfn' else "unexpected end of JSON input") from None
    if not (isinstance(data, dict) and isinstance(data.get("ns"), str) and isinstance(data.get("name"), str)):
        raise _bad_token("incorrect encoded start resourceVersion (version meta.k8s.io/v1)")
    rv = data.get("rv")
    return (rv if isinstance(rv, int) else 0), (data["ns"], data["name"])


def _bad_token(why: str) -> ApiError:
    return bad_request(f"invalid continue token: continue key is not valid: {why}")
