"""OwnerProxy in front of the API server (the shared real control plane, or a sandbox): real kubernetes.core
tasks through a per-run kubeconfig.

Checks what a role author relies on: objects created in the CR's namespace get an ownerReference (and
are garbage-collected with the CR), cluster-scoped ones get the primary-resource annotations, owners are
added on create only (a server-side apply or PUT that creates counts; an update, patch or apply of an
object that already exists never gives it an owner), reads/waits/watches pass through, unknown tokens get
401, every new dependent kind is reported once, and reading an already-owned object recovers its watch.
"""

from __future__ import annotations

import asyncio
import copy
import threading
import time
import uuid
from pathlib import Path
from typing import Any, AsyncIterator, Callable, Iterator

import kubernetes
import pytest
from kubernetes.client.rest import ApiException

from ansible_operator.kubetypes import KubeObject
from ansible_operator.owners.injection import (
    ANNOTATION_PRIMARY_RESOURCE,
    ANNOTATION_PRIMARY_RESOURCE_TYPE,
    DependentKind,
)
from ansible_operator.owners.proxy import OwnerProxy
from ansible_operator_sandbox import Sandbox
from tests import kube, plays

from .proxy import TLSCutProxy

pytestmark = pytest.mark.e2e

GROUP, VERSION, PLURAL, KIND = "owners.ansible-operator.dev", "v1", "apps", "App"
# Unique per process: on the real backend the control plane is shared by the whole run (every xdist worker
# running tests of this module makes a namespace of its own).
NS = f"owners-{uuid.uuid4().hex[:6]}"
# The cluster-scoped objects the tests make, named after it too: a second run on a control plane kept
# running (ANSIBLE_OPERATOR_TEST_KUBECONFIG) found the first's, which were then not created (so got no
# annotations) and already existed. Deleted with the module's namespace.
READER_ROLE, USER_ROLE, EXTRA_NS = f"{NS}-reader", f"{NS}-user-role", f"{NS}-extra"
CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": f"{PLURAL}.{GROUP}"},
    "spec": {
        "group": GROUP, "scope": "Namespaced",
        "names": {"plural": PLURAL, "singular": "app", "kind": KIND},
        "versions": [{"name": VERSION, "served": True, "storage": True, "subresources": {"status": {}},
                      "schema": {"openAPIV3Schema": {"type": "object",
                                                     "x-kubernetes-preserve-unknown-fields": True}}}],
    },
}


class Cluster:
    def __init__(self, sandbox: Sandbox | None, kubeconfig: Path) -> None:
        self.sandbox = sandbox  # None on a real control plane
        self.kubeconfig = kubeconfig
        self.api = kubernetes.config.new_client_from_config(str(kubeconfig))
        self.core = kubernetes.client.CoreV1Api(self.api)
        self.custom = kubernetes.client.CustomObjectsApi(self.api)
        self.rbac = kubernetes.client.RbacAuthorizationV1Api(self.api)

    def configuration(self) -> kubernetes.client.Configuration:
        cfg = kubernetes.client.Configuration()
        kubernetes.config.load_kube_config(str(self.kubeconfig), client_configuration=cfg)
        return cfg

    def create_owner(self, name: str) -> KubeObject:
        body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": KIND,
                "metadata": {"name": name, "namespace": NS}, "spec": {}}
        return self.custom.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, body)

    def install(self) -> None:
        """The App CRD (already there is fine: another worker's) and the namespace; waits until served."""
        self.core.create_namespace({"metadata": {"name": NS}})
        try:
            kubernetes.client.ApiextensionsV1Api(self.api).create_custom_resource_definition(CRD)
        except ApiException as exc:
            if exc.status != 409:
                raise

        def served() -> bool:
            try:
                self.custom.list_namespaced_custom_object(GROUP, VERSION, NS, PLURAL)
                return True
            except ApiException as exc:
                if exc.status == 404:
                    return False
                raise

        deadline = time.monotonic() + 60
        while not served():
            assert time.monotonic() < deadline, "the App CRD is not served after 60 s"
            time.sleep(0.2)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    if kube.real():
        shared = kube.shared()
        c = Cluster(None, shared.kubeconfig)
        shared.created += [NS, EXTRA_NS]  # deleted with the test's namespaces
        try:
            c.install()
            yield c
        finally:
            for role in (READER_ROLE, USER_ROLE):
                try:
                    c.rbac.delete_cluster_role(role)
                except ApiException as exc:
                    if exc.status != 404:
                        raise
            c.api.close()
            shared.cleanup()
        return
    tmp = tmp_path_factory.mktemp("owners")
    sb = Sandbox(simulate=True)
    sb.start_in_thread()
    try:
        c = Cluster(sb, sb.write_kubeconfig(tmp / "admin.kubeconfig", namespace=NS))
        c.install()
        yield c
        c.api.close()
    finally:
        sb.stop_thread()


