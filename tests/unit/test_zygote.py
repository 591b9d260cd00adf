"""The zygote's pieces that can be checked without forking: version pin, protocol framing, env re-apply."""

from __future__ import annotations

import json
import os
from importlib import metadata
from typing import Any

import pytest

from ansible_operator.executors import ansible_compat
from ansible_operator.executors.warm import child, executor, zygote
from ansible_operator.executors.warm.protocol import encode

pytestmark = pytest.mark.ansible_versions  # also run on the lowest ansible-core (dev.sh test-ansible-low)


def test_installed_ansible_core_is_one_whose_internals_the_zygote_knows() -> None:
    """If this fails, ansible-core moved outside the supported range: check warm/child.py and
    ansible_compat.py against the new internals (constants re-evaluation, collection finder attributes,
    awx_display's event_context, WorkerProcess, PlaybookCLI.cli_executor, the AnsiballZ wrapper) first."""
    import ansible.release

    assert ansible_compat.minor(metadata.version("ansible-core")) in ansible_compat.SUPPORTED_MINORS
    assert ansible.release.__version__ == metadata.version("ansible-core")


@pytest.mark.parametrize("version, ok", [("2.15.13", False), ("2.16.0", True), ("2.17.14", True),
                                         ("2.18.19", True), ("2.19.14", True), ("2.20.0", True),
                                         ("2.21.5", True), ("2.22.0", False), ("devel", False)])
def test_supported_range(version: str, ok: bool) -> None:
    if ok:
        ansible_compat.check(version)
    else:
        with pytest.raises(RuntimeError, match=rf"{version}.*--executor runner"):
            ansible_compat.check(version)


def test_operator_side_refuses_another_ansible_core(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(metadata, "version", lambda name: "2.99.0")  # the module executor.py reads
    with pytest.raises(RuntimeError, match=r"2\.16 - 2\.21.*2\.99\.0.*--executor runner"):
        executor.check_ansible_core_version()


def test_zygote_refuses_another_ansible_core(monkeypatch: pytest.MonkeyPatch) -> None:
    import ansible.release

    monkeypatch.setattr(ansible.release, "__version__", "2.15.0")
    with pytest.raises(RuntimeError, match=r"2\.15\.0.*--executor runner"):
        zygote.preload()


@pytest.mark.parametrize("wrapper", [
    # 2.19's wrapper: the arguments of _ansiballz_main(), one per line
    b"    _ansiballz_main(\nansible_module='k8s',\n"
    b"module_fqn='ansible_collections.kubernetes.core.plugins.modules.k8s',\n",
    # 2.16 - 2.18's wrapper
    b"        runpy.run_module(mod_name='ansible_collections.kubernetes.core.plugins.modules.k8s', "
    b"init_globals=dict(_module_fqn='ansible_collections.kubernetes.core.plugins.modules.k8s'),\n",
])
def test_the_module_an_ansiballz_wrapper_runs_is_found_in_every_wrapper_shape(wrapper: bytes) -> None:
    assert ansible_compat.ansiballz_module_fqn(b"import sys\n" + wrapper) == \
        "ansible_collections.kubernetes.core.plugins.modules.k8s"
    assert ansible_compat.ansiballz_module_fqn(b"print('no module here')\n") is None


def test_installed_version_gets_the_internals_it_has() -> None:
    import ansible.release

    new = ansible_compat.minor(ansible.release.__version__) >= (2, 19)  # type: ignore[operator]
    assert ansible_compat.data_tagging() is new
    assert ansible_compat.payload_store_supported() is new
    assert (ansible_compat.worker_setsid_hook() is not None) is new
    from ansible import constants as C

    paths = ansible_compat.collection_finder_paths(list(C.COLLECTIONS_PATHS))
    assert paths[len(paths) - len(C.COLLECTIONS_PATHS):] == list(C.COLLECTIONS_PATHS)


def _zygote_with_pipe() -> tuple[zygote.Zygote, int]:
    read_fd, write_fd = os.pipe()
    return zygote.Zygote(write_fd), read_fd


def _messages(read_fd: int) -> list[dict[str, Any]]:
    os.set_blocking(read_fd, False)
    data = b""
    while True:
        try:
            chunk = os.read(read_fd, 65536)
        except BlockingIOError:
            break
        if not chunk:
            break
        data += chunk
    return [json.loads(line) for line in data.splitlines()]


def test_child_lines_are_rewrapped_in_order_and_partial_lines_wait() -> None:
    z, read_fd = _zygote_with_pipe()
    child = zygote._Child(run_id='a"b', pid=1, event_fd=-1)
    event = {"event": "runner_on_ok", "stdout": "line1\r\nline2", "counter": 1}
    child.buffer += b"E" + json.dumps(event).encode() + b"\n"
    child.buffer += b'R{"status": "successful", "rc": 0}\n'
    child.buffer += b'E{"event": "incompl'
    z._forward_lines(child)
    assert _messages(read_fd) == [
        {"op": "event", "id": 'a"b', "event": event},
        {"op": "result", "id": 'a"b', "status": "successful", "rc": 0},
    ]
    assert child.finished
    assert bytes(child.buffer) == b'E{"event": "incompl'
    child.buffer += b'ete"}\nX{"error": "boom"}\n'
    z._forward_lines(child)
    assert _messages(read_fd) == [{"op": "event", "id": 'a"b', "event": {"event": "incomplete"}},
                                  {"op": "error", "id": 'a"b', "error": "boom"}]


def test_protocol_lines_are_single_ascii_lines() -> None:
    line = encode({"op": "run", "id": "x", "spec": {"text": "a\nb ünï"}})
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert json.loads(line)["spec"]["text"] == "a\nb ünï"


def test_run_environment_reevaluates_only_the_affected_constants(monkeypatch: pytest.MonkeyPatch) -> None:
    from ansible import constants as C

    for name in ("ANSIBLE_HASH_BEHAVIOUR", "ANSIBLE_ROLES_PATH"):
        # set, then delete: monkeypatch then restores the original state of what _apply_environment writes
        # (a bare delenv of an unset variable records nothing, and "merge" leaked into later warm runs)
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    monkeypatch.setattr(C, "DEFAULT_HASH_BEHAVIOUR", C.DEFAULT_HASH_BEHAVIOUR)
    monkeypatch.setattr(C, "DEFAULT_ROLES_PATH", C.DEFAULT_ROLES_PATH)
    untouched = C.DEFAULT_FORKS
    child._apply_environment({"ANSIBLE_HASH_BEHAVIOUR": "merge", "ANSIBLE_ROLES_PATH": "/r1:/r2"})
    assert C.DEFAULT_HASH_BEHAVIOUR == "merge"
    assert C.DEFAULT_ROLES_PATH == ["/r1", "/r2"]
    assert C.DEFAULT_FORKS == untouched


def test_playbook_arguments_carry_verbosity_inventory_and_extra_vars_file() -> None:
    spec: Any = {"inventory": "/pdd/inventory/hosts", "extravars_file": "/pdd/env/extravars",
                 "verbosity": 3, "playbook": "/pdd/project/main.yml"}
    args = child._playbook_args(spec)
    assert args[0].endswith("ansible-playbook")
    assert args[1:] == ["-i", "/pdd/inventory/hosts", "-e", "@/pdd/env/extravars", "-vvv",
                        "/pdd/project/main.yml"]
    quiet: Any = {**spec, "verbosity": 0}
    assert "-v" not in " ".join(child._playbook_args(quiet))
