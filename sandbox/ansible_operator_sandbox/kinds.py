"""Per-kind server behaviour for built-ins: defaulting and the checks clients observably depend on.

Only what roles and controllers notice is emulated: Secret ``stringData`` folding into base64 ``data``,
Service ``clusterIP``/port defaults, Deployment/StatefulSet/Job defaults the simulated controllers read,
Namespace ``phase``, PVC ``phase: Pending``, and the CRD ``status`` (Established/NamesAccepted) that
kubectl and kopf wait for.
"""

from __future__ import annotations

import base64
import binascii
import copy
import ipaddress
import random
from typing import Any, TypeGuard

from ansible_operator_sandbox import builtin_schemas, objectmeta, schema
from ansible_operator_sandbox.builtin_schemas import go_json_kind
from ansible_operator_sandbox.errors import ApiError, bad_request, invalid
from ansible_operator_sandbox.resources import ResourceType
from ansible_operator_sandbox.timeutil import now_rfc3339


def _string_map(obj: dict[str, Any], path: str, field: str) -> None:
    """Reject non-string map values the way the real decoder does (400, not 422)."""
    value: Any = obj
    for part in path.split("."):
        if not isinstance(value, dict):
            return
        value = value.get(part)
    if value is None:
        return
    if not isinstance(value, dict):
        raise bad_request(f"json: cannot unmarshal {type(value).__name__} into Go struct field {field} "
                          f"of type map[string]string")
    for k, v in value.items():
        if not isinstance(v, str):
            raise bad_request(f"json: cannot unmarshal {go_json_kind(v)} into Go struct field {field} "
                              f"of type string (key {k!r})")


def _want(value: Any, type_: type | tuple[type, ...], field: str, go_type: str) -> None:
    if value is not None and (not isinstance(value, type_) or isinstance(value, bool) and type_ is not bool):
        raise bad_request(
            f"json: cannot unmarshal {go_json_kind(value)} into Go struct field {field} of type {go_type}"
        )


def check_metadata(obj: dict[str, Any]) -> None:
    """Type checks the typed decoder does for every object (TypeMeta, ObjectMeta): 400 on mismatch."""
    _want(obj.get("apiVersion"), str, "TypeMeta.apiVersion", "string")
    _want(obj.get("kind"), str, "TypeMeta.kind", "string")
    meta = obj.get("metadata")
    _want(meta, dict, "ObjectMeta.metadata", "v1.ObjectMeta")
    if not meta:
        return
    for f in ("name", "generateName", "namespace", "uid", "resourceVersion", "creationTimestamp",
              "deletionTimestamp"):
        _want(meta.get(f), str, f"ObjectMeta.metadata.{f}", "string")
    _want(meta.get("generation"), int, "ObjectMeta.metadata.generation", "int64")
    _string_map(obj, "metadata.labels", "ObjectMeta.metadata.labels")
    _string_map(obj, "metadata.annotations", "ObjectMeta.metadata.annotations")
    _want(meta.get("finalizers"), list, "ObjectMeta.metadata.finalizers", "[]string")
    for f in meta.get("finalizers") or []:
        _want(f, str, "ObjectMeta.metadata.finalizers", "string")
    _want(meta.get("ownerReferences"), list, "ObjectMeta.metadata.ownerReferences", "[]v1.OwnerReference")
    for ref in meta.get("ownerReferences") or []:
        _want(ref, dict, "ObjectMeta.metadata.ownerReferences", "v1.OwnerReference")
        for f in ("apiVersion", "kind", "name", "uid"):
            _want(ref.get(f), str, f"OwnerReference.metadata.ownerReferences.{f}", "string")
        for f in ("controller", "blockOwnerDeletion"):
            _want(ref.get(f), bool, f"OwnerReference.metadata.ownerReferences.{f}", "bool")


#: built-in kinds whose registry strategy sets ``metadata.generation`` (1 on create, +1 on spec changes);
#: every other built-in (ConfigMap, Secret, Namespace, Node, Service, Pod, RBAC, ...) has none
_GENERATION_KINDS = frozenset(
    {
        ("apps", "Deployment"),
        ("apps", "StatefulSet"),
        ("apps", "ReplicaSet"),
        ("apps", "DaemonSet"),
        ("", "ReplicationController"),
        ("", "PodTemplate"),
        ("", "Pod"),  # since 1.33 (PodObservedGenerationTracking)
        ("batch", "Job"),
        ("batch", "CronJob"),
        ("networking.k8s.io", "Ingress"),
        ("networking.k8s.io", "NetworkPolicy"),
        ("policy", "PodDisruptionBudget"),
        ("discovery.k8s.io", "EndpointSlice"),
        ("scheduling.k8s.io", "PriorityClass"),
        ("flowcontrol.apiserver.k8s.io", "FlowSchema"),
        ("flowcontrol.apiserver.k8s.io", "PriorityLevelConfiguration"),
        ("admissionregistration.k8s.io", "ValidatingWebhookConfiguration"),
        ("admissionregistration.k8s.io", "MutatingWebhookConfiguration"),
        ("apiextensions.k8s.io", "CustomResourceDefinition"),
    }
)
#: ObjectMeta fields with ``omitempty``: an empty list/map is not serialized, so it is not stored either
_OMIT_EMPTY_META = ("labels", "annotations", "finalizers", "ownerReferences", "managedFields")


