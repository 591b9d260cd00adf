"""What depends on the installed ansible-core, end to end, with both executors.

Also run by ``./dev.sh test-ansible-low`` (marker ``ansible_versions``) on the lowest supported
ansible-core: a role written for <= 2.18 templating works there and fails clearly on 2.19; and a run's
processes -- including a ``shell`` task's daemonised grandchild -- die with a SIGKILLed operator.
"""

from __future__ import annotations

import os
import secrets
import subprocess
from pathlib import Path

import psutil
import pytest

from ansible_operator.executors import ansible_compat

from .conftest import HERE, Cluster, OperatorProcess, default_watch, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.ansible_versions]


def _installed_minor() -> tuple[int, int]:
    import ansible.release

    found = ansible_compat.minor(ansible.release.__version__)
    assert found is not None
    return found


def test_a_role_written_for_2_18_templating(cluster: Cluster, start_operator) -> None:
    op: OperatorProcess = start_operator([default_watch(role=str(HERE / "roles" / "legacy_templating"),
                                                        finalizer=None)])
    cluster.create_widget("legacy", {"size": 2, "itemsList": ["a"]})
    if _installed_minor() < (2, 19):
        cluster.wait_condition("legacy", "Successful", generation=1)
        # the int condition held, and '{{ (size|int) + 1 }}' stayed the string ConfigMap data needs
        assert cluster.configmap("legacy-legacy") == {"next": "3", "items": "1"}, op.logs()[-3000:]
    else:
        # 2.19 refuses an int as a conditional: the run fails and says why (the SDK image's 2.18 is one
        # pip install away: see docs/how-to/develop-and-test-this-project.md "ansible-core versions")
        failure = cluster.wait_condition("legacy", "Failure")
        assert "Conditional" in failure["message"] or "conditional" in failure["message"], failure


def _run_processes(*needles: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            cmdline = " ".join(proc.info["cmdline"] or ())
            if any(n in cmdline for n in needles) and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except psutil.Error:
            continue
    return found


def test_a_killed_operator_leaves_no_process_of_its_runs(cluster: Cluster, start_operator,
                                                         tmp_path: Path, executor: str) -> None:
    """issue 11 defect 3: SIGKILL the operator while a shell task runs; nothing the run started survives."""
    token = f"orphan-{secrets.token_hex(6)}"
    delay = f"4{secrets.randbelow(900) + 100}.{secrets.randbelow(900) + 100}"  # unique: finds the sleeps
    markers = tmp_path / "markers"
    markers.mkdir()
    op: OperatorProcess = start_operator([default_watch(role=str(HERE / "roles" / "long_shell"),
                                                        finalizer=None)])
    cluster.create_widget("orphans", {"token": token, "sleepSeconds": delay, "markerDir": str(markers)})

    def started() -> bool:  # the task's shell and its setsid grandchild, each with its sleep
        procs = _run_processes(token, f"sleep {delay}")
        return sum(1 for p in procs if p.cmdline()[:2] == ["sleep", delay]) == 2
    try:
        wait_for(started, 90, what="the shell task and its grandchild running")
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{op.logs()[-4000:]}") from None

    # the warm executor's zygote works in a private directory the operator would remove on shutdown
    workdirs = [Path(p.cwd()) for p in psutil.Process(op.proc.pid).children()
                if "ansible_operator.executors.warm.zygote" in p.cmdline()]
    assert bool(workdirs) == (executor == "warm"), workdirs
    op.proc.kill()  # SIGKILL: no handler, no cleanup in the operator itself
    op.proc.wait(30)
    wait_for(lambda: not _run_processes(token, f"sleep {delay}"), 30,
             what="every process of the killed operator's run gone")
    assert list(markers.iterdir()) == []  # nothing can write them any more: every writer is gone
    # the zygote removed it as it exited
    wait_for(lambda: not any(d.exists() for d in workdirs), 30,
             what=f"the zygote's working directory removed: {workdirs}")

    # the next operator on the same artifacts marks the killed run interrupted, and the CR converges
    (killed_run,) = op.runs("orphans")
    assert killed_run["result"] == "running"
    cluster.patch_widget("orphans", {"spec": {"sleepSeconds": "0"}})  # so the re-run is short
    # the same command line and environment as the first: WATCH_NAMESPACE too (without it this one would
    # watch every namespace of the shared control plane and run its role on other tests' Widgets)
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "ANSIBLE_GATHERING": "explicit",
           "WATCH_NAMESPACE": op.namespace}
    env.pop("KUBECONFIG", None)
    with open(op.log_path, "ab") as log_file:
        again = subprocess.Popen(op.proc.args, stdout=log_file, stderr=subprocess.STDOUT, env=env,
                                 cwd=op.log_path.parent, start_new_session=True)
    try:
        wait_for(lambda: any(r["run_id"] == killed_run["run_id"] and r["result"] == "interrupted"
                             for r in op.runs("orphans")), 60, what="the killed run marked interrupted")
        cluster.wait_condition("orphans", "Successful", generation=2, timeout=120)
    finally:
        again.kill()
        again.wait(30)
