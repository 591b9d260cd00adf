"""The API server the suite runs against: the real control plane by default, the sandbox on request.

* ``ANSIBLE_OPERATOR_TEST_API=real`` (default): one real control plane (etcd, kube-apiserver,
  kube-controller-manager, kube-scheduler, kwok: :mod:`ansible_operator.controlplane`) per test run, started
  by the pytest process that runs the session (the xdist controller) before any worker exists and shared by
  all workers through ``ANSIBLE_OPERATOR_TEST_KUBECONFIG``; each test gets namespaces of its own
  (:meth:`SharedCluster.namespace`). Tests that kill or restart the API server or etcd start a private one
  (:func:`private_control_plane`). Where no binaries can be had (no Go, no ``KUBEBUILDER_ASSETS``, nothing
  cached) the run says so loudly and falls back to the sandbox; ``ANSIBLE_OPERATOR_TEST_REQUIRE_REAL=1`` (CI)
  makes that an error instead.
* ``ANSIBLE_OPERATOR_TEST_API=sandbox``: every such test starts its own sandbox, as before.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kubernetes
import pytest

from ansible_operator.controlplane import BinariesUnavailable, ControlPlane, find

TESTS = Path(__file__).parent
REPO = TESTS.parent
BACKEND = "ANSIBLE_OPERATOR_TEST_API"
KUBECONFIG = "ANSIBLE_OPERATOR_TEST_KUBECONFIG"
DIRECTORY = "ANSIBLE_OPERATOR_TEST_CONTROL_PLANE"
REQUIRE_REAL = "ANSIBLE_OPERATOR_TEST_REQUIRE_REAL"
# CRDs every shared-cluster test may use, installed once at the start (cluster-scoped: tests never delete
# them, so parallel tests cannot pull them from under each other).
SHARED_CRDS = (TESTS / "e2e" / "crds", REPO / "crds")


def backend() -> str:
    value = os.environ.get(BACKEND, "real")
    if value not in ("real", "sandbox"):
        raise pytest.UsageError(f"{BACKEND}={value!r}: expected 'real' or 'sandbox'")
    return value


def real() -> bool:
    return backend() == "real"


# ------------------------------------------------------------------------------------ session (controller)


@dataclass
class _Session:
    plane: ControlPlane | None = None
    directory: Path | None = None
    rest: dict[str, int] = field(default_factory=dict)
    peak: dict[str, int] = field(default_factory=dict)
    started_in: float = 0.0
    fallback: str | None = None
    _stop: threading.Event = field(default_factory=threading.Event)

    def sample(self) -> None:
        while not self._stop.wait(5):
            if self.plane is None:
                return
            for name, rss in self.plane.memory().items():
                self.peak[name] = max(self.peak.get(name, 0), rss)


SESSION = _Session()


def _say(message: str) -> None:
    print(f"[control plane] {message}", file=sys.stderr, flush=True)


# Directories (from the repository's root) none of whose tests use an API server of the suite's: a run of
# only these starts none. sandbox/ holds the sandbox package's own tests (each starts its own sandbox).
NO_API_SERVER = (("tests", "unit"), ("sandbox",))


def _needs_api_server(config: pytest.Config) -> bool:
    """False when every path given on the command line is under :data:`NO_API_SERVER` (no path: the whole
    suite, which needs one)."""
    paths = [a.split("::", 1)[0] for a in config.args if not a.startswith("-")]
    if not paths:
        return True
    for arg in paths:
        try:
            rel = (Path(config.invocation_params.dir) / arg).resolve().relative_to(TESTS.parent)
        except ValueError:
            return True
        if not any(rel.parts[:len(prefix)] == prefix for prefix in NO_API_SERVER):
            return True
    return False


SHARDED_LIST_AND_WATCH = (1, 36)
"""The Kubernetes version that serves ``shardSelector`` (KEP-5866, alpha: behind a feature gate)."""


def _gates(binaries: Any) -> list[str]:
    """Alpha features the suite tests where the kube-apiserver has them: ``ShardedListAndWatch`` (run
    --shard-selector). They change nothing for requests that do not ask for them."""
    out = subprocess.run([str(binaries["kube-apiserver"]), "--version"], capture_output=True, text=True,
                         timeout=60).stdout
    found = re.search(r"v(\d+)\.(\d+)", out)
    version = (int(found.group(1)), int(found.group(2))) if found else (0, 0)
    return ["--feature-gates=ShardedListAndWatch=true"] if version >= SHARDED_LIST_AND_WATCH else []


def configure(config: pytest.Config) -> None:
    """Start the shared control plane (in the process that owns the session, once)."""
    if hasattr(config, "workerinput") or not real() or os.environ.get(KUBECONFIG):
        return
    if getattr(config.option, "collectonly", False) or not _needs_api_server(config):
        return
    try:
        binaries = find(progress=_say)
    except BinariesUnavailable as exc:
        if os.environ.get(REQUIRE_REAL) == "1":
            raise pytest.UsageError(f"the real control plane is required ({REQUIRE_REAL}=1): {exc}") from exc
        SESSION.fallback = str(exc)
        banner = "=" * 100
        _say(f"\n{banner}\nNO REAL CONTROL PLANE: {exc}\nThe suite runs against the SANDBOX instead."
             f"\n{banner}")
        os.environ[BACKEND] = "sandbox"
        return
    directory = Path(tempfile.mkdtemp(prefix="ansible-operator-test-cluster-"))
    plane = _start_session_plane(directory, binaries)
    os.environ[KUBECONFIG] = str(plane.kubeconfig)
    os.environ[DIRECTORY] = str(plane.directory)


def _start_session_plane(directory: Path, binaries: Any) -> ControlPlane:
    """The suite's shared control plane in ``directory/cluster`` (its CRDs, the feature gates), recorded in
    :data:`SESSION` with its memory at rest and, sampled from then on, its peak."""
    started = time.monotonic()
    plane = ControlPlane(directory / "cluster", binaries, crds=SHARED_CRDS, apiserver_args=_gates(binaries),
                         progress=_say).start()
    SESSION.plane, SESSION.directory = plane, directory
    SESSION.started_in = time.monotonic() - started
    time.sleep(1)
    SESSION.rest = plane.memory()
    SESSION.peak = dict(SESSION.rest)
    threading.Thread(target=SESSION.sample, name="control-plane-memory", daemon=True).start()
    return plane


def serve(directory: Path) -> None:
    """``python -m tests.kube DIR``: the suite's control plane, as :func:`configure` starts it, for several
    pytest runs at once (the stages of ``.ci/run``: one plane instead of one per stage, each of which costs
    ~4 CPU s a minute at rest). Writes ``DIR/ready`` (the kubeconfig's path) once it serves; stops on
    SIGTERM or SIGINT. The runs get ``ANSIBLE_OPERATOR_TEST_KUBECONFIG`` and
    ``ANSIBLE_OPERATOR_TEST_CONTROL_PLANE`` (``DIR/cluster``); each test still works in namespaces of its
    own, so runs on other ansible-core versions at the same time do not meet."""
    import signal

    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    plane = _start_session_plane(directory, find(progress=_say))
    try:
        (directory / "ready").write_text(str(plane.kubeconfig))
        stop.wait()
    finally:
        SESSION._stop.set()
        cpu = plane.cpu_seconds()
        plane.stop()
    _say(f"stopped; RSS MiB at rest: {_mib(SESSION.rest)}; peak: {_mib(SESSION.peak)}; {_cpu(cpu)}")


def unconfigure(config: pytest.Config) -> None:
    """Stop the shared control plane; its directory (component logs under cluster/logs) is kept when the run
    failed or ``ANSIBLE_OPERATOR_TEST_KEEP_CLUSTER=1``, and named."""
    if SESSION.plane is None:
        return
    SESSION._stop.set()
    SESSION.plane.stop()
    failed = getattr(config, "_ansible_operator_exitstatus", 0) not in (0, 5)
    if SESSION.directory is not None:
        if failed or os.environ.get("ANSIBLE_OPERATOR_TEST_KEEP_CLUSTER") == "1":
            _say(f"control plane logs kept: {SESSION.directory / 'cluster' / 'logs'}")
        else:
            shutil.rmtree(SESSION.directory, ignore_errors=True)
    SESSION.plane = None


def sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    session.config._ansible_operator_exitstatus = int(exitstatus)  # type: ignore[attr-defined]


def _mib(rss: dict[str, int]) -> str:
    return ", ".join(f"{k} {v / 2**20:.0f}" for k, v in sorted(rss.items()))


def _cpu(seconds: dict[str, float]) -> str:
    """The components' CPU since their start: the plane's share of a run, which no test's report has."""
    return (f"CPU s: {', '.join(f'{k} {v:.0f}' for k, v in sorted(seconds.items()))}"
            f" (total {sum(seconds.values()):.0f})")


def summary(terminalreporter: Any) -> None:
    if SESSION.fallback:
        terminalreporter.write_sep("!", f"NO REAL CONTROL PLANE: ran on the sandbox ({SESSION.fallback})")
    if not SESSION.rest:
        return
    terminalreporter.write_line(
        f"control plane: started in {SESSION.started_in:.1f} s; RSS MiB at rest: {_mib(SESSION.rest)} "
        f"(total {sum(SESSION.rest.values()) / 2**20:.0f}); peak during the run: {_mib(SESSION.peak)} "
        f"(sum of peaks {sum(SESSION.peak.values()) / 2**20:.0f})"
        + (f"; {_cpu(SESSION.plane.cpu_seconds())}" if SESSION.plane is not None else ""))


# --------------------------------------------------------------------------------------------- in tests


def api_client_for(kubeconfig: Path) -> kubernetes.client.ApiClient:
    cfg = kubernetes.client.Configuration()
    kubernetes.config.load_kube_config(config_file=str(kubeconfig), client_configuration=cfg)
    return kubernetes.client.ApiClient(cfg)


@dataclass
class SharedCluster:
    """The session's control plane as one test sees it: its admin kubeconfig and namespaces of its own."""

    kubeconfig: Path
    directory: Path
    created: list[str] = field(default_factory=list)

    def api_client(self) -> kubernetes.client.ApiClient:
        return api_client_for(self.kubeconfig)

    def kubectl_env(self) -> dict[str, str]:
        return {**os.environ, "KUBECONFIG": str(self.kubeconfig)}

    def namespace(self, prefix: str = "t") -> str:
        """A new namespace ``<prefix>-<random>`` with its ``default`` ServiceAccount (pods need it)."""
        name = f"{prefix[:40].rstrip('-')}-{uuid.uuid4().hex[:6]}"
        with self.api_client() as api:
            core = kubernetes.client.CoreV1Api(api)
            core.create_namespace({"metadata": {"name": name, "labels": {"ansible-operator.dev/test": "1"}}})
            deadline = time.monotonic() + 60
            while True:
                try:
                    core.read_namespaced_service_account("default", name)
                    break
                except kubernetes.client.ApiException as exc:
                    if exc.status != 404 or time.monotonic() > deadline:
                        raise
                    time.sleep(0.1)
        self.created.append(name)
        return name

    def cleanup(self) -> None:
        """Delete this test's namespaces (not waited for: the namespace controller finishes it)."""
        with self.api_client() as api:
            core = kubernetes.client.CoreV1Api(api)
            for name in self.created:
                try:
                    core.delete_namespace(name, propagation_policy="Background")
                except kubernetes.client.ApiException:
                    pass
        self.created.clear()


def create_crds(api: kubernetes.client.ApiClient, paths: Any) -> list[str]:
    """:func:`create_crd_objects` for the CRDs in these YAML files/directories."""
    from ansible_operator.controlplane.objects import crd_documents

    return create_crd_objects(api, crd_documents(paths))


def create_crd_objects(api: kubernetes.client.ApiClient, docs: list[dict[str, Any]]) -> list[str]:
    """Create these CRDs unless they exist (cluster-scoped and shared by every test of the run: created
    once, never deleted) and wait until each is Established; their names."""
    ext = kubernetes.client.ApiextensionsV1Api(api)
    names = []
    for doc in docs:
        try:
            ext.create_custom_resource_definition(doc)
        except kubernetes.client.ApiException as exc:
            if exc.status != 409:
                raise
        names.append(doc["metadata"]["name"])
    deadline = time.monotonic() + 60
    for name in names:
        while not any(c.type == "Established" and c.status == "True"
                      for c in ext.read_custom_resource_definition(name).status.conditions or []):
            if time.monotonic() > deadline:
                raise AssertionError(f"CRD {name} not Established after 60 s")
            time.sleep(0.1)
    return names


def has_shared() -> bool:
    """Whether this run has a shared real control plane (tests that can use either API server prefer it)."""
    return real() and bool(os.environ.get(KUBECONFIG))


def shared() -> SharedCluster:
    kubeconfig = os.environ.get(KUBECONFIG)
    if not kubeconfig:
        raise RuntimeError("no shared control plane in this run (ANSIBLE_OPERATOR_TEST_API=sandbox?)")
    directory = os.environ.get(DIRECTORY)  # unset when the kubeconfig was given from outside
    return SharedCluster(Path(kubeconfig), Path(directory) if directory else Path(kubeconfig).parent)


def private_control_plane(directory: Path, crds: tuple[Path, ...] = SHARED_CRDS,
                          **kwargs: Any) -> ControlPlane:
    """A control plane of the test's own (for tests that kill or restart the API server or etcd); the
    caller stops it. Needs the real backend."""
    return ControlPlane(directory, find(build=False), crds=crds, progress=_say, **kwargs).start()


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m tests.kube DIRECTORY  (serve the suite's control plane until SIGTERM)")
    serve(Path(sys.argv[1]))