@pytest.fixture
async def proxy(cluster: Cluster) -> AsyncIterator[tuple[OwnerProxy, list[DependentKind]]]:
    seen: list[DependentKind] = []
    p = OwnerProxy(cluster.configuration(), on_dependent=seen.append)
    await p.start()
    try:
        yield p, seen
    finally:
        await p.close()


async def run_playbook(tmp: Path, kubeconfig: Path, tasks: list[dict[str, Any]]) -> dict[str, Any]:
    """``tasks`` as a play of the warm executor, as an operator runs them (the proxy keeps serving on this
    loop); returns the registered vars. Its kubernetes.core modules make the requests they make under
    ansible-playbook, without a process and an import of the client per task (~1 CPU s each there)."""
    async with plays.warm_executor() as executor:
        return await plays.run_on(executor, tmp, "play", tasks,
                                  {"K8S_AUTH_KUBECONFIG": str(kubeconfig), "KUBECONFIG": str(kubeconfig)})


async def eventually(predicate: Callable[[], Any], timeout: float = 20.0, what: str = "") -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = await asyncio.to_thread(predicate)
        if last:
            return last
        await asyncio.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}: last={last!r}")


def _k8s(definition: dict[str, Any], register: str, **extra: Any) -> dict[str, Any]:
    return {"kubernetes.core.k8s": {"definition": definition, **extra}, "register": register}


