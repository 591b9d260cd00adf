"""Simulated controllers: Deployment/StatefulSet/Job/PVC/CronJob status as a healthy cluster would write
it."""

from __future__ import annotations

import copy
import time
from typing import Any

import kubernetes
import pytest

from ansible_operator_sandbox.testing import SandboxHandle, call_api, start_in_thread

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
    sts = wait_for(
        lambda: (s := apps.read_namespaced_stateful_set("db", "default")).status.ready_replicas == 2 and s
    )
    assert sts.status.observed_generation == sts.metadata.generation
    assert sts.status.current_revision == sts.status.update_revision
    # a replica is ready only once its claim is Bound (its Pod could not be scheduled before)
    pvcs = core.list_namespaced_persistent_volume_claim("default").items
    assert sorted(p.metadata.name for p in pvcs) == ["data-db-0", "data-db-1"]
    assert [p.status.phase for p in pvcs] == ["Bound", "Bound"]
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
    batch.create_namespaced_job(
        "default",
        {
            "metadata": {"name": "bad", "annotations": {"sandbox.ansible-operator.dev/fail": "true"}},
            "spec": {
                "backoffLimit": 1,
                "template": {
                    "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}
                },
            },
        },
    )
    job = wait_for(lambda: (j := batch.read_namespaced_job("bad", "default")).status.failed and j)
    assert any(c.type == "Failed" and c.status == "True" for c in job.status.conditions)
    assert not job.status.succeeded


def test_cronjob_creates_owned_jobs(api):
    batch = kubernetes.client.BatchV1Api(api)
    cj = batch.create_namespaced_cron_job(
        "default",
        {
            "metadata": {"name": "tick"},
            "spec": {
                "schedule": "* * * * * */1",  # every second: croniter seconds field (sandbox extension)
                "jobTemplate": {
                    "spec": {
                        "template": {
                            "spec": {
                                "restartPolicy": "Never",
                                "containers": [{"name": "c", "image": "busybox"}],
                            }
                        }
                    }
                },
            },
        },
    )
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


def _deploy(name: str = "web", image: str = "nginx:1", **spec):
    return {
        "metadata": {"name": name},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": name}},
            **spec,
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "c", "image": image}]},
            },
        },
    }


def _replica_sets(apps, name: str) -> dict[str, tuple[int, int]]:
    """ReplicaSet name -> (revision, replicas) for the Deployment ``name``."""
    return {
        rs.metadata.name: (
            int(rs.metadata.annotations["deployment.kubernetes.io/revision"]),
            rs.spec.replicas,
        )
        for rs in apps.list_namespaced_replica_set("default").items
        if rs.metadata.owner_references and rs.metadata.owner_references[0].name == name
    }


def test_deployment_replicasets_revisions_and_rollback(api):
    apps = kubernetes.client.AppsV1Api(api)
    apps.create_namespaced_deployment("default", _deploy())
    wait_for(lambda: len(_replica_sets(apps, "web")) == 1)
    (first, (rev, replicas)), = _replica_sets(apps, "web").items()
    rs = apps.read_namespaced_replica_set(first, "default")
    h = rs.metadata.labels["pod-template-hash"]
    assert first == f"web-{h}" and rev == 1 and replicas == 2
    assert rs.spec.selector.match_labels == {"app": "web", "pod-template-hash": h}
    assert rs.metadata.owner_references[0].kind == "Deployment" and rs.metadata.owner_references[0].controller
    wait_for(lambda: apps.read_namespaced_deployment("web", "default").metadata.annotations.get(
        "deployment.kubernetes.io/revision") == "1")
    apps.patch_namespaced_deployment("web", "default", {"spec": {"template": {"spec": {"containers": [
        {"name": "c", "image": "nginx:2"}]}}}})
    sets = wait_for(lambda: s if len(s := _replica_sets(apps, "web")) == 2 and s[first] == (1, 0) else None)
    second = next(n for n in sets if n != first)
    assert sets[second] == (2, 2)
    wait_for(lambda: (d := apps.read_namespaced_deployment("web", "default")).metadata.annotations.get(
        "deployment.kubernetes.io/revision") == "2" and d.status.updated_replicas == 2 and d)
    # kubernetes.core k8s_rollback: the previous ReplicaSet's template (without the hash label) back in place
    prev = api.sanitize_for_serialization(apps.read_namespaced_replica_set(first, "default"))
    template = prev["spec"]["template"]
    del template["metadata"]["labels"]["pod-template-hash"]
    call_api(
        api,
        "PATCH",
        "/apis/apps/v1/namespaces/default/deployments/web",
        [
            {"op": "replace", "path": "/spec/template", "value": template},
            {
                "op": "replace",
                "path": "/metadata/annotations",
                "value": {"deployment.kubernetes.io/revision": "1"},
            },
        ],
        content_type="application/json-patch+json",
    )
    sets = wait_for(lambda: s if (s := _replica_sets(apps, "web")).get(first) == (3, 2) else None)
    assert sets[second] == (2, 0)
    assert apps.read_namespaced_replica_set(first, "default").metadata.annotations[
        "deployment.kubernetes.io/revision-history"] == "1"
    wait_for(lambda: apps.read_namespaced_deployment("web", "default").metadata.annotations.get(
        "deployment.kubernetes.io/revision") == "3")


