"""Run an example role the way the operator does, without the operator.

The operator's run for a custom resource is "the role, with extra vars built from the object, through an
executor". These helpers do exactly that with the runner's own pieces: ``extravars.build_extra_vars`` (same
names, snake_casing and ``!unsafe`` marking) and the warm executor (the operator's default: same private
data dir, extra-vars file and events), against the test's API server (the real control plane or a
sandbox: tests/examples/conftest.py), so a role's whole lifecycle can be tested before
(and independently of) the watch loop.
"""

from __future__ import annotations

import asyncio
import atexit
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ansible_operator import collections, extravars
from ansible_operator.executors import make_executor
from ansible_operator.executors.base import Executor, RunRequest
from ansible_operator.executors.datadir import new_run_id
from ansible_operator.kubetypes import KubeObject
from ansible_operator.results import ResultCollector

REPO = Path(__file__).resolve().parents[2]
ROLES = REPO / "roles"


@dataclass(frozen=True)
class Kind:
    group: str
    version: str
    kind: str
    plural: str

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"


SAMPLEDB = Kind("db.ansible-operator.dev", "v1alpha1", "SampleDB", "sampledbs")
MEMCACHED = Kind("cache.example.com", "v1alpha1", "Memcached", "memcacheds")
ETCDCLUSTER = Kind("etcd.database.example.com", "v1beta2", "EtcdCluster", "etcdclusters")


@dataclass(frozen=True)
class RoleRun:
    status: str
    """The executor's outcome: successful, failed, timeout, canceled or error."""
    events: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.status == "successful"

    @property
    def output(self) -> str:
        return "\n".join(str(e.get("stdout") or "") for e in self.events) + (
            f"\n{self.error}" if self.error else ""
        )

    @property
    def requeue_after(self) -> float | None:
        """The delay a ``requeue_after`` task asked for, read from the events as the operator reads it."""
        collector = ResultCollector()
        for event in self.events:
            collector.feed(event)
        return collector.requeue_after

    def failure_messages(self) -> list[str]:
        """``msg`` of every failed task that counted (not ``ignore_errors``), in order."""
        out: list[str] = []
        for event in self.events:
            data = event.get("event_data") or {}
            if event.get("event") == "runner_on_failed" and not data.get("ignore_errors"):
                out.append(str((data.get("res") or {}).get("msg", "")))
        return out


class _SharedExecutor:
    """One warm executor on a private event loop, shared by every role run of the test session."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._executor: Executor | None = None

    def run(self, request: RunRequest, timeout: float) -> RoleRun:
        with self._lock:
            if self._executor is None:
                self._loop = asyncio.new_event_loop()
                threading.Thread(target=self._loop.run_forever, name="roleruns", daemon=True).start()
                executor = make_executor("warm")
                asyncio.run_coroutine_threadsafe(executor.start(), self._loop).result(120)
                self._executor = executor
                atexit.register(self.close)
        events: list[dict[str, Any]] = []
        assert self._loop is not None
        future = asyncio.run_coroutine_threadsafe(self._executor.run(request, events.append), self._loop)
        outcome = future.result(timeout + 30)
        return RoleRun(outcome.status, events, outcome.error)

    def close(self) -> None:
        with self._lock:
            if self._executor is not None and self._loop is not None:
                asyncio.run_coroutine_threadsafe(self._executor.close(), self._loop).result(60)
                self._loop.call_soon_threadsafe(self._loop.stop)
            self._executor = self._loop = None


_EXECUTOR = _SharedExecutor()


def run_role(role: str, obj: KubeObject, kind: Kind, kubeconfig: Path, workdir: Path,
             *, finalizer_vars: dict[str, Any] | None = None, timeout: float = 240) -> RoleRun:
    """Run ``roles/<role>`` for ``obj`` (as read from the API) with the operator's extra vars."""
    evars = extravars.build_extra_vars(obj, watch_vars={}, snake_case=True, mark_unsafe=True,
                                       group=kind.group, kind=kind.kind, finalizer_vars=finalizer_vars)
    request = RunRequest(
        run_id=new_run_id(), private_data_dir=workdir, extra_vars=evars, role=str(ROLES / role),
        verbosity=0, timeout=timeout, roles_path=(ROLES,), collections_path=tuple(collections.paths()),
        envvars={"K8S_AUTH_KUBECONFIG": str(kubeconfig), "KUBECONFIG": str(kubeconfig),
                 "ANSIBLE_GATHERING": "explicit"},
    )
    return _EXECUTOR.run(request, timeout)
