"""Fast modules in the task's own process (warm.inline_modules): what a fork isolated stays isolated.

Every test runs the same playbook with the module in the run child (``modules_in_process=True``, the
default), in a fork of it, and (the reference) in a fresh interpreter as Ansible runs it, and expects the
same observations, except for the process the module ran in.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, AsyncIterator

import pytest
import pytest_asyncio
from executor_helpers import SharedExecutors, shared_executors, write

from ansible_operator.executors import ansible_compat
from ansible_operator.executors.base import RunRequest
from ansible_operator.executors.datadir import new_run_id
from ansible_operator.executors.warm.executor import WarmExecutor

pytestmark = pytest.mark.ansible_versions  # also run on the lowest ansible-core (dev.sh test-ansible-low)

STATE_MODULE = '''
import atexit
import os
import sys
import time

from ansible.module_utils.basic import AnsibleModule


def main():
    module = AnsibleModule(argument_spec=dict(mark=dict(type="str"), sleep=dict(type="float", default=0),
                                              exit_code=dict(type="int"), marker=dict(type="str")))
    seen = dict(pid=os.getpid(), leaked_env=os.environ.get("INLINE_LEAK"),
                task_env=os.environ.get("TASK_ENV"), leaked_path="/inline-leak" in sys.path,
                cwd=os.getcwd(), modlib=globals().get("_modlib_path"))
    if module.params["exit_code"] is not None:
        print("plain words, no JSON")
        sys.stderr.write("and a complaint\\n")
        sys.exit(module.params["exit_code"])
    if module.params["sleep"]:
        time.sleep(module.params["sleep"])
    os.environ["INLINE_LEAK"] = "yes"
    sys.path.append("/inline-leak")
    os.chdir("/")
    tmpdir = module.tmpdir  # AnsibleModule registers its removal with atexit
    marker = module.params["marker"]
    if marker:
        atexit.register(lambda: open(marker, "w").write("ran"))
    module.warn("warning from %s" % module.params["mark"])
    module.exit_json(changed=False, tmpdir=tmpdir, **seen)


if __name__ == "__main__":
    main()
'''

PLAYBOOK = """
- hosts: localhost
  gather_facts: false
  tasks:
    - name: first
      testns.inline.state: {mark: first, marker: "{{ marker }}"}
      environment: {TASK_ENV: first}
    - name: sleeps past its timeout
      testns.inline.state: {mark: slow, sleep: 30}
      environment: {TASK_ENV: slow}
      timeout: 2
      ignore_errors: true
    - name: exits without a result
      testns.inline.state: {exit_code: 3}
      ignore_errors: true
    - name: second
      testns.inline.state: {mark: second}
"""


def _marker(tmp_path: Path, tag: str) -> Path:
    """The file the first module's own exit handler writes."""
    return tmp_path / f"atexit-{tag.replace(' ', '-')}"


def _request(tmp_path: Path, tag: str) -> RunRequest:
    collections = tmp_path / "collections"
    write(collections / "ansible_collections" / "testns" / "inline" / "plugins" / "modules" / "state.py",
          STATE_MODULE)
    rid = new_run_id()
    pb = write(tmp_path / f"{rid}.yml", PLAYBOOK)
    return RunRequest(run_id=rid, private_data_dir=tmp_path / "runs" / rid, playbook=pb,
                      extra_vars={"marker": str(_marker(tmp_path, tag))}, collections_path=(collections,),
                      envvars={"ANSIBLE_GATHERING": "explicit"})


MODES: dict[str, dict[str, Any]] = {
    "inline": {"modules_in_process": True},
    "forked": {"modules_in_process": False},
    "fresh interpreter": {"fast_modules": ()},
}


# One zygote per mode and xdist worker, not one per test (a zygote's start-up costs ~1.5 CPU s): what a module
# changes stays in the run child (or its fork), never in the zygote. The async tests run in the module's loop.
shared_loop = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def executors() -> AsyncIterator[SharedExecutors]:
    async with shared_executors() as pool:
        yield pool


async def _observe(executors: SharedExecutors, tmp_path: Path, tag: str) -> dict[str, Any]:
    events: list[dict[str, Any]] = []
    options: dict[str, Any] = {"fast_modules": ("testns.inline.",), **MODES[tag]}
    ex = await executors.get(WarmExecutor, max_workers=1, **options)
    outcome = await ex.run(_request(tmp_path, tag), events.append)
    assert outcome.status == "successful", [e.get("stdout") for e in events][-5:]
    results = {e["event_data"]["task"]: {**e["event_data"]["res"], "event": e["event"]} for e in events
               if e["event"] in ("runner_on_ok", "runner_on_failed")}
    shown = "".join(e.get("stdout", "") for e in events)
    return {"results": results, "atexit": _marker(tmp_path, tag).read_text(),
            "warnings": re.findall(r"warning from \w+", shown)}


