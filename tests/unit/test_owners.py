"""Owner injection rules (ownerReference vs primary-resource annotations), request path parsing and the
proxy's token mapping -- the pure parts of the ansible_operator.owners package."""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Any, cast

import kubernetes
import pytest
import yaml

from ansible_operator.kubetypes import KubeObject
from ansible_operator.owners.injection import (
    ANNOTATION_PRIMARY_RESOURCE,
    ANNOTATION_PRIMARY_RESOURCE_TYPE,
    Owner,
    inject_owner,
    injection_mode,
    own_put_apply_creates_from_env,
    owned_by_kind_of,
    owner_json_patch,
    owner_ref,
)
from ansible_operator.owners.paths import RequestInfo, parse_request_path, request_action
from ansible_operator.owners.proxy import OwnerProxy

CR: KubeObject = {"apiVersion": "cache.example.com/v1alpha1", "kind": "Memcached",
      "metadata": {"name": "mc", "namespace": "apps", "uid": "u-1"}}
NAMESPACED = Owner.from_object(CR)
CLUSTER = Owner("cache.example.com/v1alpha1", "Cluster", "c1", None, "u-2")


def test_owner_from_object_requires_uid() -> None:
    assert NAMESPACED == Owner("cache.example.com/v1alpha1", "Memcached", "mc", "apps", "u-1")
    assert NAMESPACED.group == "cache.example.com"
    with pytest.raises(ValueError, match="metadata.uid"):
        Owner.from_object({"apiVersion": "v1", "kind": "X", "metadata": {"name": "x"}})


def test_owner_ref_matches_operator_sdk() -> None:
    assert owner_ref(NAMESPACED) == {"apiVersion": "cache.example.com/v1alpha1", "kind": "Memcached",
                                     "name": "mc", "uid": "u-1"}


@pytest.mark.parametrize(
    ("owner", "dep_namespaced", "dep_ns", "mode"),
    [
        (NAMESPACED, True, "apps", "ownerReference"),
        (NAMESPACED, True, "other", "annotations"),
        (NAMESPACED, False, None, "annotations"),
        (CLUSTER, True, "apps", "ownerReference"),
        (CLUSTER, False, None, "ownerReference"),
    ],
)
def test_injection_mode(owner: Owner, dep_namespaced: bool, dep_ns: str | None, mode: str) -> None:
    assert injection_mode(owner, dep_namespaced, dep_ns) == mode


def test_inject_owner_reference_no_duplicates() -> None:
    obj: dict = {"metadata": {"name": "cm", "ownerReferences": [
        {"apiVersion": "v1", "kind": "Other", "name": "o", "uid": "x"}]}}
    assert inject_owner(obj, NAMESPACED, "ownerReference") is True
    assert obj["metadata"]["ownerReferences"][-1] == owner_ref(NAMESPACED)
    assert inject_owner(obj, NAMESPACED, "ownerReference") is False
    assert len(obj["metadata"]["ownerReferences"]) == 2
    # a reference to the same owner given without uid counts as present too
    bare: dict = {"metadata": {"ownerReferences": [
        {"apiVersion": "cache.example.com/v1alpha1", "kind": "Memcached", "name": "mc"}]}}
    assert inject_owner(bare, NAMESPACED, "ownerReference") is False
    empty: dict = {}
    assert inject_owner(empty, NAMESPACED, "ownerReference") is True
    assert empty["metadata"]["ownerReferences"] == [owner_ref(NAMESPACED)]


def test_inject_annotations() -> None:
    obj: dict = {"metadata": {"name": "ns1", "annotations": {"keep": "1"}}}
    assert inject_owner(obj, NAMESPACED, "annotations") is True
    assert obj["metadata"]["annotations"] == {
        "keep": "1",
        ANNOTATION_PRIMARY_RESOURCE: "apps/mc",
        ANNOTATION_PRIMARY_RESOURCE_TYPE: "Memcached.cache.example.com",
    }
    assert inject_owner(obj, NAMESPACED, "annotations") is False
    core_owner = Owner("v1", "ConfigMap", "c", "apps", "u")
    o2: dict = {"metadata": {}}
    inject_owner(o2, core_owner, "annotations")
    assert o2["metadata"]["annotations"][ANNOTATION_PRIMARY_RESOURCE_TYPE] == "ConfigMap"


