"""An operator laid out exactly like an Operator SDK scaffold, run the way its Deployment runs it (issue 10
item 6).

``tests/e2e/sdk_project`` is what ``operator-sdk init --plugins ansible --domain example.org`` + ``create
api --group web --version v1alpha1 --kind Website --generate-role --generate-playbook`` lays out (PROJECT,
Dockerfile FROM our image, requirements.yml, watches.yaml with a ``finalizer.vars.state: absent``
finalizer, playbooks/, roles/website with ``meta/main.yml`` collections, molecule/, config/ with kustomize
default + manager + rbac + samples), written for this test. Its role uses ``osdk_metric`` (counter and
gauge), ``k8s_status``, ``requeue_after`` to check its Deployment's rollout, and a vault-encrypted variable.

The operator is started like the container would be: ``ansible-operator run --watches-file=./watches.yaml``
(the image's ENTRYPOINT) in a copy of the project (its /opt/ansible), followed by the ``args`` and ``env`` of
the manager container in ``kubectl kustomize config/default`` -- the scaffold's manager args
(``--metrics-require-rbac --metrics-secure --metrics-bind-address=:8443 --leader-elect ...``) and ours
(``--ansible-args=--vault-password-file=...``). Two things stand in for the pod: the ports are moved to
free ones (a pod has its own network namespace), and the Deployment's volume mounts (the vault password
Secret) are provided at a temporary path. The rendered manifests are applied to the API server as well, and
/metrics is scraped the way Prometheus would: with the token of a ServiceAccount bound to the project's
metrics-reader ClusterRole, checked by the operator with a TokenReview and a SubjectAccessReview.
"""

from __future__ import annotations

import base64
import os
import re
import shutil
import signal
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import kubernetes
import pytest
import yaml
from kubernetes.client.rest import ApiException

from ansible_operator_sandbox.testing import start_in_thread, wait_for
from tests import kube
from tests.harness import served_port

# also on the lowest supported ansible-core (./dev.sh test-ansible-low): the project's role runs on both
pytestmark = [pytest.mark.e2e, pytest.mark.ansible_versions]

PROJECT = Path(__file__).parent / "sdk_project"
GROUP, VERSION, PLURAL = "web.example.org", "v1alpha1", "websites"
NS = "sites"
VAULT_PASSWORD = "website-operator-vault-pass"  # what roles/website/vars/main.yml was encrypted with
ADMIN_TOKEN = "S3cr3t-admin-token"  # ... and what it decrypts to


def _get(url: str, token: str | None = None) -> tuple[int, str]:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=5, context=context) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError:
        return 0, ""


MANAGER_NS = "website-operator-system"
"""The namespace config/default puts the manager in."""


def _rendered(manager_namespace: str = MANAGER_NS) -> list[dict[str, Any]]:
    """config/default as kustomize renders it; in ``manager_namespace`` instead of its own (on the shared
    control plane a run on another ansible-core may apply it at the same time: its manager's Lease and
    namespace must not be this one's)."""
    out = subprocess.run(["kubectl", "kustomize", str(PROJECT / "config" / "default")], check=True,
                         capture_output=True, text=True).stdout
    out = re.sub(rf"\b{MANAGER_NS}\b", manager_namespace, out)
    return [d for d in yaml.safe_load_all(out) if d]


def _container_command(manager: dict[str, Any], ports: dict[str, int], mounts: dict[str, Path]) -> list[str]:
    """The image's ENTRYPOINT with the Deployment's args, ports (0: the kernel picks) and mount paths moved
    for this host."""
    container = manager["spec"]["template"]["spec"]["containers"][0]
    args = []
    for arg in container.get("args") or []:
        for flag, port in ports.items():
            if arg.startswith(f"{flag}=:"):
                arg = f"{flag}=127.0.0.1:{port}"
        for mount_path, host_path in mounts.items():
            arg = arg.replace(mount_path, str(host_path))
        args.append(arg)
    # ENTRYPOINT ["/tini", "--", "/usr/local/bin/ansible-operator", "run", "--watches-file=./watches.yaml"]
    return [sys.executable, "-m", "ansible_operator", "run", "--watches-file=./watches.yaml", *args]


def _container_env(manager: dict[str, Any]) -> dict[str, str]:
    container = manager["spec"]["template"]["spec"]["containers"][0]
    env = {}
    for item in container.get("env") or []:
        if "value" in item:
            env[item["name"]] = str(item["value"])
        elif (item.get("valueFrom") or {}).get("fieldRef", {}).get("fieldPath") == "metadata.namespace":
            env[item["name"]] = manager["metadata"]["namespace"]
        else:
            raise AssertionError(f"env {item} is not something this test can provide")
    return env


