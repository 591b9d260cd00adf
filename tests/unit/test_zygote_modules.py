"""Fast module tasks (warm.fast_modules): same results as a fresh interpreter, only faster.

Each behaviour is checked by running the same playbook with the fast path on and off
(``WarmExecutor(fast_modules=())``) and comparing what Ansible reports.
"""

from __future__ import annotations

import os
import re
import shlex
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any, AsyncIterator

import pytest
import pytest_asyncio
from executor_helpers import SharedExecutors, shared_executors

from ansible_operator.executors.base import RunRequest
from ansible_operator.executors.datadir import new_run_id
from ansible_operator.executors.warm.executor import WarmExecutor
from ansible_operator.executors.warm.fast_modules import helper_result, plan_for

pytestmark = pytest.mark.ansible_versions  # also run on the lowest ansible-core (dev.sh test-ansible-low)

PROBE_MODULE = '''
import os
import sys

from ansible.module_utils.basic import AnsibleModule


def main():
    module = AnsibleModule(argument_spec=dict(value=dict(type="str"), fail=dict(type="bool", default=False),
                                              crash=dict(type="bool", default=False)),
                           supports_check_mode=True)
    if module.params["crash"]:
        raise ValueError("probe crashed")
    if module.params["fail"]:
        module.fail_json(msg="probe failed on purpose", value=module.params["value"])
    module.exit_json(changed=not module.check_mode, value=module.params["value"],
                     env=os.environ.get("PROBE_ENV"), forked="ansible.cli" in sys.modules)


if __name__ == "__main__":
    main()
'''

PROBE_PLAYBOOK = """
- hosts: localhost
  gather_facts: false
  tasks:
    - name: plain
      testns.fast.probe: {value: "{{ v }}"}
    - name: check mode
      testns.fast.probe: {value: check}
      check_mode: true
    - name: task environment
      testns.fast.probe: {value: env}
      environment: {PROBE_ENV: "from-task"}
    - name: fails
      testns.fast.probe: {value: bad, fail: true}
      ignore_errors: true
    - name: crashes
      testns.fast.probe: {crash: true}
      ignore_errors: true
"""

K8S_PLAYBOOK = """
- hosts: localhost
  gather_facts: false
  vars:
    cm:
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: "cm-{{ tag }}", namespace: default}
      data: {a: "1"}
  tasks:
    - name: create
      kubernetes.core.k8s: {state: present, definition: "{{ cm }}"}
    - name: again
      kubernetes.core.k8s: {state: present, definition: "{{ cm }}"}
    - name: check mode with diff
      kubernetes.core.k8s:
        state: present
        definition: "{{ cm | combine({'data': {'a': '2'}}) }}"
      check_mode: true
      diff: true
    - name: read
      kubernetes.core.k8s_info: {kind: ConfigMap, namespace: default, name: "cm-{{ tag }}"}
    - name: delete
      kubernetes.core.k8s: {state: absent, kind: ConfigMap, namespace: default, name: "cm-{{ tag }}"}
    - name: unknown kind
      kubernetes.core.k8s:
        state: present
        definition: {apiVersion: v1, kind: NoSuchKind, metadata: {name: x, namespace: default}}
      ignore_errors: true
"""

VOLATILE = {"creationTimestamp", "resourceVersion", "uid", "managedFields", "duration", "start", "end",
            "delta", "time"}


# The executors are the module's (one zygote per set of options and xdist worker, not one per test: a
# zygote's start-up costs ~1.5 CPU s); its async tests run in the module's event loop.
shared_loop = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def executors() -> AsyncIterator[SharedExecutors]:
    async with shared_executors() as pool:
        yield pool


FAST_WAYS = {"inline": True, "forked": False}
"""The fast module path both ways: in the task's process (the default) and in a fork of it."""


async def _fast(executors: SharedExecutors, way: str) -> WarmExecutor:
    return await executors.get(WarmExecutor, max_workers=2, fast_modules=("testns.fast.", "kubernetes.core."),
                               modules_in_process=FAST_WAYS[way])


@pytest_asyncio.fixture(scope="module", loop_scope="module", params=list(FAST_WAYS))
async def fast(request: pytest.FixtureRequest, executors: SharedExecutors) -> WarmExecutor:
    return await _fast(executors, request.param)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def slow(executors: SharedExecutors) -> WarmExecutor:
    return await executors.get(WarmExecutor, max_workers=2, fast_modules=())


def _collection(root: Path, namespace: str, name: str, module: str, source: str) -> Path:
    path = root / "ansible_collections" / namespace / name / "plugins" / "modules" / f"{module}.py"
    path.parent.mkdir(parents=True)
    path.write_text(source)
    return root


