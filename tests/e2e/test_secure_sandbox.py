"""Secure sandbox (``--secure``): TLS with its own CA, client-certificate and ServiceAccount-token
authentication, TokenRequest/TokenReview, access reviews and enforced RBAC, driven by kubectl and the
``kubernetes`` client as users drive a real cluster. One sandbox for the module.

On the real backend the same scenarios run against the shared real control plane (a namespace and
cluster-scoped names of the module's own): what the sandbox answers here is what the real API server
answers, byte for byte where the test says so. The sandbox's own command line (``ansible-operator sandbox
--secure`` restarted on its data directory) is tested on the sandbox backend only.
"""

from __future__ import annotations

import json
import ssl
import subprocess
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any, Iterator

import kubernetes
import pytest
from kubernetes.client.rest import ApiException

from ansible_operator_sandbox.testing import api_client_for, wait_for
from tests import kube

from .secure import SecureServer, secure_server

SUFFIX = uuid.uuid4().hex[:6]  # the real control plane is shared by the run (and by xdist workers)
NS = f"secure-{SUFFIX}"
ONE_CM = f"one-cm-{SUFFIX}"  # cluster-scoped names
MONITORING = f"monitoring-{SUFFIX}"
ENDPOINTS_READER = f"endpoints-reader-{SUFFIX}"
AGGREGATE_LABEL = f"example.com/aggregate-to-monitoring-{SUFFIX}"


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureServer]:
    with secure_server(tmp_path_factory.mktemp("secure"), simulate=False) as handle:
        handle.create_namespace(NS)
        yield handle


def kubectl(
    handle: SecureServer, *args: str, kubeconfig: Path | None = None
) -> subprocess.CompletedProcess[str]:
    env = handle.kubectl_env(kubeconfig)
    return subprocess.run(["kubectl", *args], env=env, capture_output=True, text=True, timeout=60)


def raw(
    handle: SecureServer,
    path: str,
    headers: dict[str, str] | None = None,
    method: str = "GET",
    body: Any = None,
) -> tuple[int, bytes]:
    ctx = ssl.create_default_context(cadata=handle.ca_pem)
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(
        handle.url + path,
        headers=dict(headers or {}, **({"Content-Type": "application/json"} if data else {})),
        method=method,
        data=data,
    )
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=30) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def sa_kubeconfig(handle: SecureServer, tmp_path: Path, name: str) -> tuple[str, Path]:
    r = kubectl(handle, "create", "serviceaccount", name, "-n", NS)
    assert r.returncode == 0, r.stderr
    r = kubectl(handle, "create", "token", name, "-n", NS)
    assert r.returncode == 0, r.stderr
    token = r.stdout.strip()
    return token, handle.write_kubeconfig(tmp_path / f"{name}.kubeconfig", NS, token)


def test_https_with_the_written_ca_and_an_admin_identity(secure: SecureServer) -> None:
    assert secure.url.startswith("https://")
    assert kubectl(secure, "get", "namespaces").returncode == 0
    who = kubectl(secure, "auth", "whoami", "-o", "json")
    assert who.returncode == 0, who.stderr
    info = json.loads(who.stdout)["status"]["userInfo"]
    assert info["username"] == "kubernetes-admin"
    assert "system:masters" in info["groups"]
    # the CA really is what TLS is verified with: a context without it refuses the server
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(secure.url + "/healthz", context=ssl.create_default_context(), timeout=10)
    # with it, anonymous may read the public health endpoints (system:public-info-viewer)
    assert raw(secure, "/healthz") == (200, b"ok")


def test_anonymous_and_bad_credentials(secure: SecureServer) -> None:
    code, body = raw(secure, "/api/v1/namespaces/default/pods")
    assert code == 403
    assert body == (
        b'{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"pods is '
        b'forbidden: User \\"system:anonymous\\" cannot list resource \\"pods\\" in API group \\"\\" in '
        b'the namespace \\"default\\"","reason":"Forbidden","details":{"kind":"pods"},"code":403}\n'
    )
    code, body = raw(secure, "/api", {"Authorization": "Bearer not-a-token"})
    assert code == 401
    assert body == (
        b'{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"Unauthorized",'
        b'"reason":"Unauthorized","code":401}\n'
    )
    code, body = raw(secure, "/apis")
    assert code == 403
    assert json.loads(body)["message"] == 'forbidden: User "system:anonymous" cannot get path "/apis"'