async def test_roles_objects_get_owners_through_the_proxy(
        cluster: Cluster, proxy: tuple[OwnerProxy, list[DependentKind]], tmp_path: Path) -> None:
    p, seen = proxy
    owner = await asyncio.to_thread(cluster.create_owner, "app1")
    uid = owner["metadata"]["uid"]
    kubeconfig = p.kubeconfig_for(owner, tmp_path / "run" / "kubeconfig")
    deployment = {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "app1-web", "namespace": NS},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "web", "image": "nginx"}]}}},
    }
    results = await run_playbook(tmp_path, kubeconfig, [
        _k8s({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "app1-cm", "namespace": NS},
              "data": {"a": "1"}}, "cm"),
        # replace (PUT) sends the role's metadata as it is: as under Operator SDK, the reference the create
        # added is gone afterwards (the proxy adds owners on create only)
        _k8s({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "app1-cm", "namespace": NS},
              "data": {"a": "2"}}, "cm_replaced", force=True),
        _k8s({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
              "metadata": {"name": READER_ROLE},
              "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]}, "clusterrole"),
        _k8s({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": EXTRA_NS}}, "namespace"),
        _k8s({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "app1-ssa", "namespace": NS},
              "stringData": {"k": "v"}}, "ssa", apply=True, server_side_apply={"field_manager": "role"}),
        _k8s(deployment, "deploy", wait=True, wait_timeout=60, wait_sleep=1),
        {"kubernetes.core.k8s_info": {"api_version": "v1", "kind": "ConfigMap", "namespace": NS,
                                      "name": "app1-cm"}, "register": "info"},
    ])
    ref = {"apiVersion": f"{GROUP}/{VERSION}", "kind": KIND, "name": "app1", "uid": uid}
    assert results["cm"]["changed"] and results["cm"]["result"]["metadata"]["ownerReferences"] == [ref]
    cm = await asyncio.to_thread(cluster.core.read_namespaced_config_map, "app1-cm", NS)
    assert cm.data == {"a": "2"}
    assert not cm.metadata.owner_references
    # a server-side apply that creates is a create: the role gets the object with its owner back
    assert results["ssa"]["result"]["metadata"]["ownerReferences"] == [ref]
    secret = await asyncio.to_thread(cluster.core.read_namespaced_secret, "app1-ssa", NS)
    assert [r.uid for r in secret.metadata.owner_references] == [uid]
    assert results["deploy"]["result"]["metadata"]["ownerReferences"] == [ref]
    assert results["info"]["resources"][0]["metadata"]["name"] == "app1-cm"
    for key in ("clusterrole", "namespace"):
        meta = results[key]["result"]["metadata"]
        assert not meta.get("ownerReferences")
        assert meta["annotations"][ANNOTATION_PRIMARY_RESOURCE] == f"{NS}/app1"
        assert meta["annotations"][ANNOTATION_PRIMARY_RESOURCE_TYPE] == f"{KIND}.{GROUP}"
    kinds = sorted(k.kind for k in seen)
    assert kinds == ["ClusterRole", "ConfigMap", "Deployment", "Namespace", "Secret"]
    assert DependentKind("rbac.authorization.k8s.io", "v1", "ClusterRole", "clusterroles", False) in seen
    assert DependentKind("", "v1", "ConfigMap", "configmaps", True) in seen

    # deleting the owner garbage-collects what it owns (but not the annotated cluster-scoped objects)
    await asyncio.to_thread(
        cluster.custom.delete_namespaced_custom_object, GROUP, VERSION, NS, PLURAL, "app1"
    )

    def secret_gone() -> bool:
        try:
            cluster.core.read_namespaced_secret("app1-ssa", NS)
            return False
        except ApiException as exc:
            return exc.status == 404

    await eventually(secret_gone, what="Secret app1-ssa garbage-collected")
    await asyncio.to_thread(cluster.core.read_namespaced_config_map, "app1-cm", NS)  # not owned: kept
    role = await asyncio.to_thread(cluster.rbac.read_cluster_role, READER_ROLE)
    assert role.metadata.annotations[ANNOTATION_PRIMARY_RESOURCE] == f"{NS}/app1"


async def test_second_run_reports_no_new_kinds_and_owner_kind_untouched(
        cluster: Cluster, proxy: tuple[OwnerProxy, list[DependentKind]], tmp_path: Path) -> None:
    p, seen = proxy
    owner = await asyncio.to_thread(cluster.create_owner, "app2")
    kubeconfig = p.kubeconfig_for(owner, tmp_path / "kubeconfig")
    await run_playbook(tmp_path, kubeconfig, [
        _k8s({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "app2-a", "namespace": NS}}, "a"),
        _k8s({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "app2-b", "namespace": NS}}, "b"),
        # the owner kind itself is never given an owner (e.g. a role creating a sibling CR)
        _k8s({"apiVersion": f"{GROUP}/{VERSION}", "kind": KIND, "metadata": {"name": "app2-child",
                                                                           "namespace": NS}}, "sibling"),
    ])
    assert [k.kind for k in seen] == ["ConfigMap"]
    sibling = await asyncio.to_thread(cluster.custom.get_namespaced_custom_object, GROUP, VERSION, NS, PLURAL,
                                      "app2-child")
    assert not sibling["metadata"].get("ownerReferences")


