"""Server-side printing: ``meta.k8s.io/v1`` Table responses, which ``kubectl get`` asks for.

kubectl sends ``Accept: application/json;as=Table;v=v1;g=meta.k8s.io`` and prints whatever columns the
server returns. Custom resources get Name plus their CRD's ``additionalPrinterColumns`` (Name/Age when
none are declared), evaluated with the small JSONPath subset CRDs use; built-ins get the familiar columns.
"""

from __future__ import annotations

import functools
import json
import re
from typing import Any, Callable

from ansible_operator_sandbox import conversion
from ansible_operator_sandbox.resources import ResourceType
from ansible_operator_sandbox.timeutil import age, duration_between, human_duration

Column = dict[str, Any]


def wants_table(accept: str) -> bool:
    return "as=Table" in accept and "g=meta.k8s.io" in accept


# ---- a small JSONPath (the subset additionalPrinterColumns use) ---------------------------------------
_TOKEN = re.compile(r"\.([A-Za-z0-9_\-$]+)|\[(\d+|\*)\]|\[\?\(@\.([A-Za-z0-9_.\-]+)\s*==\s*(['\"])(.*?)\4\)\]"
                    r"|\['([^']+)'\]|\.\*")


def jsonpath(obj: Any, path: str) -> list[Any]:
    """Evaluate ``path`` (``.a.b``, ``.a[0]``, ``.a[*].b``, ``.a[?(@.t=="x")].b``, ``{...}`` wrappers)."""
    path = path.strip()
    if path.startswith("{") and path.endswith("}"):
        path = path[1:-1]
    if path.startswith("$"):
        path = path[1:]
    current = [obj]
    pos = 0
    while pos < len(path):
        m = _TOKEN.match(path, pos)
        if not m:
            return []
        pos = m.end()
        nxt: list[Any] = []
        for value in current:
            if m.group(1) is not None or m.group(6) is not None:
                key = m.group(1) if m.group(1) is not None else m.group(6)
                if isinstance(value, dict) and key in value:
                    nxt.append(value[key])
            elif m.group(2) is not None:
                if isinstance(value, list):
                    if m.group(2) == "*":
                        nxt.extend(value)
                    elif int(m.group(2)) < len(value):
                        nxt.append(value[int(m.group(2))])
            elif m.group(3) is not None:
                if isinstance(value, list):
                    for item in value:
                        found = jsonpath(item, "." + m.group(3))
                        if found and str(found[0]) == m.group(5):
                            nxt.append(item)
            else:  # .*
                if isinstance(value, dict):
                    nxt.extend(value.values())
                elif isinstance(value, list):
                    nxt.extend(value)
        current = nxt
    return current


def _printer_cell(obj: dict[str, Any], *, path: str, type_: str) -> Any:
    """One additionalPrinterColumns cell: the ``jsonPath`` values of ``obj`` shown as ``type_``."""
    return _cell(jsonpath(obj, path), type_)


def _cell(values: list[Any], type_: str) -> Any:
    if not values:
        return None
    if type_ == "date":
        return age(str(values[0]))
    if len(values) > 1:
        return ",".join(_text(v) for v in values)
    v = values[0]
    if type_ in ("integer", "number", "boolean") and isinstance(v, (int, float, bool)):
        return v
    return _text(v)


def _text(v: Any) -> str:
    if isinstance(v, str):
        return v
    if isinstance(v, bool):
        return "true" if v else "false"
    return json.dumps(v, separators=(",", ":")) if isinstance(v, (dict, list)) else str(v)


# ---- columns -----------------------------------------------------------------------------------------
def _col(name: str, type_: str = "string", fmt: str = "", desc: str = "", priority: int = 0) -> Column:
    return {"name": name, "type": type_, "format": fmt, "description": desc, "priority": priority}


NAME = _col("Name", fmt="name", desc="Name must be unique within a namespace.")
AGE = _col("Age", desc="CreationTimestamp is a timestamp representing the server time when this object was "
                       "created.")


def _meta_age(o: dict[str, Any]) -> str:
    return age((o.get("metadata") or {}).get("creationTimestamp"))


def _g(o: Any, *path: str, default: Any = None) -> Any:
    for p in path:
        if not isinstance(o, dict):
            return default
        o = o.get(p)
    return default if o is None else o


