"""The real control plane itself: ``ansible-operator cluster up`` as a user runs it (versions, readiness, no
orphans after SIGTERM or SIGKILL of the launcher), and what its controllers and kwok do for the workloads
the example roles create (tests/kube.py runs the rest of the suite on it)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import kubernetes
import psutil
import pytest

from ansible_operator.controlplane import binaries
from tests import kube
from tests.harness import wait_for

pytestmark = pytest.mark.skipif(not kube.real(), reason="needs the real control plane (tests/kube.py)")


def _cluster_up(tmp_path: Path) -> tuple[subprocess.Popen[str], dict[str, Any]]:
    proc = subprocess.Popen([sys.executable, "-m", "ansible_operator", "cluster", "up", "--dir",
                             str(tmp_path / "cp"), "--kubeconfig", str(tmp_path / "kubeconfig")],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    assert proc.stdout is not None
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if line.startswith("logs:"):
            break
    else:
        raise AssertionError(f"cluster up exited {proc.wait()}:\n{''.join(lines)}")
    state = json.loads((tmp_path / "cp" / "state.json").read_text())
    assert set(state["pids"]) == set(binaries.NAMES)
    return proc, state


def _alive(pids: dict[str, int]) -> list[str]:
    out = []
    for name, pid in pids.items():
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                out.append(name)
        except psutil.NoSuchProcess:
            pass
    return out


@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
def test_cluster_up_serves_and_leaves_nothing_behind(tmp_path: Path, how: signal.Signals) -> None:
    proc, state = _cluster_up(tmp_path)
    try:
        env = {**os.environ, "KUBECONFIG": str(tmp_path / "kubeconfig")}
        version = json.loads(subprocess.run(["kubectl", "version", "-o", "json"], env=env,
                                            capture_output=True, text=True, timeout=60).stdout)
        assert version["serverVersion"]["gitVersion"] == binaries.KUBERNETES_VERSION
        nodes = subprocess.run(["kubectl", "get", "nodes", "-o", "name"], env=env, capture_output=True,
                               text=True, timeout=60)
        assert nodes.stdout.split() == ["node/kwok-node-0"], nodes
    finally:
        os.kill(proc.pid, how)
        code = proc.wait(60)
    if how == signal.SIGTERM:
        assert code == 0
    # SIGKILL: the kernel's parent-death signal takes every component down with the launcher
    wait_for(lambda: not _alive(state["pids"]), 30, what=f"components gone after {how.name}")


def test_binaries_print_their_real_versions() -> None:
    found = binaries.find(build=False)
    versions = dict(binaries.iter_versions(found))
    assert versions["kube-apiserver"] == f"Kubernetes {binaries.KUBERNETES_VERSION}"
    assert versions["kube-controller-manager"] == f"Kubernetes {binaries.KUBERNETES_VERSION}"
    assert binaries.ETCD_VERSION.lstrip("v") in versions["etcd"]
    assert binaries.KWOK_VERSION in versions["kwok"]


def _conditions(obj: Any) -> dict[str, str]:
    return {c.type: c.status for c in (obj.status.conditions or [])}


def test_workloads_run_on_kwok_nodes(shared_cluster: kube.SharedCluster) -> None:
    """Deployment Available, StatefulSet ready with Bound claims, Job Complete, a projected token volume,
    TokenRequest, garbage collection: what the example roles rely on, done by the real controllers."""
    ns = shared_cluster.namespace("cp")
    with shared_cluster.api_client() as api:
        apps, batch, core = (kubernetes.client.AppsV1Api(api), kubernetes.client.BatchV1Api(api),
                             kubernetes.client.CoreV1Api(api))
        pod = {"metadata": {"labels": {"app": "x"}}, "spec": {"containers": [{"name": "c", "image": "x"}]}}
        apps.create_namespaced_deployment(ns, {"metadata": {"name": "web"}, "spec": {
            "replicas": 2, "selector": {"matchLabels": {"app": "x"}}, "template": pod}})
        apps.create_namespaced_stateful_set(ns, {"metadata": {"name": "db"}, "spec": {
            "replicas": 2, "serviceName": "db", "selector": {"matchLabels": {"app": "x"}}, "template": pod,
            "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {
                "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}]}})
        batch.create_namespaced_job(ns, {"metadata": {"name": "once"}, "spec": {"template": {"spec": {
            "restartPolicy": "Never", "containers": [{"name": "c", "image": "x"}]}}}})
        wait_for(lambda: _conditions(apps.read_namespaced_deployment("web", ns)).get("Available") == "True",
                 120, what="Deployment Available")
        wait_for(lambda: apps.read_namespaced_stateful_set("db", ns).status.ready_replicas == 2, 120,
                 what="StatefulSet 2 ready")
        claims = core.list_namespaced_persistent_volume_claim(ns).items
        assert sorted((c.metadata.name, c.status.phase) for c in claims) == [
            ("data-db-0", "Bound"), ("data-db-1", "Bound")]
        wait_for(lambda: _conditions(batch.read_namespaced_job("once", ns)).get("Complete") == "True", 120,
                 what="Job Complete")
        pods = core.list_namespaced_pod(ns, label_selector="app=x").items
        assert all(any(v.name.startswith("kube-api-access-") for v in p.spec.volumes) for p in pods)
        core.create_namespaced_service_account(ns, {"metadata": {"name": "robot"}})
        token = core.create_namespaced_service_account_token("robot", ns, {"spec": {}})
        assert token.status.token.count(".") == 2
        # background garbage collection of a dependent once its owner is gone
        owner = core.create_namespaced_config_map(ns, {"metadata": {"name": "owner"}})
        core.create_namespaced_config_map(ns, {"metadata": {"name": "dependent", "ownerReferences": [
            {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner.metadata.uid}]}})
        core.delete_namespaced_config_map("owner", ns)

        def collected() -> bool:
            try:
                core.read_namespaced_config_map("dependent", ns)
                return False
            except kubernetes.client.ApiException as exc:
                return exc.status == 404
        started = time.monotonic()
        wait_for(collected, 120, what="dependent garbage-collected")
        assert time.monotonic() - started < 120
