"""Field ownership (``metadata.managedFields``) and the server-side-apply rules built on it.

Modelled on ``k8s.io/apimachinery/pkg/util/managedfields`` and sigs.k8s.io/structured-merge-diff:

* A field set is a set of paths; a path element is ``f:<field>``, ``k:<json of the key fields>`` (an item of
  an
  associative list), or ``v:<json value>`` (an item of a set list). Leaves are scalars, atomic lists and empty
  maps; a list item is itself a member (``"."`` in FieldsV1) besides its fields.
* Every write records an entry per (manager, operation, apiVersion, subresource): ``Update`` entries own what
  that manager changed (taken away from everyone else), ``Apply`` entries own exactly what the manager
  applied.
* An apply that changes the value of a field another manager owns is a 409 Conflict (the real message and
  ``FieldManagerConflict`` causes) unless ``force=true``, which moves the ownership. Fields a manager applied
  before and no longer applies are removed when nobody else owns them. An apply by a new manager is recorded
  even when it changes no value.
* Main-resource writes of a kind with a status subresource track everything but ``status``; ``/status``
  writes track only ``status``. Of ``metadata`` only labels, annotations, finalizers and ownerReferences are
  tracked, as kube-apiserver does.

Which lists are associative or sets comes from :func:`patching.apply_list_keys` (strategic-merge keys for
built-ins, ``x-kubernetes-list-type`` for custom resources).
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from typing import Any, Iterable

from ansible_operator_sandbox import patching
from ansible_operator_sandbox.errors import ApiError
from ansible_operator_sandbox.timeutil import now_rfc3339

Path = tuple[str, ...]
DEFAULT_MANAGER = "kube-controller-manager"  # what the sandbox's own controllers write as
_TRACKED_META = ("labels", "annotations", "finalizers", "ownerReferences")


@dataclass(frozen=True)
class Shape:
    """What the walk needs to know about an object's lists: its kind and (custom resources) its schema."""

    kind: str
    schema: dict[str, Any] | None
    has_status: bool


def manager_name(field_manager: str | None, user_agent: str) -> str:
    """``fieldManager``, else the User-Agent up to its first ``/`` (as kube-apiserver), else the
    controllers'."""
    if field_manager:
        return field_manager
    prefix = user_agent.split("/", 1)[0].strip()
    return prefix[:128] if prefix else DEFAULT_MANAGER


