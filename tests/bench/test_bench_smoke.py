"""Smoke test of the benchmark script: ``bench/run.py --only floor --quick`` with the smallest counts.

It proves the script runs both executors end to end and writes the JSON it promises. It checks *shapes*
(keys present, figures positive numbers), never timings: timing belongs to ``bench/``, not to the suite.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HEADLINE_KEYS = ("trivial_ratio", "latency_ratio", "throughput_ratio", "coalesced_runs", "private_mb_per_run",
                 "idle_rss_mb")


def _positive_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0


def test_floor_quick_writes_json(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    proc = subprocess.run(
        [sys.executable, str(REPO / "bench" / "run.py"), "--only", "floor", "--quick", "--runs", "2",
         "--json", str(out)],
        cwd=tmp_path, capture_output=True, text=True, timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(out.read_text())

    for key in HEADLINE_KEYS:
        assert key in doc, key
    # Only the floor ran: its ratio is a number, the sections that did not run are null (never invented).
    assert _positive_number(doc["trivial_ratio"]), doc["trivial_ratio"]
    for key in HEADLINE_KEYS[1:]:
        assert doc[key] is None, (key, doc[key])

    floor = doc["raw"]["floor"]
    assert set(floor) == {"runner", "warm"}
    for executor, figures in floor.items():
        assert figures["runs"] == 2, executor
        for key in ("median_ms", "min_ms", "max_ms", "events_per_run"):
            assert _positive_number(figures[key]), (executor, key, figures[key])
        assert figures["min_ms"] <= figures["median_ms"] <= figures["max_ms"]
    assert doc["machine"]["nproc"] >= 1
    assert doc["targets"]["trivial_ratio"]["met"] in (True, False)
    # The side-by-side table was printed.
    assert "trivial role, direct (median ms)" in proc.stdout


def test_bad_section_is_refused(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, str(REPO / "bench" / "run.py"), "--only", "floor,nope"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "choose from" in proc.stderr
