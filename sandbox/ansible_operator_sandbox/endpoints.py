"""The endpoints and endpoint-slice controllers: a Service with a selector gets an Endpoints object and an
EndpointSlice listing the ready Pods it selects (their IPs as the Pod simulator reports them), with the
Service's
ports resolved against the Pods' container ports (named ``targetPort`` included). Nothing routes traffic to
them.
"""

from __future__ import annotations

import copy
import hashlib
from typing import Any

from ansible_operator_sandbox.api import Api
from ansible_operator_sandbox.errors import ApiError
from ansible_operator_sandbox.objectmeta import SAFE_ALPHABET

MANAGED_BY = "endpointslice.kubernetes.io/managed-by"
SLICE_CONTROLLER = "endpointslice-controller.k8s.io"
SERVICE_NAME = "kubernetes.io/service-name"


def _selects(selector: dict[str, Any], labels: dict[str, Any]) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def _ready(pod: dict[str, Any]) -> bool:
    status = pod.get("status") or {}
    return bool(status.get("podIP")) and status.get("phase") == "Running" and any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])


def _target_port(port: dict[str, Any], pod: dict[str, Any]) -> int | None:
    target = port.get("targetPort", port.get("port"))
    if isinstance(target, int):
        return target
    for c in (pod.get("spec") or {}).get("containers") or []:
        for p in c.get("ports") or []:
            if p.get("name") == target and p.get("protocol", "TCP") == port.get("protocol", "TCP"):
                return int(p.get("containerPort", 0)) or None
    return None


class EndpointsControl:
    """Keeps one namespace's Endpoints and EndpointSlices in line with its Services and Pods."""

    def __init__(self, api: Api) -> None:
        self.api = api

    def _type(self, group: str, plural: str) -> Any:
        rtype = self.api.registry.get(group, "v1", plural)
        assert rtype is not None
        return rtype

    def sync_namespace(self, namespace: str) -> None:
        ns = self.api.store.peek(("/namespaces", "", namespace))
        if ns is None or (ns.get("metadata") or {}).get("deletionTimestamp"):
            return
        pods = [p for _, p in self.api.store.items("/pods", namespace)
                if not (p.get("metadata") or {}).get("deletionTimestamp")]
        for _, svc in list(self.api.store.items("/services", namespace)):
            selector = (svc.get("spec") or {}).get("selector") or {}
            if not selector or (svc.get("metadata") or {}).get("deletionTimestamp"):
                continue
            selected = sorted(
                (
                    p
                    for p in pods
                    if _selects(selector, (p.get("metadata") or {}).get("labels") or {}) and _ready(p)
                ),
                key=lambda p: p["metadata"]["name"],
            )
            try:
                self._endpoints(svc, selected)
                self._slice(svc, selected)
            except ApiError:
                continue  # a concurrent write: the resulting event brings us back

    def _ports(self, svc: dict[str, Any], pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
        out = []
        for port in (svc.get("spec") or {}).get("ports") or []:
            number = _target_port(port, pods[0]) if pods else None
            if number is None:
                continue
            entry: dict[str, Any] = {"port": number, "protocol": port.get("protocol", "TCP")}
            if port.get("name"):
                entry["name"] = port["name"]
            out.append(entry)
        return out

    def _write(self, rtype: Any, namespace: str, name: str, body: dict[str, Any],
               compare: tuple[str, ...]) -> None:
        current = self.api.store.peek((rtype.group_resource, namespace, name))
        if current is None:
            self.api.create(rtype, namespace, body)
        elif any(current.get(k) != body.get(k) for k in compare) or \
                (current.get("metadata") or {}).get("labels") != body["metadata"].get("labels"):
            update = copy.deepcopy(current)
            for k in compare:
                if k in body:
                    update[k] = body[k]
                else:
                    update.pop(k, None)
            update["metadata"]["labels"] = body["metadata"].get("labels")
            update["metadata"].pop("resourceVersion", None)
            self.api.update(rtype, namespace, name, update)

    def _endpoints(self, svc: dict[str, Any], pods: list[dict[str, Any]]) -> None:
        meta = svc["metadata"]
        body: dict[str, Any] = {"apiVersion": "v1", "kind": "Endpoints",
                                "metadata": {"name": meta["name"], "namespace": meta["namespace"],
                                             "labels": dict(meta.get("labels") or {})}}
        ports = self._ports(svc, pods)
        if pods and ports:
            body["subsets"] = [{"addresses": [
                {"ip": p["status"]["podIP"], "nodeName": (p.get("spec") or {}).get("nodeName", ""),
                 "targetRef": {"kind": "Pod", "namespace": meta["namespace"], "name": p["metadata"]["name"],
                               "uid": p["metadata"]["uid"]}} for p in pods], "ports": ports}]
        self._write(self._type("", "endpoints"), meta["namespace"], meta["name"], body, ("subsets",))

    def _slice(self, svc: dict[str, Any], pods: list[dict[str, Any]]) -> None:
        meta = svc["metadata"]
        labels = dict(meta.get("labels") or {}, **{SERVICE_NAME: meta["name"], MANAGED_BY: SLICE_CONTROLLER})
        name = f"{meta['name'][:57]}-{_suffix(meta['uid'])}"
        body = {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                "metadata": {"name": name, "namespace": meta["namespace"], "labels": labels,
                             "ownerReferences": [{"apiVersion": "v1", "kind": "Service", "name": meta["name"],
                                                  "uid": meta["uid"], "controller": True,
                                                  "blockOwnerDeletion": True}]},
                "addressType": "IPv4",
                "endpoints": [{"addresses": [p["status"]["podIP"]],
                               "conditions": {"ready": True, "serving": True, "terminating": False},
                               "nodeName": (p.get("spec") or {}).get("nodeName", ""),
                               "targetRef": {"kind": "Pod", "namespace": meta["namespace"],
                                             "name": p["metadata"]["name"], "uid": p["metadata"]["uid"]}}
                              for p in pods],
                "ports": self._ports(svc, pods)}
        self._write(self._type("discovery.k8s.io", "endpointslices"), meta["namespace"], name, body,
                    ("endpoints", "ports", "addressType"))


def _suffix(uid: str) -> str:
    """The slice's generateName suffix, derived from the Service's uid so that every sync finds the same
    slice (the real controller generates it once and finds it again by label)."""
    digest = hashlib.sha256(uid.encode()).digest()
    return "".join(SAFE_ALPHABET[b % len(SAFE_ALPHABET)] for b in digest[:5])