@dataclass
class Server:
    """The API server the project runs against, and the namespace its Website lives in."""

    kubeconfig: Path
    ns: str
    kubectl_env: dict[str, str]
    token: Callable[[str, str], str]  # (namespace, service account) -> a bearer token
    manager_namespace: str = MANAGER_NS

    def api_client(self) -> kubernetes.client.ApiClient:
        return kube.api_client_for(self.kubeconfig)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    if kube.real():
        shared = kube.shared()

        def token(ns: str, name: str) -> str:
            with shared.api_client() as api:
                return str(kubernetes.client.CoreV1Api(api).create_namespaced_service_account_token(
                    name, ns, {"spec": {}}).status.token)

        # the rendered config/default's namespace, one of this test's own (config/default creates it)
        manager_namespace = f"{MANAGER_NS}-{uuid.uuid4().hex[:6]}"
        shared.created.append(manager_namespace)
        try:
            yield Server(shared.kubeconfig, shared.namespace("sites"), shared.kubectl_env(), token,
                         manager_namespace)
        finally:
            shared.cleanup()
        return
    handle = start_in_thread(tmp_path / "admin.kubeconfig", crds=[PROJECT / "config" / "crd" / "bases"])
    try:
        with handle.api_client() as api:
            kubernetes.client.CoreV1Api(api).create_namespace({"metadata": {"name": NS}})
        yield Server(handle.kubeconfig, NS, handle.kubectl_env(), handle.sandbox.create_token)
    finally:
        handle.sandbox.stop_thread()


