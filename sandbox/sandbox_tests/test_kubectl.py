"""Real kubectl (client 1.32) against the sandbox, as users and scripts drive it."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from ansible_operator_sandbox.testing import SandboxHandle

from .helpers import CRD, widget

# No skip when kubectl is missing: ./dev.sh (and so .ci/run) installs Debian's kubernetes-client then.

DEPLOYMENT = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
              "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                       "template": {"metadata": {"labels": {"app": "web"}},
                                    "spec": {"containers": [{"name": "web", "image": "nginx"}]}}}}


class Kubectl:
    def __init__(self, sandbox: SandboxHandle, tmp: Path) -> None:
        self.env = sandbox.kubectl_env()
        self.tmp = tmp

    def run(self, *args: str, check: bool = True, input: str | None = None, timeout: float = 30
            ) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(["kubectl", *args], env=self.env, capture_output=True, text=True, input=input,
                              timeout=timeout)
        if check and proc.returncode != 0:
            raise AssertionError(
                f"kubectl {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
            )
        return proc

    def apply(self, *docs: dict) -> str:
        path = self.tmp / f"apply-{time.monotonic_ns()}.yaml"
        path.write_text(yaml.safe_dump_all(docs))
        return self.run("apply", "-f", str(path)).stdout

    def json(self, *args: str) -> dict:
        return json.loads(self.run(*args, "-o", "json").stdout)


@pytest.fixture
def kubectl(sandbox: SandboxHandle, tmp_path: Path) -> Kubectl:
    return Kubectl(sandbox, tmp_path)


def install(kubectl: Kubectl) -> None:
    assert "created" in kubectl.apply(CRD)
    kubectl.run("wait", "--for=condition=Established", f"crd/{CRD['metadata']['name']}", "--timeout=10s")


def test_apply_crd_and_cr_get_and_api_resources(kubectl: Kubectl):
    install(kubectl)
    out = kubectl.run("api-resources").stdout
    assert any(line.split()[:2] == ["widgets", "wd"] for line in out.splitlines())
    assert "widget.test.example.com/w1 created" in kubectl.apply(widget("w1", size=3))
    assert "widget.test.example.com/w1 unchanged" in kubectl.apply(widget("w1", size=3))
    obj = kubectl.json("get", "widget", "w1")
    assert obj["spec"] == {"size": 3, "color": "blue"}
    assert yaml.safe_load(kubectl.run("get", "wd", "w1", "-o", "yaml").stdout)["metadata"]["name"] == "w1"
    # printer columns from additionalPrinterColumns
    kubectl.run(
        "patch", "widget", "w1", "--subresource=status", "--type=merge", "-p", '{"status":{"phase":"Ready"}}'
    )
    lines = kubectl.run("get", "widgets").stdout.splitlines()
    assert lines[0].split() == ["NAME", "SIZE", "PHASE"]
    assert lines[1].split() == ["w1", "3", "Ready"]
    assert "w1" in kubectl.run("get", "widgets", "-A").stdout
    # a changed CR: kubectl apply sends a JSON merge patch, because the CR's published PATCH accepts no
    # strategic merge patch (it did, and the sandbox then refused kubectl's strategic patch with 415)
    assert "widget.test.example.com/w1 configured" in kubectl.apply(widget("w1", size=4))
    assert kubectl.json("get", "widget", "w1")["spec"]["size"] == 4


def test_apply_validation_errors_are_reported(kubectl: Kubectl):
    install(kubectl)
    bad = widget("bad", size=0)
    proc = subprocess.run(["kubectl", "apply", "-f", "-"], env=kubectl.env, input=yaml.safe_dump(bad),
                          capture_output=True, text=True)
    assert proc.returncode != 0
    assert 'The Widget "bad" is invalid: spec.size: Invalid value: 0' in proc.stderr
    unknown = widget("odd")
    unknown["spec"]["bogus"] = 1
    proc = subprocess.run(["kubectl", "apply", "-f", "-"], env=kubectl.env, input=yaml.safe_dump(unknown),
                          capture_output=True, text=True)
    assert proc.returncode != 0 and 'unknown field "spec.bogus"' in proc.stderr


def test_get_watch_events(kubectl: Kubectl, sandbox: SandboxHandle):
    install(kubectl)
    watch = subprocess.Popen(
        ["kubectl", "get", "widgets", "-w", "--output-watch-events", "-o", "json", "--request-timeout=8s"],
        env=kubectl.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        time.sleep(1.0)  # let the watch start
        kubectl.apply(widget("w", size=1))
        kubectl.run("patch", "widget", "w", "--type=merge", "-p", '{"spec":{"size":2}}')
        kubectl.run("delete", "widget", "w")
        time.sleep(0.5)
    finally:
        watch.terminate()
        out, _ = watch.communicate(timeout=10)
    decoder = json.JSONDecoder()
    events, pos = [], 0
    out = out.strip()
    while pos < len(out):
        obj, pos = decoder.raw_decode(out, pos)
        events.append(obj)
        while pos < len(out) and out[pos].isspace():
            pos += 1
    assert [(e["type"], e["object"]["spec"]["size"]) for e in events] == [("ADDED", 1), ("MODIFIED", 2),
                                                                          ("DELETED", 2)]


def test_patch_types(kubectl: Kubectl):
    install(kubectl)
    kubectl.apply(widget("w", size=1), DEPLOYMENT)
    kubectl.run("patch", "widget", "w", "--type=merge", "-p", '{"spec":{"size":4}}')
    kubectl.run(
        "patch", "widget", "w", "--type=json", "-p", '[{"op":"replace","path":"/spec/size","value":5}]'
    )
    assert kubectl.json("get", "widget", "w")["spec"]["size"] == 5
    proc = kubectl.run("patch", "widget", "w", "--type=strategic", "-p", '{"spec":{"size":6}}', check=False)
    assert proc.returncode != 0 and "is not supported by test.example.com/v1, Kind=Widget" in proc.stderr
    # strategic merge on a Deployment merges containers by name
    kubectl.run("patch", "deployment", "web", "--type=strategic", "-p",
                '{"spec":{"template":{"spec":{"containers":[{"name":"web","image":"nginx:2"},'
                '{"name":"side","image":"busybox"}]}}}}')
    containers = kubectl.json("get", "deployment", "web")["spec"]["template"]["spec"]["containers"]
    assert {c["name"]: c["image"] for c in containers} == {"web": "nginx:2", "side": "busybox"}


def test_replace_with_stale_resource_version_conflicts(kubectl: Kubectl, tmp_path: Path):
    kubectl.apply(DEPLOYMENT)
    stale = kubectl.json("get", "deployment", "web")
    kubectl.run("scale", "deployment", "web", "--replicas=3")
    path = tmp_path / "stale.json"
    path.write_text(json.dumps(stale))
    proc = kubectl.run("replace", "-f", str(path), check=False)
    assert proc.returncode != 0
    assert (
        'Operation cannot be fulfilled on deployments.apps "web": the object has been modified; please apply '
        "your changes to the latest version and try again"
    ) in proc.stderr


def test_delete_with_finalizer_waits_for_removal(kubectl: Kubectl):
    kubectl.run("create", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
        "name": "held", "finalizers": ["example.com/hold"]}}))
    kubectl.run("delete", "configmap", "held", "--wait=false")
    obj = kubectl.json("get", "configmap", "held")
    assert obj["metadata"]["deletionTimestamp"]
    kubectl.run(
        "patch", "configmap", "held", "--type=json", "-p", '[{"op":"remove","path":"/metadata/finalizers"}]'
    )
    proc = kubectl.run("get", "configmap", "held", check=False)
    assert proc.returncode != 0 and "NotFound" in proc.stderr


def test_wait_for_deployment_available_and_apply_twice(kubectl: Kubectl):
    assert "deployment.apps/web created" in kubectl.apply(DEPLOYMENT)
    kubectl.run("wait", "--for=condition=Available", "deployment/web", "--timeout=20s")
    assert "deployment.apps/web unchanged" in kubectl.apply(DEPLOYMENT)
    kubectl.run("rollout", "status", "deployment/web", "--timeout=20s")
    lines = kubectl.run("get", "deployments").stdout.splitlines()
    assert lines[0].split() == ["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"]
    assert lines[1].split()[:4] == ["web", "2/2", "2", "2"]


def test_labels_selectors_and_namespaces(kubectl: Kubectl):
    kubectl.run("create", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "Namespace",
                                                       "metadata": {"name": "team"}}))
    for name, tier in (("a", "web"), ("b", "db"), ("c", "web")):
        kubectl.run("create", "-n", "team", "-f", "-", input=json.dumps({
            "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "labels": {"tier": tier}}}))
    names = kubectl.run("get", "cm", "-n", "team", "-l", "tier=web", "-o", "name").stdout.split()
    assert names == ["configmap/a", "configmap/c"]
    names = kubectl.run("get", "cm", "-n", "team", "-l", "tier,tier notin (web)", "-o", "name").stdout.split()
    assert names == ["configmap/b"]
    proc = kubectl.run("get", "cm", "-l", "tier in (", check=False)
    assert proc.returncode != 0
    kubectl.run("delete", "namespace", "team", "--timeout=20s")
    proc = kubectl.run("get", "namespace", "team", check=False)
    assert "NotFound" in proc.stderr


def test_imperative_create_commands(kubectl: Kubectl):
    # these typed kubectl commands send protobuf bodies
    kubectl.run("create", "namespace", "imp")
    kubectl.run("create", "configmap", "c", "-n", "imp", "--from-literal=a=b")
    kubectl.run("create", "secret", "generic", "s", "-n", "imp", "--from-literal=p=hunter2")
    kubectl.run("create", "serviceaccount", "robot", "-n", "imp")
    assert kubectl.json("get", "configmap", "c", "-n", "imp")["data"] == {"a": "b"}
    assert kubectl.json("get", "secret", "s", "-n", "imp")["data"] == {"p": "aHVudGVyMg=="}
    assert kubectl.json("get", "namespace", "imp")["status"]["phase"] == "Active"
    assert kubectl.json("get", "serviceaccount", "robot", "-n", "imp")["metadata"]["namespace"] == "imp"
    # authorization is not enforced; access reviews say so instead of 404
    assert kubectl.run("auth", "can-i", "create", "deployments").stdout.strip() == "yes"
