"""Custom resource → Ansible extra vars, with Operator SDK's names and shape.

Shape (Operator SDK ``runner.makeParameters``)::

    <spec fields, keys snake_cased when snakeCaseParameters>   # top level, one var per spec field
    ansible_operator_meta: {name, namespace}
    _<group>_<kind>:        the whole object as read from the API (group dots/dashes → "_", kind lower-case)
    _<group>_<kind>_spec:   the raw spec (keys not converted)
    <watch vars>                                                 # override everything above, as in the SDK
    <finalizer vars>                                             # on finalizer runs, override again

Security (differences from the SDK, see docs/reference/status.md and docs/reference/watches.md):

* ``markUnsafe`` (our default: on) marks *every* string that comes from the custom resource – spec
  values and keys, and also the strings inside ``_<group>_<kind>`` / ``_spec`` / ``ansible_operator_meta``,
  which the SDK leaves trusted – as ``Unsafe``. ``dump`` writes them with Ansible's ``!unsafe`` tag, so a
  CR author cannot make the operator evaluate ``{{ lookup('pipe', ...) }}``. Watch vars are the operator
  author's and stay trusted.
* A spec field that would become a top-level ``ansible_*`` variable (``ansiblePythonInterpreter``,
  ``ansible_become``, ``ansible_connection`` ...) is refused with ``RefusedVariable``: such variables change
  how Ansible connects and executes, which a CR author must never control. So is every name ansible-core
  gives a meaning of its own (:func:`reserved_names`, read from ansible-core itself): its magic variables
  (``inventory_hostname``, ``hostvars``, ``groups``, ``playbook_dir``, ``role_path`` ...) and its own template
  globals (``omit``, ``lookup``, ``query``, ``q``, ``now``, ``undef``), in the form the role would see it
  (``inventoryHostname`` becomes ``inventory_hostname`` with snakeCaseParameters). A spec field ``omit``
  would replace Ansible's omit placeholder, so ``default(omit)`` would write the CR's value instead of
  leaving the field out. Playbook keywords (``name``, ``port``, ``environment``, ``timeout`` ...) and Jinja's
  own globals (``namespace``, ``range``, ``dict`` ...) stay allowed, as in Ansible and the Operator SDK:
  they are common spec field names, setting them as variables changes no keyword, and ``ansible-playbook``
  itself only warns about them (its warning appears in the run's output).
  Top-level names that are not Python identifiers (``"888"``, ``"a.b"`` with snakeCaseParameters off) are
  passed through like the SDK does: Ansible accepts them and roles can read them as ``vars['888']``.
* Two spec keys that convert to the same snake_case name (``fooBar`` and ``foo_bar``) are refused too:
  the SDK keeps a random one of them (Go map order).
"""

from __future__ import annotations

import re
import sys
from typing import Any, Mapping

# Unsafe and the YAML dump belong to the executors layer (they write env/extravars); re-exported here.
from ansible_operator.executors import reserved as ansible_reserved
from ansible_operator.executors.base import Executor
from ansible_operator.executors.varsfile import Unsafe, dump
from ansible_operator.kubetypes import KubeObject

__all__ = [
    "Unsafe",
    "RefusedVariable",
    "to_snake_case",
    "snake_case_keys",
    "mark_unsafe",
    "object_var_name",
    "build_extra_vars",
    "reserved_names",
    "load_reserved_names",
    "dump",
]


class RefusedVariable(ValueError):
    """The custom resource asks for a variable the operator will not set; the message names the spec key
    and the variable it would have become."""

    def __init__(self, message: str, *, spec_key: str, variable: str) -> None:
        super().__init__(message)
        self.spec_key = spec_key
        self.variable = variable


#: The deepest ``spec`` nesting a run is started for. ansible-core's own variable handling is recursive and
#: gives up ("Unexpected Exception ... maximum recursion depth exceeded") just past 315 levels on 2.19 and
#: ~490 on 2.16/2.21 (a ``debug`` of the variable), and the runner's own conversions recurse too. A deeper
#: object is refused with a message naming where, instead of a run that dies of a RecursionError (or, past
#: ~500 levels, a reconcile retried with a traceback forever). The sandbox refuses bodies deeper than 200
#: levels; a real API server takes custom resources up to 10,000 deep.
MAX_SPEC_DEPTH = 300