def _omit_empty(node: dict[str, Any], value: Any, depth: int = 0) -> None:
    """Drop empty lists and maps from optional fields, in place: what the stored object (protobuf in etcd,
    then
    Go's ``omitempty``) serves back. Struct-typed fields (``securityContext: {}``) and required fields
    stay."""
    node = builtin_schemas.resolve(node)
    if depth > 64:
        return
    if isinstance(value, dict):
        props = node.get("properties")
        if isinstance(props, dict):
            required = set(node.get("required") or ())
            for key in list(value):
                sub = props.get(key)
                if not isinstance(sub, dict):
                    continue
                child = value[key]
                resolved = builtin_schemas.resolve(sub)
                is_map = resolved.get("type") == "object" and isinstance(
                    resolved.get("additionalProperties"), dict
                )
                if key not in required and (child == [] or (child == {} and is_map)):
                    del value[key]
                else:
                    _omit_empty(sub, child, depth + 1)
        elif isinstance(node.get("additionalProperties"), dict):
            for child in value.values():
                _omit_empty(node["additionalProperties"], child, depth + 1)
    elif isinstance(value, list) and isinstance(node.get("items"), dict):
        for child in value:
            _omit_empty(node["items"], child, depth + 1)


def has_generation(rtype: ResourceType) -> bool:
    """Whether objects of ``rtype`` carry ``metadata.generation`` (custom resources always do)."""
    return not rtype.builtin or (rtype.group, rtype.kind) in _GENERATION_KINDS


