"""Prometheus metrics and the ``/metrics``, ``/healthz``, ``/readyz`` HTTP endpoints.

Every metric lives in a ``CollectorRegistry`` owned by one ``Metrics`` object rather than in
prometheus_client's process-global default registry: tests (and an embedded operator next to another
one) can create as many as they like without "Duplicated timeseries" errors.

Metrics are labelled by *watch* (``Watch.key``, i.e. ``Kind.group``), the same name logs use. Operator
SDK's Ansible operator metric names (``ansible_operator_reconciles`` histogram,
``ansible_operator_reconcile_result``, ``ansible_operator_build_info``) are kept next to ours, with its
``GVK`` label, so existing dashboards keep working.

controller-runtime's own series, which the SDK's ``/metrics`` has and users' dashboards and alerts read
(``controller_runtime_reconcile_total{controller,result}``, ``..._reconcile_time_seconds``, ``workqueue_*``
with ``name`` and ``controller``...), are exported with controller-runtime 0.19's names, labels and buckets
(the version the SDK's current ansible-operator is built with) by ``ControllerMetrics``, one per watch,
which the work queue calls (``queue.QueueHooks``). The ``controller`` label is the SDK's controller name,
``<kind>-<version>-controller`` in lower case (``memcached-v1alpha1-controller``).

Custom metrics from roles (``operator_sdk.util.osdk_metric``) are ``UserMetrics``: the JSON the collection
POSTs to ``http://localhost:5050/metrics`` (``serve_osdk_metric``), applied with the rules of the SDK's
``internal/ansible/metrics/metrics.go`` and exported under exactly the name the role gave (no ``_total``
suffix, no labels), as the SDK's Go client does.

The HTTP side is a tiny aiohttp app. ``serve`` starts one listener; ``serve_endpoints`` starts one or two
depending on whether metrics and health probes share an address (they do not by default: ``:8443`` and
``:6789``, as in Operator SDK). ``--metrics-secure`` serves HTTPS (``tls_context``), and
``--metrics-require-rbac`` puts ``RbacFilter`` (TokenReview + SubjectAccessReview) in front of ``/metrics``.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import socket
import ssl
import time
from collections.abc import Awaitable, Callable, Hashable, Iterable
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import prometheus_client
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from ansible_operator import __version__

# Go operators export no "<counter>_created" / "<histogram>_created" series; neither do we.
prometheus_client.disable_created_metrics()  # type: ignore[no-untyped-call]


def go_float(value: float) -> str:
    """A sample value or ``le``/``quantile`` as Go's Prometheus client writes it (expfmt's ``writeFloat``:
    ``strconv.FormatFloat(v, 'g', -1, 64)``): ``0``, ``3``, ``2.5``, ``1e+06``, ``1e-05``, ``+Inf``;
    prometheus_client writes ``0.0``, ``3.0``, ``1000000.0``."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value == 0:
        return "0"
    shortest = Decimal(repr(abs(value))).normalize().as_tuple()
    digits = "".join(map(str, shortest.digits))
    point = len(digits) + int(shortest.exponent)  # digits[:point] is the integer part
    sign = "-" if value < 0 else ""
    exponent = point - 1
    if exponent < -4 or exponent >= 6:  # Go's %g with the shortest precision switches to %e there
        mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        return f"{sign}{mantissa}e{'+' if exponent >= 0 else '-'}{abs(exponent):02d}"
    if point <= 0:
        return f"{sign}0.{'0' * -point}{digits}"
    if point >= len(digits):
        return sign + digits + "0" * (point - len(digits))
    return f"{sign}{digits[:point]}.{digits[point:]}"


floatToGoString: Callable[[float], str] = go_float

_BOUND_LABEL = re.compile(r'([{,](?:le|quantile)=")([^"]*)(")')


def _go_floats(text: str) -> str:
    """prometheus_client's text exposition with every sample value and ``le``/``quantile`` written the Go
    way (:func:`go_float`), so that dashboards and queries written against Go operators match."""
    def bound(match: re.Match[str]) -> str:
        try:
            return match.group(1) + go_float(float(match.group(2))) + match.group(3)
        except ValueError:
            return match.group(0)

    lines = []
    for line in text.split("\n"):
        if line and not line.startswith("#"):
            head, _, value = line.rpartition(" ")
            try:
                line = f"{_BOUND_LABEL.sub(bound, head)} {go_float(float(value))}"
            except ValueError:
                pass
        lines.append(line)
    return "\n".join(lines)

__all__ = [
    "RECONCILE_TIME_BUCKETS",
    "RUN_DURATION_BUCKETS",
    "WORKQUEUE_BUCKETS",
    "ControllerMetrics",
    "Metrics",
    "RbacFilter",
    "ReadyCheck",
    "ServerHandle",
    "UserMetricError",
    "UserMetrics",
    "close_all",
    "controller_name",
    "installed_osdk_util",
    "parse_bind_address",
    "serve",
    "serve_endpoints",
    "serve_osdk_metric",
    "start_osdk_metric_endpoint",
    "tls_context",
]

