"""Fault-injection harness: the API server (the session's shared real control plane, a real one of the
test's own, or a sandbox), operators as real subprocesses, a cuttable proxy between them, and the suite's
figures.

* ``cluster`` (per module) - the shared real control plane by default (tests/kube.py; each test makes
  namespaces of its own with :meth:`Cluster.namespace`), or an in-thread sandbox with
  ``ANSIBLE_OPERATOR_TEST_API=sandbox``. :func:`private_cluster` - a real control plane of the test's own,
  for faults that would hurt the other tests (killing the API server or etcd, compaction, throttling).
* :class:`CutProxy` - an asyncio proxy (its own thread and loop) the operator's kubeconfig points at; in
  front of a real API server it terminates TLS on both sides (:class:`ProxyTLS`). ``cut()`` resets every
  open connection and every new one until ``restore()``; it also counts, from the plaintext HTTP going
  through it, the operator's list requests per resource, the ``410 Expired`` answers and the status codes.
* ``operators`` - ``python -m ansible_operator run`` exactly as a user starts it, in a session of its own
  (so ``SIGKILL`` of it is a crash, not a clean shutdown), watching one namespace.
* ``figures`` - the numbers each test reports (kills, restarts, relists, stuck CRs, overlapping side
  effects, secret occurrences, 429s); written as JSON when the session ends, to ``$FAULTS_SUMMARY`` or
  ``<pytest basetemp>/faults-summary.json``. ``python tests/faults/summary.py FILE`` turns it into the
  table in docs/explanation/faults.md.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import signal
import ssl
import subprocess
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections import Counter
from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import kubernetes
import psutil
import pytest
import yaml

from ansible_operator.controlplane import ControlPlane
from ansible_operator_sandbox import kubeconfig_dict
from ansible_operator_sandbox.testing import SandboxHandle
from tests import harness, kube
from tests.harness import CRDS, E2E, GROUP, KIND, PLURAL, VERSION, Widgets, spawn_operator, stop_process

__all__ = ["CRDS", "E2E", "GROUP", "KIND", "PLURAL", "VERSION"]
HERE = Path(__file__).parent
WIDGETS_PATH = f"/apis/{GROUP}/{VERSION}/"
NAMESPACE = "faults"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every fault test starts a sandbox and operators: mark them ``e2e`` (``-m "not e2e"`` skips them)."""
    for item in items:
        if HERE in Path(str(item.path)).parents:
            item.add_marker(pytest.mark.e2e)


# ------------------------------------------------------------------------------------------------ waiting


def wait_for(
    predicate: Callable[[], Any], timeout: float = 120.0, interval: float = 0.2, what: str = ""
) -> Any:
    """:func:`tests.harness.wait_for` with the fault suite's longer default timeout."""
    return harness.wait_for(predicate, timeout, interval, what)


# ------------------------------------------------------------------------------------------------- proxy


REQUEST_LINE = re.compile(rb"(GET|POST|PUT|PATCH|DELETE) (\S+) HTTP/1\.[01]\r\n")
STATUS_LINE = re.compile(rb"HTTP/1\.[01] (\d{3}) ")


@dataclass(frozen=True)
class ProxyTLS:
    """TLS on both sides of a :class:`CutProxy` in front of a real API server (which speaks TLS only): the
    proxy serves ``serving`` (the API server's own pair: its SAN is 127.0.0.1, signed by ``ca``) and
    presents ``client`` upstream. The proxy sees plaintext HTTP in between."""

    ca: Path
    serving: tuple[Path, Path]
    client: tuple[Path, Path]

    @classmethod
    def of_plane(cls, pki: Path, client: tuple[Path, Path] | None = None) -> ProxyTLS:
        """From a control plane's ``pki`` directory; upstream as ``client`` (default: the admin, who is in
        ``system:masters``)."""
        return cls(pki / "ca.crt", (pki / "apiserver.crt", pki / "apiserver.key"),
                   client or (pki / "admin.crt", pki / "admin.key"))

    def server_context(self) -> ssl.SSLContext:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(str(self.serving[0]), str(self.serving[1]))
        return ctx

    def client_context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.ca))
        ctx.load_cert_chain(str(self.client[0]), str(self.client[1]))
        ctx.set_alpn_protocols(["http/1.1"])  # what the proxy parses (never h2)
        return ctx


@dataclass(eq=False)
class _Flow:
    """One proxied connection; ``dead``: blackholed, it carries nothing any more."""

    dead: bool = False


