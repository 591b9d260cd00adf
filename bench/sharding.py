#!/usr/bin/env python3
"""Sharding benchmark (issue 24): what 1, 2 and 3 active replicas (``run --sharding``) give, with a role that
waits instead of burning CPU, so that the figure is about replicas, not about this machine's cores.

    python bench/sharding.py --crs 90 --wait 5 --workers 6 --json /tmp/sharding.json

On one real control plane, one phase per setup, each in a namespace of its own:

  single     one operator without --sharding: the baseline;
  (every run with Ansible's internal_poll_interval at --poll-interval: at its default, 0.001 s, a task
  that waits 5 s costs about 1 CPU s of polling, and the replicas would share this machine's 2 cores)
  R = 1,2,3  R replicas with --sharding (one ring per phase), settled (every member drained for one ring)
             before N CRs are created at once; the role waits --wait seconds per run, every replica has
             --workers workers. Time from the first create to the last CR Successful, throughput (CRs/s)
             and the ratio to the baseline; runs per replica (the split); each replica's CPU seconds and
             the requests of the runner's own API client (``rest_client_requests_total``: Leases, status,
             Events), per CR.
  cost       after R = 3: each replica idle for --idle seconds (its coordination alone: renewing its Lease
             and listing the ring's every retry period): CPU and requests per second; then one replica
             leaves (SIGTERM: it deletes its Lease), and until the two others have settled on the new ring
             and run what moved: objects moved, runs they caused, CPU and requests above idle, per move.

The model in docs/explanation/benchmark.md#sharding turns these into what N machines give.

Everything started is stopped on exit, errors, Ctrl-C and SIGTERM.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

import report  # noqa: E402
from harness import (  # noqa: E402
    BENCH,
    BenchError,
    ConditionWatcher,
    Kind,
    Kube,
    OperatorProcess,
    Reaper,
    cpu_seconds,
    run_guarded,
    start_api,
)

LIGHT = Kind("bench.ansible-operator.dev", "v1", "Light", "lights")
RING_LABEL = "ansible-operator.dev/shard-ring"
DRAINED = "ansible-operator.dev/shard-drained"


def say(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


def labelled(op: OperatorProcess, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    """One metric's samples by their labels (sorted (name, value) pairs)."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://127.0.0.1:{op.metrics_port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    return {tuple(sorted(s.labels.items())): float(s.value) for family in text_string_to_metric_families(text)
            for s in family.samples if s.name == name}


class Phase:
    """The replicas of one phase and what they used."""

    def __init__(self, ops: list[OperatorProcess]) -> None:
        self.ops = ops
        self.ring: str | None = None
        """The ring version its replicas settled on."""

    def usage(self) -> list[tuple[float, float, float]]:
        """Per replica: (CPU s, API requests of the runner's client, runs finished) so far."""
        out = []
        for op in self.ops:
            op.check_alive()
            m = op.metrics()
            out.append((cpu_seconds(op.family()), m.get("rest_client_requests_total", 0.0),
                        m.get("ansible_operator_runs_total", 0.0)))
        return out


