"""Smoke test of the sharding benchmark: ``bench/sharding.py`` with a handful of CRs on the session's shared
control plane (``--kubeconfig``), the single baseline, 1 and 2 replicas and the coordination cost.

It checks that every phase completed and that the JSON holds every figure it promises, never timings:
timing belongs to ``bench/``, not to the suite.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests import kube

REPO = Path(__file__).resolve().parents[2]
CRS = 6


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.skipif(not kube.real(), reason="--sharding replicas coordinate through the real API server")
def test_sharding_bench_runs_every_phase_and_writes_every_figure(tmp_path: Path) -> None:
    out = tmp_path / "sharding.json"
    proc = subprocess.run(
        [sys.executable, str(REPO / "bench" / "sharding.py"), "--crs", str(CRS), "--wait", "1",
         "--workers", "2", "--replicas", "1,2", "--idle", "3", "--kubeconfig", str(kube.shared().kubeconfig),
         "--json", str(out)],
        cwd=tmp_path, capture_output=True, text=True, timeout=800,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(out.read_text())
    assert [p["replicas"] for p in doc["phases"]] == [0, 1, 2]
    for phase in doc["phases"]:
        assert sum(phase["runs_per_replica"]) >= CRS, phase  # every CR ran, on some replica
        assert len(phase["runs_per_replica"]) == max(1, phase["replicas"])
        for key in ("all_successful_s", "crs_per_s", "cpu_s_per_cr", "requests_per_cr"):
            assert _number(phase[key]), (phase, key)
    cost = doc["cost"]
    assert len(cost["idle_cpu_per_s"]) == len(cost["idle_requests_per_s"]) == 2
    assert cost["move_runs"] >= cost["moved"] >= 0  # what moved re-ran on its new owner
    assert "× single" in proc.stdout and "Coordination, per replica idle" in proc.stdout