def _ready(o: dict[str, Any]) -> str:
    return f"{_g(o, 'status', 'readyReplicas', default=0)}/{_g(o, 'spec', 'replicas', default=0)}"


def _ports(o: dict[str, Any]) -> str:
    """``port/protocol``, ``port:nodePort/protocol`` with a node port (the printer's makePortString)."""
    ports = _g(o, "spec", "ports", default=[]) or []
    return ",".join(
        f"{p.get('port')}{':' + str(p['nodePort']) if p.get('nodePort') else ''}/{p.get('protocol', 'TCP')}"
        for p in ports if isinstance(p, dict)
    ) or "<none>"


def _external_ip(o: dict[str, Any]) -> str:
    """The printer's getServiceExternalIP: the load balancer's addresses (``<pending>`` until it has one),
    ``externalIPs``, the ExternalName, or ``<none>``."""
    spec = _g(o, "spec", default={})
    external = list(spec.get("externalIPs") or [])
    if spec.get("type") == "LoadBalancer":
        ingress = _g(o, "status", "loadBalancer", "ingress", default=[]) or []
        found = [i.get("ip") or i.get("hostname") for i in ingress if isinstance(i, dict)]
        found = [a for a in found if a] + external
        return ",".join(found) if found else "<pending>"
    if spec.get("type") == "ExternalName":
        return str(spec.get("externalName") or "<none>")
    return ",".join(external) or "<none>"


_HPA_SOURCES = {"Resource": "resource", "ContainerResource": "containerResource", "Pods": "pods",
                "Object": "object", "External": "external"}


def _hpa_target(spec: dict[str, Any], status: dict[str, Any]) -> str:
    source = _HPA_SOURCES.get(_g(spec, "type", default=""))
    if source is None:
        return "<unknown type>"
    target = _g(spec, source, "target", default={})
    current = _g(status, source, "current", default={})
    if source in ("resource", "containerResource"):
        name = _g(spec, source, "name", default="")
        if "averageValue" in target:
            return f"{name}: {current.get('averageValue', '<unknown>')}/{target['averageValue']}"
        have = f"{current['averageUtilization']}%" if "averageUtilization" in current else "<unknown>"
        want = f"{target['averageUtilization']}%" if "averageUtilization" in target else "<auto>"
        return f"{name}: {have}/{want}"
    if source == "pods" or "averageValue" in target:
        text = f"{current.get('averageValue', '<unknown>')}/{target.get('averageValue', '')}"
        return text if source == "pods" else text + " (avg)"
    return f"{current.get('value', '<unknown>')}/{target.get('value', '')}"


def _hpa_targets(o: dict[str, Any]) -> str:
    """The printer's formatHPAMetrics: ``cpu: <unknown>/80%``, ``cpu: 30%/80%``, ``memory: 1Gi/500Mi``, two
    at most and then ``+ N more...``."""
    hpa = conversion.hpa_v1_to_v2(o) if o.get("apiVersion") == "autoscaling/v1" else o
    specs = [m for m in _g(hpa, "spec", "metrics", default=[]) or [] if isinstance(m, dict)]
    statuses = _g(hpa, "status", "currentMetrics", default=[]) or []
    if not specs:
        return "<none>"
    out = [_hpa_target(m, statuses[i] if i < len(statuses) and isinstance(statuses[i], dict) else {})
           for i, m in enumerate(specs)]
    if len(out) > 2:
        return f"{', '.join(out[:2])} + {len(out) - 2} more..."
    return ", ".join(out)


def _job_status(o: dict[str, Any]) -> str:
    for c in _g(o, "status", "conditions", default=[]) or []:
        if c.get("status") == "True" and c.get("type") in ("Complete", "Failed"):
            return c["type"]
    return "Running"


Cell = Callable[[dict[str, Any]], Any]


def _containers(*path: str) -> tuple[Cell, Cell]:
    """The Containers and Images cells of a pod template at ``path`` (layoutContainerCells)."""
    def of(o: dict[str, Any]) -> list[dict[str, Any]]:
        return [c for c in _g(o, *path, "containers", default=[]) or [] if isinstance(c, dict)]
    return (lambda o: ",".join(c.get("name", "") for c in of(o)),
            lambda o: ",".join(c.get("image", "") for c in of(o)))