def test_inject_rejects_malformed_metadata() -> None:
    with pytest.raises(ValueError):
        inject_owner({"metadata": {"ownerReferences": "x"}}, NAMESPACED, "ownerReference")
    with pytest.raises(ValueError):
        inject_owner({"metadata": []}, NAMESPACED, "annotations")


@pytest.mark.parametrize(
    ("path", "info"),
    [
        ("/api/v1/namespaces/ns/configmaps", RequestInfo("", "v1", "configmaps", "ns")),
        ("/api/v1/namespaces/ns/configmaps/c", RequestInfo("", "v1", "configmaps", "ns", "c")),
        ("/api/v1/namespaces", RequestInfo("", "v1", "namespaces")),
        ("/api/v1/namespaces/ns", RequestInfo("", "v1", "namespaces", None, "ns")),
        ("/api/v1/namespaces/ns/status", RequestInfo("", "v1", "namespaces", None, "ns", "status")),
        ("/api/v1/namespaces/ns/pods/p/exec", RequestInfo("", "v1", "pods", "ns", "p", "exec")),
        (
            "/apis/rbac.authorization.k8s.io/v1/clusterroles",
            RequestInfo("rbac.authorization.k8s.io", "v1", "clusterroles"),
        ),
        (
            "/apis/apps/v1/watch/namespaces/ns/deployments",
            RequestInfo("apps", "v1", "deployments", "ns", watch_path=True),
        ),
        (
            "/apis/x.io/v1/namespaces/ns/things/t/status",
            RequestInfo("x.io", "v1", "things", "ns", "t", "status"),
        ),
    ],
)
def test_parse_request_path(path: str, info: RequestInfo) -> None:
    assert parse_request_path(path) == info


@pytest.mark.parametrize("path", ["/", "/api", "/api/v1", "/apis", "/apis/apps", "/apis/apps/v1", "/version",
                                  "/openapi/v2"])
def test_parse_non_resource_paths(path: str) -> None:
    assert parse_request_path(path) is None


def test_owners_are_added_on_create_only() -> None:
    """SDK's inject_owner.go rewrites POST bodies only; PUT/apply may create, so they are checked after."""
    coll = RequestInfo("", "v1", "configmaps", "ns")
    item = RequestInfo("", "v1", "configmaps", "ns", "c")
    sub = RequestInfo("", "v1", "pods", "ns", "p", "eviction")
    watch = RequestInfo("", "v1", "configmaps", "ns", "c", None, True)
    assert request_action("POST", coll, "application/json") == "inject"
    assert request_action("POST", sub, "application/json") == "forward"
    assert request_action("PUT", item, "application/json") == "own_if_created"
    assert request_action("PATCH", item, "application/apply-patch+yaml") == "own_if_created"
    assert request_action("PATCH", item, "application/merge-patch+json") == "forward"
    assert request_action("PATCH", item, "application/strategic-merge-patch+json") == "forward"
    assert request_action("PATCH", item, "application/json-patch+json") == "forward"
    assert request_action("PUT", sub, "application/json") == "forward"
    assert request_action("GET", item, "") == "recover"
    assert request_action("GET", coll, "") == "forward"
    assert request_action("GET", watch, "") == "forward"
    assert request_action("DELETE", item, "") == "forward"


def test_owner_json_patch_for_a_created_object() -> None:
    created = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "c", "namespace": "apps", "uid": "c-1"},
    }
    ops = owner_json_patch(created, NAMESPACED, "ownerReference")
    assert ops == [{"op": "test", "path": "/metadata/uid", "value": "c-1"},
                   {"op": "add", "path": "/metadata/ownerReferences", "value": [owner_ref(NAMESPACED)]}]
    other = {"apiVersion": "v1", "kind": "Thing", "name": "t", "uid": "t-1"}
    with_refs = {"metadata": {"name": "c", "uid": "c-1", "ownerReferences": [other]}}
    appended = owner_json_patch(with_refs, NAMESPACED, "ownerReference")
    assert appended is not None and appended[1] == {
        "op": "add", "path": "/metadata/ownerReferences/-", "value": owner_ref(NAMESPACED)}
    assert owner_json_patch({"metadata": {"uid": "c-1", "ownerReferences": [owner_ref(NAMESPACED)]}},
                            NAMESPACED, "ownerReference") is None
    annotated = owner_json_patch(
        {"metadata": {"uid": "n-1", "annotations": {"a": "b"}}}, NAMESPACED, "annotations"
    )
    assert annotated is not None and annotated[1:] == [
        {"op": "add", "path": "/metadata/annotations/operator-sdk~1primary-resource", "value": "apps/mc"},
        {"op": "add", "path": "/metadata/annotations/operator-sdk~1primary-resource-type",
         "value": "Memcached.cache.example.com"}]
    bare = owner_json_patch({"metadata": {"uid": "n-1"}}, NAMESPACED, "annotations")
    assert bare is not None and bare[1] == {
        "op": "add",
        "path": "/metadata/annotations",
        "value": {
            ANNOTATION_PRIMARY_RESOURCE: "apps/mc",
            ANNOTATION_PRIMARY_RESOURCE_TYPE: "Memcached.cache.example.com",
        },
    }
    with pytest.raises(ValueError, match="uid"):
        owner_json_patch({"metadata": {"name": "c"}}, NAMESPACED, "ownerReference")


