"""Smoke test of the benchmark script: ``bench/run.py --only floor --quick`` with the smallest counts.

It proves the script runs both executors end to end and writes the JSON it promises. It checks *shapes*
(keys present, figures positive numbers), never timings: timing belongs to ``bench/``, not to the suite.
The sections that need a Kubernetes API run on the test run's (tests/kube.py): the session's shared real
control plane (``--kubeconfig``: namespaces of the run's own, deleted at its end), or with
``ANSIBLE_OPERATOR_TEST_API=sandbox`` a sandbox the script starts (``--api sandbox``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import kubernetes

from tests import kube

REPO = Path(__file__).resolve().parents[2]
HEADLINE_KEYS = ("trivial_ratio", "latency_ratio", "throughput_ratio", "coalesced_runs", "private_mb_per_run",
                 "idle_rss_mb")


def _positive_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0


def _api_args() -> list[str]:
    """The benchmark's Kubernetes API: the shared control plane, or a sandbox of its own."""
    return ["--kubeconfig", str(kube.shared().kubeconfig)] if kube.real() else ["--api", "sandbox"]


def _bench_namespaces() -> list[str]:
    """Namespaces of benchmark runs on the shared control plane that are not being deleted."""
    with kube.shared().api_client() as api:
        items = kubernetes.client.CoreV1Api(api).list_namespace().items
    return [n.metadata.name for n in items
            if n.metadata.name.startswith("bench-") and n.status.phase != "Terminating"]


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
    # no section needed a Kubernetes API: none was started
    assert (doc["api"], doc["api_server"]) == ("real", None)
    # The side-by-side table was printed.
    assert "trivial role, direct (median ms)" in proc.stdout


def test_bad_arguments_are_refused(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, str(REPO / "bench" / "run.py"), "--only", "floor,nope"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "choose from" in proc.stderr
    proc = subprocess.run([sys.executable, str(REPO / "bench" / "run.py"), "--api", "sandbox", "--kubeconfig",
                           str(tmp_path / "kubeconfig")], cwd=tmp_path, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 2
    assert "--kubeconfig needs --api real" in proc.stderr


NATIVE_KEYS = ("native_cpu_ratio", "native_latency_ratio", "native_burst_ratio", "native_peak_rss_ratio")


def test_native_baseline_converges_and_writes_ratios(tmp_path: Path) -> None:
    """The hand-written kopf operator (bench/native_memcached.py) and the warm executor each converge
    Memcached CRs (Successful and the role's Available, seen on a watch: the run fails otherwise) and
    the warm/native ratios land in the JSON. Shapes only, no timing asserts."""
    out = tmp_path / "bench.json"
    proc = subprocess.run(
        [sys.executable, str(REPO / "bench" / "run.py"), "--only", "native", "--quick", "--native-crs", "1",
         "--native-burst", "2", "--json", str(out), *_api_args()],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(out.read_text())
    if kube.real():
        assert doc["api"] == "real"
        assert doc["api_server"].startswith("real control plane, running (https://"), doc["api_server"]
        assert _bench_namespaces() == []  # the run deleted its namespaces
    else:
        assert (doc["api"], doc["api_server"]) == ("sandbox", "sandbox")
    assert f"Kubernetes API: {doc['api_server']}" in proc.stdout
    for key in NATIVE_KEYS:
        assert _positive_number(doc[key]), (key, doc[key])
    native = doc["raw"]["native"]
    assert set(native) == {"native", "warm"}
    for column, figures in native.items():
        assert figures["crs"] == 1 and figures["burst_crs"] == 2, column
        for key in ("p50_s", "cpu_s_per_cr", "burst_s", "burst_peak_rss_mb"):
            assert _positive_number(figures[key]), (column, key, figures[key])
    assert "Memcached, native baseline" in proc.stdout