def _format_labels(labels: Any) -> str:
    """labels.FormatLabels: ``k=v`` sorted by key, ``<none>`` when empty."""
    if not isinstance(labels, dict) or not labels:
        return "<none>"
    return ",".join(f"{k}={labels[k]}" for k in sorted(labels))


def _format_selector(selector: Any) -> str:
    """metav1.FormatLabelSelector: requirements sorted by key, ``<none>`` for no selector."""
    if not isinstance(selector, dict):
        return "<none>"
    reqs = [(k, f"{k}={v}") for k, v in (selector.get("matchLabels") or {}).items()]
    for e in selector.get("matchExpressions") or []:
        if not isinstance(e, dict):
            continue
        key, op = str(e.get("key", "")), e.get("operator", "")
        values = ",".join(sorted(str(v) for v in e.get("values") or []))
        text = {"In": f"{key} in ({values})", "NotIn": f"{key} notin ({values})",
                "Exists": key, "DoesNotExist": f"!{key}"}.get(op, key)
        reqs.append((key, text))
    return ",".join(t for _, t in sorted(reqs)) or "<none>"


def _wide(name: str) -> Column:
    return _col(name, priority=1)


def _workload(path: tuple[str, ...], selector: Cell | None = None) -> list[tuple[Column, Cell]]:
    containers, images = _containers(*path)
    cols = [(_wide("Containers"), containers), (_wide("Images"), images)]
    if selector is not None:
        cols.append((_wide("Selector"), selector))
    return cols


def _subjects(kind: str) -> Cell:
    def cell(o: dict[str, Any]) -> str:
        out = []
        for sub in o.get("subjects") or []:
            if isinstance(sub, dict) and sub.get("kind") == kind:
                ns = sub.get("namespace", "")
                out.append(f"{ns}/{sub.get('name', '')}" if kind == "ServiceAccount" else sub.get("name", ""))
        return ", ".join(out)
    return cell


def _binding_columns() -> list[tuple[Column, Cell]]:
    return [(_col("Role"), lambda o: f"{_g(o, 'roleRef', 'kind', default='')}/"
                                     f"{_g(o, 'roleRef', 'name', default='')}"),
            (AGE, _meta_age),
            (_wide("Users"), _subjects("User")), (_wide("Groups"), _subjects("Group")),
            (_wide("ServiceAccounts"), _subjects("ServiceAccount"))]


CREATED_AT = _col("Created At", "date")


def _created_at(o: dict[str, Any]) -> str:
    return (o.get("metadata") or {}).get("creationTimestamp", "")


def _quota(limits: bool) -> Cell:
    """The printer's ResourceQuota Request / Limit cells: ``resource: used/hard`` sorted, from status."""
    def cell(o: dict[str, Any]) -> str:
        hard = _g(o, "status", "hard", default={}) or {}
        used = _g(o, "status", "used", default={}) or {}
        parts = [f"{k}: {used.get(k, '0')}/{hard[k]}" for k in sorted(hard)
                 if k.startswith("limits.") == limits]
        return ", ".join(parts)
    return cell


def _pdb_value(field: str) -> Cell:
    return lambda o: str(_g(o, "spec", field, default="N/A"))


def _pod_ready(o: dict[str, Any]) -> str:
    statuses = _g(o, "status", "containerStatuses", default=[]) or []
    ready = sum(1 for c in statuses if c.get("ready"))
    return "%d/%d" % (ready, len(_g(o, "spec", "containers", default=[])))


def _readiness_gates(o: dict[str, Any]) -> str:
    gates = _g(o, "spec", "readinessGates", default=[]) or []
    if not gates:
        return "<none>"
    conditions = {c.get("type"): c.get("status") for c in _g(o, "status", "conditions", default=[]) or []}
    return f"{sum(1 for g in gates if conditions.get(g.get('conditionType')) == 'True')}/{len(gates)}"


def _ingress_hosts(o: dict[str, Any]) -> str:
    rules = _g(o, "spec", "rules", default=[]) or []
    hosts = [r["host"] for r in rules if isinstance(r, dict) and r.get("host")]
    return ",".join(hosts) or "*"


def _ingress_address(o: dict[str, Any]) -> str:
    ingress = _g(o, "status", "loadBalancer", "ingress", default=[]) or []
    return ",".join(i.get("ip") or i.get("hostname") or "" for i in ingress if isinstance(i, dict))


