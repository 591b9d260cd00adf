"""ansible_compat's per-version internals, through the warm executor on the installed ansible-core."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, AsyncIterator

import pytest
from executor_helpers import started, write

from ansible_operator.executors.base import RunRequest
from ansible_operator.executors.datadir import new_run_id
from ansible_operator.executors.warm.executor import WarmExecutor

pytestmark = pytest.mark.ansible_versions  # also on the lowest and the newest ansible-core

# ansible-core 2.21 added WORKER_SESSION_ISOLATION (a task may set `ansible_worker_session_isolation: false`):
# its workers then call os.setpgid(0, 0) instead of os.setsid(). Either way a worker must stay in the run's
# process group, which the warm executor kills on timeout/cancel (older versions ignore the variable).
PGID_PLAYBOOK = """
- hosts: localhost
  gather_facts: false
  tasks:
    - name: isolated
      command: python3 -c "import os; print(os.getpgid(0))"
    - name: not isolated
      command: python3 -c "import os; print(os.getpgid(0))"
      vars: {ansible_worker_session_isolation: false}
"""


@pytest.fixture
async def warm() -> AsyncIterator[WarmExecutor]:
    async with started(WarmExecutor(max_workers=1)) as ex:
        yield ex


async def test_module_processes_stay_in_the_run_process_group_whatever_the_session_isolation(
        warm: WarmExecutor, tmp_path: Path) -> None:
    rid = new_run_id()
    playbook = write(tmp_path / "pgid.yml", PGID_PLAYBOOK)
    events: list[dict[str, Any]] = []
    outcome = await warm.run(RunRequest(run_id=rid, private_data_dir=tmp_path / rid, playbook=playbook,
                                        extra_vars={}, envvars={"ANSIBLE_GATHERING": "explicit"}),
                             events.append)
    assert outcome.status == "successful", [e.get("stdout") for e in events][-3:]
    pgids = {e["event_data"]["task"]: int(e["event_data"]["res"]["stdout"])
             for e in events if e["event"] == "runner_on_ok"}
    assert set(pgids) == {"isolated", "not isolated"}
    assert pgids["not isolated"] == pgids["isolated"]


def test_the_zygote_prints_nothing_while_preloading(tmp_path: Path) -> None:
    """Its stderr is the operator's: 2.20+'s import-time deprecation notices of the preloaded kubernetes.core
    came out there as bare awx_display event markers (no newline), breaking --log-format json."""
    import subprocess
    import sys

    zygote = subprocess.Popen([sys.executable, "-m", "ansible_operator.executors.warm.zygote"], cwd=tmp_path,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert zygote.stdout is not None and zygote.stdin is not None and zygote.stderr is not None
    ready = json.loads(zygote.stdout.readline())  # blocks until preload is done
    zygote.stdin.close()  # EOF: the zygote exits
    err = zygote.stderr.read()  # up to its exit
    assert zygote.wait(timeout=60) == 0
    assert ready["op"] == "ready", ready
    assert b"\x1b" not in err and b"DEPRECATION" not in err and b"WARNING" not in err, err
