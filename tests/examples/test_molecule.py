"""``molecule test -s default`` passes offline, with no Docker: sandbox API server + operator + samples.

This is the examples' end-to-end test through the real operator (``ansible-operator run``): create
starts both processes, converge applies the samples, verify checks them and walks a SampleDB through
backup, upgrade, a refused downgrade and deletion, destroy stops the processes. Slow (several minutes
on a busy 2-core machine): marked e2e + slow.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

_ANSI = re.compile(r"\x1b\[[0-9;]*m")


@pytest.mark.timeout(1500)
def test_molecule_default_scenario(tmp_path: Path) -> None:
    env = dict(os.environ)
    env.update(
        PATH=f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}",
        # Keep molecule's state (kubeconfig, pids, logs, run artifacts) in this test's directory.
        MOLECULE_EPHEMERAL_DIRECTORY=str(tmp_path / "molecule"),
        ANSIBLE_HOME=str(tmp_path / "ansible-home"),
        NO_COLOR="1",
        ANSIBLE_NOCOLOR="1",
    )
    env.pop("KUBECONFIG", None)
    proc = subprocess.run([str(VENV_BIN / "molecule"), "test", "-s", "default"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=1400)
    output = _ANSI.sub("", proc.stdout + proc.stderr)
    operator_log = tmp_path / "molecule" / "operator.log"
    tail = operator_log.read_text(errors="replace")[-4000:] if operator_log.exists() else "(no operator log)"
    assert proc.returncode == 0, f"{output[-8000:]}\n--- operator log (tail) ---\n{tail}"
    # Every stage of the sequence ran (none was skipped by a misconfiguration).
    for stage in ("create", "converge", "idempotence", "verify", "destroy"):
        assert re.search(rf"{stage}: Executed: Successful", output), stage
    # destroy stopped both processes.
    assert not (tmp_path / "molecule" / "operator.pid").exists()
    assert not (tmp_path / "molecule" / "sandbox.pid").exists()