def test_service_account_token_rbac_and_reviews(secure: SecureServer, tmp_path: Path) -> None:
    token, kc = sa_kubeconfig(secure, tmp_path, "reader")
    user = f"system:serviceaccount:{NS}:reader"
    denied = kubectl(secure, "get", "pods", kubeconfig=kc)
    assert denied.returncode != 0
    assert (
        f'pods is forbidden: User "{user}" cannot list resource "pods" in API group "" in the namespace '
        f'"{NS}"'
    ) in denied.stderr
    assert kubectl(secure, "auth", "can-i", "list", "pods", f"--as={user}", "-n", NS).stdout.strip() == "no"

    for args in (
        ["create", "role", "pod-reader", "--verb=get,list,watch", "--resource=pods,pods/status", "-n", NS],
        [
            "create",
            "rolebinding",
            "pod-reader",
            "--role=pod-reader",
            f"--serviceaccount={NS}:reader",
            "-n",
            NS,
        ],
        ["create", "clusterrole", ONE_CM, "--verb=get", "--resource=configmaps", "--resource-name=allowed"],
        [
            "create",
            "rolebinding",
            "one-cm",
            f"--clusterrole={ONE_CM}",
            f"--serviceaccount={NS}:reader",
            "-n",
            NS,
        ],
        ["create", "configmap", "allowed", "-n", NS],
        ["create", "configmap", "other", "-n", NS],
    ):
        r = kubectl(secure, *args)
        assert r.returncode == 0, (args, r.stderr)

    # the real API server's RBAC authorizer reads the new bindings through its informers: a moment later
    wait_for(lambda: kubectl(secure, "get", "pods", kubeconfig=kc).returncode == 0, what="pods readable")
    assert (
        kubectl(secure, "auth", "can-i", "get", "pods", "--subresource=status", f"--as={user}", "-n", NS)
        .stdout.strip()
        == "yes"
    )
    assert (
        kubectl(
            secure, "auth", "can-i", "update", "pods", "--subresource=status", f"--as={user}", "-n", NS
        ).stdout.strip()
        == "no"
    )
    # another namespace: the RoleBinding does not reach it
    other = kubectl(secure, "get", "pods", "-n", "kube-system", kubeconfig=kc)
    assert 'cannot list resource "pods" in API group "" in the namespace "kube-system"' in other.stderr
    # resourceNames
    wait_for(lambda: kubectl(secure, "get", "configmap", "allowed", kubeconfig=kc).returncode == 0,
             what="the one ConfigMap readable")
    named = kubectl(secure, "get", "configmap", "other", kubeconfig=kc)
    assert (
        f'configmaps "other" is forbidden: User "system:serviceaccount:{NS}:reader" cannot get resource '
        f'"configmaps" in API group "" in the namespace "{NS}"'
    ) in named.stderr
    # cluster scope
    nodes = kubectl(secure, "get", "nodes", kubeconfig=kc)
    assert 'cannot list resource "nodes" in API group "" at the cluster scope' in nodes.stderr
    # the token's own view of itself, and TokenReview / SubjectAccessReview answered by the same machinery
    assert (
        json.loads(kubectl(secure, "auth", "whoami", "-o", "json", kubeconfig=kc).stdout)["status"][
            "userInfo"
        ]["username"]
        == user
    )
    api = kubernetes.client.AuthenticationV1Api(secure.api_client())
    review = api.create_token_review(
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}}
    )
    assert review.status.authenticated and review.status.user.username == user
    assert set(review.status.user.groups) == {
        "system:serviceaccounts",
        f"system:serviceaccounts:{NS}",
        "system:authenticated",
    }
    bad = api.create_token_review({"spec": {"token": token[:-4] + "AAAA"}})
    assert not bad.status.authenticated and bad.status.error
    authz = kubernetes.client.AuthorizationV1Api(secure.api_client())
    sar = authz.create_subject_access_review(
        {"spec": {"user": user, "resourceAttributes": {"namespace": NS, "verb": "watch", "resource": "pods"}}}
    )
    assert sar.status.allowed
    assert sar.status.reason == (
        f'RBAC: allowed by RoleBinding "pod-reader/{NS}" of Role "pod-reader" to '
        f'ServiceAccount "reader/{NS}"'
    )
    sar = authz.create_subject_access_review(
        {
            "spec": {
                "user": user,
                "resourceAttributes": {"namespace": NS, "verb": "delete", "resource": "pods"},
            }
        }
    )
    assert not sar.status.allowed

    # deleting the ServiceAccount invalidates its tokens (uid check): 401 from then on
    assert kubectl(secure, "delete", "serviceaccount", "reader", "-n", NS).returncode == 0
    # (the real API server looks the ServiceAccount up through its informer: a moment later)
    wait_for(lambda: "Unauthorized" in kubectl(secure, "get", "pods", kubeconfig=kc).stderr,
             what="the deleted ServiceAccount's token refused")


