"""Lifecycle of the example roles, run directly (the operator's extra vars, no operator).

Each role run is a real ansible-playbook run with kubernetes.core against the test's API server
(tests/examples/conftest.py): by default a namespace of its own on the session's real control plane, where
kube-controller-manager rolls Deployments and StatefulSets out, the scheduler places their pods on kwok's
fake nodes (Running and Ready), claims of the default StorageClass get a volume and bind, and Job pods
succeed; with ``ANSIBLE_OPERATOR_TEST_API=sandbox``, a sandbox whose simulated controllers do the same.
Besides what each role reports, the tests check the workloads themselves: Deployment ``Available``,
StatefulSet ``readyReplicas``, claims ``Bound``, Jobs ``Complete``.

A failing Job is made the same way on both: a Job under the name the role would use, created before the
role runs (the role waits for a Job it finds instead of creating it again). Its pod can never be scheduled
and it has a deadline of 1 s, so the real Job controller fails it (``DeadlineExceeded``); the sandbox,
which schedules nothing, fails it on its annotation ``sandbox.ansible-operator.dev/fail`` (ignored by a
real server). Runs are slow (~10-30 s), so each test walks a whole lifecycle with as few runs as possible.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any, Iterator

import kubernetes
import pytest

from ansible_operator.kubetypes import KubeObject
from tests.harness import wait_for

from .conftest import KUBECTL, ExampleAPI
from .roleruns import ETCDCLUSTER, MEMCACHED, SAMPLEDB, Kind, RoleRun, run_role

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

SANDBOX_FAIL = {"sandbox.ansible-operator.dev/fail": "true"}
JOB_ANNOTATIONS = {"example.com/team": "databases"}
HOLD = "ansible-operator.dev/test-hold"  # a pod finalizer: the pod stays Terminating until it is removed


class Cluster:
    """The example CRDs' API server seen from one namespace, and the few API calls the tests need."""

    def __init__(self, target: ExampleAPI, workdir: Path) -> None:
        self.target = target
        self.ns = target.ns
        self.workdir = workdir
        self.custom = kubernetes.client.CustomObjectsApi(target.api)
        self.core = kubernetes.client.CoreV1Api(target.api)
        self.apps = kubernetes.client.AppsV1Api(target.api)
        self.batch = kubernetes.client.BatchV1Api(target.api)
        self.runs = 0

    def create(self, kind: Kind, name: str, spec: dict[str, Any]) -> None:
        body = {"apiVersion": kind.api_version, "kind": kind.kind, "metadata": {"name": name}, "spec": spec}
        self.custom.create_namespaced_custom_object(kind.group, kind.version, self.ns, kind.plural, body)

    def patch(self, kind: Kind, name: str, spec: dict[str, Any]) -> None:
        self.custom.patch_namespaced_custom_object(kind.group, kind.version, self.ns, kind.plural, name,
                                                   {"spec": spec})

    def get(self, kind: Kind, name: str) -> KubeObject:
        return self.custom.get_namespaced_custom_object(kind.group, kind.version, self.ns, kind.plural, name)

    def reconcile(self, role: str, kind: Kind, name: str) -> RoleRun:
        """One operator-style run of ``role`` for the object as it is now."""
        self.runs += 1
        return run_role(role, self.get(kind, name), kind, self.target.kubeconfig,
                        self.workdir / f"run{self.runs}")

    # ---- workloads

    def job_condition(self, name: str) -> str | None:
        job = self.batch.read_namespaced_job(name, self.ns)
        for cond in job.status.conditions or []:
            if cond.status == "True" and cond.type in ("Complete", "Failed"):
                return str(cond.type)
        return None

    def wait_job_finished(self, name: str, timeout: float = 120) -> str:
        return str(wait_for(lambda: self.job_condition(name), timeout=timeout, interval=0.2,
                            what=f"Job {name} to finish"))

    def failing_job(self, name: str) -> None:
        """Create the Job ``name`` so that it fails (see the module docstring)."""
        self.batch.create_namespaced_job(self.ns, {
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "annotations": SANDBOX_FAIL},
            "spec": {"backoffLimit": 0, "activeDeadlineSeconds": 1, "template": {"spec": {
                "restartPolicy": "Never",
                "nodeSelector": {"ansible-operator.dev/no-such-node": "true"},
                "containers": [{"name": "fail", "image": "busybox:1.37", "command": ["false"]}]}}}})

    def image(self, statefulset: str) -> str:
        sts = self.apps.read_namespaced_stateful_set(statefulset, self.ns)
        return str(sts.spec.template.spec.containers[0].image)

    def statefulset_ready(self, name: str, replicas: int) -> bool:
        """Every replica ready and on the current revision (what a finished rollout looks like)."""
        sts = self.apps.read_namespaced_stateful_set(name, self.ns)
        status = sts.status
        return bool(sts.spec.replicas == replicas and status.observed_generation == sts.metadata.generation
                    and status.ready_replicas == replicas and status.replicas == replicas
                    and status.current_revision == status.update_revision)

    def claim_phase(self, name: str) -> str:
        return str(self.core.read_namespaced_persistent_volume_claim(name, self.ns).status.phase)

    def deployment_available(self, name: str) -> bool:
        conditions = self.apps.read_namespaced_deployment(name, self.ns).status.conditions or []
        return any(c.type == "Available" and c.status == "True" for c in conditions)

    def endpoints(self, service: str) -> list[str]:
        """The pods behind a Service: every endpoint of its EndpointSlices (a pod without the Service's
        named port is in a slice without ports: listed too)."""
        slices = kubernetes.client.DiscoveryV1Api(self.target.api).list_namespaced_endpoint_slice(
            self.ns, label_selector=f"kubernetes.io/service-name={service}").items
        return sorted(e.target_ref.name for s in slices for e in s.endpoints or [] if e.target_ref)

    def wait_endpoints(self, service: str, pods: list[str], timeout: float = 60) -> None:
        seen: dict[str, list[str]] = {}

        def check() -> bool:
            seen["last"] = self.endpoints(service)
            return seen["last"] == pods

        try:
            wait_for(check, timeout=timeout, what=f"Service {service} -> {pods}")
        except AssertionError as exc:
            raise AssertionError(f"Service {service}: endpoints {seen.get('last')}, not {pods}") from exc

    def pods(self, selector: str) -> list[Any]:
        """Pods matching ``selector`` that are not being deleted."""
        items = self.core.list_namespaced_pod(self.ns, label_selector=selector).items
        return [p for p in items if p.metadata.deletion_timestamp is None]

    def ready_pods(self, selector: str) -> list[str]:
        out = []
        for pod in self.pods(selector):
            ready = any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])
            if pod.status.phase == "Running" and ready:
                out.append(pod.metadata.name)
        return sorted(out)