class CutProxy:
    """A TCP proxy on 127.0.0.1 in front of ``upstream_port`` that can be cut and restored; with ``tls`` it
    terminates TLS on both sides (a real API server)."""

    def __init__(self, upstream_port: int, tls: ProxyTLS | None = None) -> None:
        self.upstream_port = upstream_port
        self.tls = tls
        self.port = 0
        self.lists: Counter[str] = Counter()  # collection path -> plain (non-watch) GETs
        self.watches: Counter[str] = Counter()
        self.statuses: Counter[int] = Counter()  # HTTP status codes of the answers
        self.expired = 0  # 410 Expired answers (ERROR events in watch streams or 410 responses)
        self.cuts = 0
        self.refused = 0  # connections reset because the proxy was cut
        self.swallowed = 0  # connections accepted during a blackhole (never answered)
        self.watch_times: list[float] = []  # time.monotonic() of each watch request
        self._cut = False
        self._blackhole = False
        self._live: set[_Flow] = set()
        self._writers: set[asyncio.StreamWriter] = set()
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.base_events.Server | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, name="cut-proxy", daemon=True)
        self._upstream_ssl = tls.client_context() if tls else None

    def start(self) -> CutProxy:
        self._thread.start()
        ssl_ctx = self.tls.server_context() if self.tls else None
        self._server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._accept, "127.0.0.1", 0, ssl=ssl_ctx), self._loop).result(10)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"

    def write_kubeconfig(self, path: Path) -> Path:
        """A kubeconfig pointing at the proxy (with TLS: its CA, and the client pair the proxy presents
        upstream, so the same file also works against the API server itself)."""
        if self.tls is None:
            config = kubeconfig_dict(self.url)
        else:
            def b64(p: Path) -> str:
                return base64.b64encode(p.read_bytes()).decode()

            config = kubeconfig_dict(self.url, ca_pem=self.tls.ca.read_text(), user={
                "client-certificate-data": b64(self.tls.client[0]),
                "client-key-data": b64(self.tls.client[1])})
        path.write_text(yaml.safe_dump(config))
        return path

    def relists(self, path_part: str = "") -> int:
        """List (non-watch) GETs of collections seen so far, of every resource or those containing
        path_part."""
        return sum(n for p, n in self.lists.items() if path_part in p)

    def cut(self) -> None:
        """From now on every connection is reset, open ones included, until :meth:`restore`."""
        def do() -> None:
            self._cut = True
            self.cuts += 1
            for w in list(self._writers):
                w.transport.abort()
        self._call(do)

    def restore(self) -> None:
        self._call(lambda: setattr(self, "_cut", False))

    def blackhole(self) -> None:
        """From now on nothing is answered: open connections stay open but carry nothing, ever again (a
        lost NAT entry, a dead load balancer), and new ones are accepted and never answered, until
        :meth:`heal`. Connections from before :meth:`heal` stay silent after it."""
        def do() -> None:
            self._blackhole = True
            for flow in self._live:
                flow.dead = True
        self._call(do)

    def heal(self) -> None:
        """New connections work again (the silent ones stay silent)."""
        self._call(lambda: setattr(self, "_blackhole", False))

    def close(self) -> None:
        async def shutdown() -> None:
            if self._server is not None:
                self._server.close()
            for w in list(self._writers):
                w.transport.abort()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(shutdown(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    def _call(self, fn: Callable[[], None]) -> None:
        done = threading.Event()

        def run() -> None:
            try:
                fn()
            finally:
                done.set()
        self._loop.call_soon_threadsafe(run)
        done.wait(10)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._cut:
            self.refused += 1
            writer.transport.abort()
            return
        if self._blackhole:
            self.swallowed += 1
            self._writers.add(writer)
            try:
                while await reader.read(65536):
                    pass  # swallowed
            except (ConnectionError, OSError):
                pass
            finally:
                self._writers.discard(writer)
                writer.transport.abort()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(
                "127.0.0.1", self.upstream_port, ssl=self._upstream_ssl,
                server_hostname="127.0.0.1" if self._upstream_ssl else None)
        except OSError:  # ssl.SSLError included
            writer.transport.abort()
            return
        if self._cut:  # cut while connecting upstream
            self.refused += 1
            for w in (writer, up_writer):
                w.transport.abort()
            return
        self._writers.update((writer, up_writer))
        flow = _Flow(dead=self._blackhole)
        self._live.add(flow)
        try:
            await asyncio.gather(self._pump(reader, up_writer, self._requests, flow),
                                 self._pump(up_reader, writer, self._responses, flow))
        finally:
            self._live.discard(flow)
            for w in (writer, up_writer):
                self._writers.discard(w)
                w.transport.abort()

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                    inspect: Callable[[bytes, int], None], flow: _Flow) -> None:
        tail = b""
        try:
            while not self._cut:
                data = await reader.read(65536)
                if flow.dead and not self._cut:
                    if not data:  # nor does a close get through: the other side never learns of it
                        await asyncio.get_running_loop().create_future()  # until the proxy closes
                    continue  # blackholed: dropped, the connection stays open
                if not data or self._cut:
                    break
                # a request line or status split across two reads is still seen, and seen once
                inspect(tail + data, len(tail))
                tail = data[-200:]
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):  # ssl.SSLError included
            pass
        finally:
            writer.transport.abort()

    def _requests(self, data: bytes, seen: int) -> None:
        for m in REQUEST_LINE.finditer(data):
            if m.end() <= seen:
                continue
            method, target = m.group(1).decode(), m.group(2).decode()
            path, _, query = target.partition("?")
            if method != "GET":
                continue
            if re.search(r"(^|&)watch=(1|true)", query):
                self.watches[path] += 1
                self.watch_times.append(time.monotonic())
            elif _is_collection(path):
                self.lists[path] += 1

    def _responses(self, data: bytes, seen: int) -> None:
        # Watch events and Status bodies are JSON whether or not the response is chunked (a chunk-size line
        # falls between events, not inside one: the API server flushes each event as one chunk).
        self.expired += sum(1 for m in re.finditer(rb'"code":\s*410', data) if m.end() > seen)
        for m in STATUS_LINE.finditer(data):
            if m.end() > seen:
                self.statuses[int(m.group(1))] += 1


