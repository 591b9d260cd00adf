"""Pieces of ``ansible-operator run`` behind SDK flags: the API reachability behind /readyz
(``--api-unreachable-timeout``) and ``--ansible-log-events``."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from ansible_operator import manager
from ansible_operator.logs import TextFormatter, ansible_event_logger
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


async def test_an_outage_is_logged_once_each_way_and_its_end_restarts_the_watches(caplog: Any) -> None:
    kube = FakeKube()
    restarts: list[int] = []

    def recovered() -> int:
        restarts.append(1)
        return 3

    api = ApiReachability(kube, 0, on_recovered=recovered)
    api.period = 0.01
    task = asyncio.create_task(api.watch())
    try:
        with caplog.at_level(logging.WARNING, logger="ansible_operator.manager"):
            await kube.answered.wait()
            kube.up = False
            calls = kube.calls
            while kube.calls < calls + 5:  # several failed probes: one line
                await asyncio.sleep(0.01)
            assert restarts == []
            kube.up = True
            while not restarts:
                await asyncio.sleep(0.01)
            calls = kube.calls
            while kube.calls < calls + 3:  # answering again, and again: no more lines, no more restarts
                await asyncio.sleep(0.01)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2, lines
    assert lines[0].startswith("API server not answering: connection refused")
    assert lines[1].startswith("API server answers again after")
    assert "restarting 3 watch request(s)" in lines[1]
    assert restarts == [1]


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
    assert record.getMessage() == "Ansible Debug Result"
    assert record.__dict__["ansible_output"].splitlines() == [
        "out of playbook_on_play_start",
        "out of playbook_on_task_start",
        "out of runner_on_ok",
        "out of playbook_on_stats",
    ]
    # the text log keeps the lines, indented so none passes for a record of its own
    text = TextFormatter().format(record).splitlines()
    assert text[0].endswith("Ansible Debug Result") and text[1:] == [
        "    out of playbook_on_play_start", "    out of playbook_on_task_start", "    out of runner_on_ok",
        "    out of playbook_on_stats"]


def test_ansible_debug_logs_output_of_a_run_without_stats_is_logged_at_its_end(
        caplog: pytest.LogCaptureFixture) -> None:
    """A playbook that fails to parse ends without a stats event: its output (the error) is still logged,
    when reconcile flushes the run's logger; colour codes are dropped."""
    factory = _event_loggers("Tasks", ansible_event_logger, debug_logs=True)
    caplog.set_level(logging.INFO, logger="ansible_operator.ansible")
    on_event = factory(1)
    on_event({"event": "verbose", "stdout": "\x1b[0;31mERROR! couldn't resolve module/action 'x'\x1b[0m"})
    assert not caplog.records
    on_event.flush()
    (record,) = caplog.records
    assert record.__dict__["ansible_output"] == "ERROR! couldn't resolve module/action 'x'"
    on_event.flush()
    assert len(caplog.records) == 1


async def test_a_second_signal_stops_the_runs_in_flight_of_a_graceful_shutdown() -> None:
    """The first SIGTERM/SIGINT asks for a graceful shutdown (runs in flight may finish within
    --graceful-shutdown-timeout) and stops warm zygote restarts; a second one stops the runs at once and
    _drain says so (the operator then exits 1, as controller-runtime on a second signal)."""
    import signal

    from ansible_operator.manager import Controller, _drain, _Shutdown
    from ansible_operator.queue import ObjectKey, ReconcileOutcome, WorkQueue

    started, cancelled = asyncio.Event(), asyncio.Event()

    async def reconcile(key: ObjectKey) -> ReconcileOutcome:
        started.set()
        try:
            await asyncio.Event().wait()  # a run that would outlast any timeout
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return ReconcileOutcome()

    queue = WorkQueue("w", reconcile, max_concurrent=1)
    await queue.start()
    queue.add(ObjectKey("ns", "slow"))
    await asyncio.wait_for(started.wait(), 10)

    shutdown = _Shutdown()
    stopped_restarting: list[bool] = []
    shutdown.on_stop.append(lambda: stopped_restarting.append(True))
    shutdown._on_signal(signal.SIGTERM)
    assert shutdown.stop.is_set() and not shutdown.force.is_set() and stopped_restarting == [True]
    controller = Controller(None, None, queue, None)  # type: ignore[arg-type]  # only the queue is used
    drain = asyncio.create_task(_drain([controller], timeout=3600, force=shutdown.force))
    await asyncio.sleep(0)
    assert not drain.done() and not cancelled.is_set()  # still waiting for the run
    shutdown._on_signal(signal.SIGTERM)
    assert shutdown.force.is_set()
    assert await asyncio.wait_for(drain, 10) is False
    assert cancelled.is_set() and queue.in_flight == 0
    shutdown.request()  # later requests (lost lease, end of the drain) run the hooks only once
    assert stopped_restarting == [True]


