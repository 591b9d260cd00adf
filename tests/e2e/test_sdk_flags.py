"""The Operator SDK's `ansible-operator run` flags end to end: the scaffold's manager args (HTTPS metrics,
leader election) with a role using ``osdk_metric``; graceful shutdown on SIGTERM; /readyz when the API
server goes away. One executor (warm, unless E2E_EXECUTORS leaves it out) here: both executors' handling
of --ansible-args is in tests/unit/test_ansible_args.py."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Iterator

import kubernetes
import pytest
import yaml

from tests import kube
from tests.harness import served_port

from .conftest import HERE, Cluster, default_watch, one_executor, wait_for
from .proxy import TLSCutProxy

pytestmark = [
    pytest.mark.e2e,
    one_executor,
]


def get(url: str) -> tuple[int, str]:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        with urllib.request.urlopen(url, timeout=5, context=context) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError:
        return 0, ""


def test_scaffold_args_and_osdk_metric(cluster: Cluster, start_operator) -> None:
    # config/default + config/manager of a current `operator-sdk init --plugins ansible` project.
    op = start_operator(
        [default_watch(role=str(HERE / "roles" / "sdk_metrics"), finalizer=None)],
        "--metrics-require-rbac=false",
        "--metrics-secure",
        "--metrics-bind-address=127.0.0.1:0",
        "--leader-elect",
        "--leader-election-id=widget-operator",
        f"--leader-election-namespace={cluster.ns}",
        "--health-probe-bind-address=127.0.0.1:0",
        "--zap-log-level=info",
        "--reconcile-period=10h",
        "--inject-owner-ref=true",
    )
    metrics, health = op.port("/metrics"), op.port("/healthz")
    cluster.create_widget("counted", {"size": 3})
    cluster.wait_condition("counted", "Successful")

    def scraped() -> str | None:
        status, text = get(f"https://127.0.0.1:{metrics}/metrics")
        return text if status == 200 and "widget_reconciles" in text else None

    text = wait_for(scraped, 30, what="custom metrics on /metrics")
    assert "# TYPE widget_reconciles counter\nwidget_reconciles 1\n" in text
    assert "widget_size 3\n" in text
    assert get(f"http://127.0.0.1:{metrics}/metrics")[0] != 200  # HTTPS only
    assert get(f"http://127.0.0.1:{health}/readyz")[0] == 200
    assert "Traceback" not in op.logs()


def test_sigterm_lets_the_run_in_flight_finish_and_exits_0(
    cluster: Cluster, start_operator, tmp_path: Path
) -> None:
    markers = tmp_path / "markers"
    markers.mkdir()
    op = start_operator(
        [default_watch(role=str(HERE / "roles" / "gated"), finalizer=None)],
        "--graceful-shutdown-timeout=5m",
        "--log-format=json",
    )
    cluster.create_widget("slow", {"markerDir": str(markers)})
    wait_for(lambda: (markers / "started").exists(), 60, what="run started")
    op.proc.send_signal(signal.SIGTERM)
    wait_for(lambda: "waiting up to 300s for 1 run(s) in flight" in op.logs(), 30, what="drain begins")
    assert op.proc.poll() is None  # still finishing the run
    (markers / "release").write_text("go")
    assert op.proc.wait(60) == 0
    assert (markers / "finished").exists()
    (run,) = op.runs("slow")
    assert run["result"] == "successful"
    for line in op.logs().splitlines():  # --log-format json: nothing but JSON objects
        assert isinstance(json.loads(line), dict), line


def test_idle_sigterm_to_the_process_group_exits_0_and_releases_the_lease(
    cluster: Cluster, start_operator
) -> None:
    """As the SDK (LeaderElectionReleaseOnCancel): an idle operator exits at once on SIGTERM, and the Lease
    is released so a successor need not wait for it to expire. The signal goes to the whole process group
    (``kill -TERM -pgid``), so the warm executor's zygote gets it too: it must not be restarted."""
    op = start_operator(
        [default_watch(finalizer=None)],
        "--leader-elect",
        "--leader-election-id=idle-operator",
        f"--leader-election-namespace={cluster.ns}",
    )
    coordination = kubernetes.client.CoordinationV1Api(cluster.api)

    def holder() -> str:
        try:
            lease = coordination.read_namespaced_lease("idle-operator", cluster.ns)
        except kubernetes.client.ApiException:
            return ""
        return str(lease.spec.holder_identity or "")

    assert str(op.proc.pid) in wait_for(holder, 60, what="the lease held")
    wait_for(lambda: "operator ready" in op.logs(), 60, what="operator ready")
    os.killpg(op.proc.pid, signal.SIGTERM)  # the harness starts it in a session of its own
    assert op.proc.wait(30) == 0
    assert holder() == "", op.logs()[-3000:]
    logs = op.logs()
    assert f"released lease {cluster.ns}/idle-operator" in logs
    assert "restarting" not in logs and "Traceback" not in logs