# ---- field sets ----------------------------------------------------------------------------------
def _canon(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _tracked(obj: dict[str, Any], shape: Shape, subresource: str | None) -> dict[str, Any]:
    """The part of ``obj`` whose fields are owned for a write to ``subresource``."""
    if subresource == "status":
        return {"status": obj["status"]} if isinstance(obj.get("status"), dict) else {}
    out = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind", "metadata")}
    if shape.has_status:
        out.pop("status", None)
    meta = found if isinstance(found := obj.get("metadata"), dict) else {}
    tracked_meta = {k: meta[k] for k in _TRACKED_META if meta.get(k) not in (None, {}, [])}
    if tracked_meta:
        out["metadata"] = tracked_meta
    return out


def fields_of(obj: dict[str, Any], shape: Shape, subresource: str | None = None) -> set[Path]:
    """The field set of ``obj`` (the tracked part of it)."""
    out: set[Path] = set()
    _walk(_tracked(obj, shape, subresource), (), (), shape, shape.schema, out, root=True)
    return out


def _walk(value: Any, path: Path, names: tuple[str, ...], shape: Shape, node: dict[str, Any] | None,
          out: set[Path], root: bool = False) -> None:
    if isinstance(value, dict):
        if not value and not root:
            out.add(path)
            return
        for k, v in value.items():
            if v is None:
                continue
            _walk(v, path + (f"f:{k}",), names + (k,), shape, patching.sub_schema(node, k), out)
        return
    if isinstance(value, list):
        keys = patching.apply_list_keys(shape.kind, names, node, shape.schema is not None)
        if keys is None or not value:
            out.add(path)
            return
        items_node = node.get("items") if isinstance(node, dict) else None
        for item in value:
            if not keys:
                out.add(path + (f"v:{_canon(item)}",))
            elif isinstance(item, dict) and all(k in item for k in keys):
                item_path = path + (f"k:{_canon({k: item[k] for k in sorted(keys)})}",)
                out.add(item_path)
                _walk(item, item_path, names, shape, items_node, out, root=True)
            else:
                out.add(path)  # an item without its keys: the list can only be owned whole
        return
    out.add(path)


_MISSING = object()


def value_at(obj: Any, path: Path) -> Any:
    """The value at ``path`` in ``obj`` (``_MISSING`` when absent)."""
    cur = obj
    for el in path:
        kind, _, arg = el.partition(":")
        if kind == "f":
            if not isinstance(cur, dict) or arg not in cur:
                return _MISSING
            cur = cur[arg]
        elif kind in ("k", "v"):
            if not isinstance(cur, list):
                return _MISSING
            want = json.loads(arg)
            if kind == "k":
                cur = next(
                    (i for i in cur if isinstance(i, dict) and all(i.get(k) == v for k, v in want.items())),
                    _MISSING,
                )
            else:
                cur = next((i for i in cur if i == want), _MISSING)
            if cur is _MISSING:
                return _MISSING
        else:
            return _MISSING
    return cur


def remove_at(obj: Any, path: Path) -> None:
    """Delete the field or list item at ``path`` (no-op when absent)."""
    if not path:
        return
    parent = value_at(obj, path[:-1])
    kind, _, arg = path[-1].partition(":")
    if kind == "f" and isinstance(parent, dict):
        parent.pop(arg, None)
    elif kind in ("k", "v") and isinstance(parent, list):
        want = json.loads(arg)
        for i, item in enumerate(parent):
            if (
                kind == "k" and isinstance(item, dict) and all(item.get(k) == v for k, v in want.items())
            ) or (kind == "v" and item == want):
                del parent[i]
                break


def path_string(path: Path) -> str:
    """fieldpath.Path.String(): ``.spec.containers[name="c"].image``, ``[="x"]`` for set items."""
    out = ""
    for el in path:
        kind, _, arg = el.partition(":")
        if kind == "f":
            out += f".{arg}"
        elif kind == "k":
            keys = json.loads(arg)
            out += "[" + ",".join(f"{k}={json.dumps(keys[k])}" for k in sorted(keys)) + "]"
        elif kind == "v":
            out += f"[={arg}]"
    return out


# ---- FieldsV1 ------------------------------------------------------------------------------------
def to_fields_v1(fields: Iterable[Path]) -> dict[str, Any]:
    tree: dict[str, Any] = {}
    members = set(fields)
    for path in sorted(members):
        node = tree
        for el in path:
            node = node.setdefault(el, {})
    # a member that also has children is marked with "."
    for path in members:
        node = tree
        for el in path:
            node = node[el]
        if node and "." not in node:
            node["."] = {}
    return _sorted_tree(tree)


def _sorted_tree(tree: dict[str, Any]) -> dict[str, Any]:
    return {k: _sorted_tree(tree[k]) for k in sorted(tree, key=lambda k: (k != ".", k))}


def from_fields_v1(tree: Any, prefix: Path = ()) -> set[Path]:
    out: set[Path] = set()
    if not isinstance(tree, dict):
        return out
    for k, v in tree.items():
        if k == ".":
            out.add(prefix)
            continue
        path = prefix + (k,)
        if not v:
            out.add(path)
        else:
            out |= from_fields_v1(v, path)
    return out


# ---- entries -------------------------------------------------------------------------------------
@dataclass
class Entry:
    manager: str
    operation: str  # "Apply" | "Update"
    api_version: str
    subresource: str
    time: str
    fields: set[Path]

    @property
    def ident(self) -> tuple[str, str, str, str]:
        return (self.manager, self.operation, self.api_version, self.subresource)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "manager": self.manager,
            "operation": self.operation,
            "apiVersion": self.api_version,
            "time": self.time,
            "fieldsType": "FieldsV1",
            "fieldsV1": to_fields_v1(self.fields),
        }
        if self.subresource:
            out["subresource"] = self.subresource
        return out


def decode(obj: dict[str, Any]) -> list[Entry]:
    out = []
    for e in (obj.get("metadata") or {}).get("managedFields") or []:
        if not isinstance(e, dict) or not isinstance(e.get("manager"), str):
            continue
        out.append(
            Entry(
                e["manager"],
                str(e.get("operation") or "Update"),
                str(e.get("apiVersion") or ""),
                str(e.get("subresource") or ""),
                str(e.get("time") or ""),
                from_fields_v1(e.get("fieldsV1")),
            )
        )
    return out


def encode(entries: list[Entry]) -> list[dict[str, Any]]:
    """Non-empty entries in kube-apiserver's order (Apply before Update, then time, manager, ...)."""
    kept = [e for e in entries if e.fields]
    kept.sort(key=lambda e: (e.operation, e.time, e.manager, e.api_version, e.subresource))
    return [e.to_json() for e in kept]


def _entry(entries: list[Entry], ident: tuple[str, str, str, str]) -> Entry:
    for e in entries:
        if e.ident == ident:
            return e
    e = Entry(*ident, time="", fields=set())
    entries.append(e)
    return e


def _restrict(entries: list[Entry], live: set[Path], subresource: str | None) -> None:
    """Drop ownership of fields the object no longer has (of the part this write could touch)."""
    for e in entries:
        if (e.subresource == "status") == (subresource == "status"):
            e.fields &= live


