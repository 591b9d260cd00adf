"""Processes the benchmark starts and the instruments it reads them with.

* The Kubernetes API, always in processes of its own, so its CPU is never counted as the operator's and it
  does not share a GIL with the measuring code (:func:`start_api`): :class:`ControlPlaneProcess`, the real
  control plane (``ansible-operator cluster up``: etcd, kube-apiserver, kube-controller-manager,
  kube-scheduler, kwok's fake nodes) in the run's directory, the default; :class:`ExistingCluster`, one
  that already runs (the test suite's shared control plane), used through namespaces of the run's own;
  :class:`SandboxProcess`, the sandbox API server (``ansible-operator sandbox``).
* :class:`OperatorProcess` - ``ansible-operator run`` exactly as a user starts it, in its own session so
  stopping it reaches the executor's processes too.
* :class:`MemorySampler` - RSS and USS of a process *and all its descendants* (zygote, forked runs,
  ansible-playbook, module subprocesses), summed, every ~50 ms in a thread.
* :class:`ConditionWatcher` - one watch stream per namespace that records *when* each object first showed
  ``Successful=True`` for its current generation, so latencies are measured without polling.

Everything started here is registered with a :class:`Reaper`; ``Reaper.close()`` stops all of it (SIGTERM to
the process group, then SIGKILL, then any descendant still alive), and ``bench/run.py`` calls it on normal
exit, errors, Ctrl-C and SIGTERM.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, Callable, Iterable, TypeVar

import psutil
import yaml

REPO = Path(__file__).resolve().parent.parent
BENCH = Path(__file__).resolve().parent
PYTHON = sys.executable


class BenchError(RuntimeError):
    """Something the benchmark needs did not happen (a process died, a CR never converged)."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


PORT_ATTEMPTS = 3
"""Starts of an operator whose port another process took between :func:`free_port` and its bind (a loaded
machine's operator binds seconds later: the official CI at 627e1a2)."""


def ready_with_free_ports(spawn: Callable[[], OperatorProcess], timeout: float = 120.0) -> OperatorProcess:
    """``spawn()`` an operator (on new free ports each time) and wait until it is ready; again if it exited
    because one of its ports was taken meanwhile."""
    for attempt in range(1, PORT_ATTEMPTS + 1):
        op = spawn()
        try:
            op._wait_ready(timeout)  # noqa: SLF001 - the harness's own readiness loop
            return op
        except BenchError:
            if attempt == PORT_ATTEMPTS or not op.port_taken():
                raise
            op.stop()
    raise AssertionError("unreachable")


def _descendants(pid: int) -> list[psutil.Process]:
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def stop_process(proc: subprocess.Popen[bytes], timeout: float = 20.0) -> None:
    """SIGTERM the process itself (as kubelet does: the operator closes its executor on its own), wait, then
    SIGKILL its process group; finally kill any descendant still alive (forked runs in groups of their
    own)."""
    family = _descendants(proc.pid)
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait(10)
    _gone, alive = psutil.wait_procs(family, timeout=2)
    for p in alive:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass


class Reaper:
    """Stops everything registered with it, newest first; safe to call more than once."""

    def __init__(self) -> None:
        self._stops: list[Callable[[], None]] = []
        self._lock = threading.Lock()

    def add(self, stop: Callable[[], None]) -> None:
        with self._lock:
            self._stops.append(stop)

    def discard(self, stop: Callable[[], None]) -> None:
        with self._lock:
            if stop in self._stops:
                self._stops.remove(stop)

    def close(self) -> None:
        while True:
            with self._lock:
                if not self._stops:
                    return
                stop = self._stops.pop()
            try:
                stop()
            except Exception as exc:  # keep stopping the rest
                print(f"bench: cleanup step failed: {exc}", file=sys.stderr)


T = TypeVar("T")


