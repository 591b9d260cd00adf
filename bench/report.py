"""Turn the raw figures into the headline numbers, the side-by-side table and the JSON document.

Ratios are warm / runner, so lower is better and a missing executor or section gives ``None`` (printed
as ``-``), never a made-up value. Each target from the issue is checked against the measured value and
marked ``✓ met`` or ``✗ MISSED`` - a missed target stays visible.
"""

from __future__ import annotations

import os
import platform
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

Raw = dict[str, dict[str, dict[str, Any]]]  # section -> executor -> figures

IDLE_CPU_LIMIT = 1.0  # % of one core averaged over the idle window: "no steady CPU"


def _get(raw: Raw, section: str, executor: str, key: str) -> float | None:
    value = raw.get(section, {}).get(executor, {}).get(key)
    return float(value) if isinstance(value, (int, float)) else None


def _ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b == 0:
        return None
    return round(a / b, 3)


def headline(raw: Raw) -> dict[str, Any]:
    """The keys ``--json`` promises: ratios warm/runner, and the warm executor's absolute figures."""
    def ratio(section: str, key: str) -> float | None:
        return _ratio(_get(raw, section, "warm", key), _get(raw, section, "runner", key))

    def native(key: str) -> float | None:
        return _ratio(_get(raw, "native", "warm", key), _get(raw, "native", "native", key))

    return {
        "trivial_ratio": ratio("floor", "median_ms"),
        "latency_ratio": ratio("latency", "p50_s"),
        "latency_p95_ratio": ratio("latency", "p95_s"),
        "throughput_ratio": ratio("throughput", "duration_s"),
        "coalesced_runs": _get(raw, "coalescing", "warm", "runs"),
        "coalesced_runs_runner": _get(raw, "coalescing", "runner", "runs"),
        "private_mb_per_run": _get(raw, "memory", "warm", "private_mb_per_run"),
        "private_mb_per_run_runner": _get(raw, "memory", "runner", "private_mb_per_run"),
        "pss_mb_per_run": _get(raw, "memory", "warm", "pss_mb_per_run"),
        "pss_mb_per_run_runner": _get(raw, "memory", "runner", "pss_mb_per_run"),
        "idle_rss_mb": _get(raw, "idle", "warm", "rss_mb"),
        "idle_cpu_percent": _get(raw, "idle", "warm", "cpu_percent"),
        # issue 14: warm / native (bench/native_memcached.py), Memcached, measured in the same run
        "native_cpu_ratio": native("cpu_s_per_cr"),
        "native_latency_ratio": native("p50_s"),
        "native_burst_ratio": native("burst_s"),
        "native_peak_rss_ratio": native("burst_peak_rss_mb"),
        "native_burst_cpu_ratio": native("burst_cpu_s_per_cr"),
    }


@dataclass(frozen=True)
class Row:
    metric: str
    section: str
    key: str
    fmt: str
    target: str = ""
    check: Callable[[dict[str, Any]], bool | None] | None = None
    """Given the headline dict: True met, False missed, None not measured."""


def _le(key: str, limit: float) -> Callable[[dict[str, Any]], bool | None]:
    return lambda h: None if h.get(key) is None else h[key] <= limit


def _idle_ok(h: dict[str, Any]) -> bool | None:
    if h.get("idle_rss_mb") is None or h.get("idle_cpu_percent") is None:
        return None
    return h["idle_rss_mb"] < 150 and h["idle_cpu_percent"] < IDLE_CPU_LIMIT


