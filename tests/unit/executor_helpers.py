"""Helpers shared by the executor tests (plain runner and warm)."""

from __future__ import annotations

from pathlib import Path

import psutil


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
