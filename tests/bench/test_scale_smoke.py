"""Smoke test of the scale benchmark: ``bench/scale.py`` with N=3 Light CRs (1 for the runner), both
executors, every phase.

It checks that every phase completed and that the JSON holds every figure it promises (numbers where a
figure was measured), never timings: timing belongs to ``bench/``, not to the suite. The script starts a
control plane of its own (the API requests are counted from its audit log, which the shared one does not
write), so it needs the real control plane's binaries: with the sandbox backend the test is skipped.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests import kube

REPO = Path(__file__).resolve().parents[2]
CRS = 3  # the harness, not the scale
RUNNER_CRS = 1  # the runner column is ~1 s of CPU per run (--runner-crs)
STORM_KEYS = ("create_s", "create_per_s", "all_successful_s", "crs_per_s", "cpu_s", "cpu_s_per_cr",
              "cpu_s_per_run", "api_requests", "api_requests_per_cr", "api_requests_per_run", "peak_rss_mb",
              "peak_pss_mb", "settled_rss_mb", "operator_rss_before_mb", "operator_rss_settled_mb",
              "operator_kb_per_cr", "runs")
RESYNC_KEYS = ("resync_s", "cpu_s", "cpu_s_per_cr", "api_requests", "api_requests_per_cr", "peak_rss_mb",
               "runs", "probe_interval_s")
RESTART_KEYS = ("ready_s", "new_cr_successful_s")


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0


@pytest.mark.slow
@pytest.mark.timeout(1500)
@pytest.mark.skipif(not kube.real(), reason="needs the real control plane (an audit log of its own)")
def test_scale_runs_every_phase_and_writes_every_figure(tmp_path: Path) -> None:
    out = tmp_path / "scale.json"
    proc = subprocess.run(
        [sys.executable, str(REPO / "bench" / "scale.py"), "--crs", str(CRS), "--runner-crs", str(RUNNER_CRS),
         "--executors", "warm,runner",
         "--probe-interval", "10", "--startup-resync", "background,spread", "--restart-window", "5",
         "--settle", "1", "--json", str(out)],
        cwd=tmp_path, capture_output=True, text=True, timeout=1400,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(out.read_text())
    assert (doc["crs"], doc["runner_crs"], doc["role"]) == (CRS, RUNNER_CRS, "light")
    assert doc["phases"] == {"warm": ["restart", "resync", "storm"], "runner": ["restart", "resync", "storm"]}
    for executor, phases in doc["raw"].items():
        storm, resync = phases["storm"], phases["resync"]
        for key in STORM_KEYS:
            assert _number(storm[key]), (executor, "storm", key, storm[key])
        for key in RESYNC_KEYS:
            assert _number(resync[key]), (executor, "resync", key, resync[key])
        # every CR and every probed change ran; the N converged CRs all re-ran in the resync
        n = RUNNER_CRS if executor == "runner" else CRS
        assert storm["crs"] == n and storm["runs"] >= n + storm["probe"]["create"]["n"]
        assert resync["crs"] == n and resync["runs"] >= n
        # requests are counted (each run writes its ConfigMap and its status at least)
        assert storm["api_requests"] >= 2 * n, (executor, storm["api_requests"])
        assert storm["peak_rss_mb"] >= storm["settled_rss_mb"] > 0
        for probe in (phase[which] for phase in (storm, resync) for which in ("probe", "probe_other_ns")):
            assert probe["create"]["n"] >= 1, (executor, probe)
            assert probe["all"]["n"] == probe["create"]["n"] + probe["edit"]["n"]
            for what in ("create", "all"):
                assert _number(probe[what]["p50_s"]) and _number(probe[what]["p99_s"]), (executor, probe)
                assert probe[what]["p50_s"] <= probe[what]["p99_s"]
        assert set(phases["restart"]) == {"background", "spread"}
        for mode, restart in phases["restart"].items():
            for key in RESTART_KEYS:
                assert _number(restart[key]), (executor, mode, key, restart[key])
            assert 0 <= restart["converged_rerun_in_window"] <= restart["converged_crs"]
        # spread re-checks each converged CR at a random time within the 10 h reconcile period
        assert phases["restart"]["spread"]["converged_rerun_in_window"] <= 1, phases["restart"]["spread"]
    for title in ("storm: N CRs created at once", "resync: N converged CRs re-run",
                  "restart, --startup-resync"):
        assert title in proc.stdout
    assert "warm/runner" in proc.stdout