@pytest.fixture
def cluster(example_api: ExampleAPI, tmp_path: Path) -> Iterator[Cluster]:
    yield Cluster(example_api, tmp_path)


def ok(run: RoleRun) -> RoleRun:
    assert run.ok, run.failure_messages() or run.output[-3000:]
    return run


def not_cron_made(job: Any) -> bool:
    return not any(ref.kind == "CronJob" for ref in job.metadata.owner_references or [])


@pytest.mark.timeout(900)
def test_sampledb_lifecycle(cluster: Cluster) -> None:
    ns = cluster.ns
    # the database's pods: the selector of its StatefulSet and Services, which the Jobs' pods must not match
    db_pods = "app.kubernetes.io/name=sampledb,app.kubernetes.io/instance=db"
    # 1. create, with an on-demand backup; the role returns once the StatefulSet has rolled out
    cluster.create(SAMPLEDB, "db", {"version": "16.4", "config": {"max_connections": "50"},
                                    "backup": {"schedule": "0 3 * * *", "onDemand": "first"},
                                    "jobAnnotations": JOB_ANNOTATIONS})
    ok(cluster.reconcile("sampledb", SAMPLEDB, "db"))
    status = cluster.get(SAMPLEDB, "db")["status"]
    assert status["phase"] == "Ready"
    assert status["version"] == "16.4"
    assert status["endpoint"] == f"db.{ns}.svc:5432"
    assert status["ready"] == "1/1"
    assert cluster.image("db") == "postgres:16.4"
    assert cluster.statefulset_ready("db", 1)
    assert cluster.ready_pods(db_pods) == ["db-0"]
    # the StatefulSet's data claim (its pod could not have been scheduled unbound) and the backup volume
    assert cluster.claim_phase("data-db-0") == "Bound"
    wait_for(lambda: cluster.claim_phase("db-backups") == "Bound", timeout=60, what="db-backups Bound")
    assert (
        "max_connections = '50'"
        in cluster.core.read_namespaced_config_map("db-config", ns).data["postgresql.conf"]
    )
    assert cluster.core.read_namespaced_service("db-headless", ns).spec.cluster_ip == "None"
    # the Services lead to the database pod, and only to it (not to the backup Job's pod meanwhile)
    for service in ("db", "db-headless"):
        cluster.wait_endpoints(service, ["db-0"])
    assert cluster.core.read_namespaced_persistent_volume_claim("db-backups", ns).spec.resources.requests == {
        "storage": "1Gi"}
    cron = cluster.batch.read_namespaced_cron_job("db-backup", ns)
    assert cron.spec.schedule == "0 3 * * *"
    assert cron.spec.job_template.metadata.annotations == JOB_ANNOTATIONS
    password = cluster.core.read_namespaced_secret("db-credentials", ns).data["password"]
    backups = [j for j in cluster.batch.list_namespaced_job(
        ns, label_selector="app.kubernetes.io/component=backup").items if not_cron_made(j)]
    assert len(backups) == 1
    backup = backups[0].metadata.name
    assert backups[0].metadata.annotations == JOB_ANNOTATIONS
    assert cluster.wait_job_finished(backup) == "Complete"
    # The CronJob's template runs too: a Job made from it (as `kubectl create job --from` does when a
    # user wants a backup now) completes, and counts as a backup.
    proc = subprocess.run([KUBECTL, "create", "job", "db-backup-now", "--from=cronjob/db-backup", "-n", ns],
                          capture_output=True, text=True, timeout=60, env=cluster.target.kubectl_env())
    assert proc.returncode == 0, proc.stderr
    assert cluster.wait_job_finished("db-backup-now") == "Complete"

    # 2. restore the on-demand backup and upgrade 16.4 -> 17.0 in one change
    cluster.patch(SAMPLEDB, "db", {"version": "17.0", "restoreFrom": backup})
    ok(cluster.reconcile("sampledb", SAMPLEDB, "db"))
    status = cluster.get(SAMPLEDB, "db")["status"]
    assert (status["phase"], status["version"], status["restoredFrom"]) == ("Ready", "17.0", backup)
    # status.lastBackup: the newest completed backup Job (completion times have a resolution of 1 s)
    completed = {j.metadata.name: j.status.completion_time for j in cluster.batch.list_namespaced_job(
        ns, label_selector="app.kubernetes.io/component=backup").items if j.status.completion_time}
    assert set(completed) == {backup, "db-backup-now"}
    newest = max(completed.values())
    assert status["lastBackup"]["name"] in {n for n, t in completed.items() if t == newest}
    assert cluster.job_condition("db-migrate-to-17-0") == "Complete"
    restores = cluster.batch.list_namespaced_job(
        ns, label_selector="app.kubernetes.io/component=restore"
    ).items
    assert len(restores) == 1 and cluster.job_condition(restores[0].metadata.name) == "Complete"
    assert cluster.image("db") == "postgres:17.0"
    # the rolling update replaced the pod; the data claim stayed
    assert cluster.statefulset_ready("db", 1)
    (pod,) = cluster.pods(db_pods)
    assert pod.spec.containers[0].image == "postgres:17.0"
    assert cluster.claim_phase("data-db-0") == "Bound"
    # the password is generated once and never rotated
    assert cluster.core.read_namespaced_secret("db-credentials", ns).data["password"] == password

    # 3. a downgrade is refused before anything changes
    cluster.patch(SAMPLEDB, "db", {"version": "16.4"})
    run = cluster.reconcile("sampledb", SAMPLEDB, "db")
    assert not run.ok
    assert run.failure_messages()[0].startswith("downgrade from 17.0 to 16.4 is not supported")
    assert cluster.image("db") == "postgres:17.0"

    #    and so is a new storage size (volume claim templates are immutable): a real API server refuses
    #    it already (the CRD's CEL rule), the sandbox (no CEL) lets it through to the role's own check
    if cluster.target.real:
        with pytest.raises(kubernetes.client.ApiException) as refused:
            cluster.patch(SAMPLEDB, "db", {"version": "17.0", "storage": "2Gi"})
        assert refused.value.status == 422
        assert "spec.storage cannot change once created" in refused.value.body
        cluster.patch(SAMPLEDB, "db", {"version": "17.0"})
    else:
        cluster.patch(SAMPLEDB, "db", {"version": "17.0", "storage": "2Gi"})
        run = cluster.reconcile("sampledb", SAMPLEDB, "db")
        assert run.failure_messages()[0].startswith(
            "spec.storage cannot change once the database exists (1Gi to 2Gi)"
        )
        cluster.patch(SAMPLEDB, "db", {"storage": "1Gi"})

    # 4. a failing migration stops the upgrade: the StatefulSet keeps running the old version
    cluster.failing_job("db-migrate-to-17-1")
    cluster.patch(SAMPLEDB, "db", {"version": "17.1"})
    run = cluster.reconcile("sampledb", SAMPLEDB, "db")
    assert not run.ok
    assert "migration Job db-migrate-to-17-1 failed (" in run.failure_messages()[0]
    assert cluster.image("db") == "postgres:17.0"
    assert cluster.get(SAMPLEDB, "db")["status"]["version"] == "17.0"

    # 5. deletion: the finalizer role takes a final snapshot and keeps the backup volume.
    #    A failed snapshot fails the finalizer run (so the operator keeps the finalizer and the data).
    owner = cluster.get(SAMPLEDB, "db")["metadata"]
    cluster.core.patch_namespaced_persistent_volume_claim("db-backups", ns, {"metadata": {"ownerReferences": [
        {"apiVersion": SAMPLEDB.api_version, "kind": "SampleDB", "name": "db", "uid": owner["uid"]}]}})
    cluster.failing_job("db-final-snapshot")
    run = cluster.reconcile("sampledb_finalizer", SAMPLEDB, "db")
    assert "final-snapshot Job db-final-snapshot failed (" in run.failure_messages()[0]
    assert cluster.core.read_namespaced_persistent_volume_claim("db-backups", ns).metadata.owner_references
    cluster.batch.delete_namespaced_job("db-final-snapshot", ns, propagation_policy="Background")
    ok(cluster.reconcile("sampledb_finalizer", SAMPLEDB, "db"))
    assert cluster.job_condition("db-final-snapshot") == "Complete"
    snapshot = cluster.batch.read_namespaced_job("db-final-snapshot", ns)
    assert snapshot.metadata.annotations == JOB_ANNOTATIONS
    assert snapshot.spec.template.spec.containers[0].image == "postgres:17.0"  # what runs, not spec.version
    assert not cluster.core.read_namespaced_persistent_volume_claim(
        "db-backups", ns
    ).metadata.owner_references