class Bench:
    def __init__(self, args: argparse.Namespace, kube: Kube, kubeconfig: Path, workdir: Path,
                 reaper: Reaper, prefix: str = "") -> None:
        self.args, self.kube, self.kubeconfig, self.prefix = args, kube, kubeconfig, prefix
        self.workdir, self.reaper = workdir, reaper
        self.watches = workdir / "watches.yaml"
        self.watches.write_text(yaml.safe_dump([{
            "group": LIGHT.group, "version": LIGHT.version, "kind": LIGHT.kind,
            "role": str(BENCH / "roles" / "waiting")}], sort_keys=False))
        # Ansible's main process polls its task's worker every internal_poll_interval (0.001 s by default):
        # a task that waits 5 s then costs ~1 CPU s. Longer, the wait costs (almost) nothing.
        self.ansible_cfg = workdir / "ansible.cfg"
        self.ansible_cfg.write_text(f"[defaults]\ninternal_poll_interval = {args.poll_interval}\n")

    def start(self, name: str, ns: str, sharding: bool) -> OperatorProcess:
        extra = (["--sharding", "--leader-election-id", ns, "--leader-election-namespace", ns]
                 if sharding else [])
        return OperatorProcess.start("warm", self.workdir / name, self.kubeconfig, [ns], self.reaper,
                                     max_concurrent=self.args.workers, watches=self.watches, extra=extra,
                                     env={"ANSIBLE_CONFIG": str(self.ansible_cfg),
                                          # as bench/scale.py: no fact gathering (~0.7 CPU s per run)
                                          "ANSIBLE_GATHERING": "explicit"})

    def settled(self, ns: str, members: int, timeout: float = 120.0, after: str | None = None) -> str:
        """Wait until ``members`` Leases all say they drained for one ring (not ``after``); its version."""
        from kubernetes.client import CoordinationV1Api

        leases = CoordinationV1Api(self.kube.api)
        deadline = time.monotonic() + timeout
        while True:
            items = leases.list_namespaced_lease(ns, label_selector=f"{RING_LABEL}={ns}").items
            drained = {(lease.metadata.annotations or {}).get(DRAINED) for lease in items}
            if len(items) == members and len(drained) == 1 and None not in drained and after not in drained:
                return str(drained.pop())
            if time.monotonic() > deadline:
                raise BenchError(f"{ns}: {members} members not settled after {timeout}s: {drained}")
            time.sleep(0.2)

    def phase(self, replicas: int) -> tuple[dict[str, Any], Phase, str]:
        """``replicas`` 0: one operator without --sharding."""
        label = f"{replicas} replica(s)" if replicas else "single"
        ns = f"{self.prefix}shards-{replicas}"
        self.kube.namespace(ns)
        self.kube.wait_served(LIGHT, ns)
        phase = Phase([self.start(f"{ns}-{i}", ns, sharding=replicas > 0) for i in range(max(1, replicas))])
        if replicas:
            phase.ring = self.settled(ns, replicas)
        watcher = ConditionWatcher(self.kube, LIGHT, ns).start()
        self.reaper.add(watcher.stop)
        names = [f"c{i}" for i in range(self.args.crs)]
        before = phase.usage()
        t0 = time.monotonic()
        self.kube.create_many(LIGHT, ns, names, {"waitSeconds": self.args.wait}, workers=16)
        alive = lambda: [op.check_alive() for op in phase.ops]  # noqa: E731
        done = watcher.wait(names, 1, timeout=self.args.timeout, alive=alive)
        elapsed = max(done.values()) - t0
        after = phase.usage()
        watcher.stop()
        cpu = [a[0] - b[0] for a, b in zip(after, before)]
        requests = [a[1] - b[1] for a, b in zip(after, before)]
        runs = [int(a[2] - b[2]) for a, b in zip(after, before)]
        n = self.args.crs
        result = {"replicas": replicas, "crs": n, "all_successful_s": round(elapsed, 2),
                  "crs_per_s": round(n / elapsed, 3), "runs_per_replica": runs,
                  "cpu_s_per_cr": round(sum(cpu) / n, 4), "cpu_s_per_replica": [round(c, 1) for c in cpu],
                  "requests_per_cr": round(sum(requests) / n, 2)}
        say(f"{label}: {json.dumps(result)}")
        return result, phase, ns

    def cost(self, phase: Phase, ns: str) -> dict[str, Any]:
        """Idle coordination, then one member leaving: see the module docstring."""
        idle = self.args.idle
        before = phase.usage()
        time.sleep(idle)
        after = phase.usage()
        cpu_rate = [(a[0] - b[0]) / idle for a, b in zip(after, before)]
        req_rate = [(a[1] - b[1]) / idle for a, b in zip(after, before)]
        survivors, leaver = Phase(phase.ops[:-1]), phase.ops[-1]
        moved_before = [labelled(op, "ansible_operator_shard_moves_total") for op in survivors.ops]
        before = survivors.usage()
        t0 = time.monotonic()
        leaver.stop()
        self.settled(ns, len(survivors.ops), after=phase.ring)
        moved_after = [labelled(op, "ansible_operator_shard_moves_total") for op in survivors.ops]
        moved = sum(v - b.get(k, 0.0) for a, b in zip(moved_after, moved_before) for k, v in a.items()
                    if ("direction", "in") in k)
        # what moved is re-run (converged objects, as background work): wait for those runs to end
        deadline = time.monotonic() + self.args.timeout
        while sum(a[2] - b[2] for a, b in zip(survivors.usage(), before)) < moved:
            if time.monotonic() > deadline:
                raise BenchError(f"the {moved:.0f} moved objects were not re-run after {self.args.timeout}s")
            time.sleep(0.5)
        took = time.monotonic() - t0
        after = survivors.usage()
        runs = sum(a[2] - b[2] for a, b in zip(after, before))
        cpu_above = sum(a[0] - b[0] for a, b in zip(after, before)) - sum(cpu_rate[:-1]) * took
        req_above = sum(a[1] - b[1] for a, b in zip(after, before)) - sum(req_rate[:-1]) * took
        result = {"idle_cpu_per_s": [round(c, 4) for c in cpu_rate],
                  "idle_requests_per_s": [round(r, 2) for r in req_rate],
                  "moved": int(moved), "move_runs": int(runs), "move_s": round(took, 2),
                  "cpu_s_per_move": round(cpu_above / moved, 4) if moved else None,
                  "requests_per_move": round(req_above / moved, 2) if moved else None}
        say(f"cost: {json.dumps(result)}")
        return result


