"""Prometheus metrics and the ``/metrics``, ``/healthz``, ``/readyz`` HTTP endpoints.

Every metric lives in a ``CollectorRegistry`` owned by one ``Metrics`` object rather than in
prometheus_client's process-global default registry: tests (and an embedded operator next to another
one) can create as many as they like without "Duplicated timeseries" errors.

Metrics are labelled by *watch* (``Watch.key``, i.e. ``Kind.group``), the same name logs use. Operator
SDK's Ansible operator metric names (``ansible_operator_reconciles`` histogram,
``ansible_operator_reconcile_result``, ``ansible_operator_build_info``) are kept next to ours, with its
``GVK`` label, so existing dashboards keep working.

The HTTP side is a tiny aiohttp app. ``serve`` starts one listener; ``serve_endpoints`` starts one or two
depending on whether metrics and health probes share an address (they do not by default: ``:8080`` and
``:6789``, as in Operator SDK).
"""

from __future__ import annotations

import logging
import socket
from dataclasses import dataclass
from typing import Callable, Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from ansible_operator import __version__

__all__ = [
    "Metrics",
    "RUN_DURATION_BUCKETS",
    "ReadyCheck",
    "ServerHandle",
    "parse_bind_address",
    "serve",
    "serve_endpoints",
    "close_all",
]

log = logging.getLogger(__name__)

RUN_DURATION_BUCKETS: tuple[float, ...] = (
    0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600, 1200, 1800,
)
"""Seconds. A warm-executor no-op run takes ~50 ms; the default run timeout is far above 30 min, but
anything past 30 min lands in ``+Inf``, which is all an alert needs."""

_PHASES = ("reconcile", "finalize")