def test_owned_by_kind_of() -> None:
    other_cr = {
        "apiVersion": "cache.example.com/v1alpha1",
        "kind": "Memcached",
        "name": "other",
        "uid": "u-9",
    }
    assert owned_by_kind_of({"metadata": {"ownerReferences": [other_cr]}}, NAMESPACED)
    assert not owned_by_kind_of({"metadata": {"ownerReferences": [dict(other_cr, kind="Redis")]}}, NAMESPACED)
    assert owned_by_kind_of({"metadata": {"annotations": {
        ANNOTATION_PRIMARY_RESOURCE_TYPE: "Memcached.cache.example.com"}}}, NAMESPACED)
    assert not owned_by_kind_of({"metadata": {"annotations": {"x": "y"}}}, NAMESPACED)
    assert not owned_by_kind_of({"metadata": None}, NAMESPACED)


async def test_kubeconfig_tokens_are_per_owner_and_released(tmp_path: Path) -> None:
    cfg = kubernetes.client.Configuration()
    cfg.host = "http://127.0.0.1:9"  # never contacted here
    proxy = OwnerProxy(cfg)
    await proxy.start()
    try:
        a = proxy.kubeconfig_for(CR, tmp_path / "a" / "kubeconfig")
        other = cast(KubeObject, dict(CR, metadata={"name": "mc2", "namespace": "apps", "uid": "u-9"}))
        b = proxy.kubeconfig_for(other, tmp_path / "b" / "kubeconfig")
        assert stat.S_IMODE(a.stat().st_mode) == 0o600
        ca, cb = yaml.safe_load(a.read_text()), yaml.safe_load(b.read_text())
        assert ca["clusters"][0]["cluster"]["server"] == proxy.url
        assert ca["contexts"][0]["context"]["namespace"] == "apps"
        ta, tb = ca["users"][0]["user"]["token"], cb["users"][0]["user"]["token"]
        assert ta != tb
        assert proxy.owner_for_token(ta) == NAMESPACED
        assert proxy.owner_for_token(tb).name == "mc2"  # type: ignore[union-attr]
        proxy.release(a)
        assert proxy.owner_for_token(ta) is None
        assert proxy.owner_for_token(tb) is not None
        # re-issuing for the same path replaces the old token
        proxy.kubeconfig_for(other, b)
        assert proxy.owner_for_token(tb) is None
    finally:
        await proxy.close()


# ---- dependent watches: owner lookup and event filtering (ansible_operator.dependents) -------------

from ansible_operator.dependents import OwnerKinds, fingerprint, owners_of, should_enqueue  # noqa: E402

KINDS = OwnerKinds({("cache.example.com", "Memcached"): "cache.example.com/v1alpha1",
                    ("cache.example.com", "Cluster"): "cache.example.com/v1"},
                   frozenset({("cache.example.com", "Cluster")}))


def _ref(kind: str, name: str, uid: str, controller: bool | None = None,
         api_version: str = "cache.example.com/v1alpha1") -> dict:
    ref: dict[str, Any] = {"apiVersion": api_version, "kind": kind, "name": name, "uid": uid}
    if controller is not None:
        ref["controller"] = controller
    return ref


def _obj(body: dict[str, Any]) -> KubeObject:
    """A dependent of any kind (a ConfigMap's ``data``...): as JSON from the API server."""
    return cast(KubeObject, body)