@shared_loop
@pytest.mark.parametrize("mode", list(MODES))
async def test_module_state_does_not_outlive_the_module(mode: str, executors: SharedExecutors,
                                                         tmp_path: Path) -> None:
    seen = await _observe(executors, tmp_path, mode)
    first, second = seen["results"]["first"], seen["results"]["second"]
    # what the first module changed in its process is gone for the next one
    assert (second["leaked_env"], second["leaked_path"], second["task_env"]) == (None, False, None)
    assert second["cwd"] == first["cwd"] != "/"
    assert first["task_env"] == "first"
    # its exit handlers ran when it returned: its own and AnsibleModule's removal of its tmpdir
    assert seen["atexit"] == "ran"
    assert not Path(first["tmpdir"]).exists()
    # warnings are each module's own: each shown once, after its own task
    assert seen["warnings"] == ["warning from first", "warning from second"]
    # the process the module ran in: the run child itself, or a new fork per module
    assert (first["pid"] == second["pid"]) is (mode == "inline")
    # in-process on 2.19+: the wrapper's last step without its zip; otherwise the AnsiballZ script itself
    if mode == "inline" and ansible_compat.data_tagging():
        assert first["modlib"] == ansible_compat.NO_PAYLOAD_ZIP
    else:
        assert first["modlib"].endswith("_payload.zip")


@shared_loop
async def test_exits_and_timeouts_read_the_same_both_ways(executors: SharedExecutors, tmp_path: Path) -> None:
    both = [await _observe(executors, tmp_path / tag, tag) for tag in ("inline", "forked")]
    slow = [seen["results"]["sleeps past its timeout"] for seen in both]
    assert [s["event"] for s in slow] == ["runner_on_failed"] * 2
    assert slow[0]["msg"] == slow[1]["msg"] and re.search(r"(?i)timed out|time frame", slow[0]["msg"]), slow
    exits = [seen["results"]["exits without a result"] for seen in both]
    keys = ("event", "rc", "module_stdout", "module_stderr", "msg")
    assert [{k: e.get(k) for k in keys} for e in exits][0] == [{k: e.get(k) for k in keys} for e in exits][1]
    assert exits[0]["event"] == "runner_on_failed" and exits[0]["rc"] == 3
    assert "plain words, no JSON" in exits[0]["module_stdout"] and "a complaint" in exits[0]["module_stderr"]
    # and the run went on in the same state: the module after them saw nothing of theirs
    assert [seen["results"]["second"]["task_env"] for seen in both] == [None, None]


def _wrapper(**overrides: Any) -> bytes:
    """A script of the shape 2.19+'s module_common writes: the wrapper code, then one call, a line per
    argument (``key=repr(value),``)."""
    import datetime

    args: dict[str, Any] = dict(ansible_module="testns.inline.state",
                                module_fqn="ansible_collections.testns.inline.plugins.modules.state",
                                profile="legacy", date_time=datetime.datetime(2026, 1, 1),
                                rlimit_nofile=0, params='{"ANSIBLE_MODULE_ARGS": {"a": "x=1,\\n"}}',
                                extensions={}, zip_data="UEsDBA" * 1000)
    args.update(overrides)
    lines = "\n".join(f"{key}={value!r}," for key, value in args.items() if value is not None)
    code = "def _ansiballz_main(**kw):\n    pass\n"
    return f'{code}\n\nif __name__ == "__main__":\n    _ansiballz_main(\n{lines}\n)\n'.encode()


def test_the_direct_call_reads_only_the_exact_wrapper_shape() -> None:
    call = ansible_compat.ansiballz_direct_call(_wrapper())
    if not ansible_compat.data_tagging():  # 2.16 - 2.18 always run the script
        assert call is None
        return
    assert call is not None
    assert call["module_fqn"] == "ansible_collections.testns.inline.plugins.modules.state"
    assert call["profile"] == "legacy"
    assert call["params"] == '{"ANSIBLE_MODULE_ARGS": {"a": "x=1,\\n"}}'
    # anything the wrapper itself would have to do, or any other shape: the script runs instead
    for refused in (_wrapper(extensions={"debugpy": {}}), _wrapper(rlimit_nofile=1024),
                    _wrapper(profile=None), _wrapper(surprise=1), _wrapper()[:-2],
                    _wrapper().replace(b"profile='legacy',", b"profile=legacy,")):
        assert ansible_compat.ansiballz_direct_call(refused) is None
