"""Rollout bookkeeping of the workload controllers, without pods: ReplicaSets and ControllerRevisions.

* Deployment → ReplicaSets as kube-controller-manager's deployment controller keeps them: one ReplicaSet per
  pod template, named ``<deployment>-<pod-template-hash>``, owned by the Deployment, its selector and
  template labels extended with ``pod-template-hash``, annotated with ``deployment.kubernetes.io/revision``
  (also set on the Deployment); the current ReplicaSet gets all replicas, older ones are scaled to 0 and
  trimmed to ``revisionHistoryLimit``. Going back to an older template (``kubectl rollout undo``,
  kubernetes.core's ``k8s_rollback``) re-uses that ReplicaSet with the next revision and records the old
  number in ``deployment.kubernetes.io/revision-history``. A paused Deployment only scales.
* StatefulSet / DaemonSet → ControllerRevisions named ``<owner>-<hash>`` holding the template as a
  strategic-merge patch (``$patch: replace``), numbered by ``revision``; a DaemonSet's copy its annotations,
  ``deprecated.daemonset.template.generation`` (the template generation k8s_rollback compares) among them.

The hashes are FNV-32a over the canonical JSON of the template, encoded like ``rand.SafeEncodeString``: the
same shape as the real ones, not the same values (those hash Go structs).
"""

from __future__ import annotations

import copy
import json
from typing import Any

from ansible_operator_sandbox.api import Api
from ansible_operator_sandbox.recorder import Recorder
from ansible_operator_sandbox.resources import ResourceType

REVISION = "deployment.kubernetes.io/revision"
REVISION_HISTORY = "deployment.kubernetes.io/revision-history"
DESIRED_REPLICAS = "deployment.kubernetes.io/desired-replicas"
MAX_REPLICAS = "deployment.kubernetes.io/max-replicas"
HASH_LABEL = "pod-template-hash"
CR_HASH_LABEL = "controller-revision-hash"
DS_TEMPLATE_GENERATION = "deprecated.daemonset.template.generation"
_ALPHANUMS = "bcdfghjklmnpqrstvwxz2456789"


def template_hash(value: Any, collision_count: int = 0) -> str:
    """FNV-32a of the canonical JSON (plus the collision count), SafeEncodeString'd like the controllers
    do."""
    data = json.dumps(value, sort_keys=True, separators=(",", ":")).encode()
    if collision_count:
        data += str(collision_count).encode()
    h = 0x811C9DC5
    for b in data:
        h = ((h ^ b) * 0x01000193) & 0xFFFFFFFF
    return "".join(_ALPHANUMS[ord(ch) % len(_ALPHANUMS)] for ch in str(h))


