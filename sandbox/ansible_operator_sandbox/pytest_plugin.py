"""pytest fixtures for tests that want a sandbox API server (registered by the ``pytest11`` entry point).

``sandbox``: a fresh sandbox API server per test, started in a daemon thread on a free loopback port, with
its kubeconfig written under ``tmp_path``. Nothing global is set (no KUBECONFIG, no kubernetes default
configuration): use ``sandbox.url``, ``sandbox.kubeconfig``, ``sandbox.api_client()`` or
``sandbox.kubectl_env()``.

``sandbox_process``: a factory starting ``ansible-operator-sandbox`` subprocesses (for restart tests on the
same ``data_dir``/port); every process it started is stopped after the test.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from ansible_operator_sandbox.testing import SandboxHandle, SandboxProcess, start_in_thread, start_process


@pytest.fixture
def sandbox(tmp_path: Path) -> Iterator[SandboxHandle]:
    handle = start_in_thread(tmp_path / "sandbox.kubeconfig")
    try:
        yield handle
    finally:
        handle.sandbox.stop_thread()


@pytest.fixture
def sandbox_process(tmp_path: Path) -> Iterator[Callable[..., SandboxProcess]]:
    started: list[SandboxProcess] = []
    counter = itertools.count(1)

    def start(**kwargs: Any) -> SandboxProcess:
        """start(port=0, data_dir=None, crds=(), simulate=True) -> SandboxProcess (.url .port .kubeconfig
        .stop())"""
        proc = start_process(tmp_path / f"sandbox-process-{next(counter)}.kubeconfig", **kwargs)
        started.append(proc)
        return proc

    try:
        yield start
    finally:
        for proc in started:
            proc.stop()
