"""Shared fixtures.

``sandbox``: a fresh sandbox API server per test, started in a daemon thread on a free loopback port, with
its kubeconfig written under ``tmp_path``. Nothing global is set (no KUBECONFIG, no kubernetes default
configuration): use ``sandbox.kubeconfig``, ``sandbox.api_client()`` or ``sandbox.kubectl_env()``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

from ansible_operator.sandbox.testing import SandboxHandle, start_in_thread


@pytest.fixture
def sandbox(tmp_path: Path) -> Iterator[SandboxHandle]:
    handle = start_in_thread(tmp_path / "sandbox.kubeconfig")
    try:
        yield handle
    finally:
        handle.sandbox.stop_thread()
