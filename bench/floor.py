"""Executor floor: the trivial one-task role run directly through an executor, no operator around it.

This is the smallest cost any reconcile can have with that executor: for ``runner`` a fresh
``ansible-playbook`` (interpreter start, Ansible imports, plugin loading) driven by ansible-runner; for
``warm`` a fork of the pre-imported zygote. Facts are not gathered (``ANSIBLE_GATHERING=explicit``): the
setup module would add the same module-subprocess cost to both and hide the executor's own share.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from harness import BENCH, BenchError

from ansible_operator.executors import make_executor
from ansible_operator.executors.base import RunRequest
from ansible_operator.executors.datadir import new_run_id

TRIVIAL_ROLE = BENCH / "roles" / "trivial"


async def _measure(name: str, runs: int, warmup: int, workdir: Path) -> dict[str, Any]:
    executor = make_executor(name, max_workers=1)
    t0 = time.perf_counter()
    await executor.start()
    start_s = time.perf_counter() - t0
    events = 0

    def on_event(_event: dict[str, Any]) -> None:
        nonlocal events
        events += 1

    times: list[float] = []
    try:
        for i in range(warmup + runs):
            rid = new_run_id()
            request = RunRequest(run_id=rid, private_data_dir=workdir / name / rid, extra_vars={},
                                 role=str(TRIVIAL_ROLE), envvars={"ANSIBLE_GATHERING": "explicit"})
            t = time.perf_counter()
            outcome = await executor.run(request, on_event)
            elapsed = time.perf_counter() - t
            if outcome.status != "successful":
                raise BenchError(f"{name}: trivial run ended {outcome.status}: {outcome.error}")
            if i >= warmup:
                times.append(elapsed)
    finally:
        await executor.close()
    ms = [t * 1000 for t in times]
    return {
        "runs": runs,
        "warmup": warmup,
        "start_s": round(start_s, 3),
        "median_ms": round(statistics.median(ms), 1),
        "min_ms": round(min(ms), 1),
        "max_ms": round(max(ms), 1),
        "events_per_run": events // (warmup + runs),
    }


def measure_floor(executors: list[str], runs: int, warmup: int = 2) -> dict[str, dict[str, Any]]:
    """``{executor: {median_ms, min_ms, max_ms, start_s, ...}}``; executors measured one after another."""
    out: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-floor-") as tmp:
        for name in executors:
            out[name] = asyncio.run(_measure(name, runs, warmup, Path(tmp)))
    return out