def test_owners_from_owner_references() -> None:
    obj: dict[str, Any] = {"metadata": {"namespace": "apps", "ownerReferences": [
        _ref("Memcached", "a", "1"), _ref("Memcached", "b", "2"),
        _ref("ReplicaSet", "rs", "3", True, "apps/v1")]}}
    assert owners_of(_obj(obj), KINDS) == {("cache.example.com/v1alpha1", "Memcached", "apps", "a"),
                                           ("cache.example.com/v1alpha1", "Memcached", "apps", "b")}
    # a controller reference among ours wins
    obj["metadata"]["ownerReferences"][1]["controller"] = True
    assert owners_of(_obj(obj), KINDS) == {("cache.example.com/v1alpha1", "Memcached", "apps", "b")}
    # cluster-scoped owner kinds have no namespace
    cobj = {
        "metadata": {
            "namespace": "apps",
            "ownerReferences": [_ref("Cluster", "c", "9", api_version="cache.example.com/v1")],
        }
    }
    assert owners_of(_obj(cobj), KINDS) == {("cache.example.com/v1", "Cluster", None, "c")}


def test_owners_from_annotations() -> None:
    obj: dict[str, Any] = {"metadata": {"name": "role", "annotations": {
        "operator-sdk/primary-resource": "apps/a",
        "operator-sdk/primary-resource-type": "Memcached.cache.example.com"}}}
    assert owners_of(_obj(obj), KINDS) == {("cache.example.com/v1alpha1", "Memcached", "apps", "a")}
    assert owners_of(_obj(obj), KINDS, follow_annotations=False) == set()
    obj["metadata"]["annotations"]["operator-sdk/primary-resource"] = "/c"
    assert owners_of(_obj(obj), KINDS) == {("cache.example.com/v1alpha1", "Memcached", None, "c")}
    obj["metadata"]["annotations"]["operator-sdk/primary-resource-type"] = "Other.cache.example.com"
    assert owners_of(_obj(obj), KINDS) == set()
    assert owners_of(_obj({"metadata": {}}), KINDS) == set()


def test_event_filtering_ignores_status_and_bookkeeping() -> None:
    base: dict[str, Any] = {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "d", "generation": 1, "resourceVersion": "5", "labels": {"a": "1"}},
            "spec": {"replicas": 1}, "status": {"readyReplicas": 0}}
    fp = fingerprint(_obj(base))
    status_only = {**base, "metadata": {**base["metadata"], "resourceVersion": "6",
                                        "managedFields": [{"manager": "x"}]}, "status": {"readyReplicas": 1}}
    assert not should_enqueue("MODIFIED", fp, _obj(status_only))
    relabelled = {**base, "metadata": {**base["metadata"], "labels": {"a": "2"}}}
    assert should_enqueue("MODIFIED", fp, _obj(relabelled))
    respec = {**base, "spec": {"replicas": 2}, "metadata": {**base["metadata"], "generation": 2}}
    assert should_enqueue("MODIFIED", fp, _obj(respec))
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"k": "v"}}
    assert should_enqueue("MODIFIED", fingerprint(_obj(cm)), _obj({**cm, "data": {"k": "w"}}))
    assert should_enqueue("MODIFIED", None, _obj(cm))  # never seen before: treat as a change
    assert should_enqueue("DELETED", fp, _obj(base))
    assert not should_enqueue("ADDED", None, _obj(base))


async def test_discovery_refetches_on_miss_and_propagates_errors() -> None:
    from ansible_operator.owners.upstream import Discovery

    calls: list[str] = []
    served = [{"name": "configmaps", "kind": "ConfigMap", "namespaced": True, "verbs": ["get"]}]

    async def fetch(path: str) -> dict:
        calls.append(path)
        if path == "/apis/broken/v1":
            raise RuntimeError("HTTP 503")
        return {"resources": list(served)}

    d = Discovery(fetch)
    assert (await d.lookup("", "v1", "configmaps"))["kind"] == "ConfigMap"  # type: ignore[index]
    assert await d.lookup("", "v1", "configmaps") is not None
    assert calls == ["/api/v1"]  # cached
    assert await d.lookup("", "v1", "widgets") is None  # miss -> one refetch, still not served
    served.append({"name": "widgets", "kind": "Widget", "namespaced": True, "verbs": ["get"]})
    assert (await d.lookup("", "v1", "widgets"))["kind"] == "Widget"  # type: ignore[index]
    assert calls == ["/api/v1"] * 3
    with pytest.raises(RuntimeError, match="503"):
        await d.lookup("broken", "v1", "things")


# ---- forwarding against a plain aiohttp upstream (no sandbox): auth, headers, bodies, streams, websockets --

