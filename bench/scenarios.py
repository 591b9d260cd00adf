"""The operator-level measurements: each function drives one running operator through the Kubernetes API.

Every figure comes from what a user could observe: the ``Successful`` condition on the CR (seen through a
watch, so its arrival time is exact), the ``run.json`` summaries the operator writes per run, ``/metrics``,
and the operator's processes (psutil). Nothing here reaches into the operator's memory.
"""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path
from typing import Any

from harness import (
    NOOP,
    BenchError,
    Cluster,
    Kind,
    MemorySampler,
    OperatorProcess,
    Reaper,
    cpu_seconds,
)


def _percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) - no interpolation, so p95 of 20 values is the 19th."""
    ordered = sorted(values)
    rank = max(1, min(len(ordered), int(-(-q * len(ordered) // 100))))
    return ordered[rank - 1]


def _spec(kind: Kind, i: int) -> dict[str, Any]:
    """Spec number ``i`` for a kind; Memcached's size must stay within 1..5 (the CRD allows 0..10)."""
    if kind.kind == "Memcached":
        return {"size": 1 + i % 5}
    return {"n": i}


def _run_durations(op: OperatorProcess, kind: Kind, namespace: str, names: list[str]) -> list[float]:
    out: list[float] = []
    for name in names:
        for run in op.runs(kind.group, kind.version, kind.kind, namespace, name):
            if run.get("duration_s") is not None:
                out.append(float(run["duration_s"]))
    return out


def _wait_idle(op: OperatorProcess, quiet: float = 1.0, timeout: float = 120.0) -> None:
    """Until no run is in flight and no queue holds work, continuously for ``quiet`` seconds."""
    deadline = time.monotonic() + timeout
    quiet_since: float | None = None
    while True:
        op.check_alive()
        m = op.metrics()
        busy = m.get("ansible_operator_runs_in_flight", 0) + m.get("ansible_operator_queue_depth", 0)
        now = time.monotonic()
        if busy:
            quiet_since = None
        elif quiet_since is None:
            quiet_since = now
        elif now - quiet_since >= quiet:
            return
        if now > deadline:
            raise BenchError(f"{op.executor} operator still busy after {timeout}s: {m}")
        time.sleep(0.1)


def _reports_available(kind: Kind) -> bool:
    return kind.kind == "Memcached"


def latency(cluster: Cluster, kind: Kind, op: OperatorProcess, namespace: str, crs: int) -> dict[str, Any]:
    """Create CRs one at a time; each: create call -> Successful=True seen on the watch.

    For a role that reports its own ``Available`` condition (Memcached: the Deployment is rolled out,
    which takes a second run after a ``requeue_after``), also create call -> ``Available=True``; the
    next CR is created only when the operator is idle again, so no run of one CR overlaps the next.
    """
    watcher = cluster.watcher(kind, namespace)
    sampler = MemorySampler(op.proc.pid).start()
    names = [f"lat-{i}" for i in range(crs)]
    latencies: list[float] = []
    ready: list[float] = []
    try:
        for name in names:
            t0 = time.monotonic()
            cluster.kube.create(kind, namespace, name, _spec(kind, 0))
            done = watcher.wait([name], 1, timeout=600, alive=op.check_alive)
            latencies.append(done[name] - t0)
            if _reports_available(kind):
                ready.append(watcher.wait_available([name], timeout=600, alive=op.check_alive)[name] - t0)
                _wait_idle(op, quiet=0.5)
    finally:
        peak = sampler.reset()
        sampler.stop()
    runs = _run_durations(op, kind, namespace, names)
    return {
        "crs": crs,
        "p50_s": round(statistics.median(latencies), 3),
        "p95_s": round(_percentile(latencies, 95), 3),
        "min_s": round(min(latencies), 3),
        "max_s": round(max(latencies), 3),
        "available_p50_s": round(statistics.median(ready), 3) if ready else None,
        "available_p95_s": round(_percentile(ready, 95), 3) if ready else None,
        "run_duration_median_s": round(statistics.median(runs), 3) if runs else None,
        "runs": len(runs),
        "peak_rss_mb": round(peak.rss_mb, 1),
        "peak_uss_mb": round(peak.uss_mb, 1),
    }