def test_graceful_shutdown_timeout_stops_the_run(cluster: Cluster, start_operator, tmp_path: Path) -> None:
    markers = tmp_path / "markers"
    markers.mkdir()
    op = start_operator(
        [default_watch(role=str(HERE / "roles" / "gated"), finalizer=None)], "--graceful-shutdown-timeout=1s"
    )
    cluster.create_widget("stuck", {"markerDir": str(markers)})
    wait_for(lambda: (markers / "started").exists(), 60, what="run started")
    op.proc.send_signal(signal.SIGTERM)
    assert op.proc.wait(60) == 0
    assert "graceful shutdown timeout (1s) reached: stopping 1 run(s)" in op.logs()
    assert not (markers / "finished").exists()
    # nobody runs it any more: status says so (issue 20)
    running = cluster.condition("stuck", "Running")
    assert running is not None and (running["status"], running["reason"]) == ("False", "Interrupted"), running


def test_readyz_fails_when_the_api_server_is_gone_healthz_stays(cluster: Cluster, start_operator,
                                                                tmp_path: Path) -> None:
    proxy = None
    kubeconfig = None
    if cluster.sandbox is None:
        # The shared control plane stays up for the other tests: the operator reaches it through a proxy,
        # and the proxy going away (its port closed: connection refused) is the API server gone.
        proxy = TLSCutProxy.in_front_of(cluster.kubeconfig, kube.shared().directory / "pki").start()
        kubeconfig = proxy.write_kubeconfig(cluster.kubeconfig, tmp_path / "via-proxy.kubeconfig")
    try:
        op = start_operator(
            [default_watch(finalizer=None)],
            "--health-probe-bind-address=127.0.0.1:0",
            "--api-unreachable-timeout=2s",
            # the scaffold's metrics args: without a bearer token /metrics is refused
            "--metrics-bind-address=127.0.0.1:0",
            "--metrics-secure",
            "--metrics-require-rbac",
            kubeconfig=kubeconfig,
        )
        health, metrics = op.port("/healthz"), op.port("/metrics")
        wait_for(lambda: get(f"http://127.0.0.1:{health}/readyz")[0] == 200, 60, what="ready")
        status, text = get(f"https://127.0.0.1:{metrics}/metrics")
        assert status == 401 and "bearer token" in text
        if proxy is not None:
            proxy.close()
        else:
            assert cluster.sandbox is not None
            cluster.sandbox.stop_thread()

        def not_ready() -> str | None:
            status, text = get(f"http://127.0.0.1:{health}/readyz")
            return text if status == 500 else None

        text = wait_for(not_ready, 60, what="/readyz failing")
        assert "API server unreachable" in text
        assert get(f"http://127.0.0.1:{health}/healthz") == (200, "ok")
    finally:
        if proxy is not None:
            proxy.close()


@contextlib.contextmanager
def secure_api_server(tmp_path: Path) -> Iterator[tuple[Path, dict[str, str], str]]:
    """(admin kubeconfig, kubectl's environment, a namespace of this test's) of an API server that enforces
    RBAC: the shared real control plane, or a secure sandbox of the test's own."""
    if kube.real():
        shared = kube.shared()
        try:
            yield shared.kubeconfig, shared.kubectl_env(), shared.namespace("metrics")
        finally:
            shared.cleanup()
        return
    from ansible_operator_sandbox.testing import start_in_thread

    handle = start_in_thread(tmp_path / "admin.kubeconfig", crds=[HERE / "crds"], simulate=False, secure=True)
    try:
        yield handle.kubeconfig, handle.kubectl_env(), "default"
    finally:
        handle.sandbox.stop_thread()


def test_metrics_require_rbac_against_a_secure_api_server(tmp_path: Path, executor: str) -> None:
    """--metrics-secure --metrics-require-rbac with a real TokenReview/SubjectAccessReview (an API server
    that enforces RBAC): no token 401, a token RBAC does not allow 403, the scaffold's metrics-reader
    200."""
    with secure_api_server(tmp_path) as (kubeconfig, env, ns):
        _metrics_require_rbac(tmp_path, executor, kubeconfig, env, ns)