def _owner_ref(owner: dict[str, Any], api_version: str, kind: str) -> dict[str, Any]:
    return {"apiVersion": api_version, "kind": kind, "name": owner["metadata"]["name"],
            "uid": owner["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}


def _owned(api: Api, group_resource: str, owner: dict[str, Any]) -> list[dict[str, Any]]:
    uid = owner["metadata"].get("uid")
    ns = owner["metadata"].get("namespace")
    return [copy.deepcopy(o) for _, o in api.store.items(group_resource, ns)
            if any(r.get("uid") == uid and r.get("controller") for r in
                   (o.get("metadata") or {}).get("ownerReferences") or [])
            and not (o.get("metadata") or {}).get("deletionTimestamp")]


def _revision(obj: dict[str, Any], key: str = REVISION) -> int:
    try:
        return int(((obj.get("metadata") or {}).get("annotations") or {}).get(key, "0"))
    except ValueError:
        return 0


def _without_nulls(value: Any) -> Any:
    """Go's view of JSON: a null field is an unset one (``creationTimestamp: null`` in templates kubectl
    sends)."""
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value


def _without_hash(template: dict[str, Any]) -> dict[str, Any]:
    """A pod template as EqualIgnoreHash compares it: no pod-template-hash label, nulls as unset."""
    t = _without_nulls(copy.deepcopy(template))
    labels = (t.get("metadata") or {}).get("labels")
    if isinstance(labels, dict):
        labels.pop(HASH_LABEL, None)
    return t


# ---- Deployments ---------------------------------------------------------------------------------
class DeploymentRollout:
    """What the deployment controller does to ReplicaSets for one Deployment (no pods)."""

    def __init__(self, api: Api, recorder: Recorder | None = None) -> None:
        self.api = api
        self.recorder = recorder
        rs = api.registry.get("apps", "v1", "replicasets")
        assert rs is not None
        self.rs_type: ResourceType = rs

    def replica_sets(self, deploy: dict[str, Any]) -> list[dict[str, Any]]:
        """The ReplicaSets the Deployment controls."""
        return _owned(self.api, "apps/replicasets", deploy)

    def sync(self, dtype: ResourceType, deploy: dict[str, Any], scale_down_old: bool = True
             ) -> tuple[dict[str, Any], dict[str, Any] | None]:
        """Bring the Deployment's ReplicaSets in line; returns the (possibly updated) Deployment and the new
        ReplicaSet (None while a paused Deployment's template has no ReplicaSet yet). ``scale_down_old=False``
        while the new template's pods cannot be created: the old ReplicaSets keep serving, as in a stuck
        rolling update."""
        spec = deploy.get("spec") or {}
        template = spec.get("template") or {}
        replicas = int(spec.get("replicas", 1))
        owned = _owned(self.api, "apps/replicasets", deploy)
        new = next((rs for rs in owned if _without_hash((rs.get("spec") or {}).get("template") or {})
                    == _without_hash(template)), None)
        old = [rs for rs in owned if rs is not new]
        max_old = max((_revision(rs) for rs in old), default=0)
        paused = bool(spec.get("paused"))
        current: dict[str, Any] | None = new  # the ReplicaSet whose revision the Deployment reports
        if new is None and not paused:
            new = self._create(deploy, template, replicas, max_old + 1)
            self._scaled(deploy, new, 0)
        elif new is not None and not paused and _revision(new) <= max_old:
            # back to an older template: that ReplicaSet becomes current with the next revision
            new = self._annotate(new, replicas, max_old + 1)
        if new is not None and not paused:
            if int((new.get("spec") or {}).get("replicas", 0)) != replicas or (
                (new.get("metadata") or {}).get("annotations") or {}
            ).get(DESIRED_REPLICAS) != str(replicas):
                before = int((new.get("spec") or {}).get("replicas", 0))
                new = self._annotate(new, replicas, _revision(new))
                self._scaled(deploy, new, before)
            if scale_down_old:
                for rs in old:
                    if int((rs.get("spec") or {}).get("replicas", 0)) != 0:
                        self._scale(rs, 0)
                        self._scaled(deploy, {**rs, "spec": {**rs["spec"], "replicas": 0}},
                                     int(rs["spec"]["replicas"]))
            self._trim(old, int(spec.get("revisionHistoryLimit", 10)))
        elif paused:
            # a paused Deployment still scales: its active (or newest) ReplicaSet (FindActiveOrLatest)
            active = [rs for rs in owned if int((rs.get("spec") or {}).get("replicas", 0))]
            target = new or (active[0] if len(active) == 1 else max(owned, key=_revision, default=None))
            if target is not None and int((target.get("spec") or {}).get("replicas", 0)) != replicas:
                target = self._annotate(target, replicas, _revision(target))
            if new is not None:
                new = target
            current = target
        if not paused:
            current = new
        if current is not None:
            deploy = self._set_deployment_revision(dtype, deploy, _revision(current))
        return deploy, new

    def _scaled(self, deploy: dict[str, Any], rs: dict[str, Any], before: int) -> None:
        if self.recorder is not None:
            after = int((rs.get("spec") or {}).get("replicas", 0))
            self.recorder.scaled(deploy, rs["metadata"]["name"], before, after)

    def _create(self, deploy: dict[str, Any], template: dict[str, Any], replicas: int,
                revision: int) -> dict[str, Any]:
        meta = deploy["metadata"]
        spec = deploy.get("spec") or {}
        collisions = int((deploy.get("status") or {}).get("collisionCount") or 0)
        h = template_hash(_without_hash(template), collisions)
        rs_template = copy.deepcopy(template)
        rs_template.setdefault("metadata", {}).setdefault("labels", {})[HASH_LABEL] = h
        selector = copy.deepcopy(spec.get("selector") or {})
        selector.setdefault("matchLabels", {})[HASH_LABEL] = h
        annotations = {
            k: v
            for k, v in (meta.get("annotations") or {}).items()
            if k not in (REVISION, REVISION_HISTORY, "kubectl.kubernetes.io/last-applied-configuration")
        }
        annotations.update({REVISION: str(revision), DESIRED_REPLICAS: str(replicas),
                            MAX_REPLICAS: str(replicas + _max_surge(spec, replicas))})
        body = {"apiVersion": "apps/v1", "kind": "ReplicaSet",
                "metadata": {"name": f"{meta['name']}-{h}", "namespace": meta["namespace"],
                             "labels": dict(rs_template["metadata"]["labels"]), "annotations": annotations,
                             "ownerReferences": [_owner_ref(deploy, "apps/v1", "Deployment")]},
                "spec": {"replicas": replicas, "minReadySeconds": int(spec.get("minReadySeconds") or 0),
                         "selector": selector, "template": rs_template}}
        return self.api.create(self.rs_type, meta["namespace"], body)

    def _annotate(self, rs: dict[str, Any], replicas: int, revision: int) -> dict[str, Any]:
        body = copy.deepcopy(rs)
        annotations = body["metadata"].setdefault("annotations", {})
        previous = _revision(rs)
        if previous and previous != revision:
            history = [h for h in annotations.get(REVISION_HISTORY, "").split(",") if h]
            annotations[REVISION_HISTORY] = ",".join(history + [str(previous)])
        annotations[REVISION] = str(revision)
        annotations[DESIRED_REPLICAS] = str(replicas)
        body["spec"]["replicas"] = replicas
        meta = body["metadata"]
        return self.api.update(self.rs_type, meta["namespace"], meta["name"], body)

    def _scale(self, rs: dict[str, Any], replicas: int) -> None:
        body = copy.deepcopy(rs)
        body["spec"]["replicas"] = replicas
        meta = body["metadata"]
        self.api.update(self.rs_type, meta["namespace"], meta["name"], body)

    def _trim(self, old: list[dict[str, Any]], limit: int) -> None:
        idle = sorted((rs for rs in old if not int((rs.get("spec") or {}).get("replicas", 0))), key=_revision)
        for rs in idle[:max(len(idle) - limit, 0)]:
            meta = rs["metadata"]
            self.api.delete(
                self.rs_type, meta["namespace"], meta["name"], {"propagationPolicy": "Background"}
            )

    def _set_deployment_revision(self, dtype: ResourceType, deploy: dict[str, Any], revision: int
                                 ) -> dict[str, Any]:
        annotations = (deploy["metadata"].get("annotations") or {})
        if annotations.get(REVISION) == str(revision):
            return deploy
        body = copy.deepcopy(deploy)
        body["metadata"].setdefault("annotations", {})[REVISION] = str(revision)
        body["metadata"].pop("resourceVersion", None)
        meta = body["metadata"]
        return self.api.update(dtype, meta["namespace"], meta["name"], body)


def _max_surge(spec: dict[str, Any], replicas: int) -> int:
    strategy = spec.get("strategy") or {}
    if strategy.get("type") == "Recreate":
        return 0
    surge = (strategy.get("rollingUpdate") or {}).get("maxSurge", "25%")
    if isinstance(surge, str) and surge.endswith("%"):
        try:
            return -(
                -replicas * int(surge[:-1]) // 100
            )  # rounded up, as intstr.GetScaledValueFromIntOrPercent
        except ValueError:
            return 0
    return int(surge) if isinstance(surge, int) else 0


# ---- ControllerRevisions -------------------------------------------------------------------------
class RevisionHistory:
    """ControllerRevisions of StatefulSets and DaemonSets (history.go in the real controllers)."""

    def __init__(self, api: Api) -> None:
        self.api = api
        cr = api.registry.get("apps", "v1", "controllerrevisions")
        assert cr is not None
        self.cr_type: ResourceType = cr

    def sync(self, owner: dict[str, Any], kind: str) -> dict[str, Any]:
        """The ControllerRevision of the owner's current template (created or re-numbered as needed)."""
        meta = owner["metadata"]
        spec = owner.get("spec") or {}
        data = {
            "spec": {"template": dict(copy.deepcopy(spec.get("template") or {}), **{"$patch": "replace"})}
        }
        revisions = _owned(self.api, "apps/controllerrevisions", owner)
        current = next((r for r in revisions if _without_nulls(r.get("data")) == _without_nulls(data)), None)
        top = max((int(r.get("revision") or 0) for r in revisions), default=0)
        if current is None:
            collisions = int((owner.get("status") or {}).get("collisionCount") or 0)
            h = template_hash(data, collisions)
            labels = dict(((spec.get("template") or {}).get("metadata") or {}).get("labels") or {})
            labels[CR_HASH_LABEL] = h
            if kind == "StatefulSet":
                labels = dict((spec.get("selector") or {}).get("matchLabels") or {}, **{CR_HASH_LABEL: h})
            body: dict[str, Any] = {
                "apiVersion": "apps/v1", "kind": "ControllerRevision",
                "metadata": {"name": f"{meta['name']}-{h}", "namespace": meta["namespace"], "labels": labels,
                             "ownerReferences": [_owner_ref(owner, "apps/v1", kind)]},
                "data": data, "revision": top + 1}
            if kind == "DaemonSet":  # the DaemonSet's annotations, its template generation among them
                body["metadata"]["annotations"] = dict(meta.get("annotations") or {})
            current = self.api.create(self.cr_type, meta["namespace"], body)
            revisions.append(current)
        elif int(current.get("revision") or 0) < top:
            current = copy.deepcopy(current)
            current["revision"] = top + 1
            current = self.api.update(self.cr_type, meta["namespace"], current["metadata"]["name"], current)
        self._trim([r for r in revisions if r["metadata"]["name"] != current["metadata"]["name"]],
                   int(spec.get("revisionHistoryLimit", 10)))
        return current

    def _trim(self, old: list[dict[str, Any]], limit: int) -> None:
        old = sorted(old, key=lambda r: int(r.get("revision") or 0))
        for r in old[:max(len(old) - limit, 0)]:
            meta = r["metadata"]
            self.api.delete(
                self.cr_type, meta["namespace"], meta["name"], {"propagationPolicy": "Background"}
            )