def _ingress_ports(o: dict[str, Any]) -> str:
    return "80, 443" if _g(o, "spec", "tls") else "80"


def _job_duration(o: dict[str, Any]) -> str:
    start, end = _g(o, "status", "startTime"), _g(o, "status", "completionTime")
    if not start:
        return ""
    return age(start) if not end else duration_between(start, end)


def _node_status(o: dict[str, Any]) -> str:
    ready = next((c.get("status") for c in _g(o, "status", "conditions", default=[]) or []
                  if c.get("type") == "Ready"), None)
    text = {"True": "Ready", "False": "NotReady"}.get(str(ready), "Unknown")
    return text + (",SchedulingDisabled" if _g(o, "spec", "unschedulable") else "")


def _node_roles(o: dict[str, Any]) -> str:
    labels = (o.get("metadata") or {}).get("labels") or {}
    roles = {k.split("/", 1)[1] for k in labels if k.startswith("node-role.kubernetes.io/") and "/" in k}
    if labels.get("kubernetes.io/role"):
        roles.add(labels["kubernetes.io/role"])
    return ",".join(sorted(r for r in roles if r)) or "<none>"


def _node_address(kind: str) -> Cell:
    return lambda o: next((a.get("address") for a in _g(o, "status", "addresses", default=[]) or []
                           if a.get("type") == kind), "<none>")


def _node_info(field: str) -> Cell:
    return lambda o: _g(o, "status", "nodeInfo", field, default="") or "<unknown>"


def _slice_ports(o: dict[str, Any]) -> str:
    ports = o.get("ports")
    if ports is None:
        return "<unset>"
    return ",".join(str(p.get("port", "<unset>")) for p in ports if isinstance(p, dict)) or "<unset>"


def _slice_endpoints(o: dict[str, Any]) -> str:
    addresses = [a for e in o.get("endpoints") or [] for a in (e.get("addresses") or [])]
    if not addresses:
        return "<unset>"
    shown = ",".join(addresses[:3])
    return shown + (f" + {len(addresses) - 3} more..." if len(addresses) > 3 else "")


def _csr_condition(o: dict[str, Any]) -> str:
    types = [c.get("type") for c in _g(o, "status", "conditions", default=[]) or []]
    words = [t for t in ("Approved", "Denied", "Failed") if t in types]
    if _g(o, "status", "certificate"):
        words.append("Issued")
    return ",".join(words) or "Pending"


def _csr_duration(o: dict[str, Any]) -> str:
    seconds = _g(o, "spec", "expirationSeconds")
    return human_duration(float(seconds)) if seconds else "<none>"


def _apiservice_available(o: dict[str, Any]) -> str:
    for c in _g(o, "status", "conditions", default=[]) or []:
        if c.get("type") == "Available":
            status = c.get("status", "")
            return status if status == "True" else f"{status} ({c.get('reason')})"
    return "Unknown"


def _dangling(o: dict[str, Any]) -> str:
    """printFlowSchema's MissingPL: the status of the Dangling condition, ``?`` before it is written."""
    for c in _g(o, "status", "conditions", default=[]) or []:
        if isinstance(c, dict) and c.get("type") == "Dangling":
            return str(c.get("status", ""))
    return "?"


def _queuing(field: str) -> Cell:
    """printPriorityLevelConfiguration's queuing cells: ``<none>`` unless limited with queuing."""
    return lambda o: _g(o, "spec", "limited", "limitResponse", "queuing", field, default="<none>")


