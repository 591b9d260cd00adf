"""The operator's own series (runs, work queues, controller-runtime's and client-go's), one registry per
``Metrics``. See the package docstring."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Hashable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector

from ansible_operator import __version__
from ansible_operator.metrics.roles import UserMetrics
from ansible_operator.metrics.text import go_exposition

log = logging.getLogger("ansible_operator.metrics")

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
        # Registered in this order, which is the order of /metrics
        self._register_client_go(r)
        self._register_runs(r)
        self._register_sdk(r)
        self._register_controller_runtime(r)
        self._register_workqueue(r)
        self._register_leader_election(r)
        ProcessCollector(registry=r)  # process_cpu_seconds_total, process_resident_memory_bytes, ... as Go's
        self.user = UserMetrics(reserved=self._registry_names)
        """Custom metrics from roles (``osdk_metric``)."""

    def _register_client_go(self, r: CollectorRegistry) -> None:
        """client-go's REST client metrics, as controller-runtime registers them, for the runner's own
        calls."""
        self.rest_requests = Counter(
            "rest_client_requests", "Number of HTTP requests, partitioned by status code, method, and host.",
            ["code", "method", "host"], registry=r)
        self.rest_duration = Histogram(
            "rest_client_request_duration_seconds",
            "Request latency in seconds. Broken down by verb, and host.",
            ["verb", "host"], buckets=REST_CLIENT_BUCKETS, registry=r)

    def _register_runs(self, r: CollectorRegistry) -> None:
        """The runner's own: runs, finalizer runs, queues, reconcile errors, leadership."""
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
        self.cached_objects = Gauge(
            "ansible_operator_cached_objects", "Objects of a watch this replica holds in its cache: all of"
            " them, or with --shard-selector the shard the API server sends it.", ["watch"], registry=r)
        self.in_flight = Gauge(
            "ansible_operator_runs_in_flight", "Runs currently executing.", ["watch"], registry=r)
        self.reconcile_errors = Counter(
            "ansible_operator_reconcile_errors", "Reconciles that failed outside the playbook"
            " (API errors, status write conflicts, executor failures), by reason.",
            ["watch", "reason"], registry=r)
        self.leader = Gauge(
            "ansible_operator_leader", "1 while this replica holds the leader election Lease"
            " (always 1 without leader election).", registry=r)

    def _register_sdk(self, r: CollectorRegistry) -> None:
        """Operator SDK compatible names."""
        self.build_info = Gauge(
            "ansible_operator_build_info", "Build information.", ["version", "commit"], registry=r)
        self.build_info.labels(version=__version__, commit="").set(1)
        self.sdk_reconciles = Histogram(
            "ansible_operator_reconciles", "How long in seconds a reconcile takes (Operator SDK name).",
            ["GVK"], buckets=RUN_DURATION_BUCKETS, registry=r)
        self.sdk_reconcile_result = Gauge(
            "ansible_operator_reconcile_result", "Reconciles and their results (Operator SDK name;"
            " result is 'succeeded' or 'failed').", ["GVK", "result"], registry=r)

    def _register_controller_runtime(self, r: CollectorRegistry) -> None:
        """controller-runtime's names (controller-runtime 0.19, as the SDK)."""
        controller = ["controller"]
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

    def _register_workqueue(self, r: CollectorRegistry) -> None:
        """client-go's workqueue metrics, as controller-runtime registers them."""
        queue = ["name", "controller"]
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

    def _register_leader_election(self, r: CollectorRegistry) -> None:
        """controller-runtime's leader election status."""
        self.leader_status = Gauge(
            "leader_election_master_status", "Gauge of if the reporting system is master of the relevant"
            " lease, 0 indicates backup, 1 indicates master. 'name' is the string used to identify the"
            " lease.",
            ["name"], registry=r)
        self.shard_members = Gauge(
            "ansible_operator_shard_members", "Live members of this replica's shard ring (run --sharding;"
            " 0 without).", registry=r)
        self.shard_objects = Gauge(
            "ansible_operator_shard_objects", "Objects of a watch this replica owns on the shard ring.",
            ["watch"], registry=r)
        self.shard_moves = Counter(
            "ansible_operator_shard_moves", "Objects that moved to (direction=in) or away from (out) this"
            " replica when the shard ring changed.", ["watch", "direction"], registry=r)

    def set_shard_members(self, members: int) -> None:
        self.shard_members.set(members)

    def set_shard_objects(self, watch: str, owned: int) -> None:
        self.shard_objects.labels(watch=watch).set(owned)

    def shard_moved(self, watch: str, direction: str, count: int) -> None:
        self.shard_moves.labels(watch=watch, direction=direction).inc(count)

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

    def set_cached_objects(self, watch_key: str, n: int) -> None:
        self.cached_objects.labels(watch=watch_key).set(n)

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
        return go_exposition(self.registry, self.user)


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


def _check_phase(phase: str) -> None:
    if phase not in _PHASES:
        raise ValueError(f"unknown run phase {phase!r}: expected one of {', '.join(_PHASES)}")