def test_deployment_revision_history_limit(api):
    apps = kubernetes.client.AppsV1Api(api)
    apps.create_namespaced_deployment("default", _deploy("h", revisionHistoryLimit=1))
    for image in ("nginx:2", "nginx:3"):
        wait_for(lambda: apps.read_namespaced_deployment("h", "default").status.updated_replicas == 2)
        apps.patch_namespaced_deployment("h", "default", {"spec": {"template": {"spec": {"containers": [
            {"name": "c", "image": image}]}}}})
        wait_for(lambda: (d := apps.read_namespaced_deployment("h", "default")).status.observed_generation
                 == d.metadata.generation)
    sets = wait_for(
        lambda: s if sorted((s := _replica_sets(apps, "h")).values()) == [(2, 0), (3, 2)] else None
    )
    assert len(sets) == 2


def test_paused_deployment_reports_paused_and_only_scales(api):
    apps = kubernetes.client.AppsV1Api(api)
    apps.create_namespaced_deployment("default", _deploy("p"))
    wait_for(lambda: _replica_sets(apps, "p") and apps.read_namespaced_deployment("p", "default").status.
             ready_replicas == 2)
    apps.patch_namespaced_deployment("p", "default", {"spec": {"paused": True, "replicas": 3, "template": {
        "spec": {"containers": [{"name": "c", "image": "nginx:9"}]}}}})

    def paused():
        d = apps.read_namespaced_deployment("p", "default")
        conds = {c.type: c for c in d.status.conditions or []}
        return d.status.observed_generation == d.metadata.generation and conds["Progressing"].reason == \
            "DeploymentPaused" and d
    d = wait_for(paused)
    progressing = next(c for c in d.status.conditions if c.type == "Progressing")
    assert progressing.status == "Unknown" and progressing.message == "Deployment is paused"
    assert not d.status.updated_replicas  # no ReplicaSet for the new template while paused
    sets = wait_for(lambda: s if list((s := _replica_sets(apps, "p")).values()) == [(1, 3)] else None)
    assert len(sets) == 1
    apps.patch_namespaced_deployment("p", "default", {"spec": {"paused": False}})
    wait_for(lambda: sorted(_replica_sets(apps, "p").values()) == [(1, 0), (2, 3)])