def test_memcached_scales_and_reports_pods(cluster: Cluster) -> None:
    ns = cluster.ns
    selector = "app.kubernetes.io/name=memcached,app.kubernetes.io/instance=mc"

    def available() -> dict[str, Any]:
        conditions = cluster.get(MEMCACHED, "mc")["status"]["conditions"]
        return next(c for c in conditions if c["type"] == "Available")

    def rolled_out(replicas: int) -> bool:
        deploy = cluster.apps.read_namespaced_deployment("mc-memcached", ns)
        status = deploy.status
        return bool(status.observed_generation == deploy.metadata.generation
                    and status.ready_replicas == replicas and status.available_replicas == replicas
                    and status.replicas == replicas and len(cluster.pods(selector)) == replicas
                    and len(cluster.ready_pods(selector)) == replicas)

    cluster.create(MEMCACHED, "mc", {"size": 3})
    run = cluster.reconcile("memcached", MEMCACHED, "mc")
    ok(run)
    deploy = cluster.apps.read_namespaced_deployment("mc-memcached", ns)
    assert deploy.spec.replicas == 3
    assert deploy.spec.template.spec.containers[0].image == "memcached:1.6-alpine"
    # The run does not wait for the rollout: it reports what the new Deployment said (the response to
    # its create, before any controller saw it) and asks to run again.
    assert run.requeue_after == 2.0
    assert (available()["status"], available()["reason"]) == ("False", "RolloutInProgress")
    # The Deployment and ReplicaSet controllers create three pods, which become Running and Ready.
    wait_for(lambda: rolled_out(3), timeout=120, what="mc-memcached rolled out with 3 replicas")
    assert cluster.deployment_available("mc-memcached")
    pods = cluster.ready_pods(selector)
    assert len(pods) == 3
    # The next run finds the rollout done; status.nodes lists the Deployment's pods.
    run = cluster.reconcile("memcached", MEMCACHED, "mc")
    ok(run)
    assert run.requeue_after is None
    status = cluster.get(MEMCACHED, "mc")["status"]
    assert (status["nodes"], status["readyReplicas"]) == (pods, 3)
    assert (available()["status"], available()["reason"], available()["message"]) == (
        "True", "RolloutComplete", "3 of 3 memcached pods ready")
    # Scaling down: in progress until the Deployment controller has seen the new spec. A finalizer on
    # every pod keeps the two that go in Terminating (as a kubelet does for up to their grace period).
    for name in pods:
        cluster.core.patch_namespaced_pod(name, ns, {"metadata": {"finalizers": [HOLD]}})
    try:
        cluster.patch(MEMCACHED, "mc", {"size": 1})
        run = cluster.reconcile("memcached", MEMCACHED, "mc")
        ok(run)
        assert cluster.apps.read_namespaced_deployment("mc-memcached", ns).spec.replicas == 1
        assert run.requeue_after == 2.0
        wait_for(lambda: rolled_out(1), timeout=120, what="mc-memcached scaled down to 1 replica")
        assert cluster.deployment_available("mc-memcached")
        run = cluster.reconcile("memcached", MEMCACHED, "mc")
        ok(run)
        assert run.requeue_after is None
        status = cluster.get(MEMCACHED, "mc")["status"]
        assert status["readyReplicas"] == 1
        # the pods being deleted are not reported
        listed = cluster.core.list_namespaced_pod(ns, label_selector=selector).items
        assert len(listed) == 3
        (kept,) = cluster.pods(selector)
        assert status["nodes"] == [kept.metadata.name]
    finally:
        for name in pods:
            try:
                cluster.core.patch_namespaced_pod(name, ns, {"metadata": {"finalizers": None}})
            except kubernetes.client.ApiException as exc:
                if exc.status != 404:
                    raise


