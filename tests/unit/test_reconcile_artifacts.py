"""Run directories per object are bounded (a known Operator SDK disk/inode exhaustion)."""

from __future__ import annotations

from pathlib import Path

from ansible_operator.reconcile import _prune_runs


def make_runs(base: Path, n: int) -> list[str]:
    names = [f"20261122T1200{i:02d}Z-abcdef" for i in range(n)]
    for name in names:
        (base / name).mkdir(parents=True)
        (base / name / "run.json").write_text("{}")
    return names


def test_keeps_the_newest(tmp_path: Path) -> None:
    names = make_runs(tmp_path, 25)
    _prune_runs(tmp_path, keep=20)
    assert sorted(p.name for p in tmp_path.iterdir()) == names[5:]


def test_zero_keeps_everything(tmp_path: Path) -> None:
    names = make_runs(tmp_path, 3)
    _prune_runs(tmp_path, keep=0)
    assert sorted(p.name for p in tmp_path.iterdir()) == names
