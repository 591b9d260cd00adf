"""Day-2 controller behaviour end to end: owned objects, self-healing, role status API, metrics,
leader election, run inspection.

These features don't depend on the executor, so they run with one (the warm one when enabled).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.request
from typing import Any

import kubernetes
import pytest

from .conftest import GROUP, HERE, KIND, VERSION, Cluster, default_watch, one_executor, wait_for

pytestmark = [pytest.mark.e2e, one_executor]

OWNED_WATCH = default_watch(role=str(HERE / "roles" / "owned"), finalizer=None,
                            watchClusterScopedResources=True)


def apps(cluster: Cluster) -> kubernetes.client.AppsV1Api:
    return kubernetes.client.AppsV1Api(cluster.api)


def rbac(cluster: Cluster) -> kubernetes.client.RbacAuthorizationV1Api:
    return kubernetes.client.RbacAuthorizationV1Api(cluster.api)


def read_or_none(fn, *args):  # type: ignore[no-untyped-def]
    try:
        return fn(*args)
    except kubernetes.client.ApiException as exc:
        if exc.status == 404:
            return None
        raise


def test_owned_objects_and_self_healing(cluster: Cluster, start_operator) -> None:
    op = start_operator([OWNED_WATCH])
    widget = cluster.create_widget("own", {"replicas": 2})
    cluster.wait_condition("own", "Successful")

    deployment = apps(cluster).read_namespaced_deployment("own-app", cluster.ns)
    refs = deployment.metadata.owner_references or []
    assert [(r.kind, r.name, r.uid) for r in refs] == [("Widget", "own", widget["metadata"]["uid"])]

    # the role's status module call sits next to the runner's own conditions
    own = cluster.get_widget("own")
    assert own is not None
    status = own["status"]
    assert status["appDeployment"] == "own-app"
    types = {c["type"]: c["status"] for c in status["conditions"]}
    assert types["AppReady"] == "True" and types["Successful"] == "True"

    # delete the Deployment by hand: the dependent watch re-queues the widget and the run re-creates it
    runs_before = len(op.runs("own"))
    apps(cluster).delete_namespaced_deployment("own-app", cluster.ns)
    recreated = wait_for(
        lambda: read_or_none(apps(cluster).read_namespaced_deployment, "own-app", cluster.ns), 60,
        what="deployment re-created")
    assert recreated.metadata.uid != deployment.metadata.uid
    # a new run did it (the Deployment controller's status writes may re-queue the widget once more, as on a
    # real cluster, so count runs that finished, not the runs at the moment the Deployment reappears)
    wait_for(lambda: len(op.runs("own")) > runs_before and op.runs("own")[-1]["result"] == "successful", 60,
             what="owner re-run after the Deployment was deleted")

    # the runner's and the role's conditions both survive the next run
    cluster.wait_condition("own", "Successful")
    own = cluster.get_widget("own")
    assert own is not None
    condition_types = {c["type"] for c in own["status"]["conditions"]}
    assert {"AppReady", "Successful", "Running", "Failure"} <= condition_types


def test_cluster_scoped_dependent_gets_annotations_and_requeues(cluster: Cluster, start_operator) -> None:
    op = start_operator([OWNED_WATCH])
    cluster.create_widget("cs", {})
    cluster.wait_condition("cs", "Successful")
    name = f"{cluster.ns}-cs-reader"
    role = rbac(cluster).read_cluster_role(name)
    assert role.metadata.annotations["operator-sdk/primary-resource"] == f"{cluster.ns}/cs"
    assert role.metadata.annotations["operator-sdk/primary-resource-type"] == f"Widget.{GROUP}"
    assert not role.metadata.owner_references

    # someone edits the ClusterRole: the owner runs again and puts the rules back
    runs_before = len(op.runs("cs"))
    rbac(cluster).patch_cluster_role(name, {"rules": [{"apiGroups": [""], "resources": ["secrets"],
                                                       "verbs": ["get"]}]})
    wait_for(lambda: len(op.runs("cs")) > runs_before and op.runs("cs")[-1]["result"] == "successful", 60,
             what="owner re-run after ClusterRole edit")
    rules = rbac(cluster).read_cluster_role(name).rules
    assert rules[0].resources == ["configmaps"]


def test_a_watched_kind_owned_by_another_requeues_its_owner(cluster: Cluster, start_operator) -> None:
    """Memcached is watched, and Widgets own Memcacheds: the Memcached has two streams (its own watch and
    the Widget's dependent watch), and an edit of the child reaches both: it runs, and its owner runs."""
    memcached = {"group": "cache.example.com", "version": "v1alpha1", "kind": "Memcached",
                 "role": str(HERE / "roles" / "sleepy"), "vars": {"seconds": 0}}
    op = start_operator([default_watch(role=str(HERE / "roles" / "parent_cr"), finalizer=None), memcached])
    cluster.create_widget("parent", {})
    cluster.wait_condition("parent", "Successful")
    custom = kubernetes.client.CustomObjectsApi(cluster.api)
    child = wait_for(lambda: read_or_none(custom.get_namespaced_custom_object, "cache.example.com",
                                          "v1alpha1", cluster.ns, "memcacheds", "parent-child"), 60,
                     what="the child")
    assert [r["kind"] for r in child["metadata"]["ownerReferences"]] == ["Widget"]
    def child_runs() -> list[dict[str, Any]]:
        where = op.artifacts / "cache.example.com" / "v1alpha1" / "Memcached" / cluster.ns / "parent-child"
        return [json.loads(f.read_text()) for f in sorted(where.glob("*/run.json"))]

    wait_for(lambda: [r for r in child_runs() if r.get("result") == "successful"], 60,
             what="the child's own run")

    parent_runs = len(op.runs("parent"))
    custom.patch_namespaced_custom_object("cache.example.com", "v1alpha1", cluster.ns, "memcacheds",
                                          "parent-child", {"spec": {"size": 3}})
    wait_for(lambda: len(op.runs("parent")) > parent_runs, 120,
             what="the owner re-queued by its child's edit", detail=lambda: op.logs()[-4000:])
    assert f"re-queue Widget {cluster.ns}/parent: dependent {cluster.ns}/parent-child" in op.logs()
    wait_for(lambda: any((r.get("generation") or 0) >= 2 for r in child_runs()), 120,
             what="the child's run of its edit")


def _metric(text: str, name: str, **labels: str) -> float:
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name + "{"):
            continue
        label_part = line[len(name) + 1:line.index("}")]
        pairs = dict(p.split("=", 1) for p in label_part.split(",") if p)
        if all(pairs.get(k, "").strip('"') == v for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def test_metrics_count_success_and_failure(cluster: Cluster, start_operator) -> None:
    op = start_operator([default_watch(finalizer=None)], "--metrics-bind-address", "127.0.0.1:0",
                        "--health-probe-bind-address", "127.0.0.1:0")
    port, health = op.port("/metrics"), op.port("/healthz")
    def http_ok(url: str) -> bool:
        try:
            return urllib.request.urlopen(url, timeout=2).status == 200
        except OSError:  # not listening yet, or 500 while not ready
            return False

    wait_for(lambda: http_ok(f"http://127.0.0.1:{health}/readyz"), 60, what="readyz")
    assert urllib.request.urlopen(f"http://127.0.0.1:{health}/healthz", timeout=2).read() == b"ok"
    cluster.create_widget("good", {"color": "x"})
    cluster.create_widget("broken", {"failMessage": "nope"})
    cluster.wait_condition("good", "Successful")
    cluster.wait_condition("broken", "Failure")

    def scrape() -> str:
        return urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()

    # controller-runtime's series, as on the SDK's /metrics, under the SDK's controller name
    controller = f"{KIND.lower()}-{VERSION.lower()}-controller"

    def done(text: str) -> float:  # a success asks for the reconcile period's resync
        return sum(_metric(text, "controller_runtime_reconcile_total", controller=controller, result=result)
                   for result in ("success", "requeue_after"))

    def both_counted() -> str | None:
        # A reconcile is counted when it returns, after its status write and its Event: the conditions
        # can be seen before (on a real API server, by a whole Event write).
        text = scrape()
        return text if (_metric(text, "ansible_operator_runs_total", result="failed") >= 1
                        and _metric(text, "controller_runtime_reconcile_total", controller=controller,
                                    result="error") >= 1
                        and done(text) >= 1) else None

    text = wait_for(both_counted, 30, what="the failure and the success counted")
    assert _metric(text, "ansible_operator_runs_total", result="successful") == 1
    assert _metric(text, "ansible_operator_runs_total", result="failed") >= 1
    assert _metric(text, "ansible_operator_runs_started_total") >= 2
    assert _metric(text, "ansible_operator_run_duration_seconds_count") >= 2
    assert _metric(text, "controller_runtime_reconcile_total", controller=controller, result="error") >= 1
    assert done(text) >= 1
    assert _metric(text, "controller_runtime_reconcile_errors_total", controller=controller) >= 1
    assert _metric(text, "controller_runtime_reconcile_time_seconds_count", controller=controller) >= 2
    assert _metric(text, "controller_runtime_max_concurrent_reconciles", controller=controller) >= 1
    assert _metric(text, "workqueue_adds_total", controller=controller) >= 2  # its name label is the same
    assert _metric(text, "workqueue_retries_total", controller=controller) >= 1
    assert f'workqueue_depth{{controller="{controller}",name="{controller}"}}' in text


def test_leader_election_one_acts_and_the_other_takes_over(cluster: Cluster, start_operator) -> None:
    flags = (
        "--leader-elect",
        "--leader-election-id",
        "widgets-lock",
        "--leader-election-namespace",
        cluster.ns,
        "--leader-elect-lease-duration",
        "4s",
        "--leader-elect-renew-deadline",
        "3s",
        "--leader-elect-retry-period",
        "0.5s",
    )
    watch = [default_watch(finalizer=None)]
    a = start_operator(watch, *flags, name="a")
    b = start_operator(watch, *flags, name="b")
    coordination = kubernetes.client.CoordinationV1Api(cluster.api)
    lease = wait_for(lambda: read_or_none(coordination.read_namespaced_lease, "widgets-lock", cluster.ns), 60,
                     what="lease")
    holder = wait_for(
        lambda: coordination.read_namespaced_lease("widgets-lock", cluster.ns).spec.holder_identity,
        30,
        what="a holder",
    )

    cluster.create_widget("first", {})
    cluster.wait_condition("first", "Successful")
    ran = [op for op in (a, b) if op.runs("first")]
    assert len(ran) == 1, "exactly one replica reconciles"
    leader, standby = ran[0], (b if ran[0] is a else a)
    assert str(leader.proc.pid) in holder

    leader.proc.send_signal(signal.SIGKILL)
    leader.proc.wait(10)
    killed_at = time.monotonic()
    cluster.create_widget("second", {})
    cluster.wait_condition("second", "Successful", timeout=60)
    assert standby.runs("second") and not leader.runs("second")
    # lease 4 s + retry period: the stand-by acquires within the lease duration (+ one run of the role)
    assert time.monotonic() - killed_at < 4 + 1 + 20
    assert lease is not None


def test_runs_command_shows_the_failed_task(cluster: Cluster, start_operator) -> None:
    op = start_operator([default_watch(finalizer=None)])
    cluster.create_widget("oops", {"failMessage": "quota exceeded"})
    cluster.wait_condition("oops", "Failure")
    wait_for(lambda: op.runs("oops") and op.runs("oops")[0]["result"] == "failed", 30)
    listing = subprocess.run(
        [
            sys.executable,
            "-m",
            "ansible_operator",
            "runs",
            "--artifacts-dir",
            str(op.artifacts),
            "--namespace",
            cluster.ns,
            "Widget/oops",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert listing.returncode == 0, listing.stderr
    assert "Fail when asked to" in listing.stdout and "quota exceeded" in listing.stdout
    # the failed run (a retry may already be running: the CR is requeued with backoff)
    run_id = next(r["run_id"] for r in op.runs("oops") if r["result"] == "failed")
    shown = subprocess.run(
        [
            sys.executable,
            "-m",
            "ansible_operator",
            "runs",
            "--artifacts-dir",
            str(op.artifacts),
            "--show",
            run_id,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shown.returncode == 0, shown.stderr
    assert "Fail when asked to" in shown.stdout and "quota exceeded" in shown.stdout
    as_json = subprocess.run([sys.executable, "-m", "ansible_operator", "runs", "--artifacts-dir",
                              str(op.artifacts), "-o", "json"], capture_output=True, text=True, timeout=300)
    failed = [r for r in json.loads(as_json.stdout) if r["result"] == "failed"]
    assert failed and failed[0]["failed_task"]["name"].endswith("Fail when asked to")