def throughput(cluster: Cluster, kind: Kind, op: OperatorProcess, namespace: str, crs: int) -> dict[str, Any]:
    """Create ``crs`` CRs at once (8 client threads); time until every one is Successful."""
    watcher = cluster.watcher(kind, namespace)
    names = [f"tp-{i}" for i in range(crs)]
    cpu0 = cpu_seconds(op.family())
    t0 = time.monotonic()
    cluster.kube.create_many(kind, namespace, names, _spec(kind, 0))
    created = time.monotonic() - t0
    done = watcher.wait(names, 1, timeout=max(600.0, crs * 30.0), alive=op.check_alive)
    duration = max(done.values()) - t0
    available_s = None
    if _reports_available(kind):
        available = watcher.wait_available(names, timeout=max(600.0, crs * 30.0), alive=op.check_alive)
        available_s = round(max(available.values()) - t0, 2)
        _wait_idle(op, quiet=1.0, timeout=max(120.0, crs * 5.0))
    cpu = cpu_seconds(op.family()) - cpu0
    runs = _run_durations(op, kind, namespace, names)
    return {
        "crs": crs,
        "duration_s": round(duration, 2),
        "available_s": available_s,
        "crs_per_s": round(crs / duration, 3),
        "create_calls_s": round(created, 2),
        "runs": len(runs),
        "run_duration_median_s": round(statistics.median(runs), 3) if runs else None,
        "operator_cpu_s_per_cr": round(cpu / crs, 3),
    }


def coalescing(cluster: Cluster, kind: Kind, op: OperatorProcess, namespace: str,
               edits: int) -> dict[str, Any]:
    """Create one CR, let it converge, then ``edits`` back-to-back spec changes; count the runs they cause."""
    watcher = cluster.watcher(kind, namespace)
    name = "co-0"
    cluster.kube.create(kind, namespace, name, _spec(kind, 0))
    watcher.wait([name], 1, timeout=600, alive=op.check_alive)
    _wait_idle(op)
    before = {r.get("run_id") for r in op.runs(kind.group, kind.version, kind.kind, namespace, name)}
    generation = 1
    t0 = time.monotonic()
    for i in range(edits):  # every edit differs from the previous one, so each bumps the generation
        obj = cluster.kube.patch_spec(kind, namespace, name, _spec(kind, i + 1))
        generation = int(obj["metadata"]["generation"])
    edit_s = time.monotonic() - t0
    done = watcher.wait([name], generation, timeout=600, alive=op.check_alive)
    settle_s = done[name] - t0
    # Memcached's role asks for one more run 2 s later while its Deployment rolls out (requeue_after, a
    # timer /metrics does not count as queued): a longer quiet window counts that run too.
    _wait_idle(op, quiet=3.0 if _reports_available(kind) else 2.0)
    # Not a slice: run ids sort by second only, so two runs in one second may be listed in either order.
    runs = [r for r in op.runs(kind.group, kind.version, kind.kind, namespace, name)
            if r.get("run_id") not in before]
    runs.sort(key=lambda r: (r.get("started") or "", r.get("generation") or 0))
    return {
        "edits": edits,
        "final_generation": generation,
        "edits_took_s": round(edit_s, 2),
        "converged_s": round(settle_s, 2),
        "runs": len(runs),
        "run_generations": [r.get("generation") for r in runs],
    }


def _idle_sample(sampler: MemorySampler, seconds: float = 2.0) -> tuple[float, float, float]:
    """Median RSS/USS/PSS over a few samples (one sample can land on a short-lived helper process)."""
    samples: list[tuple[float, float, float]] = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        samples.append(sampler.sample())
        time.sleep(0.1)
    rss, uss, pss = (statistics.median(col) for col in zip(*samples, strict=True))
    return rss, uss, pss


