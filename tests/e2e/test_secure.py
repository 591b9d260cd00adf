"""The runner against an API server that authenticates and enforces RBAC (the shared real control plane, or a
secure sandbox): does the RBAC ``ansible-operator generate rbac`` writes really let an operator work, and does
the runner handle 401/403 and in-cluster credentials as a pod on a real cluster has them?

* The operator runs as a ServiceAccount bound ONLY to the generated ClusterRole. Memcached (the example at the
  repo root) must reach Successful; a role whose object kind comes from the spec (generate cannot see it, and
  says so) must fail with the apiserver's 403 message in the CR's status.
* In-cluster: no kubeconfig, ``KUBERNETES_SERVICE_HOST``/``_PORT`` and token/ca.crt/namespace files in a temp
  directory (``ANSIBLE_OPERATOR_SERVICE_ACCOUNT_DIR``). The token file is then rotated and the old token
  revoked (it is bound to a Secret that is then deleted): kopf's watches, the runner's own client and the
  per-run proxy the roles use must all carry on with the new token.

One API server for the module (namespaces and cluster-scoped names of the module's own on the shared control
plane; the operators watch only the module's namespace); every operator run is a real subprocess.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml
from kubernetes.client.rest import ApiException

from ansible_operator_sandbox.testing import wait_for

from .proxy import TLSCutProxy
from .secure import SecureServer, secure_server

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).parent
SUFFIX = uuid.uuid4().hex[:6]  # the real control plane is shared by the run (and by xdist workers)
OPERATOR_NS = f"operators-{SUFFIX}"
SA = "ansible-operator"
NS = f"apps-{SUFFIX}"
ROLE_NAME = f"ansible-operator-manager-role-{SUFFIX}"
USER = f"system:serviceaccount:{OPERATOR_NS}:{SA}"
MEMCACHED = ("cache.example.com", "v1alpha1", "memcacheds", "Memcached")
WIDGET = ("test.ansible-operator.dev", "v1", "widgets", "Widget")

TOUCH_ROLE = """\
# Creates an object whose kind comes from the CR's spec: `generate rbac` cannot know which one.
- name: Create the object the spec names
  kubernetes.core.k8s:
    state: present
    definition:
      apiVersion: v1
      kind: "{{ touch_kind }}"
      metadata:
        name: "{{ ansible_operator_meta.name }}-touched"
        namespace: "{{ ansible_operator_meta.namespace }}"
      stringData:
        key: value
"""


def _kubectl(handle: SecureServer, *args: str, stdin: str | None = None) -> str:
    r = subprocess.run(
        ["kubectl", *args], env=handle.kubectl_env(), input=stdin, capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 0, f"kubectl {' '.join(args)}: {r.stderr}"
    return r.stdout


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An operator project: Memcached from the repo root and a Widget role that touches a spec-chosen kind."""
    root = tmp_path_factory.mktemp("secure-project")
    (root / "roles").mkdir()
    (root / "roles" / "memcached").symlink_to(REPO / "roles" / "memcached")
    tasks = root / "roles" / "kind_toucher" / "tasks"
    tasks.mkdir(parents=True)
    (tasks / "main.yml").write_text(TOUCH_ROLE)
    memcached = next(
        w for w in yaml.safe_load((REPO / "watches.yaml").read_text()) if w["kind"] == "Memcached"
    )
    watches = [
        memcached,
        {"group": WIDGET[0], "version": WIDGET[1], "kind": WIDGET[3], "role": "kind_toucher"},
    ]
    (root / "watches.yaml").write_text(yaml.safe_dump(watches))
    return root


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory, project: Path) -> Iterator[SecureServer]:
    crds = [REPO / "crds" / "cache.example.com_memcacheds.yaml", HERE / "crds" / "widget.yaml"]
    with secure_server(tmp_path_factory.mktemp("secure-admin"), crds=crds) as handle:
        generated = subprocess.run(
            [
                sys.executable,
                "-m",
                "ansible_operator",
                "generate",
                "rbac",
                "--watches-file",
                str(project / "watches.yaml"),
                "--name",
                ROLE_NAME,
            ],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=project,
        )
        assert generated.returncode == 0, generated.stderr
        # generate says what it could not resolve: the spec-chosen kind
        assert (
            "touch_kind" in generated.stdout + generated.stderr
            or "dynamic" in generated.stdout + generated.stderr
            or "no kind" in generated.stdout + generated.stderr
        ), generated.stdout
        role = yaml.safe_load(generated.stdout)
        assert role["metadata"]["name"] == ROLE_NAME
        assert not any("secrets" in (r.get("resources") or []) for r in role["rules"])
        _kubectl(handle, "apply", "-f", "-", stdin=generated.stdout)
        for ns in (OPERATOR_NS, NS):
            handle.create_namespace(ns)
        _kubectl(handle, "create", "serviceaccount", SA, "-n", OPERATOR_NS)
        _kubectl(
            handle,
            "create",
            "clusterrolebinding",
            ROLE_NAME,
            f"--clusterrole={ROLE_NAME}",
            f"--serviceaccount={OPERATOR_NS}:{SA}",
        )
        yield handle