def test_sdk_scaffolded_project_runs_with_its_manager_args(server: Server, tmp_path: Path) -> None:
    ns = server.ns
    api = server.api_client()
    core = kubernetes.client.CoreV1Api(api)
    custom = kubernetes.client.CustomObjectsApi(api)
    apps = kubernetes.client.AppsV1Api(api)
    rendered = _rendered(server.manager_namespace)
    (manager,) = [d for d in rendered if d["kind"] == "Deployment"]
    container = manager["spec"]["template"]["spec"]["containers"][0]
    assert "--metrics-require-rbac" in container["args"] and "--metrics-secure" in container["args"]

    # the whole rendered config/default is valid for the API server (the pod itself never starts here)
    applied = subprocess.run(["kubectl", "apply", "-f", "-"], input=yaml.safe_dump_all(rendered), text=True,
                             capture_output=True, env=server.kubectl_env)
    assert applied.returncode == 0, applied.stderr

    def served() -> bool:  # the CRD came with config/default on the shared control plane: established?
        try:
            custom.list_namespaced_custom_object(GROUP, VERSION, ns, PLURAL)
            return True
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise

    wait_for(served, timeout=60, interval=0.2, what="Websites served")

    # the pod's filesystem: the project under /opt/ansible, the website-vault Secret at its mount path
    home = tmp_path / "opt-ansible"
    shutil.copytree(PROJECT, home, ignore=shutil.ignore_patterns("config", "molecule", "__pycache__"))
    vault = tmp_path / "website-vault"
    vault.mkdir()
    (vault / "password").write_text(VAULT_PASSWORD + "\n")
    mounts = {m["mountPath"]: vault for m in container["volumeMounts"]}
    assert list(mounts) == ["/etc/website-vault"]
    command = _container_command(manager, {"--metrics-bind-address": 0, "--health-probe-bind-address": 0},
                                 mounts)
    # the image's HOME=/opt/ansible: run artifacts and Ansible's files stay in this test's copy
    env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "XDG_STATE_HOME", "XDG_CACHE_HOME")}
    env["HOME"] = str(home)
    env.update(_container_env(manager))
    env["KUBECONFIG"] = str(server.kubeconfig)
    # the pod's service account directory: --leader-elect puts the Lease in its namespace (controller-runtime)
    service_account = tmp_path / "serviceaccount"
    service_account.mkdir()
    (service_account / "namespace").write_text(manager["metadata"]["namespace"])
    env["ANSIBLE_OPERATOR_SERVICE_ACCOUNT_DIR"] = str(service_account)

    # a ConfigMap of the namespace's users that the finalizer updates (force: true): it must outlive the CR
    core.create_namespaced_config_map(ns, {"metadata": {"name": "website-audit", "labels": {"team": "web"}},
                                           "data": {"created-by": "the-users"}})
    log_path = tmp_path / "operator.log"
    with open(log_path, "wb") as log_file:
        proc = subprocess.Popen(command, cwd=home, env=env, stdout=log_file, stderr=subprocess.STDOUT,
                                start_new_session=True)

    def logs() -> str:
        return log_path.read_text(errors="replace")[-5000:]

    try:
        ports = {flag: served_port(lambda: log_path.read_text(errors="replace"), lambda: proc.poll() is None,
                                   path)
                 for flag, path in (("--metrics-bind-address", "/metrics"),
                                    ("--health-probe-bind-address", "/healthz"))}
        sample = yaml.safe_load((PROJECT / "config" / "samples" / "web_v1alpha1_website.yaml").read_text())
        created = custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, sample)
        name = created["metadata"]["name"]

        def rolled_out() -> dict[str, Any] | None:
            assert proc.poll() is None, logs()
            obj = custom.get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, name)
            status = obj.get("status") or {}
            conds = {c["type"]: c for c in status.get("conditions") or []}
            if conds.get("Failure", {}).get("status") == "True":
                raise AssertionError(f"{conds['Failure']}\n{logs()}")
            # ints on ansible-core 2.19, strings on <= 2.18 (templates render to text there)
            done = (conds.get("Successful", {}).get("status") == "True"
                    and int(status.get("readyReplicas") or 0) == 2 and int(status.get("checks") or 0) >= 2)
            return obj if done else None

        # Only requeue_after can run the role again (watchDependentResources: false, nobody edits the
        # Website, status writes do not count): status.checks >= 2 is its doing.
        try:
            obj = wait_for(rolled_out, timeout=180, interval=0.5,
                           what="Website Successful, 2 ready replicas, checked twice")
        except AssertionError as exc:
            current = custom.get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, name)
            raise AssertionError(f"{exc}\nstatus: {current.get('status')}\n{logs()}") from None
        assert obj["status"]["url"] == f"http://{name}.{ns}.svc"
        deploy = apps.read_namespaced_deployment(f"{name}-web", ns)
        assert deploy.spec.replicas == 2
        assert [r.uid for r in deploy.metadata.owner_references] == [created["metadata"]["uid"]]
        assert core.read_namespaced_config_map(f"{name}-content", ns).data == {
            "index.html": "<h1>Hello from an Operator SDK project</h1>"}
        # --ansible-args=--vault-password-file=...: the vault-encrypted variable was decrypted
        secret = core.read_namespaced_secret(f"{name}-admin", ns)
        assert base64.b64decode(secret.data["token"]).decode() == ADMIN_TOKEN

        # osdk_metric on /metrics, over HTTPS, behind the TokenReview + SubjectAccessReview filter
        metrics = f"https://127.0.0.1:{ports['--metrics-bind-address']}/metrics"
        assert _get(metrics)[0] == 401  # no bearer token
        # Prometheus' way in: a ServiceAccount bound to the project's metrics-reader ClusterRole, its token
        core.create_namespaced_service_account(ns, {"metadata": {"name": "prometheus"}})
        (reader,) = [d["metadata"]["name"] for d in rendered
                     if d["kind"] == "ClusterRole" and d["metadata"]["name"].endswith("metrics-reader")]
        kubernetes.client.RbacAuthorizationV1Api(api).create_cluster_role_binding({
            "metadata": {"name": f"prometheus-website-metrics-{ns}"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": reader},
            "subjects": [{"kind": "ServiceAccount", "name": "prometheus", "namespace": ns}]})
        token = server.token(ns, "prometheus")
        assert _get(metrics, "not-a-token")[0] == 401  # the TokenReview rejects it

        # The role writes status.readyReplicas (k8s_status) one task before it sets the gauge: the run that
        # reported 2 ready pods may still be between the two, so the gauge is waited on, not read once.
        def scraped() -> str | None:
            status, text = _get(metrics, token)
            return text if status == 200 and "\nwebsite_ready_replicas 2\n" in text else None

        text = wait_for(scraped, timeout=30, interval=0.5, what="website_ready_replicas 2.0 on /metrics")
        reconciles = [line for line in text.splitlines() if line.startswith("website_reconciles_total ")]
        assert reconciles and float(reconciles[0].split()[1]) >= 2  # the requeued runs counted too
        health = f"http://127.0.0.1:{ports['--health-probe-bind-address']}"
        assert _get(f"{health}/readyz")[0] == 200

        # the finalizer (watches.yaml finalizer.vars.state=absent) force-updates the users' ConfigMap
        custom.delete_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, name)

        def gone() -> bool:
            try:
                custom.get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, name)
                return False
            except ApiException as exc:
                return exc.status == 404

        wait_for(gone, timeout=120, interval=0.5, what="Website released by its finalizer")

        def collected() -> bool:
            try:
                core.read_namespaced_config_map(f"{name}-content", ns)
                return False
            except ApiException as exc:
                return exc.status == 404

        wait_for(collected, timeout=60, interval=0.5, what="the Website's own ConfigMap garbage-collected")
        audit = core.read_namespaced_config_map("website-audit", ns)  # a 404 here is issue 10's data loss
        assert audit.data == {"created-by": "the-users", f"deleted-{name}": "true"}
        assert not audit.metadata.owner_references

        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0, logs()
        assert "Traceback" not in logs()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
        api.close()
