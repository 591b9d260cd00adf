#!/usr/bin/env python3
"""Benchmark the warm executor against the plain ansible-runner executor, side by side, in one run.

    python bench/run.py                      # full run (tens of minutes on 2 cores)
    python bench/run.py --quick --json out.json
    python bench/run.py --only floor,latency --executors runner,warm

Sections (see docs/explanation/benchmark.md for what each figure means):
  floor       trivial one-task role through each executor directly (no operator), median ms per run
  latency     Memcached CR create -> Successful, one CR at a time, p50/p95
  throughput  N Memcached CRs created at once -> all Successful, at the default concurrency
  coalescing  rapid spec edits of one Memcached -> number of playbook runs
  memory      operator at concurrency 4: idle USS, peak RSS/USS with 1 and 4 runs, private MB per run
  idle        N Noop CRs converged: RSS of operator + executor processes, CPU% over a quiet window
  native      Memcached through bench/native_memcached.py (a hand-written kopf operator, the same API calls)
              and the executors, interleaved: create -> Successful p50, CPU per CR, N CRs at once, peak RSS

The Kubernetes API (--api real, the default: a real control plane started in the run's directory with
`ansible-operator cluster up`, or with --kubeconfig a cluster that already runs; --api sandbox: the sandbox
API server) and each operator run as separate processes; everything started is stopped on exit, on errors,
on Ctrl-C and on SIGTERM.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))

import report  # noqa: E402
import scenarios  # noqa: E402
from harness import (  # noqa: E402
    APIS,
    BENCH,
    MEMCACHED,
    NOOP,
    REPO,
    Cluster,
    Kube,
    NativeProcess,
    OperatorProcess,
    Reaper,
    run_guarded,
    start_api,
)

WORKLOADS = ("memcached", "noop")
SECTIONS = ("floor", "latency", "throughput", "coalescing", "memory", "idle", "native")
FULL = {"floor": 30, "latency": 20, "throughput": 200, "edits": 100, "idle": 1000, "native": 20,
        "native_burst": 100}
# Sized so that --quick (both executors, all sections, Noop workload) ends in under two minutes on a busy
# 2-core machine; the runner executor's ~1.5-2.5 s per run is what bounds it.
QUICK = {"floor": 5, "latency": 4, "throughput": 12, "edits": 20, "idle": 50, "native": 4, "native_burst": 20}
IDLE_CPU_WINDOW = {"full": 10.0, "quick": 5.0}


def _csv(choices: tuple[str, ...]) -> Callable[[str], list[str]]:
    def parse(text: str) -> list[str]:
        items = [x.strip() for x in text.split(",") if x.strip()]
        bad = [x for x in items if x not in choices]
        if bad or not items:
            raise argparse.ArgumentTypeError(f"choose from {', '.join(choices)} (got {text!r})")
        return items
    return parse


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1 (got {value})")
    return value


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="reduced counts (see QUICK in bench/run.py)")
    p.add_argument("--json", type=Path, default=None, metavar="PATH", help="also write all figures as JSON")
    p.add_argument("--executors", type=_csv(("runner", "warm")), default=["runner", "warm"])
    p.add_argument("--only", type=_csv(SECTIONS), default=list(SECTIONS), metavar="SECTIONS",
                   help=f"comma-separated subset of {','.join(SECTIONS)}")
    p.add_argument("--workload", choices=WORKLOADS, default=None,
                   help="CR kind of the latency/throughput/coalescing/memory sections: memcached (the example"
                        " role: 3-4 module tasks per run, a second run when the rollout is done) or noop"
                        " (the trivial play);"
                        " default: memcached, noop with --quick")
    p.add_argument("--gathering", choices=("explicit", "implicit"), default="explicit",
                   help="ANSIBLE_GATHERING for the operators: explicit (default, as the operator image ships:"
                        " no fact gathering) or implicit (Ansible's default: gather facts every run)")
    p.add_argument("--runs", type=_positive, default=None, help="floor: timed runs per executor")
    p.add_argument("--latency-crs", type=_positive, default=None)
    p.add_argument("--throughput-crs", type=_positive, default=None)
    p.add_argument("--edits", type=_positive, default=None, help="coalescing: rapid spec edits")
    p.add_argument("--idle-crs", type=_positive, default=None)
    p.add_argument("--native-crs", type=_positive, default=None, help="native: Memcached CRs one at a time"
                   " per operator (default 20, 4 with --quick)")
    p.add_argument("--native-burst", type=_positive, default=None, help="native: Memcached CRs at once per"
                   " operator (default 100, 20 with --quick)")
    p.add_argument("--native-executors", type=_csv(("runner", "warm")), default=None,
                   help="executors measured beside the native operator (default: --executors; warm only"
                        " with --quick, where the runner's ~7 s per Memcached run would dominate)")
    p.add_argument("--idle-executors", type=_csv(("runner", "warm")), default=["warm"],
                   help="idle needs every CR converged first: the runner executor takes ~1.5 s of CPU per"
                        " trivial run, so by default only the warm executor is measured (default: warm)")
    p.add_argument("--idle-zygote-timeout", type=float, default=None, metavar="SECONDS",
                   help="--warm-idle-timeout of the idle section's operator (default 15, 5 with --quick; the"
                        " operator's own default is 5 minutes, which reaches the same at-rest state later)")
    p.add_argument("--idle-cpu-window", type=float, default=None, metavar="SECONDS",
                   help="quiet window for the idle CPU figure (default: 10, 5 with --quick)")
    p.add_argument("--api", choices=APIS, default="real",
                   help="the Kubernetes API the operators run against: real (default; a real control plane"
                        " - etcd, kube-apiserver, controller-manager, scheduler, kwok's fake nodes - started"
                        " in the run's directory with `ansible-operator cluster up`, its binaries from"
                        " KUBEBUILDER_ASSETS, the build cache or a Go build) or sandbox (the sandbox API"
                        " server, nothing to build)")
    p.add_argument("--kubeconfig", type=Path, default=None, metavar="PATH",
                   help="with --api real: use the cluster that already runs here instead of starting one"
                        " (its CRDs installed if missing; namespaces of the run's own, deleted at the end)")
    p.add_argument("--workdir", type=Path, default=None, help="keep logs and artifacts here (default: a"
                   " temporary directory removed at the end)")
    args = p.parse_args(argv)
    if args.kubeconfig is not None and args.api != "real":
        p.error("--kubeconfig needs --api real")
    return args


def counts_for(args: argparse.Namespace) -> dict[str, int]:
    base = dict(QUICK if args.quick else FULL)
    overrides = (("floor", args.runs), ("latency", args.latency_crs), ("throughput", args.throughput_crs),
                 ("edits", args.edits), ("idle", args.idle_crs),
                 ("native", args.native_crs), ("native_burst", args.native_burst))
    for key, value in overrides:
        if value is not None:
            base[key] = value
    return base


def idle_zygote_timeout(args: argparse.Namespace) -> float:
    if args.idle_zygote_timeout is not None:
        return float(args.idle_zygote_timeout)
    return 5.0 if args.quick else 15.0


def idle_window(args: argparse.Namespace) -> float:
    if args.idle_cpu_window is not None:
        return float(args.idle_cpu_window)
    return IDLE_CPU_WINDOW["quick" if args.quick else "full"]


def workload(args: argparse.Namespace) -> str:
    return str(args.workload or ("noop" if args.quick else "memcached"))


def say(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


def run(args: argparse.Namespace, workdir: Path, reaper: Reaper) -> dict[str, Any]:
    counts = counts_for(args)
    executors: list[str] = args.executors
    only = set(args.only)
    raw: report.Raw = {}
    kind = NOOP if workload(args) == "noop" else MEMCACHED
    operator_env = {"ANSIBLE_GATHERING": args.gathering}

    if "floor" in only:
        from floor import measure_floor

        say(f"floor: trivial role, {counts['floor']} runs per executor ({', '.join(executors)})")
        raw["floor"] = measure_floor(executors, counts["floor"], warmup=1 if args.quick else 2)
        say(f"floor: {json.dumps(raw['floor'])}")

    operator_sections = [s for s in ("latency", "throughput", "coalescing") if s in only]
    if not operator_sections and not ({"memory", "idle", "native"} & only):
        return {"counts": counts, "raw": raw, "api": None}

    say("using the running cluster" if args.kubeconfig else f"starting the {args.api} API server")
    server = start_api(args.api, workdir, [REPO / "crds" / "cache.example.com_memcacheds.yaml",
                                           BENCH / "crds" / "noop.yaml"], reaper, args.kubeconfig)
    say(f"Kubernetes API: {server.description}")
    cluster = Cluster(server, Kube(server.kubeconfig))
    reaper.add(cluster.close)
    kubeconfig = server.kubeconfig

    operators: dict[str, OperatorProcess] = {}
    if operator_sections:
        def start(ex: str) -> OperatorProcess:
            namespaces = [cluster.ns(f"{ex}-{s}") for s in operator_sections]
            for ns in namespaces:
                cluster.kube.namespace(ns)
            return OperatorProcess.start(ex, workdir / f"operator-{ex}", kubeconfig, namespaces,
                                         reaper, env=operator_env)

        say(f"starting the operators (default concurrency): {', '.join(executors)}")
        with ThreadPoolExecutor(len(executors)) as pool:  # both start at once: startup is not measured
            operators = dict(zip(executors, pool.map(start, executors), strict=True))

    try:
        # Interleaved: each section measures every executor back to back, so load from outside drifts less
        # between the two columns; the other operator sits idle meanwhile (and uses no CPU when idle).
        for section in operator_sections:
            for ex in executors:
                op, ns = operators[ex], cluster.ns(f"{ex}-{section}")
                if section == "latency":
                    say(f"latency [{ex}]: {counts['latency']} {kind.kind} CRs one at a time")
                    result = scenarios.latency(cluster, kind, op, ns, counts["latency"])
                elif section == "throughput":
                    say(f"throughput [{ex}]: {counts['throughput']} {kind.kind} CRs at once")
                    result = scenarios.throughput(cluster, kind, op, ns, counts["throughput"])
                else:
                    say(f"coalescing [{ex}]: {counts['edits']} rapid edits of one {kind.kind}")
                    result = scenarios.coalescing(cluster, kind, op, ns, counts["edits"])
                raw.setdefault(section, {})[ex] = result
                say(f"{section} [{ex}]: {json.dumps(result)}")
    finally:  # stopping takes seconds each (in-flight runs are cancelled): do it side by side
        with ThreadPoolExecutor(max(1, len(operators))) as pool:
            list(pool.map(lambda op: op.stop(), operators.values()))

    if "memory" in only:
        for ex in executors:
            say(f"memory [{ex}]: operator at --max-concurrent-reconciles 4, 1 then 4 runs in flight")
            result = scenarios.memory(cluster, kind, ex, workdir / f"operator-{ex}-mem", kubeconfig,
                                      cluster.ns(f"{ex}-mem"), reaper, env=operator_env)
            raw.setdefault("memory", {})[ex] = result
            say(f"memory [{ex}]: {json.dumps(result)}")

    if "idle" in only:
        # Its own operator, so the zygote's idle timeout can be short (the bench would otherwise wait the
        # default 5 minutes for the at-rest state) without touching the other sections' operators.
        for ex in [e for e in executors if e in args.idle_executors]:
            ns = cluster.ns(f"{ex}-idle")
            cluster.kube.namespace(ns)
            op = OperatorProcess.start(ex, workdir / f"operator-{ex}-idle", kubeconfig, [ns], reaper,
                                       env={**operator_env, "ANSIBLE_OPERATOR_WARM_IDLE_TIMEOUT":
                                            f"{idle_zygote_timeout(args):g}s"})
            try:
                say(f"idle [{ex}]: {counts['idle']} Noop CRs; at rest (zygote stopped after"
                    f" {idle_zygote_timeout(args):g}s without runs), then {idle_window(args):g}s of CPU")
                result = scenarios.idle(cluster, op, ns, counts["idle"], idle_window(args),
                                        rest_timeout=idle_zygote_timeout(args) + 60.0)
            finally:
                op.stop()
            raw.setdefault("idle", {})[ex] = result
            say(f"idle [{ex}]: {json.dumps(result)}")

    if "native" in only:
        raw["native"] = native_section(args, counts, cluster, workdir, reaper, operator_env)
    return {"counts": counts, "raw": raw, "api": server.description}


def native_executors(args: argparse.Namespace) -> list[str]:
    if args.native_executors is not None:
        return list(args.native_executors)
    return ["warm"] if args.quick else list(args.executors)


def native_section(args: argparse.Namespace, counts: dict[str, int], cluster: Cluster, workdir: Path,
                   reaper: Reaper, operator_env: dict[str, str]) -> dict[str, Any]:
    """The native kopf operator and the executors, on Memcached whatever --workload says (issue 14)."""
    names = ["native", *native_executors(args)]
    for ex in names:
        cluster.kube.namespace(cluster.ns(f"{ex}-native"))

    def start(ex: str) -> Any:
        if ex == "native":
            return NativeProcess.start(workdir / "operator-native", cluster.kubeconfig,
                                       [cluster.ns("native-native")], reaper)
        return OperatorProcess.start(ex, workdir / f"operator-{ex}-native", cluster.kubeconfig,
                                     [cluster.ns(f"{ex}-native")], reaper, env=operator_env)

    say(f"native: starting {', '.join(names)}")
    with ThreadPoolExecutor(len(names)) as pool:
        ops = dict(zip(names, pool.map(start, names), strict=True))
    try:
        say(f"native: {counts['native']} Memcached CRs one at a time per operator (interleaved), then"
            f" {counts['native_burst']} at once per operator")
        result = scenarios.native_compare(cluster, MEMCACHED, ops, counts["native"], counts["native_burst"])
    finally:
        with ThreadPoolExecutor(len(ops)) as pool:
            list(pool.map(lambda op: op.stop(), ops.values()))
    say(f"native: {json.dumps(result)}")
    return result


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.monotonic()
    date = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    machine = report.machine()
    result, rc = run_guarded("bench", args.workdir, lambda workdir, reaper: run(args, workdir, reaper))
    if result is None:
        return rc

    elapsed = round(time.monotonic() - started, 1)
    machine["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    head = report.headline(result["raw"])
    print(f"\nansible-operator benchmark, {date}, {machine['nproc']} CPUs ({machine['cpu_model']}),"
          f" {machine['mem_total_mb']} MB, {'quick' if args.quick else 'full'} run in {elapsed}s,"
          f" load average {machine['loadavg_at_start']} at start, {machine['loadavg_at_end']} at end")
    print(f"workload: {workload(args)}, ANSIBLE_GATHERING={args.gathering},"
          f" counts: {json.dumps(result['counts'])}")
    print(f"Kubernetes API: {result['api'] or 'none (no section needed one)'}\n")
    if set(result["raw"]) - {"native"}:
        print(report.table(result["raw"], result["counts"], NOOP.kind if workload(args) == "noop"
                           else MEMCACHED.kind) + "\n")
    if "native" in result["raw"]:
        print(report.native_table(result["raw"]["native"]))
    if args.json is not None:
        doc = {"date": date, "machine": machine, "quick": args.quick, "executors": args.executors,
               "sections": args.only, "elapsed_s": elapsed, "workload": workload(args),
               "gathering": args.gathering, "api": args.api, "api_server": result["api"],
               "counts": result["counts"], **head,
               "targets": report.verdicts(head), "raw": result["raw"]}
        args.json.write_text(json.dumps(doc, indent=2) + "\n")
        print(f"\nJSON written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
