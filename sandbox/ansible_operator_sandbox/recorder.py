"""Events the simulated controllers record, as client-go's event recorder writes them for the real ones.

``kubectl events`` and ``kubectl describe`` show what the controllers did: the Deployment controller's
ScalingReplicaSet, the ReplicaSet/Job/StatefulSet/DaemonSet controllers' SuccessfulCreate and
SuccessfulDelete, with each controller's component name and message wording (core/v1 Events named
``<object>.<unix nanoseconds in hex>``, as the recorder names them).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from ansible_operator_sandbox.errors import ApiError
from ansible_operator_sandbox.timeutil import now_rfc3339

log = logging.getLogger(__name__)

#: the controller that owns each kind's pods, and its component name
POD_OWNERS = {
    "ReplicaSet": "replicaset-controller",
    "ReplicationController": "replication-controller",
    "Job": "job-controller",
    "DaemonSet": "daemonset-controller",
    "StatefulSet": "statefulset-controller",
}


class Recorder:
    def __init__(self, api: Any) -> None:
        self.api = api
        self.event_type = api.registry.get("", "v1", "events")

    def normal(self, obj: dict[str, Any], reason: str, message: str, component: str) -> None:
        self.record(obj, "Normal", reason, message, component)

    def warning(self, obj: dict[str, Any], reason: str, message: str, component: str) -> None:
        self.record(obj, "Warning", reason, message, component)

    def record(self, obj: dict[str, Any], type_: str, reason: str, message: str, component: str) -> None:
        meta = obj.get("metadata") or {}
        namespace = meta.get("namespace") or "default"
        stamp = now_rfc3339()
        event = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": f"{meta.get('name', '')}.{time.time_ns():x}", "namespace": namespace},
            "involvedObject": {"kind": obj.get("kind", ""), "namespace": namespace,
                               "name": meta.get("name", ""), "uid": meta.get("uid", ""),
                               "apiVersion": obj.get("apiVersion", ""),
                               "resourceVersion": meta.get("resourceVersion", "")},
            "reason": reason, "message": message, "type": type_, "count": 1,
            "source": {"component": component}, "firstTimestamp": stamp, "lastTimestamp": stamp,
            "eventTime": None, "reportingComponent": component, "reportingInstance": "",
        }
        try:
            self.api.create(self.event_type, namespace, event)
        except ApiError as e:  # a terminating namespace refuses it, as the real recorder finds too
            log.debug("event %s/%s not recorded: %s", namespace, reason, e.message)

    def pod_created(self, owner: dict[str, Any], pod: dict[str, Any]) -> None:
        self._pod_event(owner, pod, "SuccessfulCreate", "create", "Created")

    def pod_deleted(self, owner: dict[str, Any], pod: dict[str, Any]) -> None:
        self._pod_event(owner, pod, "SuccessfulDelete", "delete", "Deleted")

    def _pod_event(self, owner: dict[str, Any], pod: dict[str, Any], reason: str, verb: str,
                   done: str) -> None:
        """The pod controllers' wording: StatefulSet's own, ``Created pod: x`` for the others."""
        kind = owner.get("kind", "")
        if kind not in POD_OWNERS:
            return
        name = (pod.get("metadata") or {}).get("name", "")
        if kind == "StatefulSet":
            message = f"{verb} Pod {name} in StatefulSet {owner['metadata']['name']} successful"
        else:
            message = f"{done} pod: {name}"
        self.normal(owner, reason, message, POD_OWNERS[kind])

    def scaled(self, deployment: dict[str, Any], rs_name: str, old: int, new: int) -> None:
        """The Deployment controller's ScalingReplicaSet (``Scaled up replica set X from 0 to 2``)."""
        if old == new:
            return
        way = "up" if new > old else "down"
        self.normal(deployment, "ScalingReplicaSet",
                    f"Scaled {way} replica set {rs_name} from {old} to {new}", "deployment-controller")
