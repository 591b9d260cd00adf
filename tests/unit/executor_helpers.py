"""Helpers shared by the executor tests (plain runner and warm)."""

from __future__ import annotations

from contextlib import asynccontextmanager
from pathlib import Path
from typing import AsyncIterator, TypeVar

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
