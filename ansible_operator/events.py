"""Kubernetes Events about custom resources: the one module that builds, records and aggregates them.

Every Event the runner records has the same core/v1 shape (what ``kubectl describe`` and
``kubectl get events`` show), built by :func:`event`:

* ``involvedObject`` names the object by apiVersion, kind, name, namespace, uid and resourceVersion;
* ``source.component`` / ``reportingComponent`` are the operator's component name, ``reportingInstance``
  the host (the pod's name in a cluster), as client-go's recorder fills them;
* ``action`` says what the operator was doing (``Reconcile``, ``Finalize``);
* messages are cut at 1024 characters (the API server's limit on ``note`` for events.k8s.io);
* Events of cluster-scoped objects go to the ``default`` namespace.

:class:`EventRecorder` posts them best effort and, like client-go's ``EventCorrelator``, turns a repeat of
the last Event of an object (same uid, type, reason and message) into a ``count``/``lastTimestamp``
update of the existing Event instead of a new object.
"""

from __future__ import annotations

import logging
import socket
from datetime import datetime
from typing import Any, Protocol
from urllib.parse import quote

from ansible_operator.kube import ApiError, Forbidden, NotFound
from ansible_operator.kubetypes import Event, KubeObject, ObjectMeta, ObjectReference
from ansible_operator.queue import ObjectKey
from ansible_operator.results import RunResult
from ansible_operator.status import format_time

log = logging.getLogger(__name__)

__all__ = ["MAX_MESSAGE", "event", "for_result", "refused", "EventRecorder"]

MAX_MESSAGE = 1024
DEFAULT_COMPONENT = "ansible-operator"


def _message(text: str) -> str:
    return text if len(text) <= MAX_MESSAGE else text[: MAX_MESSAGE - 1] + "…"


def event(obj: KubeObject, *, type: str, reason: str, message: str, action: str, now: datetime,
          component: str = DEFAULT_COMPONENT, instance: str | None = None) -> Event:
    """A core/v1 Event body about ``obj`` (``type`` is ``Normal`` or ``Warning``)."""
    meta: ObjectMeta = obj.get("metadata") or {}
    name = str(meta.get("name", ""))
    involved: ObjectReference = {"apiVersion": obj.get("apiVersion", ""), "kind": obj.get("kind", ""),
                                 "name": name}
    if meta.get("namespace"):
        involved["namespace"] = meta["namespace"]
    if meta.get("uid"):
        involved["uid"] = meta["uid"]
    if meta.get("resourceVersion"):
        involved["resourceVersion"] = meta["resourceVersion"]
    ts = format_time(now)
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{name}.", "namespace": meta.get("namespace") or "default"},
        "involvedObject": involved,
        "reason": reason,
        "message": _message(message),
        "type": type,
        "action": action,
        "firstTimestamp": ts,
        "lastTimestamp": ts,
        "count": 1,
        "source": {"component": component},
        "reportingComponent": component,
        "reportingInstance": instance or socket.gethostname(),
    }


def for_result(obj: KubeObject, result: RunResult, *, now: datetime, phase: str = "reconcile",
               component: str = DEFAULT_COMPONENT, instance: str | None = None) -> Event | None:
    """The Event for one run, or None when there is nothing worth telling.

    * failed / timed out / error → ``Warning`` ``ReconcileFailed`` with the failure message;
    * succeeded with changes → ``Normal`` ``ReconcileChanged`` "N changed: task, task...";
    * succeeded without changes, or canceled (superseded or shutting down) → None.
    """
    if result.status == "canceled":
        return None
    if result.succeeded:
        if result.changed <= 0 and not result.changed_tasks:
            return None
        etype, reason = "Normal", "ReconcileChanged"
        count = result.changed or len(result.changed_tasks)
        names = ", ".join(result.changed_tasks)
        message = f"{count} changed: {names}" if names else f"{count} changed"
    else:
        etype, reason = "Warning", "ReconcileFailed"
        message = result.message
    action = "Finalize" if phase == "finalize" else "Reconcile"
    return event(obj, type=etype, reason=reason, message=message, action=action, now=now, component=component,
                 instance=instance)


def refused(obj: KubeObject, message: str, *, now: datetime, component: str = DEFAULT_COMPONENT,
            instance: str | None = None) -> Event:
    """The Event for input refused before any run (``extravars.RefusedVariable``)."""
    return event(obj, type="Warning", reason="Refused", message=message, action="Reconcile", now=now,
                 component=component, instance=instance)


# The API server's 403 for a create in a namespace being deleted (cause NamespaceTerminating; apiserver's
# NamespaceLifecycle admission), worded so since Kubernetes 1.10.
NAMESPACE_TERMINATING = "because it is being terminated"


class EventApi(Protocol):
    async def create_event(self, namespace: str, event: Event) -> Event: ...

    async def request(self, method: str, path: str, *, body: Any = None, content_type: str | None = None,
                      query: list[tuple[str, str]] | None = None) -> Any: ...


class EventRecorder:
    """Posts Events (best effort: a failure is logged, never raised) and aggregates repeats."""

    def __init__(self, api: EventApi) -> None:
        self.api = api
        self._last: dict[ObjectKey, tuple[tuple[str | None, ...], str, int]] = {}
        """Per object: the last Event recorded (its identity, name and count)."""
        self._told_forbidden = False
        """Whether the missing permission was reported (once: the SDK records no Events, so its scaffold's
        RBAC grants none, and a warning on every reconcile would bury the log)."""

    async def record(self, obj: KubeObject, body: Event | None) -> None:
        if body is None:
            return
        meta: ObjectMeta = obj.get("metadata") or {}
        namespace = meta.get("namespace") or "default"
        key = ObjectKey(namespace=meta.get("namespace") or None, name=str(meta.get("name", "")))
        identity = (meta.get("uid"), body.get("type"), body.get("reason"), body.get("message"))
        try:
            previous = self._last.get(key)
            if previous is not None and previous[0] == identity:
                _, name, count = previous
                try:
                    path = f"/api/v1/namespaces/{quote(namespace, safe='')}/events/{quote(name, safe='')}"
                    await self.api.request(
                        "PATCH", path,
                        body={"count": count + 1, "lastTimestamp": body.get("lastTimestamp")},
                        content_type="application/merge-patch+json")
                    self._last[key] = (identity, name, count + 1)
                    return
                except NotFound:  # expired (events have a TTL): record a new one
                    pass
            created = await self.api.create_event(namespace, body)
            self._last[key] = (identity, created["metadata"]["name"], int(created.get("count") or 1))
        except Forbidden as exc:  # still tried each time: the permission may be granted later
            if NAMESPACE_TERMINATING in exc.message:
                # Not RBAC: the namespace is being deleted (the finalizer run of a CR in it, say), so nothing
                # can be created in it any more. Must not use up the one warning about a missing permission.
                log.debug("event %s not recorded: %s", body.get("reason"), exc)
                return
            if self._told_forbidden:
                log.debug("could not record event %s: %s", body.get("reason"), exc)
            else:
                self._told_forbidden = True
                log.warning("could not record event %s: %s. The operator's role lacks the rule {apiGroups:"
                            " [\"\"], resources: [events], verbs: [create, patch]} (Operator SDK scaffolds"
                            " do not grant it; `ansible-operator generate rbac` includes it); further Events"
                            " refused are logged at debug level", body.get("reason"), exc)
        except ApiError as exc:  # events are best effort, as in every Kubernetes controller
            log.warning("could not record event %s: %s", body.get("reason"), exc)

    def forget(self, key: ObjectKey) -> None:
        """The object is gone: drop its aggregation state."""
        self._last.pop(key, None)
