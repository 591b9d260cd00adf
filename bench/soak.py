#!/usr/bin/env python3
"""Soak benchmark: create N trivial CRs, wait until every one is Successful, delete them all; twice.

    python bench/soak.py                          # 1,000 Noop CRs per cycle, 2 cycles, warm executor
    python bench/soak.py --count 50 --cycles 2 --executor runner --json /tmp/soak.json

Per cycle it reports the wall time to converge and to delete, the runs the operator finished (from its
``/metrics``: successful and anything else), reconcile errors, the RSS of the operator process (and of its
whole process tree) before the cycle, at convergence and after the deletes, and how many run-artifact
directories of the deleted objects are still on disk once the deletes are done (waiting up to
``--artifacts-grace`` seconds for the operator to remove them).

Targets (issue 11): 0 errors, 0 artifacts of deleted objects, and the operator's RSS after the last cycle
within 10 % of its RSS after the first one. The exit code is 0 when every target is met, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from types import FrameType
from typing import Any

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import (
    APIS,
    BENCH,
    NOOP,
    BenchError,
    ConditionWatcher,
    Kube,
    OperatorProcess,
    Reaper,
    start_api,
)

NAMESPACE = "soak"
RSS_TOLERANCE = 0.10


def _mb(n: float) -> float:
    return round(n / 2**20, 1)


def rss(op: OperatorProcess) -> tuple[float, float]:
    """(operator process RSS, operator + all descendants RSS), in MB."""
    main = 0.0
    total = 0.0
    for p in op.family():
        try:
            r = p.memory_info().rss
        except psutil.NoSuchProcess:
            continue
        total += r
        if p.pid == op.proc.pid:
            main = r
    return _mb(main), _mb(total)


def run_counts(op: OperatorProcess) -> dict[str, float]:
    """Finished runs by result and reconcile errors, read from the operator's Prometheus endpoint."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://127.0.0.1:{op.metrics_port}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    out: dict[str, float] = {"errors": 0.0}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == "ansible_operator_runs_total":
                key = f"runs_{s.labels.get('result', '?')}"
                out[key] = out.get(key, 0.0) + s.value
            elif s.name == "ansible_operator_reconcile_errors_total":
                out["errors"] += s.value
    return out


def artifact_dirs(op: OperatorProcess) -> list[Path]:
    """Run directories of Noop objects in the soak namespace still on disk."""
    base = op.artifacts / NOOP.group / NOOP.version / NOOP.kind / NAMESPACE
    if not base.is_dir():
        return []
    return [run for obj in base.iterdir() if obj.is_dir() for run in obj.iterdir() if run.is_dir()]


def disk_bytes(path: Path) -> int:
    total = 0
    for p in path.rglob("*"):
        try:
            if p.is_file():
                total += p.stat().st_size
        except OSError:
            continue
    return total


def delta(after: dict[str, float], before: dict[str, float]) -> dict[str, int]:
    return {k: int(after.get(k, 0) - before.get(k, 0)) for k in sorted(set(after) | set(before))
            if after.get(k, 0) - before.get(k, 0)}


def cycle(
    n: int, count: int, op: OperatorProcess, kube: Kube, timeout: float, grace: float
) -> dict[str, Any]:
    names = [f"soak-{n}-{i:04d}" for i in range(count)]
    rss_before = rss(op)
    counts_before = run_counts(op)
    watcher = ConditionWatcher(kube, NOOP, NAMESPACE).start()
    try:
        t0 = time.monotonic()
        kube.create_many(NOOP, NAMESPACE, names, {"cycle": n})
        created_s = time.monotonic() - t0
        watcher.wait(names, 1, timeout=timeout, alive=op.check_alive)
        converge_s = time.monotonic() - t0
    finally:
        watcher.stop()
    rss_converged = rss(op)
    counts_converged = run_counts(op)
    runs_dirs_converged = len(artifact_dirs(op))

    t1 = time.monotonic()
    kube.custom.delete_collection_namespaced_custom_object(NOOP.group, NOOP.version, NAMESPACE, NOOP.plural)
    deadline = t1 + timeout
    while kube.custom.list_namespaced_custom_object(NOOP.group, NOOP.version, NAMESPACE, NOOP.plural)[
        "items"
    ]:
        op.check_alive()
        if time.monotonic() > deadline:
            raise BenchError(f"cycle {n}: Noops still listed {timeout}s after the delete")
        time.sleep(0.5)
    delete_s = time.monotonic() - t1
    # the operator learns of each deletion from its watch: give it a bounded time to clean up after them
    grace_deadline = time.monotonic() + grace
    while artifact_dirs(op) and time.monotonic() < grace_deadline:
        op.check_alive()
        time.sleep(0.5)
    left = artifact_dirs(op)
    counts_after = run_counts(op)
    return {
        "cycle": n,
        "crs": count,
        "create_s": round(created_s, 1),
        "converge_s": round(converge_s, 1),
        "delete_s": round(delete_s, 1),
        "runs": delta(counts_converged, counts_before),
        "runs_during_delete": delta(counts_after, counts_converged),
        "errors": int(counts_after.get("errors", 0) - counts_before.get("errors", 0)),
        "failed_runs": sum(
            v
            for k, v in delta(counts_after, counts_before).items()
            if k.startswith("runs_") and k != "runs_successful"
        ),
        "rss_mb_before": rss_before[0],
        "rss_mb_converged": rss_converged[0],
        "rss_mb_after_delete": rss(op)[0],
        "tree_rss_mb_before": rss_before[1],
        "tree_rss_mb_converged": rss_converged[1],
        "tree_rss_mb_after_delete": rss(op)[1],
        "run_dirs_at_convergence": runs_dirs_converged,
        "run_dirs_left_after_delete": len(left),
        "artifacts_mb_on_disk": _mb(disk_bytes(op.artifacts)),
    }


