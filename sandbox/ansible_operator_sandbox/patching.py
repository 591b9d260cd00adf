"""PATCH bodies the way kube-apiserver applies them: JSON merge, JSON patch, strategic merge, apply.

Why: ``kubernetes.core.k8s`` and ``kubectl`` mostly talk PATCH (``kubectl apply`` sends a strategic
merge patch for built-in kinds and a JSON merge patch for custom resources; ``state: patched`` picks
any of the three; ``apply: true`` / ``--server-side`` use server-side apply). A role that passes in the
sandbox must produce the same object it would on a real cluster.

Content types (the server maps them to the functions here):

* ``application/merge-patch+json`` → :func:`merge_patch` (RFC 7386)
* ``application/json-patch+json`` → :func:`json_patch` (RFC 6902, via the ``jsonpatch`` library)
* ``application/strategic-merge-patch+json`` → :func:`strategic_merge_patch` (built-in kinds only;
  the apiserver answers 415 for custom resources)
* ``application/apply-patch+yaml`` → :func:`apply_patch` (server-side apply, **simplified**: see there)

Bad patch documents raise :class:`PatchError` carrying the HTTP ``code`` and Status ``reason``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import jsonpatch
import jsonpointer

from ansible_operator_sandbox.builtin_schemas import go_json_kind
from ansible_operator_sandbox.schema import json_copy

__all__ = [
    "PatchError",
    "merge_patch",
    "json_patch",
    "strategic_merge_patch",
    "apply_patch",
    "list_strategy",
]


class PatchError(ValueError):
    """A patch that cannot be applied. ``code``/``reason`` are what the Status response carries:
    400 ``BadRequest`` for malformed documents, 422 ``Invalid`` when a JSON patch does not apply
    (failed ``test``, missing path) — as kube-apiserver does."""

    def __init__(self, message: str, code: int = 400, reason: str = "BadRequest", bare: bool = False) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.reason = reason
        self.bare = bare  # the Status carries no details (name, kind, causes)


REJECTED = "the server rejected our request due to an error in our request"


# --------------------------------------------------------------------------------------------------
# RFC 7386


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: objects merge recursively, ``null`` deletes, anything else replaces
    (including every list). Neither argument is mutated."""
    if not isinstance(patch, dict):
        return json_copy(patch)
    result = json_copy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


# --------------------------------------------------------------------------------------------------
# RFC 6902


def json_patch(target: Any, operations: Any) -> Any:
    """RFC 6902 JSON patch (``jsonpatch`` library). ``operations`` may be the decoded list or raw
    JSON text/bytes. Malformed documents → 400; operations that do not apply → 422."""
    if isinstance(operations, (bytes, bytearray)):
        operations = operations.decode("utf-8", errors="replace")
    if isinstance(operations, str):
        try:
            operations = json.loads(operations)
        except json.JSONDecodeError as exc:
            raise PatchError(f"invalid JSON patch: {exc}") from exc
    if not isinstance(operations, list):
        raise PatchError(
            f"json: cannot unmarshal {go_json_kind(operations)} into Go value of type jsonpatch.Patch"
        )
    for i, op in enumerate(operations):
        if not isinstance(op, dict):
            raise PatchError(
                f"json: cannot unmarshal {go_json_kind(op)} into Go value of type jsonpatch.Operation"
            )
        if "op" not in op:
            raise PatchError(f"invalid JSON patch: operation {i} has no 'op'")
        if "path" not in op:
            raise PatchError(f"invalid JSON patch: operation {i} ({op['op']}) has no 'path'")
    try:
        steps = [(op, jsonpatch.JsonPatch([op])) for op in operations]
    except (jsonpatch.InvalidJsonPatch, jsonpointer.JsonPointerException) as exc:
        raise PatchError(f"invalid JSON patch: {exc}") from exc
    doc = json_copy(target)
    for _op, step in steps:
        try:
            doc = step.apply(doc, in_place=True)
        except jsonpatch.JsonPatchTestFailed as exc:
            raise PatchError(REJECTED, code=422, reason="Invalid", bare=True) from exc
        except jsonpatch.InvalidJsonPatch as exc:
            raise PatchError(f"invalid JSON patch: {exc}") from exc
        except (
            jsonpatch.JsonPatchConflict,
            jsonpointer.JsonPointerException,
            jsonpatch.JsonPatchException,
            KeyError,
            IndexError,
            TypeError,
        ) as exc:
            # kube-apiserver 1.36 answers every JSON patch that does not apply with this bare 422
            raise PatchError(REJECTED, code=422, reason="Invalid", bare=True) from exc
    return doc