def run_guarded(tool: str, workdir: Path | None, body: Callable[[Path, Reaper], T]) -> tuple[T | None, int]:
    """One benchmark invocation: ``body(workdir, reaper)`` and its exit status (0, 1 after a
    :class:`BenchError`, said on stderr, 130 after Ctrl-C, even one started with SIGINT ignored (nohup, a
    background job); SIGTERM exits 143). Everything registered with the reaper is stopped however it ends;
    the working directory is ``workdir`` (kept), or a temporary one removed unless the run failed."""
    signal.signal(signal.SIGTERM, _on_sigterm)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    keep = workdir is not None
    path = (workdir.resolve() if workdir is not None
            else Path(tempfile.mkdtemp(prefix=f"ansible-operator-{tool}-")))
    path.mkdir(parents=True, exist_ok=True)
    reaper = Reaper()
    try:
        return body(path, reaper), 0
    except BenchError as exc:
        print(f"{tool}: {exc}\n(logs kept in {path})", file=sys.stderr)
        keep = True
        return None, 1
    except KeyboardInterrupt:
        print(f"{tool}: interrupted; stopping everything it started", file=sys.stderr)
        return None, 130
    finally:
        reaper.close()
        if not keep:
            shutil.rmtree(path, ignore_errors=True)


def _on_sigterm(_signum: int, _frame: FrameType | None) -> None:
    raise SystemExit(143)


# ----------------------------------------------------------------------------------------- API servers

APIS = ("real", "sandbox")


@dataclass
class SandboxProcess:
    proc: subprocess.Popen[bytes]
    kubeconfig: Path
    log_path: Path
    description = "sandbox"
    namespace_prefix = ""

    @classmethod
    def start(cls, workdir: Path, crds: Iterable[Path], reaper: Reaper,
              timeout: float = 60.0) -> SandboxProcess:
        kubeconfig = workdir / "kubeconfig"
        log_path = workdir / "sandbox.log"
        args = [PYTHON, "-m", "ansible_operator_sandbox", "--port", "0", "--kubeconfig", str(kubeconfig),
                "--log-level", "WARNING"]
        for crd in crds:
            args += ["--crds", str(crd)]
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, cwd=workdir,
                                    start_new_session=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        sb = cls(proc, kubeconfig, log_path)
        reaper.add(sb.stop)
        deadline = time.monotonic() + timeout
        while "kubeconfig:" not in log_path.read_text(errors="replace"):
            if proc.poll() is not None:
                raise BenchError(f"sandbox exited with {proc.returncode}: {log_path.read_text()[-2000:]}")
            if time.monotonic() > deadline:
                raise BenchError(f"sandbox not serving after {timeout}s")
            time.sleep(0.1)
        return sb

    def stop(self) -> None:
        stop_process(self.proc)


@dataclass
class ControlPlaneProcess:
    """``ansible-operator cluster up`` with its data, certificates and logs under ``workdir/cluster``; the
    binaries come from ``KUBEBUILDER_ASSETS``, the build cache, or are built with Go (first time only)."""

    proc: subprocess.Popen[bytes]
    kubeconfig: Path
    log_path: Path
    server: str
    namespace_prefix = ""

    @property
    def description(self) -> str:
        return f"real control plane ({self.server})"

    @classmethod
    def start(cls, workdir: Path, crds: Iterable[Path], reaper: Reaper,
              timeout: float = 300.0) -> ControlPlaneProcess:
        kubeconfig = workdir / "kubeconfig"
        log_path = workdir / "cluster.log"
        args = [PYTHON, "-m", "ansible_operator", "cluster", "up", "--dir", str(workdir / "cluster"),
                "--kubeconfig", str(kubeconfig)]
        for crd in crds:
            args += ["--crds", str(crd)]
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, cwd=workdir,
                                    start_new_session=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        plane = cls(proc, kubeconfig, log_path, "")
        reaper.add(plane.stop)
        deadline = time.monotonic() + timeout
        while True:  # printed once every component is ready, the CRDs are in and the kubeconfig written
            text = log_path.read_text(errors="replace")
            if "\nkubeconfig: " in f"\n{text}":
                break
            if proc.poll() is not None:
                raise BenchError(f"the control plane exited with {proc.returncode} (--api sandbox needs no"
                                 f" binaries): {text[-2000:]}")
            if time.monotonic() > deadline:
                raise BenchError(f"the control plane not serving after {timeout}s: {text[-2000:]}")
            time.sleep(0.2)
        plane.server = _server(kubeconfig)
        return plane

    def stop(self) -> None:
        stop_process(self.proc, timeout=60.0)