def verdicts(cycles: list[dict[str, Any]]) -> dict[str, bool]:
    first, last = cycles[0]["rss_mb_after_delete"], cycles[-1]["rss_mb_after_delete"]
    return {
        "0 errors": all(c["errors"] == 0 and c["failed_runs"] == 0 for c in cycles),
        "0 artifacts of deleted objects": all(c["run_dirs_left_after_delete"] == 0 for c in cycles),
        "RSS within 10 % of the first cycle": abs(last - first) <= RSS_TOLERANCE * first,
    }


def table(cycles: list[dict[str, Any]]) -> str:
    rows = [
        ("CRs created", "crs"),
        ("create (s)", "create_s"),
        ("create → all Successful (s)", "converge_s"),
        ("delete → all gone (s)", "delete_s"),
        ("runs finished", "runs"),
        ("failed runs", "failed_runs"),
        ("reconcile errors", "errors"),
        ("operator RSS before (MB)", "rss_mb_before"),
        ("operator RSS converged (MB)", "rss_mb_converged"),
        ("operator RSS after delete (MB)", "rss_mb_after_delete"),
        ("process tree RSS before (MB)", "tree_rss_mb_before"),
        ("process tree RSS converged (MB)", "tree_rss_mb_converged"),
        ("process tree RSS after delete (MB)", "tree_rss_mb_after_delete"),
        ("run dirs at convergence", "run_dirs_at_convergence"),
        ("run dirs of deleted CRs left", "run_dirs_left_after_delete"),
        ("artifacts on disk after delete (MB)", "artifacts_mb_on_disk"),
    ]
    head = "| | " + " | ".join(f"cycle {c['cycle']}" for c in cycles) + " |"
    lines = [head, "| --- |" + " ---: |" * len(cycles)]
    for label, key in rows:
        vals = []
        for c in cycles:
            v = c[key]
            vals.append(
                ", ".join(f"{k.removeprefix('runs_')} {n}" for k, n in v.items())
                if isinstance(v, dict)
                else str(v)
            )
        lines.append(f"| {label} | " + " | ".join(vals) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--count", type=int, default=1000, help="CRs per cycle (default 1000)")
    parser.add_argument("--cycles", type=int, default=2)
    parser.add_argument("--executor", choices=("warm", "runner"), default="warm")
    parser.add_argument("--timeout", type=float, default=3600.0, help="per phase, seconds")
    parser.add_argument("--artifacts-grace", type=float, default=60.0,
                        help="seconds to wait after the deletes for the operator to remove artifacts")
    parser.add_argument("--json", default=None, metavar="PATH")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    parser.add_argument("--api", choices=APIS, default="real",
                        help="real (default: a real control plane started in the work directory) or sandbox")
    args = parser.parse_args(argv)

    reaper = Reaper()
    workdir = Path(tempfile.mkdtemp(prefix="soak-"))

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        reaper.close()
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, on_signal)
    started = time.monotonic()
    try:
        server = start_api(args.api, workdir, [BENCH / "crds"], reaper)
        kube = Kube(server.kubeconfig)
        reaper.add(kube.close)
        kube.namespace(NAMESPACE)
        kube.wait_served(NOOP, NAMESPACE)
        op = OperatorProcess.start(
            args.executor, workdir / "operator", server.kubeconfig, [NAMESPACE], reaper
        )
        cycles = []
        for n in range(1, args.cycles + 1):
            result = cycle(n, args.count, op, kube, args.timeout, args.artifacts_grace)
            print(json.dumps(result), flush=True)
            cycles.append(result)
        verdict = verdicts(cycles)
        out = {"executor": args.executor, "api": server.description, "count": args.count, "cycles": cycles,
               "targets": verdict,
               "total_s": round(time.monotonic() - started, 1), "cpus": psutil.cpu_count()}
        print(table(cycles))
        for name, ok in verdict.items():
            print(f"{'met' if ok else 'MISSED'}: {name}")
        if args.json:
            Path(args.json).write_text(json.dumps(out, indent=2))
        return 0 if all(verdict.values()) else 1
    except BenchError as exc:
        print(f"soak: {exc}", file=sys.stderr)
        return 2
    finally:
        reaper.close()
        if args.keep:
            print(f"work directory kept: {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