def test_statefulset_and_daemonset_controller_revisions(api):
    apps = kubernetes.client.AppsV1Api(api)
    apps.create_namespaced_stateful_set("default", {"metadata": {"name": "s"}, "spec": {
        "serviceName": "s", "selector": {"matchLabels": {"app": "x"}}, "template": TEMPLATE}})
    sts = wait_for(
        lambda: (s := apps.read_namespaced_stateful_set("s", "default")).status.current_revision and s
    )
    crs = apps.list_namespaced_controller_revision("default").items
    assert [c.metadata.name for c in crs] == [sts.status.current_revision] and crs[0].revision == 1
    assert crs[0].data["spec"]["template"]["$patch"] == "replace"
    apps.patch_namespaced_stateful_set("s", "default", {"spec": {"template": {"metadata": {"labels": {
        "app": "x", "v": "2"}}}}})
    sts = wait_for(lambda: (s := apps.read_namespaced_stateful_set("s", "default")).status.update_revision !=
                   crs[0].metadata.name and s)
    assert sorted(c.revision for c in apps.list_namespaced_controller_revision("default").items) == [1, 2]
    apps.create_namespaced_daemon_set("default", {"metadata": {"name": "ds"}, "spec": {
        "selector": {"matchLabels": {"app": "x"}}, "template": TEMPLATE}})

    def ds_revisions():
        return [c for c in apps.list_namespaced_controller_revision("default").items
                if c.metadata.owner_references[0].kind == "DaemonSet"]
    rev = wait_for(lambda: ds_revisions() or None)[0]
    assert rev.metadata.annotations["deprecated.daemonset.template.generation"] == "1"
    assert rev.metadata.labels["controller-revision-hash"] == rev.metadata.name.rpartition("-")[2]
    # kubernetes.core k8s_rollback for a DaemonSet: strategic-merge the previous revision's data back
    apps.patch_namespaced_daemon_set("ds", "default", {"spec": {"template": {"metadata": {"labels": {
        "app": "x", "v": "2"}}}}})
    wait_for(lambda: len(ds_revisions()) == 2)
    apps.patch_namespaced_daemon_set("ds", "default", rev.data)
    wait_for(lambda: (r := [c for c in ds_revisions() if c.metadata.name == rev.metadata.name])
             and r[0].revision == 3 and r[0])
    # the DaemonSet's template generation (what k8s_rollback compares with the revisions') counts template
    # changes
    ds = apps.read_namespaced_daemon_set("ds", "default")
    assert ds.metadata.annotations["deprecated.daemonset.template.generation"] == "3"
    apps.patch_namespaced_daemon_set("ds", "default", {"metadata": {"labels": {"only": "metadata"}}})
    assert apps.read_namespaced_daemon_set("ds", "default").metadata.annotations[
        "deprecated.daemonset.template.generation"] == "3"


def test_replication_controller_is_simulated_like_a_replicaset(api):
    core = kubernetes.client.CoreV1Api(api)
    core.create_namespaced_replication_controller("default", {"metadata": {"name": "rc"}, "spec": {
        "replicas": 2, "template": TEMPLATE}})
    rc = wait_for(lambda: (r := core.read_namespaced_replication_controller("rc", "default")).status.
                  ready_replicas == 2 and r)
    assert rc.status.observed_generation == rc.metadata.generation
    core.patch_namespaced_replication_controller_scale("rc", "default", {"spec": {"replicas": 0}})
    wait_for(lambda: not core.read_namespaced_replication_controller("rc", "default").status.replicas)
    assert core.read_namespaced_replication_controller_scale("rc", "default").status.selector == "app=x"


def test_cluster_objects_namespaces_node_and_kubernetes_service(api):
    core = kubernetes.client.CoreV1Api(api)
    core.create_namespace({"metadata": {"name": "fresh"}})
    sa = wait_for(lambda: [s for s in core.list_namespaced_service_account("fresh").items
                           if s.metadata.name == "default"])
    assert sa
    cm = wait_for(lambda: [c for c in core.list_namespaced_config_map("fresh").items
                           if c.metadata.name == "kube-root-ca.crt"])[0]
    assert cm.data["ca.crt"].startswith("-----BEGIN CERTIFICATE-----")
    # the controllers put back what is deleted or changed
    core.delete_namespaced_service_account("default", "fresh")
    wait_for(lambda: core.read_namespaced_service_account("default", "fresh"))
    core.patch_namespaced_config_map("kube-root-ca.crt", "fresh", {"data": {"ca.crt": "tampered"}})
    wait_for(lambda: core.read_namespaced_config_map("kube-root-ca.crt", "fresh").data == cm.data)
    svc = core.read_namespaced_service("kubernetes", "default")
    assert svc.spec.cluster_ip == "10.96.0.1" and svc.spec.ports[0].port == 443
    node = core.read_node("sandbox-node")
    assert {c.type: c.status for c in node.status.conditions}["Ready"] == "True"
    core.create_namespaced_pod("default", {"metadata": {"name": "p"}, "spec": TEMPLATE["spec"]})
    pod = wait_for(lambda: (p := core.read_namespaced_pod("p", "default")).status.phase == "Running" and p)
    assert pod.spec.node_name == node.metadata.name
    assert pod.status.host_ip == next(a.address for a in node.status.addresses if a.type == "InternalIP")
    # a terminating namespace gets nothing new, and goes away
    core.delete_namespace("fresh")
    wait_for(lambda: "fresh" not in [n.metadata.name for n in core.list_namespace().items])