async def test_existing_objects_never_get_an_owner(
        cluster: Cluster, proxy: tuple[OwnerProxy, list[DependentKind]], tmp_path: Path) -> None:
    """Issue 10 item 4: update, merge patch, server-side apply and PUT of a user's object adopt nothing."""
    p, seen = proxy
    owner = await asyncio.to_thread(cluster.create_owner, "adopt")
    for name in ("user-put", "user-patch", "user-ssa"):
        await asyncio.to_thread(cluster.core.create_namespaced_config_map, NS,
                                {"metadata": {"name": name}, "data": {"mine": "yes"}})
    await asyncio.to_thread(
        cluster.rbac.create_cluster_role, {"metadata": {"name": USER_ROLE}, "rules": []}
    )
    kubeconfig = p.kubeconfig_for(owner, tmp_path / "kubeconfig")

    def cm(name: str) -> dict[str, Any]:
        return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": NS},
                "data": {"role": "was-here"}}

    await run_playbook(
        tmp_path,
        kubeconfig,
        [
            _k8s(cm("user-put"), "put", force=True),
            _k8s(cm("user-patch"), "patch"),
            _k8s(
                cm("user-ssa"),
                "ssa",
                apply=True,
                server_side_apply={"field_manager": "role", "force_conflicts": True},
            ),
            _k8s(
                {
                    "apiVersion": "rbac.authorization.k8s.io/v1",
                    "kind": "ClusterRole",
                    "metadata": {"name": USER_ROLE, "labels": {"role": "was-here"}},
                    "rules": [],
                },
                "cr",
                force=True,
            ),
        ],
    )
    for name in ("user-put", "user-patch", "user-ssa"):
        obj = await asyncio.to_thread(cluster.core.read_namespaced_config_map, name, NS)
        assert obj.data["role"] == "was-here", name
        assert not obj.metadata.owner_references, name
        assert ANNOTATION_PRIMARY_RESOURCE not in (obj.metadata.annotations or {}), name
    role = await asyncio.to_thread(cluster.rbac.read_cluster_role, USER_ROLE)
    assert role.metadata.labels == {"role": "was-here"}
    assert ANNOTATION_PRIMARY_RESOURCE not in (role.metadata.annotations or {})
    assert seen == []  # nothing created, nothing owned read: no dependent watch


async def test_sdk_exact_mode_leaves_apply_creates_unowned(cluster: Cluster, tmp_path: Path) -> None:
    """ANSIBLE_OPERATOR_OWNER_ON_APPLY_CREATE=false: Operator SDK's POST-only injection, nothing else."""
    p = OwnerProxy(cluster.configuration(), own_put_apply_creates=False)
    await p.start()
    try:
        owner = await asyncio.to_thread(cluster.create_owner, "sdkmode")
        kubeconfig = p.kubeconfig_for(owner, tmp_path / "kubeconfig")
        await run_playbook(
            tmp_path,
            kubeconfig,
            [
                _k8s(
                    {
                        "apiVersion": "v1",
                        "kind": "ConfigMap",
                        "metadata": {"name": "sdkmode-ssa", "namespace": NS},
                    },
                    "ssa",
                    apply=True,
                    server_side_apply={"field_manager": "role"},
                ),
                _k8s(
                    {
                        "apiVersion": "v1",
                        "kind": "ConfigMap",
                        "metadata": {"name": "sdkmode-post", "namespace": NS},
                    },
                    "post",
                ),
            ],
        )
    finally:
        await p.close()
    ssa = await asyncio.to_thread(cluster.core.read_namespaced_config_map, "sdkmode-ssa", NS)
    assert not ssa.metadata.owner_references
    post = await asyncio.to_thread(cluster.core.read_namespaced_config_map, "sdkmode-post", NS)
    assert [r.uid for r in post.metadata.owner_references] == [owner["metadata"]["uid"]]