@dataclass
class ExistingCluster:
    """A cluster that already runs (``--kubeconfig``): nothing is started or stopped; the CRDs are installed
    if missing (and left installed: other users of the cluster may use them), every namespace gets a
    prefix of the run's own and is deleted at the end (:meth:`Cluster.close`)."""

    kubeconfig: Path
    server: str
    namespace_prefix: str

    @property
    def description(self) -> str:
        return f"real control plane, running ({self.server})"

    @classmethod
    def use(cls, kubeconfig: Path, crds: Iterable[Path], timeout: float = 60.0) -> ExistingCluster:
        import kubernetes
        from kubernetes.client.rest import ApiException

        kube = Kube(kubeconfig)
        try:
            ext = kubernetes.client.ApiextensionsV1Api(kube.api)
            names = []
            files = [f for c in crds for f in (sorted(c.glob("*.yaml")) if c.is_dir() else [c])]
            for path in files:
                for doc in yaml.safe_load_all(path.read_text()):
                    if not doc or doc.get("kind") != "CustomResourceDefinition":
                        continue
                    names.append(doc["metadata"]["name"])
                    try:
                        ext.create_custom_resource_definition(doc)
                    except ApiException as exc:
                        if exc.status != 409:  # 409: already installed
                            raise
            deadline = time.monotonic() + timeout
            for name in names:
                while not any(c.type == "Established" and c.status == "True"
                              for c in ext.read_custom_resource_definition(name).status.conditions or []):
                    if time.monotonic() > deadline:
                        raise BenchError(f"CRD {name} not Established after {timeout}s")
                    time.sleep(0.2)
        finally:
            kube.close()
        return cls(kubeconfig, _server(kubeconfig), f"bench-{uuid.uuid4().hex[:6]}-")

    def stop(self) -> None:
        return None


ApiServer = SandboxProcess | ControlPlaneProcess | ExistingCluster


def _server(kubeconfig: Path) -> str:
    doc = yaml.safe_load(kubeconfig.read_text())
    return str(doc["clusters"][0]["cluster"]["server"])


def start_api(api: str, workdir: Path, crds: list[Path], reaper: Reaper,
              kubeconfig: Path | None = None) -> ApiServer:
    """The Kubernetes API of a benchmark run: ``real`` (a control plane started in ``workdir``, or the
    running cluster of ``kubeconfig``) or ``sandbox``; serving ``crds`` (files or directories)."""
    if api == "sandbox":
        return SandboxProcess.start(workdir, crds, reaper)
    if kubeconfig is not None:
        return ExistingCluster.use(kubeconfig, crds)
    return ControlPlaneProcess.start(workdir, crds, reaper)


# -------------------------------------------------------------------------------------------- operator


def write_watches(path: Path) -> Path:
    """Memcached (the example role, unchanged) and Noop (the trivial play)."""
    watches = [
        {"version": "v1alpha1", "group": "cache.example.com", "kind": "Memcached",
         "role": str(REPO / "roles" / "memcached")},
        {"version": "v1", "group": "bench.ansible-operator.dev", "kind": "Noop",
         "playbook": str(BENCH / "trivial.yml")},
    ]
    path.write_text(yaml.safe_dump(watches, sort_keys=False))
    return path


