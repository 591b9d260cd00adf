"""The scenarios the differential suite runs on both servers (tests/differential/test_differential.py).

Each takes a :class:`~tests.differential.harness.Client` and records what a client sees, step by step.
Steps that wait for controllers (rollouts, Jobs) wait on conditions with ``kubectl wait``/``rollout
status`` first, so what is compared is the converged state, not the timing. Cluster-scoped objects carry
the namespace in their names (each run's own; normalised to ``NS``).
"""

from __future__ import annotations

import json
import time
from typing import Any, Callable

from .harness import Client

SCENARIOS: dict[str, Callable[[Client], None]] = {}
PRIVATE: set[str] = set()
"""Scenarios that need a control plane of their own (they drop its watch history with ``Client.compact``,
or drain its node): a private real one, and the sandbox."""


def scenario(fn: Callable[[Client], None]) -> Callable[[Client], None]:
    SCENARIOS[fn.__name__] = fn
    return fn


def private(fn: Callable[[Client], None]) -> Callable[[Client], None]:
    PRIVATE.add(fn.__name__)
    return scenario(fn)


WAIT = "--timeout=150s"


# ---- what a fresh API server holds ---------------------------------------------------------------------

@scenario
def bootstrap_objects(c: Client) -> None:
    """Objects kube-apiserver creates at start, which clients and RBAC set-ups rely on."""
    c.kubectl("get", "clusterroles", "cluster-admin", "admin", "edit", "view", "-o", "name")
    c.kubectl("get", "clusterrolebinding", "cluster-admin", "-o", "name")
    c.kubectl("get", "priorityclasses", "-o", "name")
    c.kubectl("get", "apiservices", "v1.", "v1.apps", "v1.rbac.authorization.k8s.io", "-o", "name")
    c.kubectl("get", "endpoints", "kubernetes", "-n", "default", "-o", "name")
    c.kubectl("get", "service", "kubernetes", "-n", "default", "-o", "name")
    c.kubectl("get", "flowschemas", "exempt", "-o", "name")
    c.kubectl("get", "prioritylevelconfigurations", "exempt", "-o", "name")
    c.kubectl("get", "serviceaccount", "default", "-o", "name")
    c.kubectl("get", "configmap", "kube-root-ca.crt", "-o", "name")
    # (the holder is the kubelet's node name; kwok, the real control plane's kubelet here, writes its own id)
    nodes = {n.split("/", 1)[1] for n in c.run_kubectl("get", "nodes", "-o", "name").stdout.split()}
    leases = c.run_kubectl("get", "leases", "-n", "kube-node-lease", "-o", "jsonpath={range .items[*]}"
                           "{.metadata.name} {.spec.leaseDurationSeconds}{'\\n'}{end}")
    c.record("every Node has a heartbeat Lease (duration)",
             sorted((name in nodes, duration) for name, _, duration in
                    (line.partition(" ") for line in leases.stdout.splitlines())))


@scenario
def health_endpoints(c: Client) -> None:
    c.kubectl("get", "--raw", "/readyz")
    c.kubectl("get", "--raw", "/livez")
    c.kubectl("get", "--raw", "/healthz")
    done = c.run_kubectl("get", "--raw", "/readyz?verbose")
    # the check names a client sees (a real server's list is long; each line is "[+]name ok")
    c.record("readyz?verbose has per-check lines", done.returncode == 0 and "[+]ping ok" in done.stdout)


# ---- one kind through kubectl's verbs ------------------------------------------------------------------