_BUILTIN: dict[tuple[str, str], list[tuple[Column, Cell]]] = {
    # k8s.io/kubernetes/pkg/printers/internalversion/printers.go, column for column (Age where it stands;
    # priority 1 = -o wide)
    ("", "Namespace"): [(_col("Status"), lambda o: _g(o, "status", "phase", default=""))],
    ("", "ConfigMap"): [
        (_col("Data", "integer"),
         lambda o: len(_g(o, "data", default={})) + len(_g(o, "binaryData", default={}))),
    ],
    ("", "Secret"): [
        (_col("Type"), lambda o: o.get("type", "")),
        (_col("Data", "integer"), lambda o: len(_g(o, "data", default={}))),
    ],
    ("", "Service"): [
        (_col("Type"), lambda o: _g(o, "spec", "type", default="")),
        (_col("Cluster-IP"), lambda o: _g(o, "spec", "clusterIP", default="") or "<none>"),
        (_col("External-IP"), _external_ip),
        (_col("Port(s)"), _ports),
        (AGE, _meta_age),
        (_wide("Selector"), lambda o: _format_labels(_g(o, "spec", "selector"))),
    ],
    ("", "ServiceAccount"): [],
    ("", "PersistentVolumeClaim"): [
        (_col("Status"), lambda o: _g(o, "status", "phase", default="")),
        (_col("Volume"), lambda o: _g(o, "spec", "volumeName", default="")),
        (_col("Capacity"), lambda o: _g(o, "status", "capacity", "storage", default="")),
        (_col("Access Modes"), lambda o: ",".join(_g(o, "spec", "accessModes", default=[]))),
        (_col("StorageClass"), lambda o: _g(o, "spec", "storageClassName", default="")),
        (_col("VolumeAttributesClass"),
         lambda o: _g(o, "spec", "volumeAttributesClassName", default="<unset>")),
        (AGE, _meta_age),
        (_wide("VolumeMode"), lambda o: _g(o, "spec", "volumeMode", default="<unset>")),
    ],
    ("", "Pod"): [
        (_col("Ready"), _pod_ready),
        (_col("Status"), lambda o: _g(o, "status", "phase", default="Pending")),
        (_col("Restarts", "integer"), lambda o: 0),
        (AGE, _meta_age),
        (_wide("IP"), lambda o: _g(o, "status", "podIP", default="<none>")),
        (_wide("Node"), lambda o: _g(o, "spec", "nodeName", default="<none>")),
        (_wide("Nominated Node"), lambda o: _g(o, "status", "nominatedNodeName", default="<none>")),
        (_wide("Readiness Gates"), _readiness_gates),
    ],
    ("", "ResourceQuota"): [(_col("Request"), _quota(False)), (_col("Limit"), _quota(True))],
    ("", "Endpoints"): [
        (_col("Endpoints"), lambda o: ",".join(
            f"{a.get('ip')}:{p.get('port')}" for s in o.get("subsets") or []
            for a in s.get("addresses") or [] for p in s.get("ports") or [{}]) or "<none>"),
    ],
    ("apps", "Deployment"): [
        (_col("Ready"), _ready),
        (_col("Up-to-date", "integer"), lambda o: _g(o, "status", "updatedReplicas", default=0)),
        (_col("Available", "integer"), lambda o: _g(o, "status", "availableReplicas", default=0)),
        (AGE, _meta_age),
        *_workload(("spec", "template", "spec"), lambda o: _format_selector(_g(o, "spec", "selector"))),
    ],
    ("apps", "StatefulSet"): [(_col("Ready"), _ready), (AGE, _meta_age),
                              *_workload(("spec", "template", "spec"))],
    ("apps", "ReplicaSet"): [
        (_col("Desired", "integer"), lambda o: _g(o, "spec", "replicas", default=0)),
        (_col("Current", "integer"), lambda o: _g(o, "status", "replicas", default=0)),
        (_col("Ready", "integer"), lambda o: _g(o, "status", "readyReplicas", default=0)),
        (AGE, _meta_age),
        *_workload(("spec", "template", "spec"), lambda o: _format_selector(_g(o, "spec", "selector"))),
    ],
    ("apps", "DaemonSet"): [
        (_col("Desired", "integer"), lambda o: _g(o, "status", "desiredNumberScheduled", default=0)),
        (_col("Current", "integer"), lambda o: _g(o, "status", "currentNumberScheduled", default=0)),
        (_col("Ready", "integer"), lambda o: _g(o, "status", "numberReady", default=0)),
        (_col("Up-to-date", "integer"), lambda o: _g(o, "status", "updatedNumberScheduled", default=0)),
        (_col("Available", "integer"), lambda o: _g(o, "status", "numberAvailable", default=0)),
        (_col("Node Selector"), lambda o: _format_labels(_g(o, "spec", "template", "spec", "nodeSelector"))),
        (AGE, _meta_age),
        *_workload(("spec", "template", "spec"), lambda o: _format_selector(_g(o, "spec", "selector"))),
    ],
    ("apps", "ControllerRevision"): [
        (_col("Controller"), lambda o: next(
            (f"{r.get('kind', '').lower()}.{r.get('apiVersion', '').split('/')[0]}/{r.get('name')}"
             for r in _g(o, "metadata", "ownerReferences", default=[]) or [] if r.get("controller")),
            "<none>")),
        (_col("Revision", "integer"), lambda o: o.get("revision", 0)),
    ],
    ("batch", "Job"): [
        (_col("Status"), _job_status),
        (_col("Completions"),
         lambda o: f"{_g(o, 'status', 'succeeded', default=0)}/{_g(o, 'spec', 'completions', default=1)}"),
        (_col("Duration"), _job_duration),
        (AGE, _meta_age),
        *_workload(("spec", "template", "spec"), lambda o: _format_selector(_g(o, "spec", "selector"))),
    ],
    ("batch", "CronJob"): [
        (_col("Schedule"), lambda o: _g(o, "spec", "schedule", default="")),
        (_col("Timezone"), lambda o: _g(o, "spec", "timeZone", default="<none>")),
        (_col("Suspend"), lambda o: str(_g(o, "spec", "suspend", default=False))),
        (_col("Active", "integer"), lambda o: len(_g(o, "status", "active", default=[]))),
        (_col("Last Schedule"), lambda o: (
            age(_g(o, "status", "lastScheduleTime")) if _g(o, "status", "lastScheduleTime") else "<none>")),
        (AGE, _meta_age),
        *_workload(("spec", "jobTemplate", "spec", "template", "spec"),
                   lambda o: _format_selector(_g(o, "spec", "jobTemplate", "spec", "selector"))),
    ],
    ("autoscaling", "HorizontalPodAutoscaler"): [
        (_col("Reference"), lambda o: f"{_g(o, 'spec', 'scaleTargetRef', 'kind', default='')}/"
                                      f"{_g(o, 'spec', 'scaleTargetRef', 'name', default='')}"),
        (_col("Targets"), _hpa_targets),
        (_col("MinPods", "integer"), lambda o: _g(o, "spec", "minReplicas", default="<unset>")),
        (_col("MaxPods", "integer"), lambda o: _g(o, "spec", "maxReplicas", default=0)),
        (_col("Replicas", "integer"), lambda o: _g(o, "status", "currentReplicas", default=0)),
    ],
    ("coordination.k8s.io", "Lease"): [
        (_col("Holder"), lambda o: _g(o, "spec", "holderIdentity", default=""))
    ],
    ("apiextensions.k8s.io", "CustomResourceDefinition"): [(CREATED_AT, _created_at)],
    ("rbac.authorization.k8s.io", "Role"): [(CREATED_AT, _created_at)],
    ("rbac.authorization.k8s.io", "ClusterRole"): [(CREATED_AT, _created_at)],
    ("rbac.authorization.k8s.io", "RoleBinding"): _binding_columns(),
    ("rbac.authorization.k8s.io", "ClusterRoleBinding"): _binding_columns(),
    ("scheduling.k8s.io", "PriorityClass"): [
        (_col("Value", "integer"), lambda o: o.get("value", 0)),
        (_col("Global-Default", "boolean"), lambda o: bool(o.get("globalDefault", False))),
        (AGE, _meta_age),
        (_col("PreemptionPolicy"), lambda o: o.get("preemptionPolicy", "PreemptLowerPriority")),
    ],
    ("flowcontrol.apiserver.k8s.io", "FlowSchema"): [
        (_col("PriorityLevel", desc="`name` is the name of the priority level configuration being "
                                    "referenced"),
         lambda o: _g(o, "spec", "priorityLevelConfiguration", "name", default="")),
        (_col("MatchingPrecedence", desc="`matchingPrecedence` is used to choose among the FlowSchemas "
                                         "that match a given request."),
         lambda o: _g(o, "spec", "matchingPrecedence", default=0)),
        (_col("DistinguisherMethod", desc="`distinguisherMethod` defines how to compute the flow "
                                          "distinguisher for requests that match this schema."),
         lambda o: _g(o, "spec", "distinguisherMethod", "type", default="<none>")),
        (AGE, _meta_age),
        (_col("MissingPL", desc="references a broken or non-existent PriorityLevelConfiguration"), _dangling),
    ],
    ("flowcontrol.apiserver.k8s.io", "PriorityLevelConfiguration"): [
        (_col("Type", desc="`type` indicates whether this priority level is subject to limitation on "
                           "request execution."),
         lambda o: _g(o, "spec", "type", default="")),
        (_col("NominalConcurrencyShares", desc="`nominalConcurrencyShares` (NCS) contributes to the "
                                               "computation of the NominalConcurrencyLimit (NominalCL) "
                                               "of this level."),
         lambda o: _g(o, "spec", "limited", "nominalConcurrencyShares", default="<none>")),
        (_col("Queues", desc="`queues` is the number of queues for this priority level."),
         _queuing("queues")),
        (_col("HandSize", desc="`handSize` is a small positive number that configures the shuffle "
                               "sharding of requests into queues."),
         _queuing("handSize")),
        (_col("QueueLengthLimit", desc="`queueLengthLimit` is the maximum number of requests allowed to "
                                       "be waiting in a given queue of this priority level at a time."),
         _queuing("queueLengthLimit")),
        (AGE, _meta_age),
    ],
    ("policy", "PodDisruptionBudget"): [
        (_col("Min Available"), _pdb_value("minAvailable")),
        (_col("Max Unavailable"), _pdb_value("maxUnavailable")),
        (_col("Allowed Disruptions", "integer"), lambda o: _g(o, "status", "disruptionsAllowed", default=0)),
    ],
    ("networking.k8s.io", "Ingress"): [
        (_col("Class"), lambda o: _g(o, "spec", "ingressClassName", default="<none>")),
        (_col("Hosts"), _ingress_hosts),
        (_col("Address"), _ingress_address),
        (_col("Ports"), _ingress_ports),
    ],
    ("networking.k8s.io", "IngressClass"): [
        (_col("Controller"), lambda o: _g(o, "spec", "controller", default="")),
        (_col("Parameters"), lambda o: "<none>" if not _g(o, "spec", "parameters") else
         f"{_g(o, 'spec', 'parameters', 'kind', default='')}/"
         f"{_g(o, 'spec', 'parameters', 'name', default='')}"),
    ],
    ("", "Node"): [
        (_col("Status"), _node_status),
        (_col("Roles"), _node_roles),
        (AGE, _meta_age),
        (_col("Version"), lambda o: _g(o, "status", "nodeInfo", "kubeletVersion", default="")),
        (_wide("Internal-IP"), _node_address("InternalIP")),
        (_wide("External-IP"), _node_address("ExternalIP")),
        (_wide("OS-Image"), _node_info("osImage")),
        (_wide("Kernel-Version"), _node_info("kernelVersion")),
        (_wide("Container-Runtime"), _node_info("containerRuntimeVersion")),
    ],
    ("discovery.k8s.io", "EndpointSlice"): [
        (_col("AddressType"), lambda o: o.get("addressType", "")),
        (_col("Ports"), _slice_ports),
        (_col("Endpoints"), _slice_endpoints),
    ],
    ("certificates.k8s.io", "CertificateSigningRequest"): [
        (AGE, _meta_age),
        (_col("SignerName"), lambda o: _g(o, "spec", "signerName", default="")),
        (_col("Requestor"), lambda o: _g(o, "spec", "username", default="")),
        (_col("RequestedDuration"), _csr_duration),
        (_col("Condition"), _csr_condition),
    ],
    ("apiregistration.k8s.io", "APIService"): [
        (_col("Service"), lambda o: "Local" if not _g(o, "spec", "service") else
         f"{_g(o, 'spec', 'service', 'namespace', default='')}/"
         f"{_g(o, 'spec', 'service', 'name', default='')}"),
        (_col("Available"), _apiservice_available),
    ],
    ("storage.k8s.io", "StorageClass"): [
        (_col("Provisioner"), lambda o: o.get("provisioner", "")),
        (_col("ReclaimPolicy"), lambda o: o.get("reclaimPolicy", "Delete")),
        (_col("VolumeBindingMode"), lambda o: o.get("volumeBindingMode", "Immediate")),
        (_col("AllowVolumeExpansion", "boolean"), lambda o: bool(o.get("allowVolumeExpansion", False))),
    ],
}