@dataclass
class OperatorProcess:
    executor: str
    proc: subprocess.Popen[bytes]
    artifacts: Path
    log_path: Path
    metrics_port: int
    health_port: int
    reaper: Reaper

    @classmethod
    def start(cls, executor: str, workdir: Path, kubeconfig: Path, namespaces: list[str], reaper: Reaper,
              max_concurrent: int | None = None, timeout: float = 120.0,
              env: dict[str, str] | None = None, watches: Path | None = None,
              extra: Iterable[str] = ()) -> OperatorProcess:
        """``watches``: the watches file (default: Memcached and Noop); ``extra``: more ``run`` flags."""
        workdir.mkdir(parents=True, exist_ok=True)
        watches = watches or write_watches(workdir / "watches.yaml")
        return ready_with_free_ports(lambda: cls._spawn(
            executor, workdir, kubeconfig, namespaces, reaper, max_concurrent, env, watches, extra), timeout)

    @classmethod
    def _spawn(cls, executor: str, workdir: Path, kubeconfig: Path, namespaces: list[str], reaper: Reaper,
               max_concurrent: int | None, env: dict[str, str] | None, watches: Path,
               extra: Iterable[str]) -> OperatorProcess:
        artifacts = workdir / "artifacts"
        log_path = workdir / "operator.log"
        metrics_port, health_port = free_port(), free_port()
        args = [PYTHON, "-m", "ansible_operator", "run", "--watches-file", str(watches),
                "--kubeconfig", str(kubeconfig), "--executor", executor, "--artifacts-dir", str(artifacts),
                "--metrics-bind-address", f"127.0.0.1:{metrics_port}",
                "--health-probe-bind-address", f"127.0.0.1:{health_port}", "--log-level", "WARNING"]
        for ns in namespaces:
            args += ["--namespace", ns]
        if max_concurrent is not None:
            args += ["--max-concurrent-reconciles", str(max_concurrent)]
        args += list(extra)
        full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
        full_env.pop("KUBECONFIG", None)
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, cwd=workdir, env=full_env,
                                    start_new_session=True)
        op = cls(executor, proc, artifacts, log_path, metrics_port, health_port, reaper)
        reaper.add(op.stop)
        return op

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        url = f"http://127.0.0.1:{self.health_port}/readyz"
        while True:
            self.check_alive()
            try:
                with urllib.request.urlopen(url, timeout=2) as resp:
                    if resp.status == 200:
                        return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise BenchError(f"{self.executor} operator not ready after {timeout}s; log: "
                                 f"{self.log_tail()}")
            time.sleep(0.1)

    def check_alive(self) -> None:
        if self.proc.poll() is not None:
            raise BenchError(f"{self.executor} operator exited with {self.proc.returncode}: "
                             f"{self.log_tail()}")

    def log_tail(self, n: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def port_taken(self) -> bool:
        """It exited because one of its ports was in use."""
        return self.proc.poll() is not None and "address already in use" in self.log_tail()

    def metrics(self) -> dict[str, float]:
        """``/metrics`` samples summed over labels, by sample name (e.g. ``ansible_operator_runs_total``)."""
        from prometheus_client.parser import text_string_to_metric_families

        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as resp:
            text = resp.read().decode()
        out: dict[str, float] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                out[sample.name] = out.get(sample.name, 0.0) + float(sample.value)
        return out

    def runs(self, group: str, version: str, kind: str, namespace: str, name: str) -> list[dict[str, Any]]:
        """The run.json summaries of one object, oldest first."""
        base = self.artifacts / group / version / kind / namespace / name
        out = []
        for summary in sorted(base.glob("*/run.json")):
            try:
                out.append(json.loads(summary.read_text()))
            except (OSError, ValueError):
                continue  # being written right now
        return out

    def family(self) -> list[psutil.Process]:
        return _descendants(self.proc.pid)

    def stop(self) -> None:
        self.reaper.discard(self.stop)
        stop_process(self.proc)


@dataclass
class NativeProcess:
    """``bench/native_memcached.py``: the hand-written kopf operator (issue 14's native baseline).

    Same interface as :class:`OperatorProcess` where the native scenario needs one (``proc``,
    ``check_alive``, ``family``, ``stop``); it has no ``/metrics`` and no run artifacts."""

    executor: str
    proc: subprocess.Popen[bytes]
    log_path: Path
    health_port: int
    reaper: Reaper

    @classmethod
    def start(cls, workdir: Path, kubeconfig: Path, namespaces: list[str], reaper: Reaper,
              timeout: float = 120.0) -> NativeProcess:
        workdir.mkdir(parents=True, exist_ok=True)
        log_path = workdir / "operator.log"
        health_port = free_port()
        args = [PYTHON, str(BENCH / "native_memcached.py"), "--kubeconfig", str(kubeconfig),
                "--liveness", f"http://127.0.0.1:{health_port}/healthz"]
        for ns in namespaces:
            args += ["--namespace", ns]
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, cwd=workdir, env=env,
                                    start_new_session=True)
        op = cls("native", proc, log_path, health_port, reaper)
        reaper.add(op.stop)
        deadline = time.monotonic() + timeout
        while True:  # kopf answers the liveness endpoint once its startup handlers ran
            op.check_alive()
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{health_port}/healthz", timeout=2) as resp:
                    if resp.status == 200:
                        return op
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise BenchError(f"native operator not ready after {timeout}s; log: {op.log_tail()}")
            time.sleep(0.1)

    def check_alive(self) -> None:
        if self.proc.poll() is not None:
            raise BenchError(f"native operator exited with {self.proc.returncode}: {self.log_tail()}")

    def log_tail(self, n: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def family(self) -> list[psutil.Process]:
        return _descendants(self.proc.pid)

    def stop(self) -> None:
        self.reaper.discard(self.stop)
        stop_process(self.proc)


# ---------------------------------------------------------------------------------------------- memory


@dataclass
class MemoryPeak:
    rss_mb: float = 0.0
    uss_mb: float = 0.0
    pss_mb: float = 0.0
    processes: int = 0
    """Most processes in the family at once (a run in flight adds at least one)."""
    samples: int = 0


class MemorySampler:
    """Sums RSS, USS and PSS (``memory_full_info``) over a process and all its descendants every ``interval``.

    * USS is the memory only that one process maps (what it would free on exit). Summed over a forking
      family it *undercounts*: right after ``fork()`` every page of the zygote is shared with the child, so
      neither counts it - the zygote's USS even drops while runs are in flight.
    * PSS charges each shared page to its sharers in equal parts, so the PSS sum over the family is the
      family's real footprint (pages shared with processes outside it, e.g. libc, are split with those).
    * RSS counts every shared page once per process; reported because it is what most tools show.
    """

    def __init__(self, pid: int, interval: float = 0.05) -> None:
        self.pid = pid
        self.interval = interval
        self._peak = MemoryPeak()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"memory-{pid}", daemon=True)

    def sample(self) -> tuple[float, float, float]:
        """(RSS, USS, PSS) in MiB, summed over the family right now."""
        return self._sample()[:3]

    def _sample(self) -> tuple[float, float, float, int]:
        rss = uss = pss = 0
        family = _descendants(self.pid)
        for p in family:
            try:
                info = p.memory_full_info()
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
            rss += info.rss
            uss += info.uss
            pss += getattr(info, "pss", 0)
        return rss / 2**20, uss / 2**20, pss / 2**20, len(family)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            rss, uss, pss, processes = self._sample()
            with self._lock:
                self._peak.rss_mb = max(self._peak.rss_mb, rss)
                self._peak.uss_mb = max(self._peak.uss_mb, uss)
                self._peak.pss_mb = max(self._peak.pss_mb, pss)
                self._peak.processes = max(self._peak.processes, processes)
                self._peak.samples += 1

    def start(self) -> MemorySampler:
        self._thread.start()
        return self

    def reset(self) -> MemoryPeak:
        """Return the peaks since the last reset and start new ones."""
        with self._lock:
            peak, self._peak = self._peak, MemoryPeak()
        return peak

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)


