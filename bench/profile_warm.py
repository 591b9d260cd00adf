#!/usr/bin/env python3
"""Per-phase profile of a burst of warm Memcached runs (issue 14), with py-spy.

    pip install --target /tmp/pyspy py-spy     # or a venv under /tmp: never into the project venv
    python bench/profile_warm.py --py-spy /tmp/pyspy/bin/py-spy --crs 20 --out /tmp/profile

Starts a Kubernetes API (``--api``) and a warm operator (as ``bench/run.py`` does), converges two
warm-up CRs, then records with two py-spy processes (the operator; the zygote with ``--subprocesses``:
run children, per-task workers, module forks) while ``--crs`` Memcached CRs are created at once, until
all are ``Available`` and the operator is quiet. Writes the raw stacks to ``--out`` and prints the
per-phase table of docs/explanation/benchmark-history.md: stacks whose innermost frame is a blocking call
are dropped, every other sample is charged to the first phase whose frames it contains. py-spy sees
Python only (kernel time for fork/exit and non-Python helpers are in the CPU total, not in the table).
"""

from __future__ import annotations

import argparse
import collections
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import scenarios  # noqa: E402
from harness import (  # noqa: E402
    APIS,
    BENCH,
    MEMCACHED,
    REPO,
    Cluster,
    Kube,
    OperatorProcess,
    Reaper,
    cpu_seconds,
    start_api,
)

RATE = 250
IDLE = re.compile(r"^(_worker|select|poll|_do_waitpid|waitpid|_recv|recv_bytes|_recv_bytes|wait|sleep"
                  r"|acquire|read|_poll|get|epoll|accept|readinto|_wait_for_tstate_lock|join|recv|recv_into)\b")


def _waitpid_frame() -> str:
    """The frame py-spy shows while ``fast_modules.run_forked`` waits for its module fork (``os.waitpid``
    is a C call: the innermost Python frame is ``run_forked`` itself, at that line)."""
    source = (REPO / "ansible_operator" / "executors" / "warm" / "fast_modules.py").read_text().splitlines()
    (line,) = [n for n, text in enumerate(source, 1) if "os.waitpid(pid, 0)" in text]
    return f"run_forked (ansible_operator/executors/warm/fast_modules.py:{line})"


WAITPID_FRAME = _waitpid_frame()
ZYGOTE_PHASES = [
    ("callback / event writing", r"send_callback|awx_display|OutputEventFilter|EventSink|PtyLikeStdout"
                                 r"|display\.py|ansible_runner/"),
    ("API round trips inside modules", r"urllib3/|http/client|ssl\.py|socket\.py"),
    ("module payload (AnsiballZ)", r"module_common|_configure_module|warm/payloads|modify_module"),
    ("module execution", r"_execute_module|warm/fast_modules|exec_command|ansible_collections|kubernetes/"),
    ("per-task worker start", r"WorkerProcess\.start|popen_fork"),
    ("templating", r"_templating|jinja2|ansible/template"),
    ("playbook / role load", r"Playbook\.load|ansible/playbook/|ansible/parsing/|load_list_of"),
    ("play setup", r"get_vars|VariableManager|ansible/inventory|TaskQueueManager\.__init__|load_callbacks"
                   r"|PlayIterator|TaskQueueManager\.run|PlaybookExecutor|PlaybookCLI|CLI\."),
]
OPERATOR_PHASES = [
    ("operator: status write logic", r"_write_status"),
    ("operator: owner-injecting API proxy", r"ansible_operator/owners/"),
    ("operator: queue / intake / kopf watch", r"kopf/|intake\.py|queue\.py"),
    ("operator: events from the zygote, results", r"warm/executor\.py|results\.py|on_event|logs\.py"),
    ("operator: run dir / artifacts / run.json", r"artifacts\.py|datadir\.py"),
    ("operator: API client (kube.py)", r"kube\.py|events\.py|kubernetes/"),
]