class Metrics:
    """All operator metrics in one private registry.

    ``watch_key`` is ``Watch.key`` (``Kind.group``). Call ``register_watch`` once per watch so the Operator
    SDK compatible metrics get the SDK's ``GVK`` label value (``group/version, Kind=Kind``); without it
    the watch key is used there too.
    """

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        r = self.registry
        self._gvk: dict[str, str] = {}
        self.runs_started = Counter(
            "ansible_operator_runs_started", "Runs (playbook executions) started.",
            ["watch", "phase"], registry=r)
        self.runs = Counter(
            "ansible_operator_runs", "Runs finished, by result"
            " (successful, failed, timeout, canceled, error).",
            ["watch", "phase", "result"], registry=r)
        self.run_duration = Histogram(
            "ansible_operator_run_duration_seconds", "Wall-clock duration of finished runs.",
            ["watch", "phase"], buckets=RUN_DURATION_BUCKETS, registry=r)
        self.finalizer_runs = Counter(
            "ansible_operator_finalizer_runs", "Finalizer runs finished, by result.",
            ["watch", "result"], registry=r)
        self.queue_depth = Gauge(
            "ansible_operator_queue_depth", "Objects waiting in the work queue of a watch.",
            ["watch"], registry=r)
        self.in_flight = Gauge(
            "ansible_operator_runs_in_flight", "Runs currently executing.", ["watch"], registry=r)
        self.reconcile_errors = Counter(
            "ansible_operator_reconcile_errors", "Reconciles that failed outside the playbook"
            " (API errors, status write conflicts, executor failures), by reason.",
            ["watch", "reason"], registry=r)
        self.leader = Gauge(
            "ansible_operator_leader", "1 while this replica holds the leader election Lease"
            " (always 1 without leader election).", registry=r)
        # ---- Operator SDK compatible names ----
        self.build_info = Gauge(
            "ansible_operator_build_info", "Build information.", ["version", "commit"], registry=r)
        self.build_info.labels(version=__version__, commit="").set(1)
        self.sdk_reconciles = Histogram(
            "ansible_operator_reconciles", "How long in seconds a reconcile takes (Operator SDK name).",
            ["GVK"], buckets=RUN_DURATION_BUCKETS, registry=r)
        self.sdk_reconcile_result = Gauge(
            "ansible_operator_reconcile_result", "Reconciles and their results (Operator SDK name;"
            " result is 'succeeded' or 'failed').", ["GVK", "result"], registry=r)

    # ---- watches ----------------------------------------------------------------------------------

    def register_watch(self, watch_key: str, group: str, version: str, kind: str) -> None:
        """Record a watch's GVK and create its zero-valued series so dashboards show it before any run."""
        api_version = f"{group}/{version}" if group else version
        self._gvk[watch_key] = f"{api_version}, Kind={kind}"
        self.queue_depth.labels(watch=watch_key).set(0)
        self.in_flight.labels(watch=watch_key).set(0)
        for phase in _PHASES:
            self.runs_started.labels(watch=watch_key, phase=phase)

    def _gvk_label(self, watch_key: str) -> str:
        return self._gvk.get(watch_key, watch_key)

    # ---- run lifecycle ----------------------------------------------------------------------------

    def run_started(self, watch_key: str, phase: str) -> None:
        """A run began executing (``phase``: ``reconcile`` or ``finalize``)."""
        _check_phase(phase)
        self.runs_started.labels(watch=watch_key, phase=phase).inc()

    def run_finished(self, watch_key: str, phase: str, result: str, duration_s: float) -> None:
        """A run ended; ``result`` is the run status (``successful``, ``failed``, ``timeout``, ...)."""
        _check_phase(phase)
        duration = max(0.0, float(duration_s))
        self.runs.labels(watch=watch_key, phase=phase, result=result).inc()
        self.run_duration.labels(watch=watch_key, phase=phase).observe(duration)
        if phase == "finalize":
            self.finalizer_runs.labels(watch=watch_key, result=result).inc()
        gvk = self._gvk_label(watch_key)
        self.sdk_reconciles.labels(GVK=gvk).observe(duration)
        sdk_result = "succeeded" if result == "successful" else "failed"
        self.sdk_reconcile_result.labels(GVK=gvk, result=sdk_result).inc()

    def set_queue_depth(self, watch_key: str, depth: int) -> None:
        self.queue_depth.labels(watch=watch_key).set(depth)

    def set_in_flight(self, watch_key: str, n: int) -> None:
        self.in_flight.labels(watch=watch_key).set(n)

    def reconcile_error(self, watch_key: str, reason: str) -> None:
        """A reconcile failed for a reason other than the playbook's own result (short, bounded ``reason``
        such as ``api_error``, ``status_conflict``, ``executor`` -- never a free-form message, which would
        explode label cardinality)."""
        self.reconcile_errors.labels(watch=watch_key, reason=reason).inc()

    def set_leader(self, leading: bool) -> None:
        self.leader.set(1 if leading else 0)

    def exposition(self) -> bytes:
        """The registry in Prometheus text format (what ``/metrics`` returns)."""
        return generate_latest(self.registry)


def _check_phase(phase: str) -> None:
    if phase not in _PHASES:
        raise ValueError(f"unknown run phase {phase!r}: expected one of {', '.join(_PHASES)}")


# ---- HTTP endpoints ---------------------------------------------------------------------------------

ReadyCheck = Callable[[], "bool | tuple[bool, str]"]
"""Returns True when ready, or ``(False, "why")`` / False when not."""


def parse_bind_address(address: str) -> tuple[str | None, int] | None:
    """``":8080"`` → ``(None, 8080)`` (all interfaces), ``"127.0.0.1:0"`` → ``("127.0.0.1", 0)``,
    ``"[::1]:9000"`` → ``("::1", 9000)``, ``"0"`` or ``""`` → ``None`` (disabled), as controller-runtime
    reads ``--metrics-bind-address``. Raises ``ValueError`` with the accepted forms otherwise."""
    text = address.strip()
    if text in ("", "0"):
        return None
    host, sep, port_text = text.rpartition(":")
    if not sep:
        raise ValueError(f"invalid bind address {address!r}: expected HOST:PORT, :PORT, or 0 to disable")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    try:
        port = int(port_text)
    except ValueError:
        raise ValueError(f"invalid bind address {address!r}: port {port_text!r} is not a number") from None
    if not 0 <= port <= 65535:
        raise ValueError(f"invalid bind address {address!r}: port must be 0..65535")
    return (host or None), port


