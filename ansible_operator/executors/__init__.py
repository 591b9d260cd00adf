"""Executors: run one playbook/role with extra vars and stream its events (see ``base.py``).

``make_executor`` maps the ``--executor`` flag to an implementation. Implementations are imported lazily
so that choosing one never pays for (or breaks on) the other.
"""

from __future__ import annotations

import importlib
from typing import Any

from ansible_operator.executors.base import EventCallback, Executor, RunOutcome, RunRequest

__all__ = ["EXECUTORS", "EventCallback", "Executor", "RunOutcome", "RunRequest", "make_executor"]

EXECUTORS: dict[str, tuple[str, str]] = {
    "runner": ("ansible_operator.executors.runner", "RunnerExecutor"),
    "warm": ("ansible_operator.executors.warm.executor", "WarmExecutor"),
}


def make_executor(name: str, **kw: Any) -> Executor:
    """Build the executor called ``name`` ("runner" or "warm") with keyword arguments ``kw``."""
    try:
        module_name, class_name = EXECUTORS[name]
    except KeyError:
        raise ValueError(f"unknown executor {name!r} (choose from {', '.join(EXECUTORS)})") from None
    cls = getattr(importlib.import_module(module_name), class_name)
    executor: Executor = cls(**kw)
    return executor