def _too_deep(spec: Mapping[str, Any], limit: int) -> list[Any] | None:
    """The keys/indexes from ``spec`` down to the first mapping/list nested more than ``limit`` levels
    below it, else None (iterative, and the path is only spelled out for the answer: no recursion or
    quadratic work on hostile input)."""
    steps: list[tuple[int, Any]] = []  # (parent step or -1, key/index) per container seen
    stack: list[tuple[Any, int, int]] = [(spec, -1, 0)]  # (container, its step, its depth)
    while stack:
        item, step, depth = stack.pop()
        if depth > limit:
            keys: list[Any] = []
            while step >= 0:
                step, key = steps[step]
                keys.append(key)
            return keys[::-1]
        pairs: Any = item.items() if isinstance(item, Mapping) else enumerate(item)
        for key, child in pairs:
            if isinstance(child, (Mapping, list)):
                steps.append((step, key))
                stack.append((child, len(steps) - 1, depth + 1))
    return None


# ---- Operator SDK paramconv (port of internal/ansible/paramconv/paramconv.go) ------------------------

_NUMBER_SEQUENCE = re.compile(r"([a-zA-Z])(\d+)([a-zA-Z](\d+))")
# Order matters only for names containing several of these words; Go iterates its map in random order.
_WORD_MAPPING = {"http": "HTTP", "url": "URL", "ip": "IP"}


def _preprocess_word_mapping(value: str) -> str:
    """Surround the first occurrence of HTTP/URL/IP (or its plural ...s) with ``_`` so it becomes a word."""
    for word in _WORD_MAPPING.values():
        idx = value.find(word)
        if idx < 0:
            continue
        end = idx + len(word)
        if end - 1 == len(value) - 1:
            value = value[:idx] + "_" + value[idx:]
        elif value[end] == "s":
            if end == len(value) - 1:
                value = value[:idx] + "_" + value[idx:end] + "S"
            elif idx == 0:
                value = value[:end] + "S" + "_" + value[end + 1:]
            else:
                value = value[:idx] + "_" + value[idx:end] + "S" + "_" + value[end + 1:]
        elif idx == 0:
            value = value[:end] + "_" + value[end:]
        else:
            value = value[:idx] + "_" + value[idx:end] + "_" + value[end:]
    return value


def _is_upper(c: str) -> bool:
    return "A" <= c <= "Z"


def _is_lower(c: str) -> bool:
    return "a" <= c <= "z"


def to_snake_case(name: str) -> str:
    """Operator SDK's ``paramconv.ToSnake``, quirks included, so roles see the same variable names.

    ``sizeK8sBuckets`` → ``size_k8s_buckets``, ``egressIPs`` → ``egress_ips``, ``myURLPath`` →
    ``my_url_path``; a leading capital gives a leading ``_`` (``ThisThing`` → ``_this_thing``).
    """
    s = _NUMBER_SEQUENCE.sub(r"\1 \2 \3", name).strip(" ")
    if not s:
        return ""
    prefix = "_" if _is_upper(s[0]) else ""
    s = _preprocess_word_mapping(s)
    bits: list[str] = []
    n = ""
    i_real = -1
    for i, v in enumerate(s):
        i_real += 1
        next_case_changed = False
        if i + 1 < len(s):
            nxt = s[i + 1]
            next_case_changed = (_is_upper(v) and _is_lower(nxt)) or (_is_lower(v) and _is_upper(nxt))
        if i_real > 0 and n[-1] != "_" and next_case_changed:
            if _is_upper(v):
                bits.append(n.lower())
                n = v
                i_real = 0
            elif _is_lower(v):
                bits.append((n + v).lower())
                n = ""
                i_real = -1
        elif v in " _-":
            bits.append(n.lower())
            n = ""
            i_real = -1
        else:
            n += v
    bits.append(n.lower())
    joined = "_".join(bits)
    if bits[0] not in _WORD_MAPPING:
        return prefix + joined
    return joined


def snake_case_keys(value: Any, path: str = "spec") -> Any:
    """Recursively snake_case mapping keys (lists are walked too), like ``paramconv.MapToSnake``.

    Raises ``RefusedVariable`` when two keys of one mapping convert to the same name.
    """
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        origin: dict[str, str] = {}
        for key, val in value.items():
            new = to_snake_case(key) if isinstance(key, str) else key
            if new in out:
                raise RefusedVariable(
                    f"{path}.{origin[new]} and {path}.{key} both become the variable {new!r};"
                    " rename one of them",
                    spec_key=f"{path}.{key}", variable=str(new),
                )
            origin[new] = key
            out[new] = snake_case_keys(val, f"{path}.{key}")
        return out
    if isinstance(value, list):
        return [snake_case_keys(v, f"{path}[{i}]") for i, v in enumerate(value)]
    return value


