#!/usr/bin/env python3
"""The native baseline (issue 14): a hand-written kopf operator doing what ``roles/memcached`` does.

    python bench/native_memcached.py --kubeconfig KUBECONFIG --namespace NS [--namespace NS2 ...]
                                     [--liveness http://127.0.0.1:PORT/healthz]

It is the ceiling the Ansible operator is compared with: the same API calls per reconcile, in the same
order, against the same API server, written the way a Python developer would write them (kopf for the
watch and the handler dispatch, one shared aiohttp session for the calls). Per reconcile of a Memcached:

1. GET the Memcached, PATCH its status: ``Running=True`` (the runner's status write before a run);
2. GET the Deployment ``<name>-memcached``; POST it if absent (with the Memcached as controller owner, as
   the runner's owner proxy injects), else PATCH it (``kubernetes.core.k8s`` ``state: present``);
3. LIST the pods by the two instance labels (``kubernetes.core.k8s_info``);
4. GET the Memcached, PATCH ``status.nodes``, ``status.readyReplicas`` and the ``Available`` condition
   (``ansible_operator.util.k8s_status``; the condition keeps its ``lastTransitionTime`` while its status
   does not change);
5. GET the Memcached, PATCH status: ``Running=False``/``Successful=True``/``Failure=False`` with
   ``ansibleResult`` and ``observedGeneration`` (the runner's shape, see ``ansible_operator/status.py``);
6. POST an Event ``ReconcileChanged`` when something changed (the runner's Event);
7. while the rollout is in progress, reconcile again in 2 s (the role's ``requeue_after``).

A Deployment deleted by someone else re-queues its owner (the runner's dependent watch). Reconciles of one
object never overlap; a spec change during a reconcile gets a reconcile of its own after it.

Nothing here is shared with ``ansible_operator``: it is what a user would write instead of the role.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import logging
import os
import ssl
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiohttp
import kopf
import yaml

GROUP, VERSION, PLURAL = "cache.example.com", "v1alpha1", "memcacheds"
IMAGE = "memcached:1.6-alpine"
MEMORY_MB = 64
REQUEUE_S = 2.0
COMPONENT = "memcached-native"

log = logging.getLogger("native-memcached")


# ---------------------------------------------------------------------------------------------- client


class ApiError(Exception):
    def __init__(self, status: int, text: str) -> None:
        super().__init__(f"HTTP {status}: {text[:500]}")
        self.status = status


class Api:
    """One aiohttp session for every call, configured from a kubeconfig (token or client certificate)."""

    def __init__(self, kubeconfig: Path) -> None:
        doc = yaml.safe_load(kubeconfig.read_text())
        ctx_name = doc.get("current-context")
        ctx = next(c["context"] for c in doc["contexts"] if c["name"] == ctx_name)
        cluster = next(c["cluster"] for c in doc["clusters"] if c["name"] == ctx["cluster"])
        user = next(u["user"] for u in doc["users"] if u["name"] == ctx["user"])
        self.server = cluster["server"].rstrip("/")
        self.headers = {"Accept": "application/json"}
        if user.get("token"):
            self.headers["Authorization"] = f"Bearer {user['token']}"
        self.ssl: ssl.SSLContext | bool = False
        if self.server.startswith("https"):
            context = ssl.create_default_context()
            if cluster.get("certificate-authority-data"):
                context.load_verify_locations(
                    cadata=base64.b64decode(cluster["certificate-authority-data"]).decode())
            elif cluster.get("certificate-authority"):
                context.load_verify_locations(cafile=cluster["certificate-authority"])
            if user.get("client-certificate-data"):
                with tempfile.TemporaryDirectory() as tmp:  # load_cert_chain reads files only
                    cert, key = Path(tmp) / "c.pem", Path(tmp) / "k.pem"
                    cert.write_bytes(base64.b64decode(user["client-certificate-data"]))
                    key.write_bytes(base64.b64decode(user["client-key-data"]))
                    context.load_cert_chain(cert, key)
            elif user.get("client-certificate"):
                context.load_cert_chain(user["client-certificate"], user["client-key"])
            self.ssl = context
        self.session: aiohttp.ClientSession | None = None

    async def open(self) -> None:
        self.session = aiohttp.ClientSession(headers=self.headers,
                                             connector=aiohttp.TCPConnector(ssl=self.ssl, limit=32))

    async def close(self) -> None:
        if self.session is not None:
            await self.session.close()

    async def call(self, method: str, path: str, body: Any = None, content_type: str | None = None,
                   params: dict[str, str] | None = None) -> Any:
        assert self.session is not None
        headers = {"Content-Type": content_type} if content_type else None
        async with self.session.request(method, self.server + path, json=body, headers=headers,
                                        params=params) as resp:
            if resp.status >= 400:
                raise ApiError(resp.status, await resp.text())
            return await resp.json()

    async def get(self, path: str) -> dict[str, Any] | None:
        try:
            found: dict[str, Any] = await self.call("GET", path)
            return found
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    async def merge_patch(self, path: str, patch: dict[str, Any]) -> dict[str, Any]:
        patched: dict[str, Any] = await self.call("PATCH", path, patch, "application/merge-patch+json")
        return patched


def memcached_path(namespace: str, name: str, subresource: str = "") -> str:
    path = f"/apis/{GROUP}/{VERSION}/namespaces/{quote(namespace)}/{PLURAL}/{quote(name)}"
    return f"{path}/{subresource}" if subresource else path


# ---------------------------------------------------------------------------------------------- status


def now_rfc3339() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def condition(ctype: str, status: bool, reason: str, message: str, generation: int | None = None,
              result: dict[str, Any] | None = None) -> dict[str, Any]:
    cond: dict[str, Any] = {"type": ctype, "status": "True" if status else "False", "reason": reason,
                            "message": message, "lastTransitionTime": now_rfc3339()}
    if generation is not None:
        cond["observedGeneration"] = generation
    if result is not None:
        cond["ansibleResult"] = result
    return cond


def merge_conditions(existing: list[dict[str, Any]], updates: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Replace by type, keep order, keep ``lastTransitionTime`` while ``status`` is unchanged."""
    merged = [dict(c) for c in existing if isinstance(c, dict) and "type" in c]
    index = {c["type"]: i for i, c in enumerate(merged)}
    for new in updates:
        i = index.get(new["type"])
        if i is None:
            index[new["type"]] = len(merged)
            merged.append(new)
            continue
        old = merged[i]
        if old.get("status") == new.get("status") and old.get("lastTransitionTime"):
            new = {**new, "lastTransitionTime": old["lastTransitionTime"]}
        merged[i] = new
    return merged


