"""What the end-to-end and fault-injection suites share (tests/e2e/conftest.py, tests/faults/conftest.py):
the Widget test CRD, waiting on a condition, a sandbox with that CRD served, and the operator started as
a real subprocess (``python -m ansible_operator run``, exactly as a user starts it) and stopped.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

import kubernetes
import psutil
import yaml
from kubernetes.client.rest import ApiException

from ansible_operator_sandbox.testing import SandboxHandle, start_in_thread

TESTS = Path(__file__).parent
E2E = TESTS / "e2e"
CRDS = E2E / "crds"
GROUP, VERSION, PLURAL, KIND = "test.ansible-operator.dev", "v1", "widgets", "Widget"


def wait_for(
    predicate: Callable[[], Any], timeout: float = 60.0, interval: float = 0.2, what: str = "",
    detail: Callable[[], str] | None = None,
) -> Any:
    """Poll until ``predicate()`` is truthy (returned); 404s count as "not yet"; fail after ``timeout``
    with ``what``, the last value and ``detail()`` (an operator's log tail, say)."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = predicate()
        except ApiException as exc:
            if exc.status != 404:
                raise
            last = exc
        if last and not isinstance(last, Exception):
            return last
        time.sleep(interval)
    message = f"timed out after {timeout}s waiting for {what or predicate}: last={last!r}"
    if detail is not None:
        try:
            message = f"{message}\n{detail()}"
        except Exception as exc:  # noqa: BLE001 - the timeout is the failure; the detail is a bonus
            message = f"{message}\n(no detail: {type(exc).__name__}: {exc})"
    raise AssertionError(message)



SERVING = re.compile(r"serving ((?:/\S+ )+)on \S+:(\d+)$", re.MULTILINE)
"""The operator's log line for each listener it opened: ``serving /metrics on 127.0.0.1:40123``."""


def served_port(logs: Callable[[], str], alive: Callable[[], bool], path: str = "/metrics",
                timeout: float = 120.0) -> int:
    """The port an operator started with a ``127.0.0.1:0`` bind address serves ``path`` on, read from its
    log. A port the test found free and passed in can be taken by another process before the operator binds
    it (a loaded machine's operator binds seconds after its start: the official CI at 556d1f9, where the
    operator exited with "address already in use"); port 0 leaves the choice to the kernel at the bind."""
    def found() -> int | None:
        for paths, port in SERVING.findall(logs()):
            if path in paths.split():
                return int(port)
        if not alive():
            raise AssertionError(f"the operator exited before serving {path}:\n{logs()[-3000:]}")
        return None

    return int(wait_for(found, timeout, what=f"the operator serving {path}",
                        detail=lambda: logs()[-3000:]))


class Widgets:
    """Widget custom objects and ConfigMaps through the ``kubernetes`` client, namespace first."""

    api: kubernetes.client.ApiClient
    core: kubernetes.client.CoreV1Api
    custom: kubernetes.client.CustomObjectsApi

    def _clients(self, api: kubernetes.client.ApiClient) -> None:
        self.core = kubernetes.client.CoreV1Api(api)
        self.custom = kubernetes.client.CustomObjectsApi(api)

    def create(self, ns: str, name: str, spec: dict[str, Any], **meta: Any) -> dict[str, Any]:
        body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": KIND,
                "metadata": {"name": name, "namespace": ns, **meta}, "spec": spec}
        return self.custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, body)

    def get(self, ns: str, name: str) -> dict[str, Any] | None:
        try:
            return self.custom.get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, name)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def patch(self, ns: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        return self.custom.patch_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, name, patch)

    def delete(self, ns: str, name: str) -> None:
        self.custom.delete_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, name)

    def configmap(self, ns: str, name: str) -> dict[str, str] | None:
        try:
            return self.core.read_namespaced_config_map(name, ns).data or {}
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def raw(self, method: str, path: str, body: bytes | None = None,
            content_type: str = "application/json") -> tuple[int, bytes]:
        """One request with a body sent as given (the ``kubernetes`` client would encode it first, and
        Python's JSON encoder and decoder give up near 1,000 levels of nesting): (status, answer)."""
        headers = {"Accept": "application/json", "Content-Type": content_type}
        cfg = self.api.configuration
        if cfg.api_key.get("authorization") or cfg.api_key.get("BearerToken"):
            headers["Authorization"] = cfg.get_api_key_with_prefix("BearerToken") or \
                cfg.get_api_key_with_prefix("authorization")
        answer = self.api.rest_client.pool_manager.request(method, cfg.host + path, body=body,
                                                           headers=headers)
        return answer.status, answer.data

    def served(self, ns: str) -> bool:
        """Whether the Widget CRD is served (a list in ``ns`` answers)."""
        try:
            self.custom.list_namespaced_custom_object(GROUP, VERSION, ns, PLURAL)
            return True
        except ApiException:
            return False