# --------------------------------------------------------------------------------------------------
# Strategic merge patch: which lists merge, and by which key

# Lists inside a PodSpec (relative path of map keys; list elements add no path segment).
_CONTAINER_FIELDS = ("containers", "initContainers", "ephemeralContainers")
_POD_SPEC_LISTS: dict[tuple[str, ...], str | None] = {
    ("volumes",): "name",
    ("imagePullSecrets",): "name",
    ("hostAliases",): "ip",
    ("topologySpreadConstraints",): "topologyKey",
    ("resourceClaims",): "name",
    ("schedulingGates",): "name",
}
for _c in _CONTAINER_FIELDS:
    _POD_SPEC_LISTS[(_c,)] = "name"
    _POD_SPEC_LISTS[(_c, "ports")] = "containerPort"
    _POD_SPEC_LISTS[(_c, "env")] = "name"
    _POD_SPEC_LISTS[(_c, "volumeMounts")] = "mountPath"
    _POD_SPEC_LISTS[(_c, "volumeDevices")] = "devicePath"
    _POD_SPEC_LISTS[(_c, "resizePolicy")] = None  # atomic in k8s: listed to document, replaced

# Where the PodSpec sits in each workload kind.
_POD_SPEC_PREFIXES: dict[str, tuple[tuple[str, ...], ...]] = {
    "Pod": (("spec",),),
    "PodTemplate": (("template", "spec"),),
    "Deployment": (("spec", "template", "spec"),),
    "ReplicaSet": (("spec", "template", "spec"),),
    "StatefulSet": (("spec", "template", "spec"),),
    "DaemonSet": (("spec", "template", "spec"),),
    "Job": (("spec", "template", "spec"),),
    "ReplicationController": (("spec", "template", "spec"),),
    "CronJob": (("spec", "jobTemplate", "spec", "template", "spec"),),
}

# Lists merged for every kind (ObjectMeta, the usual status.conditions).
# A value of "" means "list of primitives merged as a set" (patchStrategy merge, no key).
_COMMON_LISTS: dict[tuple[str, ...], str] = {
    ("metadata", "finalizers"): "",
    ("metadata", "ownerReferences"): "uid",
}

# Kind-specific lists outside the PodSpec.
_KIND_LISTS: dict[str, dict[tuple[str, ...], str]] = {
    "Service": {("spec", "ports"): "port"},
    "Node": {("status", "addresses"): "type", ("spec", "podCIDRs"): ""},
    "ServiceAccount": {("secrets",): "name"},
    "Pod": {("status", "podIPs"): "ip", ("status", "hostIPs"): "ip"},
}
# Built-in kinds whose status.conditions are merged by type (patchMergeKey "type"); for custom
# resources conditions are atomic unless their CRD schema says otherwise.
_CONDITION_KINDS = (
    "Pod",
    "Node",
    "Namespace",
    "PersistentVolumeClaim",
    "PersistentVolume",
    "Service",
    "Deployment",
    "ReplicaSet",
    "StatefulSet",
    "DaemonSet",
    "ReplicationController",
    "Job",
    "HorizontalPodAutoscaler",
    "PodDisruptionBudget",
    "CustomResourceDefinition",
    "APIService",
    "CertificateSigningRequest",
    "FlowSchema",
    "PriorityLevelConfiguration",
)
for _k in _CONDITION_KINDS:
    _KIND_LISTS.setdefault(_k, {})[("status", "conditions")] = "type"


def _kind_name(kind: str) -> str:
    """Accept ``Deployment``, ``apps/v1/Deployment`` or ``apps/v1, Kind=Deployment``."""
    kind = kind.rsplit("=", 1)[-1]
    return kind.rsplit("/", 1)[-1].strip()


def list_strategy(kind: str, path: tuple[str, ...]) -> str | None:
    """How a strategic merge patch treats the list at ``path`` (map keys from the object root).

    Returns the merge key (e.g. ``"name"``), ``""`` for a primitive list merged as a set
    (``metadata.finalizers``), or ``None`` when the list is replaced wholesale.
    """
    kind = _kind_name(kind)
    if path in _COMMON_LISTS:
        return _COMMON_LISTS[path]
    extra = _KIND_LISTS.get(kind, {})
    if path in extra:
        return extra[path]
    for prefix in _POD_SPEC_PREFIXES.get(kind, ()):
        n = len(prefix)
        if path[:n] == prefix and path[n:] in _POD_SPEC_LISTS:
            return _POD_SPEC_LISTS[path[n:]]
        # the pod template's own metadata (finalizers never matter there, ownerReferences neither)
    return None


