"""The benchmark harness starts an operator again when another process took one of its free ports before
the operator bound it (the official CI at 627e1a2), and only then."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import harness  # noqa: E402


class FakeOperator:
    def __init__(self, taken: bool) -> None:
        self.taken, self.stopped = taken, False

    def _wait_ready(self, timeout: float) -> None:
        if self.taken:
            raise harness.BenchError("warm operator exited with 1: address already in use")

    def port_taken(self) -> bool:
        return self.taken

    def stop(self) -> None:
        self.stopped = True


def test_an_operator_whose_port_was_taken_starts_again_on_new_ports() -> None:
    started = [FakeOperator(True), FakeOperator(False)]
    spawned: list[FakeOperator] = []

    def spawn() -> Any:
        spawned.append(started[len(spawned)])
        return spawned[-1]

    assert harness.ready_with_free_ports(spawn) is started[1]
    assert started[0].stopped and not started[1].stopped


def test_other_failures_and_a_port_taken_every_time_are_not_retried_forever() -> None:
    other = FakeOperator(False)
    other.port_taken = lambda: False  # type: ignore[method-assign]
    other._wait_ready = lambda timeout: (_ for _ in ()).throw(harness.BenchError("crashed"))  # type: ignore[method-assign]
    with pytest.raises(harness.BenchError, match="crashed"):
        harness.ready_with_free_ports(lambda: other)  # type: ignore[arg-type,return-value]
    spawned: list[FakeOperator] = []
    with pytest.raises(harness.BenchError, match="address already in use"):
        harness.ready_with_free_ports(lambda: spawned.append(FakeOperator(True)) or spawned[-1])  # type: ignore[arg-type,return-value,func-returns-value]
    assert len(spawned) == harness.PORT_ATTEMPTS