def record_update(old: dict[str, Any] | None, new: dict[str, Any], manager: str, api_version: str,
                  subresource: str | None, shape: Shape, sent: Any = None) -> list[dict[str, Any]]:
    """managedFields after a create/update/patch by ``manager``: it owns what it changed.

    ``sent`` are the managedFields the request itself carried: when non-empty (and not a subresource write)
    they replace the stored ones before this write's changes are recorded, as kube-apiserver lets clients
    rewrite ownership (kubectl's client-side-apply to server-side-apply migration does)."""
    entries = decode(old) if old is not None else []
    if sent and subresource is None and isinstance(sent, list):
        given = decode({"metadata": {"managedFields": sent}})
        if given:
            entries = given
    new_fields = fields_of(new, shape, subresource)
    if old is None:
        changed = new_fields
    else:
        old_fields = fields_of(old, shape, subresource)
        changed = {
            p
            for p in new_fields
            if p not in old_fields
            or value_at(_tracked(new, shape, subresource), p)
            != value_at(_tracked(old, shape, subresource), p)
        }
    _restrict(entries, new_fields, subresource)
    mine = (manager, "Update", api_version, subresource or "")
    for e in entries:
        if e.ident != mine:
            e.fields -= changed
    if changed:
        e = _entry(entries, mine)
        e.fields |= changed
        e.time = now_rfc3339()
    return encode(entries)


def apply(current: dict[str, Any], merged: dict[str, Any], applied: dict[str, Any], manager: str, force: bool,
          api_version: str, subresource: str | None, shape: Shape) -> dict[str, Any]:
    """Ownership rules of an apply on an existing object: returns ``merged`` with fields the manager dropped
    removed and ``metadata.managedFields`` set; raises 409 on conflicts unless ``force``."""
    entries = decode(current)
    applied_obj = dict(applied, metadata=applied.get("metadata") or {})
    applied_fields = fields_of(applied_obj, shape, subresource)
    tracked_applied = _tracked(applied_obj, shape, subresource)
    tracked_live = _tracked(current, shape, subresource)
    mine = (manager, "Apply", api_version, subresource or "")
    conflicts: list[tuple[Entry, Path]] = []
    for e in entries:
        if e.ident == mine or (e.subresource == "status") != (subresource == "status"):
            continue
        for p in sorted(e.fields & applied_fields):
            if p and p[-1].startswith(("k:", "v:")):
                continue  # list items are owned by presence: sharing one is no conflict
            if value_at(tracked_applied, p) != value_at(tracked_live, p):
                conflicts.append((e, p))
    if conflicts and not force:
        raise conflict_error(conflicts)
    for e, p in conflicts:
        e.fields.discard(p)
    result = copy.deepcopy(merged)
    me = _entry(entries, mine)
    others: set[Path] = set()
    for e in entries:
        if e is not me:
            others |= e.fields
    for p in sorted(me.fields - applied_fields - others, key=len, reverse=True):
        if not any(q[:len(p)] == p for q in applied_fields | others):  # nothing kept below it
            remove_at(result, p)
    changed_set = me.fields != applied_fields
    me.fields = set(applied_fields)
    if changed_set or not me.time:
        me.time = now_rfc3339()
    live = fields_of(result, shape, subresource)
    for e in entries:
        if e is not me and (e.subresource == "status") == (subresource == "status"):
            e.fields &= live
    result.setdefault("metadata", {})["managedFields"] = encode(entries)
    return result


def created_by_apply(
    applied: dict[str, Any], manager: str, api_version: str, shape: Shape
) -> list[dict[str, Any]]:
    """The managedFields of an object an apply created: the manager owns what it applied (not the
    defaults)."""
    e = Entry(manager, "Apply", api_version, "", now_rfc3339(), fields_of(applied, shape))
    return encode([e])


def _print_manager(e: Entry) -> str:
    s = json.dumps(e.manager)
    if e.subresource:
        s += f" with subresource {json.dumps(e.subresource)}"
    if e.operation == "Update":
        s += f" using {e.api_version}" + (f" at {e.time}" if e.time else "")
    return s


def conflict_error(conflicts: list[tuple[Entry, Path]]) -> ApiError:
    """409 as apimachinery's NewConflictError: one line for one conflict, grouped by manager for several."""
    causes = [{"reason": "FieldManagerConflict", "message": f"conflict with {_print_manager(e)}",
               "field": path_string(p)} for e, p in conflicts]
    if len(conflicts) == 1:
        e, p = conflicts[0]
        message = f"Apply failed with 1 conflict: conflict with {_print_manager(e)}: {path_string(p)}"
    else:
        by_manager: dict[str, list[str]] = {}
        for e, p in conflicts:
            by_manager.setdefault(_print_manager(e), []).append(path_string(p))
        lines = []
        for m in sorted(by_manager):
            lines.append(f"conflicts with {m}:")
            lines.extend(f"- {p}" for p in by_manager[m])
        message = f"Apply failed with {len(conflicts)} conflicts: " + "\n".join(lines)
    return ApiError(409, "Conflict", message, {"causes": causes})