async def test_reading_an_owned_object_recovers_its_watch(
        cluster: Cluster, proxy: tuple[OwnerProxy, list[DependentKind]], tmp_path: Path) -> None:
    """After a restart a role that only updates what exists still gets its dependent watches back
    (Operator SDK's recoverDependentWatches): a GET of an object owned by the run's kind reports its kind."""
    p, seen = proxy
    owner = await asyncio.to_thread(cluster.create_owner, "recover")
    await asyncio.to_thread(cluster.core.create_namespaced_secret, NS,
                            {"metadata": _owned(owner, name="recover-s"), "stringData": {"a": "b"}})
    await asyncio.to_thread(
        cluster.core.create_namespaced_config_map, NS, {"metadata": {"name": "recover-free"}}
    )
    kubeconfig = p.kubeconfig_for(owner, tmp_path / "kubeconfig")
    await run_playbook(tmp_path, kubeconfig, [
        {"kubernetes.core.k8s_info": {"api_version": "v1", "kind": "ConfigMap", "namespace": NS,
                                      "name": "recover-free"}, "register": "free"},
    ])
    assert seen == []  # not owned by an App: no watch
    await run_playbook(tmp_path, kubeconfig, [
        _k8s({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "recover-s", "namespace": NS},
              "stringData": {"a": "c"}}, "s"),
    ])
    assert seen == [DependentKind("", "v1", "Secret", "secrets", True)]


