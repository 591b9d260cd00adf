"""The run child's event sink: ansible-runner's job_events layout, with partial data handed over in memory.

No zygote: the sink is fed what ansible-runner's ``OutputEventFilter`` passes it, and what awx_display's
partial-event writer stores (``InProcessPartials`` or ansible-runner's own ``IsolatedFileWrite``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from ansible_runner.display_callback.callback import awx_display

from ansible_operator.executors.warm.child import EventSink, InProcessPartials
from ansible_operator.executors.warm.protocol import CHILD_TAG_EVENT

pytestmark = pytest.mark.ansible_versions  # also run on the lowest ansible-core (dev.sh test-ansible-low)

PARTIAL = {"event": "runner_on_ok", "event_data": {"task": "t", "res": {"changed": True, "n": 1}},
           "created": "2026-11-24T00:00:00+00:00"}


def _sink(tmp_path: Path) -> tuple[EventSink, int, Path]:
    events_dir = tmp_path / "job_events"
    events_dir.mkdir()
    read_fd, write_fd = os.pipe()
    return EventSink(write_fd, "run-1", str(tmp_path)), read_fd, events_dir


def _pushed(read_fd: int) -> bytes:
    data = os.read(read_fd, 1 << 20)
    assert data.startswith(CHILD_TAG_EVENT) and data.endswith(b"\n")
    return data[1:-1]


def _partial_file_writer(tmp_path: Path) -> Any:
    writer = awx_display.IsolatedFileWrite()
    writer.private_data_dir = str(tmp_path)
    return writer


@pytest.mark.parametrize("in_memory", [True, False])
def test_the_sink_writes_the_same_event_file_and_pushes_the_same_bytes(tmp_path: Path,
                                                                      in_memory: bool) -> None:
    sink, read_fd, events_dir = _sink(tmp_path)
    if in_memory:
        sink.partials = {}
        writer: Any = InProcessPartials(awx_display.AnsibleJSONEncoderLocal, sink.partials)
    else:
        writer = _partial_file_writer(tmp_path)
    writer.set(":1:ev-u1", PARTIAL)
    sink({"uuid": "u1", "counter": 3, "stdout": "ok: [localhost]", "start_line": 0, "end_line": 1})

    written = (events_dir / "3-u1.json").read_text()
    event = json.loads(written)
    assert event == {"uuid": "u1", "counter": 3, "stdout": "ok: [localhost]", "start_line": 0, "end_line": 1,
                     "runner_ident": "run-1", **PARTIAL}
    assert _pushed(read_fd) == written.encode()  # one encoding, for the file and the pipe
    assert sorted(p.name for p in events_dir.iterdir()) == ["3-u1.json"]  # no partial file left
    assert sink.partials in (None, {})


def test_an_event_without_partial_data_gets_a_creation_time(tmp_path: Path) -> None:
    sink, read_fd, events_dir = _sink(tmp_path)
    sink.partials = {}
    sink({"uuid": "u2", "counter": 1, "stdout": "verbose line", "start_line": 0, "end_line": 1})
    event = json.loads((events_dir / "1-u2.json").read_text())
    assert event["runner_ident"] == "run-1" and event["created"]
    assert json.loads(_pushed(read_fd)) == event


def test_a_partial_file_is_still_read_when_the_data_is_not_in_memory(tmp_path: Path) -> None:
    """A writer the fast path did not install (another process's awx_display) leaves files: read them."""
    sink, read_fd, events_dir = _sink(tmp_path)
    sink.partials = {}
    _partial_file_writer(tmp_path).set(":1:ev-u3", PARTIAL)
    sink({"uuid": "u3", "counter": 2, "stdout": "", "start_line": 1, "end_line": 1})
    assert json.loads((events_dir / "2-u3.json").read_text())["event"] == "runner_on_ok"
    assert sorted(p.name for p in events_dir.iterdir()) == ["2-u3.json"]
    _pushed(read_fd)