class Operator:
    def __init__(self, proc: subprocess.Popen[bytes], log: Path) -> None:
        self.proc = proc
        self.log = log

    def logs(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


@pytest.fixture
def run_operator(project: Path, tmp_path: Path) -> Iterator[Any]:
    started: list[Operator] = []

    def start(*args: str, env: dict[str, str] | None = None) -> Operator:
        log = tmp_path / f"operator-{len(started)}.log"
        proc_env = {
            **os.environ,
            "PYTHONUNBUFFERED": "1",
            "ANSIBLE_GATHERING": "explicit",
            "HOME": str(tmp_path),
            "WATCH_NAMESPACE": NS,  # the real control plane is shared: not the other tests' objects
            **(env or {}),
        }  # no ~/.kube/config to fall back on
        proc_env.pop("KUBECONFIG", None)
        cmd = [
            sys.executable,
            "-m",
            "ansible_operator",
            "run",
            "--watches-file",
            str(project / "watches.yaml"),
            "--artifacts-dir",
            str(tmp_path / "artifacts"),
            "--metrics-bind-address",
            "0",
            "--health-probe-bind-address",
            "0",
            *args,
        ]
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                cmd, stdout=out, stderr=subprocess.STDOUT, cwd=project, env=proc_env, start_new_session=True
            )
        op = Operator(proc, log)
        started.append(op)
        return op

    yield start
    for op in started:
        op.stop()
        if op.proc.returncode not in (0, -signal.SIGTERM):
            print(f"--- operator log exit={op.proc.returncode} ---\n{op.logs()[-6000:]}")


def _create(handle: SecureServer, gvrk: tuple[str, str, str, str], name: str, spec: dict[str, Any]) -> None:
    import kubernetes

    group, version, plural, kind = gvrk
    custom = kubernetes.client.CustomObjectsApi(handle.api_client())
    custom.create_namespaced_custom_object(
        group,
        version,
        NS,
        plural,
        {
            "apiVersion": f"{group}/{version}",
            "kind": kind,
            "metadata": {"name": name, "namespace": NS},
            "spec": spec,
        },
    )


def _condition(
    handle: SecureServer, gvrk: tuple[str, str, str, str], name: str, ctype: str
) -> dict[str, Any] | None:
    import kubernetes

    group, version, plural, _ = gvrk
    try:
        obj = kubernetes.client.CustomObjectsApi(handle.api_client()).get_namespaced_custom_object(
            group, version, NS, plural, name
        )
    except ApiException as e:
        if e.status == 404:
            return None
        raise
    return next(
        (c for c in (obj.get("status") or {}).get("conditions") or [] if c.get("type") == ctype), None
    )


def _wait_successful(handle: SecureServer, gvrk: tuple[str, str, str, str], name: str, op: Operator) -> None:
    def done() -> bool:
        if op.proc.poll() is not None:
            raise AssertionError(f"operator exited {op.proc.returncode}:\n{op.logs()[-6000:]}")
        cond = _condition(handle, gvrk, name, "Successful")
        return bool(cond and cond.get("status") == "True")

    try:
        wait_for(done, 180, 0.3, what=f"{gvrk[3]} {name} Successful")
    except AssertionError:
        print(op.logs()[-6000:])
        raise


def test_generated_rbac_is_enough_and_a_kind_outside_it_is_a_clear_403(
    secure: SecureServer, tmp_path: Path, run_operator: Any
) -> None:
    token = secure.create_token(OPERATOR_NS, SA)
    kubeconfig = secure.write_kubeconfig(tmp_path / "operator.kubeconfig", OPERATOR_NS, token)
    op = run_operator("--kubeconfig", str(kubeconfig))
    _create(secure, MEMCACHED, "cache", {"size": 2})
    _wait_successful(secure, MEMCACHED, "cache", op)
    deployment = _kubectl(secure, "get", "deployment", "cache-memcached", "-n", NS, "-o", "yaml")
    assert yaml.safe_load(deployment)["metadata"]["ownerReferences"][0]["name"] == "cache"

    _create(secure, WIDGET, "toucher", {"touchKind": "Secret"})

    def failed() -> dict[str, Any] | None:
        cond = _condition(secure, WIDGET, "toucher", "Failure")
        return cond if cond and cond.get("status") == "True" else None

    cond = wait_for(failed, 180, 0.3, what="Widget toucher Failure")
    # kubernetes.core reads before it creates: the first call RBAC refuses is the get
    assert (
        f'secrets "toucher-touched" is forbidden: User "{USER}" cannot get resource "secrets" in API group '
        f'"" in the namespace "{NS}" (403 Forbidden)'
    ) in cond.get("message", ""), cond
    with pytest.raises(ApiException) as err:
        import kubernetes

        kubernetes.client.CoreV1Api(secure.api_client()).read_namespaced_secret("toucher-touched", NS)
    assert err.value.status == 404