def _metrics_require_rbac(tmp_path: Path, executor: str, kubeconfig: Path, env: dict[str, str],
                          ns: str) -> None:
    proc = None
    try:
        def kubectl(*args: str) -> str:
            r = subprocess.run(
                ["kubectl", *args], env=env, capture_output=True, text=True, timeout=60, check=False
            )
            assert r.returncode == 0, (args, r.stderr)
            return r.stdout.strip()

        # config/rbac/metrics_reader_role.yaml of the scaffold, bound to the scraper's ServiceAccount
        # (cluster-scoped names carry the namespace: the real control plane is shared by the whole run)
        reader_role = f"metrics-reader-{ns}"
        kubectl("create", "clusterrole", reader_role, "--verb=get", "--non-resource-url=/metrics")
        kubectl("create", "serviceaccount", "prometheus", "-n", ns)
        kubectl("create", "serviceaccount", "nobody", "-n", ns)
        kubectl(
            "create",
            "clusterrolebinding",
            reader_role,
            f"--clusterrole={reader_role}",
            f"--serviceaccount={ns}:prometheus",
        )
        reader = kubectl("create", "token", "prometheus", "-n", ns)
        nobody = kubectl("create", "token", "nobody", "-n", ns)

        watches = tmp_path / "watches.yaml"
        watches.write_text(yaml.safe_dump([default_watch(finalizer=None)]))
        proc_env = {**os.environ, "HOME": str(tmp_path), "ANSIBLE_GATHERING": "explicit",
                    "WATCH_NAMESPACE": ns}
        proc_env.pop("KUBECONFIG", None)
        with open(tmp_path / "operator.log", "wb") as log:
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "ansible_operator",
                    "run",
                    "--watches-file",
                    str(watches),
                    "--kubeconfig",
                    str(kubeconfig),
                    "--artifacts-dir",
                    str(tmp_path / "artifacts"),
                    "--executor",
                    executor,
                    "--health-probe-bind-address=0",
                    "--metrics-bind-address=127.0.0.1:0",
                    "--metrics-secure",
                    "--metrics-require-rbac",
                    "--osdk-metric-bind-address=0",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=tmp_path,
                env=proc_env,
                start_new_session=True,
            )
        metrics = served_port(lambda: (tmp_path / "operator.log").read_text(errors="replace"),
                              lambda: proc.poll() is None)

        def scrape(token: str | None) -> tuple[int, str]:
            context = ssl.create_default_context()
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
            request = urllib.request.Request(
                f"https://127.0.0.1:{metrics}/metrics",
                headers={"Authorization": f"Bearer {token}"} if token else {},
            )
            try:
                with urllib.request.urlopen(request, timeout=10, context=context) as r:
                    return r.status, r.read().decode()
            except urllib.error.HTTPError as exc:
                return exc.code, exc.read().decode()
            except OSError:
                return 0, ""

        wait_for(lambda: scrape(None)[0] == 401, 60, what="metrics listener refusing anonymous scrapes")
        assert scrape(reader[:-4] + "AAAA")[0] == 401
        status, text = scrape(nobody)
        assert status == 403 and f"system:serviceaccount:{ns}:nobody" in text
        status, text = scrape(reader)
        assert status == 200 and "ansible_operator_build_info" in text
    finally:
        if proc is not None:
            proc.send_signal(signal.SIGTERM)
            try:
                assert proc.wait(60) == 0, (tmp_path / "operator.log").read_text()[-4000:]
            finally:
                if proc.poll() is None:
                    proc.kill()


def _kubectl_wait(cluster: Cluster, name: str, condition: str) -> subprocess.CompletedProcess[str]:
    """`kubectl wait`, printing the object as it was when the condition held (-o json)."""
    return subprocess.run(["kubectl", "wait", f"--for=condition={condition}", f"widgets/{name}", "-n",
                           cluster.ns, "--timeout=180s", "-o", "json"], capture_output=True, text=True,
                          timeout=240, env={**os.environ, "KUBECONFIG": str(cluster.kubeconfig)})


def _condition_in(output: str, ctype: str) -> dict[str, Any]:
    conditions = json.loads(output)["status"]["conditions"]
    return next(c for c in conditions if c["type"] == ctype)


def test_kstatus_conditions_satisfy_kubectl_wait(cluster: Cluster, start_operator) -> None:
    """--kstatus-conditions: kubectl's own `wait --for=condition=Ready` (and Stalled for a failing role)
    ends on what the operator wrote."""
    start_operator([default_watch(finalizer=None)], "--kstatus-conditions")
    cluster.create_widget("ready", {"color": "green"})
    cluster.create_widget("broken", {"failMessage": "no disk"})
    done = _kubectl_wait(cluster, "ready", "Ready")
    assert done.returncode == 0, done.stdout + done.stderr
    stalled = _kubectl_wait(cluster, "broken", "Stalled")
    assert stalled.returncode == 0, stalled.stdout + stalled.stderr
    ready = cluster.condition("ready", "Ready")
    assert ready is not None and ready["observedGeneration"] == 1
    reconciling = cluster.condition("ready", "Reconciling")
    assert reconciling is not None and reconciling["status"] == "False"
    # as kubectl saw it: the failed widget is retried with backoff, and a retry in flight is not Stalled
    assert "no disk" in _condition_in(stalled.stdout, "Stalled")["message"]


def test_sdk_conditions_leave_running_true_after_a_success(cluster: Cluster, start_operator) -> None:
    start_operator([default_watch(finalizer=None)], "--sdk-conditions")
    cluster.create_widget("sdk", {"color": "green"})
    cluster.wait_condition("sdk", "Successful")
    running = cluster.condition("sdk", "Running")
    assert running is not None
    assert (running["status"], running["reason"], running["message"]) == (
        "True", "Successful", "Awaiting next reconciliation")
    failure = cluster.condition("sdk", "Failure")
    assert failure is not None and (failure["status"], failure["reason"]) == ("False", "")
    assert cluster.condition("sdk", "Ready") is None  # kstatus conditions only on request