# --------------------------------------------------------------------------------------------------
# Strategic merge patch: the merge

_SET_ORDER = "$setElementOrder/"
_DELETE_PRIMITIVE = "$deleteFromPrimitiveList/"


def strategic_merge_patch(target: dict, patch: dict, kind: str) -> dict:
    """Kubernetes strategic merge patch for built-in ``kind`` s.

    Maps merge recursively and ``null`` deletes; lists with a known merge key (see
    :func:`list_strategy`) merge element-wise by that key, primitive "set" lists (finalizers) are
    unioned, every other list is replaced. Directives: ``$patch: replace|delete|merge`` on maps and
    list elements (``{"$patch": "replace"}`` as a list element replaces the whole list),
    ``$retainKeys``, ``$setElementOrder/<list>`` (the result follows that order; server-only
    elements keep their relative place) and ``$deleteFromPrimitiveList/<list>``.
    """
    if not isinstance(patch, dict):
        raise PatchError(f"strategic merge patch must be a JSON object, got {go_json_kind(patch)}")
    if target is not None and not isinstance(target, dict):
        raise PatchError("strategic merge patch target must be an object")
    return _smp_map(target, patch, (), kind)


def _smp_map(original: dict | None, patch: dict, path: tuple[str, ...], kind: str, raw: bool = False) -> dict:
    """Merge one map. ``raw`` marks content apimachinery copies verbatim (new list elements, the
    body of ``$patch: replace``): there directives are merely stripped, as the typed decode on a
    real server would; elsewhere a directive-carrying map for a key the object lacks is dropped,
    exactly as ``strategicpatch`` does."""
    patch = dict(patch)
    directive = patch.pop("$patch", None)
    if directive == "delete":
        return {}  # apimachinery: "$patch: delete" on a map yields an empty map
    if directive == "replace":
        return _smp_map(None, patch, path, kind, raw=True)
    if directive not in (None, "merge"):
        raise PatchError(
            f"unknown patch type: {directive} in map: {_go_map(dict(patch, **{'$patch': directive}))}"
        )

    retain = patch.pop("$retainKeys", None)
    orders: dict[str, list[Any]] = {}
    deletions: dict[str, list[Any]] = {}
    for key in [k for k in patch if isinstance(k, str) and k.startswith("$")]:
        value = patch.pop(key)
        if key.startswith(_SET_ORDER):
            if not isinstance(value, list):
                raise PatchError(f"invalid {key}: must be a list, got {go_json_kind(value)}")
            orders[key[len(_SET_ORDER) :]] = value
        elif key.startswith(_DELETE_PRIMITIVE):
            if not isinstance(value, list):
                raise PatchError(f"invalid {key}: must be a list, got {go_json_kind(value)}")
            deletions[key[len(_DELETE_PRIMITIVE) :]] = value
        # any other "$..." key is dropped, as decoding into the typed object drops it on a real server

    result: dict[str, Any] = json_copy(original) if isinstance(original, dict) else {}
    if retain is not None:
        if not isinstance(retain, list) or not all(isinstance(k, str) for k in retain):
            raise PatchError("invalid patch format of retainKeys")
        for key in list(result):
            if key not in retain:
                del result[key]
        for key in patch:
            if key not in retain and patch[key] is not None:
                raise PatchError("invalid patch format of retainKeys")

    for key in set(deletions) | set(orders):
        if key in patch:
            continue  # handled together with the list's own patch below
        current = result.get(key)
        if isinstance(current, list):
            strategy = list_strategy(kind, path + (key,))
            updated = _remove_primitives(current, deletions.get(key, []))
            if key in orders:
                updated = _normalize_order(updated, orders[key], current, strategy or "")
            result[key] = updated

    for key, value in patch.items():
        sub = path + (key,)
        if value is None:
            result.pop(key, None)
        elif isinstance(value, dict):
            current = result.get(key)
            if key not in result and not raw and "$patch" in value:
                continue
            result[key] = _smp_map(current if isinstance(current, dict) else None, value, sub, kind, raw)
        elif isinstance(value, list):
            current = result.get(key)
            result[key] = _smp_list(
                current if isinstance(current, list) else None,
                value,
                sub,
                kind,
                orders.get(key),
                deletions.get(key, []),
            )
        else:
            result[key] = value
    return result


