"""ansible_operator.util modules run by Ansible against an API server: the run's real control plane when it
has one (tests/kube.py; a namespace of this module's own), else a sandbox of its own.

Each test runs one small play (localhost, K8S_AUTH_KUBECONFIG pointing at the API server, our collections
on the path; tests/plays.py) and checks both the registered task results and the object as stored. The
plays run as an operator runs them, on a warm executor the module's tests share; one runs as
ansible-runner runs them, by a new ansible-playbook with a process per module.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any, Iterator

import kubernetes
import pytest

from ansible_operator import collections as aocollections
from ansible_operator.executors.warm.executor import WarmExecutor
from ansible_operator_sandbox import Sandbox
from tests import kube, plays

GROUP, VERSION, PLURAL, KIND = "status.ansible-operator.dev", "v1", "gizmos", "Gizmo"
SHARED = kube.has_shared()
# the real control plane is shared by every test of the run: a namespace of this module's own
NS = f"coll-{uuid.uuid4().hex[:6]}" if SHARED else "coll"
CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": f"{PLURAL}.{GROUP}"},
    "spec": {
        "group": GROUP,
        "scope": "Namespaced",
        "names": {"plural": PLURAL, "singular": "gizmo", "kind": KIND},
        "versions": [{
            "name": VERSION, "served": True, "storage": True, "subresources": {"status": {}},
            "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}}},
        }],
    },
}
PLAIN = {  # same shape, no status subresource: k8s_status must fall back to the object itself
    **CRD,
    "metadata": {"name": f"plainthings.{GROUP}"},
    "spec": {
        **CRD["spec"],
        "names": {"plural": "plainthings", "singular": "plainthing", "kind": "PlainThing"},
        "versions": [{k: v for k, v in CRD["spec"]["versions"][0].items() if k != "subresources"}],
    },
}
VENV_BIN = Path(sys.executable).parent


class Env:
    def __init__(self, kubeconfig: Path, api: kubernetes.client.ApiClient, tmp: Path,
                 warm: tuple[plays.LoopThread, WarmExecutor]) -> None:
        self.kubeconfig = kubeconfig
        self.api = api
        self.custom = kubernetes.client.CustomObjectsApi(api)
        self.core = kubernetes.client.CoreV1Api(api)
        self.tmp = tmp
        self.thread, self.executor = warm

    def gizmo(self, name: str, status: dict[str, Any] | None = None) -> dict[str, Any]:
        body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": KIND, "metadata": {"name": name, "namespace": NS},
                "spec": {"size": 1}}
        obj = self.custom.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, body)
        if status is not None:
            obj = self.custom.patch_namespaced_custom_object_status(GROUP, VERSION, NS, PLURAL, name,
                                                                    {"status": status})
        return obj

    def get(self, name: str) -> dict[str, Any]:
        return self.custom.get_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, name)

    def play(self, tasks: list[dict[str, Any]], name: str, check: bool = False,
             collections: list[str] | None = None, ansible_playbook: bool = False) -> dict[str, Any]:
        """Run ``tasks`` (each may ``register``) in check mode when ``check``; returns {registered name:
        result}. As a run of the module's warm executor (the modules inline in the run's process), or, with
        ``ansible_playbook``, as ansible-runner runs them: a new ansible-playbook, a process per module."""
        play: dict[str, Any] = {"collections": collections} if collections else {}
        envvars = {"K8S_AUTH_KUBECONFIG": str(self.kubeconfig)}
        if ansible_playbook:
            return plays.run_ansible_playbook(self.tmp, name, tasks, envvars, check=check, **play)
        if check:
            play["check_mode"] = True
        return self.thread.run(plays.run_on(self.executor, self.tmp, name, tasks, envvars, **play))


@pytest.fixture(scope="module")
def warm() -> Iterator[tuple[plays.LoopThread, WarmExecutor]]:
    """One warm executor for the module's plays (a zygote's start is ~1.5 CPU s)."""
    yield from plays.warm_executor_in_thread()


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory,
        warm: tuple[plays.LoopThread, WarmExecutor]) -> Iterator[Env]:
    tmp = tmp_path_factory.mktemp("collection")
    if SHARED:
        shared = kube.shared()
        api = shared.api_client()
        kube.create_crd_objects(api, [CRD, PLAIN])
        kubernetes.client.CoreV1Api(api).create_namespace({"metadata": {"name": NS}})
        try:
            yield Env(shared.kubeconfig, api, tmp, warm)
        finally:
            shared.created.append(NS)
            shared.cleanup()
            api.close()
        return
    sb = Sandbox(simulate=False)
    sb.start_in_thread()
    try:
        kubeconfig = sb.write_kubeconfig(tmp / "kubeconfig", namespace=NS)
        api = kubernetes.config.new_client_from_config(str(kubeconfig))
        kubernetes.client.CoreV1Api(api).create_namespace({"metadata": {"name": NS}})
        kubernetes.client.ApiextensionsV1Api(api).create_custom_resource_definition(CRD)
        kubernetes.client.ApiextensionsV1Api(api).create_custom_resource_definition(PLAIN)
        yield Env(kubeconfig, api, tmp, warm)
        api.close()
    finally:
        sb.stop_thread()


def _status_task(
    register: str, module: str = "ansible_operator.util.k8s_status", **args: Any
) -> dict[str, Any]:
    return {module: {"api_version": f"{GROUP}/{VERSION}", "kind": KIND, "namespace": NS, **args},
            "register": register}


def test_k8s_status_merges_keeps_conditions_and_is_idempotent(env: Env) -> None:
    env.gizmo("g1", status={"conditions": [{"type": "Running", "status": "True", "reason": "Running",
                                            "lastTransitionTime": "2026-01-01T00:00:00Z"}],
                            "keep": "me"})
    args: dict[str, Any] = {"name": "g1", "status": {"replicas": 3, "nested": {"a": 1}},
            "conditions": [{"type": "Ready", "status": "True", "reason": "AllUp", "message": "ok"}]}
    # as ansible-runner runs modules (a process each); the other tests run them on the warm executor
    results = env.play([_status_task("first", **args), _status_task("second", **args)], "merge",
                       ansible_playbook=True)
    assert results["first"]["changed"] is True
    assert results["second"]["changed"] is False
    status = env.get("g1")["status"]
    assert status["replicas"] == 3 and status["nested"] == {"a": 1} and status["keep"] == "me"
    types = {c["type"]: c for c in status["conditions"]}
    assert types["Running"]["lastTransitionTime"] == "2026-01-01T00:00:00Z"
    assert types["Ready"]["status"] == "True" and types["Ready"]["lastTransitionTime"]
    # the spec is untouched (written through the status subresource only)
    assert env.get("g1")["spec"] == {"size": 1}


def test_k8s_status_check_mode_and_sdk_name(env: Env) -> None:
    env.gizmo("g2", status={"phase": "Old"})
    results = env.play([
        _status_task("checked", name="g2", status={"phase": "New"}),
    ], "check", check=True)
    assert results["checked"]["changed"] is True
    assert results["checked"]["result"]["status"]["phase"] == "New"
    assert env.get("g2")["status"]["phase"] == "Old"  # check mode wrote nothing
    results = env.play([
        _status_task("sdk", module="operator_sdk.util.k8s_status", name="g2", status={"phase": "New"}),
        _status_task("again", module="operator_sdk.util.k8s_status", name="g2", status={"phase": "New"}),
    ], "sdkname")
    assert results["sdk"]["changed"] is True and results["again"]["changed"] is False
    assert env.get("g2")["status"]["phase"] == "New"


def test_k8s_status_replace_and_errors(env: Env) -> None:
    env.gizmo("g3", status={"a": 1, "b": 2})
    env.custom.create_namespaced_custom_object(
        GROUP,
        VERSION,
        NS,
        "plainthings",
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "PlainThing",
            "metadata": {"name": "p1"},
            "spec": {"x": 1},
        },
    )
    results = env.play([
        _status_task("replaced", name="g3", replace=True, status={"c": 3}),
        {"ansible_operator.util.k8s_status": {"api_version": f"{GROUP}/{VERSION}", "kind": "PlainThing",
                                              "namespace": NS, "name": "p1", "status": {"ready": True}},
         "register": "plain"},
        dict(_status_task("missing", name="nope", status={"x": 1}), ignore_errors=True),
        dict(_status_task("badcond", name="g3", conditions=[{"type": "Ready", "status": "maybe"}]),
             ignore_errors=True),
    ], "replace")
    assert results["replaced"]["changed"] is True
    assert env.get("g3")["status"] == {"c": 3}
    assert results["plain"]["changed"] is True
    plain = env.custom.get_namespaced_custom_object(GROUP, VERSION, NS, "plainthings", "p1")
    assert plain["status"] == {"ready": True} and plain["spec"] == {"x": 1}
    assert results["missing"]["failed"] and "nope" in results["missing"]["msg"]
    assert results["badcond"]["failed"] and "status must be one of" in results["badcond"]["msg"]


def test_requeue_after_result_keys(env: Env) -> None:
    results = env.play([
        {"ansible_operator.util.requeue_after": {"time": "1m30s"}, "register": "ours"},
        {"operator_sdk.util.requeue_after": {"time": "45s"}, "register": "sdk"},
        {"ansible_operator.util.requeue_after": {"time": "soon"}, "register": "bad", "ignore_errors": True},
        # SDK-era roles use short names with `collections: [operator_sdk.util]`
        {"requeue_after": {"time": "2m"}, "register": "short"},
    ], "requeue", collections=["operator_sdk.util"])
    assert results["ours"]["requeue_after_seconds"] == 90.0 and results["ours"]["changed"] is False
    assert results["ours"]["period"] == "1m30s"
    assert results["sdk"]["requeue_after_seconds"] == 45.0
    assert results["short"]["requeue_after_seconds"] == 120.0
    assert results["bad"]["failed"] and "invalid duration 'soon'" in results["bad"]["msg"]


def test_k8s_event_counts_and_involved_object(env: Env) -> None:
    g = env.gizmo("g4")
    event = {
        "name": "g4-backup",
        "namespace": NS,
        "reason": "BackupDone",
        "message": "stored",
        "type": "Normal",
        "source": {"component": "gizmo-operator"},
        "involvedObject": {"apiVersion": f"{GROUP}/{VERSION}", "kind": KIND, "name": "g4", "namespace": NS},
    }
    results = env.play([
        {"operator_sdk.util.k8s_event": event, "register": "first"},
        {"ansible_operator.util.k8s_event": event, "register": "second"},
        {"ansible_operator.util.k8s_event": dict(event, appendTimestamp=True), "register": "unique"},
    ], "event")
    assert results["first"]["changed"] and results["second"]["changed"]
    stored = env.core.read_namespaced_event("g4-backup", NS)
    assert stored.count == 2 and stored.reason == "BackupDone" and stored.type == "Normal"
    assert stored.involved_object.uid == g["metadata"]["uid"]
    assert stored.source.component == "gizmo-operator"
    unique = results["unique"]["result"]["metadata"]["name"]
    assert unique.startswith("g4-backup.") and unique != "g4-backup"


MODULES = aocollections.COLLECTIONS_ROOT / "ansible_collections/ansible_operator/util/plugins/modules"


def test_ansible_doc_reads_every_module() -> None:
    """`ansible-doc` parses DOCUMENTATION, EXAMPLES and RETURN as YAML (a plain scalar with ': ' fails): one
    process for all the modules (each is ~1 CPU s of start-up), every one of them named in its answer."""
    modules = sorted(p.stem for p in MODULES.glob("*.py") if p.stem != "__init__")
    assert modules
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.pathsep.join(str(p) for p in aocollections.paths()))
    names = [f"ansible_operator.util.{module}" for module in modules]
    done = subprocess.run([str(VENV_BIN / "ansible-doc"), "-j", *names],
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    docs = json.loads(done.stdout)
    assert sorted(docs) == names, done.stderr
    for module, name in zip(modules, names):
        doc = docs[name]["doc"]
        assert doc["module"] == module and doc["short_description"], name
