"""Pieces of ``ansible-operator run`` behind SDK flags: the API reachability behind /readyz
(``--api-unreachable-timeout``) and ``--ansible-log-events``."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from ansible_operator.logs import ansible_event_logger
from ansible_operator.manager import ApiReachability, _event_loggers


class FakeKube:
    def __init__(self) -> None:
        self.up = True
        self.calls = 0
        self.answered = asyncio.Event()

    async def request(self, method: str, path: str, **_: Any) -> Any:
        assert (method, path) == ("GET", "/version")
        self.calls += 1
        self.answered.set()
        if not self.up:
            raise ConnectionRefusedError("connection refused")
        return {"major": "1"}


async def test_readiness_follows_the_last_answer_from_the_api_server() -> None:
    now = [100.0]
    kube = FakeKube()
    api = ApiReachability(kube, 30, clock=lambda: now[0])
    api.period = 0.01
    task = asyncio.create_task(api.watch())
    try:
        await kube.answered.wait()
        assert api.check() is True
        kube.up = False
        calls = kube.calls
        while kube.calls < calls + 2:  # a failed probe has been seen
            await asyncio.sleep(0.01)
        now[0] += 29
        assert api.check() is True  # not yet: the API server may just be restarting
        now[0] += 2
        ok, why = api.check()  # type: ignore[misc]
        assert ok is False and "unreachable for 31s" in why and "connection refused" in why
        kube.up = True
        while api.check() is not True:
            await asyncio.sleep(0.01)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert ApiReachability(kube, 0).check() is True  # 0 turns the check off


EVENTS = [
    {"event": "playbook_on_play_start", "event_data": {"play": "reconcile"}},
    {"event": "playbook_on_task_start", "event_data": {"task": "make it"}},
    {
        "event": "runner_on_ok",
        "event_data": {"task": "make it", "host": "localhost", "res": {"changed": True}},
    },
]


@pytest.mark.parametrize(
    ("mode", "lines"),
    [
        ("Nothing", []),
        ("Tasks", ["TASK [make it] changed: localhost"]),
        (
            "Everything",
            [
                "playbook_on_play_start [reconcile]",
                "playbook_on_task_start [make it]",
                "TASK [make it] changed: localhost",
            ],
        ),
    ],
)
def test_ansible_log_events(mode: str, lines: list[str], caplog: pytest.LogCaptureFixture) -> None:
    factory = _event_loggers(mode, ansible_event_logger)
    caplog.set_level(logging.INFO, logger="ansible_operator.ansible")
    if factory is not None:
        on_event = factory(1)
        for event in EVENTS:
            on_event(event)
    assert [r.getMessage() for r in caplog.records] == lines


def test_ansible_debug_logs_adds_the_whole_output_per_run(caplog: pytest.LogCaptureFixture) -> None:
    """$ANSIBLE_DEBUG_LOGS (the SDK's): each run's ansible-playbook output in one record at its end."""
    factory = _event_loggers("Nothing", ansible_event_logger, debug_logs=True)
    caplog.set_level(logging.INFO, logger="ansible_operator.ansible")
    on_event = factory(1)
    for event in [*EVENTS, {"event": "playbook_on_stats", "event_data": {}}]:
        on_event({**event, "stdout": f"out of {event['event']}"})
    (record,) = caplog.records
    assert record.getMessage().splitlines() == [
        "Ansible Debug Result",
        "out of playbook_on_play_start",
        "out of playbook_on_task_start",
        "out of runner_on_ok",
        "out of playbook_on_stats",
    ]
