"""Helpers shared by the executor tests (plain runner and warm)."""

from __future__ import annotations

from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any, AsyncIterator, Callable, TypeVar

import psutil

from ansible_operator.executors.base import Executor

E = TypeVar("E", bound=Executor)


@asynccontextmanager
async def started(executor: E) -> AsyncIterator[E]:
    """``executor`` started, and closed on the way out: the body of every executor fixture."""
    await executor.start()
    try:
        yield executor
    finally:
        await executor.close()


class SharedExecutors:
    """Executors that the tests of one module share (the body of a module-scoped fixture, which runs in the
    module's event loop: ``pytest.mark.asyncio(loop_scope="module")`` on the tests that use it).

    Starting a warm executor is a zygote importing ansible-core (~1.5 CPU s); a test that is not about
    start-up, the zygote's lifetime or its crashes gets the one already running for the same options. Each
    xdist worker is a process of its own, with its own executors.
    """

    def __init__(self, stack: AsyncExitStack) -> None:
        self._stack = stack
        self._started: dict[tuple[Any, ...], Executor] = {}

    async def get(self, make: Callable[..., E], **options: Any) -> E:
        """The started ``make(**options)`` of this module, started on first use and closed at its end."""
        key = (make, *sorted(options.items()))
        if key not in self._started:
            self._started[key] = await self._stack.enter_async_context(started(make(**options)))
        return self._started[key]  # type: ignore[return-value]


@asynccontextmanager
async def shared_executors() -> AsyncIterator[SharedExecutors]:
    async with AsyncExitStack() as stack:
        yield SharedExecutors(stack)


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def descendants_with(marker: str) -> list[psutil.Process]:
    """This test process's descendants whose command line contains ``marker``."""
    found = []
    for proc in psutil.Process().children(recursive=True):
        try:
            if any(marker in part for part in proc.cmdline()):
                found.append(proc)
        except psutil.Error:
            continue
    return found
