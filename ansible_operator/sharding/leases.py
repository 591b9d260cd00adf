"""A replica's own member Lease and the listing of its ring's, through :meth:`Kube.request_once
<ansible_operator.kube.Kube.request_once>` (one attempt per call, in a worker thread, under the caller's
timeout: the coordinator's retry period is the retry cadence, as in :mod:`ansible_operator.leader`).

Only the replica writes its Lease; others may delete it once it has not changed for several lease
durations (a crashed replica's leftover), with its ``resourceVersion`` as a precondition."""

from __future__ import annotations

import asyncio
import copy
import hashlib
import re
import threading
import time
from typing import Any
from urllib.parse import quote

from ansible_operator.errors import OperatorError
from ansible_operator.kube import Conflict, Kube, NotFound
from ansible_operator.leader import format_micro_time
from ansible_operator.sharding.membership import DRAINED_ANNOTATION, RING_LABEL, LeaseView

__all__ = ["KubeLeaseStore", "LeaseLost", "dns_name", "label_value", "lease_name"]


class LeaseLost(OperatorError):
    """Our own Lease was deleted while we held it: the others count us gone."""


_NOT_DNS = re.compile(r"[^a-z0-9.-]+")


def dns_name(value: str, limit: int = 253) -> str:
    """``value`` as a DNS subdomain (a Lease name): lower case, other characters as ``-``; a hash suffix
    keeps names apart when it has to be shortened."""
    name = _NOT_DNS.sub("-", value.lower()).strip("-.") or "x"
    if len(name) > limit:
        digest = hashlib.sha256(value.encode()).hexdigest()[:10]
        name = name[:limit - 11].rstrip("-.") + "-" + digest
    return name


def label_value(value: str) -> str:
    """``value`` as a label value (63 characters, alphanumerics at both ends)."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", value)[:63].strip("-_.") or "x"


def lease_name(ring: str, identity: str) -> str:
    return dns_name(f"{ring}-shard-{identity}")


class KubeLeaseStore:
    """The Lease API calls of one member of one ring."""

    def __init__(self, kube: Kube, *, namespace: str, ring: str, identity: str,
                 lease_duration: float) -> None:
        self._kube = kube
        self.namespace = namespace
        self.ring = label_value(ring)
        self.identity = identity
        self.name = lease_name(self.ring, identity)
        self.lease_duration = max(1, int(round(lease_duration)))
        self._lease: dict[str, Any] | None = None
        self._lock = threading.Lock()  # a timed-out attempt's thread may still run when the next starts

    # ---- the coordinator's calls (async, bounded) ---------------------------------------------------

    async def renew(self, drained: str | None, timeout: float) -> None:
        """Create or renew our Lease, saying we drained for ``drained``; raises on failure."""
        await self._bounded(self._renew, timeout, drained, timeout)

    async def members(self, timeout: float) -> list[LeaseView]:
        """Every Lease of the ring (ours included)."""
        views: list[LeaseView] = await self._bounded(self._list, timeout, timeout)
        return views

    async def delete(self, view: LeaseView, timeout: float) -> None:
        await self._bounded(self._delete, timeout, view.name, view.resource_version, timeout)

    async def release(self, timeout: float) -> None:
        """Delete our Lease: we leave the ring (others need no acknowledgement from us any more)."""
        await self._bounded(self._delete, timeout, self.name, None, timeout)

    async def _bounded(self, fn: Any, timeout: float, *args: Any) -> Any:
        attempt = asyncio.get_running_loop().run_in_executor(None, fn, *args)
        attempt.add_done_callback(lambda f: f.cancelled() or f.exception())
        async with asyncio.timeout(timeout):
            return await asyncio.shield(attempt)

    # ---- blocking (worker thread) ---------------------------------------------------------------------

    def _path(self, name: str | None = None) -> str:
        base = f"/apis/coordination.k8s.io/v1/namespaces/{quote(self.namespace, safe='')}/leases"
        return f"{base}/{quote(name, safe='')}" if name else base

    def _call(self, method: str, path: str, body: Any, timeout: float,
              query: list[tuple[str, str]] | None = None) -> Any:
        return self._kube.request_once(method, path, body, query=query, read_timeout=timeout,
                                       connect_timeout=timeout)

    def _fill(self, lease: dict[str, Any], drained: str | None) -> dict[str, Any]:
        now = format_micro_time(time.time())
        lease = copy.deepcopy(lease)
        meta = lease.setdefault("metadata", {})
        meta["name"], meta["namespace"] = self.name, self.namespace
        meta.setdefault("labels", {})[RING_LABEL] = self.ring
        annotations = meta.setdefault("annotations", {})
        if drained:
            annotations[DRAINED_ANNOTATION] = drained
        else:
            annotations.pop(DRAINED_ANNOTATION, None)
        spec = lease.setdefault("spec", {})
        if spec.get("holderIdentity") != self.identity:
            spec["acquireTime"] = now
        spec.update(holderIdentity=self.identity, leaseDurationSeconds=self.lease_duration, renewTime=now)
        return lease

    def _renew(self, drained: str | None, timeout: float) -> None:
        with self._lock:
            if self._lease is None:
                body = self._fill({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease"}, drained)
                try:
                    self._lease = self._call("POST", self._path(), body, timeout)
                    return
                except Conflict:  # left by an earlier process of ours with this identity: take it over
                    self._lease = self._call("GET", self._path(self.name), None, timeout)
            assert self._lease is not None
            try:
                self._lease = self._call("PUT", self._path(self.name), self._fill(self._lease, drained),
                                         timeout)
            except Conflict:  # written since our last write (a label edit?): read it, write again
                current = self._call("GET", self._path(self.name), None, timeout)
                self._lease = self._call("PUT", self._path(self.name), self._fill(current, drained), timeout)
            except NotFound:
                raise LeaseLost(f"lease {self.namespace}/{self.name} was deleted while we held it") from None

    def _list(self, timeout: float) -> list[LeaseView]:
        selector = f"{RING_LABEL}={self.ring}"
        answer = self._call("GET", self._path(), None, timeout, query=[("labelSelector", selector)])
        items = (answer.get("items") or []) if isinstance(answer, dict) else []
        return [LeaseView.from_lease(item) for item in items if isinstance(item, dict)]

    def _delete(self, name: str, resource_version: str | None, timeout: float) -> None:
        body: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if resource_version:
            body["preconditions"] = {"resourceVersion": resource_version}
        try:
            self._call("DELETE", self._path(name), body, timeout)
        except (NotFound, Conflict):
            pass  # already gone, or renewed since: nothing to do
        if name == self.name:
            with self._lock:
                self._lease = None