ROWS = [
    Row("trivial role, direct (median ms)", "floor", "median_ms", "{:.0f}", "warm <= 0.15x runner",
        _le("trivial_ratio", 0.15)),
    Row("executor start (s)", "floor", "start_s", "{:.2f}"),
    Row("Memcached create->Successful p50 (s)", "latency", "p50_s", "{:.2f}", "warm <= 0.25x runner",
        _le("latency_ratio", 0.25)),
    Row("Memcached create->Successful p95 (s)", "latency", "p95_s", "{:.2f}"),
    Row("Memcached create->Available p50 (s)", "latency", "available_p50_s", "{:.2f}"),
    Row("  one Memcached run (run.json), median (s)", "latency", "run_duration_median_s", "{:.2f}"),
    Row("N CRs at once -> all Successful (s)", "throughput", "duration_s", "{:.1f}", "warm <= 0.2x runner",
        _le("throughput_ratio", 0.2)),
    Row("  N CRs -> all Available (s)", "throughput", "available_s", "{:.1f}"),
    Row("  throughput (CRs/s)", "throughput", "crs_per_s", "{:.3f}"),
    Row("  operator CPU per CR (s)", "throughput", "operator_cpu_s_per_cr", "{:.2f}"),
    Row("rapid edits -> playbook runs", "coalescing", "runs", "{:.0f}", "warm <= 3 runs",
        _le("coalesced_runs", 3)),
    Row("idle RSS, conc. 4 operator (MB)", "memory", "idle_rss_mb", "{:.0f}"),
    Row("idle USS, conc. 4 operator (MB)", "memory", "idle_uss_mb", "{:.0f}"),
    Row("idle PSS, conc. 4 operator (MB)", "memory", "idle_pss_mb", "{:.0f}"),
    Row("peak RSS, 1 run in flight (MB)", "memory", "c1_peak_rss_mb", "{:.0f}"),
    Row("peak USS, 1 run in flight (MB)", "memory", "c1_peak_uss_mb", "{:.0f}"),
    Row("  most processes at once, 4 runs", "memory", "c4_max_processes", "{:.0f}"),
    Row("peak RSS, 4 runs in flight (MB)", "memory", "c4_peak_rss_mb", "{:.0f}"),
    Row("peak USS, 4 runs in flight (MB)", "memory", "c4_peak_uss_mb", "{:.0f}"),
    Row("peak PSS, 4 runs in flight (MB)", "memory", "c4_peak_pss_mb", "{:.0f}"),
    Row("private MB per concurrent run (USS)", "memory", "private_mb_per_run", "{:.1f}", "warm <= 30 MB",
        _le("private_mb_per_run", 30)),
    Row("  same with PSS (no fork undercount)", "memory", "pss_mb_per_run", "{:.1f}", "warm <= 30 MB",
        _le("pss_mb_per_run", 30)),
    Row("RSS with N CRs, just converged (MB)", "idle", "converged_rss_mb", "{:.0f}"),
    Row("idle RSS with N CRs converged, at rest (MB)", "idle", "rss_mb", "{:.0f}", "warm < 150 MB, CPU < 1%",
        _idle_ok),
    Row("  idle USS (MB)", "idle", "uss_mb", "{:.0f}"),
    Row("  idle PSS (MB)", "idle", "pss_mb", "{:.0f}"),
    Row("  idle CPU over window (% of a core)", "idle", "cpu_percent", "{:.2f}"),
]


def _fmt(value: Any, fmt: str) -> str:
    return "-" if not isinstance(value, (int, float)) else fmt.format(value)


def table(raw: Raw, counts: dict[str, int], kind: str = "Memcached") -> str:
    """Plain aligned text: metric | runner | warm | ratio | target | verdict."""
    h = headline(raw)
    header = ("metric", "runner", "warm", "warm/runner", "target", "")
    lines: list[tuple[str, ...]] = []
    for row in ROWS:
        if row.section not in raw:
            continue
        a = raw[row.section].get("runner", {}).get(row.key)
        b = raw[row.section].get("warm", {}).get(row.key)
        if a is None and b is None and row.check is None:
            continue  # e.g. create->Available for a workload whose role reports no Available condition
        numbers = isinstance(a, (int, float)) and isinstance(b, (int, float))
        ratio = _ratio(float(b), float(a)) if numbers and a is not None and b is not None else None
        verdict = ""
        if row.check is not None:
            met = row.check(h)
            verdict = "-" if met is None else ("✓ met" if met else "✗ MISSED")
        metric = row.metric.replace("Memcached", kind)
        metric = metric.replace("with N CRs", f"with {counts.get('idle', '?')} Noop CRs")
        metric = metric.replace("N CRs", f"{counts.get('throughput', '?')} CRs")
        if row.section == "coalescing":
            metric = f"{counts.get('edits', '?')} rapid edits -> playbook runs"
        lines.append((metric, _fmt(a, row.fmt), _fmt(b, row.fmt), "-" if ratio is None else f"{ratio:.2f}x",
                      row.target, verdict))
    widths = [max(len(r[i]) for r in [header, *lines]) for i in range(len(header))]
    align = ["<", ">", ">", ">", "<", "<"]

    def fmt_line(cells: tuple[str, ...]) -> str:
        return "  ".join(f"{c:{a}{w}}" for c, a, w in zip(cells, align, widths, strict=True)).rstrip()

    out = [fmt_line(header), fmt_line(tuple("-" * w for w in widths))]
    out += [fmt_line(line) for line in lines]
    return "\n".join(out)


