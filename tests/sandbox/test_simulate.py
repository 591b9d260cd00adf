"""Simulated controllers: Deployment/StatefulSet/Job/PVC/CronJob status as a healthy cluster would write it."""

from __future__ import annotations

import copy
import time

import kubernetes
import pytest

from ansible_operator.sandbox.testing import SandboxHandle, start_in_thread

from .helpers import CRD, install_crd, wait_for

TEMPLATE = {"metadata": {"labels": {"app": "x"}}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}}


@pytest.fixture
def api(sandbox: SandboxHandle):
    client = sandbox.api_client()
    yield client
    client.close()


def test_deployment_scale_to_zero_and_back(api):
    apps = kubernetes.client.AppsV1Api(api)
    apps.create_namespaced_deployment("default", {"metadata": {"name": "d"}, "spec": {
        "replicas": 1, "selector": {"matchLabels": {"app": "x"}}, "template": TEMPLATE}})
    wait_for(lambda: apps.read_namespaced_deployment("d", "default").status.ready_replicas == 1)
    apps.patch_namespaced_deployment_scale("d", "default", {"spec": {"replicas": 0}})
    d = wait_for(lambda: (d := apps.read_namespaced_deployment("d", "default")).status.observed_generation
                 == d.metadata.generation and d)
    assert d.spec.replicas == 0 and not d.status.replicas and not d.status.available_replicas
    assert d.metadata.generation == 2  # scale changed spec
    scale = apps.read_namespaced_deployment_scale("d", "default")
    assert scale.spec.replicas == 0


def test_statefulset_ready_and_claims(api):
    apps = kubernetes.client.AppsV1Api(api)
    core = kubernetes.client.CoreV1Api(api)
    apps.create_namespaced_stateful_set("default", {"metadata": {"name": "db"}, "spec": {
        "replicas": 2, "serviceName": "db", "selector": {"matchLabels": {"app": "x"}}, "template": TEMPLATE,
        "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {
            "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "2Gi"}}}}]}})
    sts = wait_for(lambda: (s := apps.read_namespaced_stateful_set("db", "default")).status.ready_replicas == 2 and s)
    assert sts.status.observed_generation == sts.metadata.generation
    assert sts.status.current_revision == sts.status.update_revision
    pvcs = wait_for(lambda: [p for p in core.list_namespaced_persistent_volume_claim("default").items
                             if p.status.phase == "Bound"] if len(
        core.list_namespaced_persistent_volume_claim("default").items) == 2 else None)
    assert sorted(p.metadata.name for p in pvcs) == ["data-db-0", "data-db-1"]
    assert pvcs[0].status.capacity == {"storage": "2Gi"}


def test_job_completes(api):
    batch = kubernetes.client.BatchV1Api(api)
    batch.create_namespaced_job("default", {"metadata": {"name": "j"}, "spec": {"template": {
        "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}}}})
    job = wait_for(lambda: (j := batch.read_namespaced_job("j", "default")).status.succeeded == 1 and j)
    assert job.status.start_time and job.status.completion_time
    assert any(c.type == "Complete" and c.status == "True" for c in job.status.conditions)


def test_job_fails_on_annotation(api):
    batch = kubernetes.client.BatchV1Api(api)
    batch.create_namespaced_job("default", {
        "metadata": {"name": "bad", "annotations": {"sandbox.ansible-operator.dev/fail": "true"}},
        "spec": {"backoffLimit": 1, "template": {"spec": {"restartPolicy": "Never",
                                                          "containers": [{"name": "c", "image": "busybox"}]}}}})
    job = wait_for(lambda: (j := batch.read_namespaced_job("bad", "default")).status.failed and j)
    assert any(c.type == "Failed" and c.status == "True" for c in job.status.conditions)
    assert not job.status.succeeded


def test_cronjob_creates_owned_jobs(api):
    batch = kubernetes.client.BatchV1Api(api)
    cj = batch.create_namespaced_cron_job("default", {"metadata": {"name": "tick"}, "spec": {
        "schedule": "* * * * * */1",  # every second: croniter seconds field (sandbox extension)
        "jobTemplate": {"spec": {"template": {"spec": {"restartPolicy": "Never",
                                                       "containers": [{"name": "c", "image": "busybox"}]}}}}}})
    jobs = wait_for(lambda: batch.list_namespaced_job("default").items, timeout=15)
    ref = jobs[0].metadata.owner_references[0]
    assert (ref.kind, ref.name, ref.uid, ref.controller) == ("CronJob", "tick", cj.metadata.uid, True)
    wait_for(lambda: batch.read_namespaced_cron_job("tick", "default").status.last_schedule_time, timeout=15)
    # suspended: no new jobs
    batch.patch_namespaced_cron_job("tick", "default", {"spec": {"suspend": True}})
    time.sleep(1.2)
    before = {j.metadata.name for j in batch.list_namespaced_job("default").items}
    time.sleep(1.5)
    assert {j.metadata.name for j in batch.list_namespaced_job("default").items} <= before
    # deleting the CronJob garbage-collects its Jobs
    batch.delete_namespaced_cron_job("tick", "default")
    wait_for(lambda: not batch.list_namespaced_job("default").items)


def test_simulation_can_be_turned_off(tmp_path):
    handle = start_in_thread(tmp_path / "kc", simulate=False)
    try:
        api = handle.api_client()
        batch = kubernetes.client.BatchV1Api(api)
        batch.create_namespaced_job("default", {"metadata": {"name": "j"}, "spec": {"template": {
            "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}}}})
        time.sleep(0.6)
        assert not batch.read_namespaced_job("j", "default").status.start_time
        api.close()
    finally:
        handle.sandbox.stop_thread()


def test_pod_becomes_ready(api):
    core = kubernetes.client.CoreV1Api(api)
    core.create_namespaced_pod("default", {"metadata": {"name": "p"}, "spec": {
        "containers": [{"name": "c", "image": "busybox"}]}})
    pod = wait_for(lambda: (p := core.read_namespaced_pod("p", "default")).status.phase == "Running" and p)
    assert any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions)
    assert pod.status.container_statuses[0].ready


def test_custom_resource_without_status_subresource_bumps_generation_on_status(api):
    crd = copy.deepcopy(CRD)
    crd["spec"]["versions"][0].pop("subresources")
    install_crd(api, crd)
    custom = kubernetes.client.CustomObjectsApi(api)
    args = ("test.example.com", "v1", "default", "widgets")
    custom.create_namespaced_custom_object(*args, {"apiVersion": "test.example.com/v1", "kind": "Widget",
                                                   "metadata": {"name": "w"}, "spec": {"size": 1},
                                                   "status": {"phase": "kept"}})
    obj = custom.patch_namespaced_custom_object(*args, "w", {"status": {"phase": "new"}})
    assert obj["status"] == {"phase": "new"} and obj["metadata"]["generation"] == 2


def test_failing_deployment_never_becomes_available(api):
    apps = kubernetes.client.AppsV1Api(api)
    apps.create_namespaced_deployment("default", {
        "metadata": {"name": "bad", "annotations": {"sandbox.ansible-operator.dev/fail": "true"}},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "x"}}, "template": TEMPLATE}})
    d = wait_for(lambda: (d := apps.read_namespaced_deployment("bad", "default")).status.conditions and d)
    conds = {c.type: (c.status, c.reason) for c in d.status.conditions}
    assert conds["Available"] == ("False", "MinimumReplicasUnavailable")
    assert conds["Progressing"] == ("False", "ProgressDeadlineExceeded")
    assert d.status.unavailable_replicas == 2 and not d.status.available_replicas