def _request(tmp_path: Path, playbook: str, **kw: Any) -> RunRequest:
    rid = new_run_id()
    kw.setdefault("extra_vars", {})
    pb = tmp_path / f"{rid}.yml"
    pb.write_text(playbook)
    return RunRequest(run_id=rid, private_data_dir=tmp_path / "runs" / rid, playbook=pb, **kw)


def _strip(value: Any) -> Any:
    """Without volatile fields, and without a dict that held nothing else (a diff's ``metadata`` is
    there only when managedFields' time moved to the next second between two writes)."""
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if k not in VOLATILE
                and not (isinstance(v, dict) and v and set(v) <= VOLATILE)}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


def _frames(traceback_text: str) -> list[str]:
    """A module crash's traceback (ansible-core < 2.19 passes it through) names per-run temporary
    directories, and the fast path runs the module's file where a fresh interpreter runs its copy in the
    payload zip: compare the frames by file name and function, and the exception line."""
    lines = traceback_text.rstrip().splitlines()
    frames = [re.sub(r'File "[^"]*/([^"/]*)", line \d+', r"\1", ln.strip()) for ln in lines
              if ln.startswith("  File ")]
    return frames + lines[-1:]


# ansible-core 2.20+ deprecates names imported from module_utils shims (kubernetes.core 6.2.0 does
# `from ansible.module_utils._text import to_native`); the notice comes when the importing file is executed,
# which the zygote did once (ansible_compat's docstring): only a fresh interpreter's result carries it.
_IMPORT_TIME_NOTICE = re.compile(r"^Importing '\w+' from 'ansible\.module_utils\.[\w.]+' is deprecated\.$")


def _without_import_time_notices(res: dict[str, Any]) -> dict[str, Any]:
    kept = [d for d in res.get("deprecations", ()) if not _IMPORT_TIME_NOTICE.match(str(d.get("msg")))]
    res.pop("deprecations", None)
    return {**res, "deprecations": kept} if kept else res


def _results(events: list[dict[str, Any]]) -> list[tuple[str, str, Any]]:
    found = []
    for e in events:
        if e["event"] in ("runner_on_ok", "runner_on_failed"):
            res = _without_import_time_notices(_strip(e["event_data"]["res"]))
            for key, value in res.items():
                if isinstance(value, str) and value.startswith("Traceback (most recent call last)"):
                    res[key] = _frames(value)
            found.append((e["event"], e["event_data"]["task"], res))
    return found


async def _run_results(ex: WarmExecutor, tmp_path: Path, playbook: str,
                       **kw: Any) -> list[tuple[str, str, Any]]:
    events: list[dict[str, Any]] = []
    outcome = await ex.run(_request(tmp_path, playbook, **kw), events.append)
    assert outcome.status == "successful", [e.get("stdout") for e in events][-3:]
    return _results(events)


# The two tests below compare both ways of the fast path with one run of the same playbook in a fresh
# interpreter (the reference: ~4 and ~8 CPU s of module interpreters), not one reference run per way.
@shared_loop
async def test_module_results_are_the_same_with_and_without_the_fast_path(
        executors: SharedExecutors, slow: WarmExecutor, tmp_path: Path) -> None:
    collections = _collection(tmp_path / "collections", "testns", "fast", "probe", PROBE_MODULE)
    run: dict[str, Any] = dict(extra_vars={"v": "hello"}, collections_path=(collections,),
                               envvars={"ANSIBLE_GATHERING": "explicit"})
    slow_results = await _run_results(slow, tmp_path, PROBE_PLAYBOOK, **run)
    assert [r[2].pop("forked") for r in slow_results if r[0] == "runner_on_ok"] == [False, False, False]
    for way in FAST_WAYS:
        fast_results = await _run_results(await _fast(executors, way), tmp_path, PROBE_PLAYBOOK, **run)
        assert [r[2].pop("forked") for r in fast_results if r[0] == "runner_on_ok"] == [True, True, True], way
        assert fast_results == slow_results, way
        by_task = {task: res for _, task, res in fast_results}
        assert (by_task["plain"]["changed"], by_task["plain"]["value"]) == (True, "hello")
        assert by_task["check mode"]["changed"] is False
        assert by_task["task environment"]["env"] == "from-task"
        assert by_task["fails"]["msg"] == "probe failed on purpose"
        assert "probe crashed" in str(by_task["crashes"])