def test_etcdcluster_moves_one_member_per_run_and_refuses_downgrades(cluster: Cluster) -> None:
    ns = cluster.ns
    cluster.create(ETCDCLUSTER, "etcd", {"size": 2, "version": "3.5.17"})
    ok(cluster.reconcile("etcdcluster", ETCDCLUSTER, "etcd"))
    status = cluster.get(ETCDCLUSTER, "etcd")["status"]
    assert (status["size"], status["version"], status["phase"]) == (1, "3.5.17", "Scaling")
    assert cluster.apps.read_namespaced_stateful_set("etcd", ns).spec.replicas == 1
    assert cluster.statefulset_ready("etcd", 1)
    assert cluster.claim_phase("data-etcd-0") == "Bound"
    bootstrap = cluster.core.read_namespaced_config_map("etcd-bootstrap", ns).data
    assert bootstrap["ETCD_INITIAL_CLUSTER_STATE"] == "new"

    ok(cluster.reconcile("etcdcluster", ETCDCLUSTER, "etcd"))
    status = cluster.get(ETCDCLUSTER, "etcd")["status"]
    assert (status["size"], status["phase"]) == (2, "Running")
    assert cluster.job_condition("etcd-add-1-g1") == "Complete"  # member add before the pod starts
    assert cluster.statefulset_ready("etcd", 2)
    assert cluster.ready_pods("app.kubernetes.io/name=etcd,app.kubernetes.io/instance=etcd") == [
        "etcd-0", "etcd-1"]
    assert [cluster.claim_phase(f"data-etcd-{i}") for i in range(2)] == ["Bound", "Bound"]
    bootstrap = cluster.core.read_namespaced_config_map("etcd-bootstrap", ns).data
    assert bootstrap["ETCD_INITIAL_CLUSTER_STATE"] == "existing"
    assert bootstrap["ETCD_INITIAL_CLUSTER"].count("=http://") == 2

    cluster.patch(ETCDCLUSTER, "etcd", {"version": "3.4.35"})
    run = cluster.reconcile("etcdcluster", ETCDCLUSTER, "etcd")
    assert run.failure_messages() == ["downgrade from 3.5.17 to 3.4.35 is not supported"]
