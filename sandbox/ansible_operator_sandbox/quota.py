"""The resource quota controller, simulated: ``status.hard`` and ``status.used`` of each ResourceQuota.

What kube-controller-manager's resourcequota controller reports for the resources it evaluates without a
kubelet: object counts (``pods``, ``configmaps``, ``secrets``, ``services``, ``persistentvolumeclaims``,
``replicationcontrollers``, ``resourcequotas``, ``services.nodeports``, ``services.loadbalancers``,
``count/<resource>[.<group>]``) and the pods' compute requests and limits (``requests.cpu``, ``cpu``,
``limits.memory``, ...) summed over pods that are not finished. Quota *enforcement* (admission) is not
emulated.
"""

from __future__ import annotations

import copy
import re
from decimal import Decimal
from typing import Any

from ansible_operator_sandbox.errors import ApiError

_OBJECT_COUNTS = {
    "pods": "/pods", "configmaps": "/configmaps", "secrets": "/secrets", "services": "/services",
    "persistentvolumeclaims": "/persistentvolumeclaims", "replicationcontrollers": "/replicationcontrollers",
    "resourcequotas": "/resourcequotas",
}
_SUFFIXES: dict[str, Decimal] = {
    "": Decimal(1), "m": Decimal("0.001"), "k": Decimal(10**3), "M": Decimal(10**6), "G": Decimal(10**9),
    "T": Decimal(10**12), "P": Decimal(10**15), "E": Decimal(10**18), "Ki": Decimal(2**10),
    "Mi": Decimal(2**20), "Gi": Decimal(2**30), "Ti": Decimal(2**40), "Pi": Decimal(2**50),
    "Ei": Decimal(2**60)}
_QUANTITY = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)([a-zA-Z]*)$")


def parse_quantity(text: Any) -> Decimal:
    match = _QUANTITY.match(str(text).strip())
    if not match or match.group(2) not in _SUFFIXES:
        return Decimal(0)
    return Decimal(match.group(1)) * _SUFFIXES[match.group(2)]


def format_quantity(value: Decimal, binary: bool) -> str:
    """A canonical Quantity: ``0``, ``500m``, ``2``, ``64Mi`` (binary for memory and storage)."""
    if value == 0:
        return "0"
    if value != value.to_integral_value():
        return f"{int(value * 1000)}m"
    number = int(value)
    if binary:
        for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
            unit = int(_SUFFIXES[suffix])
            if number % unit == 0:
                return f"{number // unit}{suffix}"
    return str(number)


def _pod_active(pod: dict[str, Any]) -> bool:
    phase = (pod.get("status") or {}).get("phase")
    return phase not in ("Succeeded", "Failed") and not (pod.get("metadata") or {}).get("deletionTimestamp")


class QuotaControl:
    def __init__(self, api: Any) -> None:
        self.api = api
        self.quota_type = api.registry.get("", "v1", "resourcequotas")

    def sync_namespace(self, namespace: str) -> None:
        for _, quota in list(self.api.store.items("/resourcequotas", namespace)):
            hard = dict(((quota.get("spec") or {}).get("hard") or {}))
            used = {name: self._used(namespace, name) for name in hard}
            status = {"hard": hard, "used": used}
            if quota.get("status") == status:
                continue
            body = copy.deepcopy(quota)
            body["status"] = status
            try:
                self.api.update(self.quota_type, namespace, quota["metadata"]["name"], body, "status")
            except ApiError:
                pass  # changed meanwhile: its event schedules another sync

    def _count(self, group_resource: str, namespace: str) -> int:
        items = [o for _, o in self.api.store.items(group_resource, namespace)]
        if group_resource == "/pods":
            items = [p for p in items if _pod_active(p)]
        return len(items)

    def _used(self, namespace: str, name: str) -> str:
        if name in _OBJECT_COUNTS:
            return str(self._count(_OBJECT_COUNTS[name], namespace))
        if name.startswith("count/"):
            resource, _, group = name[len("count/"):].partition(".")
            return str(self._count(f"{group}/{resource}", namespace))
        if name in ("services.nodeports", "services.loadbalancers"):
            services = [o for _, o in self.api.store.items("/services", namespace)]
            if name == "services.loadbalancers":
                return str(sum(1 for s in services if (s.get("spec") or {}).get("type") == "LoadBalancer"))
            return str(sum(len((s.get("spec") or {}).get("ports") or []) for s in services
                           if (s.get("spec") or {}).get("type") in ("NodePort", "LoadBalancer")))
        kind, _, resource = name.rpartition(".") if name.startswith(("requests.", "limits.")) else (
            "requests", ".", name)
        if resource not in ("cpu", "memory", "ephemeral-storage"):
            return "0"
        total = Decimal(0)
        for _, pod in self.api.store.items("/pods", namespace):
            if not _pod_active(pod):
                continue
            for c in ((pod.get("spec") or {}).get("containers") or []):
                total += parse_quantity(((c.get("resources") or {}).get(kind) or {}).get(resource, 0))
        return format_quantity(total, binary=resource != "cpu")
