"""The deployable material of the examples: CRDs, watches.yaml, samples, kustomize layout, RBAC.

Fast checks (no Ansible runs): everything renders, applies to the test's API server (the session's real
control plane, or a sandbox: tests/examples/conftest.py), and stays consistent with the roles - RBAC must
cover every kind a role touches, or the operator fails with 403 in a real cluster.
"""

from __future__ import annotations

import re
import subprocess
from typing import Any

import kubernetes
import pytest
import yaml

from ansible_operator.watches import load_watches
from tests.harness import wait_for

from .conftest import KUBECTL, REPO, ExampleAPI


def kustomize(path: str) -> list[dict[str, Any]]:
    proc = subprocess.run(
        [KUBECTL, "kustomize", str(REPO / path)], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


def test_watches_resolve_every_role_and_the_finalizer() -> None:
    watches = {w.kind: w for w in load_watches(REPO / "watches.yaml", env={})}
    assert set(watches) == {"SampleDB", "Memcached", "EtcdCluster"}
    assert watches["SampleDB"].role == str(REPO / "roles" / "sampledb")
    assert watches["SampleDB"].finalizer is not None
    assert watches["SampleDB"].finalizer.name == "db.ansible-operator.dev/finalizer"
    assert watches["SampleDB"].finalizer.role == str(REPO / "roles" / "sampledb_finalizer")


def test_every_role_has_galaxy_metadata() -> None:
    """Molecule (and ansible-galaxy) name roles namespace.role_name from meta/main.yml."""
    roles = sorted(p for p in (REPO / "roles").iterdir() if p.is_dir())
    assert roles
    for role in roles:
        meta = yaml.safe_load((role / "meta" / "main.yml").read_text())
        info = meta["galaxy_info"]
        assert info["namespace"] == "ansible_operator_examples", role.name
        assert info["role_name"] == role.name


def test_crd_kustomization_lists_every_crd_and_crds_dir_matches() -> None:
    docs = kustomize("config/crd")
    names = sorted(d["metadata"]["name"] for d in docs)
    on_disk = sorted(
        yaml.safe_load(p.read_text())["metadata"]["name"] for p in (REPO / "crds").glob("*.yaml")
    )
    assert names == on_disk == [
        "etcdclusters.etcd.database.example.com",
        "memcacheds.cache.example.com",
        "sampledbs.db.ansible-operator.dev",
    ]


def test_default_renders_with_namespace_prefix_probes_and_metrics() -> None:
    docs = kustomize("config/default")
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for d in docs:
        by_kind.setdefault(d["kind"], []).append(d)
    assert [n["metadata"]["name"] for n in by_kind["Namespace"]] == ["ansible-operator-system"]
    (deploy,) = by_kind["Deployment"]
    assert deploy["metadata"]["namespace"] == "ansible-operator-system"
    pod = deploy["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "ansible-operator-controller-manager"
    (container,) = pod["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"metrics": 8080, "health": 6789}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    (svc,) = by_kind["Service"]
    assert svc["spec"]["ports"][0]["port"] == 8080
    assert svc["spec"]["selector"] == deploy["spec"]["selector"]["matchLabels"]
    # The bindings point at the prefixed ServiceAccount in the operator's namespace.
    for binding in by_kind["ClusterRoleBinding"] + by_kind["RoleBinding"]:
        assert binding["subjects"] == [
            {
                "kind": "ServiceAccount",
                "name": "ansible-operator-controller-manager",
                "namespace": "ansible-operator-system",
            }
        ]


def _role_touched_kinds() -> set[tuple[str, str]]:
    """(apiGroup, kind) of every kubernetes.core task in the roles (definition or api_version/kind)."""
    found: set[tuple[str, str]] = set()

    def visit(node: Any) -> None:
        if isinstance(node, dict):
            for key, args in node.items():
                if isinstance(key, str) and key.startswith("kubernetes.core.") and isinstance(args, dict):
                    definition = args.get("definition")
                    spec = definition if isinstance(definition, dict) else args
                    api, kind = spec.get("apiVersion") or spec.get("api_version", "v1"), spec.get("kind")
                    if isinstance(kind, str) and "{{" not in kind and "{{" not in str(api):
                        found.add((api.rpartition("/")[0], kind))
                visit(args)
        elif isinstance(node, list):
            for item in node:
                visit(item)

    for f in (REPO / "roles").rglob("tasks/*.yml"):
        visit(yaml.safe_load(f.read_text()))
    return found


PLURALS = {"Secret": "secrets", "ConfigMap": "configmaps", "Service": "services", "Pod": "pods",
           "PersistentVolumeClaim": "persistentvolumeclaims", "Deployment": "deployments",
           "StatefulSet": "statefulsets", "Job": "jobs", "CronJob": "cronjobs"}


def test_sharding_overlay_runs_three_sharding_replicas_of_the_same_operator() -> None:
    """config/sharding is config/default with three replicas and ``--sharding`` for ``--leader-elect``;
    the leader election Role already grants what each replica's own Lease needs."""
    default, sharding = kustomize("config/default"), kustomize("config/sharding")
    key = lambda d: (d["kind"], d["metadata"]["name"])  # noqa: E731
    assert sorted(map(key, sharding)) == sorted(map(key, default))
    deployments = {key(d): d for d in sharding if d["kind"] == "Deployment"}
    (deploy,) = deployments.values()
    (base,) = [d for d in default if key(d) in deployments]
    args = deploy["spec"]["template"]["spec"]["containers"][0]["args"]
    base_args = base["spec"]["template"]["spec"]["containers"][0]["args"]
    assert deploy["spec"]["replicas"] == 3
    assert "--sharding" in args and "--leader-elect" not in args
    assert [a for a in args if a != "--sharding"] == [a for a in base_args if a != "--leader-elect"]
    assert any(a.startswith("--leader-election-id=") for a in args)  # the ring's name
    others = lambda docs: [d for d in docs if d["kind"] != "Deployment"]  # noqa: E731
    assert others(sharding) == others(default)
    (role,) = [d for d in sharding
               if d["kind"] == "Role" and d["metadata"]["name"].endswith("leader-election-role")]
    leases = [r for r in role["rules"] if "leases" in r["resources"]]
    assert leases and {"get", "list", "watch", "create", "update", "delete"} <= set(leases[0]["verbs"])


def test_manager_role_covers_every_kind_the_roles_touch_and_the_watched_kinds() -> None:
    (role,) = [d for d in kustomize("config/default")
               if d["kind"] == "ClusterRole" and d["metadata"]["name"] == "ansible-operator-manager-role"]
    allowed: dict[tuple[str, str], set[str]] = {}
    for rule in role["rules"]:
        for group in rule["apiGroups"]:
            for res in rule["resources"]:
                allowed.setdefault((group, res), set()).update(rule["verbs"])
    touched = _role_touched_kinds()
    assert ("apps", "StatefulSet") in touched and ("batch", "Job") in touched  # the scan works
    for group, kind in touched:
        if group.endswith(("ansible-operator.dev", "example.com")):
            continue  # the watched kinds, checked below
        verbs = allowed.get((group, PLURALS[kind]), set())
        assert {"get", "list", "watch"} <= verbs, (group, kind)
        if kind != "Pod":
            assert {"create", "patch", "delete"} <= verbs, (group, kind)
    for w in load_watches(REPO / "watches.yaml", env={}):
        plural = yaml.safe_load(next((REPO / "crds").glob(f"{w.group}_*.yaml")).read_text())["spec"]["names"][
            "plural"
        ]
        assert {"get", "list", "watch", "patch", "update"} <= allowed[(w.group, plural)]
        assert {"update", "patch"} <= allowed[(w.group, f"{plural}/status")]
        assert "update" in allowed[(w.group, f"{plural}/finalizers")]


def test_default_render_applies_and_the_manager_deployment_becomes_available(example_api: ExampleAPI) -> None:
    """config/default as a user applies it. Its namespace and cluster-wide RBAC objects are the only ones of
    these names on the (shared) API server; they are deleted afterwards, the CRDs (which every example
    test uses) stay."""
    render = subprocess.run([KUBECTL, "kustomize", str(REPO / "config/default")], capture_output=True,
                            text=True, timeout=60, check=True).stdout
    env = example_api.kubectl_env()
    proc = subprocess.run([KUBECTL, "apply", "-f", "-"], input=render, capture_output=True, text=True,
                          timeout=60, env=env)
    try:
        assert proc.returncode == 0, proc.stderr
        assert "deployment.apps/ansible-operator-controller-manager created" in proc.stdout
        apps = kubernetes.client.AppsV1Api(example_api.api)
        name, ns = "ansible-operator-controller-manager", "ansible-operator-system"
        dep = apps.read_namespaced_deployment(name, ns)
        assert dep.spec.template.spec.containers[0].args[0] == "--leader-elect"
        # The manager's pod is created with its ServiceAccount, scheduled and started (kwok's node runs
        # no image: it reports the pod Running and Ready), so the Deployment becomes Available.

        def available() -> bool:
            conditions = apps.read_namespaced_deployment(name, ns).status.conditions or []
            return any(c.type == "Available" and c.status == "True" for c in conditions)

        wait_for(available, timeout=120, what=f"Deployment {ns}/{name} Available")
        pods = kubernetes.client.CoreV1Api(example_api.api).list_namespaced_pod(
            ns, label_selector=",".join(f"{k}={v}" for k, v in dep.spec.selector.match_labels.items())).items
        assert [p.spec.service_account_name for p in pods] == ["ansible-operator-controller-manager"]
    finally:
        if example_api.real:
            kept = [d for d in yaml.safe_load_all(render) if d and d["kind"] != "CustomResourceDefinition"]
            subprocess.run([KUBECTL, "delete", "--wait=false", "--ignore-not-found", "-f", "-"], env=env,
                           input=yaml.safe_dump_all(kept), capture_output=True, text=True, timeout=60)


def test_samples_apply_and_get_the_crd_defaults(example_api: ExampleAPI) -> None:
    ns = example_api.ns
    proc = subprocess.run([KUBECTL, "apply", "-k", str(REPO / "config/samples"), "-n", ns],
                          capture_output=True, text=True, timeout=60, env=example_api.kubectl_env())
    assert proc.returncode == 0, proc.stderr
    api = kubernetes.client.CustomObjectsApi(example_api.api)
    db = api.get_namespaced_custom_object("db.ansible-operator.dev", "v1alpha1", ns, "sampledbs",
                                          "sampledb-sample")
    assert db["spec"]["image"] == "postgres"  # defaulted by the schema
    assert db["spec"]["backup"] == {"schedule": "0 3 * * *", "storage": "1Gi", "keep": 3}
    etcd = api.get_namespaced_custom_object("etcd.database.example.com", "v1beta2", ns, "etcdclusters",
                                            "etcdcluster-sample")
    assert etcd["spec"] == {"size": 3, "version": "3.5.17"}


@pytest.mark.parametrize("spec, field", [
    ({"version": "16"}, "spec.version"),
    ({"storage": "10GB"}, "spec.storage"),
    ({"replicas": 3}, "spec.replicas"),
    ({"backup": {"keep": 0}}, "spec.backup.keep"),
])
def test_sampledb_schema_rejects_bad_values(example_api: ExampleAPI, spec: dict[str, Any],
                                            field: str) -> None:
    api = kubernetes.client.CustomObjectsApi(example_api.api)
    body = {"apiVersion": "db.ansible-operator.dev/v1alpha1", "kind": "SampleDB",
            "metadata": {"name": "bad"}, "spec": spec}
    with pytest.raises(kubernetes.client.ApiException) as err:
        api.create_namespaced_custom_object(
            "db.ansible-operator.dev", "v1alpha1", example_api.ns, "sampledbs", body
        )
    assert err.value.status == 422
    assert re.search(re.escape(field), err.value.body)


def _instructions(name: str) -> list[str]:
    text = (REPO / name).read_text()
    return [line for line in re.sub(r"\\\n\s*", " ", text).splitlines()
            if line and not line.lstrip().startswith("#")]


def test_dockerfiles_agree_with_the_deployment_and_the_repository() -> None:
    """The base image runs what the Deployment expects (Operator SDK's entrypoint, user, probe port); the
    examples image copies paths that exist and that its build context lets in."""
    base = _instructions("Dockerfile")
    assert [i for i in base if i.startswith("ENTRYPOINT")] == [
        'ENTRYPOINT ["/tini", "--", "/usr/local/bin/ansible-operator", "run",'
        ' "--watches-file=./watches.yaml"]'
    ]
    assert "USER 1001" in base and "WORKDIR ${HOME}" in base
    assert [i for i in base if i.startswith("FROM")][0].endswith("AS build")
    exposed = {int(p) for i in base if i.startswith("EXPOSE") for p in i.split()[1:]}
    (deploy,) = [d for d in kustomize("config/manager") if d["kind"] == "Deployment"]
    ports = {
        p["name"]: p["containerPort"] for p in deploy["spec"]["template"]["spec"]["containers"][0]["ports"]
    }
    assert ports["health"] in exposed
    for name, ignore in (
        ("Dockerfile", ".dockerignore"),
        ("examples.Dockerfile", "examples.Dockerfile.dockerignore"),
    ):
        allowed = {
            line[1:].rstrip("/") for line in (REPO / ignore).read_text().splitlines() if line.startswith("!")
        }
        for copy in (i for i in _instructions(name) if i.startswith("COPY") and "--from=" not in i):
            for src in [a for a in copy.split()[1:-1] if not a.startswith("--")]:
                assert (REPO / src).exists(), f"{name}: {copy}: {src} does not exist"
                assert src.rstrip("/") in allowed, f"{ignore} keeps {src} out of the build context"