def normalize(rtype: ResourceType, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
    """Apply built-in defaults/conversions in place (called on every create and update)."""
    check_metadata(obj)
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        errors = objectmeta.validate_metadata(meta)
        if errors:
            name = meta.get("name", "")
            qualified = f"{rtype.kind}.{rtype.group}" if rtype.group else rtype.kind
            raise invalid(
                rtype, name, [e.cause() for e in errors], schema.invalid_message(qualified, name, errors)
            )
        for k in _OMIT_EMPTY_META:
            if k in meta and not meta[k]:
                del meta[k]
    if not rtype.builtin:
        return
    fn = _NORMALIZERS.get((rtype.group, rtype.kind))
    if fn is not None:
        fn(rtype, obj, old)
    definition = builtin_schemas.definition_name(rtype.group, rtype.version, rtype.kind)
    if definition is not None:
        _omit_empty(builtin_schemas.definitions()[definition], obj)
    spec = obj.get("spec")
    if isinstance(spec, dict):
        template = spec.get("template")
        if rtype.kind == "CronJob":
            template = ((spec.get("jobTemplate") or {}).get("spec") or {}).get("template")
        if isinstance(template, dict) and isinstance(template.get("spec"), dict) and rtype.kind != "Pod":
            _pod_spec_defaults(template["spec"])


def _secret(rtype: ResourceType, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
    _string_map(obj, "stringData", "Secret.stringData")
    data = obj.get("data") or {}
    if not isinstance(data, dict):
        raise bad_request("json: cannot unmarshal into Go struct field Secret.data of type map[string][]byte")
    for k, v in data.items():
        if not isinstance(v, str):
            raise bad_request(
                f"json: cannot unmarshal {go_json_kind(v)} into Go struct field Secret.data of type []uint8"
            )
        try:
            base64.b64decode(v, validate=True)
        except (binascii.Error, ValueError):
            raise bad_request(f"illegal base64 data in Secret.data[{k!r}]") from None
    string_data = obj.pop("stringData", None) or {}
    for k, v in string_data.items():
        data[k] = base64.b64encode(v.encode()).decode()
    if data or "data" in obj:
        obj["data"] = data
    obj.setdefault("type", "Opaque")


def _configmap(rtype: ResourceType, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
    _string_map(obj, "data", "ConfigMap.data")


def _service(rtype: ResourceType, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
    spec = obj.setdefault("spec", {})
    if not isinstance(spec, dict):
        return
    spec.setdefault("type", "ClusterIP")
    old_spec = (old or {}).get("spec") or {}
    if spec.get("type") != "ExternalName":
        ip = spec.get("clusterIP") or old_spec.get("clusterIP")
        if not ip:
            ip = str(ipaddress.IPv4Address("10.96.0.0") + random.randint(10, 65000))
        spec["clusterIP"] = ip
        spec.setdefault("clusterIPs", [ip])  # ["None"] for a headless Service, as the registry writes
    spec.setdefault("sessionAffinity", "None")
    if spec.get("type") != "ExternalName":
        spec.setdefault("internalTrafficPolicy", "Cluster")
        spec.setdefault("ipFamilies", ["IPv4"])
        spec.setdefault("ipFamilyPolicy", "SingleStack")
    for port in spec.get("ports") or []:
        if isinstance(port, dict):
            port.setdefault("protocol", "TCP")
            if "port" in port:
                port.setdefault("targetPort", port["port"])
    _load_balancer_status(obj, old)


def _load_balancer_status(obj: dict[str, Any], old: dict[str, Any] | None) -> None:
    """ServiceStatus and IngressStatus always serialise loadBalancer (a struct, not a pointer): {} on
    create, whatever a client sent there (kubectl sends "status": {})."""
    status = obj.get("status") if isinstance(obj.get("status"), dict) and obj.get("status") else None
    obj["status"] = status or (old or {}).get("status") or {}
    obj["status"].setdefault("loadBalancer", {})


_HPA_SCALE_UP = {"stabilizationWindowSeconds": 0, "selectPolicy": "Max", "policies": [
    {"type": "Pods", "value": 4, "periodSeconds": 15},
    {"type": "Percent", "value": 100, "periodSeconds": 15}]}
_HPA_SCALE_DOWN = {"selectPolicy": "Max", "policies": [
    {"type": "Percent", "value": 100, "periodSeconds": 15}]}


def _hpa(rtype: ResourceType, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
    """autoscaling/v2 (the stored version) defaults and the registry's replica-bound checks."""
    spec = obj.get("spec")
    if rtype.version != "v2" or not isinstance(spec, dict):
        return
    spec.setdefault("minReplicas", 1)
    if not spec.get("metrics"):
        spec["metrics"] = [{"type": "Resource", "resource": {"name": "cpu", "target": {
            "type": "Utilization", "averageUtilization": 80}}}]
    behavior = spec.get("behavior")
    if isinstance(behavior, dict):  # SetDefaults_HorizontalPodAutoscalerBehavior: only a behavior given
        for key, defaults in (("scaleUp", _HPA_SCALE_UP), ("scaleDown", _HPA_SCALE_DOWN)):
            rules = found if isinstance(found := behavior.get(key), dict) else {}
            behavior[key] = dict(copy.deepcopy(defaults), **{k: v for k, v in rules.items() if v is not None})
    errors: list[schema.FieldError] = []
    low, high = spec.get("minReplicas"), spec.get("maxReplicas", 0)
    if isinstance(low, int) and low < 1:
        errors.append(schema.invalid("spec.minReplicas", low, "must be greater than or equal to 1"))
    if isinstance(high, int) and high < 1:
        errors.append(schema.invalid("spec.maxReplicas", high, "must be greater than 0"))
    if isinstance(low, int) and isinstance(high, int) and high < low:
        errors.append(schema.invalid("spec.maxReplicas", high,
                                     "must be greater than or equal to `minReplicas`"))
    ref = found if isinstance(found := spec.get("scaleTargetRef"), dict) else {}
    for field in ("kind", "name"):
        if not ref.get(field):
            errors.append(schema.required(f"spec.scaleTargetRef.{field}", ""))
    if errors:
        name = (obj.get("metadata") or {}).get("name", "")
        raise invalid(rtype, name, [e.cause() for e in errors],
                      schema.invalid_message("HorizontalPodAutoscaler.autoscaling", name, errors))


def _namespace(rtype: ResourceType, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
    status = found if isinstance(found := obj.get("status"), dict) else {}
    if old is not None:
        status = dict(old.get("status") or {}, **{k: v for k, v in status.items() if k != "phase"})
        status["phase"] = (old.get("status") or {}).get("phase", "Active")
    else:
        status = {"phase": "Active"}
    obj["status"] = status
    labels = obj.setdefault("metadata", {}).setdefault("labels", {})
    if isinstance(labels, dict):
        labels["kubernetes.io/metadata.name"] = obj["metadata"].get("name", "")
    spec = obj.get("spec")
    if not isinstance(spec, dict) or not spec:
        obj["spec"] = (old or {}).get("spec") or {"finalizers": ["kubernetes"]}


def _image_pull_policy(image: str) -> str:
    """``Always`` for ``:latest`` or untagged images (no digest), ``IfNotPresent`` otherwise
    (SetDefaults_Container)."""
    if "@" in image:
        return "IfNotPresent"
    last = image.rsplit("/", 1)[-1]
    tag = last.partition(":")[2]
    return "Always" if tag in ("", "latest") else "IfNotPresent"


def _container_defaults(c: dict[str, Any]) -> None:
    c.setdefault("terminationMessagePath", "/dev/termination-log")
    c.setdefault("terminationMessagePolicy", "File")
    if isinstance(c.get("image"), str):
        c.setdefault("imagePullPolicy", _image_pull_policy(c["image"]))
    c.setdefault("resources", {})
    for port in c.get("ports") or []:
        if isinstance(port, dict):
            port.setdefault("protocol", "TCP")


def _requests_from_limits(c: dict[str, Any]) -> None:
    """Requests default to limits, per resource: SetDefaults_Pod only (a PodTemplate's containers keep
    theirs)."""
    resources = c.get("resources")
    if isinstance(resources, dict) and isinstance(resources.get("limits"), dict):
        requests = resources.setdefault("requests", {})
        if isinstance(requests, dict):
            for k, v in resources["limits"].items():
                requests.setdefault(k, v)


def _pod_spec_defaults(spec: dict[str, Any]) -> None:
    """SetDefaults_PodSpec and the container defaults: what the registry stores for every pod spec."""
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("securityContext", {})
    spec.setdefault("schedulerName", "default-scheduler")
    for field in ("containers", "initContainers"):
        for c in spec.get(field) or []:
            if isinstance(c, dict):
                _container_defaults(c)


def _qos_class(spec: dict[str, Any]) -> str:
    """v1qos.GetPodQOS over cpu and memory: Guaranteed, Burstable or BestEffort."""
    containers = [
        c for f in ("containers", "initContainers") for c in spec.get(f) or [] if isinstance(c, dict)
    ]
    requests: dict[str, list[Any]] = {}
    limits: dict[str, list[Any]] = {}
    guaranteed = bool(containers)
    for c in containers:
        res = found if isinstance(found := c.get("resources"), dict) else {}
        req = {k: v for k, v in (res.get("requests") or {}).items() if k in ("cpu", "memory")}
        lim = {k: v for k, v in (res.get("limits") or {}).items() if k in ("cpu", "memory")}
        for k, v in req.items():
            requests.setdefault(k, []).append(v)
        for k, v in lim.items():
            limits.setdefault(k, []).append(v)
        if set(lim) != {"cpu", "memory"} or any(str(req.get(k)) != str(lim[k]) for k in lim):
            guaranteed = False
    if not requests and not limits:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


SERVICE_ACCOUNT_MOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"


def _mount_service_account_token(spec: dict[str, Any]) -> None:
    """The ServiceAccount admission plugin: a ``kube-api-access-<random>`` projected volume (a bound token,
    the cluster CA, the namespace) mounted read-only into every container that has nothing at that path."""
    volumes = spec.setdefault("volumes", [])
    if not isinstance(volumes, list):
        return
    name = "kube-api-access-" + objectmeta.random_suffix()
    volumes.append({"name": name, "projected": {"defaultMode": 420, "sources": [
        {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
        {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1",
                                                                      "fieldPath": "metadata.namespace"}}]}},
    ]}})
    for field in ("initContainers", "containers"):
        for c in spec.get(field) or []:
            if not isinstance(c, dict):
                continue
            mounts = c.setdefault("volumeMounts", [])
            if isinstance(mounts, list) and not any(
                    isinstance(m, dict) and m.get("mountPath") == SERVICE_ACCOUNT_MOUNT for m in mounts):
                mounts.append({"name": name, "readOnly": True, "mountPath": SERVICE_ACCOUNT_MOUNT})


def _pod(rtype: ResourceType, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return
    _pod_spec_defaults(spec)
    for c in [c for f in ("containers", "initContainers") for c in spec.get(f) or []]:
        if isinstance(c, dict):
            _requests_from_limits(c)
    if old is None:
        # ServiceAccount admission and DefaultTolerationSeconds, then the registry's initial status
        spec.setdefault("serviceAccountName", spec.get("serviceAccount") or "default")
        spec.setdefault("serviceAccount", spec["serviceAccountName"])
        spec.setdefault("enableServiceLinks", True)
        spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
        spec.setdefault("priority", 0)
        tolerations = spec.setdefault("tolerations", [])
        if isinstance(tolerations, list):
            present = {t.get("key") for t in tolerations if isinstance(t, dict)}
            for key in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"):
                if key not in present:
                    tolerations.append({"key": key, "operator": "Exists", "effect": "NoExecute",
                                        "tolerationSeconds": 300})
        if spec.get("automountServiceAccountToken") is not False:
            _mount_service_account_token(spec)
        obj["status"] = {"phase": "Pending", "qosClass": _qos_class(spec)}


def _replication_controller(rtype: ResourceType, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return
    spec.setdefault("replicas", 1)
    spec.setdefault("minReadySeconds", 0)
    template_labels = ((spec.get("template") or {}).get("metadata") or {}).get("labels") or {}
    if not spec.get("selector") and template_labels:
        spec["selector"] = dict(template_labels)
    meta = obj.setdefault("metadata", {})
    if not meta.get("labels") and template_labels:
        meta["labels"] = dict(template_labels)
    if old is None:
        obj["status"] = {"replicas": 0}


def _priority_class(rtype: ResourceType, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
    obj.setdefault("preemptionPolicy", "PreemptLowerPriority")
    if not isinstance(obj.get("value"), int) or isinstance(obj.get("value"), bool):
        name = (obj.get("metadata") or {}).get("name", "")
        err = schema.required("value", "")
        raise invalid(
            rtype, name, [err.cause()], schema.invalid_message(f"{rtype.kind}.{rtype.group}", name, [err])
        )


def _raise_invalid(rtype: ResourceType, obj: dict[str, Any], errors: list[schema.FieldError]) -> None:
    if errors:
        name = (obj.get("metadata") or {}).get("name", "")
        raise invalid(rtype, name, [e.cause() for e in errors],
                      schema.invalid_message(f"{rtype.kind}.{rtype.group}", name, errors))


def _int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _flow_schema(rtype: ResourceType, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
    """SetDefaults_FlowSchemaSpec (matchingPrecedence 1000), and the checks of ValidateFlowSchema a client
    meets first, in its order and words (read off a 1.36 server)."""
    spec = obj.setdefault("spec", {})
    if not isinstance(spec, dict):
        return
    if not spec.get("matchingPrecedence"):
        spec["matchingPrecedence"] = 1000
    errors: list[schema.FieldError] = []
    precedence = spec["matchingPrecedence"]
    if _int(precedence) and precedence <= 0:
        errors.append(schema.invalid("spec.matchingPrecedence", precedence, "must be a positive value"))
    elif _int(precedence) and precedence > 10000:
        errors.append(schema.invalid("spec.matchingPrecedence", precedence, "must not be greater than 10000"))
    method = spec.get("distinguisherMethod")
    if isinstance(method, dict) and method.get("type") not in ("ByNamespace", "ByUser"):
        errors.append(schema.not_supported("spec.distinguisherMethod.type", {"Type": method.get("type", "")},
                                           ("ByNamespace", "ByUser")))
    if not (spec.get("priorityLevelConfiguration") or {}).get("name"):
        errors.append(schema.required("spec.priorityLevelConfiguration.name",
                                      "must reference a priority level"))
    for i, rule in enumerate(spec.get("rules") or []):
        if isinstance(rule, dict) and not rule.get("subjects"):
            errors.append(schema.required(f"spec.rules[{i}].subjects",
                                          "subjects must contain at least one value"))
    _raise_invalid(rtype, obj, errors)


def _priority_level(rtype: ResourceType, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
    """The v1 defaults of a PriorityLevelConfiguration (nominalConcurrencyShares 30 when limited, 0 when
    exempt; lendablePercent 0; queues 64, handSize 8, queueLengthLimit 50) and the checks of
    ValidatePriorityLevelConfiguration a client meets first, in its words (read off a 1.36 server). The fixed
    specs of the mandatory ``exempt`` and ``catch-all`` levels are not checked."""
    spec = obj.setdefault("spec", {})
    if not isinstance(spec, dict):
        return
    limited, exempt = spec.get("limited"), spec.get("exempt")
    if isinstance(limited, dict):
        limited.setdefault("nominalConcurrencyShares", 30)
        limited.setdefault("lendablePercent", 0)
        queuing = (limited.get("limitResponse") or {}).get("queuing")
        if isinstance(queuing, dict):
            for k, v in (("handSize", 8), ("queues", 64), ("queueLengthLimit", 50)):
                if not queuing.get(k):
                    queuing[k] = v
    if isinstance(exempt, dict):
        exempt.setdefault("nominalConcurrencyShares", 0)
        exempt.setdefault("lendablePercent", 0)
    errors: list[schema.FieldError] = []
    type_ = spec.get("type")
    name = (obj.get("metadata") or {}).get("name", "")
    if type_ and (type_ == "Exempt") != (name == "exempt"):
        errors.append(schema.invalid("spec.type", type_,
                                     "must be 'Exempt' if and only if `name` is 'exempt'"))
    if type_ == "Exempt":
        if limited is not None:
            errors.append(schema.forbidden("spec.limited", "must be nil if the type is not Limited"))
    elif type_ == "Limited":
        if exempt is not None:
            errors.append(schema.forbidden("spec.exempt", "must be nil if the type is Limited"))
        if limited is None:
            errors.append(schema.required("spec.limited", "must not be empty when type is Limited"))
    elif not type_:
        errors.append(schema.required("spec.type"))
    else:
        errors.append(schema.not_supported("spec.type", type_, ("Exempt", "Limited")))
    if type_ == "Limited" and isinstance(limited, dict):
        response = limited.get("limitResponse") or {}
        queuing = response.get("queuing") if isinstance(response, dict) else None
        path = "spec.limited.limitResponse"
        if not response.get("type"):
            errors.append(schema.required(f"{path}.type"))
        elif response["type"] not in ("Queue", "Reject"):
            errors.append(schema.not_supported(f"{path}.type", response["type"], ("Queue", "Reject")))
        elif response["type"] == "Queue" and queuing is None:
            errors.append(schema.required(f"{path}.queuing",
                                          "must not be empty if limited.limitResponse.type is Limited"))
        elif response["type"] == "Reject" and queuing is not None:
            errors.append(schema.forbidden(f"{path}.queuing",
                                           "must be nil if limited.limitResponse.type is not Limited"))
        if response.get("type") == "Queue" and isinstance(queuing, dict):
            queues, hand = queuing.get("queues"), queuing.get("handSize")
            if _int(queues) and queues <= 0:
                errors.append(schema.invalid(f"{path}.queuing.queues", queues, "must be positive"))
            if _int(queues) and _int(hand) and hand > queues:
                errors.append(schema.invalid(f"{path}.queuing.handSize", hand,
                                             f"should not be greater than queues ({queues})"))
    _raise_invalid(rtype, obj, errors)


def _ingress(rtype: ResourceType, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
    _load_balancer_status(obj, old)


def _ingress_class(rtype: ResourceType, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
    obj.setdefault("spec", {})


def _csi_driver(rtype: ResourceType, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
    """SetDefaults_CSIDriverSpec."""
    spec = obj.setdefault("spec", {})
    if not isinstance(spec, dict):
        return
    for k, v in (
        ("attachRequired", True),
        ("podInfoOnMount", False),
        ("requiresRepublish", False),
        ("storageCapacity", False),
        ("seLinuxMount", False),
        ("fsGroupPolicy", "ReadWriteOnceWithFSType"),
        ("volumeLifecycleModes", ["Persistent"]),
    ):
        spec.setdefault(k, copy.deepcopy(v))


def _pvc(rtype: ResourceType, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
    if old is None:
        obj["status"] = {"phase": "Pending"}
    spec = obj.setdefault("spec", {})
    if isinstance(spec, dict):
        spec.setdefault("volumeMode", "Filesystem")


def _workload(rtype: ResourceType, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        if old is None or spec is not None:
            raise invalid(rtype, (obj.get("metadata") or {}).get("name", ""),
                          [schema.required("spec", "").cause()],
                          schema.invalid_message(rtype.kind + (f".{rtype.group}" if rtype.group else ""),
                                                 (obj.get("metadata") or {}).get("name", ""),
                                                 [schema.required("spec", "")]))
        return
    if rtype.kind in ("Deployment", "StatefulSet", "ReplicaSet"):
        spec.setdefault("replicas", 1)
    if rtype.kind in ("Deployment", "StatefulSet"):  # ReplicaSetSpec has no revisionHistoryLimit
        spec.setdefault("revisionHistoryLimit", 10)
    if rtype.kind == "Deployment":
        spec.setdefault("progressDeadlineSeconds", 600)
        _default_strategy(spec, "strategy", {"maxUnavailable": "25%", "maxSurge": "25%"})
    if rtype.kind == "DaemonSet":
        # the registry's templateGeneration, served in v1 as this annotation: 1, +1 per template change
        annotations = obj.setdefault("metadata", {}).setdefault("annotations", {})
        if isinstance(annotations, dict):
            old_annotations = ((old or {}).get("metadata") or {}).get("annotations") or {}
            try:
                generation = int(old_annotations.get(_DS_TEMPLATE_GENERATION, "0"))
            except ValueError:
                generation = 0
            if old is None or spec.get("template") != ((old.get("spec") or {}).get("template")):
                generation += 1
            annotations[_DS_TEMPLATE_GENERATION] = str(max(generation, 1))
        spec.setdefault("revisionHistoryLimit", 10)
        _default_strategy(spec, "updateStrategy", {"maxUnavailable": 1, "maxSurge": 0})
    if rtype.kind == "StatefulSet":
        spec.setdefault(
            "persistentVolumeClaimRetentionPolicy", {"whenDeleted": "Retain", "whenScaled": "Retain"}
        )
        spec.setdefault("podManagementPolicy", "OrderedReady")
        _default_strategy(spec, "updateStrategy", {"partition": 0})
    if rtype.kind == "Job":
        spec.setdefault("parallelism", 1)
        spec.setdefault("completions", 1)
        spec.setdefault("backoffLimit", 6)
        spec.setdefault("completionMode", "NonIndexed")
        spec.setdefault("suspend", False)
        spec.setdefault("podReplacementPolicy", "TerminatingOrFailed")
        _job_selector(obj, spec)
    if rtype.kind == "CronJob":
        spec.setdefault("suspend", False)
        spec.setdefault("concurrencyPolicy", "Allow")
        spec.setdefault("successfulJobsHistoryLimit", 3)
        spec.setdefault("failedJobsHistoryLimit", 1)
    _validate_selector_matches_template(rtype, obj)


def _default_strategy(spec: dict[str, Any], key: str, rolling: dict[str, Any]) -> None:
    """apps/v1 SetDefaults_*: an empty strategy type is RollingUpdate, whose unset fields get their defaults
    (field by field: protobuf clients such as ``kubectl create deployment`` send an empty ``strategy:
    {}``)."""
    strategy = spec.setdefault(key, {})
    if not isinstance(strategy, dict):
        return
    strategy.setdefault("type", "RollingUpdate")
    if strategy["type"] == "RollingUpdate":
        update = strategy.setdefault("rollingUpdate", {})
        if isinstance(update, dict):
            for k, v in rolling.items():
                update.setdefault(k, v)


_DS_TEMPLATE_GENERATION = "deprecated.daemonset.template.generation"


def _job_selector(obj: dict[str, Any], spec: dict[str, Any]) -> None:
    """The Job registry's generated selector: controller-uid labels on the selector and the pod template."""
    if spec.get("manualSelector"):
        return
    meta = obj.get("metadata") or {}
    uid, name = meta.get("uid"), meta.get("name", "")
    if not uid:
        return
    template = spec.get("template")
    if not isinstance(template, dict):
        return
    tmeta = template.setdefault("metadata", {})
    labels = tmeta.setdefault("labels", {}) if isinstance(tmeta, dict) else None
    if isinstance(labels, dict):
        labels.update({"batch.kubernetes.io/controller-uid": uid, "batch.kubernetes.io/job-name": name,
                       "controller-uid": uid, "job-name": name})
    spec.setdefault("selector", {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}})


def _validate_selector_matches_template(rtype: ResourceType, obj: dict[str, Any]) -> None:
    """apps/v1 requires spec.selector matching the template labels (a classic role mistake: 422)."""
    if rtype.group != "apps":
        return
    spec = obj["spec"]
    name = (obj.get("metadata") or {}).get("name", "")
    qualified = f"{rtype.kind}.{rtype.group}"
    selector = spec.get("selector")
    if not isinstance(selector, dict) or not (
        selector.get("matchLabels") or selector.get("matchExpressions")
    ):
        err = schema.required("spec.selector", "")
        raise invalid(rtype, name, [err.cause()], schema.invalid_message(qualified, name, [err]))
    template = found if isinstance(found := spec.get("template"), dict) else {}
    tmeta = found if isinstance(found := template.get("metadata"), dict) else {}
    labels = tmeta.get("labels") or {}
    wanted = selector.get("matchLabels") or {}
    if (
        isinstance(wanted, dict)
        and isinstance(labels, dict)
        and any(labels.get(k) != v for k, v in wanted.items())
    ):
        err = schema.invalid("spec.template.metadata.labels", labels,
                             "`selector` does not match template `labels`")
        raise invalid(rtype, name, [err.cause()], schema.invalid_message(qualified, name, [err]))


def _immutable(errors: list[schema.FieldError], path: str, new: Any, old: Any,
               detail: str = "field is immutable") -> None:
    if new != old:
        errors.append(schema.invalid(path, new, detail))


_STS_MUTABLE = {"replicas", "ordinals", "template", "updateStrategy", "persistentVolumeClaimRetentionPolicy",
                "minReadySeconds", "revisionHistoryLimit"}


def check_update(rtype: ResourceType, new: dict[str, Any], old: dict[str, Any]) -> None:
    """Immutable fields of built-ins that roles commonly trip over on real clusters (422 Invalid)."""
    if not rtype.builtin:
        return
    errors: list[schema.FieldError] = []
    ns, os_ = new.get("spec") or {}, old.get("spec") or {}
    key = (rtype.group, rtype.kind)
    if key in (("", "ConfigMap"), ("", "Secret")) and old.get("immutable"):
        for f in ("data", "binaryData", "immutable"):
            _immutable(errors, f, new.get(f), old.get(f), "field is immutable when `immutable` is set")
    if key == ("", "Secret"):
        _immutable(errors, "type", new.get("type"), old.get("type"))
    if rtype.group == "apps" and rtype.kind in ("Deployment", "StatefulSet", "ReplicaSet", "DaemonSet"):
        _immutable(errors, "spec.selector", ns.get("selector"), os_.get("selector"))
    if key == ("apps", "StatefulSet"):
        changed = {k for k in set(ns) | set(os_) if ns.get(k) != os_.get(k)} - _STS_MUTABLE - {"selector"}
        if changed:
            errors.append(
                schema.forbidden(
                    "spec",
                    "updates to statefulset spec for fields other than 'replicas', "
                    "'ordinals', 'template', 'updateStrategy', "
                    "'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' "
                    "are forbidden",
                )
            )
    if key == ("batch", "Job"):
        for f in ("selector", "template", "completions", "completionMode"):
            if f in os_:
                _immutable(errors, f"spec.{f}", ns.get(f), os_.get(f))
    if key == ("", "Service") and os_.get("clusterIP") not in (None, ""):
        _immutable(errors, "spec.clusterIP", ns.get("clusterIP"), os_.get("clusterIP"))
    if key == ("", "PersistentVolumeClaim"):
        def comparable(spec: dict[str, Any]) -> dict[str, Any]:
            out = {k: v for k, v in spec.items() if k not in ("resources", "volumeAttributesClassName")}
            if not os_.get("volumeName"):  # the binder may set volumeName once
                out.pop("volumeName", None)
            return out
        if comparable(ns) != comparable(os_):
            errors.append(
                schema.forbidden(
                    "spec",
                    "spec is immutable after creation except resources.requests and "
                    "volumeAttributesClassName for bound claims",
                )
            )
    if errors:
        name = (new.get("metadata") or {}).get("name", "")
        qualified = f"{rtype.kind}.{rtype.group}" if rtype.group else rtype.kind
        raise invalid(
            rtype, name, [e.cause() for e in errors], schema.invalid_message(qualified, name, errors)
        )


def crd_status(crd: dict[str, Any]) -> dict[str, Any]:
    """The status kube-apiserver converges a valid CRD to: names accepted and established."""
    spec = crd.get("spec") or {}
    names = dict(spec.get("names") or {})
    names.setdefault("singular", str(names.get("kind", "")).lower())
    names.setdefault("listKind", f"{names.get('kind', '')}List")
    now = now_rfc3339()
    old_status = crd.get("status") or {}
    old_conditions = {c.get("type"): c for c in old_status.get("conditions") or [] if isinstance(c, dict)}

    def cond(type_: str, reason: str, message: str) -> dict[str, Any]:
        prev = old_conditions.get(type_)
        return {"type": type_, "status": "True", "reason": reason, "message": message,
                "lastTransitionTime": (prev or {}).get("lastTransitionTime", now)}

    stored = list(old_status.get("storedVersions") or [])
    for v in spec.get("versions") or []:
        if v.get("storage") and v.get("name") not in stored:
            stored.append(v.get("name"))
    return {
        "conditions": [
            cond("NamesAccepted", "NoConflicts", "no conflicts found"),
            cond("Established", "InitialNamesAccepted", "the initial names have been accepted"),
        ],
        "acceptedNames": names,
        "storedVersions": stored,
    }


#: status fields kube-apiserver always serializes (not omitempty) for fresh objects; typed clients require
#: them
_INITIAL_STATUS: dict[tuple[str, str], dict[str, Any]] = {
    ("apps", "StatefulSet"): {"replicas": 0, "availableReplicas": 0},
    ("apps", "ReplicaSet"): {"replicas": 0},
    ("apps", "DaemonSet"): {"currentNumberScheduled": 0, "desiredNumberScheduled": 0, "numberMisscheduled": 0,
                            "numberReady": 0},
    ("autoscaling", "HorizontalPodAutoscaler"): {"desiredReplicas": 0},
    ("policy", "PodDisruptionBudget"): {"currentHealthy": 0, "desiredHealthy": 0, "disruptionsAllowed": 0,
                                        "expectedPods": 0},
    ("storage.k8s.io", "VolumeAttachment"): {"attached": False},
}


def initial_status(rtype: ResourceType) -> dict[str, Any]:
    """The status a built-in object has right after create (before any controller wrote one)."""
    return dict(_INITIAL_STATUS.get((rtype.group, rtype.kind), {}))


_NORMALIZERS = {
    ("", "Secret"): _secret,
    ("", "ConfigMap"): _configmap,
    ("", "Service"): _service,
    ("autoscaling", "HorizontalPodAutoscaler"): _hpa,
    ("", "Namespace"): _namespace,
    ("", "PersistentVolumeClaim"): _pvc,
    ("", "Pod"): _pod,
    ("", "ReplicationController"): _replication_controller,
    ("scheduling.k8s.io", "PriorityClass"): _priority_class,
    ("flowcontrol.apiserver.k8s.io", "FlowSchema"): _flow_schema,
    ("flowcontrol.apiserver.k8s.io", "PriorityLevelConfiguration"): _priority_level,
    ("networking.k8s.io", "IngressClass"): _ingress_class,
    ("networking.k8s.io", "Ingress"): _ingress,
    ("storage.k8s.io", "CSIDriver"): _csi_driver,
    ("apps", "Deployment"): _workload,
    ("apps", "StatefulSet"): _workload,
    ("apps", "ReplicaSet"): _workload,
    ("apps", "DaemonSet"): _workload,
    ("batch", "Job"): _workload,
    ("batch", "CronJob"): _workload,
}

__all__ = ["normalize", "crd_status", "check_metadata", "ApiError"]
