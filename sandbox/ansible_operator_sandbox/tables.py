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
from ansible_operator_sandbox.timeutil import age

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


_BUILTIN: dict[tuple[str, str], list[tuple[Column, Callable[[dict[str, Any]], Any]]]] = {
    ("", "Namespace"): [(_col("Status"), lambda o: _g(o, "status", "phase", default=""))],
    ("", "ConfigMap"): [
        (
            _col("Data", "integer"),
            lambda o: len(_g(o, "data", default={})) + len(_g(o, "binaryData", default={})),
        )
    ],
    ("", "Secret"): [
        (_col("Type"), lambda o: o.get("type", "")),
        (_col("Data", "integer"), lambda o: len(_g(o, "data", default={}))),
    ],
    ("", "Service"): [
        (_col("Type"), lambda o: _g(o, "spec", "type", default="")),
        (_col("Cluster-IP"), lambda o: _g(o, "spec", "clusterIP", default="")),
        (_col("External-IP"), _external_ip),
        (_col("Port(s)"), _ports),
    ],
    ("", "ServiceAccount"): [(_col("Secrets", "integer"), lambda o: len(o.get("secrets") or []))],
    ("", "PersistentVolumeClaim"): [
        (_col("Status"), lambda o: _g(o, "status", "phase", default="")),
        (_col("Volume"), lambda o: _g(o, "spec", "volumeName", default="")),
        (_col("Capacity"), lambda o: _g(o, "status", "capacity", "storage", default="")),
        (_col("Access Modes"), lambda o: ",".join(_g(o, "spec", "accessModes", default=[]))),
    ],
    ("", "Pod"): [
        (
            _col("Ready"),
            lambda o: (
                "%d/%d"
                % (
                    sum(1 for c in _g(o, "status", "containerStatuses", default=[]) or [] if c.get("ready")),
                    len(_g(o, "spec", "containers", default=[])),
                )
            ),
        ),
        (_col("Status"), lambda o: _g(o, "status", "phase", default="Pending")),
        (_col("Restarts", "integer"), lambda o: 0),
    ],
    ("", "Event"): [
        (_col("Type"), lambda o: o.get("type", "")),
        (_col("Reason"), lambda o: o.get("reason", "")),
        (
            _col("Object"),
            lambda o: (
                f"{_g(o, 'involvedObject', 'kind', default='')}/"
                f"{_g(o, 'involvedObject', 'name', default='')}".lower()
            ),
        ),
        (_col("Message"), lambda o: o.get("message", "")),
    ],
    ("apps", "Deployment"): [
        (_col("Ready"), _ready),
        (_col("Up-to-date", "integer"), lambda o: _g(o, "status", "updatedReplicas", default=0)),
        (_col("Available", "integer"), lambda o: _g(o, "status", "availableReplicas", default=0)),
    ],
    ("apps", "StatefulSet"): [(_col("Ready"), _ready)],
    ("apps", "ReplicaSet"): [
        (_col("Desired", "integer"), lambda o: _g(o, "spec", "replicas", default=0)),
        (_col("Current", "integer"), lambda o: _g(o, "status", "replicas", default=0)),
        (_col("Ready", "integer"), lambda o: _g(o, "status", "readyReplicas", default=0)),
    ],
    ("batch", "Job"): [
        (_col("Status"), _job_status),
        (
            _col("Completions"),
            lambda o: f"{_g(o, 'status', 'succeeded', default=0)}/{_g(o, 'spec', 'completions', default=1)}",
        ),
    ],
    ("batch", "CronJob"): [
        (_col("Schedule"), lambda o: _g(o, "spec", "schedule", default="")),
        (_col("Suspend"), lambda o: str(_g(o, "spec", "suspend", default=False))),
        (_col("Active", "integer"), lambda o: len(_g(o, "status", "active", default=[]))),
        (
            _col("Last Schedule"),
            lambda o: (
                age(_g(o, "status", "lastScheduleTime")) if _g(o, "status", "lastScheduleTime") else "<none>"
            ),
        ),
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
    ("apiextensions.k8s.io", "CustomResourceDefinition"): [
        (_col("Created At", "date"), lambda o: (o.get("metadata") or {}).get("creationTimestamp", ""))
    ],
}


def columns_for(rtype: ResourceType) -> list[tuple[Column, Callable[[dict[str, Any]], Any]]]:
    """(column definition, cell function) pairs, Name first."""
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
    out.extend(_BUILTIN.get((rtype.group, rtype.kind), []))
    if (rtype.group, rtype.kind) != ("apiextensions.k8s.io", "CustomResourceDefinition"):
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


def to_table(
    rtype: ResourceType,
    objects: list[dict[str, Any]],
    resource_version: str,
    include: str = "Metadata",
    with_columns: bool = True,
) -> dict[str, Any]:
    cols = columns_for(rtype)
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