def _event_time(first: bool) -> Cell:
    """Last Seen / First Seen: the legacy timestamp, else the (micro) eventTime, as an age."""
    def cell(o: dict[str, Any]) -> str:
        stamp = o.get("firstTimestamp" if first else "lastTimestamp") or o.get("eventTime")
        return age(stamp) if stamp else "<unknown>"
    return cell


def _event_source(o: dict[str, Any]) -> str:
    """formatEventSource: ``component, host``, or the reporting controller of a new-style Event."""
    source = o.get("source") or {}
    if source.get("component"):
        return ", ".join(v for v in (source.get("component"), source.get("host")) if v)
    return o.get("reportingComponent") or ""


# printEvent's columns: Name is not first (it is a wide column at the end), and there is no Age.
_EVENT_COLUMNS: list[tuple[Column, Cell]] = [
    (_col("Last Seen"), _event_time(False)),
    (_col("Type"), lambda o: o.get("type", "")),
    (_col("Reason"), lambda o: o.get("reason", "")),
    (_col("Object"), lambda o: f"{str(_g(o, 'involvedObject', 'kind', default='')).lower()}/"
                               f"{_g(o, 'involvedObject', 'name', default='')}"),
    (_wide("Subobject"), lambda o: _g(o, "involvedObject", "fieldPath", default="")),
    (_wide("Source"), _event_source),
    (_col("Message"), lambda o: str(o.get("message", "")).strip()),
    (_wide("First Seen"), _event_time(True)),
    (_wide("Count"), lambda o: o.get("count", 0)),
    (_col("Name", fmt="name", priority=1), lambda o: (o.get("metadata") or {}).get("name", "")),
]