def cpu_seconds(procs: Iterable[psutil.Process]) -> float:
    """CPU seconds used by the live processes *and* every descendant they have reaped (``children_*``),
    so runs that came and went (ansible-playbook, forked children, module subprocesses) are counted."""
    total = 0.0
    for p in procs:
        try:
            t = p.cpu_times()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        total += t.user + t.system + t.children_user + t.children_system
    return total


# ------------------------------------------------------------------------------------------ kubernetes


@dataclass(frozen=True)
class Kind:
    group: str
    version: str
    kind: str
    plural: str

    def body(self, name: str, namespace: str, spec: dict[str, Any]) -> dict[str, Any]:
        return {"apiVersion": f"{self.group}/{self.version}", "kind": self.kind,
                "metadata": {"name": name, "namespace": namespace}, "spec": spec}


MEMCACHED = Kind("cache.example.com", "v1alpha1", "Memcached", "memcacheds")
NOOP = Kind("bench.ansible-operator.dev", "v1", "Noop", "noops")


class Kube:
    """A thin synchronous client (the ``kubernetes`` package) for creating namespaces and CRs."""

    def __init__(self, kubeconfig: Path) -> None:
        import kubernetes

        configuration = kubernetes.client.Configuration()
        kubernetes.config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
        configuration.connection_pool_maxsize = 16
        self.api = kubernetes.client.ApiClient(configuration)
        self.core = kubernetes.client.CoreV1Api(self.api)
        self.custom = kubernetes.client.CustomObjectsApi(self.api)
        self.created: list[str] = []

    def close(self) -> None:
        self.api.close()

    def namespace(self, name: str, timeout: float = 60.0) -> None:
        """Create a namespace and wait for its ``default`` ServiceAccount, which the namespace's pods need
        (created asynchronously: a Deployment's first pods would otherwise be refused and retried later)."""
        from kubernetes.client.rest import ApiException

        self.core.create_namespace({"metadata": {"name": name}})
        self.created.append(name)
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.core.read_namespaced_service_account("default", name)
                return
            except ApiException as exc:
                if exc.status != 404 or time.monotonic() > deadline:
                    raise
            time.sleep(0.1)

    def delete_namespaces(self) -> None:
        """Delete the namespaces this client created (not waited for)."""
        from kubernetes.client.rest import ApiException

        for name in self.created:
            try:
                self.core.delete_namespace(name, propagation_policy="Background")
            except ApiException:
                pass
        self.created.clear()

    def wait_served(self, kind: Kind, namespace: str, timeout: float = 30.0) -> None:
        from kubernetes.client.rest import ApiException

        deadline = time.monotonic() + timeout
        while True:
            try:
                self.custom.list_namespaced_custom_object(kind.group, kind.version, namespace, kind.plural)
                return
            except ApiException:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def create(self, kind: Kind, namespace: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
        return self.custom.create_namespaced_custom_object(kind.group, kind.version, namespace, kind.plural,
                                                           kind.body(name, namespace, spec))

    def create_many(self, kind: Kind, namespace: str, names: list[str], spec: dict[str, Any],
                    workers: int = 8) -> None:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(workers, thread_name_prefix="create") as pool:
            list(pool.map(lambda n: self.create(kind, namespace, n, spec), names))

    def patch_spec(self, kind: Kind, namespace: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
        return self.custom.patch_namespaced_custom_object(kind.group, kind.version, namespace, kind.plural,
                                                          name, {"spec": spec})


def _true_condition(obj: dict[str, Any], ctype: str) -> dict[str, Any] | None:
    """The object's ``ctype`` condition if its status is ``True``, else None."""
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == ctype and cond.get("status") == "True":
            return cond
    return None


def _successful_generation(obj: dict[str, Any]) -> int | None:
    """The generation whose run left ``Successful=True``, or None."""
    cond = _true_condition(obj, "Successful")
    gen = cond.get("observedGeneration") if cond else None
    return int(gen) if gen is not None else None


@dataclass
class _Seen:
    generation: int
    at: float


class ConditionWatcher:
    """Watches one kind in one namespace; records the monotonic time at which each object first reported
    ``Successful=True`` for its *current* generation (the watch event's arrival time)."""

    def __init__(self, kube: Kube, kind: Kind, namespace: str) -> None:
        self.kube = kube
        self.kind = kind
        self.namespace = namespace
        self.done: dict[str, _Seen] = {}
        self.reached: dict[tuple[str, int], float] = {}
        """(name, generation) → when the object first showed ``Successful=True`` for that generation (``done``
        moves on to the latest one: a latency of a change must not take the next change's time)."""
        self.available: dict[str, float] = {}
        """First time each object showed ``Available=True`` (roles that report one)."""
        self._cv = threading.Condition()
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._loop, name=f"watch-{namespace}", daemon=True)
        self._started = threading.Event()

    def start(self) -> ConditionWatcher:
        self._thread.start()
        self._started.wait(30)
        return self

    def _record(self, obj: dict[str, Any], now: float) -> None:
        meta = obj.get("metadata") or {}
        # the role's own Available=True (the Memcached role sets it when its rollout is done)
        if _true_condition(obj, "Available"):
            with self._cv:
                if meta["name"] not in self.available:
                    self.available[meta["name"]] = now
                    self._cv.notify_all()
        gen = _successful_generation(obj)
        if gen is None or gen != meta.get("generation"):
            return
        name = meta["name"]
        with self._cv:
            self.reached.setdefault((name, gen), now)
            prev = self.done.get(name)
            if prev is None or prev.generation < gen:
                self.done[name] = _Seen(gen, now)
                self._cv.notify_all()

    def _loop(self) -> None:
        """One listing, then one watch resumed from the last resourceVersion it saw (with bookmarks), listing
        again only when the server says it is gone (410): at 10,000 objects a re-list per stream would load
        the API server more than the operator does. Each stream ends after 2 s so :meth:`stop` is prompt."""
        import kubernetes
        from kubernetes.client.rest import ApiException

        k = self.kind
        resource_version = ""
        while not self._stop.is_set():
            try:
                if not resource_version:
                    listing = self.kube.custom.list_namespaced_custom_object(k.group, k.version,
                                                                             self.namespace, k.plural)
                    now = time.monotonic()
                    for obj in listing.get("items", []):
                        self._record(obj, now)
                    resource_version = listing["metadata"]["resourceVersion"]
                    self._started.set()
                w = kubernetes.watch.Watch()
                for event in w.stream(self.kube.custom.list_namespaced_custom_object, k.group, k.version,
                                      self.namespace, k.plural, resource_version=resource_version,
                                      allow_watch_bookmarks=True, timeout_seconds=2, _request_timeout=10):
                    if self._stop.is_set():
                        w.stop()
                        return
                    if event.get("type") == "ERROR":
                        resource_version = ""
                        break
                    if event.get("type") in ("ADDED", "MODIFIED"):
                        self._record(event["object"], time.monotonic())
                    resource_version = w.resource_version or resource_version
            except ApiException as exc:
                if exc.status == 410:
                    resource_version = ""
                self._error = exc
                time.sleep(0.2)
            except Exception as exc:  # a dropped stream: resume from the last resourceVersion
                if self._stop.is_set():
                    return
                self._error = exc
                time.sleep(0.2)

    def _wait_for(self, names: Iterable[str], reached: Callable[[str], bool], at: Callable[[str], float],
                  what: str, timeout: float, alive: Callable[[], None] | None) -> dict[str, float]:
        """Block until ``reached(name)`` for each name (checked under the lock); return ``at(name)`` each."""
        wanted = list(names)
        deadline = time.monotonic() + timeout
        with self._cv:
            while True:
                missing = [n for n in wanted if not reached(n)]
                if not missing:
                    return {n: at(n) for n in wanted}
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise BenchError(f"{len(missing)} of {len(wanted)} {self.kind.kind}s in "
                                     f"{self.namespace} not {what} after {timeout}s (e.g. {missing[:3]});"
                                     f" last watch error: {self._error!r}")
                self._cv.wait(min(remaining, 1.0))
                if alive is not None:
                    alive()

    def wait(self, names: Iterable[str], generation: int | dict[str, int] = 1, timeout: float = 600.0,
             alive: Callable[[], None] | None = None) -> dict[str, float]:
        """Block until each name reached ``generation`` (or its entry in a dict); return the times."""
        def reached(n: str) -> bool:
            want = generation[n] if isinstance(generation, dict) else generation
            return n in self.done and self.done[n].generation >= want

        return self._wait_for(names, reached, lambda n: self.done[n].at, "Successful", timeout, alive)

    def wait_available(self, names: Iterable[str], timeout: float = 600.0,
                       alive: Callable[[], None] | None = None) -> dict[str, float]:
        """Block until each name showed ``Available=True``; return the times."""
        return self._wait_for(names, lambda n: n in self.available, lambda n: self.available[n], "Available",
                              timeout, alive)

    def stop(self) -> None:
        """The stream ends within its 2 s server timeout; the thread is a daemon, so do not wait long."""
        self._stop.set()
        self._thread.join(1)


@dataclass
class Cluster:
    """The API server plus a client and per-namespace watchers. Namespaces are named through :meth:`ns`
    (a prefix of the run's own on a cluster that others use too)."""

    server: ApiServer
    kube: Kube
    watchers: list[ConditionWatcher] = field(default_factory=list)

    @property
    def kubeconfig(self) -> Path:
        return self.server.kubeconfig

    def ns(self, name: str) -> str:
        return f"{self.server.namespace_prefix}{name}"

    def watcher(self, kind: Kind, namespace: str) -> ConditionWatcher:
        self.kube.wait_served(kind, namespace)
        w = ConditionWatcher(self.kube, kind, namespace).start()
        self.watchers.append(w)
        return w

    def close(self) -> None:
        for w in self.watchers:
            w.stop()
        if isinstance(self.server, ExistingCluster):
            self.kube.delete_namespaces()
        self.kube.close()
