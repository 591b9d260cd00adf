"""A run's failure outside any task, named from its artifacts: the same wording from both executors.

A playbook that fails before or outside any task (a syntax error, a role not found...) leaves no failed
task event to name it; ``ansible-playbook`` printed the reason to the run's ``artifacts/stdout``, which
both the runner and the warm executor write in ansible-runner's layout.
"""

from __future__ import annotations

import re
from pathlib import Path

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def one_line(text: str, limit: int = 500) -> str:
    """``text`` without ANSI colour codes, its whitespace collapsed, at most ``limit`` characters."""
    line = " ".join(_ANSI.sub("", text).split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def stdout_error(artifacts_dir: Path) -> str | None:
    """The error line (``[ERROR]: ...`` in ansible-core 2.19, ``ERROR! ...`` before) or else the last line
    of a run that failed before/outside any task (syntax error, role not found, ...)."""
    try:
        lines = [
            ln
            for ln in _ANSI.sub("", (artifacts_dir / "stdout").read_text(errors="replace")).splitlines()
            if ln.strip()
        ]
    except OSError:
        return None
    for ln in lines:
        if ln.lstrip().startswith(("[ERROR]", "ERROR!")):
            return one_line(ln)
    return one_line(lines[-1]) if lines else None