def _is_collection(path: str) -> bool:
    """``/apis/g/v/[namespaces/ns/]plural`` (not one named object)."""
    parts = [p for p in path.split("/") if p]
    if parts[:1] == ["apis"]:
        rest = parts[3:]
    elif parts[:1] == ["api"]:
        rest = parts[2:]
    else:
        return False
    if rest[:1] == ["namespaces"] and len(rest) >= 3:
        rest = rest[2:]
    return len(rest) == 1


# ------------------------------------------------------------------------------------- real-server helpers


# ---------------------------------------------------------------------------------------------- cluster


@dataclass
class Cluster(Widgets):
    """The API server a fault test runs against: an in-thread sandbox (``handle``), a sandbox process, the
    session's shared real control plane (``shared``) or a real control plane of the test's own
    (``plane``). ``port`` is the API server's (for a :class:`CutProxy`), ``pki`` the real plane's TLS
    material (None: plain HTTP, a sandbox)."""

    kubeconfig: Path
    api: kubernetes.client.ApiClient
    port: int
    pki: Path | None = None
    handle: SandboxHandle | None = None
    plane: ControlPlane | None = None
    shared: kube.SharedCluster | None = None
    core: kubernetes.client.CoreV1Api = field(init=False)
    custom: kubernetes.client.CustomObjectsApi = field(init=False)

    def __post_init__(self) -> None:
        self._clients(self.api)

    @classmethod
    def of_kubeconfig(cls, kubeconfig: Path, **kwargs: Any) -> Cluster:
        server = yaml.safe_load(kubeconfig.read_text())["clusters"][0]["cluster"]["server"]
        return cls(kubeconfig, kube.api_client_for(kubeconfig), int(urlsplit(server).port or 443), **kwargs)

    @property
    def real(self) -> bool:
        return self.pki is not None

    def reconnect(self, kubeconfig: Path | None = None) -> None:
        """A new client (after the API server restarted: pooled connections are dead)."""
        self.api.close()
        self.kubeconfig = kubeconfig or self.kubeconfig
        self.api = kube.api_client_for(self.kubeconfig)
        self._clients(self.api)

    def close(self) -> None:
        if self.shared is not None:
            self.shared.cleanup()
        self.api.close()

    def namespace(self, name: str) -> str:
        """A new namespace ``<name>-<random>`` (unique: parametrized tests, parallel workers and reruns on
        the shared control plane never meet); its name."""
        if self.shared is not None:
            return self.shared.namespace(name)
        unique = f"{name}-{uuid.uuid4().hex[:6]}"
        self.core.create_namespace({"metadata": {"name": unique}})
        return unique

    def proxy(self, client: tuple[Path, Path] | None = None) -> CutProxy:
        """A started :class:`CutProxy` in front of this API server (TLS on a real one; upstream as
        ``client``, default the admin)."""
        tls = ProxyTLS.of_plane(self.pki, client) if self.pki is not None else None
        return CutProxy(self.port, tls).start()

    def read(self, ns: str, name: str) -> dict[str, Any]:
        """The object (it must exist)."""
        obj = self.get(ns, name)
        assert obj is not None, f"{ns}/{name} not found"
        return obj

    def converged(self, ns: str, name: str) -> dict[str, Any] | None:
        """The object when its Successful condition is True for its current generation, else None."""
        obj = self.get(ns, name)
        if obj is None:
            return None
        for cond in (obj.get("status") or {}).get("conditions") or []:
            if (cond.get("type") == "Successful" and cond.get("status") == "True"
                    and cond.get("observedGeneration") == obj["metadata"]["generation"]):
                return obj
        return None

    def wait_converged(self, ns: str, names: list[str], timeout: float = 180.0) -> list[dict[str, Any]]:
        """Every name converged (all at once, so a stuck CR is named in the failure)."""
        def all_done() -> list[dict[str, Any]] | None:
            objs = [o for o in (self.converged(ns, n) for n in names) if o is not None]
            return objs if len(objs) == len(names) else None

        try:
            return wait_for(all_done, timeout, 0.3, what=f"{names} Successful at their generation")
        except AssertionError:
            stuck = [n for n in names if not self.converged(ns, n)]
            raise AssertionError(f"stuck CRs in {ns}: {stuck}: "
                                 f"{[(self.get(ns, n) or {}).get('status') for n in stuck[:3]]}") from None

    def compact(self) -> int:
        """Compact the watch history now; the revision. Watches resumed from an older resourceVersion then
        get 410. The sandbox: its test-only ``Store.compact()`` (on its own loop). A real control plane of
        the test's own: etcd compaction (410 reaches a watch only if the API server runs with
        ``--watch-cache=false``; its watch cache would serve the old resourceVersion otherwise)."""
        if self.handle is not None:
            sandbox = self.handle.sandbox
            return int(sandbox.call(sandbox.server.store.compact))
        if self.plane is not None:
            return self.plane.compact()
        raise RuntimeError("no compaction on the shared control plane (use a private one)")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """The session's real control plane (namespaces of the module's own, deleted at its end), or with
    ``ANSIBLE_OPERATOR_TEST_API=sandbox`` one in-thread sandbox with the Widget CRD per test module."""
    if kube.real():
        shared = kube.shared()
        c = Cluster.of_kubeconfig(shared.kubeconfig, pki=shared.directory / "pki", shared=shared)
        try:
            yield c
        finally:
            c.close()
        return
    handle = harness.widget_sandbox(tmp_path_factory.mktemp("sandbox") / "kubeconfig")
    try:
        c = Cluster(handle.kubeconfig, handle.api_client(), handle.sandbox.port, handle=handle)
        try:
            ns = c.namespace(NAMESPACE)
            wait_for(lambda: c.served(ns), 30, what="Widget CRD served")
            yield c
        finally:
            c.close()
    finally:
        handle.sandbox.stop_thread()