def _smp_list(
    original: list | None,
    patch: list,
    path: tuple[str, ...],
    kind: str,
    order: list[Any] | None,
    deletions: list[Any],
) -> list:
    strategy = list_strategy(kind, path)
    base = _remove_primitives(json_copy(original or []), deletions)
    if strategy is None:
        return json_copy(patch)
    if strategy == "":
        result = list(base)
        for item in patch:
            if isinstance(item, (dict, list)):
                raise PatchError(
                    f"strategic merge patch: list {'.'.join(path)} holds primitives, "
                    f"got {go_json_kind(item)}"
                )
            if not any(_same(item, x) for x in result):
                result.append(item)
        return _normalize_order(result, order if order is not None else patch, base, "")

    key = strategy
    if any(isinstance(item, dict) and item.get("$patch") == "replace" for item in patch):
        replaced = []
        for item in patch:
            if isinstance(item, dict) and item.get("$patch") == "replace":
                continue
            replaced.append(
                _smp_map(None, item, path, kind, raw=True) if isinstance(item, dict) else json_copy(item)
            )
        return replaced
    result = base
    base_order = list(base)
    for item in patch:
        if not isinstance(item, dict):
            raise PatchError(
                f"strategic merge patch: list {'.'.join(path)} must hold objects with merge key "
                f"{key!r}, got {go_json_kind(item)}"
            )
        if key not in item:
            raise PatchError(f"map: {_go_map(item)} does not contain declared merge key: {key}")
        directive = item.get("$patch")
        matches = [i for i, x in enumerate(result) if isinstance(x, dict) and _same(x.get(key), item[key])]
        if directive == "delete":
            result = [x for i, x in enumerate(result) if i not in matches]
            continue
        if matches:
            result[matches[0]] = _smp_map(result[matches[0]], item, path, kind)
        else:
            result.append(_smp_map(None, item, path, kind, raw=True))
    return _normalize_order(result, order if order is not None else patch, base_order, key)


def _remove_primitives(items: list, deletions: list[Any]) -> list:
    if not deletions:
        return items
    return [x for x in items if not any(_same(x, d) for d in deletions)]


def _normalize_order(merged: list, order: list[Any], original: list, key: str) -> list:
    """Order a merged list the way apimachinery's ``normalizeElementOrder`` does.

    Items named by ``order`` (the ``$setElementOrder`` list, else the patch list itself) come in that
    order; server-only items keep their live order; the two are interleaved by their position in the
    live list (``mergeSortedSlice``), new items winning ties — e.g. a new container port lands
    before an untouched live one, exactly as ``kubectl patch`` shows.
    """

    def ident(x: Any) -> str:
        if key:
            return _canon(x.get(key)) if isinstance(x, dict) else _canon(None)
        return _canon(x)

    order_pos: dict[str, int] = {}
    for i, o in enumerate(order):
        if isinstance(o, dict) and key and o.get("$patch") == "delete":
            continue
        order_pos.setdefault(ident(o), i)
    live_pos: dict[str, int] = {}
    for i, o in enumerate(original):
        live_pos.setdefault(ident(o), i)

    patch_items = sorted((x for x in merged if ident(x) in order_pos), key=lambda x: order_pos[ident(x)])
    server_only = sorted(
        (x for x in merged if ident(x) not in order_pos), key=lambda x: live_pos.get(ident(x), len(live_pos))
    )
    out: list[Any] = []
    i = j = 0
    while i < len(server_only) or j < len(patch_items):
        if i >= len(server_only):
            out.append(patch_items[j])
            j += 1
        elif j >= len(patch_items):
            out.append(server_only[i])
            i += 1
        else:
            li = live_pos.get(ident(server_only[i]))
            ri = live_pos.get(ident(patch_items[j]))
            if li is not None and ri is not None and li < ri:
                out.append(server_only[i])
                i += 1
            else:
                out.append(patch_items[j])
                j += 1
    return out


# --------------------------------------------------------------------------------------------------
# Server-side apply (simplified)


