"""The API server the example tests run against (tests/kube.py decides which):

* real (default): a namespace of the test's own on the session's shared control plane, where the
  controllers, the scheduler and kwok's fake nodes make Deployments and StatefulSets roll out, claims bind
  and Job pods succeed;
* sandbox (``ANSIBLE_OPERATOR_TEST_API=sandbox``): a sandbox per test with the example CRDs (crds/), whose
  simulated controllers do the same. Its namespace is created too, so the tests read the same either way.
"""

from __future__ import annotations

import os
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import kubernetes
import pytest

from ansible_operator_sandbox.testing import start_in_thread
from tests import kube

REPO = Path(__file__).resolve().parents[2]
KUBECTL = shutil.which("kubectl") or "/usr/bin/kubectl"


@dataclass
class ExampleAPI:
    """Where a test's objects go: an admin kubeconfig, a namespace of its own, a client."""

    kubeconfig: Path
    ns: str
    api: kubernetes.client.ApiClient
    real: bool
    cache_dir: Path

    def kubectl_env(self) -> dict[str, str]:
        """kubectl and Ansible against this API server. A private discovery cache: a sandbox of a later
        test may reuse a port, and kubectl caches discovery per host:port."""
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig), "K8S_AUTH_KUBECONFIG": str(self.kubeconfig),
               "KUBECACHEDIR": str(self.cache_dir)}
        return env


@pytest.fixture
def example_api(tmp_path: Path) -> Iterator[ExampleAPI]:
    if kube.real():
        shared = kube.shared()
        ns = shared.namespace("examples")
        api = shared.api_client()
        try:
            yield ExampleAPI(shared.kubeconfig, ns, api, True, tmp_path / "kubectl-cache")
        finally:
            api.close()
            shared.cleanup()
        return
    handle = start_in_thread(tmp_path / "kubeconfig", crds=[REPO / "crds"])
    try:
        api = handle.api_client()
        ns = f"examples-{uuid.uuid4().hex[:6]}"
        kubernetes.client.CoreV1Api(api).create_namespace({"metadata": {"name": ns}})
        yield ExampleAPI(handle.kubeconfig, ns, api, False, tmp_path / "kubectl-cache")
        api.close()
    finally:
        handle.sandbox.stop_thread()