# ------------------------------------------------------------------------------------------- reconcile


def labels_of(name: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": "memcached", "app.kubernetes.io/instance": name,
            "app.kubernetes.io/managed-by": "ansible-operator"}


def deployment_for(obj: dict[str, Any], size: int) -> dict[str, Any]:
    meta = obj["metadata"]
    labels = labels_of(meta["name"])
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": f"{meta['name']}-memcached",
            "namespace": meta["namespace"],
            "labels": labels,
            "ownerReferences": [
                {
                    "apiVersion": f"{GROUP}/{VERSION}",
                    "kind": "Memcached",
                    "name": meta["name"],
                    "uid": meta["uid"],
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {
            "replicas": size,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "securityContext": {"runAsNonRoot": True, "runAsUser": 11211},
                    "containers": [
                        {
                            "name": "memcached",
                            "image": IMAGE,
                            "command": ["memcached", f"--memory-limit={MEMORY_MB}", "-o", "modern", "-v"],
                            "ports": [{"name": "memcached", "containerPort": 11211}],
                            "readinessProbe": {"tcpSocket": {"port": "memcached"}},
                            "securityContext": {
                                "allowPrivilegeEscalation": False,
                                "readOnlyRootFilesystem": True,
                                "capabilities": {"drop": ["ALL"]},
                            },
                        }
                    ],
                },
            },
        },
    }


def rolled_out(deployment: dict[str, Any], size: int) -> bool:
    st = deployment.get("status") or {}
    return (int(st.get("observedGeneration", 0)) >= int(deployment["metadata"].get("generation", 1))
            and int(st.get("replicas", 0)) == size and int(st.get("updatedReplicas", 0)) == size
            and int(st.get("availableReplicas", 0)) == size)