log = logging.getLogger(__name__)

RUN_DURATION_BUCKETS: tuple[float, ...] = (
    0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600, 1200, 1800,
)
"""Seconds. A warm-executor no-op run takes ~50 ms; the default run timeout is far above 30 min, but
anything past 30 min lands in ``+Inf``, which is all an alert needs."""

_PHASES = ("reconcile", "finalize")

REST_CLIENT_BUCKETS: tuple[float, ...] = (0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0)
"""client-go's ``rest_client_request_duration_seconds`` buckets."""

RECONCILE_TIME_BUCKETS: tuple[float, ...] = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0,
    1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5, 6, 7, 8, 9, 10, 15, 20, 25, 30, 40, 50, 60,
)
"""controller-runtime's ``controller_runtime_reconcile_time_seconds`` buckets."""


def _exponential_buckets(start: float, factor: float, count: int) -> tuple[float, ...]:
    """Go's ``prometheus.ExponentialBuckets``, computed the same way (so ``le`` values print the same)."""
    out = []
    for _ in range(count):
        out.append(start)
        start *= factor
    return tuple(out)


WORKQUEUE_BUCKETS = _exponential_buckets(10e-9, 10, 12)
"""``workqueue_queue_duration_seconds`` / ``workqueue_work_duration_seconds``: 10 ns to 1000 s."""

_RECONCILE_RESULTS = ("error", "requeue_after", "requeue", "success")


def controller_name(kind: str, version: str) -> str:
    """The Operator SDK's controller name for a watch (its ``controller`` metric label)."""
    return f"{kind.lower()}-{version.lower()}-controller"


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
        self._controllers: set[str] = set()
        # client-go's REST client metrics, as controller-runtime registers them, for the runner's own calls
        self.rest_requests = Counter(
            "rest_client_requests", "Number of HTTP requests, partitioned by status code, method, and host.",
            ["code", "method", "host"], registry=r)
        self.rest_duration = Histogram(
            "rest_client_request_duration_seconds",
            "Request latency in seconds. Broken down by verb, and host.",
            ["verb", "host"], buckets=REST_CLIENT_BUCKETS, registry=r)
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
        # ---- controller-runtime's names (controller-runtime 0.19, as the SDK) ----
        controller = ["controller"]
        queue = ["name", "controller"]
        self.cr_reconcile_total = Counter(
            "controller_runtime_reconcile_total", "Total number of reconciliations per controller",
            ["controller", "result"], registry=r)
        self.cr_reconcile_errors = Counter(
            "controller_runtime_reconcile_errors_total", "Total number of reconciliation errors per"
            " controller", controller, registry=r)
        self.cr_terminal_errors = Counter(
            "controller_runtime_terminal_reconcile_errors_total", "Total number of terminal reconciliation"
            " errors per controller", controller, registry=r)
        self.cr_reconcile_panics = Counter(
            "controller_runtime_reconcile_panics_total", "Total number of reconciliation panics per"
            " controller (here: reconciles that raised)", controller, registry=r)
        self.cr_reconcile_time = Histogram(
            "controller_runtime_reconcile_time_seconds", "Length of time per reconciliation per controller",
            controller, buckets=RECONCILE_TIME_BUCKETS, registry=r)
        self.cr_max_concurrent = Gauge(
            "controller_runtime_max_concurrent_reconciles", "Maximum number of concurrent reconciles per"
            " controller", controller, registry=r)
        self.cr_active_workers = Gauge(
            "controller_runtime_active_workers", "Number of currently used workers per controller",
            controller, registry=r)
        self.wq_depth = Gauge("workqueue_depth", "Current depth of workqueue", queue, registry=r)
        self.wq_adds = Counter("workqueue_adds_total", "Total number of adds handled by workqueue", queue,
                               registry=r)
        self.wq_queue_duration = Histogram(
            "workqueue_queue_duration_seconds", "How long in seconds an item stays in workqueue before"
            " being requested", queue, buckets=WORKQUEUE_BUCKETS, registry=r)
        self.wq_work_duration = Histogram(
            "workqueue_work_duration_seconds", "How long in seconds processing an item from workqueue"
            " takes.", queue, buckets=WORKQUEUE_BUCKETS, registry=r)
        self.wq_unfinished = Gauge(
            "workqueue_unfinished_work_seconds", "How many seconds of work has been done that is in"
            " progress and hasn't been observed by work_duration. Large values indicate stuck threads.",
            queue, registry=r)
        self.wq_longest = Gauge(
            "workqueue_longest_running_processor_seconds", "How many seconds has the longest running"
            " processor for workqueue been running.", queue, registry=r)
        self.wq_retries = Counter("workqueue_retries_total", "Total number of retries handled by workqueue",
                                  queue, registry=r)
        self.leader_status = Gauge(
            "leader_election_master_status", "Gauge of if the reporting system is master of the relevant"
            " lease, 0 indicates backup, 1 indicates master. 'name' is the string used to identify the"
            " lease.",
            ["name"], registry=r)
        ProcessCollector(registry=r)  # process_cpu_seconds_total, process_resident_memory_bytes, ... as Go's
        self.user = UserMetrics(reserved=self._registry_names)
        """Custom metrics from roles (``osdk_metric``)."""

    def _registry_names(self) -> set[str]:
        return {family.name for family in self.registry.collect()}

    # ---- watches ----------------------------------------------------------------------------------

    def register_watch(self, watch_key: str, group: str, version: str, kind: str) -> None:
        """Record a watch's GVK and create its zero-valued series so dashboards show it before any run."""
        api_version = f"{group}/{version}" if group else version
        self._gvk[watch_key] = f"{api_version}, Kind={kind}"
        self.queue_depth.labels(watch=watch_key).set(0)
        self.in_flight.labels(watch=watch_key).set(0)
        for phase in _PHASES:
            self.runs_started.labels(watch=watch_key, phase=phase)

    def controller(self, kind: str, version: str, max_concurrent: int, *, group: str = "",
                   clock: Callable[[], float] = time.monotonic) -> ControllerMetrics:
        """The controller-runtime metrics of one watch's controller, with its zero-valued series created
        (as controller-runtime's ``initMetrics``); pass it to the watch's ``WorkQueue(hooks=...)``. Two
        watches of the same kind and version (different groups) get the group in the second name."""
        name = controller_name(kind, version)
        if name in self._controllers:
            name = f"{kind.lower()}-{version.lower()}-{group.lower()}-controller"
        self._controllers.add(name)
        return ControllerMetrics(self, name, max_concurrent, clock=clock)

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

    def api_request(self, method: str, code: str, host: str, seconds: float) -> None:
        """One request the runner made (:attr:`ansible_operator.kube.Kube.observers`); thread-safe."""
        self.rest_requests.labels(code=code, method=method, host=host).inc()
        self.rest_duration.labels(verb=method, host=host).observe(seconds)

    def set_leader(self, leading: bool, lease: str | None = None) -> None:
        """``lease``: the Lease's name under leader election (controller-runtime's
        ``leader_election_master_status{name}``)."""
        self.leader.set(1 if leading else 0)
        if lease is not None:
            self.leader_status.labels(name=lease).set(1 if leading else 0)

    def exposition(self) -> bytes:
        """The registry and the roles' custom metrics in Prometheus text format (``/metrics``)."""
        return _go_floats(generate_latest(self.registry).decode()).encode() + self.user.exposition()