def test_in_cluster_credentials_and_a_rotated_token(
    secure: SecureServer, tmp_path: Path, run_operator: Any
) -> None:
    sa_dir = tmp_path / "serviceaccount"
    sa_dir.mkdir()
    (sa_dir / "ca.crt").write_text(secure.ca_pem)
    (sa_dir / "namespace").write_text(OPERATOR_NS)
    # tokens bound to a Secret each (the kubelet binds them to the Pod): deleting it revokes the token
    _kubectl(secure, "create", "secret", "generic", "token-a", "-n", OPERATOR_NS)
    _kubectl(secure, "create", "secret", "generic", "token-b", "-n", OPERATOR_NS)
    (sa_dir / "token").write_text(secure.create_token(OPERATOR_NS, SA, bound_to=("Secret", "token-a")))
    # The real control plane is shared and stays up: the operator's connections go through a TCP proxy (TLS
    # and the token pass through untouched) that can end them, as the sandbox ends its watch streams.
    proxy = TLSCutProxy(secure.url, None).start() if secure.real else None
    try:
        _in_cluster(secure, sa_dir, run_operator, proxy)
    finally:
        if proxy is not None:
            proxy.close()


def _in_cluster(secure: SecureServer, sa_dir: Path, run_operator: Any, proxy: TLSCutProxy | None) -> None:
    import kubernetes

    if proxy is not None:
        host, port = "127.0.0.1", str(proxy.port)
    else:
        host, port = secure.url.removeprefix("https://").rsplit(":", 1)
    op = run_operator(
        "--leader-elect",
        env={
            "KUBERNETES_SERVICE_HOST": host,
            "KUBERNETES_SERVICE_PORT": port,
            "ANSIBLE_OPERATOR_SERVICE_ACCOUNT_DIR": str(sa_dir),
        },
    )
    _create(secure, MEMCACHED, "incluster", {"size": 1})
    _wait_successful(secure, MEMCACHED, "incluster", op)
    # leader election took its Lease in the pod's namespace (the service-account namespace file), within the
    # generated RBAC
    leases = yaml.safe_load(_kubectl(secure, "get", "leases", "-n", OPERATOR_NS, "-o", "yaml"))["items"]
    assert [lease["spec"]["holderIdentity"] for lease in leases], leases

    # rotate as the kubelet does (a new token, atomic rename), then revoke the old one
    old = (sa_dir / "token").read_text()
    fresh = sa_dir / "token.new"
    fresh.write_text(secure.create_token(OPERATOR_NS, SA, bound_to=("Secret", "token-b")))
    fresh.replace(sa_dir / "token")
    assert (sa_dir / "token").read_text() != old
    _kubectl(secure, "delete", "secret", "token-a", "-n", OPERATOR_NS)

    def revoked() -> Any:
        with secure.api_client() as api:
            review = kubernetes.client.AuthenticationV1Api(api).create_token_review(
                {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": old}}
            )
        return None if review.status.authenticated else review

    # the real API server reads the bound Secret through its informer: the deletion lands a moment later
    review = wait_for(revoked, 30, 0.2, what="the old token rejected")
    if secure.real:
        assert "service account token has been invalidated" in review.status.error, review.status
    else:
        assert "token-a has been deleted" in review.status.error, review.status
    # kopf's open watch streams were authenticated with the old token: end them so it must re-watch
    if proxy is not None:
        proxy.cut()
        proxy.restore()
    else:
        assert secure.sandbox is not None
        store = secure.sandbox.server.store
        for resource in ("cache.example.com/memcacheds", "test.ansible-operator.dev/widgets"):
            secure.sandbox.call(store.close_watchers_of, resource)

    _create(secure, MEMCACHED, "rotated", {"size": 1})  # seen by a re-made watch, run through the proxy
    _wait_successful(secure, MEMCACHED, "rotated", op)
    # ... at the first attempt: no run of it failed on a 401 (runner client, proxy and kopf all switched)
    rotated_runs = [
        line for line in op.logs().splitlines() if f"[Memcached {NS}/rotated] reconcile run" in line
    ]
    assert rotated_runs and not [line for line in rotated_runs if " failed " in line], rotated_runs
    assert "Unauthorized" not in op.logs()


def test_rbac_forbidding_the_watch_is_one_line_and_exit_1(
    secure: SecureServer, tmp_path: Path, run_operator: Any
) -> None:
    """Issue 21: an identity that may not list/watch a watched kind stops the start with one line naming
    the rule (kopf would retry five times, five ERROR lines, and controller-runtime times out after 2 min)."""
    _kubectl(secure, "create", "serviceaccount", "no-rbac", "-n", OPERATOR_NS)
    token = secure.create_token(OPERATOR_NS, "no-rbac")
    op = run_operator("--kubeconfig", str(secure.write_kubeconfig(tmp_path / "no-rbac.kubeconfig",
                                                                  OPERATOR_NS, token)))
    assert op.proc.wait(120) == 1, op.logs()[-3000:]
    lines = op.logs().splitlines()
    errors = [line for line in lines if "ERROR" in line]
    assert len(errors) == 1 and "RBAC: this operator may not list or watch" in errors[0], lines
    assert "verbs: [get, list, watch, patch, update]" in errors[0] and "Traceback" not in op.logs()
