"""Two servers per test: a namespace of its own on the session's real control plane, and the same
namespace on one secure sandbox (TLS, client certificates, enforced RBAC, as the real one) for the run."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

from ansible_operator_sandbox.testing import SandboxHandle, start_in_thread
from tests import kube

from .harness import Client


@pytest.fixture(scope="session")
def sandbox_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SandboxHandle]:
    handle = start_in_thread(tmp_path_factory.mktemp("differential") / "sandbox.kubeconfig", secure=True)
    try:
        yield handle
    finally:
        handle.sandbox.stop_thread()


@pytest.fixture
def clients(sandbox_server: SandboxHandle, tmp_path: Path) -> Iterator[tuple[Client, Client]]:
    if not kube.real() or not kube.has_shared():
        pytest.skip("no real control plane in this run: nothing to hold the sandbox to"
                    " (ANSIBLE_OPERATOR_TEST_API=sandbox, or no binaries)")
    cluster = kube.shared()
    try:
        namespace = cluster.namespace("diff")
        real = Client("real", cluster.kubeconfig, namespace, tmp_path / "real")
        sandbox = Client("sandbox", sandbox_server.kubeconfig, namespace, tmp_path / "sandbox")
        created = sandbox.run_kubectl("create", "namespace", namespace)
        assert created.returncode == 0, created.stderr
        yield real, sandbox
    finally:
        cluster.cleanup()