def classify(path: Path, operator: bool) -> collections.Counter[str]:
    rules = OPERATOR_PHASES if operator else ZYGOTE_PHASES
    out: collections.Counter[str] = collections.Counter()
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        n, frames = int(count), stack.split(";")
        if IDLE.match(frames[-1].split(" (")[0].split(".")[-1]) or frames[-1] == WAITPID_FRAME:
            continue
        s = ";".join(frames[1:])
        for name, rx in rules:
            if name == "play setup" and "StrategyModule.run" in s and "get_vars" not in s:
                continue
            if re.search(rx, s):
                out[name] += n
                break
        else:
            if operator:
                out["operator: other (event loop, metrics, logging)"] += n
            elif "TaskExecutor" in s:
                out["task executor other"] += n
            elif "WorkerProcess" in s or "BaseProcess._bootstrap" in s:
                out["per-task worker start"] += n
            elif frames[-1].startswith("StrategyBase._wait_on_pending_results"):
                out["strategy poll loop (1 ms sleeps between result checks)"] += n
            elif "strategy" in s:
                out["strategy: queueing tasks, processing results"] += n
            elif "_become_child" in s or "warm/child.py" in s:
                out["run child setup / exit"] += n
            else:
                out["zygote (fork, protocol)"] += n
    return out


def record(py_spy: str, crs: int, out: Path, api: str = "real") -> tuple[float, int]:
    reaper = Reaper()
    try:
        server = start_api(api, out, [REPO / "crds" / "cache.example.com_memcacheds.yaml",
                                      BENCH / "crds" / "noop.yaml"], reaper)
        cluster = Cluster(server, Kube(server.kubeconfig))
        reaper.add(cluster.close)
        for ns in ("warmup", "prof"):
            cluster.kube.namespace(ns)
        op = OperatorProcess.start("warm", out / "operator", server.kubeconfig, ["warmup", "prof"], reaper,
                                   env={"ANSIBLE_GATHERING": "explicit"})
        warmup = cluster.watcher(MEMCACHED, "warmup")
        cluster.kube.create_many(MEMCACHED, "warmup", ["w0", "w1"], {"size": 1})
        warmup.wait_available(["w0", "w1"], timeout=300, alive=op.check_alive)
        scenarios._wait_quiet(op)
        watcher = cluster.watcher(MEMCACHED, "prof")
        zygote = next(p for p in op.family() if p.pid != op.proc.pid)
        targets: tuple[tuple[str, int, list[str]], ...] = (
            ("operator", op.proc.pid, []), ("zygote", zygote.pid, ["--subprocesses"]))
        spies = [subprocess.Popen([py_spy, "record", "-p", str(pid), *extra, "-r", str(RATE), "-f", "raw",
                                   "-o", str(out / f"{what}.raw")],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                 for what, pid, extra in targets]
        time.sleep(2)
        cpu0 = cpu_seconds(op.family())
        t0 = time.monotonic()
        names = [f"p-{i}" for i in range(crs)]
        cluster.kube.create_many(MEMCACHED, "prof", names, {"size": 1})
        done = watcher.wait(names, 1, timeout=900, alive=op.check_alive)
        watcher.wait_available(names, timeout=900, alive=op.check_alive)
        scenarios._wait_quiet(op)
        cpu = cpu_seconds(op.family()) - cpu0
        for spy in spies:
            spy.send_signal(signal.SIGINT)
        for spy in spies:
            spy.wait(60)
        runs = sum(len(op.runs(MEMCACHED.group, MEMCACHED.version, MEMCACHED.kind, "prof", n))
                   for n in names)
        print(f"{crs} CRs: all Successful after {max(done.values()) - t0:.2f}s; {runs} runs;"
              f" operator family CPU {cpu:.2f}s ({cpu / max(runs, 1):.3f}s per run)")
        return cpu, runs
    finally:
        reaper.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--py-spy", required=True,
                   help="path of a py-spy binary (installed outside the project venv)")
    p.add_argument("--crs", type=int, default=20)
    p.add_argument("--out", type=Path, required=True, help="directory for the raw stacks and logs")
    p.add_argument("--api", choices=APIS, default="real",
                   help="real (default: a real control plane started in --out) or sandbox")
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    _cpu, runs = record(args.py_spy, args.crs, args.out.resolve(), args.api)
    counts = classify(args.out / "zygote.raw", False) + classify(args.out / "operator.raw", True)
    total = sum(counts.values())
    print(f"\n| phase | share of busy samples | ms per run (samples x {1000 // RATE} ms / runs) |")
    print("| --- | ---: | ---: |")
    for name, n in counts.most_common():
        print(f"| {name} | {100 * n / total:.1f} % | {1000 * n / RATE / max(runs, 1):.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