def test_token_request_validation_and_missing_role(secure: SecureServer, tmp_path: Path) -> None:
    core = kubernetes.client.CoreV1Api(secure.api_client())
    core.create_namespaced_service_account(NS, {"metadata": {"name": "short"}})
    with pytest.raises(ApiException) as err:
        core.create_namespaced_service_account_token("short", NS, {"spec": {"expirationSeconds": 60}})
    assert err.value.status == 422
    assert "may not specify a duration less than 10 minutes" in json.loads(err.value.body)["message"]
    with pytest.raises(ApiException) as err:
        core.create_namespaced_service_account_token("nobody", NS, {"spec": {}})
    assert err.value.status == 404
    # a binding to a role that does not exist: the reason names it, as the RBAC authorizer does
    r = kubectl(
        secure,
        "create",
        "rolebinding",
        "dangling",
        "--role=nonexistent",
        f"--serviceaccount={NS}:short",
        "-n",
        NS,
    )
    assert r.returncode == 0, r.stderr
    token = secure.create_token(NS, "short")
    kc = secure.write_kubeconfig(tmp_path / "short.kubeconfig", NS, token)

    def refused() -> Any:
        try:
            kubernetes.client.CoreV1Api(api_client_for(kc)).list_namespaced_secret(NS)
        except ApiException as exc:
            # the real authorizer sees the new binding (and names its missing role) a moment later
            if exc.status == 403 and "nonexistent" in json.loads(exc.body)["message"]:
                return exc
        return None

    err_value = wait_for(refused, what="403 naming the missing role")
    assert json.loads(err_value.body)["message"].endswith(
        ': RBAC: role.rbac.authorization.k8s.io "nonexistent" not found'
    )


def test_impersonation_needs_rbac(secure: SecureServer, tmp_path: Path) -> None:
    _, kc = sa_kubeconfig(secure, tmp_path, "mimic")
    # kubectl's discovery (GET /api) is impersonated too and refused with it, which kubectl reports as
    # "Error from server (Forbidden): unknown" (real server and sandbox alike): let the admin fill kubectl's
    # discovery cache first, as a test run before this one on the same worker used to, so the request that
    # answers is the pods list
    assert kubectl(secure, "get", "pods", "-n", NS).returncode == 0
    r = kubectl(secure, "get", "pods", "--as=someone", kubeconfig=kc)
    assert r.returncode != 0
    if secure.real:
        # kube-apiserver 1.36 checks constrained impersonation (KEP-5284) first and names its verb when
        # neither that nor the legacy `impersonate` is granted; the sandbox answers as servers before it did
        assert (
            f'pods is forbidden: User "system:serviceaccount:{NS}:mimic" cannot '
            f'impersonate-on:user-info:list resource "pods" in API group "" in the namespace "{NS}"'
        ) in r.stderr
    else:
        assert (
            f'users "someone" is forbidden: User "system:serviceaccount:{NS}:mimic" cannot impersonate '
            'resource "users" in API group "" at the cluster scope'
        ) in r.stderr


@pytest.mark.skipif(kube.real(), reason="the sandbox's own command line (ansible-operator sandbox --secure "
                    "--data-dir): nothing of the real control plane to test")