def test_rollout_stuck_while_the_service_account_is_missing(api):
    apps = kubernetes.client.AppsV1Api(api)
    core = kubernetes.client.CoreV1Api(api)
    core.create_namespaced_service_account("default", {"metadata": {"name": "robot"}})
    body = _deploy("sa", image="nginx:1")
    body["spec"]["replicas"] = 1
    body["spec"]["template"]["spec"]["serviceAccountName"] = "robot"
    apps.create_namespaced_deployment("default", body)
    wait_for(lambda: apps.read_namespaced_deployment("sa", "default").status.updated_replicas == 1)
    core.delete_namespaced_service_account("robot", "default")
    apps.patch_namespaced_deployment("sa", "default", {"spec": {"template": {"spec": {"containers": [
        {"name": "c", "image": "nginx:2"}]}}}})

    def stuck():
        d = apps.read_namespaced_deployment("sa", "default")
        conds = {c.type: c for c in d.status.conditions or []}
        return d.status.observed_generation == d.metadata.generation and "ReplicaFailure" in conds and d
    d = wait_for(stuck)
    failure = next(c for c in d.status.conditions if c.type == "ReplicaFailure")
    assert failure.reason == "FailedCreate" and failure.message == (
        'pods "sa-" is forbidden: error looking up service account default/robot:'
        ' serviceaccount "robot" not found'
    )
    assert (
        not d.status.updated_replicas and d.status.available_replicas == 1
    )  # the old ReplicaSet still serves
    assert (
        d.status.unavailable_replicas == 1
    )  # the new ReplicaSet's replica (kubernetes.core's wait fails on it)
    core.create_namespaced_service_account("default", {"metadata": {"name": "robot"}})
    wait_for(lambda: (d := apps.read_namespaced_deployment("sa", "default")).status.updated_replicas == 1
             and not any(c.type == "ReplicaFailure" for c in d.status.conditions))
    wait_for(lambda: sorted(_replica_sets(apps, "sa").values()) == [(1, 0), (2, 1)])