def columns_for(rtype: ResourceType) -> list[tuple[Column, Callable[[dict[str, Any]], Any]]]:
    """(column definition, cell function) pairs, Name first."""
    if rtype.builtin and (rtype.group, rtype.kind) == ("", "Event"):
        return list(_EVENT_COLUMNS)
    out: list[tuple[Column, Callable[[dict[str, Any]], Any]]] = [
        (NAME, lambda o: (o.get("metadata") or {}).get("name", ""))]
    if not rtype.builtin and rtype.printer_columns:
        for pc in rtype.printer_columns:
            type_ = pc.get("type", "string")
            col = _col(pc.get("name", ""), type_, pc.get("format", ""), pc.get("description", ""),
                       int(pc.get("priority", 0)))
            path = pc.get("jsonPath", "")
            out.append((col, functools.partial(_printer_cell, path=path, type_=type_)))
        return out
    columns = _BUILTIN.get((rtype.group, rtype.kind), [])
    out.extend(columns)
    # Age last unless the printer places it (or, like Roles and CRDs, shows Created At instead)
    if not any(col is AGE or col is CREATED_AT for col, _ in columns):
        out.append((AGE, _meta_age))
    return out


def _safe_cell(fn: Callable[[dict[str, Any]], Any], obj: dict[str, Any]) -> Any:
    """A cell never fails a whole listing: fields of unexpected shape print as ``<invalid>``."""
    try:
        return fn(obj)
    except (TypeError, AttributeError, ValueError, KeyError):
        return "<invalid>"


