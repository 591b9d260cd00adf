"""Conformance: kubectl 1.32's imperative verbs and ``explain`` against the sandbox, with real-server results.

kubectl's typed commands send protobuf bodies; every object they create is read back as JSON and compared
with what kube-apiserver stores for the same command (kubectl's own fields plus the registry defaults).
One sandbox for the module; each test works in its own namespace.
"""

from __future__ import annotations

import base64
import datetime
import json
import subprocess
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

from ansible_operator_sandbox.testing import SandboxHandle, start_in_thread

from .helpers import CRD


class Kubectl:
    def __init__(self, sandbox: SandboxHandle, home: Path) -> None:
        self.env = dict(sandbox.kubectl_env(), HOME=str(home))  # kubectl's discovery/openapi cache per module
        self.home = home

    def run(
        self, *args: str, check: bool = True, input: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(["kubectl", *args], env=self.env, capture_output=True, text=True, input=input,
                              timeout=60)
        if check and proc.returncode != 0:
            raise AssertionError(
                f"kubectl {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
            )
        return proc

    def get(self, *args: str) -> dict[str, Any]:
        return json.loads(self.run("get", *args, "-o", "json").stdout)  # type: ignore[no-any-return]

    def namespace(self, name: str) -> str:
        self.run("create", "namespace", name)
        return name


def _self_signed(tmp: Path) -> tuple[Path, Path]:
    """A throwaway certificate and key (``kubectl create secret tls`` parses them)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "web.example.com")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now)
            .not_valid_after(now + datetime.timedelta(days=1)).sign(key, hashes.SHA256()))
    (tmp / "tls.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (tmp / "tls.key").write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                                    serialization.PrivateFormat.PKCS8,
                                                    serialization.NoEncryption()))
    return tmp / "tls.crt", tmp / "tls.key"


@pytest.fixture(scope="module")
def kubectl(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kubectl]:
    tmp = tmp_path_factory.mktemp("conformance")
    handle = start_in_thread(tmp / "sandbox.kubeconfig")
    try:
        yield Kubectl(handle, tmp)
    finally:
        handle.sandbox.stop_thread()


def test_create_workloads(kubectl: Kubectl):
    ns = kubectl.namespace("workloads")
    kubectl.run("create", "deployment", "web", "-n", ns, "--image=nginx:1.27", "--replicas=3", "--port=80")
    kubectl.run("create", "deployment", "zero", "-n", ns, "--image=nginx", "--replicas=0")
    kubectl.run("create", "job", "once", "-n", ns, "--image=busybox", "--", "echo", "hi")
    kubectl.run("create", "cronjob", "tick", "-n", ns, "--image=busybox", "--schedule=*/5 * * * *",
                "--restart=OnFailure", "--", "date")
    kubectl.run("create", "job", "manual", "-n", ns, "--from=cronjob/tick")
    kubectl.run("run", "solo", "-n", ns, "--image=nginx", "--labels=app=solo", "--env=A=B", "--port=8080")

    web = kubectl.get("deployment", "web", "-n", ns)
    assert web["spec"]["replicas"] == 3
    assert web["spec"]["selector"] == {"matchLabels": {"app": "web"}}
    container = web["spec"]["template"]["spec"]["containers"][0]
    assert (container["name"], container["image"], container["ports"]) == \
        ("nginx", "nginx:1.27", [{"containerPort": 80, "protocol": "TCP"}])
    assert web["spec"]["strategy"] == {"type": "RollingUpdate",
                                       "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}}
    assert (web["spec"]["revisionHistoryLimit"], web["spec"]["progressDeadlineSeconds"]) == (10, 600)
    # a pointer field sent as 0 stays 0 (not the default 1)
    assert kubectl.get("deployment", "zero", "-n", ns)["spec"]["replicas"] == 0

    job = kubectl.get("job", "once", "-n", ns)
    assert job["spec"]["template"]["spec"]["containers"][0]["command"] == ["echo", "hi"]
    assert job["spec"]["template"]["spec"]["restartPolicy"] == "Never"
    assert (job["spec"]["backoffLimit"], job["spec"]["completions"], job["spec"]["parallelism"]) == (6, 1, 1)

    tick = kubectl.get("cronjob", "tick", "-n", ns)
    assert tick["spec"]["schedule"] == "*/5 * * * *"
    assert tick["spec"]["jobTemplate"]["spec"]["template"]["spec"]["restartPolicy"] == "OnFailure"
    assert (
        tick["spec"]["concurrencyPolicy"],
        tick["spec"]["suspend"],
        tick["spec"]["successfulJobsHistoryLimit"],
        tick["spec"]["failedJobsHistoryLimit"],
    ) == ("Allow", False, 3, 1)
    manual = kubectl.get("job", "manual", "-n", ns)
    assert manual["metadata"]["annotations"]["cronjob.kubernetes.io/instantiate"] == "manual"
    assert [(o["kind"], o["name"], o.get("controller")) for o in manual["metadata"]["ownerReferences"]] == \
        [("CronJob", "tick", True)]

    solo = kubectl.get("pod", "solo", "-n", ns)
    assert solo["metadata"]["labels"] == {"app": "solo"}
    assert solo["spec"]["containers"][0]["env"] == [{"name": "A", "value": "B"}]
    assert solo["spec"]["containers"][0]["ports"] == [{"containerPort": 8080, "protocol": "TCP"}]
    assert solo["spec"]["serviceAccountName"] == "default"


def test_create_services(kubectl: Kubectl):
    ns = kubectl.namespace("services")
    kubectl.run("create", "service", "clusterip", "cip", "-n", ns, "--tcp=80:8080")
    kubectl.run("create", "service", "clusterip", "headless", "-n", ns, "--clusterip=None")
    kubectl.run("create", "service", "nodeport", "np", "-n", ns, "--tcp=80:8080", "--node-port=30080")
    kubectl.run("create", "service", "externalname", "ext", "-n", ns, "--external-name=example.com")
    kubectl.run("create", "service", "loadbalancer", "lb", "-n", ns, "--tcp=443:8443")
    kubectl.run("create", "deployment", "app", "-n", ns, "--image=nginx")
    kubectl.run("expose", "deployment", "app", "-n", ns, "--port=80", "--target-port=8080", "--name=app-svc")

    cip = kubectl.get("service", "cip", "-n", ns)["spec"]
    assert cip["type"] == "ClusterIP" and cip["clusterIP"] not in ("", "None", None)
    assert cip["ports"] == [{"name": "80-8080", "port": 80, "protocol": "TCP", "targetPort": 8080}]
    assert cip["selector"] == {"app": "cip"}
    assert kubectl.get("service", "headless", "-n", ns)["spec"]["clusterIP"] == "None"
    np = kubectl.get("service", "np", "-n", ns)["spec"]
    assert np["type"] == "NodePort" and np["ports"][0]["nodePort"] == 30080
    lb = kubectl.get("service", "lb", "-n", ns)["spec"]
    assert (lb["type"], lb["ports"][0]["port"], lb["ports"][0]["targetPort"]) == ("LoadBalancer", 443, 8443)
    ext = kubectl.get("service", "ext", "-n", ns)["spec"]
    assert (ext["type"], ext["externalName"]) == ("ExternalName", "example.com")
    exposed = kubectl.get("service", "app-svc", "-n", ns)["spec"]
    assert exposed["selector"] == {"app": "app"}
    assert exposed["ports"] == [{"port": 80, "protocol": "TCP", "targetPort": 8080}]


def test_node_ports_allocated_kept_refused_and_freed(kubectl: Kubectl):
    """NodePort and LoadBalancer Services get node ports from 30000-32767 as the Service registry allocates
    them: unique in the cluster, a requested one kept (or refused with the registry's message), kept across
    updates, dropped with the type, free again once the Service is gone."""
    ns = kubectl.namespace("nodeports")
    kubectl.run("create", "deployment", "web", "-n", ns, "--image=nginx", "--port=80")
    kubectl.run("expose", "deployment", "web", "-n", ns, "--type=NodePort")
    kubectl.run("create", "service", "nodeport", "auto", "-n", ns, "--tcp=80:8080,443:8443")
    kubectl.run("create", "service", "nodeport", "fixed", "-n", ns, "--tcp=80:8080", "--node-port=30091")
    kubectl.run("create", "service", "loadbalancer", "lb", "-n", ns, "--tcp=443:8443")
    specs = {name: kubectl.get("service", name, "-n", ns)["spec"] for name in ("web", "auto", "fixed", "lb")}
    ports = [p["nodePort"] for s in specs.values() for p in s["ports"]]
    assert all(30000 <= p <= 32767 for p in ports) and len(set(ports)) == len(ports) == 5, ports
    assert specs["fixed"]["ports"][0]["nodePort"] == 30091
    assert specs["web"]["externalTrafficPolicy"] == "Cluster"
    assert specs["lb"]["allocateLoadBalancerNodePorts"] is True
    listing = kubectl.run("get", "service", "web", "lb", "-n", ns).stdout
    assert f"80:{specs['web']['ports'][0]['nodePort']}/TCP" in listing and "<pending>" in listing, listing

    taken = kubectl.run("create", "service", "nodeport", "dup", "-n", ns, "--tcp=80:8080",
                        "--node-port=30091", check=False)
    assert taken.returncode == 1 and (
        'Service "dup" is invalid: spec.ports[0].nodePort: Invalid value: 30091: provided port is already '
        "allocated") in taken.stderr, taken.stderr
    outside = kubectl.run("create", "service", "nodeport", "low", "-n", ns, "--tcp=80:8080",
                          "--node-port=29999", check=False)
    assert outside.returncode == 1 and (
        "spec.ports[0].nodePort: Invalid value: 29999: provided port is not in the valid range. The range of "
        "valid ports is 30000-32767") in outside.stderr, outside.stderr

    # an update keeps the node ports, also when the body leaves them out (matched by port name)
    kubectl.run("label", "service", "auto", "-n", ns, "tier=front")
    sent = kubectl.get("service", "auto", "-n", ns)
    for port in sent["spec"]["ports"]:
        del port["nodePort"]
    kubectl.run("replace", "-f", "-", input=json.dumps(sent))
    assert kubectl.get("service", "auto", "-n", ns)["spec"]["ports"] == specs["auto"]["ports"]
    # a type without node ports drops them
    kubectl.run("patch", "service", "auto", "-n", ns, "-p", '{"spec": {"type": "ClusterIP"}}')
    after = kubectl.get("service", "auto", "-n", ns)["spec"]
    assert [p.get("nodePort") for p in after["ports"]] == [None, None] and after["type"] == "ClusterIP"
    # a deleted Service's port is free again
    kubectl.run("delete", "service", "fixed", "-n", ns)
    kubectl.run("create", "service", "nodeport", "dup", "-n", ns, "--tcp=80:8080", "--node-port=30091")


def test_autoscale_serves_hpa_v1_and_v2_from_one_object(kubectl: Kubectl):
    """kubectl autoscale creates an autoscaling/v1 HPA; it is stored as v2 with the real defaults and served
    in both versions (v1 keeps what it cannot say in autoscaling.alpha.kubernetes.io annotations)."""
    ns = kubectl.namespace("autoscale")
    kubectl.run("create", "deployment", "web", "-n", ns, "--image=nginx")
    kubectl.run("autoscale", "deployment", "web", "-n", ns, "--min=1", "--max=3")
    assert kubectl.get("hpa", "web", "-n", ns)["spec"] == {
        "maxReplicas": 3, "minReplicas": 1,
        "metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": {
            "type": "Utilization", "averageUtilization": 80}}}],
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}}
    v1_path = f"/apis/autoscaling/v1/namespaces/{ns}/horizontalpodautoscalers/web"
    v1 = json.loads(kubectl.run("get", "--raw", v1_path).stdout)
    assert (v1["apiVersion"], v1["spec"]["targetCPUUtilizationPercentage"], v1["status"]) == (
        "autoscaling/v1", 80, {"currentReplicas": 0, "desiredReplicas": 0})
    assert "annotations" not in v1["metadata"]
    # a v1 watch gets v1 objects (the stream ends with the server-side timeout)
    events = kubectl.run("get", "--raw", v1_path.rsplit("/", 1)[0] + "?watch=1&timeoutSeconds=1").stdout
    assert [(e["type"], e["object"]["apiVersion"], e["object"]["spec"]["targetCPUUtilizationPercentage"])
            for e in map(json.loads, events.splitlines())] == [("ADDED", "autoscaling/v1", 80)]
    listing = kubectl.run("get", "hpa", "-n", ns).stdout
    assert listing.split("\n")[0].split() == [
        "NAME", "REFERENCE", "TARGETS", "MINPODS", "MAXPODS", "REPLICAS", "AGE"]
    assert "Deployment/web   cpu: <unknown>/80%   1" in listing, listing

    # what v1 cannot hold travels in annotations, and a v1 client writing it back loses nothing
    v2_hpa = {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
              "metadata": {"name": "mem", "namespace": ns},
              "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                       "maxReplicas": 4, "metrics": [
                           {"type": "Resource", "resource": {"name": "memory", "target": {
                               "type": "AverageValue", "averageValue": "500Mi"}}},
                           {"type": "Resource", "resource": {"name": "cpu", "target": {
                               "type": "Utilization", "averageUtilization": 70}}}],
                       "behavior": {"scaleDown": {"stabilizationWindowSeconds": 60}}}}
    kubectl.run("create", "-f", "-", input=json.dumps(v2_hpa))
    stored = kubectl.get("hpa", "mem", "-n", ns)
    assert stored["spec"]["behavior"]["scaleUp"]["policies"] == [
        {"type": "Pods", "value": 4, "periodSeconds": 15},
        {"type": "Percent", "value": 100, "periodSeconds": 15}]
    v1 = json.loads(kubectl.run("get", "--raw", v1_path.replace("/web", "/mem")).stdout)
    assert v1["spec"]["targetCPUUtilizationPercentage"] == 70
    annotations = v1["metadata"]["annotations"]
    assert json.loads(annotations["autoscaling.alpha.kubernetes.io/metrics"]) == [
        {"type": "Resource", "resource": {"name": "memory", "targetAverageValue": "500Mi"}}]
    assert json.loads(annotations["autoscaling.alpha.kubernetes.io/behavior"])["ScaleDown"] == {
        "StabilizationWindowSeconds": 60, "SelectPolicy": "Max",
        "Policies": [{"Type": "Percent", "Value": 100, "PeriodSeconds": 15}]}
    v1["spec"]["maxReplicas"] = 6
    kubectl.run("replace", "-f", "-", input=json.dumps(v1))
    after = kubectl.get("hpa", "mem", "-n", ns)
    assert after["spec"] == dict(stored["spec"], maxReplicas=6)
    assert "annotations" not in after["metadata"]

    bad = dict(v1, metadata={"name": "bad", "namespace": ns}, spec=dict(v1["spec"], minReplicas=0))
    refused = kubectl.run("create", "-f", "-", input=json.dumps(bad), check=False)
    assert refused.returncode == 1 and (
        "spec.minReplicas: Invalid value: 0: must be greater than or equal to 1") in refused.stderr


def test_create_rbac(kubectl: Kubectl):
    ns = kubectl.namespace("rbac")
    kubectl.run("create", "role", "reader", "-n", ns, "--verb=get,list", "--resource=pods,deployments.apps",
                "--resource-name=a")
    kubectl.run("create", "rolebinding", "read", "-n", ns, "--role=reader", "--user=bob",
                f"--serviceaccount={ns}:robot", "--group=devs")
    kubectl.run(
        "create", "clusterrole", "nodes", "--verb=get", "--resource=nodes", "--non-resource-url=/healthz"
    )
    kubectl.run("create", "clusterrole", "agg", "--aggregation-rule=rbac.example.com/aggregate=true")
    kubectl.run("create", "clusterrolebinding", "nodes", "--clusterrole=nodes", "--user=alice")
    kubectl.run("set", "subject", "rolebinding", "read", "-n", ns, "--user=carol")

    rules = kubectl.get("role", "reader", "-n", ns)["rules"]
    assert rules == [
        {"apiGroups": [""], "resources": ["pods"], "resourceNames": ["a"], "verbs": ["get", "list"]},
        {
            "apiGroups": ["apps"],
            "resources": ["deployments"],
            "resourceNames": ["a"],
            "verbs": ["get", "list"],
        },
    ]
    binding = kubectl.get("rolebinding", "read", "-n", ns)
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "reader"}
    assert sorted((s["kind"], s["name"]) for s in binding["subjects"]) == \
        [("Group", "devs"), ("ServiceAccount", "robot"), ("User", "bob"), ("User", "carol")]
    nodes = kubectl.get("clusterrole", "nodes")["rules"]
    assert {"nonResourceURLs": ["/healthz"], "verbs": ["get"]} in nodes
    agg = kubectl.get("clusterrole", "agg")
    assert agg["aggregationRule"] == {"clusterRoleSelectors": [{"matchLabels": {"rbac.example.com/aggregate":
                                                                                "true"}}]}
    crb = kubectl.get("clusterrolebinding", "nodes")
    assert crb["subjects"] == [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "alice"}]


def test_create_policy_networking_quota_priority(kubectl: Kubectl):
    ns = kubectl.namespace("policy")
    kubectl.run("create", "pdb", "min", "-n", ns, "--selector=app=web", "--min-available=1")
    kubectl.run(
        "create", "poddisruptionbudget", "max", "-n", ns, "--selector=app=web", "--max-unavailable=50%"
    )
    kubectl.run("create", "ingress", "web", "-n", ns, "--class=nginx", "--rule=foo.com/bar*=svc:8080",
                "--rule=foo.com/exact=svc:http,tls=cert")
    kubectl.run("create", "quota", "q", "-n", ns, "--hard=cpu=1,memory=1Gi,pods=2", "--scopes=NotTerminating")
    kubectl.run("create", "priorityclass", "high", "--value=1000", "--description=important",
                "--preemption-policy=Never")
    kubectl.run("create", "priorityclass", "low", "--value=-5")

    assert kubectl.get("pdb", "min", "-n", ns)["spec"] == {"minAvailable": 1,
                                                           "selector": {"matchLabels": {"app": "web"}}}
    assert kubectl.get("pdb", "max", "-n", ns)["spec"]["maxUnavailable"] == "50%"
    ing = kubectl.get("ingress", "web", "-n", ns)["spec"]
    assert ing["ingressClassName"] == "nginx"
    assert ing["rules"] == [
        {
            "host": "foo.com",
            "http": {
                "paths": [
                    {
                        "path": "/bar",
                        "pathType": "Prefix",
                        "backend": {"service": {"name": "svc", "port": {"number": 8080}}},
                    },
                    {
                        "path": "/exact",
                        "pathType": "Exact",
                        "backend": {"service": {"name": "svc", "port": {"name": "http"}}},
                    },
                ]
            },
        }
    ]
    assert ing["tls"] == [{"hosts": ["foo.com"], "secretName": "cert"}]
    quota = kubectl.get("quota", "q", "-n", ns)["spec"]
    assert quota == {"hard": {"cpu": "1", "memory": "1Gi", "pods": "2"}, "scopes": ["NotTerminating"]}
    high = kubectl.get("priorityclass", "high")
    assert (high["value"], high["description"], high["preemptionPolicy"]) == (1000, "important", "Never")
    low = kubectl.get("priorityclass", "low")
    assert (low["value"], low["preemptionPolicy"]) == (-5, "PreemptLowerPriority")
    assert "globalDefault" not in low  # false is omitted, as the real server writes it


def test_create_config_objects(kubectl: Kubectl, tmp_path: Path):
    ns = kubectl.namespace("config")
    (tmp_path / "app.conf").write_text("x = 1\n")
    (tmp_path / "blob.bin").write_bytes(b"\x00\xff\x01")
    kubectl.run(
        "create",
        "configmap",
        "cfg",
        "-n",
        ns,
        "--from-literal=a=b",
        f"--from-file={tmp_path / 'app.conf'}",
        f"--from-file={tmp_path / 'blob.bin'}",
    )
    kubectl.run(
        "create", "secret", "generic", "pw", "-n", ns, "--from-literal=password=hunter2", "--type=Opaque"
    )
    kubectl.run("create", "secret", "docker-registry", "reg", "-n", ns, "--docker-server=r.example.com",
                "--docker-username=u", "--docker-password=p")
    kubectl.run("create", "serviceaccount", "robot", "-n", ns)
    cert, key = _self_signed(tmp_path)
    kubectl.run("create", "secret", "tls", "web-tls", "-n", ns, f"--cert={cert}", f"--key={key}")

    cfg = kubectl.get("configmap", "cfg", "-n", ns)
    assert cfg["data"] == {"a": "b", "app.conf": "x = 1\n"}
    assert cfg["binaryData"] == {"blob.bin": base64.b64encode(b"\x00\xff\x01").decode()}
    pw = kubectl.get("secret", "pw", "-n", ns)
    assert (pw["type"], pw["data"]) == ("Opaque", {"password": base64.b64encode(b"hunter2").decode()})
    reg = kubectl.get("secret", "reg", "-n", ns)
    assert reg["type"] == "kubernetes.io/dockerconfigjson"
    auths = json.loads(base64.b64decode(reg["data"][".dockerconfigjson"]))["auths"]
    assert auths["r.example.com"]["username"] == "u"
    tls = kubectl.get("secret", "web-tls", "-n", ns)
    assert tls["type"] == "kubernetes.io/tls"
    assert base64.b64decode(tls["data"]["tls.crt"]) == cert.read_bytes()
    assert kubectl.get("serviceaccount", "robot", "-n", ns)["metadata"]["namespace"] == ns
    assert kubectl.get("namespace", ns)["status"] == {"phase": "Active"}
    assert kubectl.get("namespace", ns)["spec"] == {"finalizers": ["kubernetes"]}


def test_mutating_verbs(kubectl: Kubectl):
    ns = kubectl.namespace("mutate")
    kubectl.run("create", "deployment", "web", "-n", ns, "--image=nginx:1.26")
    kubectl.run("scale", "deployment", "web", "-n", ns, "--replicas=4")
    kubectl.run("set", "image", "deployment/web", "-n", ns, "nginx=nginx:1.27")
    kubectl.run("set", "env", "deployment/web", "-n", ns, "MODE=prod")
    kubectl.run("set", "resources", "deployment", "web", "-n", ns, "--limits=cpu=200m,memory=64Mi")
    kubectl.run("label", "deployment", "web", "-n", ns, "tier=front")
    kubectl.run("annotate", "deployment", "web", "-n", ns, "note=hello")
    web = kubectl.get("deployment", "web", "-n", ns)
    c = web["spec"]["template"]["spec"]["containers"][0]
    assert web["spec"]["replicas"] == 4
    assert (c["image"], c["env"], c["resources"]) == ("nginx:1.27", [{"name": "MODE", "value": "prod"}],
                                                      {"limits": {"cpu": "200m", "memory": "64Mi"}})
    assert web["metadata"]["labels"]["tier"] == "front" and web["metadata"]["annotations"]["note"] == "hello"
    # delete answers as kubectl expects and the object is gone
    assert (
        kubectl.run("delete", "deployment", "web", "-n", ns).stdout.strip() == 'deployment.apps "web" deleted'
    )
    assert "NotFound" in kubectl.run("get", "deployment", "web", "-n", ns, check=False).stderr


def test_server_dry_run_and_field_validation(kubectl: Kubectl):
    ns = kubectl.namespace("dryrun")
    out = json.loads(
        kubectl.run(
            "create", "deployment", "ghost", "-n", ns, "--image=nginx", "--dry-run=server", "-o", "json"
        ).stdout
    )
    assert out["metadata"]["uid"] and out["spec"]["replicas"] == 1
    assert "NotFound" in kubectl.run("get", "deployment", "ghost", "-n", ns, check=False).stderr
    manifest = json.dumps(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "typo", "namespace": ns},
            "data": {"a": "b"},
            "dta": {"c": "d"},
        }
    )
    proc = kubectl.run("apply", "-f", "-", input=manifest, check=False)
    assert proc.returncode != 0
    assert 'strict decoding error: unknown field "dta"' in proc.stderr
    proc = kubectl.run("apply", "--validate=warn", "-f", "-", input=manifest)
    assert 'Warning: unknown field "dta"' in proc.stderr
    assert "dta" not in kubectl.get("configmap", "typo", "-n", ns)


def test_explain_builtins_and_crds(kubectl: Kubectl):
    out = kubectl.run("explain", "deployment.spec.replicas").stdout
    assert "GROUP:      apps" in out and "FIELD: replicas <integer>" in out
    assert "Number of desired pods" in out
    out = kubectl.run("explain", "pods.spec.containers").stdout
    assert "FIELD: containers <[]Container>" in out and "imagePullPolicy\t<string>" in out
    out = kubectl.run("explain", "services.spec", "--recursive").stdout
    # kubectl names a referenced type only when it is an object: IntOrString is a string schema upstream
    assert "ports\t<[]ServicePort>" in out and "targetPort\t<string>" in out
    proc = kubectl.run("explain", "deployment.spec.bogus", check=False)
    assert proc.returncode != 0 and 'field "bogus" does not exist' in proc.stderr
    kubectl.run("apply", "-f", "-", input=json.dumps(CRD))
    kubectl.run("wait", "--for=condition=Established", f"crd/{CRD['metadata']['name']}", "--timeout=20s")
    out = kubectl.run("explain", "widgets.spec").stdout
    assert "KIND:       Widget" in out and "size\t<integer> -required-" in out and "color\t<string>" in out
    # the OpenAPI v2 renderer reads /openapi/v2 in gnostic's protobuf form
    out = kubectl.run("explain", "deployment.spec.strategy", "--output=plaintext-openapiv2").stdout
    assert "RESOURCE: strategy <Object>" in out and "rollingUpdate\t<Object>" in out
    out = kubectl.run("explain", "widgets.spec", "--output=plaintext-openapiv2").stdout
    assert "size\t<integer> -required-" in out


def _lost(json_value: Any, pb_value: Any, path: str = "") -> list[str]:
    """What the protobuf form lost or changed; a protobuf message cannot carry nulls, empty lists, zero values
    of ``omitempty`` fields or the TypeMeta of list items, so only those may differ (as on a real server)."""
    if isinstance(json_value, dict) and isinstance(pb_value, dict):
        out: list[str] = []
        for k, v in json_value.items():
            where = f"{path}.{k}"
            if k not in pb_value:
                item_type_meta = k in ("kind", "apiVersion") and path.startswith(".items[")
                if not (v in (None, [], "", 0, False) or item_type_meta):
                    out.append(f"{where} missing ({v!r})")
            else:
                out.extend(_lost(v, pb_value[k], where))
        out.extend(f"{path}.{k} added" for k in pb_value if k not in json_value)
        return out
    if isinstance(json_value, list) and isinstance(pb_value, list) and len(json_value) == len(pb_value):
        return [d for i, (a, b) in enumerate(zip(json_value, pb_value)) for d in _lost(a, b, f"{path}[{i}]")]
    return [] if json_value == pb_value else [f"{path}: {json_value!r} != {pb_value!r}"]


def test_protobuf_answers_match_json_for_every_kind(kubectl: Kubectl):
    """kubectl (and any client-go program) may ask for protobuf: every served built-in kind encodes
    losslessly."""
    import urllib.request

    from ansible_operator_sandbox import protobuf
    from ansible_operator_sandbox.resources import Registry

    ns = kubectl.namespace("wire")
    for args in (
        ("deployment", "web", "--image=nginx", "--replicas=2"),
        ("job", "j", "--image=busybox"),
        ("service", "clusterip", "svc", "--tcp=80:8080"),
        ("role", "r", "--verb=get", "--resource=pods"),
        ("ingress", "ing", "--rule=foo.com/bar=svc:80"),
        ("quota", "q", "--hard=cpu=1"),
        ("pdb", "pdb", "--selector=app=web", "--min-available=50%"),
    ):
        kubectl.run("create", *args, "-n", ns)
    kubectl.run("run", "p", "-n", ns, "--image=nginx")
    kubectl.run("wait", "deployment/web", "-n", ns, "--for=condition=Available", "--timeout=30s")
    server = json.loads(kubectl.run("config", "view", "--minify", "-o", "json").stdout)["clusters"][0][
        "cluster"
    ]
    registry = Registry()
    checked = 0
    for group, versions in sorted(registry.groups().items()):
        for version in versions:
            for t in registry.in_group_version(group, version):
                if "list" not in t.verbs:
                    continue
                url = f"{server['server']}/{'api' if not group else 'apis/' + group}/{version}/{t.plural}"
                # the same list twice, as JSON and as protobuf; its controllers may write meanwhile (Events
                # of the Deployment's rollout): compare two answers of one resourceVersion
                for _attempt in range(50):
                    answers = []
                    for accept in ("application/json", protobuf.MEDIA_TYPE):
                        with urllib.request.urlopen(
                            urllib.request.Request(url, headers={"Accept": accept})
                        ) as resp:
                            answers.append((resp.headers["Content-Type"], resp.read()))
                    (_, as_json), (ctype, as_pb) = answers
                    assert ctype == protobuf.MEDIA_TYPE, t.kind
                    decoded = protobuf.decode(as_pb)
                    if (json.loads(as_json).get("metadata") or {}).get("resourceVersion") == (
                        decoded.get("metadata") or {}
                    ).get("resourceVersion"):
                        break
                    time.sleep(0.2)
                assert _lost(json.loads(as_json), decoded) == [], t.kind
                checked += len(json.loads(as_json)["items"])
    assert checked >= 12


def test_tokens_and_access_reviews(kubectl: Kubectl):
    """create token (TokenRequest), auth can-i (SelfSubjectAccessReview), auth whoami (SelfSubjectReview)."""
    ns = kubectl.namespace("tokens")
    kubectl.run("create", "serviceaccount", "robot", "-n", ns)
    token = kubectl.run(
        "create", "token", "robot", "-n", ns, "--duration=10m", "--audience=api"
    ).stdout.strip()
    payload = token.split(".")[1]
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    assert claims["sub"] == f"system:serviceaccount:{ns}:robot"
    assert claims["aud"] == ["api"] and claims["exp"] - claims["iat"] == 600
    assert kubectl.run("auth", "can-i", "create", "deployments", "-n", ns).stdout.strip() == "yes"
    assert "Username" in kubectl.run("auth", "whoami").stdout
