"""Secret canary (issue 11, defect 4): a Secret's value and a spec password, read and written by the role,
must not appear anywhere a CR author or an onlooker can read them.

CRs ask for every verbosity the annotation accepts (0-7) on an operator as shipped (default cap) and on
one whose admin raised the cap to 7 (Secret values in task results are redacted at any verbosity). The
canaries, raw and base64-encoded, are searched in: the operator's stdout/stderr, every CR's status, every
Event, ``ansible-operator runs`` (table, JSON, ``--show`` of every run) and the command line of every
process on the machine, sampled while the runs happen.

Pass: zero occurrences, while the role demonstrably used both values (the Secret it wrote holds them)."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import threading
import uuid
from typing import Self

import kubernetes
import psutil
import pytest

from tests.faults.conftest import Cluster, Operator, wait_for, widget_watch

ANNOTATION = "ansible.sdk.operatorframework.io/verbosity"
VERBOSITIES = range(8)


class CmdlineScanner:
    """Reads every process's command line in a loop (a thread) and records the ones holding a canary."""

    def __init__(self, needles: list[str]) -> None:
        self.needles = needles
        self.hits: list[str] = []
        self.scans = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="cmdline-scanner")

    def _loop(self) -> None:
        while not self._stop.is_set():
            for p in psutil.process_iter(["cmdline"]):
                try:
                    line = " ".join(p.info["cmdline"] or ())
                except (psutil.NoSuchProcess, psutil.AccessDenied):
                    continue
                if any(n in line for n in self.needles):
                    self.hits.append(line[:300])
            self.scans += 1
            self._stop.wait(0.02)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)


def occurrences(text: str, needles: list[str]) -> int:
    return sum(text.count(n) for n in needles)


def runs_output(op: Operator, ns: str) -> str:
    def ao(*args: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "ansible_operator", "runs", "--artifacts-dir", str(op.artifacts), *args],
            check=False,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout + done.stderr

    out = [ao("--namespace", ns, "--limit", "100"), ao("--namespace", ns, "-o", "json", "--limit", "100")]
    for run in json.loads(out[1]):
        out.append(ao("--show", run["run_id"]))
    return "\n".join(out)


@pytest.mark.parametrize("cap", ["default", "7"])
def test_secret_values_never_leak(cluster: Cluster, operators, cap: str, figures: dict) -> None:
    ns = cluster.namespace(f"canary-{cap}")
    secret_value, password = f"canary-secret-{uuid.uuid4().hex}", f"canary-pass-{uuid.uuid4().hex}"
    needles = [v for s in (secret_value, password) for v in (s, base64.b64encode(s.encode()).decode())]
    cluster.core.create_namespaced_secret(ns, {"metadata": {"name": "shared"},
                                               "stringData": {"token": secret_value}})
    flags = [] if cap == "default" else ["--max-annotation-verbosity", cap]
    names = [f"v{v}" for v in VERBOSITIES]
    with CmdlineScanner(needles) as scanner:
        op = operators(cluster.kubeconfig, [widget_watch("secret_user")], *flags, namespace=ns,
                       name=f"canary-{cap}")
        for v, name in zip(VERBOSITIES, names):
            cluster.create(ns, name, {"secretName": "shared", "password": password},
                           annotations={ANNOTATION: str(v)})
        cluster.wait_converged(ns, names)
        wait_for(lambda: scanner.scans >= 3, 60, what="a full process scan after the runs")

    for name in names:  # the role really had both values in hand
        written = cluster.core.read_namespaced_secret(f"{name}-password", ns).data
        assert base64.b64decode(written["password"]).decode() == password
        assert base64.b64decode(written["shared"]).decode() == secret_value
    places = {
        "operator stdout": op.logs(),
        "status": json.dumps([cluster.read(ns, n)["status"] for n in names]),
        "events": json.dumps(kubernetes.client.ApiClient().sanitize_for_serialization(
            cluster.core.list_namespaced_event(ns).items)),
        "runs output": runs_output(op, ns),
        "process command lines": "\n".join(scanner.hits),
    }
    found = {where: occurrences(text, needles) for where, text in places.items()}
    assert "Read the shared credentials" in places["runs output"]  # the places searched are the real ones
    # at verbosity 7 whole task results are logged only when the admin allows it: then they are redacted
    whole_results = [line for line in places["operator stdout"].splitlines()
                     if f"{ns}/v7 " in line and "Store the CR's password" in line and "=> {" in line]
    assert bool(whole_results) == (cap == "7"), whole_results
    assert sum(found.values()) == 0, found
    figures.update(crs=len(names), stuck_crs=0, cap=cap, secret_occurrences=0,
                   places_searched=len(places), cmdline_scans=scanner.scans)
