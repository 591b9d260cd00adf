"""Owner injection rules: where a run's custom resource (CR) goes on an object the run creates.

The owner is added as

* an ``ownerReference`` (apiVersion, kind, name, uid) when the owner is cluster-scoped, or when both are
  namespaced in the same namespace -- Kubernetes garbage-collects these with the CR;
* otherwise (cluster-scoped dependent of a namespaced CR, or another namespace) the two annotations
  ``operator-sdk/primary-resource: <ns>/<name>`` and ``operator-sdk/primary-resource-type: <Kind>.<group>``,
  which :mod:`ansible_operator.dependents` uses to find the owner again.

Owners are added on **create only**, as Operator SDK's proxy does: ``injectOwnerReferenceHandler``
(``internal/ansible/proxy/inject_owner.go`` in operator-framework/ansible-operator-plugins) rewrites the
body of ``POST`` requests and nothing else, deciding the form with ``k8sutil.SupportsOwnerReference``
(:func:`injection_mode`). An object that already exists is never given a new owner. Objects a ``PUT`` or a
server-side apply creates get the owner right after, as a JSON patch (:func:`owner_json_patch`), unless
``ANSIBLE_OPERATOR_OWNER_ON_APPLY_CREATE=false`` (:func:`own_put_apply_creates_from_env`); the
:mod:`ansible_operator.owners` package docstring tells the whole rule.

The owner reference carries neither ``controller`` nor ``blockOwnerDeletion`` (SDK sets neither; setting
``controller: true`` would make creating an object that already has a controller reference fail, and
``blockOwnerDeletion`` needs extra RBAC on the CR's ``finalizers`` subresource on clusters that enforce it).

:func:`owned_by_kind_of` is SDK's ``recoverDependentWatches`` test: a read of an object that already
carries an owner of the run's kind restarts the dependent watch for its kind.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any, Literal, Mapping

from ansible_operator.kubetypes import OwnerReference

log = logging.getLogger("ansible_operator.owners")

__all__ = [
    "ANNOTATION_PRIMARY_RESOURCE",
    "ANNOTATION_PRIMARY_RESOURCE_TYPE",
    "DependentKind",
    "OWN_PUT_APPLY_CREATES_ENV",
    "Owner",
    "inject_owner",
    "injection_mode",
    "own_put_apply_creates_from_env",
    "owned_by_kind_of",
    "owner_json_patch",
    "owner_ref",
]

OWN_PUT_APPLY_CREATES_ENV = "ANSIBLE_OPERATOR_OWNER_ON_APPLY_CREATE"
"""``false`` / ``0`` / ``no``: objects created by ``PUT`` or server-side apply get no owner (Operator SDK)."""

ANNOTATION_PRIMARY_RESOURCE = "operator-sdk/primary-resource"
ANNOTATION_PRIMARY_RESOURCE_TYPE = "operator-sdk/primary-resource-type"


@dataclass(frozen=True)
class DependentKind:
    """A kind of object runs have created (what :class:`~ansible_operator.dependents.DependentWatcher`
    watches)."""

    group: str
    version: str
    kind: str
    plural: str
    namespaced: bool

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


@dataclass(frozen=True)
class Owner:
    """The CR a run reconciles, as far as owner injection needs it."""

    api_version: str
    kind: str
    name: str
    namespace: str | None
    uid: str

    @property
    def group(self) -> str:
        return self.api_version.rpartition("/")[0]

    @property
    def namespaced(self) -> bool:
        return bool(self.namespace)

    @classmethod
    def from_object(cls, obj: Mapping[str, Any]) -> "Owner":
        """From a CR object; ``ValueError`` naming the missing field (uid is needed for ownerReferences)."""
        meta = obj.get("metadata") or {}
        missing = [
            f
            for f, v in (
                ("apiVersion", obj.get("apiVersion")),
                ("kind", obj.get("kind")),
                ("metadata.name", meta.get("name")),
                ("metadata.uid", meta.get("uid")),
            )
            if not v
        ]
        if missing:
            raise ValueError(f"owner object lacks {', '.join(missing)}: cannot inject owner references")
        return cls(str(obj["apiVersion"]), str(obj["kind"]), str(meta["name"]),
                   str(meta["namespace"]) if meta.get("namespace") else None, str(meta["uid"]))


def owner_ref(owner: Owner) -> OwnerReference:
    """The ownerReference Operator SDK injects (no ``controller``/``blockOwnerDeletion``, see module doc)."""
    return {"apiVersion": owner.api_version, "kind": owner.kind, "name": owner.name, "uid": owner.uid}


def injection_mode(owner: Owner, dependent_namespaced: bool,
                   dependent_namespace: str | None) -> Literal["ownerReference", "annotations"]:
    """``SupportsOwnerReference``: where Kubernetes allows an ownerReference from dependent to owner.

    Cluster-scoped owner -> reference; cluster-scoped dependent of a namespaced owner -> annotations;
    namespaced both -> reference only within the same namespace.
    """
    if not owner.namespaced:
        return "ownerReference"
    if not dependent_namespaced:
        return "annotations"
    return "ownerReference" if dependent_namespace == owner.namespace else "annotations"


def inject_owner(obj: dict[str, Any], owner: Owner, mode: Literal["ownerReference", "annotations"]) -> bool:
    """Add the owner to ``obj`` in place; returns whether ``obj`` changed. Never duplicates a reference."""
    meta = obj.get("metadata")
    if meta is None:
        meta = obj["metadata"] = {}
    if not isinstance(meta, dict):
        raise ValueError("metadata is not an object")
    if mode == "ownerReference":
        refs = meta.get("ownerReferences")
        if refs is None:
            refs = meta["ownerReferences"] = []
        if not isinstance(refs, list):
            raise ValueError("metadata.ownerReferences is not a list")
        for ref in refs:
            if isinstance(ref, dict) and (ref.get("uid") == owner.uid or (
                    not ref.get("uid") and ref.get("kind") == owner.kind and ref.get("name") == owner.name
                    and str(ref.get("apiVersion", "")).rpartition("/")[0] == owner.group)):
                return False
        refs.append(owner_ref(owner))
        return True
    annotations = meta.get("annotations")
    if annotations is None:
        annotations = meta["annotations"] = {}
    if not isinstance(annotations, dict):
        raise ValueError("metadata.annotations is not an object")
    wanted = {
        ANNOTATION_PRIMARY_RESOURCE: f"{owner.namespace or ''}/{owner.name}",
        ANNOTATION_PRIMARY_RESOURCE_TYPE: f"{owner.kind}.{owner.group}" if owner.group else owner.kind,
    }
    if all(annotations.get(k) == v for k, v in wanted.items()):
        return False
    annotations.update(wanted)
    return True

def owner_json_patch(obj: Mapping[str, Any], owner: Owner,
                     mode: Literal["ownerReference", "annotations"]) -> list[dict[str, Any]] | None:
    """RFC 6902 operations adding ``owner`` to the just-created ``obj`` (``None`` if it already has it).

    The first operation tests ``metadata.uid``: if the object was deleted and re-created by someone else
    in between, the API server refuses the patch instead of giving a stranger's object an owner.
    """
    meta = obj.get("metadata")
    if not isinstance(meta, dict) or not meta.get("uid"):
        raise ValueError("created object has no metadata.uid")
    probe = json.loads(json.dumps(dict(obj)))
    if not inject_owner(probe, owner, mode):
        return None
    ops: list[dict[str, Any]] = [{"op": "test", "path": "/metadata/uid", "value": meta["uid"]}]
    if mode == "ownerReference":
        if isinstance(meta.get("ownerReferences"), list) and meta["ownerReferences"]:
            ops.append({"op": "add", "path": "/metadata/ownerReferences/-", "value": owner_ref(owner)})
        else:
            ops.append({"op": "add", "path": "/metadata/ownerReferences", "value": [owner_ref(owner)]})
        return ops
    wanted = {k: v for k, v in probe["metadata"]["annotations"].items()
              if k in (ANNOTATION_PRIMARY_RESOURCE, ANNOTATION_PRIMARY_RESOURCE_TYPE)}
    if isinstance(meta.get("annotations"), dict) and meta["annotations"]:
        for key, value in wanted.items():
            ops.append(
                {
                    "op": "add",
                    "path": "/metadata/annotations/" + key.replace("~", "~0").replace("/", "~1"),
                    "value": value,
                }
            )
    else:
        ops.append({"op": "add", "path": "/metadata/annotations", "value": wanted})
    return ops


def own_put_apply_creates_from_env(env: Mapping[str, str]) -> bool:
    """``$ANSIBLE_OPERATOR_OWNER_ON_APPLY_CREATE`` (default true). A value that is not a boolean is reported
    and read as false -- Operator SDK's behaviour, the one that cannot get anything garbage-collected."""
    raw = env.get(OWN_PUT_APPLY_CREATES_ENV, "true").strip().lower()
    if raw in ("true", "1", "yes", "on"):
        return True
    if raw not in ("false", "0", "no", "off"):
        log.error("%s=%r is not true or false: objects a PUT or server-side apply creates get no owner "
                  "(Operator SDK's behaviour)", OWN_PUT_APPLY_CREATES_ENV, raw)
    return False


def owned_by_kind_of(obj: Mapping[str, Any], owner: Owner) -> bool:
    """Whether ``obj`` already belongs to some object of ``owner``'s kind (SDK's ``recoverDependentWatches``):
    an ownerReference with the owner's apiVersion and kind, or the primary-resource-type annotation."""
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        return False
    for ref in meta.get("ownerReferences") or []:
        if (
            isinstance(ref, dict)
            and ref.get("apiVersion") == owner.api_version
            and ref.get("kind") == owner.kind
        ):
            return True
    annotations = meta.get("annotations")
    wanted = f"{owner.kind}.{owner.group}" if owner.group else owner.kind
    return isinstance(annotations, dict) and annotations.get(ANNOTATION_PRIMARY_RESOURCE_TYPE) == wanted

