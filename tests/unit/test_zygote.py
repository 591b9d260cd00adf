"""The zygote's pieces that can be checked without forking: version pin, protocol framing, env re-apply."""

from __future__ import annotations

import json
import os
from importlib import metadata
from typing import Any

import pytest

from ansible_operator.executors import warm, zygote, zygote_child
from ansible_operator.executors.zygote_protocol import PINNED_ANSIBLE_CORE, encode


def test_installed_ansible_core_is_the_one_whose_internals_the_zygote_resets() -> None:
    """If this fails, ansible-core was upgraded: re-check zygote_child.py against the new internals
    (constants re-evaluation, collection finder attributes, awx_display's event_context, WorkerProcess
    ._detach, PlaybookCLI.cli_executor) before moving PINNED_ANSIBLE_CORE."""
    assert metadata.version("ansible-core") == PINNED_ANSIBLE_CORE
    import ansible.release

    assert ansible.release.__version__ == PINNED_ANSIBLE_CORE


def test_operator_side_refuses_another_ansible_core(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(warm.metadata, "version", lambda name: "2.99.0")
    with pytest.raises(RuntimeError, match=r"2\.99\.0.*--executor runner"):
        warm.check_ansible_core_version()


def test_zygote_refuses_another_ansible_core(monkeypatch: pytest.MonkeyPatch) -> None:
    import ansible.release

    monkeypatch.setattr(ansible.release, "__version__", "2.18.0")
    with pytest.raises(RuntimeError, match=r"2\.18\.0.*--executor runner"):
        zygote.preload()


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

    monkeypatch.delenv("ANSIBLE_HASH_BEHAVIOUR", raising=False)
    monkeypatch.delenv("ANSIBLE_ROLES_PATH", raising=False)
    monkeypatch.setattr(C, "DEFAULT_HASH_BEHAVIOUR", C.DEFAULT_HASH_BEHAVIOUR)
    monkeypatch.setattr(C, "DEFAULT_ROLES_PATH", C.DEFAULT_ROLES_PATH)
    untouched = C.DEFAULT_FORKS
    zygote_child._apply_environment({"ANSIBLE_HASH_BEHAVIOUR": "merge", "ANSIBLE_ROLES_PATH": "/r1:/r2"})
    assert C.DEFAULT_HASH_BEHAVIOUR == "merge"
    assert C.DEFAULT_ROLES_PATH == ["/r1", "/r2"]
    assert C.DEFAULT_FORKS == untouched


def test_playbook_arguments_carry_verbosity_inventory_and_extra_vars_file() -> None:
    spec: Any = {"inventory": "/pdd/inventory/hosts", "extravars_file": "/pdd/env/extravars",
                 "verbosity": 3, "playbook": "/pdd/project/main.yml"}
    args = zygote_child._playbook_args(spec)
    assert args[0].endswith("ansible-playbook")
    assert args[1:] == ["-i", "/pdd/inventory/hosts", "-e", "@/pdd/env/extravars", "-vvv",
                        "/pdd/project/main.yml"]
    assert "-v" not in " ".join(zygote_child._playbook_args({**spec, "verbosity": 0}))
