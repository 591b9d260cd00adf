"""End-to-end harness: an API server (the session's real control plane, or a sandbox per test with
``ANSIBLE_OPERATOR_TEST_API=sandbox``: tests/kube.py), the test CRD, and the operator as a real subprocess.

The operator runs exactly as a user runs it (``python -m ansible_operator run --kubeconfig ...``), watching
only the test's own namespace (``cluster.ns``: the control plane is shared by every test of the run); tests
talk to the API server only through the ``kubernetes`` client, like kubectl would.
"""

from __future__ import annotations

import os
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import kubernetes
import pytest

from ansible_operator_sandbox import Sandbox
from tests import kube
from tests.harness import (
    GROUP,
    KIND,
    PLURAL,
    VERSION,
    Widgets,
    read_runs,
    served_port,
    spawn_operator,
    stop_process,
    wait_for,
    widget_sandbox,
)

HERE = Path(__file__).parent
NAMESPACE = "e2e"
EXECUTORS = [e for e in os.environ.get("E2E_EXECUTORS", "runner,warm").split(",") if e]
ONE_EXECUTOR = "warm" if "warm" in EXECUTORS else EXECUTORS[0]
"""For tests about the runner's machinery rather than the executor: the cheaper one (a run of the SDK's
way, the runner, costs ~2.8 CPU s; one of the warm executor ~0.2)."""
one_executor = pytest.mark.parametrize("executor", [ONE_EXECUTOR], indirect=True)
"""The mark that runs a test (or, in ``pytestmark``, a module) on :data:`ONE_EXECUTOR` only."""
__all__ = ["GROUP", "KIND", "ONE_EXECUTOR", "PLURAL", "VERSION", "one_executor", "wait_for"]


