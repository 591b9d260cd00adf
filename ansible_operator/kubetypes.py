"""The shapes of the Kubernetes objects the runner reads and writes: TypedDicts of the JSON the API serves.

Every object comes from the API server as JSON (``apijson.loads``, kopf's watch): the types describe the
fields the runner uses, they check nothing at run time. Where such JSON enters (``Kube.get``'s answer, a
watch event, a Lease read) an annotation or a ``cast`` states the shape; code reading it still checks what a
role or a user could have written (a condition that is no mapping, ``spec`` missing). ``total=False``: the
API server omits empty fields.

Objects of any kind keep the fields the runner does not know (a CR's ``spec``, a dependent's ``data``): the
types name what the runner reads, they never drop anything. Like kopf's ``kopf._cogs.structs.bodies``.

Imports nothing of the runner: every module may import it (the lowest floor, with ``errors.py``).
"""

from __future__ import annotations

from typing import Any, TypedDict

__all__ = [
    "AnsibleResult",
    "Condition",
    "Event",
    "EventSource",
    "KubeObject",
    "Lease",
    "LeaseSpec",
    "ManagedFieldsEntry",
    "ObjectMeta",
    "ObjectReference",
    "OwnerReference",
    "StatusBody",
]


class OwnerReference(TypedDict, total=False):
    """``metadata.ownerReferences[]`` (meta/v1 OwnerReference)."""

    apiVersion: str
    kind: str
    name: str
    uid: str
    controller: bool
    blockOwnerDeletion: bool


class ManagedFieldsEntry(TypedDict, total=False):
    """``metadata.managedFields[]`` (meta/v1 ManagedFieldsEntry): dropped from fingerprints, never read."""

    manager: str
    operation: str
    apiVersion: str
    time: str
    fieldsType: str
    fieldsV1: dict[str, Any]
    subresource: str


class ObjectMeta(TypedDict, total=False):
    """``metadata`` (meta/v1 ObjectMeta). ``name`` is missing only from a create's ``generateName`` body."""

    name: str
    generateName: str
    namespace: str
    uid: str
    resourceVersion: str
    generation: int
    creationTimestamp: str
    deletionTimestamp: str
    deletionGracePeriodSeconds: int
    labels: dict[str, str]
    annotations: dict[str, str]
    finalizers: list[str]
    ownerReferences: list[OwnerReference]
    managedFields: list[ManagedFieldsEntry]


class KubeObject(TypedDict, total=False):
    """Any object: a watched CR, a dependent, an answer of ``Kube.get``/``Kube.merge_patch``. ``spec`` and
    ``status`` are the kind's own (a CR's are what its CRD says; status conditions: ``StatusBody``)."""

    apiVersion: str
    kind: str
    metadata: ObjectMeta
    spec: dict[str, Any]
    status: dict[str, Any]


class AnsibleResult(TypedDict):
    """``ansibleResult`` of a final condition: the run's counts (Operator SDK's shape)."""

    ok: int
    changed: int
    skipped: int
    failures: int
    completion: str


class Condition(TypedDict, total=False):
    """A ``status.conditions[]`` entry (meta/v1 Condition, plus the SDK's ``ansibleResult``)."""

    type: str
    status: str
    reason: str
    message: str
    lastTransitionTime: str
    observedGeneration: int
    ansibleResult: AnsibleResult


class StatusBody(TypedDict, total=False):
    """The ``status`` ``status.py`` writes: its conditions and ``observedGeneration``, next to whatever other
    fields were there (a role's own, through ``k8s_status``), which it keeps."""

    conditions: list[Condition]
    observedGeneration: int


class ObjectReference(TypedDict, total=False):
    """An Event's ``involvedObject`` (core/v1 ObjectReference)."""

    apiVersion: str
    kind: str
    name: str
    namespace: str
    uid: str
    resourceVersion: str


class EventSource(TypedDict, total=False):
    component: str


class Event(TypedDict, total=False):
    """A core/v1 Event body as ``events.py`` writes it (and the API server answers a create)."""

    apiVersion: str
    kind: str
    metadata: ObjectMeta
    involvedObject: ObjectReference
    reason: str
    message: str
    type: str
    action: str
    firstTimestamp: str
    lastTimestamp: str
    count: int
    source: EventSource
    reportingComponent: str
    reportingInstance: str


class LeaseSpec(TypedDict, total=False):
    """coordination.k8s.io/v1 LeaseSpec: times are ``MicroTime`` strings."""

    holderIdentity: str
    leaseDurationSeconds: int
    acquireTime: str
    renewTime: str
    leaseTransitions: int


class Lease(TypedDict, total=False):
    """A coordination.k8s.io/v1 Lease (``leader.py``)."""

    apiVersion: str
    kind: str
    metadata: ObjectMeta
    spec: LeaseSpec