@scenario
def configmap_verbs(c: Client) -> None:
    c.kubectl("create", "configmap", "cm1", "--from-literal=a=b")
    c.kubectl("get", "configmap", "cm1")
    c.kubectl("get", "configmap", "cm1", "-o", "wide")
    c.kubectl("get", "configmap", "cm1", "-o", "json", json_out=True)
    c.kubectl("get", "configmap", "cm1", "-o", "name")
    c.kubectl("get", "configmap", "cm1", "-o", "jsonpath={.data}")
    c.kubectl("get", "configmap", "cm1", "-o", "custom-columns=NAME:.metadata.name,A:.data.a")
    c.kubectl("get", "configmap", "cm1", "-o", "go-template={{.metadata.name}}")
    c.kubectl("label", "configmap", "cm1", "tier=web")
    c.kubectl("label", "configmap", "cm1", "tier=db")  # exists: refused without --overwrite
    c.kubectl("label", "configmap", "cm1", "tier=db", "--overwrite")
    c.kubectl("annotate", "configmap", "cm1", "note=hello")
    c.kubectl("get", "configmap", "-l", "tier=db", "-o", "name")
    c.kubectl("get", "configmap", "-l", "tier in (web)", "-o", "name")
    c.kubectl("get", "configmap", "--show-labels")
    c.kubectl("patch", "configmap", "cm1", "--type=merge", "-p", '{"data":{"c":"d"}}')
    c.kubectl("patch", "configmap", "cm1", "--type=json", "-p", '[{"op":"add","path":"/data/e","value":"f"}]')
    c.kubectl("patch", "configmap", "cm1", "--type=json", "-p",
              '[{"op":"test","path":"/data/a","value":"x"}]')
    c.kubectl("patch", "configmap", "cm1", "--type=json", "-p", '[{"op":"remove","path":"/data/missing"}]')
    c.kubectl("patch", "configmap", "cm1", "--type=json", "-p", '[{"op":"replace","path":"/x/y","value":1}]')
    c.kubectl("patch", "configmap", "cm1", "--type=strategic", "-p", '{"data":{"g":"h"}}')
    c.kubectl("patch", "configmap", "cm1", "--type=merge", "-p", "{not json")
    c.kubectl("get", "configmap", "cm1", "-o", "jsonpath={.data}")
    c.kubectl("create", "configmap", "cm1")
    c.kubectl("get", "configmap", "nope")
    c.kubectl("create", "configmap", "Bad_Name")
    c.kubectl("label", "configmap", "cm1", "bad key=x")
    c.kubectl("replace", "-f", "-", input=json.dumps({
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm1"}, "data": {"only": "this"}}))
    c.kubectl("get", "configmap", "cm1", "-o", "jsonpath={.data}", key="data after replace")
    c.kubectl("delete", "configmap", "cm1")
    c.kubectl("get", "configmap", "cm1", key="get after delete")
    c.kubectl("delete", "configmap", "cm1", key="delete again")
    c.kubectl("delete", "configmap", "cm1", "--ignore-not-found", key="delete --ignore-not-found")


@scenario
def apply_client_and_server_side(c: Client) -> None:
    def manifest(**data: str) -> str:
        return json.dumps({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "applied"},
                           "data": data})

    c.kubectl("apply", "-f", "-", input=manifest(a="1", b="2"), key="apply (create)")
    c.kubectl("apply", "-f", "-", input=manifest(a="1", b="2"), key="apply (unchanged)")
    c.kubectl("apply", "-f", "-", input=manifest(a="3"), key="apply (b removed)")
    c.kubectl("get", "configmap", "applied", "-o", "jsonpath={.data}", key="data after client-side apply")
    c.kubectl("apply", "--server-side", "--field-manager=one", "-f", "-",
              input=manifest(a="3", s="x").replace('"applied"', '"ssa"'), key="ssa one (create)")
    c.kubectl("apply", "--server-side", "--field-manager=two", "-f", "-",
              input=manifest(s="y").replace('"applied"', '"ssa"'), key="ssa two (conflict)")
    c.kubectl("apply", "--server-side", "--field-manager=two", "--force-conflicts", "-f", "-",
              input=manifest(s="y").replace('"applied"', '"ssa"'), key="ssa two --force-conflicts")
    c.kubectl("get", "configmap", "ssa", "-o", "jsonpath={.data}", key="data after ssa")
    c.kubectl("get", "configmap", "ssa", "-o", "jsonpath={.metadata.managedFields[*].manager}",
              key="managers after ssa")
    c.kubectl("apply", "--server-side", "--field-manager=one", "--dry-run=server", "-f", "-",
              input=manifest(a="dry").replace('"applied"', '"ssa"'), key="ssa --dry-run=server")
    c.kubectl("diff", "-f", "-", input=manifest(a="changed").replace('"applied"', '"ssa"'), key="diff")


# ---- every kind kubectl creates imperatively -----------------------------------------------------------

@scenario
def imperative_create(c: Client) -> None:
    ns = c.namespace
    creates: list[tuple[tuple[str, ...], str, str]] = [
        (("create", "serviceaccount", "sa"), "serviceaccount", "sa"),
        (("create", "secret", "generic", "sec", "--from-literal=k=v"), "secret", "sec"),
        (("create", "secret", "docker-registry", "reg", "--docker-server=r.example.com",
          "--docker-username=u", "--docker-password=p"), "secret", "reg"),
        (("create", "service", "clusterip", "svc", "--tcp=80:8080"), "service", "svc"),
        (("create", "service", "clusterip", "headless", "--clusterip=None"), "service", "headless"),
        (("create", "service", "externalname", "ext", "--external-name=example.com"), "service", "ext"),
        # at midnight on January 1st: the real CronJob controller must not start a Job (status.active)
        # while the scenario runs, which the sandbox, without controllers, never does (CI V at 45e1acc:
        # "*/5 * * * *" fired mid-scenario)
        (("create", "cronjob", "cj", "--image=busybox:1.36", "--schedule=0 0 1 1 *", "--", "true"),
         "cronjob", "cj"),
        (("create", "role", "r", "--verb=get,list", "--resource=pods,configmaps"), "role", "r"),
        (("create", "rolebinding", "rb", "--role=r", "--user=alice", "--serviceaccount=" + ns + ":sa"),
         "rolebinding", "rb"),
        (("create", "clusterrole", f"cr-{ns}", "--verb=get", "--resource=nodes"), "clusterrole", f"cr-{ns}"),
        (("create", "clusterrolebinding", f"crb-{ns}", f"--clusterrole=cr-{ns}", "--group=devs"),
         "clusterrolebinding", f"crb-{ns}"),
        (("create", "quota", "q", "--hard=pods=10,configmaps=5"), "resourcequota", "q"),
        (("create", "priorityclass", f"pc-{ns}", "--value=1000", "--description=d"),
         "priorityclass", f"pc-{ns}"),
        (("create", "poddisruptionbudget", "pdb", "--selector=app=web", "--min-available=1"),
         "poddisruptionbudget", "pdb"),
        (("create", "ingress", "ing", "--rule=foo.example.com/bar=svc:80"), "ingress", "ing"),
    ]
    for args, kind, name in creates:
        done = c.kubectl(*args)
        if done.returncode != 0:
            continue
        if kind == "resourcequota":  # the quota controller's first status, not the race with it
            c.run_kubectl("wait", f"{kind}/{name}", "--for=jsonpath={.status.hard.pods}=10", WAIT)
        c.kubectl("get", kind, name)
        c.kubectl("get", kind, name, "-o", "wide")
        c.kubectl("get", kind, name, "-o", "json", json_out=True)
    token = c.run_kubectl("create", "token", "sa", "--duration=10m")
    c.record("create token sa: a JWT", (token.returncode, token.stdout.count(".") == 2, token.stderr))
    for name in (f"cr-{ns}", f"crb-{ns}", f"pc-{ns}"):
        kind = {"cr": "clusterrole", "crb": "clusterrolebinding", "pc": "priorityclass"}[name.split("-")[0]]
        c.run_kubectl("delete", kind, name, "--ignore-not-found")


@scenario
def job_to_completion(c: Client) -> None:
    c.kubectl("create", "job", "j", "--image=busybox:1.36", "--", "true")
    c.kubectl("wait", "--for=condition=Complete", "job/j", WAIT)
    c.kubectl("get", "job", "j", "-o", "jsonpath={.status.succeeded} {.status.conditions[*].type}")
    c.kubectl("get", "pods", "-l", "job-name=j", "-o", "jsonpath={.items[*].status.phase}")


# ---- a Deployment: rollouts, scale, set, cascade -------------------------------------------------------

@scenario
def deployment_rollout(c: Client) -> None:
    c.kubectl("create", "deployment", "web", "--image=nginx:1.26", "--replicas=2")
    c.rollout_status("deployment/web")
    c.kubectl("get", "deployment", "web")
    c.kubectl("get", "deployment", "web", "-o", "wide")
    c.kubectl("get", "deployment", "web", "-o",
              "jsonpath={.status.replicas} {.status.readyReplicas} {.status.updatedReplicas}"
              " {.status.availableReplicas} {.status.observedGeneration} {.metadata.generation}",
              key="deployment status counts")
    c.kubectl("get", "deployment", "web", "-o", "jsonpath={.status.conditions[*].reason}",
              key="deployment condition reasons")
    c.kubectl("set", "image", "deployment/web", "nginx=nginx:1.27")
    c.rollout_status("deployment/web", key="rollout status after set image")
    c.kubectl("rollout", "history", "deployment/web")
    c.kubectl("rollout", "history", "deployment/web", "--revision=1")
    c.kubectl("rollout", "undo", "deployment/web")
    c.rollout_status("deployment/web", key="rollout status after undo")
    c.kubectl("get", "deployment", "web", "-o", "jsonpath={.spec.template.spec.containers[0].image}",
              key="image after undo")
    c.kubectl("rollout", "pause", "deployment/web")
    c.kubectl("rollout", "pause", "deployment/web", key="pause again")
    c.kubectl("rollout", "resume", "deployment/web")
    c.kubectl("rollout", "restart", "deployment/web")
    c.rollout_status("deployment/web", key="rollout status after restart")
    c.kubectl("scale", "deployment/web", "--replicas=3")
    c.rollout_status("deployment/web", key="rollout status after scale")
    c.kubectl("scale", "deployment/web", "--replicas=1", "--current-replicas=2")
    c.kubectl("get", "deployment", "web", "-o", "jsonpath={.spec.replicas}", key="replicas after scale")
    done = c.run_kubectl("get", "replicasets", "-l", "app=web", "-o",
                         "jsonpath={range .items[*]}"
                         "{.metadata.annotations.deployment\\.kubernetes\\.io/revision}"
                         " {.spec.replicas}{'\\n'}{end}")
    c.record("replicasets: revision and replicas", (done.returncode, sorted(done.stdout.split("\n"))))
    c.kubectl("set", "env", "deployment/web", "MODE=test")
    c.kubectl("set", "resources", "deployment/web", "--limits=cpu=200m,memory=64Mi")
    c.kubectl("get", "deployment", "web", "-o", "jsonpath={.spec.template.spec.containers[0]}",
              key="container after set env/resources")
    c.kubectl("autoscale", "deployment", "web", "--min=1", "--max=3", "--cpu-percent=80")
    c.kubectl("get", "hpa", "web", "-o", "json", json_out=True)


@scenario
def delete_cascades(c: Client) -> None:
    for name in ("orphan", "fg", "bg"):
        c.run_kubectl("create", "deployment", name, "--image=nginx:1.27")
    for name in ("orphan", "fg", "bg"):
        c.rollout_status(f"deployment/{name}")
    c.kubectl("delete", "deployment", "orphan", "--cascade=orphan")
    c.kubectl("delete", "deployment", "fg", "--cascade=foreground")
    c.kubectl("delete", "deployment", "bg", "--cascade=background")
    c.kubectl("wait", "--for=delete", "replicaset", "-l", "app=fg", WAIT, key="fg replicasets gone")
    c.kubectl("wait", "--for=delete", "replicaset", "-l", "app=bg", WAIT, key="bg replicasets gone")
    c.kubectl("get", "replicasets", "-l", "app=orphan", "-o",
              "jsonpath={range .items[*]}{.metadata.ownerReferences}{end}", key="orphaned replicaset owners")


# ---- who am I, what may I ------------------------------------------------------------------------------

@scenario
def auth(c: Client) -> None:
    c.kubectl("auth", "whoami")
    c.kubectl("auth", "whoami", "-o", "json", json_out=True)
    c.kubectl("auth", "can-i", "create", "pods")
    c.kubectl("auth", "can-i", "create", "pods", f"--as=system:serviceaccount:{c.namespace}:default")
    c.kubectl("auth", "can-i", "get", "pods", "--as=alice")
    c.run_kubectl("create", "role", "reader", "--verb=get,list", "--resource=pods")
    c.run_kubectl("create", "rolebinding", "reader", "--role=reader", "--user=alice")
    c.kubectl("auth", "can-i", "get", "pods", "--as=alice", key="can-i get pods as alice after binding")
    c.kubectl("auth", "can-i", "delete", "pods", "--as=alice", key="can-i delete pods as alice")
    c.run_kubectl("create", "rolebinding", "viewer", "--clusterrole=view", "--user=bob")
    c.kubectl("auth", "can-i", "list", "deployments", "--as=bob", key="bob, bound to view")
    c.kubectl("auth", "can-i", "list", "secrets", "--as=bob", key="bob, bound to view, secrets")
    c.kubectl("get", "pods", "--as=carol", key="carol (no binding) lists pods")


# ---- discovery and docs --------------------------------------------------------------------------------

@scenario
def discovery(c: Client) -> None:
    done = c.run_kubectl("api-resources", "--no-headers", "-o", "name")
    # the built-in resources (core and the common groups) both servers should serve
    groups = {"", "apps", "batch", "rbac.authorization.k8s.io", "networking.k8s.io", "policy",
              "coordination.k8s.io", "autoscaling", "storage.k8s.io", "scheduling.k8s.io",
              "apiextensions.k8s.io", "discovery.k8s.io", "events.k8s.io", "certificates.k8s.io",
              "admissionregistration.k8s.io", "flowcontrol.apiserver.k8s.io", "apiregistration.k8s.io",
              "node.k8s.io", "authentication.k8s.io", "authorization.k8s.io", "resource.k8s.io",
              "storagemigration.k8s.io", "internal.apiserver.k8s.io"}
    names = sorted(n for n in done.stdout.split() if (n.split(".", 1)[1] if "." in n else "") in groups)
    c.record("api-resources (built-in groups)", names)
    c.kubectl("api-resources", "--api-group=apps")
    c.kubectl("api-resources", "--namespaced=false", "--api-group=rbac.authorization.k8s.io", "-o", "wide")
    done = c.run_kubectl("api-versions")
    c.record("api-versions (built-in groups)",
             sorted(v for v in done.stdout.split() if v.rsplit("/", 1)[0] in groups or "/" not in v))
    c.kubectl("explain", "deployment.spec.replicas")
    c.kubectl("explain", "configmap", "--recursive")


# ---- Events and describe -------------------------------------------------------------------------------

@scenario
def events_and_describe(c: Client) -> None:
    c.kubectl("create", "deployment", "ev", "--image=nginx:1.27")
    c.rollout_status("deployment/ev")
    c.kubectl("scale", "deployment/ev", "--replicas=2")
    c.rollout_status("deployment/ev", key="rollout status after scale")
    done = c.run_kubectl("get", "events", "-o", "json")
    events = json.loads(done.stdout)["items"] if done.returncode == 0 else []
    # which controllers told what, about which kind (not how often or when)
    c.record("event reasons by kind and source", sorted({
        (e["involvedObject"]["kind"], e["reason"], (e.get("source") or {}).get("component")
         or e.get("reportingComponent") or "")
        for e in events if e["involvedObject"]["kind"] in ("Deployment", "ReplicaSet")}))
    # the table kubectl prints (rows sorted: two servers' events of one second come in either order)
    for args in (("get", "events", "--field-selector=involvedObject.name=ev"),
                 ("get", "events", "--field-selector=involvedObject.name=ev", "-o", "wide"),
                 ("events", "--for=deployment/ev")):
        done = c.run_kubectl(*args)
        lines = c.norm.text(done.stdout).splitlines()
        c.record("kubectl " + " ".join(args), (done.returncode, lines[:1], sorted(lines[1:]),
                                               c.norm.text(done.stderr)))
    done = c.run_kubectl("describe", "deployment", "ev")
    c.record("describe deployment: section headings",
             [line.split(":", 1)[0] for line in done.stdout.splitlines() if line and not line[0].isspace()])


# ---- the kubernetes client's typed and dynamic APIs ----------------------------------------------------

@scenario
def python_client(c: Client) -> None:
    import kubernetes

    api = c.api_client()
    try:
        core = kubernetes.client.CoreV1Api(api)
        ns = c.namespace

        def call(key: str, fn: Callable[[], Any]) -> Any:
            try:
                result = fn()
            except kubernetes.client.ApiException as e:
                body = json.loads(e.body) if e.body else None
                c.record(key, {"status": e.status, "reason": e.reason, "body": c.norm.obj(body)})
                return None
            value = api.sanitize_for_serialization(result)
            c.record(key, {"type": type(result).__name__, "value": c.norm.obj(value)})
            return result

        call("create configmap", lambda: core.create_namespaced_config_map(
            ns, {"metadata": {"name": "py", "labels": {"app": "py"}}, "data": {"a": "1"}}))
        call("read configmap", lambda: core.read_namespaced_config_map("py", ns))
        call("list configmaps by label", lambda: core.list_namespaced_config_map(ns, label_selector="app=py"))
        call("strategic patch", lambda: core.patch_namespaced_config_map("py", ns, {"data": {"b": "2"}}))
        call("replace with a stale resourceVersion", lambda: core.replace_namespaced_config_map(
            "py", ns, {"metadata": {"name": "py", "resourceVersion": "1"}, "data": {}}))
        call("create duplicate", lambda: core.create_namespaced_config_map(ns, {"metadata": {"name": "py"}}))
        call("create invalid", lambda: core.create_namespaced_config_map(ns, {"metadata": {"name": "-x-"}}))
        call("delete configmap", lambda: core.delete_namespaced_config_map("py", ns))
        call("delete missing", lambda: core.delete_namespaced_config_map("py", ns))
        call("read missing namespace's configmap",
             lambda: core.read_namespaced_config_map("py", "no-such-namespace-xyz"))
        call("create pod (defaults)", lambda: core.create_namespaced_pod(ns, {
            "metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]}}))
        call("create service (defaults)", lambda: core.create_namespaced_service(ns, {
            "metadata": {"name": "s"}, "spec": {"ports": [{"port": 80}], "selector": {"app": "x"}}}))

        dyn = kubernetes.dynamic.DynamicClient(api)
        cms = dyn.resources.get(api_version="v1", kind="ConfigMap")
        call("dynamic create", lambda: cms.create(body={"metadata": {"name": "dyn"}, "data": {"x": "1"}},
                                                  namespace=ns).to_dict())
        call("dynamic server-side apply", lambda: cms.server_side_apply(
            body={"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "dyn"}, "data": {"y": "2"}},
            name="dyn", namespace=ns, field_manager="differential", force_conflicts=True).to_dict())
        call("dynamic json patch", lambda: cms.patch(
            body=[{"op": "replace", "path": "/data/x", "value": "9"}], name="dyn", namespace=ns,
            content_type="application/json-patch+json").to_dict())
        call("dynamic delete", lambda: cms.delete(name="dyn", namespace=ns).to_dict())
    finally:
        api.close()


@scenario
def raw_http(c: Client) -> None:
    ns = c.namespace
    base = f"/api/v1/namespaces/{ns}/configmaps"
    c.http("POST", base, {"metadata": {"name": "raw"}, "data": {"a": "1"}}, key="POST (JSON)")
    c.http("POST", base, {"metadata": {"name": "raw2"}}, content_type=None, key="POST without Content-Type")
    c.http("POST", base, b"metadata: {name: raw3}", content_type="application/yaml", key="POST YAML")
    c.http("PATCH", f"{base}/raw", {"data": {"b": "2"}}, content_type="application/json",
           key="PATCH with application/json", fields=("kind", "code", "reason", "message"))
    c.http("PATCH", f"{base}/raw", {"data": {"b": "2"}}, content_type="application/merge-patch+json",
           key="PATCH merge", fields=("kind", "data"))
    c.http("GET", f"{base}/raw?resourceVersion=0", key="GET rv=0", fields=("kind", "data"))
    c.http("GET", f"{base}?limit=1", key="LIST limit=1", fields=("kind", "apiVersion"))
    c.http("GET", f"{base}?labelSelector=a%20in%20(", key="LIST bad labelSelector")
    c.http("GET", f"{base}?fieldSelector=data.a%3D1", key="LIST unsupported fieldSelector")
    c.http("DELETE", f"{base}/raw", key="DELETE", fields=("kind", "metadata"))
    c.http("DELETE", f"{base}/raw?dryRun=All", key="DELETE missing dry-run")
    c.http("GET", f"/api/v1/namespaces/{ns}/nosuchresource", key="GET unknown resource")
    c.http("GET", "/apis/nosuchgroup.example.com/v1", key="GET unknown group")
    c.http("GET", "/apis/nosuchgroup.example.com/v1/things", key="GET unknown group's resource")
    c.http("GET", "/apis/apps/v9/deployments", key="GET unknown version of a served group")
    c.http("GET", "/api/v2", key="GET unknown core version")
    c.http("GET", "/nosuchpath", key="GET unknown path")


@scenario
def watch_sequence(c: Client) -> None:
    """A watch from a list's resourceVersion sees ADDED, MODIFIED, DELETED in order, each with the object;
    a watch from resourceVersion 0 starts with the current state as ADDED events."""
    import threading

    import kubernetes

    api = c.api_client()
    try:
        core = kubernetes.client.CoreV1Api(api)
        ns = c.namespace
        core.create_namespaced_config_map(ns, {"metadata": {"name": "before"}, "data": {"v": "0"}})
        rv = core.list_namespaced_config_map(ns).metadata.resource_version
        seen: list[Any] = []
        done = threading.Event()

        def watch() -> None:
            w = kubernetes.watch.Watch()
            for event in w.stream(core.list_namespaced_config_map, ns, resource_version=rv,
                                  timeout_seconds=60, field_selector="metadata.name=w"):
                obj = event["object"]
                seen.append((event["type"], obj.metadata.name, obj.data))
                if event["type"] == "DELETED":
                    w.stop()
            done.set()

        thread = threading.Thread(target=watch, daemon=True)
        thread.start()
        core.create_namespaced_config_map(ns, {"metadata": {"name": "w"}, "data": {"v": "1"}})
        core.patch_namespaced_config_map("w", ns, {"data": {"v": "2"}})
        core.delete_namespaced_config_map("w", ns)
        done.wait(60)
        c.record("watch from a list's resourceVersion", seen)
        initial: list[Any] = []
        w = kubernetes.watch.Watch()
        for event in w.stream(core.list_namespaced_config_map, ns, resource_version="0", timeout_seconds=2):
            initial.append((event["type"], event["object"].metadata.name))
        c.record("watch from resourceVersion 0: the current state first", sorted(initial))
    finally:
        api.close()


def _events(events: list[dict[str, Any]]) -> list[Any]:
    """What a client takes from watch events: type, and the object's name (a bookmark: its annotations;
    an error: its Status, resourceVersions in the message made ``<rv>``)."""
    out: list[Any] = []
    for event in events:
        obj = event.get("object") or {}
        meta = obj.get("metadata") or {}
        if event.get("type") == "BOOKMARK":
            out.append(("BOOKMARK", obj.get("kind"), meta.get("annotations"),
                        bool(meta.get("resourceVersion"))))
        elif event.get("type") == "ERROR" or obj.get("kind") == "Status":
            out.append((event.get("type"), _status(obj)))
        else:
            out.append((event.get("type"), meta.get("name")))
    return out


def _status(obj: dict[str, Any]) -> dict[str, Any]:
    import re

    return {"code": obj.get("code"), "reason": obj.get("reason"), "status": obj.get("status"),
            "message": re.sub(r"\d+", "<rv>", str(obj.get("message"))),
            "continue": bool((obj.get("metadata") or {}).get("continue"))}


@scenario
def watch_bookmarks(c: Client) -> None:
    """A watch-list (``sendInitialEvents``, client-go's streaming list): the current objects as ADDED, then
    a BOOKMARK annotated ``k8s.io/initial-events-end``; the parameters it needs, refused without them."""
    ns = c.namespace
    for name in ("b1", "b2"):
        c.run_kubectl("create", "configmap", name, "--from-literal=k=v")
    base = f"/api/v1/namespaces/{ns}/configmaps?watch=1&timeoutSeconds=3&sendInitialEvents=true"
    for key, query in (
        ("watch-list: initial events, then the bookmark", "&resourceVersionMatch=NotOlderThan"
                                                         "&allowWatchBookmarks=true"),
        ("watch-list without allowWatchBookmarks", "&resourceVersionMatch=NotOlderThan"),
        ("watch-list without resourceVersionMatch", "&allowWatchBookmarks=true"),
        ("watch-list with resourceVersionMatch=Exact",
         "&allowWatchBookmarks=true&resourceVersionMatch=Exact&resourceVersion=1"),
    ):
        status, events = c.watch(base + query)
        # after the initial-events-end bookmark come the server's periodic bookmarks: timing, not state
        until = next((i for i, e in enumerate(events)
                      if ((e.get("object") or {}).get("metadata") or {}).get("annotations")), len(events))
        c.record(key, {"status": status, "events": c.norm.obj(_events(events[:until + 1]))})
    status, payload = c.request("GET", f"/api/v1/namespaces/{ns}/configmaps?sendInitialEvents=true")
    c.record("sendInitialEvents on a list",
             {"status": status, "body": c.norm.obj(_status(json.loads(payload)))})


@scenario
def api_priority_and_fairness(c: Client) -> None:
    """flowcontrol.apiserver.k8s.io/v1: the bootstrap configuration, its tables, the Dangling condition."""
    c.kubectl("get", "flowschemas")
    c.kubectl("get", "prioritylevelconfigurations", "-o", "wide")
    c.kubectl("get", "flowschema", "catch-all", "-o", "json", json_out=True)
    c.kubectl("get", "prioritylevelconfiguration", "exempt", "-o", "json", json_out=True)
    fs, pl = f"fs-{c.namespace}", f"pl-{c.namespace}"
    c.kubectl("create", "-f", "-", input=json.dumps({
        "apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "FlowSchema", "metadata": {"name": fs},
        "spec": {"priorityLevelConfiguration": {"name": pl}}}),
        key="create a FlowSchema naming a missing level")
    c.kubectl("wait", f"flowschema/{fs}", "--for=condition=Dangling=True", "--timeout=30s",
              key="wait for Dangling=True")
    c.kubectl("get", "flowschema", fs, "-o", "json", json_out=True, key="FlowSchema, its level missing")
    c.kubectl("create", "-f", "-", input=json.dumps({
        "apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "PriorityLevelConfiguration",
        "metadata": {"name": pl},
        "spec": {"type": "Limited", "limited": {"limitResponse": {"type": "Queue", "queuing": {}}}}}),
        key="create the PriorityLevelConfiguration")
    c.kubectl("wait", f"flowschema/{fs}", "--for=condition=Dangling=False", "--timeout=30s",
              key="wait for Dangling=False")
    c.kubectl("get", "flowschema", fs, "-o", "wide", key="FlowSchema table, its level found")
    c.kubectl("get", "prioritylevelconfiguration", pl, "-o", "json", json_out=True,
              key="PriorityLevelConfiguration with its defaults")
    c.kubectl("patch", "flowschema", fs, "--type=merge", "-p", '{"spec":{"matchingPrecedence":500}}',
              "-o", "jsonpath={.metadata.generation}", key="generation after a spec change")
    c.kubectl("create", "-f", "-", input=json.dumps({
        "apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "PriorityLevelConfiguration",
        "metadata": {"name": f"bad-{c.namespace}"}, "spec": {"type": "Limited"}}),
        key="an invalid PriorityLevelConfiguration")
    c.kubectl("delete", "prioritylevelconfiguration", pl)
    c.kubectl("wait", f"flowschema/{fs}", "--for=condition=Dangling=True", "--timeout=30s",
              key="wait for Dangling=True again")
    c.kubectl("delete", "flowschema", fs)


@scenario
def list_resource_versions(c: Client) -> None:
    """The list parameters of consistency (resourceVersion, resourceVersionMatch, continue) as the API
    server validates them: the 422s, 400s and the 504 of a resourceVersion from the future."""
    import re

    ns = c.namespace
    c.norm.extra.append((re.compile(r"current: \d+"), "current: <rv>"))  # each server's own revision
    c.run_kubectl("create", "configmap", "one", "--from-literal=k=v")
    for query in ("resourceVersionMatch=Exact", "resourceVersion=0&resourceVersionMatch=Exact",
                  "resourceVersion=5&resourceVersionMatch=Bogus", "resourceVersion=abc",
                  "resourceVersion=abc&resourceVersionMatch=Exact", "limit=1&continue=abc",
                  "resourceVersion=5&resourceVersionMatch=NotOlderThan&limit=1&continue=abc",
                  "watch=1&resourceVersion=5&resourceVersionMatch=NotOlderThan",
                  "resourceVersion=99999999", "resourceVersion=99999999&resourceVersionMatch=Exact"):
        c.http("GET", f"/api/v1/namespaces/{ns}/configmaps?{query}", key=f"list ?{query}",
               fields=("kind", "code", "reason", "message", "details"))
    c.http("GET", f"/api/v1/namespaces/{ns}/configmaps?resourceVersion=0", key="list ?resourceVersion=0",
           fields=("kind",))


@private
def watch_across_compaction(c: Client) -> None:
    """Watches, lists and continue tokens from before a compaction get 410 Expired; from after it, work."""
    assert c.compact is not None
    ns = c.namespace
    for name in ("a", "b"):
        c.run_kubectl("create", "configmap", name, "--from-literal=k=v")
    status, payload = c.request("GET", f"/api/v1/namespaces/{ns}/configmaps?limit=1")
    first = json.loads(payload)
    old_rv, token = first["metadata"]["resourceVersion"], first["metadata"].get("continue")
    c.record("a first page before the compaction", {"status": status, "items": len(first["items"]),
                                                    "continue": bool(token)})
    c.run_kubectl("label", "configmap", "a", "x=1")
    c.run_kubectl("create", "configmap", "c", "--from-literal=k=v")
    c.compact()
    status, events = c.watch(f"/api/v1/namespaces/{ns}/configmaps?watch=1&timeoutSeconds=5"
                             f"&resourceVersion={old_rv}")
    c.record("watch from before the compaction", {"status": status, "events": _events(events)})
    for key, query in (("list at an exact resourceVersion from before it",
                        f"resourceVersion={old_rv}&resourceVersionMatch=Exact"),
                       ("list not older than a resourceVersion from before it",
                        f"resourceVersion={old_rv}&resourceVersionMatch=NotOlderThan"),
                       ("the next page with a continue token from before it", f"limit=1&continue={token}")):
        status, payload = c.request("GET", f"/api/v1/namespaces/{ns}/configmaps?{query}")
        body = json.loads(payload)
        seen = (_status(body) if body.get("kind") == "Status"
                else sorted(n for i in body.get("items") or [] if len(n := i["metadata"]["name"]) == 1))
        c.record(key, {"status": status, "body": seen})
    status, payload = c.request("GET", f"/api/v1/namespaces/{ns}/configmaps")
    new_rv = json.loads(payload)["metadata"]["resourceVersion"]
    c.run_kubectl("create", "configmap", "d", "--from-literal=k=v")
    c.run_kubectl("delete", "configmap", "b")
    status, events = c.watch(f"/api/v1/namespaces/{ns}/configmaps?watch=1&timeoutSeconds=3"
                             f"&resourceVersion={new_rv}")
    c.record("watch from after the compaction", {"status": status, "events": _events(events)})


_DRAINED = """
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web, drain: "yes"}}
    spec: {containers: [{name: web, image: "nginx:1.27"}]}
---
apiVersion: v1
kind: Pod
metadata: {name: bare, labels: {drain: "yes"}}
spec: {containers: [{name: bare, image: "nginx:1.27"}]}
"""


@private
def drain_a_node(c: Client) -> None:
    """kubectl drain, as kubernetes.core's k8s_drain does it: cordon; pods without a controller refused
    unless forced; the others evicted (pods/eviction) and re-created by their controller, which the
    cordoned node no longer takes; uncordon."""
    import re

    node = c.run_kubectl("get", "nodes", "-o", "jsonpath={.items[0].metadata.name}").stdout.strip()
    c.norm.extra.append((re.compile(re.escape(node)), "NODE"))
    c.run_kubectl("apply", "-f", "-", input=_DRAINED)
    c.run_kubectl("rollout", "status", "deployment/web", WAIT)
    c.run_kubectl("wait", "pod/bare", "--for=condition=Ready", WAIT)
    drain = ("drain", node, "--pod-selector=drain=yes", "--ignore-daemonsets", "--timeout=90s")
    refused = c.run_kubectl(*drain)
    c.record("drain refused: a pod without a controller",
             {"rc": refused.returncode, "stdout": c.norm.text(refused.stdout),
              "stderr": sorted(c.norm.text(refused.stderr).splitlines())})
    c.run_kubectl("wait", f"node/{node}", "--timeout=60s",  # the node lifecycle controller taints it
                  "--for=jsonpath={.spec.taints[*].key}=node.kubernetes.io/unschedulable")
    c.kubectl("get", "node", node, "-o", "jsonpath={.spec.unschedulable} {.spec.taints[*].key}",
              key="cordoned: unschedulable, tainted")
    forced = c.run_kubectl(*drain, "--force")
    c.record("drain --force", {"rc": forced.returncode,
                               "stdout": sorted(c.norm.text(forced.stdout).splitlines()),
                               "stderr": sorted(c.norm.text(forced.stderr).splitlines())})
    deadline = time.monotonic() + 60  # the ReplicaSet controller re-creates the evicted pods
    while time.monotonic() < deadline:
        if len(c.run_kubectl("get", "pods", "-l", "app=web", "-o", "name").stdout.split()) == 2:
            break
        time.sleep(0.5)
    c.kubectl("wait", "pods", "-l", "app=web", "--for=condition=PodScheduled=false", WAIT,
              key="the deployment's new pods: not scheduled")
    c.kubectl("get", "pods", "-l", "app=web", "-o",
              "jsonpath={range .items[*]}{.status.phase} {.spec.nodeName}{'\\n'}{end}",
              key="the deployment's new pods: Pending, on no node")
    c.kubectl("uncordon", node, key="kubectl uncordon NODE")
    c.run_kubectl("wait", "pods", "-l", "app=web", "--for=condition=Ready", WAIT)
    c.kubectl("get", "pods", "-l", "app=web", "-o", "jsonpath={range .items[*]}{.status.phase}{'\\n'}{end}",
              key="after uncordon: Running again")


_PLAYBOOK = """
- hosts: localhost
  gather_facts: false
  module_defaults:
    group/kubernetes.core.k8s:
      namespace: "{{ ns }}"
  tasks:
    - name: apply (create)
      kubernetes.core.k8s:
        apply: true
        definition: {apiVersion: v1, kind: ConfigMap, metadata: {name: kc}, data: {a: "1"}}
      register: apply_create
    - name: apply (unchanged)
      kubernetes.core.k8s:
        apply: true
        definition: {apiVersion: v1, kind: ConfigMap, metadata: {name: kc}, data: {a: "1"}}
      register: apply_unchanged
    - name: check mode with diff
      kubernetes.core.k8s:
        definition: {apiVersion: v1, kind: ConfigMap, metadata: {name: kc}, data: {a: "2"}}
      check_mode: true
      diff: true
      register: check_diff
    - name: merge patch
      kubernetes.core.k8s:
        state: patched
        merge_type: merge
        definition: {apiVersion: v1, kind: ConfigMap, metadata: {name: kc}, data: {b: "2"}}
      register: merge_patch
    - name: json patch
      kubernetes.core.k8s_json_patch:
        kind: ConfigMap
        name: kc
        namespace: "{{ ns }}"
        patch: [{op: add, path: /data/c, value: "3"}]
      register: json_patch
    - name: info, managedFields hidden
      kubernetes.core.k8s_info:
        kind: ConfigMap
        name: kc
        namespace: "{{ ns }}"
        hidden_fields: [metadata.managedFields]
      register: info
    - name: a Deployment, waited for
      kubernetes.core.k8s:
        wait: true
        wait_timeout: 150
        wait_condition: {type: Available, status: "True"}
        definition:
          apiVersion: apps/v1
          kind: Deployment
          metadata: {name: kd}
          spec:
            replicas: 1
            selector: {matchLabels: {app: kd}}
            template:
              metadata: {labels: {app: kd}}
              spec: {containers: [{name: c, image: "nginx:1.26"}]}
      register: deployment
    - name: new image, waited for
      kubernetes.core.k8s:
        wait: true
        wait_timeout: 150
        definition:
          apiVersion: apps/v1
          kind: Deployment
          metadata: {name: kd}
          spec: {template: {spec: {containers: [{name: c, image: "nginx:1.27"}]}}}
      register: new_image
    - name: scale
      kubernetes.core.k8s_scale:
        kind: Deployment
        name: kd
        namespace: "{{ ns }}"
        replicas: 2
        wait_timeout: 150
      register: scale
    - name: rollback
      kubernetes.core.k8s_rollback:
        api_version: apps/v1
        kind: Deployment
        name: kd
        namespace: "{{ ns }}"
      register: rollback
    - name: delete, waited for
      kubernetes.core.k8s:
        state: absent
        wait: true
        wait_timeout: 150
        kind: ConfigMap
        name: kc
      register: absent
    - name: what each task saw
      ansible.builtin.copy:
        dest: "{{ out }}"
        content: "{{ {'apply_create': apply_create, 'apply_unchanged': apply_unchanged,
                      'check_diff': check_diff, 'merge_patch': merge_patch, 'json_patch': json_patch,
                      'info': info, 'deployment': deployment, 'new_image': new_image, 'scale': scale,
                      'rollback': rollback, 'absent': absent} | to_json }}"
"""

# What a task's result reports that depends on the moment or the cluster, not on the API's behaviour
_VOLATILE_RESULT_KEYS = ("duration", "invocation", "warnings", "deprecations")


@scenario
def kubernetes_core_modules(c: Client) -> None:
    """The operations roles use, through kubernetes.core's modules (apply, check/diff mode, merge and
    JSON patches, k8s_info with hidden_fields, wait conditions, scale, rollback, delete with wait), run
    as an operator runs them: a run of the warm executor (its modules make the requests they make under
    ansible-playbook, without a process and an import of the client per task)."""
    import asyncio

    from tests import plays

    playbook = c.workdir / "play.yml"
    playbook.write_text(_PLAYBOOK)
    out = c.workdir / "results.json"
    env = {"K8S_AUTH_KUBECONFIG": str(c.kubeconfig), "ANSIBLE_LOCALHOST_WARNING": "false",
           "ANSIBLE_INVENTORY_UNPARSED_WARNING": "false"}

    async def run() -> tuple[Any, str]:
        async with plays.warm_executor() as executor:
            return await plays.run_file(executor, c.workdir, playbook, {"ns": c.namespace, "out": str(out)},
                                        env, timeout=600)

    outcome, output = asyncio.run(run())
    c.record("run status", outcome.status)
    if outcome.status != "successful":
        c.record("run output (on failure)", output[-5000:])
        return
    results = json.loads(out.read_text())
    for name, result in results.items():
        result = {k: v for k, v in result.items() if k not in _VOLATILE_RESULT_KEYS}
        if "diff" in result:  # the before/after objects: only what the module changes is compared
            result["diff"] = {k: (v or {}).get("data") if isinstance(v, dict) else v
                              for k, v in result["diff"].items()}
        c.record(name, c.norm.obj(result))


def _csr_pem() -> str:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    csr = (x509.CertificateSigningRequestBuilder()
           .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "someone")]))
           .sign(key, hashes.SHA256()))
    return csr.public_bytes(serialization.Encoding.PEM).decode()


@scenario
def cluster_kinds_tables(c: Client) -> None:
    """Printer columns of kinds a cluster makes: Nodes (headers: node names differ), EndpointSlices of a
    Service with ready pods, a CertificateSigningRequest before and after approval."""
    import base64

    done = c.run_kubectl("get", "nodes", "-o", "wide")
    c.record("kubectl get nodes -o wide: columns",
             (done.returncode, c.norm.text(done.stdout).splitlines()[:1]))
    c.run_kubectl("create", "deployment", "sliced", "--image=nginx:1.27", "--replicas=2")
    c.run_kubectl("expose", "deployment", "sliced", "--port=80", "--target-port=8080")
    c.rollout_status("deployment/sliced")
    # kubectl wait's jsonpath gives up at once while the slice has no endpoints yet: poll instead
    deadline = time.monotonic() + 150
    while time.monotonic() < deadline:
        ready = c.run_kubectl("get", "endpointslices", "-l", "kubernetes.io/service-name=sliced", "-o",
                              "jsonpath={.items[*].endpoints[*].conditions.ready}").stdout.split()
        if ready.count("true") == 2:
            break
        time.sleep(0.5)
    c.kubectl("get", "endpointslices", "-l", "kubernetes.io/service-name=sliced")
    name = f"csr-{c.namespace}"
    c.kubectl("apply", "-f", "-", key="apply csr", input=json.dumps({
        "apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
        "metadata": {"name": name},
        "spec": {"request": base64.b64encode(_csr_pem().encode()).decode(),
                 "signerName": "example.com/signer", "usages": ["client auth"], "expirationSeconds": 3600}}))
    c.kubectl("get", "csr", name)
    c.kubectl("certificate", "approve", name)
    c.kubectl("get", "csr", name, key="get csr after approval")
    c.run_kubectl("delete", "csr", name, "--ignore-not-found")


@scenario
def ephemeral_containers(c: Client) -> None:
    """``kubectl debug`` adds an ephemeral container through pods/ephemeralcontainers."""
    import re

    c.run_kubectl("run", "target", "--image=nginx:1.27", "--restart=Never")
    c.run_kubectl("wait", "pod/target", "--for=condition=Ready", WAIT)
    node = c.run_kubectl("get", "pod", "target", "-o", "jsonpath={.spec.nodeName}").stdout.strip()
    if node:
        c.norm.extra.append((re.compile(rf"\b{re.escape(node)}\b"), "NODE"))
    c.kubectl("get", "pod", "target", "-o", "wide")
    c.kubectl("get", "pod", "target", "-o", "jsonpath={range .spec.volumes[*]}{.projected.sources}{end}"
              " {.spec.containers[0].volumeMounts}", key="the ServiceAccount's projected token volume")
    c.run_kubectl("create", "deployment", "wide", "--image=nginx:1.27")
    c.run_kubectl("rollout", "status", "deployment/wide", WAIT)
    c.kubectl("get", "pods", "-l", "app=wide", "-o", "wide", key="a deployment's pods -o wide")
    c.kubectl("debug", "target", "--image=busybox:1.36", "--container=dbg", "--", "sleep", "60")
    c.kubectl("get", "pod", "target", "-o", "jsonpath={.spec.ephemeralContainers[*].name}",
              key="ephemeral containers after debug")
    c.kubectl("patch", "pod", "target", "--subresource=ephemeralcontainers", "--type=json",
              "-p", '[{"op":"remove","path":"/spec/ephemeralContainers/0"}]', key="remove one")