@dataclass
class Cluster(Widgets):
    sandbox: Sandbox | None  # None on the real control plane
    kubeconfig: Path
    api: kubernetes.client.ApiClient
    ns: str = NAMESPACE  # this test's namespace (unique on the shared real control plane)

    def __post_init__(self) -> None:
        self._clients(self.api)

    # widgets
    def create_widget(self, name: str, spec: dict[str, Any], namespace: str | None = None,
                      **meta: Any) -> dict[str, Any]:
        return self.create(namespace or self.ns, name, spec, **meta)

    def get_widget(self, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        return self.get(namespace or self.ns, name)

    def patch_widget(self, name: str, patch: dict[str, Any], namespace: str | None = None) -> dict[str, Any]:
        return self.patch(namespace or self.ns, name, patch)

    def delete_widget(self, name: str, namespace: str | None = None) -> None:
        self.delete(namespace or self.ns, name)

    def condition(self, name: str, ctype: str, namespace: str | None = None) -> dict[str, Any] | None:
        obj = self.get_widget(name, namespace) or {}
        for cond in (obj.get("status") or {}).get("conditions") or []:
            if cond.get("type") == ctype:
                return cond
        return None

    def wait_condition(self, name: str, ctype: str, status: str = "True", timeout: float = 180.0,
                       namespace: str | None = None, generation: int | None = None) -> dict[str, Any]:
        """Wait for the condition; 180 s by default: a first run includes the operator's start (the warm
        executor's zygote), over 60 s on 2 cores beside three CI stages, three control planes and two CPU
        hogs (CI at 80f135f, low stage)."""
        namespace = namespace or self.ns
        def check() -> dict[str, Any] | None:
            cond = self.condition(name, ctype, namespace)
            if not cond or cond.get("status") != status:
                return None
            if generation is not None and cond.get("observedGeneration") != generation:
                return None
            return cond
        return wait_for(check, timeout, what=f"{ctype}={status} on {namespace}/{name}")

    def wait_deleted(self, name: str, timeout: float = 180.0, namespace: str | None = None,
                     detail: Callable[[], str] | None = None) -> None:
        """Wait for a widget deleted with our finalizer to be gone: its finalizer run may queue behind a
        run in flight (the echo of the role's own ConfigMap update) and, with ansible-runner, each run
        starts a fresh ``ansible-playbook``: over 60 s for the two on a loaded CI machine (CI at 23e89f8,
        high stage). So as long as a first run may take."""
        wait_for(lambda: self.get_widget(name, namespace) is None, timeout,
                 what=f"{namespace or self.ns}/{name} deleted", detail=detail)

    def configmap(self, name: str, namespace: str | None = None) -> dict[str, str] | None:  # type: ignore[override]
        return super().configmap(namespace or self.ns, name)

    def events_for(self, name: str, namespace: str | None = None) -> list[Any]:
        items = self.core.list_namespaced_event(namespace or self.ns).items
        return [e for e in items if e.involved_object and e.involved_object.name == name]


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    if kube.real():
        shared = kube.shared()
        ns = shared.namespace("e2e")
        api = shared.api_client()
        try:
            yield Cluster(None, shared.kubeconfig, api, ns)
        finally:
            api.close()
            shared.cleanup()
        return
    handle = widget_sandbox(tmp_path / "kubeconfig")
    try:
        api = handle.api_client()
        c = Cluster(handle.sandbox, handle.kubeconfig, api)
        c.core.create_namespace({"metadata": {"name": NAMESPACE}})
        wait_for(lambda: c.served(NAMESPACE), 10, what="Widget CRD served")
        yield c
        api.close()
    finally:
        handle.sandbox.stop_thread()


@dataclass
class OperatorProcess:
    proc: subprocess.Popen[bytes]
    log_path: Path
    artifacts: Path
    watches_file: Path

    def logs(self) -> str:
        return self.log_path.read_text(errors="replace")

    namespace: str = NAMESPACE

    def runs(self, name: str, phase: str | None = None, namespace: str | None = None) -> list[dict[str, Any]]:
        """run.json summaries of one widget, oldest first."""
        return read_runs(self.artifacts, namespace or self.namespace, name, phase)

    def stop(self, timeout: float = 30.0) -> int:
        return stop_process(self.proc, timeout)

    def port(self, path: str = "/metrics") -> int:
        """Where it serves ``path``, started with ``127.0.0.1:0`` for it (``tests.harness.served_port``)."""
        return served_port(self.logs, lambda: self.proc.poll() is None, path)


def default_watch(**overrides: Any) -> dict[str, Any]:
    watch: dict[str, Any] = {
        "group": GROUP, "version": VERSION, "kind": KIND,
        "role": str(HERE / "roles" / "widget"),
        "finalizer": {"name": f"{GROUP}/finalizer", "role": str(HERE / "roles" / "widget_finalizer")},
        "vars": {"from_watch": "hello"},
    }
    watch.update(overrides)
    return watch


@pytest.fixture(params=EXECUTORS)
def executor(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def start_operator(
    cluster: Cluster, tmp_path: Path, executor: str
) -> Iterator[Callable[..., OperatorProcess]]:
    started: list[OperatorProcess] = []

    def start(watches: list[dict[str, Any]] | None = None, *extra: str, name: str = "op",
              env: dict[str, str] | None = None, kubeconfig: Path | None = None) -> OperatorProcess:
        """The operator on ``cluster.kubeconfig`` (or ``kubeconfig``: a proxy's, say), watching
        ``cluster.ns``."""
        workdir = tmp_path / name
        workdir.mkdir()
        proc, watches_file, artifacts, log_path = spawn_operator(
            workdir, watches if watches is not None else [default_watch()], kubeconfig or cluster.kubeconfig,
            executor, *extra, env=env, namespace=cluster.ns)
        op = OperatorProcess(proc, log_path, artifacts, watches_file, cluster.ns)
        started.append(op)
        return op

    yield start
    for op in started:
        op.stop()
        if op.proc.returncode not in (0, -signal.SIGTERM, None):
            print(f"--- operator log ({op.log_path}) exit={op.proc.returncode} ---\n{op.logs()[-5000:]}")
