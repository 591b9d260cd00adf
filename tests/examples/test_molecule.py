"""``molecule test -s default`` passes offline, with no Docker: a Kubernetes API + operator + samples.

This is the examples' end-to-end test through the real operator (``ansible-operator run``): create
gives the scenario a Kubernetes API and starts the operator, converge applies the samples, verify checks
them and their workloads and walks a SampleDB through backup, upgrade, a refused downgrade and deletion,
destroy stops the processes. The Kubernetes API is the test run's (tests/kube.py): on the real backend,
the session's shared control plane (create.yml uses the running one in ANSIBLE_OPERATOR_TEST_KUBECONFIG,
in a namespace of this test's own); with ``ANSIBLE_OPERATOR_TEST_API=sandbox``, the sandbox create.yml
starts (EXAMPLES_API=sandbox). Slow (several minutes on a busy 2-core machine): marked e2e + slow.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import kubernetes
import pytest
import yaml

from tests import kube

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

_ANSI = re.compile(r"\x1b\[[0-9;]*m")


@pytest.mark.timeout(1500)
def test_molecule_default_scenario(tmp_path: Path) -> None:
    real = kube.real()
    namespace = f"molecule-{uuid.uuid4().hex[:6]}"
    env = dict(os.environ)
    env.update(
        PATH=f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}",
        # Keep molecule's state (kubeconfig, pids, logs, run artifacts) in this test's directory.
        MOLECULE_EPHEMERAL_DIRECTORY=str(tmp_path / "molecule"),
        ANSIBLE_HOME=str(tmp_path / "ansible-home"),
        NO_COLOR="1",
        ANSIBLE_NOCOLOR="1",
        EXAMPLES_API="real" if real else "sandbox",
        EXAMPLES_NAMESPACE=namespace,
    )
    env.pop("KUBECONFIG", None)
    if real:
        shared = kube.shared()
        env[kube.KUBECONFIG] = str(shared.kubeconfig)
        server = yaml.safe_load(shared.kubeconfig.read_text())["clusters"][0]["cluster"]["server"]
        expected = ("Kubernetes API: the real control plane (a running one: ANSIBLE_OPERATOR_TEST_KUBECONFIG)"
                    f" at {server}, namespace {namespace}")
    else:
        env.pop(kube.KUBECONFIG, None)
        expected = "Kubernetes API: the sandbox at http"
    try:
        proc = subprocess.run([str(VENV_BIN / "molecule"), "test", "-s", "default"], cwd=REPO, env=env,
                              capture_output=True, text=True, timeout=1400)
    finally:
        if real:  # cleanup.yml deletes it; this is for a run that stopped before
            shared.created.append(namespace)
            shared.cleanup()
    output = _ANSI.sub("", proc.stdout + proc.stderr)
    operator_log = tmp_path / "molecule" / "operator.log"
    tail = operator_log.read_text(errors="replace")[-4000:] if operator_log.exists() else "(no operator log)"
    assert proc.returncode == 0, f"{output[-8000:]}\n--- operator log (tail) ---\n{tail}"
    # It ran against the API this test run uses.
    assert expected in re.sub(r"\s+", " ", output), expected
    # Every stage of the sequence ran (none was skipped by a misconfiguration).
    for stage in ("create", "converge", "idempotence", "verify", "destroy"):
        assert re.search(rf"{stage}: Executed: Successful", output), stage
    # destroy stopped every process create started.
    assert not list((tmp_path / "molecule").glob("*.pid"))
    if real:  # cleanup.yml deleted the scenario's namespace (and waited for it to be gone)
        with shared.api_client() as api:
            with pytest.raises(kubernetes.client.ApiException) as gone:
                kubernetes.client.CoreV1Api(api).read_namespace(namespace)
        assert gone.value.status == 404
