"""A real Kubernetes control plane on loopback, as processes: etcd, kube-apiserver, kube-controller-manager,
kube-scheduler and kwok (fake nodes whose pods run, become Ready, and whose Job pods succeed).

Started the way envtest and kwokctl's binary runtime start it: no container engine, free ports, TLS from a
generated CA (:mod:`.pki`), an admin kubeconfig in ``system:masters``, ServiceAccount token signing, RBAC.
A tiny provisioner (:mod:`.provisioner`) gives PersistentVolumeClaims of the default StorageClass a
PersistentVolume, which kube-controller-manager's PV binder then binds.

Every process is a child of the thread that started the control plane, in a session of its own, with a
parent-death signal (Linux): when the launcher exits or is killed, nothing is left behind. Each component's
output goes to ``<dir>/logs/<name>.log``.
"""

from __future__ import annotations

import ctypes
import http.client
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, TypeVar

import yaml

from ansible_operator.controlplane import binaries as binaries_mod
from ansible_operator.controlplane import kwok, provisioner
from ansible_operator.controlplane.objects import install_crds
from ansible_operator.controlplane.pki import PKI, Pair

_T = TypeVar("_T")
SERVICE_CIDR = "10.0.0.0/24"
COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
# Limits that hold on a busy 2-core machine: the API server's first start installs its bootstrap objects
# and the OpenAPI aggregation (~10-40 s there), the others follow within seconds.
START_TIMEOUT = float(os.environ.get("ANSIBLE_OPERATOR_CONTROL_PLANE_TIMEOUT", "240"))


class ControlPlaneError(RuntimeError):
    """A component did not start or stopped: the message names it and ends with its log's tail."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _die_with_parent() -> None:
    """In the child between fork and exec: SIGKILL when the thread that started it dies (Linux
    ``PR_SET_PDEATHSIG``; elsewhere nothing, and :meth:`ControlPlane.stop` is the only cleanup)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


@dataclass
class Component:
    name: str
    binary: Path
    args: list[str]
    log: Path
    proc: subprocess.Popen[bytes] | None = None
    starts: int = 0

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> None:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log, "ab") as out:
            out.write(f"\n==== {time.strftime('%H:%M:%S')} start #{self.starts + 1}: {self.binary} "
                      f"{' '.join(self.args)}\n".encode())
            out.flush()
            self.proc = subprocess.Popen([str(self.binary), *self.args], stdin=subprocess.DEVNULL,
                                         stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                         preexec_fn=_die_with_parent)
        self.starts += 1

    def signal(self, signum: int) -> None:
        if self.running():
            assert self.proc is not None
            try:
                os.killpg(self.proc.pid, signum)
            except ProcessLookupError:
                pass

    def stop(self, timeout: float = 20.0) -> None:
        if self.proc is None:
            return
        self.signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.signal(signal.SIGKILL)
            self.proc.wait(10)

    def kill(self) -> None:
        """SIGKILL: a crash."""
        if self.proc is not None:
            self.signal(signal.SIGKILL)
            self.proc.wait(10)

    def tail(self, lines: int = 25) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