class ControllerMetrics:
    """One controller's controller-runtime series (``controller_runtime_*``, ``workqueue_*``), fed by its
    work queue at the points controller-runtime and client-go's workqueue record them
    (:class:`ansible_operator.queue.QueueHooks`):

    * an add that is not coalesced counts in ``workqueue_adds_total`` and ``workqueue_depth`` until a
      worker takes it (``workqueue_queue_duration_seconds`` is that wait, from the first add);
    * every delayed add (backoff, requeue after) counts in ``workqueue_retries_total`` (client-go's
      ``AddAfter``);
    * a reconcile's result is ``error`` (failed or raised; also counted in
      ``controller_runtime_reconcile_errors_total``), ``requeue_after`` (it asked for a later run, e.g.
      the reconcile period) or ``success``; its duration goes to
      ``controller_runtime_reconcile_time_seconds`` and ``workqueue_work_duration_seconds``;
    * ``workqueue_unfinished_work_seconds`` and ``..._longest_running_processor_seconds`` are computed
      when scraped, from the reconciles running then.
    """

    def __init__(self, metrics: Metrics, name: str, max_concurrent: int, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.name = name
        self._clock = clock
        self._added_at: dict[Hashable, float] = {}
        self._started_at: dict[Hashable, float] = {}
        m = metrics
        self._total = {result: m.cr_reconcile_total.labels(controller=name, result=result)
                       for result in _RECONCILE_RESULTS}
        self._errors = m.cr_reconcile_errors.labels(controller=name)
        m.cr_terminal_errors.labels(controller=name)  # no terminal errors here: the series stays 0
        self._panics = m.cr_reconcile_panics.labels(controller=name)
        self._time = m.cr_reconcile_time.labels(controller=name)
        m.cr_max_concurrent.labels(controller=name).set(max_concurrent)
        self._active = m.cr_active_workers.labels(controller=name)
        self._active.set(0)
        q = {"name": name, "controller": name}
        self._depth = m.wq_depth.labels(**q)
        self._depth.set(0)
        self._adds = m.wq_adds.labels(**q)
        self._queue_duration = m.wq_queue_duration.labels(**q)
        self._work_duration = m.wq_work_duration.labels(**q)
        self._retries = m.wq_retries.labels(**q)
        m.wq_unfinished.labels(**q).set_function(self._unfinished_seconds)
        m.wq_longest.labels(**q).set_function(self._longest_running_seconds)

    # ---- queue.QueueHooks -------------------------------------------------------------------------

    def added(self, key: Hashable) -> None:
        self._adds.inc()
        self._depth.inc()
        self._added_at.setdefault(key, self._clock())

    def dropped(self, key: Hashable) -> None:
        self._depth.dec()
        self._added_at.pop(key, None)

    def retried(self, key: Hashable) -> None:
        self._retries.inc()

    def started(self, key: Hashable) -> None:
        now = self._clock()
        self._depth.dec()
        added = self._added_at.pop(key, None)
        if added is not None:
            self._queue_duration.observe(max(0.0, now - added))
        self._started_at[key] = now
        self._active.inc()

    def finished(self, key: Hashable, outcome: Any, raised: bool) -> None:
        started = self._started_at.pop(key, None)
        self._active.dec()
        if outcome is None or started is None:
            return  # cancelled (shutdown): no result to count
        duration = max(0.0, self._clock() - started)
        self._time.observe(duration)
        self._work_duration.observe(duration)
        if raised:
            self._panics.inc()
        if outcome.failed:
            self._errors.inc()
            self._total["error"].inc()
        elif outcome.requeue_after is not None and outcome.requeue_after > 0:
            self._total["requeue_after"].inc()
        else:
            self._total["success"].inc()

    # ---- computed when scraped --------------------------------------------------------------------

    def _unfinished_seconds(self) -> float:
        now = self._clock()
        return sum(max(0.0, now - t) for t in self._started_at.values())

    def _longest_running_seconds(self) -> float:
        now = self._clock()
        return max((max(0.0, now - t) for t in self._started_at.values()), default=0.0)


# ---- custom metrics from roles (operator_sdk.util.osdk_metric) ------------------------------------

GO_DEFAULT_BUCKETS: tuple[float, ...] = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
"""``prometheus.DefBuckets``: the SDK creates user histograms without buckets of its own."""

_METRIC_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
_TYPES = ("counter", "gauge", "histogram", "summary")


class UserMetricError(ValueError):
    """A metric request the SDK would answer with 400; ``str(e)`` is the one-line reason."""


@dataclass
class _UserMetric:
    name: str
    help: str
    type: str
    value: float = 0.0
    buckets: list[int] = field(default_factory=list)
    count: int = 0
    sum: float = 0.0


def _number(spec: dict[str, Any], key: str, what: str) -> float | None:
    value = spec.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise UserMetricError(f"{what}.{key} must be a finite number, got {value!r}")
    return float(value)


def _flag(spec: dict[str, Any], key: str, what: str) -> bool:
    value = spec.get(key)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise UserMetricError(f"{what}.{key} must be true or false, got {value!r}")
    return value


class UserMetrics:
    """Metrics roles create through ``osdk_metric``, keyed by name, rendered in Prometheus text format.

    The request is the SDK's ``UserMetric`` JSON (``internal/ansible/metrics/metrics.go``)::

        {"name": "n", "description": "help", "counter": {"increment": true, "add": null}}

    with exactly one of ``counter`` (increment | add >= 0), ``gauge`` (increment | decrement | add |
    subtract | set | set_to_current_time, first one present wins in that order), ``histogram`` (observe)
    or ``summary`` (observe). The first request for a name creates the metric with that type and help;
    a later request of another type is refused, as in the SDK. Unlike the SDK (Go's ``omitempty``),
    ``gauge: {set: 0}`` does set the gauge to 0.
    """

    def __init__(self, reserved: Callable[[], set[str]] = set) -> None:
        self._metrics: dict[str, _UserMetric] = {}
        self._reserved = reserved

    def apply(self, request: Any) -> None:
        """Apply one request; raises ``UserMetricError`` (nothing changes) when it is invalid."""
        if not isinstance(request, dict):
            raise UserMetricError("the request body must be a JSON object")
        name = request.get("name")
        if not isinstance(name, str) or not _METRIC_NAME.match(name):
            raise UserMetricError(f"invalid metric name {name!r}: must match {_METRIC_NAME.pattern}")
        given = [t for t in _TYPES if request.get(t) is not None]
        if len(given) > 1:
            raise UserMetricError("only one metric can be processed at a time")
        if not given:
            raise UserMetricError("a request should contain at least one metric")
        kind = given[0]
        spec = request[kind]
        if not isinstance(spec, dict):
            raise UserMetricError(f"{kind} must be an object, got {spec!r}")
        metric = self._metrics.get(name)
        if metric is None:
            taken = self._reserved()
            suffixed = {f"{t}{suffix}" for t in taken for suffix in ("_total", "_created")}
            if name in taken or name in suffixed:
                raise UserMetricError(f"metric {name} is already exported by the operator itself")
            help_text = request.get("description")
            metric = _UserMetric(name=name, help=str(help_text) if help_text is not None else "", type=kind)
            if kind == "histogram":
                metric.buckets = [0] * len(GO_DEFAULT_BUCKETS)
            self._check(metric, kind, spec)
            self._metrics[name] = metric
            log.info("registering custom metric %s (%s)", name, kind)
        else:
            self._check(metric, kind, spec)
        self._update(metric, kind, spec)

    def _check(self, metric: _UserMetric, kind: str, spec: dict[str, Any]) -> None:
        same_family = {metric.type, kind} <= {"histogram", "summary"}  # the SDK accepts either for both
        if kind != metric.type and not same_family:
            raise UserMetricError(f"cannot change metric type of {metric.name}, which is a {metric.type}")
        if kind == "counter":
            _flag(spec, "increment", kind)
            add = _number(spec, "add", kind)
            if add is not None and add < 0 and not spec.get("increment"):
                raise UserMetricError("counter metrics cannot decrease in value")
        elif kind == "gauge":
            for key in ("increment", "decrement", "set_to_current_time"):
                _flag(spec, key, kind)
            for key in ("add", "subtract", "set"):
                _number(spec, key, kind)
        else:
            _number(spec, "observe", kind)

    def _update(self, metric: _UserMetric, kind: str, spec: dict[str, Any]) -> None:
        if kind == "counter":
            if spec.get("increment"):
                metric.value += 1
            elif spec.get("add") is not None:
                metric.value += float(spec["add"])
        elif kind == "gauge":
            if spec.get("increment"):
                metric.value += 1
            elif spec.get("decrement"):
                metric.value -= 1
            elif spec.get("add") is not None:
                metric.value += float(spec["add"])
            elif spec.get("subtract") is not None:
                metric.value -= float(spec["subtract"])
            elif spec.get("set") is not None:
                metric.value = float(spec["set"])
            elif spec.get("set_to_current_time"):
                metric.value = time.time()
        else:
            value = spec.get("observe")
            if value is None:
                return  # the metric exists now; nothing observed (the SDK would observe 0)
            value = float(value)
            metric.count += 1
            metric.sum += value
            if metric.type == "histogram":
                for i, bound in enumerate(GO_DEFAULT_BUCKETS):
                    if value <= bound:
                        metric.buckets[i] += 1

    def names(self) -> set[str]:
        return set(self._metrics)

    def exposition(self) -> bytes:
        lines: list[str] = []
        for name in sorted(self._metrics):
            m = self._metrics[name]
            help_text = m.help.replace("\\", "\\\\").replace("\n", "\\n")
            lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {m.type}"]
            if m.type in ("counter", "gauge"):
                lines.append(f"{name} {floatToGoString(m.value)}")
                continue
            if m.type == "histogram":
                for bound, count in zip(GO_DEFAULT_BUCKETS, m.buckets):
                    lines.append(f'{name}_bucket{{le="{floatToGoString(bound)}"}} {count}')
                lines.append(f'{name}_bucket{{le="+Inf"}} {m.count}')
            lines += [f"{name}_sum {floatToGoString(m.sum)}", f"{name}_count {m.count}"]
        return ("\n".join(lines) + "\n").encode() if lines else b""



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
    bracketed = host.startswith("[") and host.endswith("]")
    if bracketed:
        host = host[1:-1]
    if host and not _valid_host(host, ipv6_ok=bracketed):
        raise ValueError(f"invalid bind address {address!r}: {host!r} is not an IP address or host name"
                         + (" (write IPv6 as [addr]:port)" if ":" in host and not bracketed else ""))
    try:
        port = int(port_text)
    except ValueError:
        raise ValueError(f"invalid bind address {address!r}: port {port_text!r} is not a number") from None
    if not 0 <= port <= 65535:
        raise ValueError(f"invalid bind address {address!r}: port must be 0..65535")
    return (host or None), port


_HOST_LABEL = re.compile(r"^(?!-)[A-Za-z0-9-]{1,63}(?<!-)$")


def _valid_host(host: str, *, ipv6_ok: bool) -> bool:
    """An IPv4 address or host name, or (``ipv6_ok``: it was written in brackets) an IPv6 address."""
    import ipaddress

    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return not ipv6_ok and len(host) <= 253 \
            and all(_HOST_LABEL.match(label) for label in host.rstrip(".").split("."))
    return ip.version == 6 if ipv6_ok else ip.version == 4


@dataclass
class ServerHandle:
    """A running listener. ``port`` is the real port (useful with port 0)."""

    host: str | None
    port: int
    paths: tuple[str, ...]
    _runner: object
    scheme: str = "http"

    @property
    def url(self) -> str:
        host = self.host or "127.0.0.1"
        if ":" in host:
            host = f"[{host}]"
        return f"{self.scheme}://{host}:{self.port}"

    async def close(self) -> None:
        await self._runner.cleanup()  # type: ignore[attr-defined]


def _evaluate(check: ReadyCheck) -> tuple[bool, str]:
    try:
        value = check()
    except Exception as exc:  # noqa: BLE001 - a probe must answer, not crash the server
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
    tls: ssl.SSLContext | None = None,
    metrics_filter: RbacFilter | None = None,
) -> ServerHandle | None:
    """Start an HTTP listener on ``bind_address``; return None when the address disables it (``"0"``).

    Serves ``/metrics`` when ``metrics`` is given, and ``/healthz`` + ``/readyz`` when ``health`` is true
    (``ready`` defaults to "always ready", ``live`` to "always alive"). Both answer ``200 ok`` or
    ``500`` with the reason in the body, like Kubernetes' own components. ``tls`` serves HTTPS;
    ``metrics_filter`` must allow a request before ``/metrics`` answers it.
    """
    from aiohttp import web

    parsed = parse_bind_address(bind_address)
    if parsed is None:
        return None
    host, port = parsed
    app = web.Application()
    paths: list[str] = []

    if metrics is not None:
        async def metrics_handler(request: web.Request) -> web.Response:
            if metrics_filter is not None:
                refusal = await metrics_filter.check(request.headers.get("Authorization", ""), request.path,
                                                     request.method)
                if refusal is not None:
                    return web.Response(status=refusal[0], text=refusal[1])
            return web.Response(body=metrics.exposition(), headers={"Content-Type": CONTENT_TYPE_LATEST})

        app.router.add_get("/metrics", metrics_handler)
        paths.append("/metrics")

    if health:
        def probe(check: ReadyCheck | None, failing: str) -> Callable[[web.Request], Awaitable[web.Response]]:
            async def handler(_request: web.Request) -> web.Response:
                ok, reason = (True, "") if check is None else _evaluate(check)
                if ok:
                    return web.Response(text="ok")
                return web.Response(status=500, text=f"{failing}: {reason}" if reason else failing)
            return handler

        app.router.add_get("/healthz", probe(live, "not alive"))
        app.router.add_get("/readyz", probe(ready, "not ready"))
        paths += ["/healthz", "/readyz"]

    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host=host, port=port, ssl_context=tls)
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        what = ", ".join(paths)
        raise OSError(exc.errno, f"cannot listen on {bind_address!r} for {what}: {exc.strerror}") from exc
    server = getattr(site, "_server", None)
    sockets = getattr(server, "sockets", None) or []
    # With port 0 on all interfaces each address family gets its own port: report the IPv4 one, which
    # ``url`` (127.0.0.1) reaches.
    ipv4 = [s for s in sockets if s.family == socket.AF_INET]
    real_port = (ipv4 or sockets)[0].getsockname()[1] if sockets else port
    log.info("serving %s on %s", " ".join(paths), f"{host or '*'}:{real_port}")
    return ServerHandle(host=host, port=real_port, paths=tuple(paths), _runner=runner,
                        scheme="https" if tls is not None else "http")