NATIVE_ROWS = [  # (metric, key, format, issue 14's goal for warm / native)
    ("create->Successful p50, one CR at a time (s)", "p50_s", "{:.3f}", "<= 5x native + 0.1 s"),
    ("create->Successful p95 (s)", "p95_s", "{:.3f}", ""),
    ("operator CPU per CR, create -> quiet after Available (s)", "cpu_s_per_cr", "{:.3f}", "<= 5x"),
    ("N CRs at once -> all Successful (s)", "burst_s", "{:.2f}", "<= 5x"),
    ("  N CRs -> all Available (s)", "burst_available_s", "{:.2f}", ""),
    ("  operator CPU per CR until all Successful (s)", "burst_cpu_s_per_cr", "{:.4f}", ""),
    ("  operator CPU per CR until quiet (s)", "burst_cpu_s_per_cr_until_quiet", "{:.4f}", ""),
    ("  peak RSS during the burst (MB)", "burst_peak_rss_mb", "{:.0f}", "<= 2.5x"),
    ("  peak PSS during the burst (MB)", "burst_peak_pss_mb", "{:.0f}", ""),
    ("  load average (1 min) at burst start", "burst_load_at_start", "{:.2f}", ""),
]


def native_table(native: dict[str, dict[str, Any]]) -> str:
    """Memcached: native | each executor | executor/native, one row per figure (issue 14)."""
    columns = [c for c in ("native", "warm", "runner") if c in native]
    others = [c for c in columns if c != "native"]
    burst = next((native[c].get("burst_crs") for c in columns if native[c].get("burst_crs")), "?")
    header = ("Memcached, native baseline", *columns, *[f"{c}/native" for c in others], "goal (warm)")
    lines: list[tuple[str, ...]] = []
    for metric, key, fmt, goal in NATIVE_ROWS:
        base = native.get("native", {}).get(key)
        cells = [_fmt(native[c].get(key), fmt) for c in columns]
        ratios = []
        for c in others:
            r = _ratio(_num(native[c].get(key)), _num(base)) if "load" not in key else None
            ratios.append("-" if r is None else f"{r:.1f}x")
        lines.append((metric.replace("N CRs", f"{burst} CRs"), *cells, *ratios, goal))
    widths = [max(len(r[i]) for r in [header, *lines]) for i in range(len(header))]
    align = ["<"] + [">"] * (len(header) - 2) + ["<"]

    def fmt_line(cells: tuple[str, ...]) -> str:
        return "  ".join(f"{c:{a}{w}}" for c, a, w in zip(cells, align, widths, strict=True)).rstrip()

    return "\n".join([fmt_line(header), fmt_line(tuple("-" * w for w in widths)),
                      *[fmt_line(line) for line in lines]])


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) else None


def machine() -> dict[str, Any]:
    model = ""
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_mb = None
    try:
        for line in open("/proc/meminfo"):
            if line.startswith("MemTotal:"):
                mem_mb = int(line.split()[1]) // 1024
                break
    except OSError:
        pass
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    git = {}
    try:
        here = str(Path(__file__).resolve().parent)
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=here, capture_output=True,
                              text=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=here,
                               capture_output=True, text=True)
        git = {"commit": head.stdout.strip(), "uncommitted_changes": bool(dirty.stdout.strip())}
    except OSError:
        pass
    return {"nproc": os.cpu_count(), "cpu_model": model, "mem_total_mb": mem_mb,
            "python": platform.python_version(), "kernel": platform.release(),
            "loadavg_at_start": [round(x, 2) for x in load] if load else None, **git}


def verdicts(h: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each target from the issue with the value it was checked against and whether it was met."""
    keys = {"median_ms": "trivial_ratio", "p50_s": "latency_ratio", "duration_s": "throughput_ratio",
            "runs": "coalesced_runs", "private_mb_per_run": "private_mb_per_run",
            "pss_mb_per_run": "pss_mb_per_run", "rss_mb": "idle_rss_mb"}
    out: dict[str, dict[str, Any]] = {}
    for row in ROWS:
        if row.check is None:
            continue
        name = keys[row.key]
        out[name] = {"target": row.target, "value": h.get(name), "met": row.check(h)}
    out["idle_rss_mb"]["cpu_percent"] = h.get("idle_cpu_percent")
    return out