def widget_sandbox(kubeconfig: Path) -> SandboxHandle:
    """An in-thread sandbox API server with the Widget CRD (tests/e2e/crds); the caller stops it
    (``handle.sandbox.stop_thread()``)."""
    return start_in_thread(kubeconfig, crds=[CRDS])


# ------------------------------------------------------------------------------------------------ operator


def spawn_operator(workdir: Path, watches: list[dict[str, Any]], kubeconfig: Path, executor: str,
                   *flags: str, artifacts: Path | None = None, env: dict[str, str] | None = None,
                   append_log: bool = False, namespace: str | None = None,
                   ) -> tuple[subprocess.Popen[bytes], Path, Path, Path]:
    """``python -m ansible_operator run`` in ``workdir`` (created) with ``watches``, in a session of its own
    (so ``SIGKILL`` of it is a crash, not a clean shutdown); stdout and stderr to ``operator.log``.
    ``namespace``: the operator watches only it (``WATCH_NAMESPACE``, as the SDK reads it) unless the
    flags or ``env`` say otherwise: the real control plane is shared by every test of the run.
    Returns (process, watches file, artifacts dir, log path)."""
    workdir.mkdir(parents=True, exist_ok=True)
    watches_file = workdir / "watches.yaml"
    watches_file.write_text(yaml.safe_dump(watches))
    artifacts = artifacts or workdir / "artifacts"
    log_path = workdir / "operator.log"
    args = [sys.executable, "-m", "ansible_operator", "run", "--watches-file", str(watches_file),
            "--kubeconfig", str(kubeconfig), "--artifacts-dir", str(artifacts), "--executor", executor,
            "--metrics-bind-address", "0", "--health-probe-bind-address", "0", *flags]
    # The test roles use no facts: skip gathering them (~1 s per run), as the runner image does.
    proc_env = {**os.environ, "PYTHONUNBUFFERED": "1", "ANSIBLE_GATHERING": "explicit"}
    if namespace and not any(f.startswith("--watch-namespace") for f in flags):
        proc_env["WATCH_NAMESPACE"] = namespace
    proc_env.update(env or {})
    proc_env.pop("KUBECONFIG", None)
    with open(log_path, "ab" if append_log else "wb") as log_file:
        proc = subprocess.Popen(args, stdout=log_file, stderr=subprocess.STDOUT, cwd=workdir, env=proc_env,
                                start_new_session=True)
    return proc, watches_file, artifacts, log_path


def stop_process(proc: subprocess.Popen[bytes], timeout: float = 30.0) -> int:
    """SIGTERM, then SIGKILL after ``timeout``; the exit status."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
    return proc.returncode


def family(pid: int) -> list[psutil.Process]:
    """A process and all its descendants (empty if it is gone)."""
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def read_runs(artifacts: Path, ns: str, name: str, phase: str | None = None) -> list[dict[str, Any]]:
    """run.json summaries of one widget, oldest first (of one ``phase`` if given); one being written is
    skipped."""
    out = []
    for summary in sorted((artifacts / GROUP / VERSION / KIND / ns / name).glob("*/run.json")):
        try:
            data = json.loads(summary.read_text())
        except (OSError, ValueError):
            continue
        if phase is None or data.get("phase") == phase:
            out.append(data)
    return out
