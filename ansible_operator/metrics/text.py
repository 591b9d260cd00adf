"""Prometheus' text format as Go's client writes it: numbers (``0``, ``3``, ``1e+06``, ``le="1"``),
counters named as their samples are, and no ``_created`` series, so that dashboards and queries written
against Go operators match. prometheus_client writes all of ``/metrics`` (:func:`go_exposition`)."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from decimal import Decimal

import prometheus_client
from prometheus_client.registry import Collector

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


def go_exposition(*collectors: Collector) -> bytes:
    """The text exposition of ``collectors`` (registries, or any prometheus_client ``Collector``), one after
    the other: prometheus_client's ``generate_latest``, with numbers written the Go way and counters
    whose samples carry no ``_total`` (custom metrics from roles) named so in ``# HELP``/``# TYPE``."""
    text = "".join(prometheus_client.generate_latest(c).decode() for c in collectors)
    return _go_counter_names(_go_floats(text)).encode()


def _go_counter_names(text: str) -> str:
    """prometheus_client always writes a counter's ``# HELP``/``# TYPE`` as ``<name>_total``; Go's client
    uses the name the counter was given, which is also the name of its samples. A family whose TYPE line
    says ``x_total counter`` and whose first sample is ``x`` (not ``x_total``) gets ``x`` in both lines."""
    lines = text.split("\n")
    for i, line in enumerate(lines[:-1]):
        if not (line.startswith("# TYPE ") and line.endswith("_total counter")):
            continue
        name = line[len("# TYPE "):-len("_total counter")]
        sample = lines[i + 1]
        if sample.startswith(name) and sample[len(name):len(name) + 1] in (" ", "{"):
            lines[i] = f"# TYPE {name} counter"
            help_prefix = f"# HELP {name}_total "
            if i and lines[i - 1].startswith(help_prefix):
                lines[i - 1] = f"# HELP {name} " + lines[i - 1][len(help_prefix):]
    return "\n".join(lines)

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