async def serve_endpoints(
    metrics_address: str,
    health_address: str,
    *,
    metrics: Metrics,
    ready: ReadyCheck | None = None,
    live: ReadyCheck | None = None,
    tls: ssl.SSLContext | None = None,
    metrics_filter: RbacFilter | None = None,
) -> list[ServerHandle]:
    """Start what ``run --metrics-bind-address/--health-probe-bind-address`` ask for: one listener when
    both addresses are the same, two when they differ, fewer when one is ``"0"``. ``tls`` and
    ``metrics_filter`` apply to the metrics listener (to the probes too when they share it). Close them with
    ``close_all``."""
    handles: list[ServerHandle] = []
    try:
        same = parse_bind_address(metrics_address) == parse_bind_address(health_address) \
            and parse_bind_address(metrics_address) is not None
        if same:
            h = await serve(metrics_address, metrics=metrics, ready=ready, live=live, tls=tls,
                            metrics_filter=metrics_filter)
            if h:
                handles.append(h)
            return handles
        h = await serve(metrics_address, metrics=metrics, health=False, tls=tls,
                        metrics_filter=metrics_filter)
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


# ---- HTTPS for /metrics (--metrics-secure) -----------------------------------------------------------

def tls_context(cert_dir: str | Path, cert_name: str = "tls.crt",
                key_name: str = "tls.key") -> ssl.SSLContext:
    """A server context from ``cert_dir/cert_name`` + ``cert_dir/key_name`` when both exist (a mounted
    Secret, as controller-runtime's metrics server reads them), else from a fresh self-signed certificate
    for ``localhost``, this host name and 127.0.0.1 (controller-runtime does the same). HTTP/1.1 only."""
    import tempfile

    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.set_alpn_protocols(["http/1.1"])
    cert, key = Path(cert_dir) / cert_name, Path(cert_dir) / key_name
    if cert.is_file() and key.is_file():
        context.load_cert_chain(cert, key)
        log.info("metrics server certificate from %s", cert)
        return context
    cert_pem, key_pem = _self_signed()
    with tempfile.TemporaryDirectory(prefix="metrics-cert-") as tmp:
        (Path(tmp) / "tls.crt").write_bytes(cert_pem)
        key_file = Path(tmp) / "tls.key"
        key_file.touch(mode=0o600)
        key_file.write_bytes(key_pem)
        context.load_cert_chain(Path(tmp) / "tls.crt", key_file)
    log.info("metrics server certificate: self-signed (no %s in %s)", cert_name, cert_dir)
    return context


