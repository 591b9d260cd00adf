"""A small kopf operator (``kopf run --standalone`` subprocess) reacting to a custom resource."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import kubernetes
from kubernetes.client.rest import ApiException

from ansible_operator_sandbox.testing import SandboxHandle

from .helpers import install_crd, wait_for, widget

OPERATOR = textwrap.dedent('''
    import kopf

    @kopf.on.startup()
    def configure(settings: kopf.OperatorSettings, **_):
        settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="sandbox.test")
        settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix="sandbox.test")
        settings.watching.server_timeout = 10

    @kopf.on.create("test.example.com", "v1", "widgets")
    def created(body, spec, patch, **_):
        patch.status["phase"] = f"created-{spec['size']}"
        kopf.info(body, reason="Created", message="widget seen")

    @kopf.on.update("test.example.com", "v1", "widgets", field="spec.size")
    def resized(new, patch, **_):
        patch.status["phase"] = f"resized-{new}"

    @kopf.on.delete("test.example.com", "v1", "widgets")
    def deleted(**_):
        pass
''')


def test_kopf_operator_reconciles_custom_resource(sandbox: SandboxHandle, tmp_path: Path):
    api = sandbox.api_client()
    install_crd(api)
    (tmp_path / "op.py").write_text(OPERATOR)
    env = dict(os.environ, KUBECONFIG=str(sandbox.kubeconfig))
    log = (tmp_path / "kopf.log").open("w")
    proc = subprocess.Popen([sys.executable, "-m", "kopf", "run", "--standalone", "--namespace", "default",
                             str(tmp_path / "op.py")], env=env, stdout=log, stderr=subprocess.STDOUT)
    custom = kubernetes.client.CustomObjectsApi(api)
    args = ("test.example.com", "v1", "default", "widgets")
    try:
        custom.create_namespaced_custom_object(*args, widget("w1", size=2))
        wait_for(lambda: (custom.get_namespaced_custom_object(*args, "w1").get("status") or {}).get("phase")
                 == "created-2", timeout=120)
        obj = custom.get_namespaced_custom_object(*args, "w1")
        assert obj["metadata"]["finalizers"] == ["kopf.zalando.org/KopfFinalizerMarker"]
        custom.patch_namespaced_custom_object(*args, "w1", {"spec": {"size": 3}})
        wait_for(lambda: (custom.get_namespaced_custom_object(*args, "w1").get("status") or {}).get("phase")
                 == "resized-3", timeout=120)
        custom.delete_namespaced_custom_object(*args, "w1")

        def gone() -> bool:
            try:
                custom.get_namespaced_custom_object(*args, "w1")
                return False
            except ApiException as e:
                return e.status == 404
        wait_for(gone, timeout=120)
        # kopf posts Kubernetes Events about handler outcomes
        core = kubernetes.client.CoreV1Api(api)
        event = wait_for(lambda: next((e for e in core.list_namespaced_event("default").items
                                       if e.involved_object.name == "w1"), None), timeout=120)
        assert event.reason == "Created" and event.message == "widget seen"
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        api.close()
    output = (tmp_path / "kopf.log").read_text()
    assert "Traceback" not in output, output