@shared_loop
async def test_fast_module_tasks_are_pipelined_without_shell_helpers(
        fast: WarmExecutor, executors: SharedExecutors, tmp_path: Path) -> None:
    """The fast path pipelines its modules' tasks (issue 14): one command per task (the module, its payload on
    stdin), no ``/bin/sh`` helpers for the temporary directory; ``fast_path=False`` keeps Ansible's way."""
    collections = _collection(tmp_path / "collections", "testns", "fast", "probe", PROBE_MODULE)
    playbook = PROBE_PLAYBOOK.split("    - name: check mode")[0]  # the one plain task
    execs = {}
    plain = await executors.get(WarmExecutor, max_workers=1, fast_modules=("testns.fast.",), fast_path=False)
    for name, ex in (("fast", fast), ("plain", plain)):
        events: list[dict[str, Any]] = []
        req = _request(tmp_path, playbook, extra_vars={"v": "x"}, collections_path=(collections,),
                       envvars={"ANSIBLE_GATHERING": "explicit"}, verbosity=3)
        assert (await ex.run(req, events.append)).status == "successful"
        assert [r[2]["forked"] for r in _results(events)] == [True]
        lines = [line for e in events for line in e.get("stdout", "").splitlines()]
        execs[name] = [line for line in lines if " EXEC " in line]
    assert len(execs["fast"]) == 1 and "AnsiballZ" not in execs["fast"][0], execs["fast"]
    assert any("mkdir" in line for line in execs["plain"]) and any("chmod" in line for line in execs["plain"])


@shared_loop
async def test_kubernetes_core_tasks_match_a_fresh_interpreter(
        executors: SharedExecutors, slow: WarmExecutor, sandbox: Any, tmp_path: Path) -> None:
    run: dict[str, Any] = dict(extra_vars={"tag": "t"}, envvars={
        "ANSIBLE_GATHERING": "explicit", "K8S_AUTH_KUBECONFIG": str(sandbox.kubeconfig)})
    # the playbook deletes what it created: each run starts from the same objects
    slow_results = await _run_results(slow, tmp_path, K8S_PLAYBOOK, **run)
    for way in FAST_WAYS:
        results = await _run_results(await _fast(executors, way), tmp_path, K8S_PLAYBOOK, **run)
        assert results == slow_results, way
        changed = {task: res.get("changed") for _, task, res in results}
        assert changed == {"create": True, "again": False, "check mode with diff": True, "read": False,
                           "delete": True, "unknown kind": False}
        check = next(res for _, task, res in results if task == "check mode with diff")
        assert check["diff"]["after"]["data"] == {"a": "2"} and check["diff"]["before"]["data"] == {"a": "1"}
        failed = [task for event, task, _ in results if event == "runner_on_failed"]
        assert failed == ["unknown kind"]


@shared_loop
async def test_a_run_collection_path_shadows_the_preloaded_collection(
    fast: WarmExecutor, tmp_path: Path
) -> None:
    """The zygote imported kubernetes.core; a run whose path has another one must use that one."""
    fake = 'from ansible.module_utils.basic import AnsibleModule\n' \
           'AnsibleModule(argument_spec={}, supports_check_mode=True).exit_json(fake=True)\n'
    collections = _collection(tmp_path / "collections", "kubernetes", "core", "k8s_cluster_info", fake)
    playbook = (
        "- hosts: localhost\n  gather_facts: false\n  tasks:\n    - kubernetes.core.k8s_cluster_info: {}\n"
    )
    events: list[dict[str, Any]] = []
    outcome = await fast.run(_request(tmp_path, playbook, collections_path=(collections,),
                                      envvars={"ANSIBLE_GATHERING": "explicit"}), events.append)
    assert outcome.status == "successful"
    assert [r[2].get("fake") for r in _results(events)] == [True]


@pytest.mark.parametrize("command, in_data, accepted", [
    ("/bin/sh -c '{py} /tmp/x/AnsiballZ_probe.py && sleep 0'", None, True),
    ("/bin/sh -c 'PROBE_ENV=a\\ b LANG=C.UTF-8 {py} /tmp/x/AnsiballZ_probe.py && sleep 0'", None, True),
    ("/bin/sh -c '{py} && sleep 0'", b"PIPELINED", True),
    ("/bin/sh -c '/usr/bin/python3.9 /tmp/x/AnsiballZ_probe.py && sleep 0'", None, False),
    ("/bin/sh -c 'sudo -H -S -n -u root /bin/sh -c \"{py} /tmp/x/AnsiballZ_probe.py\"'", None, False),
    ("/bin/sh -c '{py} /tmp/x/AnsiballZ_probe.py extra && sleep 0'", None, False),
    ("/bin/sh -c 'rm -f -r /tmp/x/ > /dev/null 2>&1 && sleep 0'", None, False),
])
def test_only_plain_module_commands_of_this_interpreter_take_the_fast_path(
        tmp_path: Path, command: str, in_data: bytes | None, accepted: bool) -> None:
    script = b"_ansiballz_main(\nmodule_fqn='ansible_collections.testns.fast.plugins.modules.probe',\n)\n"
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "AnsiballZ_probe.py").write_bytes(script)
    cmd = command.format(py=sys.executable).replace("/tmp/x/", f"{tmp_path}/x/")
    data = script if in_data else None
    plan = plan_for(cmd, data, ("testns.fast.",), "/bin/sh")
    assert (plan is not None) == accepted
    if plan is not None and "PROBE_ENV" in cmd:
        assert plan.env == {"PROBE_ENV": "a b", "LANG": "C.UTF-8"}