@dataclass
class ServerHandle:
    """A running listener. ``port`` is the real port (useful with port 0)."""

    host: str | None
    port: int
    paths: tuple[str, ...]
    _runner: object

    @property
    def url(self) -> str:
        host = self.host or "127.0.0.1"
        if ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{self.port}"

    async def close(self) -> None:
        await self._runner.cleanup()  # type: ignore[attr-defined]


def _evaluate(check: ReadyCheck) -> tuple[bool, str]:
    try:
        value = check()
    except Exception as exc:  # a probe must answer, not crash the server
        return False, f"check raised {type(exc).__name__}: {exc}"
    if isinstance(value, tuple):
        ok, reason = bool(value[0]), str(value[1])
        return ok, reason
    return bool(value), ""


async def serve(
    bind_address: str,
    *,
    metrics: Metrics | None = None,
    ready: ReadyCheck | None = None,
    live: ReadyCheck | None = None,
    health: bool = True,
) -> ServerHandle | None:
    """Start an HTTP listener on ``bind_address``; return None when the address disables it (``"0"``).

    Serves ``/metrics`` when ``metrics`` is given, and ``/healthz`` + ``/readyz`` when ``health`` is true
    (``ready`` defaults to "always ready", ``live`` to "always alive"). Both answer ``200 ok`` or
    ``500`` with the reason in the body, like Kubernetes' own components.
    """
    from aiohttp import web

    parsed = parse_bind_address(bind_address)
    if parsed is None:
        return None
    host, port = parsed
    app = web.Application()
    paths: list[str] = []

    if metrics is not None:
        async def metrics_handler(_request: web.Request) -> web.Response:
            return web.Response(body=metrics.exposition(), headers={"Content-Type": CONTENT_TYPE_LATEST})

        app.router.add_get("/metrics", metrics_handler)
        paths.append("/metrics")

    if health:
        def probe(check: ReadyCheck | None, failing: str) -> Callable[[web.Request], object]:
            async def handler(_request: web.Request) -> web.Response:
                ok, reason = (True, "") if check is None else _evaluate(check)
                if ok:
                    return web.Response(text="ok")
                return web.Response(status=500, text=f"{failing}: {reason}" if reason else failing)
            return handler

        app.router.add_get("/healthz", probe(live, "not alive"))  # type: ignore[arg-type]
        app.router.add_get("/readyz", probe(ready, "not ready"))  # type: ignore[arg-type]
        paths += ["/healthz", "/readyz"]

    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host=host, port=port)
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        raise OSError(exc.errno, f"cannot listen on {bind_address!r} for {', '.join(paths)}: {exc.strerror}") \
            from exc
    server = getattr(site, "_server", None)
    sockets = getattr(server, "sockets", None) or []
    # With port 0 on all interfaces each address family gets its own port: report the IPv4 one, which
    # ``url`` (127.0.0.1) reaches.
    ipv4 = [s for s in sockets if s.family == socket.AF_INET]
    real_port = (ipv4 or sockets)[0].getsockname()[1] if sockets else port
    log.info("serving %s on %s", " ".join(paths), f"{host or '*'}:{real_port}")
    return ServerHandle(host=host, port=real_port, paths=tuple(paths), _runner=runner)


async def serve_endpoints(
    metrics_address: str,
    health_address: str,
    *,
    metrics: Metrics,
    ready: ReadyCheck | None = None,
    live: ReadyCheck | None = None,
) -> list[ServerHandle]:
    """Start what ``run --metrics-bind-address/--health-probe-bind-address`` ask for: one listener when
    both addresses are the same, two when they differ, fewer when one is ``"0"``. Close them with
    ``close_all``."""
    handles: list[ServerHandle] = []
    try:
        same = parse_bind_address(metrics_address) == parse_bind_address(health_address) \
            and parse_bind_address(metrics_address) is not None
        if same:
            h = await serve(metrics_address, metrics=metrics, ready=ready, live=live)
            if h:
                handles.append(h)
            return handles
        h = await serve(metrics_address, metrics=metrics, health=False)
        if h:
            handles.append(h)
        h = await serve(health_address, ready=ready, live=live)
        if h:
            handles.append(h)
        return handles
    except BaseException:
        await close_all(handles)
        raise


async def close_all(handles: Iterable[ServerHandle]) -> None:
    for h in handles:
        await h.close()