@contextmanager
def private_cluster(directory: Path, **plane_kwargs: Any) -> Iterator[Cluster]:
    """A real control plane of the test's own (``ControlPlane`` kwargs, e.g. ``apiserver_args``), with the
    Widget CRD: for tests that kill or restart the API server or etcd, compact etcd or throttle. etcd and
    kube-apiserver only unless ``components`` says otherwise (the Widget tests need no pods, nodes or
    controllers; fewer processes on a busy machine). Stopped at the end: stop operators before that."""
    plane_kwargs.setdefault("components", ("etcd", "kube-apiserver"))
    plane = kube.private_control_plane(directory, crds=(CRDS,), **plane_kwargs)
    try:
        c = Cluster.of_kubeconfig(plane.kubeconfig, pki=plane.directory / "pki", plane=plane)
        try:
            yield c
        finally:
            c.close()
    finally:
        plane.stop()


# --------------------------------------------------------------------------------------------- operator


@dataclass
class Operator:
    proc: subprocess.Popen[bytes]
    workdir: Path
    log_path: Path
    artifacts: Path

    def logs(self) -> str:
        return self.log_path.read_text(errors="replace")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def port(self, path: str = "/metrics") -> int:
        """Where it serves ``path``, started with ``127.0.0.1:0`` for it (``tests.harness.served_port``)."""
        return harness.served_port(self.logs, self.alive, path)

    def runs(self, ns: str, name: str) -> list[dict[str, Any]]:
        """run.json summaries of one widget, oldest first."""
        return harness.read_runs(self.artifacts, ns, name)

    def kill(self) -> None:
        """SIGKILL: a crash (no shutdown code runs)."""
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)

    def stop(self, timeout: float = 30.0, family: list[psutil.Process] | None = None) -> None:
        family = harness.family(self.proc.pid) if family is None else family
        stop_process(self.proc, timeout)
        for p in family:  # nothing a test started may outlive it, even if the operator leaked it
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass


def widget_watch(role: str = "widget", **overrides: Any) -> dict[str, Any]:
    roles = HERE / "roles"
    path = roles / role if (roles / role).is_dir() else E2E / "roles" / role
    watch: dict[str, Any] = {"group": GROUP, "version": VERSION, "kind": KIND, "role": str(path)}
    watch.update(overrides)
    return watch


@pytest.fixture(scope="module")
def operators(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., Operator]]:
    """start(kubeconfig, watches, *flags, namespace=NS, executor="warm", name=..., env=...) -> Operator; all
    stopped at the end of the module. ``namespace``: the one namespace it watches (``WATCH_NAMESPACE``):
    on the shared control plane every test's operator must keep to its own."""
    started: list[Operator] = []
    base = tmp_path_factory.mktemp("operators")

    def start(kubeconfig: Path, watches: list[dict[str, Any]], *flags: str, namespace: str | None,
              executor: str = "warm", name: str = "op", env: dict[str, str] | None = None,
              artifacts: Path | None = None) -> Operator:
        workdir = base / f"{name}-{len(started)}"
        proc, _, artifacts, log_path = spawn_operator(workdir, watches, kubeconfig, executor, *flags,
                                                      artifacts=artifacts, env=env, append_log=True,
                                                      namespace=namespace)
        op = Operator(proc, workdir, log_path, artifacts)
        started.append(op)
        return op

    yield start
    families = [(op, harness.family(op.proc.pid)) for op in started]
    for op in started:  # SIGTERM all first: their graceful shutdowns overlap instead of adding up
        if op.alive():
            op.proc.send_signal(signal.SIGTERM)
    for op, family in families:
        op.stop(family=family)


def probe(port: int, path: str) -> int:
    """The status of GET http://127.0.0.1:<port><path>, or 0 when nothing answered within 5 s."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except OSError:
        return 0


@dataclass
class ProxiedOperator:
    """An operator whose only way to the API server is a :class:`CutProxy`, with its health port."""

    op: Operator
    proxy: CutProxy
    health: int


def operator_via_proxy(cluster: Cluster, operators: Callable[..., Operator], tmp_path: Path, ns: str,
                       name: str, unreachable_timeout: str) -> ProxiedOperator:
    """Start a proxy in front of ``cluster`` and an operator (one Widget watch, namespace ``ns``) through it,
    serving /healthz and /readyz; the caller closes ``.proxy``."""
    proxy = cluster.proxy()
    try:
        op = operators(proxy.write_kubeconfig(tmp_path / "via-proxy.kubeconfig"), [widget_watch()],
                       "--health-probe-bind-address", "127.0.0.1:0",
                       "--api-unreachable-timeout", unreachable_timeout, namespace=ns, name=name)
        health = op.port("/healthz")
    except BaseException:
        proxy.close()
        raise
    return ProxiedOperator(op, proxy, health)


# ---------------------------------------------------------------------------------------------- figures


FIGURES: dict[str, dict[str, Any]] = {}


@pytest.fixture
def figures(request: pytest.FixtureRequest) -> Iterator[dict[str, Any]]:
    """This test's figures (a dict it fills in); recorded only if the test passes."""
    fig: dict[str, Any] = {}
    yield fig
    rep = getattr(request.node, "rep_call", None)
    if rep is not None and rep.passed:
        FIGURES[request.node.nodeid.split("::", 1)[-1]] = {**fig, "passed": True}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, None]:
    outcome = yield
    rep = outcome.get_result()
    if rep.when == "call":
        item.rep_call = rep  # type: ignore[attr-defined]


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Write the figures. Under pytest-xdist each worker writes a part next to the target and the
    controller (whose session ends after the workers') merges the parts."""
    worker = getattr(session.config, "workerinput", None)
    target = os.environ.get("FAULTS_SUMMARY")
    if target:
        path = Path(target)
    else:
        base = Path(session.config._tmp_path_factory.getbasetemp())  # type: ignore[attr-defined]
        path = (base.parent if worker is not None else base) / "faults-summary.json"
    if worker is not None:
        if FIGURES:
            part = path.with_name(f"{path.name}.{worker['workerid']}.part")
            part.write_text(json.dumps(FIGURES))
        return
    merged = dict(FIGURES)
    for part in sorted(path.parent.glob(f"{path.name}.*.part")):
        merged.update(json.loads(part.read_text()))
        part.unlink()
    if merged:
        path.write_text(json.dumps(merged, indent=2, sort_keys=True))