def test_modules_outside_the_prefixes_run_normally(tmp_path: Path) -> None:
    script = tmp_path / "AnsiballZ_command.py"
    script.write_bytes(b"module_fqn='ansible.modules.command',\n")
    cmd = f"/bin/sh -c '{sys.executable} {script} && sleep 0'"
    assert plan_for(cmd, None, ("kubernetes.core.",), "/bin/sh") is None
    assert plan_for(cmd, None, ("ansible.builtin.command",), "/bin/sh") is not None
    assert plan_for(cmd, None, (), "/bin/sh") is None


_TMP_NAME = "ansible-tmp-1795550510.365921-5908-271315830314762"


def _sh(inner: str) -> str:
    return "/bin/sh -c " + shlex.quote(inner + " && sleep 0")  # as _low_level_execute_command builds it


def _mkdtemp(base: Path) -> str:
    tmp = f"{base}/{_TMP_NAME}"
    return _sh(f'( umask 77 && mkdir -p "` echo {base} `"&& mkdir "` echo {tmp} `"'
               f' && echo {_TMP_NAME}="` echo {tmp} `" )')


def _shell(cmd: str) -> tuple[int, bytes, bytes]:
    done = subprocess.run(shlex.split(cmd), capture_output=True)
    return done.returncode, done.stdout, done.stderr


def _modes(root: Path) -> list[tuple[str, int]]:
    return sorted((str(p.relative_to(root)), stat.S_IMODE(p.stat().st_mode)) for p in root.rglob("*"))


def test_tmp_dir_helpers_answer_in_process_as_the_shell_does(tmp_path: Path) -> None:
    """The fast path's in-process `echo ~`, mkdtemp and `rm -f -r` (issue 14) against /bin/sh itself."""
    for home in ("~", "~root"):
        assert helper_result(_sh(f"echo {home}"), "/bin/sh") == _shell(_sh(f"echo {home}"))
    for side in ("shell", "fast"):
        (tmp_path / side).mkdir()
    outputs = {}
    for side in ("shell", "fast"):
        cmd = _mkdtemp(tmp_path / side / ".ansible" / "tmp")
        got = _shell(cmd) if side == "shell" else helper_result(cmd, "/bin/sh")
        assert got is not None
        outputs[side] = (got[0], got[1].replace(str(tmp_path / side).encode(), b"ROOT"), got[2])
    expected = (0, f"{_TMP_NAME}=ROOT/.ansible/tmp/{_TMP_NAME}\n".encode(), b"")
    assert outputs["fast"] == outputs["shell"] == expected
    assert _modes(tmp_path / "fast") == _modes(tmp_path / "shell")
    assert {mode for _, mode in _modes(tmp_path / "fast")} == {0o700}
    # the same directory again: mkdir fails; left to the shell, which reports it
    assert helper_result(_mkdtemp(tmp_path / "fast" / ".ansible" / "tmp"), "/bin/sh") is None
    for side in ("shell", "fast"):
        made = tmp_path / side / ".ansible" / "tmp" / _TMP_NAME
        (made / "AnsiballZ_x.py").write_text("x")
        cmd = _sh(f"rm -f -r {made}/ > /dev/null 2>&1")
        assert (_shell(cmd) if side == "shell" else helper_result(cmd, "/bin/sh")) == (0, b"", b"")
        assert not made.exists()
        again = _shell(cmd) if side == "shell" else helper_result(cmd, "/bin/sh")
        assert again == (0, b"", b"")  # already gone: still fine


@pytest.mark.parametrize("cmd", [
    _sh("echo $HOME"), _sh("echo ~ && id"), "echo ~", _sh("rm -f -r /etc/ > /dev/null 2>&1"),
    _sh("rm -f -r /tmp/ansible-tmp-1/ > /dev/null 2>&1; id > /dev/null 2>&1"),
    _sh('( umask 77 && mkdir -p "` echo /tmp/a b `"&& mkdir "` echo /tmp/a b/ansible-tmp-1 `"'
        ' && echo ansible-tmp-1="` echo /tmp/a b/ansible-tmp-1 `" )'),
    _sh('( umask 77 && mkdir -p "` echo $HOME `"&& mkdir "` echo $HOME/ansible-tmp-1 `"'
        ' && echo ansible-tmp-1="` echo $HOME/ansible-tmp-1 `" )'),
])
def test_other_commands_are_left_to_the_shell(cmd: str) -> None:
    assert helper_result(cmd, "/bin/sh") is None
    assert os.path.isdir("/etc")
