"""The run child's wake-up driven result wait (issue 14): Ansible's strategy, real, with the hook in place.

``child._wait_on_results`` patches ``ansible.plugins.strategy`` of the process it runs in; here
``monkeypatch`` restores both patched attributes after each test, so other tests see Ansible unchanged.
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Any

import pytest

from ansible_operator.executors.warm import child, executor

pytestmark = pytest.mark.ansible_versions  # also run on the lowest ansible-core (dev.sh test-ansible-low)

_GUARD = 60.0  # a broken wake-up shows as a hang; fail instead of waiting for the hour-long cap


class _FakeTQM:
    """What ``StrategyBase.__init__`` reads from its TaskQueueManager."""

    _terminated = False

    def __init__(self) -> None:
        self._workers: list[Any] = []
        self._final_q: queue.Queue[Any] = queue.Queue()

    def get_inventory(self) -> None:
        return None

    def get_variable_manager(self) -> None:
        return None

    def get_loader(self) -> None:
        return None

    def has_dead_workers(self) -> bool:
        return False


@pytest.fixture
def strategy_module(monkeypatch: pytest.MonkeyPatch) -> Any:
    import ansible.plugins.strategy as module

    monkeypatch.setattr(module.StrategyBase, "__init__", module.StrategyBase.__init__)
    monkeypatch.setattr(module, "time", module.time)
    # An hour: if a result did not wake the loop, the test would hang (and fail at _GUARD), not pass late.
    monkeypatch.setattr(child, "RESULT_WAIT_CAP", 3600.0)
    assert child._wait_on_results()
    return module


@pytest.fixture
def strategy(strategy_module: Any) -> Any:
    tqm = _FakeTQM()
    instance = strategy_module.StrategyBase(tqm)  # real __init__: starts Ansible's results thread
    yield instance
    tqm._final_q.put(strategy_module.StrategySentinel())
    instance._results_thread.join(_GUARD)


def test_the_result_loop_sleeps_until_a_result_arrives(strategy: Any) -> None:
    assert strategy._wake_on_results
    passes: list[int] = []
    polled = threading.Event()

    def process_pending_results(iterator: Any, max_passes: Any = None) -> list[Any]:
        with strategy._results_lock:
            got = list(strategy._results)
            strategy._results.clear()
        passes.append(len(got))
        strategy._pending_results -= len(got)
        polled.set()
        return got

    strategy._process_pending_results = process_pending_results
    strategy._pending_results = 1

    def worker() -> None:  # as Ansible's results thread delivers a task result
        polled.wait(_GUARD)
        with strategy._results_lock:
            strategy._results.append("result")

    threading.Thread(target=worker, daemon=True).start()
    returned: list[Any] = []
    waiter = threading.Thread(target=lambda: returned.extend(strategy._wait_on_pending_results(None)),
                              daemon=True)
    waiter.start()
    waiter.join(_GUARD)
    assert not waiter.is_alive(), "the result did not wake the strategy's wait"
    assert returned == ["result"]
    # one pass found nothing, the next one (woken by the append) the result: no polling in between
    assert passes == [0, 1]


def test_other_sleeps_in_the_strategy_module_are_real_sleeps(strategy_module: Any,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    slept: list[float] = []
    monkeypatch.setattr(time, "sleep", slept.append)  # the module warm.child's stand-in delegates to

    def _queue_task() -> None:  # the strategy waiting for a free worker slot
        strategy_module.time.sleep(0.0001)

    _queue_task()
    assert slept == [0.0001]
    assert strategy_module.time.monotonic is time.monotonic


@pytest.mark.parametrize("value, on", [(None, True), ("", True), ("1", True), ("true", True),
                                       ("false", False), ("0", False), ("No", False), ("off", False)])
def test_fast_path_switch(monkeypatch: pytest.MonkeyPatch, value: str | None, on: bool) -> None:
    if value is None:
        monkeypatch.delenv(executor.FAST_PATH_ENV, raising=False)
    else:
        monkeypatch.setenv(executor.FAST_PATH_ENV, value)
    assert executor.WarmExecutor().fast_path is on
    assert executor.WarmExecutor(fast_path=not on).fast_path is (not on)


@pytest.mark.parametrize("fast_path, value, on", [
    (True, None, True), (True, "false", False), (True, "1", True), (False, None, False), (False, "1", False)])
@pytest.mark.parametrize("env, attribute", [(executor.TASKS_IN_PROCESS_ENV, "tasks_in_process"),
                                             (executor.MODULES_IN_PROCESS_ENV, "modules_in_process")])
def test_in_process_switches_need_the_fast_path(monkeypatch: pytest.MonkeyPatch, fast_path: bool,
                                                value: str | None, on: bool, env: str,
                                                attribute: str) -> None:
    if value is None:
        monkeypatch.delenv(env, raising=False)
    else:
        monkeypatch.setenv(env, value)
    assert getattr(executor.WarmExecutor(fast_path=fast_path), attribute) is on
