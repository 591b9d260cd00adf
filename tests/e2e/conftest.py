"""End-to-end harness: a sandbox API server, the test CRD, and the operator as a real subprocess.

The operator runs exactly as a user runs it (``python -m ansible_operator run --kubeconfig ...``); tests
talk to the API server only through the ``kubernetes`` client, like kubectl would.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import kubernetes
import pytest
import yaml
from kubernetes.client.rest import ApiException

from ansible_operator.sandbox import Sandbox
from ansible_operator.sandbox.testing import start_in_thread

HERE = Path(__file__).parent
GROUP, VERSION, PLURAL, KIND = "test.ansible-operator.dev", "v1", "widgets", "Widget"
NAMESPACE = "e2e"
EXECUTORS = [e for e in os.environ.get("E2E_EXECUTORS", "runner,warm").split(",") if e]


def wait_for(
    predicate: Callable[[], Any], timeout: float = 60.0, interval: float = 0.2, what: str = ""
) -> Any:
    """Poll until ``predicate()`` is truthy; fail with ``what`` and the last value otherwise."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = predicate()
        except ApiException as exc:
            last = exc
            if exc.status != 404:
                raise
        if last and not isinstance(last, Exception):
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what or predicate}: last={last!r}")


@dataclass
class Cluster:
    sandbox: Sandbox
    kubeconfig: Path
    api: kubernetes.client.ApiClient
    core: kubernetes.client.CoreV1Api = field(init=False)
    custom: kubernetes.client.CustomObjectsApi = field(init=False)

    def __post_init__(self) -> None:
        self.core = kubernetes.client.CoreV1Api(self.api)
        self.custom = kubernetes.client.CustomObjectsApi(self.api)

    # widgets
    def create_widget(self, name: str, spec: dict[str, Any], namespace: str = NAMESPACE,
                      **meta: Any) -> dict[str, Any]:
        body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": KIND,
                "metadata": {"name": name, "namespace": namespace, **meta}, "spec": spec}
        return self.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)

    def get_widget(self, name: str, namespace: str = NAMESPACE) -> dict[str, Any] | None:
        try:
            return self.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def patch_widget(self, name: str, patch: dict[str, Any], namespace: str = NAMESPACE) -> dict[str, Any]:
        return self.custom.patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name, patch)

    def delete_widget(self, name: str, namespace: str = NAMESPACE) -> None:
        self.custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)

    def condition(self, name: str, ctype: str, namespace: str = NAMESPACE) -> dict[str, Any] | None:
        obj = self.get_widget(name, namespace) or {}
        for cond in (obj.get("status") or {}).get("conditions") or []:
            if cond.get("type") == ctype:
                return cond
        return None

    def wait_condition(self, name: str, ctype: str, status: str = "True", timeout: float = 60.0,
                       namespace: str = NAMESPACE, generation: int | None = None) -> dict[str, Any]:
        def check() -> dict[str, Any] | None:
            cond = self.condition(name, ctype, namespace)
            if not cond or cond.get("status") != status:
                return None
            if generation is not None and cond.get("observedGeneration") != generation:
                return None
            return cond
        return wait_for(check, timeout, what=f"{ctype}={status} on {namespace}/{name}")

    def configmap(self, name: str, namespace: str = NAMESPACE) -> dict[str, str] | None:
        try:
            return self.core.read_namespaced_config_map(name, namespace).data or {}
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def events_for(self, name: str, namespace: str = NAMESPACE) -> list[Any]:
        items = self.core.list_namespaced_event(namespace).items
        return [e for e in items if e.involved_object and e.involved_object.name == name]


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    handle = start_in_thread(tmp_path / "kubeconfig", crds=[HERE / "crds"])
    try:
        api = handle.api_client()
        c = Cluster(handle.sandbox, handle.kubeconfig, api)
        c.core.create_namespace({"metadata": {"name": NAMESPACE}})
        wait_for(lambda: _served(c), 10, what="Widget CRD served")
        yield c
        api.close()
    finally:
        handle.sandbox.stop_thread()


def _served(c: Cluster) -> bool:
    try:
        c.custom.list_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL)
        return True
    except ApiException:
        return False


@dataclass
class OperatorProcess:
    proc: subprocess.Popen[bytes]
    log_path: Path
    artifacts: Path
    watches_file: Path

    def logs(self) -> str:
        return self.log_path.read_text(errors="replace")

    def runs(self, name: str, phase: str | None = None, namespace: str = NAMESPACE) -> list[dict[str, Any]]:
        """run.json summaries of one widget, oldest first."""
        import json

        base = self.artifacts / GROUP / VERSION / KIND / namespace / name
        if not base.is_dir():
            return []
        out = []
        for run_dir in sorted(p for p in base.iterdir() if p.is_dir()):
            summary = run_dir / "run.json"
            if summary.is_file():
                data = json.loads(summary.read_text())
                if phase is None or data.get("phase") == phase:
                    out.append(data)
        return out

    def stop(self, timeout: float = 30.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return self.proc.returncode


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
              env: dict[str, str] | None = None) -> OperatorProcess:
        workdir = tmp_path / name
        workdir.mkdir()
        watches_file = workdir / "watches.yaml"
        watches_file.write_text(yaml.safe_dump(watches if watches is not None else [default_watch()]))
        artifacts = workdir / "artifacts"
        log_path = workdir / "operator.log"
        args = [sys.executable, "-m", "ansible_operator", "run", "--watches-file", str(watches_file),
                "--kubeconfig", str(cluster.kubeconfig), "--artifacts-dir", str(artifacts),
                "--executor", executor, "--metrics-bind-address", "0", "--health-probe-bind-address", "0",
                *extra]
        # The test roles use no facts: skip gathering them (~1 s per run), as the runner image does.
        proc_env = {**os.environ, "PYTHONUNBUFFERED": "1", "ANSIBLE_GATHERING": "explicit", **(env or {})}
        proc_env.pop("KUBECONFIG", None)
        with open(log_path, "wb") as log_file:
            proc = subprocess.Popen(
                args,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                cwd=workdir,
                env=proc_env,
                start_new_session=True,
            )
        op = OperatorProcess(proc, log_path, artifacts, watches_file)
        started.append(op)
        return op

    yield start
    for op in started:
        op.stop()
        if op.proc.returncode not in (0, -signal.SIGTERM, None):
            print(f"--- operator log ({op.log_path}) exit={op.proc.returncode} ---\n{op.logs()[-5000:]}")
