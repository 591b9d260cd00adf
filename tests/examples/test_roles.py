"""Lifecycle of the example roles, run directly (the operator's extra vars, no operator) on a sandbox.

Each role run is a real ansible-playbook run with kubernetes.core against the sandbox API server, whose
simulated controllers make StatefulSets/Deployments ready and Jobs complete (or fail when annotated
``sandbox.ansible-operator.dev/fail: "true"``). Runs are slow (~10-30 s), so each test walks a whole
lifecycle with as few runs as possible.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import kubernetes
import pytest

from ansible_operator.sandbox.testing import SandboxHandle, start_in_thread, wait_for

from .roleruns import ETCDCLUSTER, MEMCACHED, REPO, SAMPLEDB, Kind, RoleRun, run_role

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

NS = "default"
FAIL_ANNOTATION = {"sandbox.ansible-operator.dev/fail": "true"}


class Cluster:
    """A sandbox with the example CRDs, and the few API calls the tests need."""

    def __init__(self, handle: SandboxHandle, workdir: Path) -> None:
        self.handle = handle
        self.workdir = workdir
        client = handle.api_client()
        self.custom = kubernetes.client.CustomObjectsApi(client)
        self.core = kubernetes.client.CoreV1Api(client)
        self.apps = kubernetes.client.AppsV1Api(client)
        self.batch = kubernetes.client.BatchV1Api(client)
        self.runs = 0

    def create(self, kind: Kind, name: str, spec: dict[str, Any]) -> None:
        body = {"apiVersion": kind.api_version, "kind": kind.kind, "metadata": {"name": name}, "spec": spec}
        self.custom.create_namespaced_custom_object(kind.group, kind.version, NS, kind.plural, body)

    def patch(self, kind: Kind, name: str, spec: dict[str, Any]) -> None:
        self.custom.patch_namespaced_custom_object(kind.group, kind.version, NS, kind.plural, name,
                                                   {"spec": spec})

    def get(self, kind: Kind, name: str) -> dict[str, Any]:
        return self.custom.get_namespaced_custom_object(kind.group, kind.version, NS, kind.plural, name)

    def reconcile(self, role: str, kind: Kind, name: str) -> RoleRun:
        """One operator-style run of ``role`` for the object as it is now."""
        self.runs += 1
        return run_role(role, self.get(kind, name), kind, self.handle.kubeconfig,
                        self.workdir / f"run{self.runs}")

    def job_condition(self, name: str) -> str | None:
        job = self.batch.read_namespaced_job(name, NS)
        for cond in job.status.conditions or []:
            if cond.status == "True" and cond.type in ("Complete", "Failed"):
                return str(cond.type)
        return None

    def wait_job_finished(self, name: str, timeout: float = 60) -> str:
        return str(wait_for(lambda: self.job_condition(name), timeout=timeout, interval=0.2,
                            what=f"Job {name} to finish"))

    def image(self, statefulset: str) -> str:
        return str(
            self.apps.read_namespaced_stateful_set(statefulset, NS).spec.template.spec.containers[0].image
        )


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    handle = start_in_thread(tmp_path / "kubeconfig", crds=[REPO / "crds"])
    try:
        yield Cluster(handle, tmp_path)
    finally:
        handle.sandbox.stop_thread()


def ok(run: RoleRun) -> RoleRun:
    assert run.ok, run.failure_messages() or run.output[-3000:]
    return run


def test_sampledb_lifecycle(cluster: Cluster) -> None:
    # 1. create, with an on-demand backup
    cluster.create(SAMPLEDB, "db", {"version": "16.4", "config": {"max_connections": "50"},
                                    "backup": {"schedule": "0 3 * * *", "onDemand": "first"}})
    ok(cluster.reconcile("sampledb", SAMPLEDB, "db"))
    status = cluster.get(SAMPLEDB, "db")["status"]
    assert status["phase"] == "Ready"
    assert status["version"] == "16.4"
    assert status["endpoint"] == "db.default.svc:5432"
    assert status["ready"] == "1/1"
    assert cluster.image("db") == "postgres:16.4"
    assert (
        "max_connections = '50'"
        in cluster.core.read_namespaced_config_map("db-config", NS).data["postgresql.conf"]
    )
    assert cluster.core.read_namespaced_service("db-headless", NS).spec.cluster_ip == "None"
    assert cluster.core.read_namespaced_persistent_volume_claim("db-backups", NS).spec.resources.requests == {
        "storage": "1Gi"}
    assert cluster.batch.read_namespaced_cron_job("db-backup", NS).spec.schedule == "0 3 * * *"
    password = cluster.core.read_namespaced_secret("db-credentials", NS).data["password"]
    backups = cluster.batch.list_namespaced_job(NS, label_selector="app.kubernetes.io/component=backup").items
    assert len(backups) == 1
    backup = backups[0].metadata.name
    assert cluster.wait_job_finished(backup) == "Complete"

    # 2. restore that backup and upgrade 16.4 -> 17.0 in one change
    cluster.patch(SAMPLEDB, "db", {"version": "17.0", "restoreFrom": backup})
    ok(cluster.reconcile("sampledb", SAMPLEDB, "db"))
    status = cluster.get(SAMPLEDB, "db")["status"]
    assert (status["phase"], status["version"], status["restoredFrom"]) == ("Ready", "17.0", backup)
    assert status["lastBackup"]["name"] == backup
    assert cluster.job_condition("db-migrate-to-17-0") == "Complete"
    restores = cluster.batch.list_namespaced_job(
        NS, label_selector="app.kubernetes.io/component=restore"
    ).items
    assert len(restores) == 1 and cluster.job_condition(restores[0].metadata.name) == "Complete"
    assert cluster.image("db") == "postgres:17.0"
    # the password is generated once and never rotated
    assert cluster.core.read_namespaced_secret("db-credentials", NS).data["password"] == password

    # 3. a downgrade is refused before anything changes
    cluster.patch(SAMPLEDB, "db", {"version": "16.4"})
    run = cluster.reconcile("sampledb", SAMPLEDB, "db")
    assert not run.ok
    assert run.failure_messages()[0].startswith("downgrade from 17.0 to 16.4 is not supported")
    assert cluster.image("db") == "postgres:17.0"

    #    and so is a new storage size (volume claim templates are immutable)
    cluster.patch(SAMPLEDB, "db", {"version": "17.0", "storage": "2Gi"})
    run = cluster.reconcile("sampledb", SAMPLEDB, "db")
    assert run.failure_messages()[0].startswith(
        "spec.storage cannot change once the database exists (1Gi to 2Gi)"
    )
    cluster.patch(SAMPLEDB, "db", {"storage": "1Gi"})

    # 4. a failing migration stops the upgrade: the StatefulSet keeps running the old version
    cluster.patch(SAMPLEDB, "db", {"version": "17.1", "jobAnnotations": FAIL_ANNOTATION})
    run = cluster.reconcile("sampledb", SAMPLEDB, "db")
    assert not run.ok
    assert "migration Job db-migrate-to-17-1 failed" in run.failure_messages()[0]
    assert cluster.image("db") == "postgres:17.0"
    assert cluster.get(SAMPLEDB, "db")["status"]["version"] == "17.0"

    # 5. deletion: the finalizer role takes a final snapshot and keeps the backup volume.
    #    A failed snapshot fails the finalizer run (so the operator keeps the finalizer and the data).
    owner = cluster.get(SAMPLEDB, "db")["metadata"]
    cluster.core.patch_namespaced_persistent_volume_claim("db-backups", NS, {"metadata": {"ownerReferences": [
        {"apiVersion": SAMPLEDB.api_version, "kind": "SampleDB", "name": "db", "uid": owner["uid"]}]}})
    run = cluster.reconcile("sampledb_finalizer", SAMPLEDB, "db")
    assert "final-snapshot Job db-final-snapshot failed" in run.failure_messages()[0]
    assert cluster.core.read_namespaced_persistent_volume_claim("db-backups", NS).metadata.owner_references
    cluster.patch(SAMPLEDB, "db", {"jobAnnotations": None})
    cluster.batch.delete_namespaced_job("db-final-snapshot", NS, propagation_policy="Background")
    ok(cluster.reconcile("sampledb_finalizer", SAMPLEDB, "db"))
    assert cluster.job_condition("db-final-snapshot") == "Complete"
    snapshot = cluster.batch.read_namespaced_job("db-final-snapshot", NS).spec.template.spec.containers[0]
    assert snapshot.image == "postgres:17.0"  # the version that runs, not the refused spec.version
    assert not cluster.core.read_namespaced_persistent_volume_claim(
        "db-backups", NS
    ).metadata.owner_references


def test_memcached_scales_and_reports_pods(cluster: Cluster) -> None:
    def available() -> dict[str, Any]:
        conditions = cluster.get(MEMCACHED, "mc")["status"]["conditions"]
        return next(c for c in conditions if c["type"] == "Available")

    cluster.create(MEMCACHED, "mc", {"size": 3})
    run = cluster.reconcile("memcached", MEMCACHED, "mc")
    ok(run)
    deploy = cluster.apps.read_namespaced_deployment("mc-memcached", NS)
    assert deploy.spec.replicas == 3
    assert deploy.spec.template.spec.containers[0].image == "memcached:1.6-alpine"
    # The run does not wait for the rollout: it reports what the new Deployment said and asks to run again.
    assert run.requeue_after == 2.0
    assert (available()["status"], available()["reason"]) == ("False", "RolloutInProgress")
    # The next run finds the rollout done (the sandbox's simulated controller made the Deployment ready).
    # status.nodes lists the Deployment's pods (the sandbox's ReplicaSet controller creates them; nothing
    # runs).
    wait_for(
        lambda: cluster.apps.read_namespaced_deployment("mc-memcached", NS).status.ready_replicas == 3,
        timeout=30,
    )
    pods = sorted(p.metadata.name for p in cluster.core.list_namespaced_pod(
        NS, label_selector="app.kubernetes.io/name=memcached,app.kubernetes.io/instance=mc").items)
    run = cluster.reconcile("memcached", MEMCACHED, "mc")
    ok(run)
    assert run.requeue_after is None
    status = cluster.get(MEMCACHED, "mc")["status"]
    assert len(pods) == 3 and (status["nodes"], status["readyReplicas"]) == (pods, 3)
    assert (available()["status"], available()["reason"], available()["message"]) == (
        "True", "RolloutComplete", "3 of 3 memcached pods ready")
    # Scaling down: in progress until the Deployment controller has seen the new spec.
    cluster.patch(MEMCACHED, "mc", {"size": 1})
    run = cluster.reconcile("memcached", MEMCACHED, "mc")
    ok(run)
    assert cluster.apps.read_namespaced_deployment("mc-memcached", NS).spec.replicas == 1
    assert run.requeue_after == 2.0
    wait_for(
        lambda: cluster.apps.read_namespaced_deployment("mc-memcached", NS).status.ready_replicas == 1,
        timeout=30,
    )
    run = cluster.reconcile("memcached", MEMCACHED, "mc")
    ok(run)
    assert run.requeue_after is None
    assert cluster.get(MEMCACHED, "mc")["status"]["readyReplicas"] == 1


def test_etcdcluster_moves_one_member_per_run_and_refuses_downgrades(cluster: Cluster) -> None:
    cluster.create(ETCDCLUSTER, "etcd", {"size": 2, "version": "3.5.17"})
    ok(cluster.reconcile("etcdcluster", ETCDCLUSTER, "etcd"))
    status = cluster.get(ETCDCLUSTER, "etcd")["status"]
    assert (status["size"], status["version"], status["phase"]) == (1, "3.5.17", "Scaling")
    assert cluster.apps.read_namespaced_stateful_set("etcd", NS).spec.replicas == 1
    bootstrap = cluster.core.read_namespaced_config_map("etcd-bootstrap", NS).data
    assert bootstrap["ETCD_INITIAL_CLUSTER_STATE"] == "new"

    ok(cluster.reconcile("etcdcluster", ETCDCLUSTER, "etcd"))
    status = cluster.get(ETCDCLUSTER, "etcd")["status"]
    assert (status["size"], status["phase"]) == (2, "Running")
    assert cluster.job_condition("etcd-add-1-g1") == "Complete"  # member add before the pod starts
    bootstrap = cluster.core.read_namespaced_config_map("etcd-bootstrap", NS).data
    assert bootstrap["ETCD_INITIAL_CLUSTER_STATE"] == "existing"
    assert bootstrap["ETCD_INITIAL_CLUSTER"].count("=http://") == 2

    cluster.patch(ETCDCLUSTER, "etcd", {"version": "3.4.35"})
    run = cluster.reconcile("etcdcluster", ETCDCLUSTER, "etcd")
    assert run.failure_messages() == ["downgrade from 3.5.17 to 3.4.35 is not supported"]