def memory(cluster: Cluster, kind: Kind, executor: str, workdir: Path, kubeconfig: Path, namespace: str,
           reaper: Reaper, env: dict[str, str] | None = None) -> dict[str, Any]:
    """A fresh operator at ``--max-concurrent-reconciles 4``: idle USS, then peaks with 1 and 4 runs at once.

    private MB per concurrent run = (peak USS with 4 runs in flight - idle USS) / 4 (the issue's formula),
    and the same with PSS, which does not undercount forked runs (see :class:`MemorySampler`).
    """
    cluster.kube.namespace(namespace)
    op = OperatorProcess.start(executor, workdir, kubeconfig, [namespace], reaper, max_concurrent=4, env=env)
    try:
        watcher = cluster.watcher(kind, namespace)
        time.sleep(2.0)  # let startup work (first lists, imports) finish
        sampler = MemorySampler(op.proc.pid)
        idle_rss, idle_uss, idle_pss = _idle_sample(sampler)
        idle_processes = len(op.family())
        sampler.start()
        cluster.kube.create(kind, namespace, "mem-1", _spec(kind, 0))
        watcher.wait(["mem-1"], 1, timeout=600, alive=op.check_alive)
        if _reports_available(kind):  # the peak covers the rollout's second run too
            watcher.wait_available(["mem-1"], timeout=600, alive=op.check_alive)
        c1 = sampler.reset()
        _wait_idle(op)
        sampler.reset()
        names = [f"mem-4-{i}" for i in range(4)]
        cluster.kube.create_many(kind, namespace, names, _spec(kind, 0), workers=4)
        watcher.wait(names, 1, timeout=600, alive=op.check_alive)
        if _reports_available(kind):
            watcher.wait_available(names, timeout=600, alive=op.check_alive)
        c4 = sampler.reset()
        sampler.stop()
    finally:
        op.stop()
    return {
        "idle_rss_mb": round(idle_rss, 1),
        "idle_uss_mb": round(idle_uss, 1),
        "idle_pss_mb": round(idle_pss, 1),
        "c1_peak_rss_mb": round(c1.rss_mb, 1),
        "c1_peak_uss_mb": round(c1.uss_mb, 1),
        "c4_peak_rss_mb": round(c4.rss_mb, 1),
        "c4_peak_uss_mb": round(c4.uss_mb, 1),
        "c1_peak_pss_mb": round(c1.pss_mb, 1),
        "c4_peak_pss_mb": round(c4.pss_mb, 1),
        "idle_processes": idle_processes,
        "c1_max_processes": c1.processes,
        "c4_max_processes": c4.processes,
        "private_mb_per_run": round((c4.uss_mb - idle_uss) / 4, 1),
        "pss_mb_per_run": round((c4.pss_mb - idle_pss) / 4, 1),
        "private_mb_single_run": round(c1.uss_mb - idle_uss, 1),
        "pss_mb_single_run": round(c1.pss_mb - idle_pss, 1),
    }


def idle(cluster: Cluster, op: OperatorProcess, namespace: str, crs: int,
         cpu_window: float, rest_timeout: float = 120.0) -> dict[str, Any]:
    """``crs`` Noop CRs (trivial play) converged, queue idle: RSS/USS of the operator family, CPU% at rest.

    Two samples: right after convergence (``converged_*``: the warm executor's zygote still runs), and
    at rest, once the operator family is down to the operator process alone (the warm executor stops its
    zygote after ``--warm-idle-timeout`` without runs; the runner executor has nothing to stop). The CPU
    window is taken at rest.
    """
    watcher = cluster.watcher(NOOP, namespace)
    names = [f"idle-{i}" for i in range(crs)]
    t0 = time.monotonic()
    cluster.kube.create_many(NOOP, namespace, names, {"n": 1})
    done = watcher.wait(names, 1, timeout=max(600.0, crs * 10.0), alive=op.check_alive)
    converge_s = max(done.values()) - t0
    _wait_idle(op, quiet=2.0)
    sampler = MemorySampler(op.proc.pid)
    busy_rss, busy_uss, busy_pss = _idle_sample(sampler)
    busy_processes = len(op.family())
    t_rest = time.monotonic()
    while len(op.family()) > 1:
        op.check_alive()
        if time.monotonic() - t_rest > rest_timeout:
            raise BenchError(f"{op.executor} operator still has {len(op.family())} processes"
                             f" {rest_timeout:.0f}s after its last run")
        time.sleep(0.5)
    rest_after_s = time.monotonic() - t_rest
    rss, uss, pss = _idle_sample(sampler)
    family = op.family()
    cpu0 = cpu_seconds(family)
    time.sleep(cpu_window)
    cpu = cpu_seconds(family) - cpu0
    started = op.metrics().get("ansible_operator_runs_started_total", 0.0)
    return {
        "crs": crs,
        "converge_s": round(converge_s, 1),
        "converged_rss_mb": round(busy_rss, 1),
        "converged_uss_mb": round(busy_uss, 1),
        "converged_pss_mb": round(busy_pss, 1),
        "converged_processes": busy_processes,
        "at_rest_after_s": round(rest_after_s, 1),
        "rss_mb": round(rss, 1),
        "uss_mb": round(uss, 1),
        "pss_mb": round(pss, 1),
        "processes": len(family),
        "cpu_window_s": cpu_window,
        "cpu_percent": round(100.0 * cpu / cpu_window, 2),
        "runs_started_total": int(started),
    }


