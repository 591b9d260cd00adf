"""Smoke test of the scale benchmark: ``bench/scale.py`` with N=3 Light CRs (1 for the runner), both
executors, every phase (the restart in its default ``--startup-resync`` mode: each mode is one more
operator start and its runs per executor, and what ``spread`` does after a restart is
tests/e2e/test_fairness.py's).

It checks that every phase completed and that the JSON holds every figure it promises (numbers where a
figure was measured), never timings (the probes' later ticks, edits and skips are checked without a
cluster, at the end): timing belongs to ``bench/``, not to the suite. The script starts a
control plane of its own (the API requests are counted from its audit log, which the shared one does not
write), so it needs the real control plane's binaries: with the sandbox backend the test is skipped.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

import pytest

from tests import kube

REPO = Path(__file__).resolve().parents[2]
CRS = 3  # the harness, not the scale
RUNNER_CRS = 1  # the runner column is ~1 s of CPU per run (--runner-crs)
# One probe tick per phase: each probe's first change is made at once, so every probe figure is measured,
# and the next tick is never due. A tick every 10 s made the runner's storm (its slowest phase, slower
# still on a loaded machine) probe 2-3 times; each tick's CRs ran once more in the resync and the restarts,
# at ~3-5 CPU s per runner run. The probes' later ticks, edits and skips are test_probe_* below.
PROBE_INTERVAL = 3600
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
         "--executors", "warm,runner", "--probe-interval", str(PROBE_INTERVAL),
         "--startup-resync", "background", "--restart-window", "5", "--settle", "1",
         "--sample-interval", "1", "--json", str(out)],
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
        assert set(phases["restart"]) == {"background"}
        for mode, restart in phases["restart"].items():
            for key in RESTART_KEYS:
                assert _number(restart[key]), (executor, mode, key, restart[key])
            assert 0 <= restart["converged_rerun_in_window"] <= restart["converged_crs"]
    for title in ("storm: N CRs created at once", "resync: N converged CRs re-run",
                  "restart, --startup-resync"):
        assert title in proc.stdout
    assert "warm/runner" in proc.stdout


# ------------------------------------------------------------------- the probes' ticks, without a cluster


def _scale() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_scale", REPO / "bench" / "scale.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


scale = _scale()


def _successful(name: str, generation: int) -> dict[str, Any]:
    return {"metadata": {"name": name, "generation": generation},
            "status": {"conditions": [{"type": "Successful", "status": "True",
                                       "observedGeneration": generation}]}}


class FakeKube:
    """Creates and spec patches, each Successful on ``watcher`` at once (``converge``) or on
    :meth:`converge_all`."""

    def __init__(self, watcher: Any, converge: bool) -> None:
        self.watcher, self.converge = watcher, converge
        self.generations: dict[str, int] = {}
        self.creates: list[str] = []
        self.edits: list[str] = []

    def _changed(self, name: str) -> dict[str, Any]:
        self.generations[name] = self.generations.get(name, 0) + 1
        if self.converge:
            self.watcher._record(_successful(name, self.generations[name]), time.monotonic())
        return {"metadata": {"name": name, "generation": self.generations[name]}}

    def create(self, _kind: Any, _namespace: str, name: str, _spec: dict[str, Any]) -> dict[str, Any]:
        self.creates.append(name)
        return self._changed(name)

    def patch_spec(self, _kind: Any, _namespace: str, name: str, _spec: dict[str, Any]) -> dict[str, Any]:
        self.edits.append(name)
        return self._changed(name)

    def converge_all(self) -> None:
        for name, generation in self.generations.items():
            self.watcher._record(_successful(name, generation), time.monotonic())


def _probe(converge: bool, converged: list[str]) -> tuple[Any, FakeKube]:
    watcher = scale.StreamWatcher(None, scale.LIGHT, "ns")  # never started: fed by FakeKube
    fake = FakeKube(watcher, converge)
    for name in converged:
        fake.generations[name] = 1
        watcher._record(_successful(name, 1), time.monotonic())
    probe = scale.Probe(fake, watcher, scale.LIGHT, "ns", "p", 0.001, lambda: list(converged),
                        {"revision": 0})
    return probe, fake


def _until(done: Callable[[], bool]) -> None:
    """Wait for the probe's thread (a bound for a hang, not a timing check)."""
    deadline = time.monotonic() + 60
    while not done():
        assert time.monotonic() < deadline, "the probe's thread made no progress in 60 s"
        time.sleep(0.01)


def test_probe_ticks_create_a_cr_and_edit_each_converged_cr_once() -> None:
    probe, fake = _probe(converge=True, converged=["cr-0", "cr-1"])
    probe.start()
    _until(lambda: len(fake.creates) >= 4)
    out = probe.finish(10, lambda: None)
    creates = len(fake.creates)
    assert fake.creates == [f"p-{k}" for k in range(creates)]
    assert sorted(fake.edits) == ["cr-0", "cr-1"]  # a different converged CR each tick, then none left
    assert (out["create"]["n"], out["edit"]["n"], out["all"]["n"]) == (creates, 2, creates + 2)
    assert out["skipped_ticks"] == 0
    for what in ("create", "edit", "all"):
        assert 0 <= out[what]["p50_s"] <= out[what]["p99_s"], out


def test_probe_skips_ticks_while_its_changes_are_pending() -> None:
    probe, fake = _probe(converge=False, converged=["cr-0", "cr-1", "cr-2"])
    probe.start()
    _until(lambda: probe.skipped >= 3)
    probe._stop.set()  # no more ticks: then its changes converge
    assert probe._thread is not None
    probe._thread.join(30)
    fake.converge_all()
    out = probe.finish(10, lambda: None)
    # each tick one create and one edit: two ticks make the 4 pending changes that stop the third
    assert (fake.creates, len(fake.edits)) == (["p-0", "p-1"], 2)
    assert out["skipped_ticks"] == probe.skipped >= 3
    assert out["all"]["n"] == 4


def test_the_resync_probes_are_stretched_to_the_executor_pace() -> None:
    args = argparse.Namespace(probe_interval=3.0)
    # 0.1 runs/s: 4 probed changes per tick take at most a fifth of the runs with a tick every 200 s
    assert scale.probe_interval(args, {"runs": 10, "all_successful_s": 100.0}) == pytest.approx(200.0)
    # 10 runs/s: the probes' share is small at --probe-interval already
    assert scale.probe_interval(args, {"runs": 1000, "all_successful_s": 100.0}) == 3.0
    assert scale.probe_interval(args, {"runs": 0, "all_successful_s": 0}) == 3.0