def _row_object(obj: dict[str, Any], include: str) -> dict[str, Any] | None:
    if include == "None":
        return None
    if include == "Object":
        return obj
    return {
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": obj.get("metadata") or {},
    }


def _precedence_order(o: dict[str, Any]) -> tuple[Any, str]:
    """FlowSchemaSequence: lowest matchingPrecedence first, then by name."""
    precedence = _g(o, "spec", "matchingPrecedence", default=0)
    return (precedence if isinstance(precedence, int) else 0, str(_g(o, "metadata", "name", default="")))


def to_table(
    rtype: ResourceType,
    objects: list[dict[str, Any]],
    resource_version: str,
    include: str = "Metadata",
    with_columns: bool = True,
) -> dict[str, Any]:
    cols = columns_for(rtype)
    if rtype.builtin and (rtype.group, rtype.kind) == ("flowcontrol.apiserver.k8s.io", "FlowSchema"):
        objects = sorted(objects, key=_precedence_order)  # printFlowSchemaList sorts its rows
    rows = []
    for obj in objects:
        row: dict[str, Any] = {"cells": [_safe_cell(fn, obj) for _, fn in cols]}
        ro = _row_object(obj, include)
        if ro is not None:
            row["object"] = ro
        rows.append(row)
    table: dict[str, Any] = {"kind": "Table", "apiVersion": "meta.k8s.io/v1",
                             "metadata": {"resourceVersion": resource_version}, "rows": rows}
    table["columnDefinitions"] = [c for c, _ in cols] if with_columns else None
    return table