import asyncio  # noqa: E402
import gzip  # noqa: E402
import json  # noqa: E402

from aiohttp import ClientSession, WSMsgType, web  # noqa: E402


async def _fake_apiserver() -> tuple[web.AppRunner, str, list[dict]]:
    seen: list[dict] = []

    async def discovery(request: web.Request) -> web.Response:
        return web.json_response({"kind": "APIResourceList", "groupVersion": "v1", "resources": [
            {"name": "configmaps", "kind": "ConfigMap", "namespaced": True,
             "verbs": ["create", "get", "list", "watch", "update", "patch"]}]})

    async def record(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        seen.append(
            {
                "method": request.method,
                "path": request.path_qs,
                "auth": request.headers.get("Authorization"),
                "ctype": request.headers.get("Content-Type"),
                "x": request.headers.get("X-Custom"),
                "body": json.loads(body) if body else None,
            }
        )
        if request.query.get("watch") == "1":
            resp = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
            await resp.prepare(request)
            for i in range(3):
                await resp.write(
                    json.dumps({"type": "ADDED", "object": {"metadata": {"name": f"c{i}"}}}).encode() + b"\n"
                )
                await asyncio.sleep(0.01)
            return resp
        if request.query.get("gz") == "1":
            return web.Response(status=200, body=gzip.compress(b'{"ok":true}'),
                                headers={"Content-Encoding": "gzip", "Content-Type": "application/json"})
        return web.json_response({"echo": True}, status=201 if request.method == "POST" else 409,
                                 headers={"X-Upstream": "yes"})

    async def ws(request: web.Request) -> web.WebSocketResponse:
        sock = web.WebSocketResponse(protocols=("v4.channel.k8s.io",))
        await sock.prepare(request)
        seen.append({"ws_auth": request.headers.get("Authorization"), "protocol": sock.ws_protocol})
        async for msg in sock:
            if msg.type == WSMsgType.BINARY:
                await sock.send_bytes(b"echo:" + msg.data)
        return sock

    app = web.Application()
    app.router.add_get("/api/v1", discovery)
    app.router.add_get("/api/v1/namespaces/ns/pods/p/exec", ws)
    async def forbidden(request: web.Request) -> web.Response:
        return web.json_response({"kind": "Status", "reason": "Forbidden", "code": 403}, status=403)

    app.router.add_get("/api/v1/namespaces/ns/pods/denied/exec", forbidden)
    app.router.add_route("*", "/{tail:.*}", record)
    runner = web.AppRunner(app, handler_cancellation=True)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, f"http://127.0.0.1:{runner.addresses[0][1]}", seen


async def test_forwarding_to_any_upstream(tmp_path: Path) -> None:
    upstream, url, seen = await _fake_apiserver()
    cfg = kubernetes.client.Configuration()
    cfg.host = url
    cfg.api_key = {"authorization": "Bearer operator-token"}
    proxy = OwnerProxy(cfg)
    await proxy.start()
    try:
        kc = yaml.safe_load(proxy.kubeconfig_for(CR, tmp_path / "kc").read_text())
        token = kc["users"][0]["user"]["token"]
        auth = {"Authorization": f"Bearer {token}"}
        async with ClientSession() as http:
            async with http.post(proxy.url + "/api/v1/namespaces/apps/configmaps?fieldManager=role",
                                 json={"metadata": {"name": "c"}}, headers={**auth, "X-Custom": "1"}) as r:
                assert r.status == 201 and r.headers["X-Upstream"] == "yes"
            created = seen[-1]
            assert created["path"] == "/api/v1/namespaces/apps/configmaps?fieldManager=role"
            assert created["auth"] == "Bearer operator-token"  # the run's token never reaches upstream
            assert created["x"] == "1" and created["ctype"] == "application/json"
            assert created["body"]["metadata"]["ownerReferences"] == [owner_ref(NAMESPACED)]

            async with http.put(proxy.url + "/api/v1/namespaces/apps/configmaps/c/status",
                                json={"metadata": {"name": "c"}}, headers=auth) as r:
                assert r.status == 409  # status codes pass through; subresources are never touched
            assert "ownerReferences" not in seen[-1]["body"]["metadata"]

            async with http.get(proxy.url + "/api/v1/namespaces/apps/configmaps?watch=1", headers=auth) as r:
                lines = [json.loads(line) async for line in r.content if line.strip()]
            assert [e["object"]["metadata"]["name"] for e in lines] == ["c0", "c1", "c2"]

            async with http.get(
                proxy.url + "/api/v1/x?gz=1", headers={**auth, "Accept-Encoding": "gzip"}
            ) as r:
                assert r.headers["Content-Encoding"] == "gzip" and await r.json() == {"ok": True}

            async with http.ws_connect(proxy.url + "/api/v1/namespaces/ns/pods/p/exec?command=ls",
                                       protocols=("v4.channel.k8s.io",), headers=auth) as sock:
                assert sock.protocol == "v4.channel.k8s.io"
                await sock.send_bytes(b"\x00hi")
                msg = await sock.receive(timeout=5)
                assert msg.data == b"echo:\x00hi"
            assert seen[-1]["ws_auth"] == "Bearer operator-token"

            # a refused upgrade keeps its status and reason (was: 403 with reason BadGateway)
            upgrade = {"Upgrade": "websocket", "Connection": "Upgrade", "Sec-WebSocket-Version": "13",
                       "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="}
            async with http.get(proxy.url + "/api/v1/namespaces/ns/pods/denied/exec?command=ls",
                                headers={**auth, **upgrade}) as r:
                refused = await r.json()
                assert r.status == 403 and refused["reason"] == "Forbidden" and refused["code"] == 403
                assert "refused the WebSocket upgrade" in refused["message"]

            async with http.get(
                proxy.url + "/api/v1/namespaces", headers={"Authorization": "Bearer nope"}
            ) as r:
                assert r.status == 401 and (await r.json())["reason"] == "Unauthorized"
            async with http.get(proxy.url + "/api/v1/namespaces") as r:
                assert r.status == 401
    finally:
        await proxy.close()
        await upstream.cleanup()


async def test_upstream_down_gives_502(tmp_path: Path) -> None:
    cfg = kubernetes.client.Configuration()
    cfg.host = "http://127.0.0.1:1"
    proxy = OwnerProxy(cfg)
    await proxy.start()
    try:
        token = yaml.safe_load(proxy.kubeconfig_for(CR, tmp_path / "kc").read_text())["users"][0]["user"][
            "token"
        ]
        async with ClientSession() as http:
            async with http.get(
                proxy.url + "/api/v1/namespaces", headers={"Authorization": f"Bearer {token}"}
            ) as r:
                assert r.status == 502
            async with http.post(proxy.url + "/api/v1/namespaces/apps/configmaps", json={"metadata": {}},
                                 headers={"Authorization": f"Bearer {token}"}) as r:
                assert r.status == 503  # cannot classify the object -> refuse rather than lose the owner
    finally:
        await proxy.close()


async def test_watcher_close_ends_pending_ensure() -> None:
    """An unreachable API server keeps the watch retrying; close() must still end ensure() and the task."""
    import kopf

    from ansible_operator.dependents import DependentWatcher
    from ansible_operator.kube import kopf_vault
    from ansible_operator.owners.injection import DependentKind

    cfg = kubernetes.client.Configuration()
    cfg.host = "http://127.0.0.1:1"
    w = DependentWatcher(lambda *a: None, settings=kopf.OperatorSettings(), vault=kopf_vault(cfg),
                         owner_kinds={("x.io", "Thing")}, cluster_scoped=False)
    ensure = asyncio.create_task(w.ensure(DependentKind("", "v1", "ConfigMap", "configmaps", True)))
    while not w.watched:
        await asyncio.sleep(0)
    tasks = list(w._tasks)
    await w.close()
    await asyncio.wait_for(ensure, 10)  # hang guard only
    assert tasks and all(t.done() for t in tasks)


def test_owner_on_apply_create_env(caplog: pytest.LogCaptureFixture) -> None:
    assert own_put_apply_creates_from_env({}) is True
    assert own_put_apply_creates_from_env({"ANSIBLE_OPERATOR_OWNER_ON_APPLY_CREATE": "false"}) is False
    assert own_put_apply_creates_from_env({"ANSIBLE_OPERATOR_OWNER_ON_APPLY_CREATE": "True"}) is True
    # a typo gets SDK's behaviour (nothing becomes garbage-collectable) and an error naming the variable
    assert own_put_apply_creates_from_env({"ANSIBLE_OPERATOR_OWNER_ON_APPLY_CREATE": "fasle"}) is False
    assert "ANSIBLE_OPERATOR_OWNER_ON_APPLY_CREATE='fasle'" in caplog.text
