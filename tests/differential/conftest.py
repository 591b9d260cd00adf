"""Two servers per test: a namespace of its own on the session's real control plane, and the same
namespace on one secure sandbox (TLS, client certificates, enforced RBAC, as the real one) for the run."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Iterator

import pytest

from ansible_operator.controlplane import ControlPlane
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


@pytest.fixture(scope="module")
def private_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """A real control plane of the module's own (its node may be drained), whose API server has no watch
    cache: watches are served by etcd, so an etcd compaction answers an older resourceVersion with 410 at
    once (with the cache, only once the cache's window has moved past it, which no test can time)."""
    if not kube.real():
        pytest.skip("no real control plane in this run: nothing to hold the sandbox to")
    plane = kube.private_control_plane(tmp_path_factory.mktemp("private") / "cp", crds=(),
                                       apiserver_args=["--watch-cache=false"])
    try:
        yield plane
    finally:
        plane.stop()


@pytest.fixture
def private_clients(sandbox_server: SandboxHandle, private_plane: ControlPlane, tmp_path: Path
                    ) -> Iterator[tuple[Client, Client]]:
    """As ``clients``, on servers the scenario may disturb (drop their watch history, drain the node)."""
    namespace = f"diff-{uuid.uuid4().hex[:6]}"
    real = Client("real", private_plane.kubeconfig, namespace, tmp_path / "real")
    sandbox = Client("sandbox", sandbox_server.kubeconfig, namespace, tmp_path / "sandbox")
    for client in (real, sandbox):
        created = client.run_kubectl("create", "namespace", namespace)
        assert created.returncode == 0, created.stderr
    real.compact = private_plane.compact
    sandbox.compact = lambda: int(sandbox_server.sandbox.call(sandbox_server.sandbox.server.store.compact))
    try:
        yield real, sandbox
    finally:
        for client in (real, sandbox):
            client.run_kubectl("delete", "namespace", namespace, "--wait=false")