def test_cli_secure_and_a_restart_on_the_data_dir_keeps_ca_and_tokens(tmp_path: Path) -> None:
    """``ansible-operator sandbox --secure``: the printed kubeconfig is an admin one; with ``--data-dir`` the
    CA and the signing key survive a restart, so kubeconfigs and tokens issued before still work."""
    from ansible_operator_sandbox.testing import start_process

    data = tmp_path / "data"
    proc = start_process(tmp_path / "admin.kubeconfig", data_dir=data, secure=True)
    try:
        assert proc.url.startswith("https://")
        core = kubernetes.client.CoreV1Api(proc.api_client())
        core.create_namespaced_service_account("default", {"metadata": {"name": "keeper"}})
        # pods get the serving CA as ca.crt (the root-CA publisher runs with the simulated controllers)
        cm = wait_for(
            lambda: [
                c for c in core.list_namespaced_config_map("default").items
                if c.metadata.name == "kube-root-ca.crt"
            ],
            what="kube-root-ca.crt",
        )[0]
        assert cm.data["ca.crt"] == (data / "pki" / "ca.crt").read_text()
        token = core.create_namespaced_service_account_token("keeper", "default", {"spec": {}}).status.token
        port = proc.port
    finally:
        assert proc.stop() == 0
    again = start_process(
        tmp_path / "admin.kubeconfig", port=port, data_dir=data, secure=True, simulate=False
    )
    try:
        review = kubernetes.client.AuthenticationV1Api(again.api_client()).create_token_review(
            {"spec": {"token": token}}
        )
        assert review.status.authenticated
        assert review.status.user.username == "system:serviceaccount:default:keeper"
    finally:
        again.stop()


def test_can_i_list_shows_the_rules_rbac_grants(secure: SecureServer, tmp_path: Path) -> None:
    _, kc = sa_kubeconfig(secure, tmp_path, "lister")
    for args in (
        ["create", "role", "lister", "--verb=get,list", "--resource=leases.coordination.k8s.io", "-n", NS],
        ["create", "rolebinding", "lister", "--role=lister", f"--serviceaccount={NS}:lister", "-n", NS],
    ):
        r = kubectl(secure, *args)
        assert r.returncode == 0, (args, r.stderr)
    def listed() -> list[list[str]] | None:
        answer = kubectl(secure, "auth", "can-i", "--list", "-n", NS, kubeconfig=kc)
        assert answer.returncode == 0, answer.stderr
        lines = [line.split() for line in answer.stdout.splitlines()]
        # (the real API server's rule resolver sees the new binding through its informers: a moment later)
        return lines if ["leases.coordination.k8s.io", "[]", "[]", "[get", "list]"] in lines else None

    lines = wait_for(listed, what="the Role's rule listed")
    assert any(line[:1] == ["selfsubjectaccessreviews.authorization.k8s.io"] for line in lines)
    assert not any(line[:1] == ["pods"] for line in lines)


def test_aggregated_cluster_role(secure: SecureServer, tmp_path: Path) -> None:
    """A ClusterRole with an aggregationRule grants what the ClusterRoles its selectors match grant."""
    _, kc = sa_kubeconfig(secure, tmp_path, "aggregated")
    for args in (
        [
            "create",
            "clusterrole",
            MONITORING,
            f"--aggregation-rule={AGGREGATE_LABEL}=true",
        ],
        [
            "create",
            "rolebinding",
            "monitoring",
            f"--clusterrole={MONITORING}",
            f"--serviceaccount={NS}:aggregated",
            "-n",
            NS,
        ],
        ["create", "clusterrole", ENDPOINTS_READER, "--verb=list", "--resource=endpoints"],
    ):
        r = kubectl(secure, *args)
        assert r.returncode == 0, (args, r.stderr)
    assert kubectl(secure, "get", "endpoints", kubeconfig=kc).returncode != 0
    r = kubectl(secure, "label", "clusterrole", ENDPOINTS_READER, f"{AGGREGATE_LABEL}=true")
    assert r.returncode == 0, r.stderr
    # (on the real control plane kube-controller-manager's aggregation controller copies the rules: a moment
    # later)
    wait_for(lambda: kubectl(secure, "get", "endpoints", kubeconfig=kc).returncode == 0,
             what="endpoints readable through the aggregated ClusterRole")
