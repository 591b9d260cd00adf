"""The base of the runner's own errors: the lowest floor, importing nothing of the runner.

Every error the runner raises on purpose derives from :class:`OperatorError` (``WatchesError``,
``StartupError``, ``ConfigError``, ``ApiError``, ``RunsError``, ...), so ``except OperatorError`` tells
them from a bug. Their ``str()`` is one line, written for the person running the operator.
"""

from __future__ import annotations

__all__ = ["OperatorError"]


class OperatorError(Exception):
    """An error of the runner's own making; ``str(e)`` is one line saying what is wrong."""