def _self_signed() -> tuple[bytes, bytes]:
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    host = socket.gethostname()
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{host}@{int(time.time())}")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=365))
        .add_extension(x509.SubjectAlternativeName([
            x509.DNSName("localhost"), x509.DNSName(host),
            x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    return (cert.public_bytes(serialization.Encoding.PEM),
            key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                              serialization.NoEncryption()))


# ---- --metrics-require-rbac ----------------------------------------------------------------------------

PostJson = Callable[[str, dict[str, Any]], Awaitable[Any]]
"""POST a JSON body to an API server path and return the decoded answer (``Kube.request`` bound)."""


class RbacFilter:
    """controller-runtime's ``filters.WithAuthenticationAndAuthorization`` for ``/metrics``.

    The caller's bearer token is checked with a ``TokenReview``; the user it names must then be allowed
    ``<verb> <path>`` (a non-resource URL, e.g. ``get /metrics``) by a ``SubjectAccessReview``. Missing or
    rejected tokens get 401, denied users 403, a failing API server 500. Answers are cached like
    controller-runtime's: tokens 1 minute, allowed 5 minutes, denied 30 seconds.
    """

    TOKEN_TTL = 60.0
    ALLOW_TTL = 300.0
    DENY_TTL = 30.0

    def __init__(self, post: PostJson, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._post = post
        self._clock = clock
        self._tokens: dict[str, tuple[float, dict[str, Any] | None]] = {}
        self._decisions: dict[str, tuple[float, bool]] = {}

    async def check(self, authorization: str, path: str, method: str) -> tuple[int, str] | None:
        """None when the request may proceed, else ``(status, body)``."""
        scheme, _, token = authorization.partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            return 401, "Unauthorized: a bearer token is required"
        try:
            user = await self._authenticate(token)
            if user is None:
                return 401, "Unauthorized: the token was not accepted by a TokenReview"
            verb = method.lower() if method.upper() != "HEAD" else "get"
            if not await self._authorize(user, path, verb):
                return 403, f"Forbidden: user {user.get('username', '?')!r} may not {verb} {path}"
        except Exception as exc:  # noqa: BLE001 - the API server failed us: refuse, say why, keep serving
            log.warning("metrics authorization failed: %s", exc)
            return 500, f"Authorization failed: {exc}"
        return None

    async def _authenticate(self, token: str) -> dict[str, Any] | None:
        now = self._clock()
        cached = self._tokens.get(token)
        if cached is not None and cached[0] > now:
            return cached[1]
        review = await self._post("/apis/authentication.k8s.io/v1/tokenreviews", {
            "apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}})
        status = (review or {}).get("status") or {}
        user = status.get("user") if status.get("authenticated") else None
        self._prune(self._tokens, now)
        self._tokens[token] = (now + self.TOKEN_TTL, user)
        return user

    async def _authorize(self, user: dict[str, Any], path: str, verb: str) -> bool:
        spec: dict[str, Any] = {"user": user.get("username", ""), "groups": user.get("groups") or [],
                                "nonResourceAttributes": {"path": path, "verb": verb}}
        if user.get("uid"):
            spec["uid"] = user["uid"]
        if user.get("extra"):
            spec["extra"] = user["extra"]
        key = json.dumps(spec, sort_keys=True)
        now = self._clock()
        cached = self._decisions.get(key)
        if cached is not None and cached[0] > now:
            return cached[1]
        review = await self._post("/apis/authorization.k8s.io/v1/subjectaccessreviews", {
            "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec})
        allowed = bool(((review or {}).get("status") or {}).get("allowed"))
        self._prune(self._decisions, now)
        self._decisions[key] = (now + (self.ALLOW_TTL if allowed else self.DENY_TTL), allowed)
        return allowed

    @staticmethod
    def _prune(cache: dict[str, Any], now: float) -> None:
        if len(cache) > 1024:
            for k in [k for k, v in cache.items() if v[0] <= now]:
                del cache[k]


# ---- the endpoint operator_sdk.util.osdk_metric posts to ----------------------------------------------

OSDK_METRIC_ADDRESS = "localhost:5050"
"""Where the SDK's ansible-operator serves the endpoint (fixed) and the upstream module posts by default."""

OSDK_METRIC_ENV = "ANSIBLE_OPERATOR_OSDK_METRIC_URL"
"""Set in the runs' environment to the URL ``serve_osdk_metric`` listens on; our bundled ``osdk_metric``
posts there (the upstream module always posts to its ``address`` option, default localhost:5050)."""


def installed_osdk_util(collections_path: str) -> Path | None:
    """An installed ``operator_sdk.util`` collection the runs would use (not the operator's redirect-only
    shim), searched like Ansible: the entries of ``collections_path`` (the runs'
    ``$ANSIBLE_COLLECTIONS_PATH``) and the ``ansible_collections`` packages on ``sys.path``. Its
    ``osdk_metric`` posts to ``localhost:5050`` whatever the operator serves."""
    import sys

    from ansible_operator.collections import COMPAT_ROOT

    entries = [e for e in collections_path.split(os.pathsep) if e] + [p for p in sys.path if p]
    for entry in entries:
        base = Path(entry).expanduser()
        if base == COMPAT_ROOT:
            continue
        for root in (base / "ansible_collections", base) if base.name == "ansible_collections" \
                else (base / "ansible_collections",):
            candidate = root / "operator_sdk" / "util"
            if (candidate / "plugins" / "modules" / "osdk_metric.py").is_file():
                return candidate
    return None


async def start_osdk_metric_endpoint(bind_address: str | None, user: UserMetrics, *, collections_path: str,
                                     default_address: str = OSDK_METRIC_ADDRESS) -> ServerHandle | None:
    """The one owner of where ``osdk_metric`` requests are served.

    ``bind_address`` None means the SDK's fixed ``localhost:5050``. When that port is taken (a second
    operator on this host; a pod has its own network namespace), the SDK's ansible-operator exits 1. So
    do we when a run would use an installed upstream ``operator_sdk.util`` (it always posts to
    localhost:5050: to the other operator, silently). With only the bundled module, which finds the
    endpoint through ``$ANSIBLE_OPERATOR_OSDK_METRIC_URL``, a free port is used instead, with a warning.
    An address given explicitly must be free (exit 1 otherwise, like any listener)."""
    if bind_address is not None:
        return await serve_osdk_metric(bind_address, user)
    try:
        return await serve_osdk_metric(default_address, user)
    except OSError as exc:
        upstream = installed_osdk_util(collections_path)
        if upstream is not None:
            raise OSError(exc.errno, f"{exc.strerror}; the operator_sdk.util collection in {upstream} posts"
                          " there (the SDK exits too): stop what holds the port, or give"
                          " --osdk-metric-bind-address") from exc
        handle = await serve_osdk_metric("127.0.0.1:0", user)
        assert handle is not None
        log.warning("%s; osdk_metric served on %s/metrics instead (the bundled operator_sdk.util finds it;"
                    " no installed operator_sdk.util posts to localhost:5050)", exc.strerror, handle.url)
        return handle


async def serve_osdk_metric(bind_address: str, user: UserMetrics) -> ServerHandle | None:
    """Serve ``POST /metrics`` taking the SDK's ``UserMetric`` JSON, as the SDK's ansible-operator does on
    ``localhost:5050`` (``internal/ansible/apiserver/apiserver.go``): 200 when applied, 400 with the reason
    when not, 405 for other methods. None when ``bind_address`` is ``"0"``."""
    from aiohttp import web

    parsed = parse_bind_address(bind_address)
    if parsed is None:
        return None
    host, port = parsed

    async def handler(request: web.Request) -> web.Response:
        if request.method != "POST":
            return web.Response(status=405, text="Method not allowed")
        try:
            user.apply(json.loads(await request.read()))
        except ValueError as exc:  # bad JSON or a UserMetricError
            log.info("osdk_metric request refused: %s", exc)
            return web.Response(status=400, text=str(exc))
        return web.Response(text="")

    app = web.Application()
    app.router.add_route("*", "/metrics", handler)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host=host, port=port)
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        raise OSError(exc.errno,
                      f"cannot listen on {bind_address!r} for osdk_metric: {exc.strerror}") from exc
    sockets = getattr(getattr(site, "_server", None), "sockets", None) or []
    ipv4 = [s for s in sockets if s.family == socket.AF_INET]
    real_port = (ipv4 or sockets)[0].getsockname()[1] if sockets else port
    log.info("serving osdk_metric on %s:%d/metrics", host or "*", real_port)
    return ServerHandle(host="127.0.0.1" if host in (None, "localhost") else host, port=real_port,
                        paths=("/metrics",), _runner=runner)