def apply_patch(current: dict | None, applied: dict, field_manager: str, schema: dict | None = None) -> dict:
    """Server-side apply's merge of an applied configuration into the live object.

    * ``current is None`` → the applied configuration is the new object.
    * otherwise the applied configuration is merged into ``current``: maps merge recursively,
      associative lists merge element-wise by key, set lists are unioned, other (atomic) lists are
      replaced; ``null`` in the applied configuration means "not specified" and leaves the current
      value alone. Which lists are associative: for built-in kinds the strategic-merge table
      (:func:`list_strategy`); for custom resources pass the version's ``schema`` and its
      ``x-kubernetes-list-type: map`` (+ ``x-kubernetes-list-map-keys``) / ``set`` markers decide
      (``metadata.finalizers``/``ownerReferences`` always merge).

    This is the merge only: field ownership (managedFields, conflicts, ``force``, removing what a
    manager stops applying) is :mod:`managedfields`, applied by the verb layer on the merged result.
    ``field_manager`` is required (as the apiserver requires ``fieldManager`` for apply).
    """
    if not isinstance(applied, dict):
        raise PatchError(f"apply patch must be an object, got {go_json_kind(applied)}")
    if not field_manager:
        raise PatchError(
            'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: is required for '
            "apply patch",
            code=422,
            reason="Invalid",
        )
    if current is None:
        return _drop_nulls(applied)
    kind = str(applied.get("kind") or current.get("kind") or "")
    return _apply_map(current, applied, (), _ApplyContext(kind, schema is not None), schema)


def apply_list_keys(kind: str, path: tuple[str, ...], node: dict | None, schema_driven: bool
                    ) -> tuple[str, ...] | None:
    """Key fields of the list at ``path`` for apply and field ownership: () for a set, None when atomic."""
    return _ApplyContext(kind, schema_driven).list_keys(path, node)


@dataclass(frozen=True)
class _ApplyContext:
    kind: str
    schema_driven: bool

    def list_keys(self, path: tuple[str, ...], node: dict | None) -> tuple[str, ...] | None:
        """Merge keys of the list at ``path``: () for a set, None for atomic."""
        if path in _COMMON_LISTS or not self.schema_driven:
            strategy = list_strategy(self.kind, path)
            return None if strategy is None else ((strategy,) if strategy else ())
        node = node or {}
        list_type = node.get("x-kubernetes-list-type")
        if list_type == "map":
            keys = node.get("x-kubernetes-list-map-keys") or []
            return tuple(k for k in keys if isinstance(k, str)) or None
        if list_type == "set":
            return ()
        return None


def sub_schema(node: dict[str, Any] | None, key: str) -> dict[str, Any] | None:
    """The schema of ``key`` under an object schema (a property, else ``additionalProperties``), or None."""
    if not isinstance(node, dict):
        return None
    props = node.get("properties") or {}
    if isinstance(props.get(key), dict):
        return props[key]
    additional = node.get("additionalProperties")
    return additional if isinstance(additional, dict) else None


def _apply_map(
    current: dict, applied: dict, path: tuple[str, ...], ctx: _ApplyContext, node: dict | None
) -> dict:
    result = json_copy(current)
    for key, value in applied.items():
        if value is None:
            continue
        sub = path + (key,)
        sub_node = sub_schema(node, key)
        existing = result.get(key)
        if isinstance(value, dict) and isinstance(existing, dict):
            result[key] = _apply_map(existing, value, sub, ctx, sub_node)
        elif isinstance(value, list) and isinstance(existing, list):
            result[key] = _apply_list(existing, value, sub, ctx, sub_node)
        else:
            result[key] = _drop_nulls(value)
    return result


def _apply_list(
    current: list, applied: list, path: tuple[str, ...], ctx: _ApplyContext, node: dict | None
) -> list:
    keys = ctx.list_keys(path, node)
    if keys is None:
        return _drop_nulls(applied)
    result = json_copy(current)
    if not keys:
        for item in applied:
            if not any(_same(item, x) for x in result):
                result.append(json_copy(item))
        return result
    items_node = node.get("items") if isinstance(node, dict) else None
    for item in applied:
        if not isinstance(item, dict) or not all(k in item for k in keys):
            missing = [k for k in keys if not isinstance(item, dict) or k not in item]
            raise PatchError(
                f".{'.'.join(path)}: element {_canon(item)} is missing the associative key "
                + ", ".join(repr(k) for k in missing)
            )
        idx = next(
            (
                i
                for i, x in enumerate(result)
                if isinstance(x, dict) and all(_same(x.get(k), item[k]) for k in keys)
            ),
            None,
        )
        if idx is None:
            result.append(_drop_nulls(item))
        else:
            result[idx] = _apply_map(result[idx], item, path, ctx, items_node)
    return result


# --------------------------------------------------------------------------------------------------
# helpers


def _drop_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _drop_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_drop_nulls(v) for v in value]
    return value


def _canon(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    return a == b


def _go_map(value: dict) -> str:
    inner = " ".join(
        f"{k}:{_canon(v) if isinstance(v, (dict, list)) else v}" for k, v in sorted(value.items())
    )
    return f"map[{inner}]"
