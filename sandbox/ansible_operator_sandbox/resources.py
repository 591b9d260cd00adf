"""The sandbox's table of API resources: built-in kinds plus the ones CustomResourceDefinitions add.

Everything that depends on "what kind is this path" (discovery documents, routing, which patch types are
allowed, whether writes to the main endpoint ignore ``status``) reads a :class:`ResourceType` from the
:class:`Registry`, so built-ins and CRD-defined kinds are handled by the same code.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Iterable

ALL_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")
SUBRESOURCE_VERBS = ("get", "patch", "update")


@dataclass(frozen=True)
class ResourceType:
    """One served resource (a group/version/plural), with what discovery and the handlers need."""

    group: str
    version: str
    kind: str
    plural: str
    namespaced: bool
    singular: str = ""
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    verbs: tuple[str, ...] = ALL_VERBS
    #: subresources served besides the object itself, e.g. ("status",) or ("status", "scale")
    subresources: tuple[str, ...] = ()
    #: True for compiled-in kinds: strategic merge patch is allowed (CRs get 415, as in Kubernetes)
    builtin: bool = True
    #: CRD only: openAPIV3Schema of this version (None: accept anything)
    schema: dict[str, Any] | None = field(default=None, compare=False, hash=False)
    #: CRD only: additionalPrinterColumns of this version
    printer_columns: tuple[dict[str, Any], ...] = field(default=(), compare=False, hash=False)
    #: CRD only: scale subresource paths
    scale: dict[str, Any] | None = field(default=None, compare=False, hash=False)

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def group_resource(self) -> str:
        """Storage key shared by every version of a resource ("apps/deployments", "/configmaps")."""
        return f"{self.group}/{self.plural}"

    @property
    def has_status(self) -> bool:
        return "status" in self.subresources

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"

    @property
    def qualified(self) -> str:
        """Name used in error messages: ``deployments.apps``, ``configmaps``."""
        return f"{self.plural}.{self.group}" if self.group else self.plural


def _b(group: str, version: str, kind: str, plural: str, namespaced: bool = True, short: Iterable[str] = (),
       sub: Iterable[str] = ("status",), categories: Iterable[str] = (), verbs: Iterable[str] = ALL_VERBS
       ) -> ResourceType:
    return ResourceType(group=group, version=version, kind=kind, plural=plural, namespaced=namespaced,
                        singular=kind.lower(), short_names=tuple(short), subresources=tuple(sub),
                        categories=tuple(categories), verbs=tuple(verbs), builtin=True)


_ALL = ("all",)

BUILTINS: tuple[ResourceType, ...] = (
    _b(
        "",
        "v1",
        "Namespace",
        "namespaces",
        False,
        ("ns",),
        ("status", "finalize"),
        verbs=("create", "delete", "get", "list", "patch", "update", "watch"),
    ),
    _b("", "v1", "ConfigMap", "configmaps", True, ("cm",), ()),
    _b("", "v1", "Secret", "secrets", True, (), ()),
    _b("", "v1", "Service", "services", True, ("svc",), ("status",), _ALL),
    _b("", "v1", "ServiceAccount", "serviceaccounts", True, ("sa",), ("token",)),
    _b("", "v1", "PersistentVolumeClaim", "persistentvolumeclaims", True, ("pvc",), ("status",)),
    _b("", "v1", "PersistentVolume", "persistentvolumes", False, ("pv",), ("status",)),
    _b("", "v1", "Pod", "pods", True, ("po",), ("status", "eviction", "ephemeralcontainers"), _ALL),
    _b("", "v1", "Event", "events", True, ("ev",), ()),
    _b("", "v1", "Endpoints", "endpoints", True, ("ep",), ()),
    _b("", "v1", "Node", "nodes", False, ("no",), ("status",)),
    _b("", "v1", "ResourceQuota", "resourcequotas", True, ("quota",), ("status",)),
    _b("", "v1", "LimitRange", "limitranges", True, ("limits",), ()),
    _b("", "v1", "ReplicationController", "replicationcontrollers", True, ("rc",), ("status", "scale"), _ALL),
    _b("", "v1", "PodTemplate", "podtemplates", True, (), ()),
    _b("apps", "v1", "Deployment", "deployments", True, ("deploy",), ("status", "scale"), _ALL),
    _b("apps", "v1", "StatefulSet", "statefulsets", True, ("sts",), ("status", "scale"), _ALL),
    _b("apps", "v1", "ReplicaSet", "replicasets", True, ("rs",), ("status", "scale"), _ALL),
    _b("apps", "v1", "DaemonSet", "daemonsets", True, ("ds",), ("status",), _ALL),
    _b("apps", "v1", "ControllerRevision", "controllerrevisions", True, (), ()),
    _b("batch", "v1", "Job", "jobs", True, (), ("status",), _ALL),
    _b("batch", "v1", "CronJob", "cronjobs", True, ("cj",), ("status",), _ALL),
    _b("events.k8s.io", "v1", "Event", "events", True, ("ev",), ()),
    _b("coordination.k8s.io", "v1", "Lease", "leases", True, (), ()),
    _b("rbac.authorization.k8s.io", "v1", "Role", "roles", True, (), ()),
    _b("rbac.authorization.k8s.io", "v1", "RoleBinding", "rolebindings", True, (), ()),
    _b("rbac.authorization.k8s.io", "v1", "ClusterRole", "clusterroles", False, (), ()),
    _b("rbac.authorization.k8s.io", "v1", "ClusterRoleBinding", "clusterrolebindings", False, (), ()),
    _b("networking.k8s.io", "v1", "Ingress", "ingresses", True, ("ing",), ("status",)),
    _b("networking.k8s.io", "v1", "NetworkPolicy", "networkpolicies", True, ("netpol",), ()),
    _b("policy", "v1", "PodDisruptionBudget", "poddisruptionbudgets", True, ("pdb",), ("status",)),
    # stored as v2, also served as v1 (kubectl autoscale creates v1): sandbox/conversion.py
    _b("autoscaling", "v2", "HorizontalPodAutoscaler", "horizontalpodautoscalers", True, ("hpa",),
       ("status",), _ALL),
    _b("autoscaling", "v1", "HorizontalPodAutoscaler", "horizontalpodautoscalers", True, ("hpa",),
       ("status",), _ALL),
    _b("storage.k8s.io", "v1", "StorageClass", "storageclasses", False, ("sc",), ()),
    _b("storage.k8s.io", "v1", "VolumeAttachment", "volumeattachments", False, (), ("status",)),
    _b("storage.k8s.io", "v1", "CSIDriver", "csidrivers", False, (), ()),
    _b("storage.k8s.io", "v1", "CSINode", "csinodes", False, (), ()),
    _b("networking.k8s.io", "v1", "IngressClass", "ingressclasses", False, (), ()),
    _b("discovery.k8s.io", "v1", "EndpointSlice", "endpointslices", True, (), ()),
    _b("scheduling.k8s.io", "v1", "PriorityClass", "priorityclasses", False, ("pc",), ()),
    # API Priority and Fairness configuration: stored and printed, the Dangling condition kept
    # (sandbox/simulate.py); the sandbox does not queue or throttle requests by it
    _b("flowcontrol.apiserver.k8s.io", "v1", "FlowSchema", "flowschemas", False, (), ("status",)),
    _b("flowcontrol.apiserver.k8s.io", "v1", "PriorityLevelConfiguration", "prioritylevelconfigurations",
       False, (), ("status",)),
    _b("node.k8s.io", "v1", "RuntimeClass", "runtimeclasses", False, (), ()),
    _b(
        "certificates.k8s.io",
        "v1",
        "CertificateSigningRequest",
        "certificatesigningrequests",
        False,
        ("csr",),
        ("status", "approval"),
    ),
    # stored, never called: the sandbox has no webhooks and serves no aggregated APIs
    _b(
        "admissionregistration.k8s.io",
        "v1",
        "ValidatingWebhookConfiguration",
        "validatingwebhookconfigurations",
        False,
        (),
        (),
    ),
    _b(
        "admissionregistration.k8s.io",
        "v1",
        "MutatingWebhookConfiguration",
        "mutatingwebhookconfigurations",
        False,
        (),
        (),
    ),
    _b("apiregistration.k8s.io", "v1", "APIService", "apiservices", False, (), ("status",)),
    # access reviews are answered, never stored: the sandbox does not enforce authorization
    _b(
        "authorization.k8s.io",
        "v1",
        "SelfSubjectAccessReview",
        "selfsubjectaccessreviews",
        False,
        (),
        (),
        verbs=("create",),
    ),
    _b(
        "authorization.k8s.io",
        "v1",
        "SubjectAccessReview",
        "subjectaccessreviews",
        False,
        (),
        (),
        verbs=("create",),
    ),
    _b(
        "authorization.k8s.io",
        "v1",
        "LocalSubjectAccessReview",
        "localsubjectaccessreviews",
        True,
        (),
        (),
        verbs=("create",),
    ),
    _b(
        "authorization.k8s.io",
        "v1",
        "SelfSubjectRulesReview",
        "selfsubjectrulesreviews",
        False,
        (),
        (),
        verbs=("create",),
    ),
    # answered by sandbox/auth.py (tokens the sandbox signed)
    _b("authentication.k8s.io", "v1", "TokenReview", "tokenreviews", False, (), (), verbs=("create",)),
    _b(
        "authentication.k8s.io",
        "v1",
        "SelfSubjectReview",
        "selfsubjectreviews",
        False,
        (),
        (),
        verbs=("create",),
    ),
    _b(
        "apiextensions.k8s.io",
        "v1",
        "CustomResourceDefinition",
        "customresourcedefinitions",
        False,
        ("crd", "crds"),
        ("status",),
    ),
)

CRD_GROUP_RESOURCE = "apiextensions.k8s.io/customresourcedefinitions"
NAMESPACE_GROUP_RESOURCE = "/namespaces"
REVIEW_GROUP = "authorization.k8s.io"
AUTHENTICATION_GROUP = "authentication.k8s.io"

_VERSION_RE = re.compile(r"^v(\d+)(?:(alpha|beta)(\d+))?$")


def version_priority(version: str) -> tuple[int, int, int, str]:
    """Kubernetes version ordering: GA > beta > alpha, higher numbers first; non-kube names last."""
    m = _VERSION_RE.match(version)
    if not m:
        return (0, 0, 0, version)
    major = int(m.group(1))
    stage = {None: 3, "beta": 2, "alpha": 1}[m.group(2)]
    minor = int(m.group(3) or 0)
    # negate for descending sort, keep the name to make ties stable
    return (-stage, -major, -minor, version)


def types_from_crd(crd: dict[str, Any]) -> list[ResourceType]:
    """The ResourceTypes one CRD serves (one per served version)."""
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    group = spec.get("group", "")
    kind = names.get("kind", "")
    plural = names.get("plural", "")
    out = []
    for v in spec.get("versions") or []:
        if not v.get("served", True):
            continue
        subs = v.get("subresources") or {}
        sub: list[str] = []
        if "status" in subs:
            sub.append("status")
        if "scale" in subs:
            sub.append("scale")
        out.append(ResourceType(
            group=group, version=v.get("name", ""), kind=kind, plural=plural,
            namespaced=spec.get("scope", "Namespaced") == "Namespaced",
            singular=names.get("singular") or kind.lower(),
            short_names=tuple(names.get("shortNames") or ()),
            categories=tuple(names.get("categories") or ()),
            subresources=tuple(sub), builtin=False,
            schema=(v.get("schema") or {}).get("openAPIV3Schema"),
            printer_columns=tuple(v.get("additionalPrinterColumns") or ()),
            scale=subs.get("scale"),
        ))
    return out


class Registry:
    """All resource types currently served; CRD types are (re)registered as CRDs change."""

    def __init__(self) -> None:
        self._types: dict[tuple[str, str, str], ResourceType] = {}
        self._crd_types: dict[str, list[ResourceType]] = {}  # CRD name -> its types
        for t in BUILTINS:
            self._add(t)

    def _add(self, t: ResourceType) -> None:
        self._types[(t.group, t.version, t.plural)] = t

    # ---- CRDs ------------------------------------------------------------------------------------
    def set_crd(self, crd: dict[str, Any]) -> None:
        name = (crd.get("metadata") or {}).get("name", "")
        self.remove_crd(name)
        types = types_from_crd(crd)
        self._crd_types[name] = types
        for t in types:
            self._add(t)

    def remove_crd(self, name: str) -> None:
        for t in self._crd_types.pop(name, []):
            self._types.pop((t.group, t.version, t.plural), None)

    # ---- lookups ---------------------------------------------------------------------------------
    def get(self, group: str, version: str, plural: str) -> ResourceType | None:
        return self._types.get((group, version, plural))

    def by_kind(self, api_version: str, kind: str) -> ResourceType | None:
        group, _, version = api_version.rpartition("/")
        for t in self._types.values():
            if t.group == group and t.version == version and t.kind == kind:
                return t
        return None

    def by_group_resource(self, group_resource: str) -> list[ResourceType]:
        return [t for t in self._types.values() if t.group_resource == group_resource]

    def storage_type(self, group_resource: str) -> ResourceType | None:
        """Any served version of a group/resource (the preferred one), for code that only needs kind/scope."""
        types = sorted(self.by_group_resource(group_resource), key=lambda t: version_priority(t.version))
        return types[0] if types else None

    def all(self) -> list[ResourceType]:
        return list(self._types.values())

    def groups(self) -> dict[str, list[str]]:
        """group -> served versions, preferred first (core group is "")."""
        out: dict[str, set[str]] = {}
        for t in self._types.values():
            out.setdefault(t.group, set()).add(t.version)
        return {g: sorted(vs, key=version_priority) for g, vs in out.items()}

    def in_group_version(self, group: str, version: str) -> list[ResourceType]:
        return sorted((t for t in self._types.values() if t.group == group and t.version == version),
                      key=lambda t: t.plural)

    def find_by_name(self, name: str) -> list[ResourceType]:
        """Resolve kubectl-style names (plural, singular, kind, short name) — used by the CLI-facing
        helpers."""
        n = name.lower()
        return [t for t in self._types.values()
                if n in (t.plural, t.singular, t.kind.lower()) or n in t.short_names]