def mark_unsafe(value: Any) -> Any:
    """Copy of ``value`` with every string (mapping keys included) wrapped in ``Unsafe``."""
    if isinstance(value, str):
        return value if isinstance(value, Unsafe) else Unsafe(value)
    if isinstance(value, Mapping):
        return {mark_unsafe(k): mark_unsafe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [mark_unsafe(v) for v in value]
    return value


_mark_unsafe = mark_unsafe  # build_extra_vars has a parameter of the same name


def object_var_name(group: str, kind: str) -> str:
    """``_<group>_<kind>`` with ``.`` and ``-`` replaced by ``_`` (SDK ``escapeAnsibleKey``)."""
    return re.sub(r"[.\-]", "_", f"_{group}_{kind.lower()}")


# ---- names ansible-core reserves --------------------------------------------------------------------

_reserved: frozenset[str] | None = None


def reserved_names() -> frozenset[str]:
    """Every variable name ansible-core gives a meaning of its own (magic variables, its template globals;
    :mod:`ansible_operator.executors.reserved`), read once per process. Blocking on first use (a child
    process of this interpreter): the operator calls :func:`load_reserved_names` before its first run."""
    global _reserved
    if _reserved is None:
        _reserved = ansible_reserved.read_blocking(sys.executable)
    return _reserved


async def load_reserved_names(executor: Executor | None = None) -> frozenset[str]:
    """:func:`reserved_names` without blocking the event loop, from the ansible-core ``executor``'s runs
    use (the warm executor's zygote has it imported already), else from a child process. Read once: kept
    here for the process."""
    global _reserved
    if _reserved is None:
        names = await (executor.reserved_names() if executor is not None
                       else ansible_reserved.read(sys.executable))
        if _reserved is None:
            _reserved = names
    return _reserved


def build_extra_vars(
    obj: KubeObject,
    *,
    watch_vars: Mapping[str, Any],
    snake_case: bool,
    mark_unsafe: bool,
    group: str,
    kind: str,
    finalizer_vars: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Extra vars for one run of ``obj`` (see the module docstring for the shape and the rules).

    ``finalizer_vars`` are given on finalizer runs only; like watch vars they are trusted and win.
    Raises ``RefusedVariable`` for spec fields that would set ``ansible_*`` variables or collide.
    """
    wrap = _mark_unsafe if mark_unsafe else (lambda v: v)
    raw_spec = obj.get("spec")
    spec: Mapping[str, Any] = raw_spec if isinstance(raw_spec, Mapping) else {}
    too_deep = _too_deep(spec, MAX_SPEC_DEPTH)
    if too_deep is not None:
        top = str(too_deep[0])
        where = "spec" + "".join(f"[{k}]" if isinstance(k, int) else f".{k}" for k in too_deep)
        raise RefusedVariable(
            f"spec nests more than {MAX_SPEC_DEPTH} levels deep (at {where[:200]}); Ansible cannot"
            " handle variables that deep: flatten the field",
            spec_key=f"spec.{top}", variable=to_snake_case(top) if snake_case else top,
        )

    params = snake_case_keys(spec) if snake_case else {k: v for k, v in spec.items()}
    reserved = reserved_names() if params else frozenset()
    for (key, var) in zip(spec.keys(), params.keys()):
        if isinstance(var, str) and var.lower().startswith("ansible_"):
            raise RefusedVariable(
                f"spec.{key} would set the Ansible variable {var!r}; spec fields must not become ansible_*"
                " variables (they control how Ansible connects and runs)",
                spec_key=f"spec.{key}", variable=var,
            )
        if isinstance(var, str) and var in reserved:
            raise RefusedVariable(
                f"spec.{key} would set {var!r}, a name Ansible reserves"
                " (a magic variable or template global);"
                " spec fields must not override it: rename the field",
                spec_key=f"spec.{key}",
                variable=var,
            )
    out: dict[str, Any] = {k: wrap(v) for k, v in params.items()}

    raw_meta = obj.get("metadata")
    metadata: Mapping[str, Any] = raw_meta if isinstance(raw_meta, Mapping) else {}
    out["ansible_operator_meta"] = wrap({
        "name": metadata.get("name", ""),
        "namespace": metadata.get("namespace", ""),
    })
    obj_key = object_var_name(group, kind)
    out[obj_key] = wrap(dict(obj))
    out[f"{obj_key}_spec"] = wrap(dict(spec))
    for k, v in watch_vars.items():
        out[k] = v
    for k, v in (finalizer_vars or {}).items():
        out[k] = v
    return out
