"""Pods of the workload controllers: ReplicaSets, ReplicationControllers, DaemonSets, StatefulSets and Jobs
create
and remove them as kube-controller-manager does, so clients that look for a workload's Pods find them.

Nothing runs: the Pod simulator then reports them Running (Jobs' pods Succeeded). Naming and labels follow
the real controllers: ``<replicaset>-<random>`` with the template's labels (``pod-template-hash`` included),
``<statefulset>-<ordinal>`` with ``statefulset.kubernetes.io/pod-name``, ``apps.kubernetes.io/pod-index`` and
``controller-revision-hash``, one ``<daemonset>-<random>`` on the one Node, ``<job>-<random>`` with the Job's
``job-name``/``controller-uid`` labels. Every Pod is owned by its controller (``controller: true``), so
deleting
the controller collects them. A StatefulSet or DaemonSet whose template changes gets its Pods replaced.
"""

from __future__ import annotations

import copy
from typing import Any

from ansible_operator_sandbox.api import Api
from ansible_operator_sandbox.recorder import Recorder
from ansible_operator_sandbox.resources import ResourceType

STS_POD_NAME = "statefulset.kubernetes.io/pod-name"
POD_INDEX = "apps.kubernetes.io/pod-index"
REVISION_HASH = "controller-revision-hash"


def _owner_ref(owner: dict[str, Any], api_version: str, kind: str) -> dict[str, Any]:
    return {"apiVersion": api_version, "kind": kind, "name": owner["metadata"]["name"],
            "uid": owner["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}


class PodControl:
    """Creates and deletes the Pods one controller object wants."""

    def __init__(self, api: Api, recorder: Recorder | None = None) -> None:
        self.api = api
        self.recorder = recorder
        pod = api.registry.get("", "v1", "pods")
        assert pod is not None
        self.pod_type: ResourceType = pod

    def owned(self, owner: dict[str, Any]) -> list[dict[str, Any]]:
        uid = owner["metadata"].get("uid")
        return [copy.deepcopy(p) for _, p in self.api.store.items("/pods", owner["metadata"].get("namespace"))
                if any(r.get("uid") == uid and r.get("controller")
                       for r in (p.get("metadata") or {}).get("ownerReferences") or [])
                and not (p.get("metadata") or {}).get("deletionTimestamp")]

    def _pod_body(self, owner: dict[str, Any], api_version: str, kind: str, template: dict[str, Any],
                  name: str | None = None, extra_labels: dict[str, str] | None = None) -> dict[str, Any]:
        tmeta = template.get("metadata") or {}
        meta: dict[str, Any] = {"labels": dict(tmeta.get("labels") or {}, **(extra_labels or {})),
                                "ownerReferences": [_owner_ref(owner, api_version, kind)]}
        if tmeta.get("annotations"):
            meta["annotations"] = dict(tmeta["annotations"])
        if name:
            meta["name"] = name
        else:
            meta["generateName"] = f"{owner['metadata']['name']}-"
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": meta,
            "spec": copy.deepcopy(template.get("spec") or {}),
        }

    def _create(self, owner: dict[str, Any], body: dict[str, Any]) -> None:
        pod = self.api.create(self.pod_type, owner["metadata"]["namespace"], body)
        if self.recorder is not None:
            self.recorder.pod_created(owner, pod)

    def _delete(self, pod: dict[str, Any], owner: dict[str, Any]) -> None:
        meta = pod["metadata"]
        self.api.delete(self.pod_type, meta["namespace"], meta["name"], {"propagationPolicy": "Background"})
        if self.recorder is not None:
            self.recorder.pod_deleted(owner, pod)

    # ---- per controller --------------------------------------------------------------------------
    def replicas(self, owner: dict[str, Any], api_version: str, kind: str, count: int) -> None:
        """ReplicaSet / ReplicationController: ``count`` interchangeable Pods from the template."""
        pods = sorted(self.owned(owner), key=lambda p: p["metadata"].get("creationTimestamp", ""))
        template = (owner.get("spec") or {}).get("template") or {}
        for _ in range(count - len(pods)):
            self._create(owner, self._pod_body(owner, api_version, kind, template))
        for pod in reversed(pods[count:] if count < len(pods) else []):
            self._delete(pod, owner)

    def stateful(self, owner: dict[str, Any], count: int, revision: str) -> None:
        """StatefulSet: ``<name>-0 .. <name>-(count-1)``; Pods of another revision are replaced."""
        name = owner["metadata"]["name"]
        template = (owner.get("spec") or {}).get("template") or {}
        wanted = {f"{name}-{i}": i for i in range(count)}
        for pod in self.owned(owner):
            pname = pod["metadata"]["name"]
            if pname not in wanted or (pod["metadata"].get("labels") or {}).get(REVISION_HASH) != revision:
                self._delete(pod, owner)
        existing = {p["metadata"]["name"] for p in self.owned(owner)}
        for pname, i in wanted.items():
            if pname in existing or self.api.store.peek(("/pods", owner["metadata"]["namespace"], pname)):
                continue
            body = self._pod_body(owner, "apps/v1", "StatefulSet", template, pname,
                                  {STS_POD_NAME: pname, POD_INDEX: str(i), REVISION_HASH: revision})
            spec = body["spec"]
            spec.setdefault("hostname", pname)
            if (owner.get("spec") or {}).get("serviceName"):
                spec.setdefault("subdomain", owner["spec"]["serviceName"])
            self._create(owner, body)

    def daemon(self, owner: dict[str, Any], node: str, revision: str) -> None:
        """DaemonSet: one Pod on the one Node; a Pod of another revision is replaced."""
        template = (owner.get("spec") or {}).get("template") or {}
        pods = self.owned(owner)
        current = [p for p in pods if (p["metadata"].get("labels") or {}).get(REVISION_HASH) == revision]
        for pod in pods:
            if pod not in current[:1]:
                self._delete(pod, owner)
        if not current:
            body = self._pod_body(owner, "apps/v1", "DaemonSet", template,
                                  extra_labels={REVISION_HASH: revision, "pod-template-generation": str(
                                      (owner["metadata"].get("annotations") or {}).get(
                                          "deprecated.daemonset.template.generation", "1"))})
            body["spec"]["nodeName"] = node
            self._create(owner, body)

    def job(self, owner: dict[str, Any], count: int) -> None:
        """Job: ``count`` Pods (parallelism while it runs)."""
        pods = self.owned(owner)
        template = (owner.get("spec") or {}).get("template") or {}
        for _ in range(count - len(pods)):
            self._create(owner, self._pod_body(owner, "batch/v1", "Job", template))