@dataclass
class ControlPlane:
    """``ControlPlane(directory).start()``; ``.kubeconfig`` (admin), ``.url``, ``.stop()``.

    ``apiserver_args`` / ``controller_manager_args`` are appended to (and so override) the defaults, e.g.
    ``["--max-requests-inflight=5"]``. ``components`` chooses which run (etcd and kube-apiserver always).
    ``volumes=False``: no volume provisioner (it polls claims and volumes twice a second; claims of the
    default StorageClass then stay ``Pending``).
    ``crds`` (YAML files or directories) are installed as soon as kube-apiserver is ready, before the
    controllers start: kube-controller-manager's garbage collector learns the kinds it may collect from
    discovery at its start and then only every 30 s, so objects owned by a custom resource installed later
    are not collected for up to 30 s.
    """

    directory: Path
    binaries: binaries_mod.Binaries | None = None
    apiserver_args: list[str] = field(default_factory=list)
    controller_manager_args: list[str] = field(default_factory=list)
    components: Iterable[str] = COMPONENTS
    nodes: int = 1
    crds: Iterable[str | Path] = ()
    progress: Callable[[str], None] | None = None
    volumes: bool = True
    parts: dict[str, Component] = field(default_factory=dict, init=False)
    kubeconfig: Path = field(init=False)
    url: str = field(init=False)
    etcd_url: str = field(init=False)
    _provisioner: provisioner.Provisioner | None = field(default=None, init=False)
    _tls: ssl.SSLContext | None = field(default=None, init=False)
    _local: threading.local = field(default_factory=threading.local, init=False)

    def __post_init__(self) -> None:
        self.directory = Path(self.directory)
        self.kubeconfig = self.directory / "kubeconfig"

    # ------------------------------------------------------------------------------------------ lifecycle

    def start(self) -> ControlPlane:
        """Start every component and wait until each is ready. A port taken by another process between
        choosing it and binding it (several control planes starting at once) is retried with new ports."""
        for attempt in range(1, 4):
            try:
                self._start()
                return self
            except ControlPlaneError as exc:
                self.stop()
                if "address already in use" not in str(exc) or attempt == 3:
                    raise
                (self.progress or (lambda _m: None))(f"a port was taken meanwhile, starting again: {exc}")
                self.parts.clear()
                shutil.rmtree(self.directory / "etcd", ignore_errors=True)
            except BaseException:
                self.stop()
                raise
        raise AssertionError("unreachable")

    def _start(self) -> None:
        say = self.progress or (lambda _m: None)
        self.binaries = self.binaries or binaries_mod.find(progress=self.progress)
        wanted = set(self.components) | {"etcd", "kube-apiserver"}
        self.directory.mkdir(parents=True, exist_ok=True)
        ports = {name: free_port() for name in ("etcd", "etcd-peer", "kube-apiserver",
                                                "kube-controller-manager", "kube-scheduler", "kwok")}
        self.url = f"https://127.0.0.1:{ports['kube-apiserver']}"
        self.etcd_url = f"http://127.0.0.1:{ports['etcd']}"
        self._define_components(PKI(self.directory / "pki"), ports)
        started = time.monotonic()
        for name in COMPONENTS:
            if name not in wanted:
                continue
            t0 = time.monotonic()
            self.parts[name].start()
            self.wait_ready(name)
            say(f"{name} ready in {time.monotonic() - t0:.1f} s")
            if name == "kube-apiserver" and self.crds:
                say(f"CRDs served: {', '.join(install_crds(self, self.crds))}")
        self._install_defaults(wanted)
        say(f"control plane ready in {time.monotonic() - started:.1f} s at {self.url} "
            f"(kubeconfig {self.kubeconfig})")

    def _define_components(self, pki: PKI, ports: dict[str, int]) -> None:
        """Certificates and kubeconfigs, and each component's command line (started by :meth:`_start`)."""
        d, bins = self.directory, self.binaries
        assert bins is not None
        serving = pki.serving("apiserver", ["127.0.0.1", "localhost", "kubernetes", "kubernetes.default",
                                            "kubernetes.default.svc", "kubernetes.default.svc.cluster.local",
                                            "10.0.0.1"])
        admin = pki.client("admin", "kubernetes-admin", ["system:masters"])
        pki.kubeconfig(self.kubeconfig, self.url, admin)
        kcm_conf = pki.kubeconfig(d / "controller-manager.kubeconfig", self.url,
                                  pki.client("controller-manager", "system:kube-controller-manager", []),
                                  user="system:kube-controller-manager")
        sched_conf = pki.kubeconfig(d / "scheduler.kubeconfig", self.url,
                                    pki.client("scheduler", "system:kube-scheduler", []),
                                    user="system:kube-scheduler")
        logs = d / "logs"

        def component(name: str, args: list[str]) -> None:
            self.parts[name] = Component(name, bins[name], args, logs / f"{name}.log")

        component("etcd", [
            "--name=default", f"--data-dir={d / 'etcd'}",
            f"--listen-client-urls={self.etcd_url}", f"--advertise-client-urls={self.etcd_url}",
            f"--listen-peer-urls=http://127.0.0.1:{ports['etcd-peer']}",
            f"--initial-advertise-peer-urls=http://127.0.0.1:{ports['etcd-peer']}",
            f"--initial-cluster=default=http://127.0.0.1:{ports['etcd-peer']}",
            "--unsafe-no-fsync=true", "--log-level=warn", "--quota-backend-bytes=8589934592",
        ])
        component("kube-apiserver", [
            f"--etcd-servers={self.etcd_url}", "--bind-address=127.0.0.1",
            f"--secure-port={ports['kube-apiserver']}", "--advertise-address=127.0.0.1",
            f"--tls-cert-file={serving.cert}", f"--tls-private-key-file={serving.key}",
            f"--client-ca-file={pki.ca_cert}",
            f"--service-account-key-file={pki.sa_pub}", f"--service-account-signing-key-file={pki.sa_key}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-cluster-ip-range={SERVICE_CIDR}", "--authorization-mode=RBAC",
            "--allow-privileged=true", "--profiling=false", "--v=1",
            # the default Service's endpoint is the advertise address, which is loopback here: the lease
            # reconciler would log "Endpoints kubernetes is invalid" every 10 s
            "--endpoint-reconciler-type=none",
            *self.apiserver_args,
        ])
        component("kube-controller-manager", [
            f"--kubeconfig={kcm_conf}", f"--authentication-kubeconfig={kcm_conf}",
            f"--authorization-kubeconfig={kcm_conf}", "--bind-address=127.0.0.1",
            f"--secure-port={ports['kube-controller-manager']}", "--leader-elect=false",
            "--use-service-account-credentials=true", f"--root-ca-file={pki.ca_cert}",
            f"--service-account-private-key-file={pki.sa_key}",
            f"--cluster-signing-cert-file={pki.ca_cert}", f"--cluster-signing-key-file={pki.ca_key}",
            f"--service-cluster-ip-range={SERVICE_CIDR}", "--controllers=*",
            "--profiling=false", "--v=1", *self.controller_manager_args,
        ])
        component("kube-scheduler", [
            f"--kubeconfig={sched_conf}", f"--authentication-kubeconfig={sched_conf}",
            f"--authorization-kubeconfig={sched_conf}", "--bind-address=127.0.0.1",
            f"--secure-port={ports['kube-scheduler']}", "--leader-elect=false", "--profiling=false", "--v=1",
        ])
        kwok_serving = pki.serving("kwok", ["127.0.0.1", "localhost"])
        component("kwok", kwok.args(d / "kwok", self.kubeconfig, ports["kwok"], kwok_serving.cert,
                                    kwok_serving.key, bins.kwok_stages))

    def stop(self) -> None:
        """Stop everything (the provisioner first, then the components in reverse order)."""
        if self._provisioner is not None:
            self._provisioner.stop()
            self._provisioner = None
        for name in reversed(COMPONENTS):
            if name in self.parts:
                self.parts[name].stop()
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    def __enter__(self) -> ControlPlane:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---------------------------------------------------------------------------------------- components

    def restart(self, name: str, kill: bool = False) -> None:
        """Stop one component (SIGTERM, or SIGKILL when ``kill``), start it again and wait until ready."""
        part = self.parts[name]
        part.kill() if kill else part.stop()
        part.start()
        self.wait_ready(name)

    def wait_ready(self, name: str, timeout: float = START_TIMEOUT) -> None:
        part = self.parts[name]
        deadline = time.monotonic() + timeout
        last: object = None
        while time.monotonic() < deadline:
            if not part.running():
                raise ControlPlaneError(f"{name} exited with {part.proc.returncode if part.proc else '?'} "
                                        f"while starting ({part.log}):\n{part.tail()}")
            try:
                if self._ready(name):
                    return
            except (OSError, ValueError, http.client.HTTPException) as exc:
                last = exc
            time.sleep(0.25)
        raise ControlPlaneError(f"{name} not ready after {timeout:.0f} s (last: {last!r}); {part.log}:\n"
                                f"{part.tail()}")

    def _ready(self, name: str) -> bool:
        if name == "etcd":
            with urllib.request.urlopen(f"{self.etcd_url}/health", timeout=5) as resp:
                return bool(json.load(resp).get("health") == "true")
        if name == "kube-apiserver":
            return self.request("GET", "/readyz")[0] == 200
        if name in ("kube-controller-manager", "kube-scheduler"):
            port = next(a.split("=", 1)[1] for a in self.parts[name].args if a.startswith("--secure-port="))
            ctx = ssl.create_default_context()
            ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE  # its self-signed serving cert
            with urllib.request.urlopen(f"https://127.0.0.1:{port}/healthz", timeout=5, context=ctx) as resp:
                return bool(resp.status == 200)
        if name == "kwok":
            return kwok.serving(self.parts[name].args)
        raise KeyError(name)

    # --------------------------------------------------------------------------------------------- API

    def _ssl(self) -> ssl.SSLContext:
        """The admin's TLS context, made once: the PKI stays the same while the plane lives, restarts of its
        components included."""
        if self._tls is None:
            pki = self.directory / "pki"
            ctx = ssl.create_default_context(cafile=str(pki / "ca.crt"))
            ctx.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
            self._tls = ctx
        return self._tls

    def _connection(self, fresh: bool) -> http.client.HTTPSConnection:
        """This thread's connection to kube-apiserver (a new one when ``fresh``)."""
        conn: http.client.HTTPSConnection | None = getattr(self._local, "conn", None)
        if conn is None or fresh:
            if conn is not None:
                conn.close()
            url = urllib.parse.urlsplit(self.url)
            conn = http.client.HTTPSConnection(url.hostname or "127.0.0.1", url.port, timeout=30,
                                               context=self._ssl())
            self._local.conn = conn
        return conn

    def request(self, method: str, path: str, body: Any = None,
                content_type: str = "application/json") -> tuple[int, Any]:
        """One admin request to the API server: (status, decoded JSON body or text). Each thread keeps its
        connection (the volume provisioner asks twice a second for as long as the plane runs: a new TLS
        context and handshake each time cost ~5 ms of CPU); one that the server closed meanwhile (idle,
        or kube-apiserver restarted) is replaced once."""
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": content_type} if data else {}
        reused = getattr(self._local, "conn", None) is not None
        for attempt in (0, 1):
            conn = self._connection(fresh=attempt > 0)
            try:
                conn.request(method, path, body=data, headers=headers)
                resp = conn.getresponse()
                raw, status = resp.read(), resp.status
                break
            except (OSError, http.client.HTTPException):
                conn.close()
                self._local.conn = None
                if attempt or not reused:
                    raise
        try:
            return status, json.loads(raw)
        except ValueError:
            return status, raw.decode(errors="replace")

    def apply(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """Server-side apply of one object (field manager ``ansible-operator-control-plane``)."""
        api_version, kind = obj["apiVersion"], obj["kind"]
        plural = _PLURALS[kind]
        base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
        ns = obj["metadata"].get("namespace")
        path = f"{base}/namespaces/{ns}/{plural}" if ns else f"{base}/{plural}"
        query = "fieldManager=ansible-operator-control-plane&force=true"
        status, answer = self.request("PATCH", f"{path}/{obj['metadata']['name']}?{query}", dict(obj),
                                      "application/apply-patch+yaml")
        if status >= 300:
            raise ControlPlaneError(f"apply {kind} {obj['metadata']['name']}: {status} {answer}")
        return dict(answer)

    def client_certificate(self, user: str, groups: Iterable[str] = ()) -> tuple[Path, Path]:
        """(certificate, key) for ``user`` in ``groups``, signed by this control plane's CA: an identity
        outside ``system:masters``, authorized only by the RBAC bound to it (and, unlike ``system:masters``,
        subject to API Priority and Fairness)."""
        pki = PKI.load(self.directory / "pki")
        pair = pki.client("user-" + "".join(c if c.isalnum() else "-" for c in user), user, list(groups))
        return pair.cert, pair.key

    def user_kubeconfig(self, path: Path, user: str, groups: Iterable[str] = ()) -> Path:
        """A kubeconfig for :meth:`client_certificate`'s identity."""
        cert, key = self.client_certificate(user, groups)
        return PKI.load(self.directory / "pki").kubeconfig(path, self.url, Pair(cert, key), user=user)

    def _install_defaults(self, wanted: set[str]) -> None:
        """The default StorageClass (+ its provisioner), kwok's nodes; then wait until the controllers act
        (the ``default`` ServiceAccount exists, the nodes are Ready)."""
        self.apply(provisioner.STORAGE_CLASS)
        if self.volumes:
            self._provisioner = provisioner.Provisioner(self.request)
            self._provisioner.start()
        if "kwok" in wanted:
            for i in range(self.nodes):
                self.apply(kwok.node(f"kwok-node-{i}"))
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            waiting = []
            if "kube-controller-manager" in wanted and \
                    self.request("GET", "/api/v1/namespaces/default/serviceaccounts/default")[0] != 200:
                waiting.append("the default ServiceAccount (kube-controller-manager)")
            if "kwok" in wanted and not self._nodes_ready():
                waiting.append("Ready nodes (kwok)")
            if not waiting:
                return
            time.sleep(0.25)
        raise ControlPlaneError(f"control plane started but still waiting for {', '.join(waiting)}; logs "
                                f"in {self.directory / 'logs'}")

    def _nodes_ready(self) -> bool:
        status, nodes = self.request("GET", "/api/v1/nodes")
        if status != 200:
            return False
        ready = [n for n in nodes.get("items") or []
                 if any(c.get("type") == "Ready" and c.get("status") == "True"
                        for c in (n.get("status") or {}).get("conditions") or [])]
        return len(ready) >= self.nodes

    # ------------------------------------------------------------------------------------------- etcd

    def etcd_revision(self) -> int:
        """etcd's current revision (its v3 JSON gateway: no etcdctl needed)."""
        return int(self._etcd("/v3/kv/range", {"key": "AA=="})["header"]["revision"])

    def compact(self) -> int:
        """Compact etcd's history up to now (physical): every watch or list at an older resourceVersion
        gets 410 Gone from the API server once its watch cache drops it. Returns the revision."""
        revision = self.etcd_revision()
        self._etcd("/v3/kv/compaction", {"revision": str(revision), "physical": True})
        return revision

    def _etcd(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        req = urllib.request.Request(self.etcd_url + path, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as resp:
            return dict(json.load(resp))

    # ---------------------------------------------------------------------------------------- readings

    def memory(self) -> dict[str, int]:
        """Resident memory of each running component, bytes."""
        return self._read_each(lambda p: p.memory_info().rss)

    def cpu_seconds(self) -> dict[str, float]:
        """CPU time (user + system) each running component has used since it started, seconds."""
        return self._read_each(lambda p: sum(p.cpu_times()[:2]))

    def _read_each(self, read: Callable[[Any], _T]) -> dict[str, _T]:
        import psutil

        out = {}
        for name, part in self.parts.items():
            if part.running() and part.proc is not None:
                try:
                    out[name] = read(psutil.Process(part.proc.pid))
                except psutil.NoSuchProcess:
                    pass
        return out

    def state(self) -> dict[str, Any]:
        """What another process needs to use this control plane (written as ``<dir>/state.json``)."""
        return {"url": self.url, "kubeconfig": str(self.kubeconfig), "etcd": self.etcd_url,
                "directory": str(self.directory),
                "pids": {n: p.proc.pid for n, p in self.parts.items() if p.proc is not None}}

    def write_state(self) -> Path:
        path = self.directory / "state.json"
        path.write_text(json.dumps(self.state(), indent=1))
        return path


_PLURALS = {"StorageClass": "storageclasses", "Node": "nodes", "Namespace": "namespaces",
            "CustomResourceDefinition": "customresourcedefinitions"}


def load_yaml(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]
