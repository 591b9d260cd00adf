"""KWOK-style simulated controllers: status that real controllers would write, without running anything.

Roles under test wait for Deployments to become Available, Jobs to complete and PVCs to bind; no
containers exist here, so these controllers write the status a healthy cluster converges to, shortly
(:data:`DELAY`) after each change:

* Deployment / StatefulSet / ReplicaSet / ReplicationController / DaemonSet: ``observedGeneration`` and all
  replicas ready (Deployment: ``Available`` and ``Progressing`` conditions); scaling to 0 works. With the fail
  annotation (below) a Deployment/StatefulSet never gets ready (Deployment: ``Available=False``,
  ``ProgressDeadlineExceeded``), like a crash-looping rollout. A StatefulSet's
  ``volumeClaimTemplates`` produce PVCs ``<template>-<statefulset>-<ordinal>`` as the real controller does;
  a replica counts as ready only once its claims are ``Bound`` (a Pod with an unbound claim is unschedulable).
  Deployments keep ReplicaSets with revisions, StatefulSets/DaemonSets ControllerRevisions (:mod:`rollout`);
  the workloads create their Pods (:mod:`pods`); a template naming a missing ServiceAccount stalls the
  rollout as admission would.
* Pod: scheduled on the one Node, ``Running`` and Ready (a Job's pods ``Succeeded``); while the Node is
  cordoned (``spec.unschedulable``, tainted ``node.kubernetes.io/unschedulable`` as the node lifecycle
  controller does) a new pod that does not tolerate it stays ``Pending`` (``PodScheduled=False``,
  ``Unschedulable``, a ``FailedScheduling`` Event) until the Node is uncordoned.
* Service: Endpoints and an EndpointSlice of its ready Pods (:mod:`endpoints`); PodDisruptionBudget: status
  from the Pods it selects (:mod:`disruption`).
* Cluster objects (:mod:`cluster`): the ``default`` ServiceAccount and ``kube-root-ca.crt`` in every
  namespace,
  the ``kubernetes`` Service, the Node.
* Job: ``startTime``/``active``, then ``succeeded`` with ``Complete`` (and ``completionTime``). With the
  annotation ``sandbox.ansible-operator.dev/fail: "true"`` the Job fails instead (``Failed``,
  ``BackoffLimitExceeded``) so failure paths are testable. ``spec.suspend: true`` keeps it idle.
* PersistentVolumeClaim: ``Pending`` → ``Bound`` with a made-up volume and the requested capacity.
* FlowSchema: the ``Dangling`` condition kube-apiserver's APF config consumer applies (whether the priority
  level it names exists), kept current as FlowSchemas and PriorityLevelConfigurations change (:mod:`apf`).
* CronJob: creates Jobs (owned by the CronJob) on schedule with croniter, honours ``suspend`` and
  ``concurrencyPolicy``, records ``lastScheduleTime``/``lastSuccessfulTime``/``active`` and trims history.
  Besides standard 5-field schedules, a 6th field (seconds, croniter syntax) is accepted so tests need not
  wait a minute — a sandbox extension.
"""

from __future__ import annotations

import asyncio
import copy
import datetime as dt
import logging
import time
from typing import Any, Callable

from croniter import croniter

from ansible_operator_sandbox import apf
from ansible_operator_sandbox.api import Api
from ansible_operator_sandbox.cluster import (
    DEFAULT_SERVICE_ACCOUNT,
    NODE_IP,
    NODE_NAME,
    ROOT_CA_CONFIGMAP,
    ClusterObjects,
)
from ansible_operator_sandbox.disruption import DisruptionControl
from ansible_operator_sandbox.endpoints import EndpointsControl
from ansible_operator_sandbox.errors import ApiError
from ansible_operator_sandbox.pods import PodControl
from ansible_operator_sandbox.quota import QuotaControl
from ansible_operator_sandbox.recorder import Recorder
from ansible_operator_sandbox.resources import ResourceType
from ansible_operator_sandbox.rollout import CR_HASH_LABEL, DeploymentRollout, RevisionHistory
from ansible_operator_sandbox.store import Event, Key
from ansible_operator_sandbox.timeutil import now, parse, rfc3339

log = logging.getLogger(__name__)

DELAY = 0.15  # seconds between a change and the simulated controller's status write
CRON_TICK = 0.5
NODE_LEASE_RENEW = 10.0  # the kubelet's heartbeat interval
FAIL_ANNOTATION = "sandbox.ansible-operator.dev/fail"

_WORKLOADS = {"apps/deployments", "apps/statefulsets", "apps/replicasets", "apps/daemonsets",
              "/replicationcontrollers"}
_SIMULATED = _WORKLOADS | {"batch/jobs", "/persistentvolumeclaims", "/pods"}
_ENDPOINTS = "endpoints-controller"  # scheduling key of a namespace's Endpoints/EndpointSlice/PDB status sync
_QUOTA = "resourcequota-controller"  # scheduling key of a namespace's ResourceQuota status sync
_APF = "apf-config-consumer"  # scheduling key of the FlowSchemas' Dangling condition sync
_NODES = "node-lifecycle"  # scheduling key of the cordon taint sync (and of pods waiting for the node)
UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"
#: kube-scheduler 1.36's words for a pod that fits no node because the one node is cordoned
UNSCHEDULABLE_MESSAGE = ("0/1 nodes are available: 1 node(s) were unschedulable. no new claims to deallocate,"
                         " preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling.")