async def test_watch_streams_and_unknown_tokens_are_refused(
        cluster: Cluster, proxy: tuple[OwnerProxy, list[DependentKind]], tmp_path: Path) -> None:
    p, _ = proxy
    owner = await asyncio.to_thread(cluster.create_owner, "app3")
    kubeconfig = p.kubeconfig_for(owner, tmp_path / "kubeconfig")
    api = kubernetes.config.new_client_from_config(str(kubeconfig))
    core = kubernetes.client.CoreV1Api(api)
    names: list[str] = []
    started = threading.Event()

    def watch() -> None:
        w = kubernetes.watch.Watch()
        rv = core.list_namespaced_config_map(NS).metadata.resource_version
        started.set()
        for event in w.stream(core.list_namespaced_config_map, NS, resource_version=rv, timeout_seconds=20):
            names.append(event["object"].metadata.name)
            if event["object"].metadata.name == "app3-late":
                w.stop()

    watcher = asyncio.create_task(asyncio.to_thread(watch))
    await asyncio.to_thread(started.wait, 10)
    await asyncio.sleep(0.3)
    await asyncio.to_thread(cluster.core.create_namespaced_config_map, NS,
                            {"metadata": {"name": "app3-late"}})
    await asyncio.wait_for(watcher, 25)
    assert names == ["app3-late"]

    # a resource the server does not serve: forwarded, the API server's own 404 comes back
    custom = kubernetes.client.CustomObjectsApi(api)
    with pytest.raises(ApiException) as not_found:
        await asyncio.to_thread(
            custom.create_namespaced_custom_object,
            GROUP,
            VERSION,
            NS,
            "nothings",
            {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Nothing", "metadata": {"name": "n"}},
        )
    assert not_found.value.status == 404

    p.release(kubeconfig)
    with pytest.raises(ApiException) as exc_info:
        await asyncio.to_thread(core.list_namespaced_config_map, NS)
    assert exc_info.value.status == 401
    api.close()


# ---- DependentWatcher ---------------------------------------------------------------------------------

from ansible_operator.dependents import DependentWatcher  # noqa: E402
from ansible_operator.kube import kopf_vault  # noqa: E402

CONFIGMAPS = DependentKind("", "v1", "ConfigMap", "configmaps", True)
DEPLOYMENTS = DependentKind("apps", "v1", "Deployment", "deployments", True)
CLUSTERROLES = DependentKind("rbac.authorization.k8s.io", "v1", "ClusterRole", "clusterroles", False)


class Recorder:
    """Collects enqueue() calls of one owner (the module's tests share a namespace, and may run at once on
    several xdist workers: another test's owners are not this test's business) and lets a test wait for the
    n-th one."""

    def __init__(self, owner: str) -> None:
        self.owner = owner
        self.calls: list[tuple[str, str, str | None, str]] = []
        self._changed = asyncio.Event()

    def __call__(self, api_version: str, kind: str, namespace: str | None, name: str) -> None:
        if name != self.owner:
            return
        self.calls.append((api_version, kind, namespace, name))
        self._changed.set()

    async def wait_for(self, count: int, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while len(self.calls) < count:
            self._changed.clear()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"expected {count} enqueue calls, got {self.calls}")
            try:
                await asyncio.wait_for(self._changed.wait(), remaining)
            except asyncio.TimeoutError:
                pass


class ClosingWatcher(DependentWatcher):
    """Without kopf.operator (which closes its vault's sessions when it ends), close the vault here."""

    def __init__(self, *args: Any, vault: Any, **kwargs: Any) -> None:
        super().__init__(*args, vault=vault, **kwargs)
        self.vault = vault

    async def close(self) -> None:
        await super().close()
        await self.vault.close()


def new_watcher(cluster: Cluster, rec: Recorder, owner_kinds: set[tuple[str, str]],
                cluster_scoped: bool) -> DependentWatcher:
    """A watcher on kopf's client, as the manager makes one (kopf's settings, a vault of our credentials)."""
    import kopf

    settings = kopf.OperatorSettings()
    settings.watching.server_timeout = 300
    return ClosingWatcher(rec, settings=settings, vault=kopf_vault(cluster.configuration()),
                          owner_kinds=owner_kinds, cluster_scoped=cluster_scoped)


@pytest.fixture
async def watcher(cluster: Cluster) -> AsyncIterator[tuple[DependentWatcher, Recorder]]:
    rec = Recorder("dep1")
    w = new_watcher(cluster, rec, {(GROUP, KIND)}, cluster_scoped=True)
    try:
        yield w, rec
    finally:
        await w.close()


def _owned(owner: KubeObject, **meta: Any) -> dict[str, Any]:
    ref = {"apiVersion": owner["apiVersion"], "kind": owner["kind"], "name": owner["metadata"]["name"],
           "uid": owner["metadata"]["uid"]}
    return {"ownerReferences": [ref], **meta}


async def test_dependent_watcher_enqueues_owner_on_delete_and_real_changes(
        cluster: Cluster, watcher: tuple[DependentWatcher, Recorder]) -> None:
    w, rec = watcher
    owner = await asyncio.to_thread(cluster.create_owner, "dep1")
    key = (f"{GROUP}/{VERSION}", KIND, NS, "dep1")
    await asyncio.to_thread(cluster.core.create_namespaced_config_map, NS,
                            {"metadata": _owned(owner, name="dep1-cm"), "data": {"a": "1"}})
    await w.ensure(CONFIGMAPS)
    await w.ensure(CONFIGMAPS)  # idempotent: still one watch
    assert w.watched == [CONFIGMAPS]

    # objects created after the initial list are ignored (the run that created them is the cause)
    await asyncio.to_thread(cluster.core.create_namespaced_config_map, NS,
                            {"metadata": _owned(owner, name="dep1-cm2")})
    # a data change re-queues; then a deletion re-queues exactly once more
    await asyncio.to_thread(cluster.core.patch_namespaced_config_map, "dep1-cm", NS, {"data": {"a": "2"}})
    await rec.wait_for(1)
    await asyncio.to_thread(cluster.core.delete_namespaced_config_map, "dep1-cm", NS)
    await rec.wait_for(2)
    assert rec.calls == [key, key]

    # status-only churn (the simulated Deployment controller) does not re-queue; a label change does
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": _owned(owner, name="dep1-web"),
                  "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "dep1"}},
                           "template": {"metadata": {"labels": {"app": "dep1"}},
                                        "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}}
    apps = kubernetes.client.AppsV1Api(cluster.api)
    await w.ensure(DEPLOYMENTS)
    await asyncio.to_thread(apps.create_namespaced_deployment, NS, deployment)
    await eventually(
        lambda: (apps.read_namespaced_deployment("dep1-web", NS).status.ready_replicas or 0) == 2,
        what="simulated Deployment ready",
    )
    # the deployment controller's deployment.kubernetes.io/revision annotation is a metadata change: one
    # re-queue, as on a real cluster
    await rec.wait_for(3)
    await asyncio.to_thread(apps.patch_namespaced_deployment, "dep1-web", NS,
                            {"metadata": {"labels": {"touched": "yes"}}})
    await rec.wait_for(4)
    await asyncio.sleep(0.3)
    assert rec.calls == [key, key, key, key]


async def test_dependent_watcher_annotations_and_relist_after_410(cluster: Cluster, tmp_path: Path) -> None:
    """A watch gap that ends in 410 Gone: the dependent watch's stream is ended, dep2-b deleted and dep2-c
    changed while nobody watches, and the history compacted. kopf's stream resumes from its last
    resourceVersion, gets 410, lists again; the relist is compared with what the watch knew: the deletion
    and the change re-queue the owner although no event told them.

    Sandbox: all of it on the sandbox's loop (nothing interleaves). Real: a private control plane (the
    compaction must not disturb other tests) whose kube-apiserver serves watches from etcd
    (``--watch-cache=false``: a compacted resourceVersion really gets 410), the watcher behind a TLS proxy
    that is cut for the gap; the proxy sees the 410."""
    if cluster.sandbox is not None:
        sandbox = cluster.sandbox
        store = sandbox.server.store

        def sandbox_gap(uid_b: str, uid_c: str) -> None:
            def gap() -> None:
                key_b, key_c = store.key_of_uid(uid_b), store.key_of_uid(uid_c)
                store.close_watchers_of(key_b[0])
                store.remove(key_b)
                changed = copy.deepcopy(store.get(key_c))
                changed["rules"] = [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]
                store.put(key_c, changed)
                store.compact()

            sandbox.call(gap)

        await _relist_after_410(cluster, cluster, sandbox_gap)
        return

    plane = await asyncio.to_thread(kube.private_control_plane, tmp_path / "cp", crds=(),
                                    apiserver_args=["--watch-cache=false"],
                                    components=["etcd", "kube-apiserver"])
    proxy = None
    try:
        proxy = TLSCutProxy(plane.url, plane.directory / "pki").start()
        direct = Cluster(None, plane.kubeconfig)
        via = Cluster(None, proxy.write_kubeconfig(plane.kubeconfig, tmp_path / "via-proxy.kubeconfig"))
        await asyncio.to_thread(direct.install)
        expired_before = proxy.expired

        def real_gap(uid_b: str, uid_c: str) -> None:
            assert proxy is not None
            proxy.cut()
            direct.rbac.delete_cluster_role("dep2-b")
            direct.rbac.patch_cluster_role(
                "dep2-c", {"rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]})
            plane.compact()
            proxy.restore()

        try:
            await _relist_after_410(direct, via, real_gap)
        finally:
            direct.api.close()
            via.api.close()
        assert proxy.expired > expired_before, "the watch gap did not end in 410 Gone"
    finally:
        if proxy is not None:
            proxy.close()
        await asyncio.to_thread(plane.stop)


async def _relist_after_410(direct: Cluster, via: Cluster, gap: Callable[[str, str], None]) -> None:
    """The watcher on ``via``'s API server, the changes through ``direct``; ``gap(uid_b, uid_c)`` deletes
    dep2-b and changes dep2-c while the watch cannot see, and compacts the history."""
    rec = Recorder("dep2")
    w = new_watcher(via, rec, {(GROUP, KIND)}, cluster_scoped=True)
    try:
        await asyncio.to_thread(direct.create_owner, "dep2")
        annotations = {"operator-sdk/primary-resource": f"{NS}/dep2",
                       "operator-sdk/primary-resource-type": f"{KIND}.{GROUP}"}
        for name in ("dep2-a", "dep2-b", "dep2-c"):
            await asyncio.to_thread(direct.rbac.create_cluster_role,
                                    {"metadata": {"name": name, "annotations": annotations}, "rules": []})
        await w.ensure(CLUSTERROLES)
        await asyncio.to_thread(direct.rbac.delete_cluster_role, "dep2-a")
        await rec.wait_for(1)
        assert rec.calls == [(f"{GROUP}/{VERSION}", KIND, NS, "dep2")]

        (kw,) = [v for k, v in w._watches.items() if k[2] == "clusterroles"]
        assert kw.listings == 1
        uid_b = (await asyncio.to_thread(direct.rbac.read_cluster_role, "dep2-b")).metadata.uid
        uid_c = (await asyncio.to_thread(direct.rbac.read_cluster_role, "dep2-c")).metadata.uid
        await asyncio.to_thread(gap, uid_b, uid_c)
        await rec.wait_for(3)
        assert kw.listings == 2  # the first listing, then the relist after the 410
        assert rec.calls[1:] == [(f"{GROUP}/{VERSION}", KIND, NS, "dep2")] * 2
        # the watch goes on from the relist: a deletion seen live re-queues once more
        await asyncio.to_thread(direct.rbac.delete_cluster_role, "dep2-c")
        await rec.wait_for(4)
        assert rec.calls[3] == (f"{GROUP}/{VERSION}", KIND, NS, "dep2")
    finally:
        await w.close()


async def test_dependent_watcher_ignores_without_owner_kinds_and_never_events(cluster: Cluster) -> None:
    rec = Recorder("none")
    w = new_watcher(cluster, rec, set(), cluster_scoped=False)
    await w.ensure(CONFIGMAPS)
    assert w.watched == []
    await w.close()
    # Events are never watched (re-recording one would re-queue its owner forever); a watched CR kind is,
    # when runs create it (a parent CR owning child CRs: test_production.py runs one)
    w = new_watcher(cluster, rec, {(GROUP, KIND)}, cluster_scoped=True)
    await w.ensure(DependentKind("", "v1", "Event", "events", True))
    assert w.watched == []
    widgets = DependentKind(GROUP, VERSION, KIND, PLURAL, True)
    await w.ensure(widgets)
    assert w.watched == [widgets]
    await w.close()


async def test_proxy_and_watcher_wired_together(cluster: Cluster, tmp_path: Path) -> None:
    """The manager's wiring: proxy reports a new kind -> watcher watches it -> deleting re-queues once."""
    rec = Recorder("wired")
    w = new_watcher(cluster, rec, {(GROUP, KIND)}, cluster_scoped=False)
    p = OwnerProxy(cluster.configuration(), on_dependent=w.on_dependent)
    await p.start()
    try:
        owner = await asyncio.to_thread(cluster.create_owner, "wired")
        kubeconfig = p.kubeconfig_for(owner, tmp_path / "kubeconfig")
        await run_playbook(tmp_path, kubeconfig, [
            _k8s({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "wired-s", "namespace": NS},
                  "stringData": {"a": "b"}}, "s"),
        ])
        p.release(kubeconfig)
        await eventually(lambda: w.watched, what="Secret watch started")
        assert [k.kind for k in w.watched] == ["Secret"]
        await asyncio.gather(*list(w._pending))  # ensure() returns once the initial list is done
        assert rec.calls == []  # the create itself re-queues nothing
        await asyncio.to_thread(cluster.core.delete_namespaced_secret, "wired-s", NS)
        await rec.wait_for(1)
        await asyncio.sleep(0.3)
        assert rec.calls == [(f"{GROUP}/{VERSION}", KIND, NS, "wired")]
    finally:
        await p.close()
        await w.close()