async def write_status(api: Api, namespace: str, name: str, uid: str,
                       build: Any) -> bool:
    """GET, build the new status from the fresh one, PATCH with resourceVersion; retry on conflict."""
    for _ in range(5):
        fresh = await api.get(memcached_path(namespace, name))
        if fresh is None or fresh["metadata"].get("uid") != uid:
            return False
        new_status = build(fresh.get("status") or {})
        patch = {"metadata": {"resourceVersion": fresh["metadata"]["resourceVersion"]}, "status": new_status}
        try:
            await api.merge_patch(memcached_path(namespace, name, "status"), patch)
            return True
        except ApiError as exc:
            if exc.status == 409:
                continue
            if exc.status == 404:
                return False
            raise
    return False


async def reconcile(api: Api, namespace: str, name: str) -> float | None:
    """One reconcile; returns the requeue delay (None: done)."""
    obj = await api.get(memcached_path(namespace, name))
    if obj is None or obj["metadata"].get("deletionTimestamp"):
        return None
    uid, generation = obj["metadata"]["uid"], obj["metadata"].get("generation")
    size = int((obj.get("spec") or {}).get("size", 1))

    def running(cur: dict[str, Any]) -> dict[str, Any]:
        return {**cur, "conditions": merge_conditions(cur.get("conditions") or [], [
            condition("Running", True, "Running", "Running reconciliation", generation)])}

    if not await write_status(api, namespace, name, uid, running):
        return None

    changed: list[str] = []
    dep_path = f"/apis/apps/v1/namespaces/{quote(namespace)}/deployments/{quote(name)}-memcached"
    definition = deployment_for(obj, size)
    existing = await api.get(dep_path)
    if existing is None:
        deployment = await api.call("POST", f"/apis/apps/v1/namespaces/{quote(namespace)}/deployments",
                                    definition)
        changed.append(f"Run memcached as a Deployment, replicas {size}")
    else:
        deployment = await api.merge_patch(dep_path, definition)
        if deployment["metadata"].get("resourceVersion") != existing["metadata"].get("resourceVersion"):
            changed.append(f"Run memcached as a Deployment, replicas {size}")

    selector = f"app.kubernetes.io/name=memcached,app.kubernetes.io/instance={name}"
    pods = await api.call("GET", f"/api/v1/namespaces/{quote(namespace)}/pods",
                          params={"labelSelector": selector})
    nodes = sorted(p["metadata"]["name"] for p in pods.get("items", [])
                   if not p["metadata"].get("deletionTimestamp"))
    ready = int((deployment.get("status") or {}).get("readyReplicas", 0))
    done = rolled_out(deployment, size)

    status_changed = False

    def role_status(cur: dict[str, Any]) -> dict[str, Any]:
        nonlocal status_changed
        available = condition("Available", done, "RolloutComplete" if done else "RolloutInProgress",
                              f"{ready} of {size} memcached pods ready")
        new = {**cur, "nodes": nodes, "readyReplicas": ready,
               "conditions": merge_conditions(cur.get("conditions") or [], [available])}
        status_changed = new != cur
        return new

    await write_status(api, namespace, name, uid, role_status)
    if status_changed:
        changed.append("Report pods, readiness and availability in the Memcached status")

    result = {"ok": 3 if done else 4, "changed": len(changed), "skipped": 1 if done else 0, "failures": 0,
              "completion": datetime.now(timezone.utc).isoformat()}

    def successful(cur: dict[str, Any]) -> dict[str, Any]:
        return {**cur, "observedGeneration": generation,
                "conditions": merge_conditions(cur.get("conditions") or [], [
                    condition("Running", False, "Successful", "Awaiting next reconciliation", generation,
                              result),
                    condition("Successful", True, "Successful", "Last reconciliation succeeded", generation,
                              result),
                    condition("Failure", False, "Successful", "", generation)])}

    await write_status(api, namespace, name, uid, successful)
    if changed:
        ts = now_rfc3339()
        await api.call("POST", f"/api/v1/namespaces/{quote(namespace)}/events", {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"generateName": f"{name}.", "namespace": namespace},
            "involvedObject": {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Memcached", "name": name,
                               "namespace": namespace, "uid": uid},
            "reason": "ReconcileChanged", "type": "Normal", "action": "Reconcile",
            "message": f"{len(changed)} changed: {', '.join(changed)}",
            "firstTimestamp": ts, "lastTimestamp": ts, "count": 1, "source": {"component": COMPONENT},
            "reportingComponent": COMPONENT, "reportingInstance": os.uname().nodename,
        })
    return None if done else REQUEUE_S


