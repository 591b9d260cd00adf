"""Test helpers: the sandbox in-thread (``SandboxHandle``) or as a subprocess (``SandboxProcess``).

``tests/conftest.py`` builds its ``sandbox`` fixture on these; they are importable by any test that needs
a sandbox of its own (restart tests: the same ``--data-dir`` and port across two processes).
"""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from ansible_operator_sandbox import Sandbox


@dataclass
class SandboxHandle:
    """A started in-thread sandbox: ``url``, ``kubeconfig`` (a file) and the :class:`Sandbox` itself."""

    sandbox: Sandbox
    kubeconfig: Path

    @property
    def url(self) -> str:
        return self.sandbox.url

    def api_client(self) -> Any:
        """A ``kubernetes.client.ApiClient`` for this sandbox (no global configuration is touched)."""
        return api_client_for(self.kubeconfig)

    def kubectl_env(self) -> dict[str, str]:
        """Environment for running kubectl / ansible against this sandbox.

        ``KUBECACHEDIR`` is private to this sandbox: kubectl caches discovery per host:port, and a later
        sandbox on a reused port must not be served the previous one's resource list.
        """
        return dict(os.environ, KUBECONFIG=str(self.kubeconfig), K8S_AUTH_KUBECONFIG=str(self.kubeconfig),
                    KUBECACHEDIR=str(self.kubeconfig.parent / (self.kubeconfig.name + ".cache")))


def wait_for(fn: Callable[[], Any], timeout: float = 10.0, interval: float = 0.05, what: str = "") -> Any:
    """Poll ``fn`` until it returns something truthy (returned), or fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s{' waiting for ' + what if what else ''}, last={last!r}")


def api_client_for(kubeconfig: str | Path) -> Any:
    import kubernetes

    cfg = kubernetes.client.Configuration()
    kubernetes.config.load_kube_config(config_file=str(kubeconfig), client_configuration=cfg)
    return kubernetes.client.ApiClient(cfg)


def call_api(api_client: Any, method: str, path: str, body: Any = None, *,
             content_type: str = "application/json", query: Iterable[tuple[str, str]] = (),
             response_type: str = "object") -> Any:
    """A raw request through a ``kubernetes.client.ApiClient`` (``PATCH`` with any patch type, say), the
    answer deserialized as ``response_type`` (a model name such as ``V1ConfigMap``; ``object``: the JSON);
    ``ApiException`` for a non-2xx answer. Works with the client up to 33.x (everything in ``call_api``) and
    with the pydantic-generated one, 37 (``param_serialize``, ``call_api(method, url, ...)``,
    ``response_deserialize``)."""
    headers = {"Accept": "application/json", "Content-Type": content_type}
    if not hasattr(api_client, "param_serialize"):
        return api_client.call_api(path, method, query_params=list(query), header_params=headers, body=body,
                                   response_type=response_type, auth_settings=["BearerToken"],
                                   _return_http_data_only=True)
    request = api_client.param_serialize(method, path, query_params=list(query), header_params=headers,
                                         body=body, auth_settings=["BearerToken"])
    response = api_client.call_api(*request)
    response.read()
    return api_client.response_deserialize(response, {"2XX": response_type}).data


def start_in_thread(kubeconfig: str | Path, crds: Iterable[str | Path] = (), simulate: bool = True,
                    data_dir: str | Path | None = None, port: int = 0, secure: bool = False) -> SandboxHandle:
    """An in-thread sandbox and its kubeconfig (``secure``: TLS, authentication, enforced RBAC)."""
    sb = Sandbox(port=port, data_dir=data_dir, crds=crds, simulate=simulate, secure=secure)
    sb.start_in_thread()
    return SandboxHandle(sb, sb.write_kubeconfig(kubeconfig))


@dataclass
class SandboxProcess:
    """``ansible-operator-sandbox`` running as a child process."""

    proc: subprocess.Popen[str]
    url: str
    kubeconfig: Path
    port: int
    output: list[str] = field(default_factory=list)

    def stop(self, timeout: float = 15.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout)
        return int(self.proc.returncode)

    def api_client(self) -> Any:
        return api_client_for(self.kubeconfig)


def start_process(kubeconfig: str | Path, port: int = 0, data_dir: str | Path | None = None,
                  crds: Iterable[str | Path] = (), simulate: bool = True, timeout: float = 30.0,
                  log_level: str = "WARNING", secure: bool = False) -> SandboxProcess:
    """Start ``python -m ansible_operator_sandbox ...`` and wait for its URL line."""
    cmd = [sys.executable, "-m", "ansible_operator_sandbox", "--port", str(port), "--kubeconfig",
           str(kubeconfig), "--log-level", log_level]
    if data_dir is not None:
        cmd += ["--data-dir", str(data_dir)]
    for c in crds:
        cmd += ["--crds", str(c)]
    if not simulate:
        cmd.append("--no-simulate")
    if secure:
        cmd.append("--secure")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
    lines: list[str] = []
    got: queue.Queue[str | None] = queue.Queue()

    def drain() -> None:  # keeps reading for the life of the process, so the pipe never fills up
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            got.put(line)
        got.put(None)

    threading.Thread(target=drain, name="sandbox-output", daemon=True).start()
    deadline = time.monotonic() + timeout
    url = ""
    while time.monotonic() < deadline:
        try:
            line = got.get(timeout=0.2)
        except queue.Empty:
            continue
        if line is None:
            break
        if line.startswith("sandbox: serving "):
            url = line.split()[-1]
        if line.startswith("kubeconfig: ") and url:
            port_num = int(url.rsplit(":", 1)[1])
            return SandboxProcess(proc, url, Path(line.split(" ", 1)[1].strip()), port_num, lines)
    proc.kill()
    proc.wait()
    raise RuntimeError("sandbox process did not start:\n" + "".join(lines))