# ------------------------------------------------------------------------------------ native baseline


def _wait_quiet(op: Any, window: float = 0.5, cpu_limit: float = 0.02, timeout: float = 120.0) -> None:
    """Until the operator family used less than ``cpu_limit`` CPU seconds over ``window`` seconds: the last
    status write after ``Available`` is done and no requeue is running (works for every executor and the
    native operator alike, which has no ``/metrics``)."""
    deadline = time.monotonic() + timeout
    before = cpu_seconds(op.family())
    while True:
        time.sleep(window)
        op.check_alive()
        now = cpu_seconds(op.family())
        if now - before < cpu_limit:
            return
        before = now
        if time.monotonic() > deadline:
            raise BenchError(f"{op.executor} operator still busy after {timeout}s")


def _load() -> float:
    return round(os.getloadavg()[0], 2)


def native_compare(cluster: Cluster, kind: Kind, ops: dict[str, Any], crs: int,
                   burst: int) -> dict[str, dict[str, Any]]:
    """Memcached, every operator in ``ops`` (``native`` and the executors) side by side, interleaved.

    * one CR at a time (CRs alternate between the operators): create -> ``Successful`` (p50), and the
      operator family's CPU from the create until it is quiet again after ``Available`` (both runs of the
      rollout);
    * ``burst`` CRs at once: -> all ``Successful``, CPU per CR until then and until quiet after all are
      ``Available``, peak RSS/PSS of the family meanwhile.
    The 1-minute load average is recorded around each part (the machine may be shared).
    """
    watchers = {ex: cluster.watcher(kind, cluster.ns(f"{ex}-native")) for ex in ops}
    lat: dict[str, list[float]] = {ex: [] for ex in ops}
    cpu: dict[str, list[float]] = {ex: [] for ex in ops}
    out: dict[str, dict[str, Any]] = {ex: {"load_at_start": _load()} for ex in ops}
    for i in range(crs):
        order = list(ops) if i % 2 == 0 else list(reversed(ops))  # neither column always goes first
        for ex in order:
            op, name, ns = ops[ex], f"nat-{i}", cluster.ns(f"{ex}-native")
            _wait_quiet(op)
            cpu0 = cpu_seconds(op.family())
            t0 = time.monotonic()
            cluster.kube.create(kind, ns, name, _spec(kind, 0))
            lat[ex].append(watchers[ex].wait([name], 1, timeout=600, alive=op.check_alive)[name] - t0)
            watchers[ex].wait_available([name], timeout=600, alive=op.check_alive)
            _wait_quiet(op)
            cpu[ex].append(cpu_seconds(op.family()) - cpu0)
    for ex in ops:
        out[ex].update(crs=crs, p50_s=round(statistics.median(lat[ex]), 3),
                       p95_s=round(_percentile(lat[ex], 95), 3),
                       cpu_s_per_cr=round(statistics.median(cpu[ex]), 4),
                       load_after_latency=_load())
    for ex, op in ops.items():
        ns = cluster.ns(f"{ex}-native")
        names = [f"burst-{i}" for i in range(burst)]
        _wait_quiet(op)
        load0 = _load()
        sampler = MemorySampler(op.proc.pid).start()
        cpu0 = cpu_seconds(op.family())
        t0 = time.monotonic()
        cluster.kube.create_many(kind, ns, names, _spec(kind, 0))
        done = watchers[ex].wait(names, 1, timeout=max(600.0, burst * 30.0), alive=op.check_alive)
        duration = max(done.values()) - t0
        cpu_done = cpu_seconds(op.family()) - cpu0
        watchers[ex].wait_available(names, timeout=max(600.0, burst * 30.0), alive=op.check_alive)
        available = time.monotonic() - t0
        _wait_quiet(op, timeout=max(120.0, burst * 5.0))
        cpu_all = cpu_seconds(op.family()) - cpu0
        peak = sampler.reset()
        sampler.stop()
        out[ex].update(burst_crs=burst, burst_s=round(duration, 2), burst_available_s=round(available, 2),
                       burst_cpu_s_per_cr=round(cpu_done / burst, 4),
                       burst_cpu_s_per_cr_until_quiet=round(cpu_all / burst, 4),
                       burst_peak_rss_mb=round(peak.rss_mb, 1), burst_peak_pss_mb=round(peak.pss_mb, 1),
                       burst_max_processes=peak.processes, burst_load_at_start=load0,
                       burst_load_at_end=_load())
    return out