async def test_drain_lets_the_runs_finish() -> None:
    from ansible_operator.manager import Controller, _drain
    from ansible_operator.queue import ObjectKey, ReconcileOutcome, WorkQueue

    started, gate, finished = asyncio.Event(), asyncio.Event(), asyncio.Event()

    async def reconcile(key: ObjectKey) -> ReconcileOutcome:
        started.set()
        await gate.wait()
        finished.set()
        return ReconcileOutcome()

    queue = WorkQueue("w", reconcile, max_concurrent=1)
    await queue.start()
    queue.add(ObjectKey("ns", "a"))
    await asyncio.wait_for(started.wait(), 10)
    drain = asyncio.create_task(_drain([Controller(None, None, queue, None)], timeout=3600,  # type: ignore[arg-type]
                                       force=asyncio.Event()))
    await asyncio.sleep(0)
    assert not drain.done()
    gate.set()
    assert await asyncio.wait_for(drain, 10) is True
    assert finished.is_set()


def test_kopfs_stream_left_open_at_exit_is_not_reported_as_an_error(caplog: Any) -> None:
    """asyncio.run closes open generators concurrently at exit; kopf's watch stream then fails to close its
    inner context manager (RuntimeError). Only that one is quiet: any other goes to asyncio's handler."""
    from kopf._cogs.clients import watching

    loop = asyncio.new_event_loop()
    try:
        stream = watching.infinite_watch(settings=None, resource=None, namespace=None)  # type: ignore[arg-type]

        async def other() -> Any:
            yield 1

        foreign = other()
        exc = RuntimeError("generator didn't stop after athrow()")
        with caplog.at_level(logging.DEBUG):
            manager._quiet_stream_close(loop, {"message": "an error occurred during closing of asynchronous"
                                               " generator", "exception": exc, "asyncgen": stream})
            assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
            manager._quiet_stream_close(loop, {"message": "an error occurred during closing of asynchronous"
                                               " generator", "exception": exc, "asyncgen": foreign})
            errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
            assert len(errors) == 1 and errors[0].name == "asyncio"
    finally:
        loop.close()


async def test_a_watched_kind_without_crd_fails_readiness_until_it_is_served(caplog: Any) -> None:
    from ansible_operator.kube import NotFound, ResourceRef
    from ansible_operator.manager import ServedKinds
    from ansible_operator.watches import Watch

    class Discovery:
        served = False

        async def discover(self, group: str, version: str, kind: str) -> ResourceRef:
            if not self.served:
                raise NotFound(404, "NotFound", f"kind {kind} not served")
            return ResourceRef(group, version, "ghosts", True)

    kube = Discovery()
    watch = Watch(group="x.example.com", version="v1", kind="Ghost", role="/tmp/r", playbook=None, vars={},
                  finalizer=None, reconcile_period=None)
    served = ServedKinds(kube, [watch], period=0.01)
    with caplog.at_level(logging.INFO, logger="ansible_operator"):
        task = asyncio.create_task(served.watch())
        try:
            while not caplog.records:
                await asyncio.sleep(0.01)
            ok, why = served.check()  # type: ignore[misc]
            assert ok is False and "Ghost.x.example.com" in why and "CRD" in why
            kube.served = True
            await asyncio.wait_for(task, 5)
        finally:
            task.cancel()
    assert served.check() is True
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2 and "not served" in lines[0] and "served now" in lines[1], lines
