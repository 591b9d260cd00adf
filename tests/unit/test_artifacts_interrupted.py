"""artifacts.recover_interrupted: runs a killed operator left "running" are marked interrupted at the next
start, unless another live operator shares the artifacts root (issue 11 defect 3)."""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path

from ansible_operator import artifacts


def _run(root: Path, run_id: str, result: str) -> Path:
    obj = artifacts.ObjectPath("test.example.com", "v1", "Widget", "ns", "w")
    run_dir = artifacts.new_run_dir(root, obj, run_id)
    artifacts.write_run(run_dir, artifacts.RunRecord.from_json({"result": result}, run_dir))
    return run_dir


def _result(run_dir: Path) -> str:
    return str(json.loads((run_dir / "run.json").read_text())["result"])


def test_running_runs_of_a_dead_operator_become_interrupted(tmp_path: Path) -> None:
    root = artifacts.ensure_root(tmp_path / "runs")
    running = _run(root, "20261124T101500Z-aaaaaa", "running")
    done = _run(root, "20261124T101400Z-bbbbbb", "successful")
    assert artifacts.recover_interrupted(root) == 1
    assert _result(running) == artifacts.INTERRUPTED and _result(done) == "successful"
    assert "operator stopped" in json.loads((running / "run.json").read_text())["error"]
    assert artifacts.recover_interrupted(root) == 0  # idempotent


def test_no_sweep_while_another_live_operator_uses_the_root(tmp_path: Path) -> None:
    root = artifacts.ensure_root(tmp_path / "runs")
    other = os.open(root / ".operator.lock", os.O_RDWR | os.O_CREAT, 0o600)  # another operator, alive
    try:
        fcntl.flock(other, fcntl.LOCK_SH)
        running = _run(root, "20261124T101500Z-cccccc", "running")
        assert artifacts.recover_interrupted(root) == 0
        assert _result(running) == "running"
    finally:
        os.close(other)
