"""The run-artifacts layout (ansible_operator.artifacts): bounded per object, lifetime, globally; private."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from ansible_operator import artifacts
from ansible_operator.artifacts import ObjectPath


def make_runs(base: Path, n: int, *, minute: int = 0, size: int = 2) -> list[str]:
    names = [f"20261122T12{minute:02d}{i:02d}Z-abcdef" for i in range(n)]
    for name in names:
        (base / name).mkdir(parents=True)
        (base / name / "run.json").write_text("x" * size)
    return names


def test_keeps_the_newest(tmp_path: Path) -> None:
    names = make_runs(tmp_path, 25)
    artifacts.prune_runs(tmp_path, keep=20)
    assert sorted(p.name for p in tmp_path.iterdir()) == names[5:]


def test_zero_keeps_everything(tmp_path: Path) -> None:
    names = make_runs(tmp_path, 3)
    artifacts.prune_runs(tmp_path, keep=0)
    assert sorted(p.name for p in tmp_path.iterdir()) == names


def test_run_dirs_and_summaries_are_private(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        root = artifacts.ensure_root(tmp_path / "runs")
        run_dir = artifacts.new_run_dir(root, ObjectPath("cache.example.com", "v1", "Memcached", "ns", "a"),
                                        "20261122T120000Z-abcdef")
        artifacts.write_run(run_dir, artifacts.RunRecord.from_json({"error": "s3cr3t"}, run_dir))
    finally:
        os.umask(old)
    assert stat.S_IMODE(root.stat().st_mode) == 0o700
    assert stat.S_IMODE(run_dir.stat().st_mode) == 0o700
    assert stat.S_IMODE(run_dir.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE((run_dir / "run.json").stat().st_mode) == 0o600
    assert artifacts.load_run(run_dir).error == "s3cr3t"


def test_remove_runs_of_one_incarnation_and_empty_parents(tmp_path: Path) -> None:
    gone = ObjectPath("cache.example.com", "v1", "Memcached", "ns", "gone")
    kept = ObjectPath("cache.example.com", "v1", "Memcached", "other", "kept")
    for obj in (gone, kept):
        for run_id, uid in (("20261122T120000Z-aaaaaa", "u1"), ("20261122T120001Z-aaaaaa", "u2")):
            run_dir = artifacts.new_run_dir(tmp_path, obj, run_id)
            artifacts.write_run(run_dir, artifacts.RunRecord.from_json({"uid": uid}, run_dir))
    assert artifacts.remove_runs_of(tmp_path, gone, "u1") == 1
    assert [d.name for d in artifacts.iter_run_dirs(tmp_path) if artifacts.object_of(d) == gone] == [
        "20261122T120001Z-aaaaaa"]
    assert artifacts.remove_runs_of(tmp_path, gone, None) == 1  # every run of the name
    assert not (tmp_path / "cache.example.com" / "v1" / "Memcached" / "ns").exists()
    assert [artifacts.object_of(d) for d in artifacts.iter_object_dirs(tmp_path)] == [kept]
    assert artifacts.remove_runs_of(tmp_path, gone, "u1") == 0


def test_cap_total_removes_oldest_runs_across_objects(tmp_path: Path) -> None:
    a = artifacts.object_dir(tmp_path, ObjectPath("", "v1", "ConfigMap", "ns", "a"))
    b = artifacts.object_dir(tmp_path, ObjectPath("", "v1", "ConfigMap", "ns", "b"))
    old_a = make_runs(a, 2, minute=0, size=100)     # 12:00:00, 12:00:01: the oldest
    new_b = make_runs(b, 2, minute=5, size=100)
    removed = artifacts.cap_total(tmp_path, 250)
    assert [p.name for p in removed] == old_a
    assert not a.exists()  # a's last run went, so did its directory
    assert sorted(p.name for p in b.iterdir()) == new_b
    assert artifacts.cap_total(tmp_path, 0) == []


def test_cap_total_never_removes_runs_in_progress(tmp_path: Path) -> None:
    obj = artifacts.object_dir(tmp_path, ObjectPath("", "v1", "ConfigMap", "ns", "a"))
    names = make_runs(obj, 3, size=100)
    running = obj / names[0]
    removed = artifacts.cap_total(tmp_path, 10, keep=frozenset({running}))
    assert running.exists() and [p.name for p in removed] == names[1:]


def test_load_run_without_summary_reads_the_path(tmp_path: Path) -> None:
    run_dir = artifacts.new_run_dir(tmp_path, ObjectPath("", "v1", "ConfigMap", None, "x"),
                                    "20261122T120000Z-abcdef")
    run = artifacts.load_run(run_dir)
    assert (run.group, run.kind, run.namespace, run.name) == ("", "ConfigMap", None, "x")
    assert run.error == "run.json missing" and run.result == "unknown" and run.changed_tasks == []


def test_record_round_trip_and_old_files(tmp_path: Path) -> None:
    run_dir = artifacts.new_run_dir(tmp_path, ObjectPath("a.io", "v1", "Widget", "ns", "w"),
                                    "20261122T120000Z-abcdef")
    record = artifacts.RunRecord(
        run_id=run_dir.name, group="a.io", version="v1", kind="Widget", namespace="ns", name="w", uid="u1",
        generation=3, phase="reconcile", executor="warm", started="2026-11-22T12:00:00Z",
        finished="2026-11-22T12:00:01Z", duration_s=1.0, result="failed",
        stats={"ok": 1, "changed": 0, "skipped": 0, "failures": 1, "unreachable": 0, "rescued": 0,
               "ignored": 0},
        failed_task=artifacts.FailedTaskRecord(name="t", action="fail", role=None, message="m", host="h"),
        changed_tasks=["c"], error=None, artifacts_dir=str(run_dir))
    artifacts.write_run(run_dir, record)
    assert artifacts.load_run(run_dir) == record
    # a run.json from an earlier version: fewer keys (defaults), an unknown one (ignored), odd shapes
    (run_dir / "run.json").write_text(json.dumps({
        "run_id": run_dir.name, "kind": "Widget", "result": "failed", "stats": None, "changed_tasks": None,
        "legacy": 1}))
    old = artifacts.load_run(run_dir)
    assert (old.group, old.version, old.namespace, old.name) == ("a.io", "v1", "ns", "w")  # from the path
    assert (old.uid, old.generation, old.phase, old.stats, old.failed_task, old.changed_tasks) == (
        None, None, None, None, None, [])
    assert old.result == "failed" and old.artifacts_dir == str(run_dir)
    (run_dir / "run.json").write_text("[]")
    assert artifacts.load_run(run_dir).error == "run.json unreadable: not a JSON object"


@pytest.mark.parametrize("text, size", [("1Gi", 2**30), ("500Mi", 500 * 2**20), ("2G", 2 * 10**9), ("0", 0),
                                        ("1048576", 2**20), ("1.5Ki", 1536), ("10kB", 10_000)])
def test_parse_size(text: str, size: int) -> None:
    assert artifacts.parse_size(text) == size


@pytest.mark.parametrize("text", ["", "1X", "-1Gi", "Gi", "1 Gi Gi"])
def test_parse_size_errors(text: str) -> None:
    with pytest.raises(ValueError, match="invalid size"):
        artifacts.parse_size(text)