def measure(args: argparse.Namespace, workdir: Path, reaper: Reaper) -> dict[str, Any]:
    say("using the cluster of --kubeconfig" if args.kubeconfig else "starting the real control plane")
    plane = start_api("real", workdir, [BENCH / "crds" / "light.yaml"], reaper, kubeconfig=args.kubeconfig)
    kube = Kube(plane.kubeconfig)
    reaper.add(kube.close)
    reaper.add(kube.delete_namespaces)
    bench = Bench(args, kube, plane.kubeconfig, workdir, reaper, prefix=plane.namespace_prefix)
    phases: list[dict[str, Any]] = []
    last: tuple[Phase, str] | None = None
    for replicas in [0, *args.replicas]:
        if last is not None:  # one phase's replicas at a time
            for op in last[0].ops:
                op.stop()
        result, phase, ns = bench.phase(replicas)
        phases.append(result)
        last = (phase, ns)
    assert last is not None
    cost = bench.cost(*last) if len(last[0].ops) > 1 else None
    return {"phases": phases, "cost": cost}


def table(out: dict[str, Any], args: argparse.Namespace) -> str:
    base = out["phases"][0]["crs_per_s"]
    lines = ["| setup | all Successful (s) | CRs/s | × single | runs per replica | CPU s per CR |"
             " runner API requests per CR |", "|---|---:|---:|---:|---|---:|---:|"]
    for p in out["phases"]:
        name = f"{p['replicas']} replica(s), --sharding" if p["replicas"] else "single (no --sharding)"
        lines.append(f"| {name} | {p['all_successful_s']} | {p['crs_per_s']} | {p['crs_per_s'] / base:.2f} |"
                     f" {'/'.join(map(str, p['runs_per_replica']))} | {p['cpu_s_per_cr']} |"
                     f" {p['requests_per_cr']} |")
    cost = out.get("cost")
    if cost:
        lines += ["", f"Coordination, per replica idle: CPU {'/'.join(map(str, cost['idle_cpu_per_s']))} s/s,"
                      f" runner API requests {'/'.join(map(str, cost['idle_requests_per_s']))} /s."
                      f" One of {len(out['phases'][-1]['runs_per_replica'])} leaving: {cost['moved']} objects"
                      f" moved, {cost['move_runs']} runs, settled and re-run in {cost['move_s']} s;"
                      f" per move {cost['cpu_s_per_move']} CPU s and {cost['requests_per_move']} requests"
                      " above idle."]
    return "\n".join(lines)


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--crs", type=int, default=90, help="CRs per phase (default 90)")
    p.add_argument("--wait", type=float, default=5.0, help="seconds each run waits (default 5)")
    p.add_argument("--workers", type=int, default=6, help="--max-concurrent-reconciles per replica (6)")
    p.add_argument("--replicas", type=lambda s: [int(x) for x in s.split(",")], default=[1, 2, 3],
                   help="replica counts measured after the single baseline (default 1,2,3)")
    p.add_argument("--poll-interval", type=float, default=0.05,
                   help="Ansible's internal_poll_interval for the runs (default 0.05; Ansible's own: 0.001)")
    p.add_argument("--idle", type=float, default=20.0, help="seconds of the idle coordination window")
    p.add_argument("--timeout", type=float, default=600.0, help="per phase, seconds")
    p.add_argument("--kubeconfig", type=Path,
                   help="a running cluster's (namespaces of the run's own, deleted at the end) instead of a"
                        " control plane of its own")
    p.add_argument("--json", type=Path)
    p.add_argument("--workdir", type=Path, help="keep logs and artifacts here")
    args = p.parse_args(argv)
    if args.crs < 1 or args.workers < 1 or args.wait < 0 or any(r < 1 for r in args.replicas):
        p.error("--crs, --workers and every --replicas count must be at least 1, --wait at least 0")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    date = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    machine = report.machine()
    started = time.monotonic()
    out, rc = run_guarded("sharding", args.workdir, lambda workdir, reaper: measure(args, workdir, reaper))
    if out is None:
        return rc
    print(f"\nansible-operator sharding benchmark, {date}, {machine['nproc']} CPUs, N={args.crs} CRs per"
          f" phase, a run waits {args.wait:g}s, {args.workers} workers per replica, run in"
          f" {time.monotonic() - started:.0f}s")
    print(table(out, args))
    if args.json is not None:
        doc = {"date": date, "machine": machine, "crs": args.crs, "wait_s": args.wait,
               "workers": args.workers, **out}
        args.json.write_text(json.dumps(doc, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
