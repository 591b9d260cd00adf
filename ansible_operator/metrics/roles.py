"""Custom metrics from roles (``operator_sdk.util.osdk_metric``) and the endpoint the collection posts to.
See the package docstring."""

from __future__ import annotations

import json
import logging
import math
import os
import re
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client.metrics_core import Metric

from ansible_operator.errors import OperatorError
from ansible_operator.metrics.http import ServerHandle, parse_bind_address
from ansible_operator.metrics.text import go_exposition, go_float

log = logging.getLogger("ansible_operator.metrics")

# ---- custom metrics from roles (operator_sdk.util.osdk_metric) ------------------------------------

GO_DEFAULT_BUCKETS: tuple[float, ...] = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
"""``prometheus.DefBuckets``: the SDK creates user histograms without buckets of its own."""

_METRIC_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
_TYPES = ("counter", "gauge", "histogram", "summary")


class UserMetricError(OperatorError, ValueError):
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

    def collect(self) -> Iterator[Metric]:
        """The metrics as prometheus_client families (the ``Collector`` protocol), laid out as the SDK's Go
        client writes them: counters and gauges one sample under the name as given (no ``_total``);
        histograms ``_bucket`` (Go's default buckets), ``_sum``, ``_count``; summaries (no quantiles, as
        the SDK creates them) ``_sum``, ``_count``. ``Metric.add_sample`` rather than the
        ``*MetricFamily`` helpers, which would add ``_total`` and write ``_count`` before ``_sum``."""
        for name in sorted(self._metrics):
            m = self._metrics[name]
            family = Metric(name, m.help, m.type)
            if m.type in ("counter", "gauge"):
                family.add_sample(name, {}, m.value)
            else:
                if m.type == "histogram":
                    for bound, count in zip(GO_DEFAULT_BUCKETS, m.buckets):
                        family.add_sample(f"{name}_bucket", {"le": go_float(bound)}, count)
                    family.add_sample(f"{name}_bucket", {"le": "+Inf"}, m.count)
                family.add_sample(f"{name}_sum", {}, m.sum)
                family.add_sample(f"{name}_count", {}, m.count)
            yield family

    def exposition(self) -> bytes:
        """These metrics alone in Prometheus text format (``/metrics`` writes them after the operator's)."""
        return go_exposition(self)


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
