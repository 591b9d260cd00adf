"""The disruption controller: PodDisruptionBudget status from the Pods a budget selects.

``expectedPods`` (selected Pods), ``currentHealthy`` (those Running and Ready), ``desiredHealthy`` (from
``minAvailable``, or ``expectedPods - maxUnavailable``; percentages rounded up), ``disruptionsAllowed`` and
the
``DisruptionAllowed`` condition (``SufficientPods`` / ``InsufficientPods``), as kube-controller-manager writes
them.
"""

from __future__ import annotations

import copy
import math
from typing import Any

from ansible_operator_sandbox.api import Api
from ansible_operator_sandbox.errors import ApiError
from ansible_operator_sandbox.labels import matches_label_selector as selects
from ansible_operator_sandbox.timeutil import now_rfc3339


def _healthy(pod: dict[str, Any]) -> bool:
    status = pod.get("status") or {}
    return status.get("phase") == "Running" and any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])


def _scaled(value: Any, total: int) -> int:
    if isinstance(value, str) and value.endswith("%"):
        try:
            return math.ceil(total * int(value[:-1]) / 100)
        except ValueError:
            return 0
    return int(value) if isinstance(value, int) else 0


class DisruptionControl:
    def __init__(self, api: Api) -> None:
        self.api = api
        pdb = api.registry.get("policy", "v1", "poddisruptionbudgets")
        assert pdb is not None
        self.pdb_type = pdb

    def sync_namespace(self, namespace: str) -> None:
        pods = [p for _, p in self.api.store.items("/pods", namespace)
                if not (p.get("metadata") or {}).get("deletionTimestamp")]
        for _, pdb in list(self.api.store.items("policy/poddisruptionbudgets", namespace)):
            try:
                self._sync(pdb, pods)
            except ApiError:
                continue  # a concurrent write: its event brings us back

    def _sync(self, pdb: dict[str, Any], pods: list[dict[str, Any]]) -> None:
        spec = pdb.get("spec") or {}
        selected = [
            p for p in pods if selects(spec.get("selector"), (p.get("metadata") or {}).get("labels") or {})
        ]
        expected = len(selected)
        healthy = sum(1 for p in selected if _healthy(p))
        if spec.get("minAvailable") is not None:
            desired = _scaled(spec["minAvailable"], expected)
        elif spec.get("maxUnavailable") is not None:
            desired = max(expected - _scaled(spec["maxUnavailable"], expected), 0)
        else:
            desired = expected
        allowed = max(healthy - desired, 0) if expected else 0
        old = pdb.get("status") or {}
        prev = next((c for c in old.get("conditions") or [] if c.get("type") == "DisruptionAllowed"), None)
        state = "True" if allowed > 0 else "False"
        generation = pdb["metadata"].get("generation", 1)
        condition = {"type": "DisruptionAllowed", "status": state,
                     "reason": "SufficientPods" if allowed > 0 else "InsufficientPods", "message": "",
                     "observedGeneration": generation,
                     "lastTransitionTime": prev["lastTransitionTime"] if prev and prev.get("status") == state
                     and prev.get("lastTransitionTime") else now_rfc3339()}
        status = {"observedGeneration": generation, "disruptionsAllowed": allowed, "currentHealthy": healthy,
                  "desiredHealthy": desired, "expectedPods": expected, "conditions": [condition]}
        if old == status:
            return
        body = copy.deepcopy(pdb)
        body["status"] = status
        meta = body["metadata"]
        self.api.update(self.pdb_type, meta["namespace"], meta["name"], body, "status")