def test_controllers_create_and_remove_their_pods(api):
    apps = kubernetes.client.AppsV1Api(api)
    core = kubernetes.client.CoreV1Api(api)
    batch = kubernetes.client.BatchV1Api(api)

    def pods(selector: str) -> list:
        return core.list_namespaced_pod("default", label_selector=selector).items
    apps.create_namespaced_deployment("default", _deploy("pw"))
    running = wait_for(lambda: p if len(p := [x for x in pods("app=pw") if x.status.phase == "Running"]) == 2
                       else None)
    rs_name = running[0].metadata.owner_references[0].name
    assert all(
        x.metadata.name.startswith(rs_name + "-") and x.metadata.labels["pod-template-hash"] for x in running
    )
    assert running[0].spec.node_name == "sandbox-node"
    core.delete_namespaced_pod(running[0].metadata.name, "default")  # the ReplicaSet replaces it
    wait_for(lambda: len(p := pods("app=pw")) == 2 and running[0].metadata.name not in
             [x.metadata.name for x in p])
    apps.patch_namespaced_deployment_scale("pw", "default", {"spec": {"replicas": 1}})
    wait_for(lambda: len(pods("app=pw")) == 1)
    apps.create_namespaced_stateful_set("default", {"metadata": {"name": "ss"}, "spec": {
        "replicas": 2, "serviceName": "ss", "selector": {"matchLabels": {"app": "ss"}},
        "template": {"metadata": {"labels": {"app": "ss"}}, "spec": TEMPLATE["spec"]}}})
    names = wait_for(lambda: n if (n := sorted(x.metadata.name for x in pods("app=ss"))) == ["ss-0", "ss-1"]
                     else None)
    assert names == ["ss-0", "ss-1"]
    apps.create_namespaced_daemon_set("default", {"metadata": {"name": "dd"}, "spec": {
        "selector": {"matchLabels": {"app": "dd"}},
        "template": {"metadata": {"labels": {"app": "dd"}}, "spec": TEMPLATE["spec"]}}})
    wait_for(lambda: len(pods("app=dd")) == 1)
    batch.create_namespaced_job("default", {"metadata": {"name": "jj"}, "spec": {"template": {"spec": {
        "restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}}}})
    wait_for(lambda: [x for x in pods("job-name=jj") if x.status.phase == "Succeeded"])
    # deleting the owner collects the pods (garbage collector)
    apps.delete_namespaced_daemon_set("dd", "default")
    wait_for(lambda: not pods("app=dd"))


def test_services_get_endpoints_and_slices_of_ready_pods(api):
    apps = kubernetes.client.AppsV1Api(api)
    core = kubernetes.client.CoreV1Api(api)
    disc = kubernetes.client.DiscoveryV1Api(api)
    body = _deploy("ep")
    body["spec"]["template"]["spec"]["containers"][0]["ports"] = [{"name": "http", "containerPort": 8080}]
    apps.create_namespaced_deployment("default", body)
    core.create_namespaced_service("default", {"metadata": {"name": "ep"}, "spec": {
        "selector": {"app": "ep"}, "ports": [{"name": "web", "port": 80, "targetPort": "http"}]}})
    ep = wait_for(lambda: (e := [x for x in core.list_namespaced_endpoints("default").items
                                 if x.metadata.name == "ep"]) and e[0].subsets
                  and len(e[0].subsets[0].addresses) == 2 and e[0])
    assert ep.subsets[0].ports[0].port == 8080 and ep.subsets[0].ports[0].name == "web"
    pod_ips = {p.status.pod_ip for p in core.list_namespaced_pod("default", label_selector="app=ep").items}
    assert {a.ip for a in ep.subsets[0].addresses} == pod_ips
    slices = disc.list_namespaced_endpoint_slice(
        "default", label_selector="kubernetes.io/service-name=ep"
    ).items
    assert len(slices) == 1 and {e.addresses[0] for e in slices[0].endpoints} == pod_ips
    apps.patch_namespaced_deployment_scale("ep", "default", {"spec": {"replicas": 0}})
    wait_for(lambda: not core.read_namespaced_endpoints("ep", "default").subsets)


def test_kubectl_rollout_history_undo_and_restart(sandbox):
    import subprocess

    env = sandbox.kubectl_env()

    def kubectl(*args: str) -> str:
        proc = subprocess.run(["kubectl", *args], env=env, capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout
    kubectl("create", "deployment", "web", "--image=nginx:1", "--replicas=2")
    kubectl("rollout", "status", "deployment/web", "--timeout=30s")
    kubectl("set", "image", "deployment/web", "nginx=nginx:2")
    kubectl("rollout", "status", "deployment/web", "--timeout=30s")
    kubectl("rollout", "undo", "deployment/web")  # back to revision 1's ReplicaSet, as revision 3
    kubectl("rollout", "status", "deployment/web", "--timeout=30s")
    history = kubectl("rollout", "history", "deployment/web").split("\n")
    assert [line.split()[0] for line in history[2:] if line.strip()] == ["2", "3"]
    assert len(kubectl("get", "rs", "-o", "name").split()) == 2
    assert "nginx:1" in kubectl(
        "get", "deployment", "web", "-o", "jsonpath={.spec.template.spec.containers[0].image}"
    )


def test_pod_disruption_budget_status_follows_the_pods(api):
    apps = kubernetes.client.AppsV1Api(api)
    policy = kubernetes.client.PolicyV1Api(api)
    apps.create_namespaced_deployment("default", _deploy("pdb"))  # 2 replicas
    policy.create_namespaced_pod_disruption_budget("default", {"metadata": {"name": "pdb"}, "spec": {
        "minAvailable": 1, "selector": {"matchLabels": {"app": "pdb"}}}})
    pdb = wait_for(lambda: (p := policy.read_namespaced_pod_disruption_budget("pdb", "default")).status
                   .current_healthy == 2 and p)
    assert (pdb.status.expected_pods, pdb.status.desired_healthy, pdb.status.disruptions_allowed) == (2, 1, 1)
    assert pdb.status.conditions[0].type == "DisruptionAllowed" and pdb.status.conditions[0].status == "True"
    policy.patch_namespaced_pod_disruption_budget("pdb", "default", {"spec": {"minAvailable": "100%"}})
    pdb = wait_for(lambda: (p := policy.read_namespaced_pod_disruption_budget("pdb", "default")).status
                   .observed_generation == p.metadata.generation and p)
    assert pdb.status.disruptions_allowed == 0 and pdb.status.conditions[0].reason == "InsufficientPods"


def test_eviction_respects_disruption_budgets_and_kubectl_drain(api, sandbox):
    import subprocess

    apps = kubernetes.client.AppsV1Api(api)
    core = kubernetes.client.CoreV1Api(api)
    policy = kubernetes.client.PolicyV1Api(api)
    apps.create_namespaced_deployment("default", _deploy("ev"))  # 2 replicas
    policy.create_namespaced_pod_disruption_budget("default", {"metadata": {"name": "ev"}, "spec": {
        "minAvailable": 1, "selector": {"matchLabels": {"app": "ev"}}}})
    wait_for(
        lambda: policy.read_namespaced_pod_disruption_budget("ev", "default").status.disruptions_allowed == 1
    )
    first, second = sorted(
        p.metadata.name for p in core.list_namespaced_pod("default", label_selector="app=ev").items
    )
    core.create_namespaced_pod_eviction(
        first, "default", {"metadata": {"name": first, "namespace": "default"}}
    )
    with pytest.raises(
        kubernetes.client.ApiException
    ) as e:  # the budget is spent until a replacement is ready
        core.create_namespaced_pod_eviction(second, "default", {"metadata": {"name": second}})
    assert e.value.status == 429 and "disruption budget" in e.value.body
    wait_for(
        lambda: policy.read_namespaced_pod_disruption_budget("ev", "default").status.disruptions_allowed == 1
    )
    core.create_namespaced_pod_eviction(second, "default", {"metadata": {"name": second}})
    wait_for(
        lambda: policy.read_namespaced_pod_disruption_budget("ev", "default").status.disruptions_allowed == 1
    )
    env = sandbox.kubectl_env()
    # Draining the only node: one pod may go, its replacement finds no node (cordoned), so the budget
    # never allows the second eviction and the drain gives up, as on a real one-node cluster.
    drain = subprocess.run(
        ["kubectl", "drain", "sandbox-node", "--ignore-daemonsets", "--pod-selector=app=ev", "--timeout=8s"],
        env=env, capture_output=True, text=True, timeout=90,
    )
    try:
        assert drain.returncode != 0 and "violate the pod's disruption budget" in drain.stderr, drain.stderr
        assert core.read_node("sandbox-node").spec.unschedulable is True
        pods = core.list_namespaced_pod("default", label_selector="app=ev").items
        assert sorted(p.status.phase for p in pods) == ["Pending", "Running"]
    finally:
        subprocess.run(["kubectl", "uncordon", "sandbox-node"], env=env, check=True, capture_output=True,
                       timeout=60)
    wait_for(lambda: sorted(p.status.phase for p in core.list_namespaced_pod(
        "default", label_selector="app=ev").items) == ["Running", "Running"])


def test_a_cordoned_node_takes_no_new_pods_until_uncordoned(api):
    """kubectl cordon/drain: the node lifecycle controller taints the node, the scheduler leaves new pods
    Pending (PodScheduled=False, Unschedulable, a FailedScheduling Event) unless they tolerate the taint;
    uncordon schedules them."""
    core = kubernetes.client.CoreV1Api(api)
    node = core.list_node().items[0].metadata.name
    taint_key = "node.kubernetes.io/unschedulable"
    core.patch_node(node, {"spec": {"unschedulable": True}})
    try:
        wait_for(lambda: [t.key for t in core.read_node(node).spec.taints or []] == [taint_key])
        core.create_namespaced_pod("default", {"metadata": {"name": "waits"}, "spec": TEMPLATE["spec"]})
        tolerant: dict[str, Any] = copy.deepcopy(TEMPLATE["spec"])  # type: ignore[arg-type]
        tolerant["tolerations"] = [{"key": taint_key, "operator": "Exists", "effect": "NoSchedule"}]
        core.create_namespaced_pod("default", {"metadata": {"name": "tolerates"}, "spec": tolerant})
        wait_for(lambda: core.read_namespaced_pod("tolerates", "default").status.phase == "Running")
        pod = wait_for(lambda: (p := core.read_namespaced_pod("waits", "default")).status.conditions and p)
        (condition,) = pod.status.conditions
        assert (pod.status.phase, pod.spec.node_name) == ("Pending", None)
        assert (condition.type, condition.status) == ("PodScheduled", "False")
        assert condition.reason == "Unschedulable"
        assert "1 node(s) were unschedulable" in condition.message
        events = core.list_namespaced_event("default", field_selector="involvedObject.name=waits").items
        assert [(e.type, e.reason) for e in events] == [("Warning", "FailedScheduling")]
    finally:
        core.patch_node(node, {"spec": {"unschedulable": None}})
    pod = wait_for(lambda: (p := core.read_namespaced_pod("waits", "default")).status.phase == "Running"
                   and p)
    assert pod.spec.node_name == node
    wait_for(lambda: not core.read_node(node).spec.taints)
