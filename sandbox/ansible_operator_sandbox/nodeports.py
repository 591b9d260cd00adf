"""Service node ports, allocated as kube-apiserver's Service registry does.

A Service of type ``NodePort`` or ``LoadBalancer`` (unless ``allocateLoadBalancerNodePorts: false``) gets a
``nodePort`` on every port that has none, from 30000-32767 (``--service-node-port-range``), unique in the
cluster. A port given by the user is kept if it is in the range and free, otherwise the write is 422 with the
registry's message (``provided port is already allocated`` / ``... is not in the valid range. The range of
valid ports is 30000-32767``). An update keeps the ports the Service already holds (matched by port name, as
``patchAllocatedValues`` does), a type change away from NodePort/LoadBalancer drops unchanged node ports
(``dropTypeDependentFields``), and a deleted Service's ports are free again: the ports in use are read from
the stored Services at each write, so nothing is leaked. A ``LoadBalancer`` with
``externalTrafficPolicy: Local`` gets a ``healthCheckNodePort`` from the same range.
"""

from __future__ import annotations

import random
from typing import Any, Iterable

from ansible_operator_sandbox import schema
from ansible_operator_sandbox.errors import ApiError

__all__ = ["PORT_RANGE", "assign", "ports_in_use"]

PORT_RANGE = range(30000, 32768)
_RANGE_TEXT = f"{PORT_RANGE.start}-{PORT_RANGE.stop - 1}"


def _needs_node_ports(spec: dict[str, Any]) -> bool:
    kind = spec.get("type")
    if kind == "LoadBalancer":
        return spec.get("allocateLoadBalancerNodePorts") is not False
    return kind == "NodePort"


def _needs_health_check_port(spec: dict[str, Any]) -> bool:
    return spec.get("type") == "LoadBalancer" and spec.get("externalTrafficPolicy") == "Local"


def _ports(spec: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in spec.get("ports") or [] if isinstance(p, dict)]


def ports_in_use(services: Iterable[dict[str, Any]]) -> set[int]:
    """Every node port (and health-check node port) the given stored Services hold."""
    used: set[int] = set()
    for svc in services:
        spec = found if isinstance(found := svc.get("spec"), dict) else {}
        used.update(p["nodePort"] for p in _ports(spec) if isinstance(p.get("nodePort"), int))
        if isinstance(spec.get("healthCheckNodePort"), int):
            used.add(spec["healthCheckNodePort"])
    return used


def _held(spec: dict[str, Any]) -> set[int]:
    return ports_in_use([{"spec": spec}])


def assign(obj: dict[str, Any], old: dict[str, Any] | None, used: set[int]) -> list[schema.FieldError]:
    """Give ``obj`` (a Service being written; ``old`` is the stored one on update) its node ports in place.

    ``used`` holds the ports of every other Service. Returns the field errors (422) instead of raising.
    """
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return []
    old_spec = (old or {}).get("spec") or {}
    ports = _ports(spec)
    errors: list[schema.FieldError] = []
    if spec.get("type") in ("NodePort", "LoadBalancer"):
        spec.setdefault("externalTrafficPolicy", "Cluster")
    if spec.get("type") == "LoadBalancer":
        spec.setdefault("allocateLoadBalancerNodePorts", True)
    if old is not None and _needs_node_ports(old_spec) and not _needs_node_ports(spec):
        # dropTypeDependentFields: node ports the user left as they were go with the old type
        old_by_name = {p.get("name"): p.get("nodePort") for p in _ports(old_spec)}
        for p in ports:
            if p.get("nodePort") is not None and p.get("nodePort") == old_by_name.get(p.get("name")):
                del p["nodePort"]
    if old is not None and _needs_health_check_port(old_spec) and not _needs_health_check_port(spec):
        if spec.get("healthCheckNodePort") == old_spec.get("healthCheckNodePort"):
            spec.pop("healthCheckNodePort", None)
    if not _needs_node_ports(spec):
        for i, p in enumerate(ports):
            if p.get("nodePort") not in (None, 0):
                errors.append(schema.forbidden(f"spec.ports[{i}].nodePort",
                                               f"may not be used when `type` is '{spec.get('type')}'"))
        return errors
    held = _held(old_spec) if old is not None and _needs_node_ports(old_spec) else set()
    if old is not None and held:
        # patchAllocatedValues: a port sent without a node port keeps the one its name had
        old_by_name = {p.get("name"): p.get("nodePort") for p in _ports(old_spec)}
        sent = {p.get("nodePort") for p in ports}
        for p in ports:
            previous = old_by_name.get(p.get("name"))
            if p.get("nodePort") in (None, 0) and previous is not None and previous not in sent:
                p["nodePort"] = previous
                sent.add(previous)
    claimed: set[int] = set()
    for i, p in enumerate(ports):
        wanted = p.get("nodePort")
        if not isinstance(wanted, int) or wanted == 0:
            continue
        if wanted in held and wanted not in claimed:
            claimed.add(wanted)
            continue
        field = f"spec.ports[{i}].nodePort"
        if wanted not in PORT_RANGE:
            errors.append(schema.invalid(field, wanted, "provided port is not in the valid range. "
                                                        f"The range of valid ports is {_RANGE_TEXT}"))
        elif wanted in used or wanted in claimed:
            errors.append(schema.invalid(field, wanted, "provided port is already allocated"))
        claimed.add(wanted)
    if errors:
        return errors
    taken = used | claimed
    for p in ports:
        if p.get("nodePort") in (None, 0):
            p["nodePort"] = _next_free(taken)
            taken.add(p["nodePort"])
    if _needs_health_check_port(spec) and spec.get("healthCheckNodePort") in (None, 0):
        previous = old_spec.get("healthCheckNodePort")
        spec["healthCheckNodePort"] = previous if previous in held else _next_free(taken)
    return errors


def _next_free(taken: set[int]) -> int:
    """A random free port of the range (the registry's allocator picks at random too)."""
    free = [p for p in PORT_RANGE if p not in taken]
    if not free:
        raise ApiError(500, "InternalError",
                       "Internal error occurred: failed to allocate a nodePort: range is full")
    return random.choice(free)