def _omit_zero(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if v not in (0, None)}


class Simulator:
    """Subscribes to store events and schedules per-object status updates on the sandbox loop."""

    def __init__(self, api: Api, root_ca_pem: str | None = None) -> None:
        self.api = api
        self.cluster = ClusterObjects(api, root_ca_pem)
        self.store = api.store
        self.registry = api.registry
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pending: dict[Key, asyncio.TimerHandle] = {}
        self._cron_task: asyncio.Task[None] | None = None
        self._running = False
        self._recorder = Recorder(api)  # the controllers' Events
        self._rollout = DeploymentRollout(api, self._recorder)
        self._history = RevisionHistory(api)
        self._pods = PodControl(api, self._recorder)
        self._endpoints = EndpointsControl(api)
        self._disruption = DisruptionControl(api)
        self._quota = QuotaControl(api)

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._running = True
        self.store.add_listener(self._on_event)
        self.cluster.ensure_all()
        # objects that existed before (persistence) or were created before start get reconciled too
        for gr in _SIMULATED:
            for key, _ in list(self.store.items(gr)):
                self._schedule(key)
        self._schedule((_APF, "", ""))
        self._cron_task = self._loop.create_task(self._cron_loop())

    async def stop(self) -> None:
        self._running = False
        for handle in self._pending.values():
            handle.cancel()
        self._pending.clear()
        if self._cron_task is not None:
            self._cron_task.cancel()
            try:
                await self._cron_task
            except asyncio.CancelledError:
                pass
            self._cron_task = None

    # ---- scheduling ------------------------------------------------------------------------------
    def _on_event(self, ev: Event) -> None:
        if not self._running:
            return
        self._cluster_event(ev)
        if ev.group_resource in ("/services", "/pods", "policy/poddisruptionbudgets"):
            self._schedule((_ENDPOINTS, ev.namespace, ""))
        if ev.namespace and (ev.group_resource == "/resourcequotas"
                             or any(True for _ in self.store.items("/resourcequotas", ev.namespace))):
            self._schedule((_QUOTA, ev.namespace, ""))
        if ev.group_resource in (apf.FLOWSCHEMAS, apf.PRIORITY_LEVELS):
            self._schedule((_APF, "", ""))
        if ev.group_resource == "/nodes" and ev.type != "DELETED":
            self._schedule((_NODES, "", ""))
        if ev.group_resource == "/serviceaccounts" and ev.type == "ADDED":
            # pods refused for want of this ServiceAccount can be created now
            for gr in ("apps/deployments", "apps/replicasets", "/replicationcontrollers"):
                for key, _ in list(self.store.items(gr, ev.namespace)):
                    self._schedule(key)
        if ev.group_resource in ("/pods", "apps/replicasets"):
            # a controller replaces the Pods it loses and counts the ready ones (a Deployment: through its
            # ReplicaSets' status)
            for ref in (ev.obj.get("metadata") or {}).get("ownerReferences") or []:
                owner_gr = _CONTROLLER_KINDS.get((ref.get("apiVersion"), ref.get("kind")))
                if owner_gr is not None and ref.get("controller"):
                    self._schedule((owner_gr, ev.namespace, ref.get("name", "")))
        if ev.type == "DELETED":
            return
        if ev.group_resource in _SIMULATED:
            meta = ev.obj.get("metadata") or {}
            self._schedule((ev.group_resource, ev.namespace, meta.get("name", "")))

    def _cluster_event(self, ev: Event) -> None:
        """Namespaces get their ``default`` ServiceAccount and root-CA ConfigMap; deleted ones come back."""
        name = (ev.obj.get("metadata") or {}).get("name", "")
        step: Callable[[], None] | None = None
        if ev.group_resource == "/namespaces" and ev.type != "DELETED":
            step = lambda: self.cluster.ensure_namespace(name)  # noqa: E731
        elif (ev.group_resource, name) in (("/serviceaccounts", DEFAULT_SERVICE_ACCOUNT),
                                           ("/configmaps", ROOT_CA_CONFIGMAP)):
            if ev.type == "DELETED" or ev.group_resource == "/configmaps":
                namespace = ev.namespace
                step = lambda: self.cluster.ensure_namespace(namespace)  # noqa: E731
        elif ev.type == "DELETED" and (ev.group_resource, ev.namespace, name) in (
                ("/services", "default", "kubernetes"), ("/nodes", "", NODE_NAME)):
            step = self.cluster.ensure_all
        if step is None or self._loop is None:
            return

        def run() -> None:
            if not self._running:
                return
            try:
                step()
            except ApiError as e:
                log.debug("simulated cluster objects: %s", e.message)
            except Exception:
                log.exception("simulated cluster objects failed")
        self._loop.call_soon(run)

    def _schedule(self, key: Key, delay: float = DELAY) -> None:
        if self._loop is None or key in self._pending:
            return
        self._pending[key] = self._loop.call_later(delay, self._run, key)

    def _run(self, key: Key) -> None:
        self._pending.pop(key, None)
        if not self._running:
            return
        scope = key[1]
        singletons: dict[str, tuple[str, Callable[[], None]]] = {
            _QUOTA: (f"resource quota controller for {scope}", lambda: self._quota.sync_namespace(scope)),
            _NODES: ("node lifecycle controller", self._sync_nodes),
            _APF: ("APF config consumer", lambda: apf.sync_conditions(self.api)),
            _ENDPOINTS: (f"endpoints/disruption controllers for {scope}", lambda: self._sync_services(scope)),
        }
        if key[0] in singletons:
            what, sync = singletons[key[0]]
            self._guarded(what, sync)
            return
        obj = self.store.get(key)
        if obj is None or (obj.get("metadata") or {}).get("deletionTimestamp"):
            return
        rtype = self.registry.storage_type(key[0])
        if rtype is None:
            return
        handler: Callable[[ResourceType, dict[str, Any]], None] | None = {
            "apps/deployments": self._deployment, "apps/statefulsets": self._statefulset,
            "apps/replicasets": self._replicaset, "apps/daemonsets": self._daemonset,
            "/replicationcontrollers": self._replicaset,
            "batch/jobs": self._job, "/persistentvolumeclaims": self._pvc, "/pods": self._pod}.get(key[0])
        if handler is None:
            return
        self._guarded(f"controller for {key}", lambda: handler(rtype, obj))

    def _sync_services(self, namespace: str) -> None:
        self._endpoints.sync_namespace(namespace)
        self._disruption.sync_namespace(namespace)

    @staticmethod
    def _guarded(what: str, sync: Callable[[], None]) -> None:
        """One controller pass: an API error (a concurrent write, an object deleted meanwhile) only means
        the event it caused reschedules us; anything else is a bug of ours, logged with its traceback."""
        try:
            sync()
        except ApiError as e:
            log.debug("simulated %s: %s", what, e.message)
        except Exception:
            log.exception("simulated %s failed", what)

    def _write_status(self, rtype: ResourceType, obj: dict[str, Any], status: dict[str, Any]) -> None:
        if obj.get("status") == status:
            return
        body = copy.deepcopy(obj)
        body["status"] = status
        meta = obj["metadata"]
        self.api.update(
            rtype, meta.get("namespace"), meta["name"], body, "status" if rtype.has_status else None
        )

    # ---- workloads -------------------------------------------------------------------------------
    def _pods_forbidden(self, owner: dict[str, Any], template: Any, generate_name: str) -> str | None:
        """Why the controller's pod creates would be refused by admission (a missing ServiceAccount), or
        None."""
        pod_spec = (template or {}).get("spec") or {} if isinstance(template, dict) else {}
        sa = pod_spec.get("serviceAccountName") or pod_spec.get("serviceAccount")
        ns = owner["metadata"].get("namespace", "")
        if not sa or self.store.peek(("/serviceaccounts", ns, sa)) is not None:
            return None
        return (f'pods "{generate_name}" is forbidden: error looking up service account {ns}/{sa}: '
                f'serviceaccount "{sa}" not found')

    def _deployment(self, rtype: ResourceType, obj: dict[str, Any]) -> None:
        template = (obj.get("spec") or {}).get("template")
        blocked = self._pods_forbidden(obj, template, f"{obj['metadata']['name']}-")
        obj, new_rs = self._rollout.sync(rtype, obj, scale_down_old=blocked is None)
        if blocked is None:
            # the ReplicaSets' pods exist before the Deployment reports them (the ReplicaSet controller's
            # work,
            # done here at once so status never counts pods that are not there)
            for rs in self._rollout.replica_sets(obj):
                self._pods.replicas(
                    rs, "apps/v1", "ReplicaSet", int((rs.get("spec") or {}).get("replicas", 0))
                )
        if blocked is not None and not _fails(obj):
            self._deployment_blocked(rtype, obj, new_rs, blocked)
            return
        spec = obj.get("spec") or {}
        replicas = int(spec.get("replicas", 1))
        old = obj.get("status") or {}
        now_s = rfc3339(now())
        failing = _fails(obj) and replicas > 0
        paused = bool(spec.get("paused"))
        # replicas on the current template (none while a paused Deployment's new template has no ReplicaSet)
        updated = int((new_rs or {}).get("spec", {}).get("replicas", 0)) if new_rs is not None else 0

        def cond(type_: str, status_: str, reason: str, message: str) -> dict[str, Any]:
            prev = next((c for c in old.get("conditions") or [] if c.get("type") == type_), None)
            same = prev is not None and prev.get("status") == status_ and prev.get("reason") == reason
            return {"type": type_, "status": status_, "reason": reason, "message": message,
                    "lastUpdateTime": prev.get("lastUpdateTime", now_s) if same and prev else now_s,
                    "lastTransitionTime": prev.get("lastTransitionTime", now_s)
                    if prev and prev.get("status") == status_ else now_s}

        name = obj["metadata"]["name"]
        rs_name = (new_rs or {}).get("metadata", {}).get("name", name)
        if failing:  # pods never become ready: what a crash-looping rollout reports
            status = _omit_zero(
                {
                    "observedGeneration": obj["metadata"].get("generation", 1),
                    "replicas": replicas,
                    "updatedReplicas": replicas,
                    "unavailableReplicas": replicas,
                }
            )
            status["conditions"] = [
                cond("Available", "False", "MinimumReplicasUnavailable", "Deployment does not have minimum "
                                                                         "availability."),
                cond("Progressing", "False", "ProgressDeadlineExceeded",
                     f'ReplicaSet "{rs_name}" has timed out progressing.')]
        else:
            ready = min(sum(self._ready_pods(rs) for rs in self._rollout.replica_sets(obj)), replicas)
            status = _omit_zero(
                {
                    "observedGeneration": obj["metadata"].get("generation", 1),
                    "replicas": replicas,
                    "updatedReplicas": updated,
                    "readyReplicas": ready,
                    "availableReplicas": ready,
                    "unavailableReplicas": replicas - ready,
                }
            )
            if paused:  # the controller only syncs scale and reports the pause (DeploymentPaused, Unknown)
                progressing = cond("Progressing", "Unknown", "DeploymentPaused", "Deployment is paused")
            elif ready < replicas or updated < replicas:
                progressing = cond("Progressing", "True", "ReplicaSetUpdated",
                                   f'ReplicaSet "{rs_name}" is progressing.')
            else:
                progressing = cond("Progressing", "True", "NewReplicaSetAvailable",
                                   f'ReplicaSet "{rs_name}" has successfully progressed.')
            if ready >= replicas - _max_unavailable(spec, replicas):
                available = cond("Available", "True", "MinimumReplicasAvailable",
                                 "Deployment has minimum availability.")
            else:
                available = cond("Available", "False", "MinimumReplicasUnavailable",
                                 "Deployment does not have minimum availability.")
            status["conditions"] = [available, progressing]
        if _conditions_equal(old, status):
            status["conditions"] = old["conditions"]
        self._write_status(rtype, obj, status)

    def _deployment_blocked(self, rtype: ResourceType, obj: dict[str, Any], new_rs: dict[str, Any] | None,
                            why: str) -> None:
        """A rollout whose new pods admission refuses: old ReplicaSets keep serving, the new one has none."""
        spec = obj.get("spec") or {}
        replicas = int(spec.get("replicas", 1))
        new_uid = ((new_rs or {}).get("metadata") or {}).get("uid")
        sets = self._rollout.replica_sets(obj)
        serving = sum(int((rs.get("spec") or {}).get("replicas", 0)) for rs in sets
                      if rs["metadata"].get("uid") != new_uid)
        # unavailable counts against every ReplicaSet's desired replicas, the new one's included
        # (syncRolloutStatus)
        desired = sum(int((rs.get("spec") or {}).get("replicas", 0)) for rs in sets)
        old = obj.get("status") or {}
        now_s = rfc3339(now())

        def cond(type_: str, status_: str, reason: str, message: str) -> dict[str, Any]:
            prev = next((c for c in old.get("conditions") or [] if c.get("type") == type_), None)
            keep = prev is not None and prev.get("status") == status_
            return {"type": type_, "status": status_, "reason": reason, "message": message,
                    "lastUpdateTime": now_s if not keep or not prev else prev.get("lastUpdateTime", now_s),
                    "lastTransitionTime": prev.get("lastTransitionTime", now_s) if keep and prev else now_s}
        rs_name = ((new_rs or {}).get("metadata") or {}).get("name", obj["metadata"]["name"])
        available = serving >= replicas - _max_unavailable(spec, replicas) and serving > 0
        status = _omit_zero({"observedGeneration": obj["metadata"].get("generation", 1), "replicas": serving,
                             "readyReplicas": serving, "availableReplicas": serving,
                             "unavailableReplicas": max(desired - serving, 0)})
        status["conditions"] = [
            cond("Available", "True", "MinimumReplicasAvailable", "Deployment has minimum availability.")
            if available else cond("Available", "False", "MinimumReplicasUnavailable",
                                   "Deployment does not have minimum availability."),
            cond("Progressing", "True", "ReplicaSetUpdated", f'ReplicaSet "{rs_name}" is progressing.'),
            cond("ReplicaFailure", "True", "FailedCreate", why)]
        if _conditions_equal(old, status):
            status["conditions"] = old["conditions"]
        self._write_status(rtype, obj, status)

    def _statefulset(self, rtype: ResourceType, obj: dict[str, Any]) -> None:
        spec = obj.get("spec") or {}
        replicas = int(spec.get("replicas", 1))
        meta = obj["metadata"]
        bound = self._claims(obj, replicas)
        revision = self._history.sync(obj, "StatefulSet")["metadata"]["name"]
        self._pods.stateful(obj, replicas, revision)
        # a Pod whose claims are not Bound cannot be scheduled, so it is not ready yet: look again shortly
        ready = 0 if _fails(obj) else bound
        if not _fails(obj) and bound < replicas:
            self._schedule(("apps/statefulsets", meta["namespace"], meta["name"]))
        status = {"observedGeneration": meta.get("generation", 1), "replicas": replicas,
                  "availableReplicas": ready,
                  **_omit_zero({"readyReplicas": ready, "currentReplicas": replicas,
                                "updatedReplicas": replicas}),
                  "currentRevision": revision, "updateRevision": revision, "collisionCount": 0}
        self._write_status(rtype, obj, status)

    def _claims(self, sts: dict[str, Any], replicas: int) -> int:
        """PVCs for volumeClaimTemplates, named like the StatefulSet controller names them; returns how many
        ordinals have all their claims ``Bound``."""
        pvc_type = self.registry.get("", "v1", "persistentvolumeclaims")
        assert pvc_type is not None
        meta = sts["metadata"]
        spec = sts.get("spec") or {}
        labels = ((spec.get("selector") or {}).get("matchLabels") or {})
        unbound: set[int] = set()
        for tmpl in spec.get("volumeClaimTemplates") or []:
            tname = (tmpl.get("metadata") or {}).get("name")
            if not tname:
                continue
            for i in range(replicas):
                name = f"{tname}-{meta['name']}-{i}"
                existing = self.store.peek(("/persistentvolumeclaims", meta["namespace"], name))
                if existing is not None:
                    if (existing.get("status") or {}).get("phase") != "Bound":
                        unbound.add(i)
                    continue
                unbound.add(i)
                tmeta = tmpl.get("metadata") or {}
                body = {
                    "apiVersion": "v1",
                    "kind": "PersistentVolumeClaim",
                    "metadata": {
                        "name": name,
                        "namespace": meta["namespace"],
                        "labels": dict(tmeta.get("labels") or {}, **labels),
                        **({"annotations": tmeta["annotations"]} if tmeta.get("annotations") else {}),
                    },
                    "spec": copy.deepcopy(tmpl.get("spec") or {}),
                }
                self.api.create(pvc_type, meta["namespace"], body)
        return replicas - len(unbound)

    def _replicaset(self, rtype: ResourceType, obj: dict[str, Any]) -> None:
        replicas = int((obj.get("spec") or {}).get("replicas", 1))
        why = self._pods_forbidden(
            obj, (obj.get("spec") or {}).get("template"), f"{obj['metadata']['name']}-"
        )
        if why is not None and replicas:
            now_s = rfc3339(now())
            prev = next((c for c in (obj.get("status") or {}).get("conditions") or []
                         if c.get("type") == "ReplicaFailure"), None)
            self._write_status(
                rtype,
                obj,
                {
                    "observedGeneration": obj["metadata"].get("generation", 1),
                    "replicas": 0,
                    "conditions": [
                        {
                            "type": "ReplicaFailure",
                            "status": "True",
                            "reason": "FailedCreate",
                            "message": why,
                            "lastTransitionTime": (prev or {}).get("lastTransitionTime", now_s),
                        }
                    ],
                },
            )
            return
        self._pods.replicas(obj, rtype.api_version, rtype.kind, replicas)
        ready = min(self._ready_pods(obj), replicas)
        status = {"observedGeneration": obj["metadata"].get("generation", 1), "replicas": replicas,
                  **_omit_zero({"fullyLabeledReplicas": replicas, "readyReplicas": ready,
                                "availableReplicas": ready})}
        self._write_status(rtype, obj, status)

    def _ready_pods(self, owner: dict[str, Any]) -> int:
        """The owner's pods that are Ready (what a controller counts as ready and, with no minReadySeconds,
        available): a pod the scheduler could not place (a cordoned node) is not."""
        return sum(1 for pod in self._pods.owned(owner)
                   if any(c.get("type") == "Ready" and c.get("status") == "True"
                          for c in (pod.get("status") or {}).get("conditions") or []))

    def _daemonset(self, rtype: ResourceType, obj: dict[str, Any]) -> None:
        revision = self._history.sync(obj, "DaemonSet")
        self._pods.daemon(obj, NODE_NAME, (revision["metadata"].get("labels") or {}).get(CR_HASH_LABEL, ""))
        # one simulated node
        status = {
            "observedGeneration": obj["metadata"].get("generation", 1),
            "currentNumberScheduled": 1,
            "desiredNumberScheduled": 1,
            "numberAvailable": 1,
            "numberMisscheduled": 0,
            "numberReady": 1,
            "updatedNumberScheduled": 1,
        }
        self._write_status(rtype, obj, status)

    def _pvc(self, rtype: ResourceType, obj: dict[str, Any]) -> None:
        status = obj.get("status") or {}
        if status.get("phase") == "Bound":
            return
        spec = obj.get("spec") or {}
        meta = obj["metadata"]
        if not spec.get("volumeName"):
            body = copy.deepcopy(obj)
            body["spec"]["volumeName"] = f"pvc-{meta.get('uid', '')}"
            obj = self.api.update(rtype, meta.get("namespace"), meta["name"], body)
        storage = ((spec.get("resources") or {}).get("requests") or {}).get("storage", "1Gi")
        self._write_status(
            rtype,
            obj,
            {
                "phase": "Bound",
                "accessModes": spec.get("accessModes") or ["ReadWriteOnce"],
                "capacity": {"storage": storage},
            },
        )

    def _sync_nodes(self) -> None:
        """The node lifecycle controller's NoSchedule taint on a cordoned node, removed on uncordon; then
        the pods left Pending meanwhile get scheduled."""
        rtype = self.registry.get("", "v1", "nodes")
        assert rtype is not None
        schedulable = False
        for _, node in list(self.store.items("/nodes")):
            spec = node.get("spec") or {}
            taints = list(spec.get("taints") or [])
            ours = [t for t in taints if t.get("key") == UNSCHEDULABLE_TAINT]
            others = [t for t in taints if t.get("key") != UNSCHEDULABLE_TAINT]
            if spec.get("unschedulable"):
                wanted = others + (ours[:1] or [{"key": UNSCHEDULABLE_TAINT, "effect": "NoSchedule",
                                                 "timeAdded": rfc3339(now())}])
            else:
                wanted, schedulable = others, True
            if wanted != taints:
                body = copy.deepcopy(node)
                body["spec"] = {k: v for k, v in spec.items() if k != "taints"}
                if wanted:
                    body["spec"]["taints"] = wanted
                self.api.update(rtype, None, node["metadata"]["name"], body)
        if schedulable:
            for key, pod in list(self.store.items("/pods")):
                if not (pod.get("spec") or {}).get("nodeName"):
                    self._schedule(key)

    def _cordoned(self, pod: dict[str, Any]) -> bool:
        """Whether the one node is cordoned and ``pod`` does not tolerate that (the scheduler's
        NodeUnschedulable filter)."""
        node = self.store.peek(("/nodes", "", NODE_NAME))
        if node is None or not (node.get("spec") or {}).get("unschedulable"):
            return False
        for t in (pod.get("spec") or {}).get("tolerations") or []:
            if not isinstance(t, dict):
                continue
            key = t.get("key")
            matches = key == UNSCHEDULABLE_TAINT or (not key and t.get("operator") == "Exists")
            if matches and t.get("effect") in (None, "", "NoSchedule"):
                return False
        return True

    def _unschedulable(self, rtype: ResourceType, pod: dict[str, Any]) -> None:
        status = pod.get("status") or {}
        if any(c.get("type") == "PodScheduled" and c.get("reason") == "Unschedulable"
               for c in status.get("conditions") or []):
            return  # already said so (once: a new transition time would be a new event, forever)
        condition = {"type": "PodScheduled", "status": "False", "lastProbeTime": None,
                     "lastTransitionTime": rfc3339(now()), "reason": "Unschedulable",
                     "message": UNSCHEDULABLE_MESSAGE}
        generation = pod["metadata"].get("generation")
        if generation:
            condition["observedGeneration"] = generation
        self._write_status(rtype, pod, {"phase": "Pending", "conditions": [condition],
                                        "qosClass": status.get("qosClass", "BestEffort")})
        self._recorder.warning(pod, "FailedScheduling", UNSCHEDULABLE_MESSAGE, "default-scheduler")

    def _pod(self, rtype: ResourceType, obj: dict[str, Any]) -> None:
        """Pods are reported scheduled, started and Ready (nothing runs); the fail annotation makes them
        Failed. Not while the node is cordoned (a pod not yet on it stays Pending)."""
        status = obj.get("status") or {}
        if status.get("phase") in ("Running", "Succeeded", "Failed"):
            return
        spec = obj.get("spec") or {}
        if not spec.get("nodeName") and self._cordoned(obj):
            self._unschedulable(rtype, obj)
            return
        now_s = rfc3339(now())
        job = self._controller(obj, "batch/v1", "Job", "batch/jobs")
        failed = _fails(obj) or (job is not None and _fails(job))
        ready = "False" if failed or job is not None else "True"
        containers = [c for c in spec.get("containers") or [] if isinstance(c, dict)]
        octets = obj["metadata"].get("uid", "0000").replace("-", "")[:4]
        new_status = {
            "phase": "Failed" if failed else "Succeeded" if job is not None else "Running",
            "conditions": [
                {
                    "type": t,
                    "status": "True" if t in ("PodScheduled", "Initialized") else ready,
                    "lastProbeTime": None,
                    "lastTransitionTime": now_s,
                }
                for t in ("PodScheduled", "Initialized", "ContainersReady", "Ready")
            ],
            "hostIP": NODE_IP,
            "hostIPs": [{"ip": NODE_IP}],
            "podIP": f"10.244.{int(octets[:2], 16)}.{int(octets[2:], 16) or 1}",
            "startTime": now_s,
            "qosClass": status.get("qosClass", "BestEffort"),
            "containerStatuses": [
                {
                    "name": c.get("name", ""),
                    "image": c.get("image", ""),
                    "imageID": "",
                    "ready": not failed,
                    "restartCount": 0,
                    "started": not failed,
                    "state": (
                        {
                            "terminated": {
                                "exitCode": 1,
                                "reason": "Error",
                                "startedAt": now_s,
                                "finishedAt": now_s,
                            }
                        }
                        if failed
                        else {
                            "terminated": {
                                "exitCode": 0,
                                "reason": "Completed",
                                "startedAt": now_s,
                                "finishedAt": now_s,
                            }
                        }
                        if job is not None
                        else {"running": {"startedAt": now_s}}
                    ),
                }
                for c in containers
            ],
        }
        if not spec.get("nodeName"):
            body = copy.deepcopy(obj)
            body["spec"]["nodeName"] = NODE_NAME
            obj = self.api.update(rtype, obj["metadata"].get("namespace"), obj["metadata"]["name"], body)
        self._write_status(rtype, obj, new_status)

    def _controller(self, obj: dict[str, Any], api_version: str, kind: str, group_resource: str
                    ) -> dict[str, Any] | None:
        """The object's controller of the given kind, when it has one."""
        for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
            if ref.get("controller") and ref.get("kind") == kind and ref.get("apiVersion") == api_version:
                return self.store.peek(
                    (group_resource, obj["metadata"].get("namespace", ""), ref.get("name", ""))
                )
        return None

    # ---- jobs ------------------------------------------------------------------------------------
    def _job(self, rtype: ResourceType, obj: dict[str, Any]) -> None:
        spec = obj.get("spec") or {}
        status = dict(obj.get("status") or {})
        if spec.get("suspend"):
            return
        if any(c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
               for c in status.get("conditions") or []):
            return
        now_s = rfc3339(now())
        meta = obj["metadata"]
        if "startTime" not in status:
            self._pods.job(
                obj, max(min(int(spec.get("parallelism", 1)), int(spec.get("completions") or 1)), 1)
            )
            status.update(startTime=now_s, active=1, ready=0, uncountedTerminatedPods={})
            self._write_status(rtype, obj, status)
            self._schedule((rtype.group_resource, meta.get("namespace", ""), meta["name"]))
            return
        status.pop("active", None)
        status["ready"] = 0
        if _fails(obj):
            status["failed"] = int(spec.get("backoffLimit", 6)) + 1
            status["conditions"] = [
                {"type": "FailureTarget", "status": "True", "reason": "BackoffLimitExceeded",
                 "message": "Job has reached the specified backoff limit", "lastProbeTime": now_s,
                 "lastTransitionTime": now_s},
                {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
                 "message": "Job has reached the specified backoff limit", "lastProbeTime": now_s,
                 "lastTransitionTime": now_s}]
        else:
            status["succeeded"] = int(spec.get("completions") or 1)
            status["completionTime"] = now_s
            status["conditions"] = [
                {"type": "SuccessCriteriaMet", "status": "True", "reason": "CompletionsReached",
                 "message": "Reached expected number of succeeded pods", "lastProbeTime": now_s,
                 "lastTransitionTime": now_s},
                {"type": "Complete", "status": "True", "reason": "CompletionsReached",
                 "message": "Reached expected number of succeeded pods", "lastProbeTime": now_s,
                 "lastTransitionTime": now_s}]
        self._write_status(rtype, obj, status)

    # ---- cronjobs --------------------------------------------------------------------------------
    async def _cron_loop(self) -> None:
        last_heartbeat = 0.0
        while self._running:
            try:
                self._cron_tick()
            except Exception:
                log.exception("simulated CronJob controller failed")
            if time.monotonic() - last_heartbeat >= NODE_LEASE_RENEW:
                last_heartbeat = time.monotonic()
                try:
                    self.cluster.renew_node_lease()
                except ApiError as e:
                    log.debug("node lease: %s", e.message)
            await asyncio.sleep(CRON_TICK)

    def _cron_tick(self) -> None:
        cj_type = self.registry.get("batch", "v1", "cronjobs")
        job_type = self.registry.get("batch", "v1", "jobs")
        assert cj_type is not None and job_type is not None
        for key, cj in list(self.store.items("batch/cronjobs")):
            if (cj.get("metadata") or {}).get("deletionTimestamp"):
                continue
            try:
                self._cron_one(cj_type, job_type, copy.deepcopy(cj))
            except ApiError as e:
                log.debug("simulated CronJob %s: %s", key, e.message)

    def _cron_one(self, cj_type: ResourceType, job_type: ResourceType, cj: dict[str, Any]) -> None:
        meta = cj["metadata"]
        spec = cj.get("spec") or {}
        ns = meta["namespace"]
        status = dict(cj.get("status") or {})
        owned = [
            obj
            for _, obj in self.store.items("batch/jobs", ns)
            if any(
                r.get("uid") == meta.get("uid")
                for r in (obj.get("metadata") or {}).get("ownerReferences") or []
            )
        ]
        active = [j for j in owned if not _job_finished(j)]
        finished = [j for j in owned if _job_finished(j)]
        new_status = dict(status)
        if active:
            new_status["active"] = [{"kind": "Job", "apiVersion": "batch/v1", "name": j["metadata"]["name"],
                                     "namespace": ns, "uid": j["metadata"]["uid"],
                                     "resourceVersion": j["metadata"]["resourceVersion"]} for j in active]
        else:
            new_status.pop("active", None)
        succeeded = [j for j in finished if _job_finished(j) == "Complete"]
        if succeeded:
            new_status["lastSuccessfulTime"] = max((j.get("status") or {}).get("completionTime", "")
                                                   for j in succeeded)
        self._trim_history(job_type, finished, spec)
        schedule = spec.get("schedule", "")
        if not spec.get("suspend") and isinstance(schedule, str) and croniter.is_valid(schedule):
            last = parse(status.get("lastScheduleTime") or meta.get("creationTimestamp", "")) or now()
            due = croniter(schedule, last).get_next(dt.datetime)
            current = now()
            if due <= current:
                # like the real controller, only the most recent missed time is run
                it = croniter(schedule, due)
                while True:
                    nxt = it.get_next(dt.datetime)
                    if nxt > current:
                        break
                    due = nxt
                policy = spec.get("concurrencyPolicy", "Allow")
                if policy == "Forbid" and active:
                    pass
                else:
                    if policy == "Replace":
                        for j in active:
                            self.api.delete(job_type, ns, j["metadata"]["name"],
                                            {"propagationPolicy": "Background"})
                    self._create_job(job_type, cj, due)
                    new_status["lastScheduleTime"] = rfc3339(due)
        if new_status != status:
            body = copy.deepcopy(cj)
            body["status"] = new_status
            self.api.update(cj_type, ns, meta["name"], body, "status")

    def _create_job(self, job_type: ResourceType, cj: dict[str, Any], scheduled: dt.datetime) -> None:
        meta = cj["metadata"]
        tmpl = (cj.get("spec") or {}).get("jobTemplate") or {}
        tmeta = tmpl.get("metadata") or {}
        name = f"{meta['name']}-{int(scheduled.timestamp() // 60)}"
        if (scheduled.second or 0) != 0:  # sub-minute schedules (sandbox extension) need unique names
            name = f"{meta['name']}-{int(scheduled.timestamp())}"
        if self.store.peek(("batch/jobs", meta["namespace"], name)) is not None:
            return
        annotations = dict(tmeta.get("annotations") or {})
        annotations["batch.kubernetes.io/cronjob-scheduled-timestamp"] = rfc3339(scheduled)
        body = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {
                "name": name,
                "namespace": meta["namespace"],
                "labels": dict(tmeta.get("labels") or {}),
                "annotations": annotations,
                "ownerReferences": [
                    {
                        "apiVersion": "batch/v1",
                        "kind": "CronJob",
                        "name": meta["name"],
                        "uid": meta["uid"],
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "spec": copy.deepcopy(tmpl.get("spec") or {}),
        }
        self.api.create(job_type, meta["namespace"], body)

    def _trim_history(
        self, job_type: ResourceType, finished: list[dict[str, Any]], spec: dict[str, Any]
    ) -> None:
        for outcome, limit in (("Complete", spec.get("successfulJobsHistoryLimit", 3)),
                               ("Failed", spec.get("failedJobsHistoryLimit", 1))):
            jobs = sorted((j for j in finished if _job_finished(j) == outcome),
                          key=lambda j: (j.get("status") or {}).get("startTime", ""))
            excess = len(jobs) - int(limit)
            for j in jobs[:max(excess, 0)]:
                try:
                    self.api.delete(job_type, j["metadata"]["namespace"], j["metadata"]["name"],
                                    {"propagationPolicy": "Background"})
                except ApiError:
                    pass


#: (apiVersion, kind) of the controllers that own Pods -> their group/resource
_CONTROLLER_KINDS = {("apps/v1", "ReplicaSet"): "apps/replicasets", ("v1", "ReplicationController"):
                     "/replicationcontrollers", ("apps/v1", "StatefulSet"): "apps/statefulsets",
                     ("apps/v1", "DaemonSet"): "apps/daemonsets",
                     ("apps/v1", "Deployment"): "apps/deployments"}


def _max_unavailable(spec: dict[str, Any], replicas: int) -> int:
    """maxUnavailable of a RollingUpdate (25% rounded down by default), 0 for Recreate."""
    strategy = spec.get("strategy") or {}
    if strategy.get("type") == "Recreate":
        return 0
    value = (strategy.get("rollingUpdate") or {}).get("maxUnavailable", "25%")
    if isinstance(value, str) and value.endswith("%"):
        try:
            return replicas * int(value[:-1]) // 100
        except ValueError:
            return 0
    return int(value) if isinstance(value, int) else 0


def _fails(obj: dict[str, Any]) -> bool:
    """The sandbox's failure switch: annotation ``sandbox.ansible-operator.dev/fail: "true"``."""
    return ((obj.get("metadata") or {}).get("annotations") or {}).get(FAIL_ANNOTATION) == "true"


def _job_finished(job: dict[str, Any]) -> str | None:
    for c in (job.get("status") or {}).get("conditions") or []:
        if c.get("type") in ("Complete", "Failed") and c.get("status") == "True":
            return str(c["type"])
    return None


def _conditions_equal(old: dict[str, Any], new: dict[str, Any]) -> bool:
    def strip(cs: Any) -> list[tuple[Any, ...]]:
        return [(c.get("type"), c.get("status"), c.get("reason"), c.get("message")) for c in cs or []]
    return strip(old.get("conditions")) == strip(new.get("conditions"))