# ------------------------------------------------------------------------------------------------ queue


class Queue:
    """Per object: never two reconciles at once; a trigger during a reconcile runs one more after it;
    a requeue is a timer that a trigger meanwhile makes redundant."""

    def __init__(self, api: Api) -> None:
        self.api = api
        self.busy: dict[tuple[str, str], bool] = {}
        self.dirty: set[tuple[str, str]] = set()
        self.timers: dict[tuple[str, str], asyncio.TimerHandle] = {}

    def trigger(self, namespace: str, name: str) -> None:
        key = (namespace, name)
        timer = self.timers.pop(key, None)
        if timer is not None:
            timer.cancel()
        if self.busy.get(key):
            self.dirty.add(key)
            return
        self.busy[key] = True
        asyncio.get_running_loop().create_task(self._run(key))

    async def _run(self, key: tuple[str, str]) -> None:
        requeue: float | None = None
        try:
            while True:
                self.dirty.discard(key)
                try:
                    requeue = await reconcile(self.api, *key)
                except Exception:
                    log.exception("reconcile of %s/%s failed; retrying in 1 s", *key)
                    requeue = 1.0
                if key not in self.dirty:
                    break
        finally:
            self.busy.pop(key, None)
        if requeue is not None:
            self.timers[key] = asyncio.get_running_loop().call_later(requeue, self.trigger, *key)


QUEUE: Queue | None = None


@kopf.on.startup()
async def startup(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    global QUEUE
    settings.posting.enabled = False  # the one Event per changed reconcile is posted by reconcile()
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="native.bench")
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix="native.bench")
    api = Api(Path(os.environ["NATIVE_KUBECONFIG"]))
    await api.open()
    memo["api"] = api
    QUEUE = Queue(api)


@kopf.on.cleanup()
async def cleanup(memo: kopf.Memo, **_: Any) -> None:
    await memo["api"].close()


@kopf.on.resume(GROUP, VERSION, PLURAL, id="reconcile")
@kopf.on.create(GROUP, VERSION, PLURAL, id="reconcile")
@kopf.on.update(GROUP, VERSION, PLURAL, field="spec", id="reconcile")
async def memcached_changed(namespace: str | None, name: str, **_: Any) -> None:
    assert QUEUE is not None and namespace is not None  # Memcached is namespaced
    QUEUE.trigger(namespace, name)


@kopf.on.event(
    "apps",
    "v1",
    "deployments",
    id="dependent",
    labels={"app.kubernetes.io/managed-by": "ansible-operator", "app.kubernetes.io/name": "memcached"},
)
async def deployment_event(type: str, body: kopf.Body, **_: Any) -> None:
    """A Deployment deleted by someone else: reconcile its owner (the runner's dependent watch)."""
    if type != "DELETED" or QUEUE is None:
        return
    for ref in body.metadata.get("ownerReferences") or []:
        if ref.get("kind") == "Memcached" and ref.get("apiVersion") == f"{GROUP}/{VERSION}":
            QUEUE.trigger(body.metadata.namespace or "", ref["name"])


@kopf.on.login()
def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
    return kopf.login_with_kubeconfig(**kwargs)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--kubeconfig", type=Path, required=True)
    p.add_argument("--namespace", action="append", required=True)
    p.add_argument("--liveness", default=None, help="e.g. http://127.0.0.1:8080/healthz")
    p.add_argument("--log-level", default="WARNING")
    args = p.parse_args(argv)
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    os.environ["KUBECONFIG"] = os.environ["NATIVE_KUBECONFIG"] = str(args.kubeconfig.resolve())
    kopf.run(standalone=True, namespaces=args.namespace, liveness_endpoint=args.liveness)
    return 0


if __name__ == "__main__":
    sys.exit(main())
