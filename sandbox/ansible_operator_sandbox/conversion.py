"""Conversion between the served versions of a built-in resource and the version it is stored in.

kube-apiserver stores a resource in one version and converts every request and answer; the sandbox does the
same for the one built-in resource it serves in two shapes, HorizontalPodAutoscaler: stored as
``autoscaling/v2``, also served as ``autoscaling/v1`` (what ``kubectl autoscale`` creates). Every other
resource, and custom resources (no conversion webhooks), has one shape for all its versions.

The HPA rules are ``pkg/apis/autoscaling/v1/conversion.go``'s: v1 has only the CPU utilization target
(``targetCPUUtilizationPercentage``, ``currentCPUUtilizationPercentage``); everything else v2 holds travels
in ``autoscaling.alpha.kubernetes.io/*`` annotations of the v1 object (the other metrics, the current
metrics, the conditions, the behavior), so a v1 client that reads and writes an object back loses
nothing; a v1 object without any metric gets the 80 % CPU default. The behavior annotation holds Go's
internal type marshalled without JSON tags (``{"ScaleUp":{"StabilizationWindowSeconds":0,...}}``), as the
real server writes it.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from ansible_operator_sandbox.resources import ResourceType

__all__ = ["converts", "storage_version", "to_storage", "from_storage", "hpa_v1_to_v2", "hpa_v2_to_v1"]

HPA = "autoscaling/horizontalpodautoscalers"
#: group/resource -> the version its objects are stored in (built-ins served in more than one shape)
_STORAGE = {HPA: "v2"}

METRICS = "autoscaling.alpha.kubernetes.io/metrics"
CURRENT_METRICS = "autoscaling.alpha.kubernetes.io/current-metrics"
CONDITIONS = "autoscaling.alpha.kubernetes.io/conditions"
BEHAVIOR = "autoscaling.alpha.kubernetes.io/behavior"
_ROUND_TRIP = (METRICS, BEHAVIOR, CURRENT_METRICS, CONDITIONS)
DEFAULT_CPU_UTILIZATION = 80


def storage_version(rtype: ResourceType) -> str | None:
    """The version ``rtype``'s objects are stored in, when it is served in more than one shape."""
    return _STORAGE.get(rtype.group_resource) if rtype.builtin else None


def converts(rtype: ResourceType) -> bool:
    """Whether objects served as ``rtype`` have another shape than the stored ones."""
    stored = storage_version(rtype)
    return stored is not None and stored != rtype.version


def to_storage(rtype: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
    """An object sent for ``rtype`` in the stored version's shape (a new object; ``obj`` is not changed)."""
    if not converts(rtype):
        return obj
    return hpa_v1_to_v2(obj)


def from_storage(rtype: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
    """A stored object as served for ``rtype`` (a new object; ``obj`` is not changed)."""
    if not converts(rtype):
        return obj
    return hpa_v2_to_v1(obj)


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def _put(out: dict[str, Any], key: str, value: Any) -> None:
    if value is not None:
        out[key] = value


def _d(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


# ---- metrics: v2 <-> v1 ----------------------------------------------------------------------------


def _ref_v1(ref: Any) -> dict[str, Any]:
    ref = _d(ref)
    out = {"kind": ref.get("kind", ""), "name": ref.get("name", "")}
    _put(out, "apiVersion", ref.get("apiVersion"))
    return out


def _metric_spec_to_v1(m: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"type": m.get("type", "")}
    if isinstance(m.get("object"), dict):
        src, target = m["object"], _d(m["object"].get("target"))
        v: dict[str, Any] = {"target": _ref_v1(src.get("describedObject")),
                             "metricName": _d(src.get("metric")).get("name", ""),
                             "targetValue": target.get("value", "0")}
        _put(v, "selector", _d(src.get("metric")).get("selector"))
        _put(v, "averageValue", target.get("averageValue"))
        out["object"] = v
    if isinstance(m.get("pods"), dict):
        src, target = m["pods"], _d(m["pods"].get("target"))
        v = {"metricName": _d(src.get("metric")).get("name", ""),
             "targetAverageValue": target.get("averageValue", "0")}
        _put(v, "selector", _d(src.get("metric")).get("selector"))
        out["pods"] = v
    for key in ("resource", "containerResource"):
        if isinstance(m.get(key), dict):
            src, target = m[key], _d(m[key].get("target"))
            v = {"name": src.get("name", "")}
            _put(v, "targetAverageUtilization", target.get("averageUtilization"))
            _put(v, "targetAverageValue", target.get("averageValue"))
            if key == "containerResource":
                v["container"] = src.get("container", "")
            out[key] = v
    if isinstance(m.get("external"), dict):
        src, target = m["external"], _d(m["external"].get("target"))
        v = {"metricName": _d(src.get("metric")).get("name", "")}
        _put(v, "metricSelector", _d(src.get("metric")).get("selector"))
        _put(v, "targetValue", target.get("value"))
        _put(v, "targetAverageValue", target.get("averageValue"))
        out["external"] = v
    return out


def _identifier(src: dict[str, Any], selector_key: str) -> dict[str, Any]:
    out = {"name": src.get("metricName", "")}
    _put(out, "selector", src.get(selector_key))
    return out


def _metric_spec_to_v2(m: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"type": m.get("type", "")}
    if isinstance(m.get("object"), dict):
        src = m["object"]
        target = {"type": "Value" if src.get("averageValue") is None else "AverageValue",
                  "value": src.get("targetValue", "0")}
        _put(target, "averageValue", src.get("averageValue"))
        out["object"] = {"describedObject": _ref_v1(src.get("target")),
                         "metric": _identifier(src, "selector"), "target": target}
    if isinstance(m.get("pods"), dict):
        src = m["pods"]
        out["pods"] = {"metric": _identifier(src, "selector"),
                       "target": {"type": "AverageValue", "averageValue": src.get("targetAverageValue", "0")}}
    for key in ("resource", "containerResource"):
        if isinstance(m.get(key), dict):
            src = m[key]
            utilization = src.get("targetAverageUtilization")
            target = {"type": "AverageValue" if utilization is None else "Utilization"}
            _put(target, "averageUtilization", utilization)
            _put(target, "averageValue", src.get("targetAverageValue"))
            v: dict[str, Any] = {"name": src.get("name", "")}
            if key == "containerResource":
                v["container"] = src.get("container", "")
            v["target"] = target
            out[key] = v
    if isinstance(m.get("external"), dict):
        src = m["external"]
        target = {"type": "AverageValue" if src.get("targetValue") is None else "Value"}
        _put(target, "value", src.get("targetValue"))
        _put(target, "averageValue", src.get("targetAverageValue"))
        out["external"] = {"metric": _identifier(src, "metricSelector"), "target": target}
    return out


def _metric_status_to_v1(m: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"type": m.get("type", "")}
    if isinstance(m.get("object"), dict):
        src, cur = m["object"], _d(m["object"].get("current"))
        v: dict[str, Any] = {"target": _ref_v1(src.get("describedObject")),
                             "metricName": _d(src.get("metric")).get("name", ""),
                             "currentValue": cur.get("value", "0")}
        _put(v, "selector", _d(src.get("metric")).get("selector"))
        _put(v, "averageValue", cur.get("averageValue"))
        out["object"] = v
    if isinstance(m.get("pods"), dict):
        src, cur = m["pods"], _d(m["pods"].get("current"))
        v = {"metricName": _d(src.get("metric")).get("name", ""),
             "currentAverageValue": cur.get("averageValue", "0")}
        _put(v, "selector", _d(src.get("metric")).get("selector"))
        out["pods"] = v
    for key in ("resource", "containerResource"):
        if isinstance(m.get(key), dict):
            src, cur = m[key], _d(m[key].get("current"))
            v = {"name": src.get("name", "")}
            _put(v, "currentAverageUtilization", cur.get("averageUtilization"))
            v["currentAverageValue"] = cur.get("averageValue", "0")
            if key == "containerResource":
                v["container"] = src.get("container", "")
            out[key] = v
    if isinstance(m.get("external"), dict):
        src, cur = m["external"], _d(m["external"].get("current"))
        v = {"metricName": _d(src.get("metric")).get("name", "")}
        _put(v, "metricSelector", _d(src.get("metric")).get("selector"))
        v["currentValue"] = cur.get("value", "0")
        _put(v, "currentAverageValue", cur.get("averageValue"))
        out["external"] = v
    return out


def _metric_status_to_v2(m: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"type": m.get("type", "")}
    if isinstance(m.get("object"), dict):
        src = m["object"]
        cur = {"value": src.get("currentValue", "0")}
        _put(cur, "averageValue", src.get("averageValue"))
        out["object"] = {"metric": _identifier(src, "selector"), "current": cur,
                         "describedObject": _ref_v1(src.get("target"))}
    if isinstance(m.get("pods"), dict):
        src = m["pods"]
        out["pods"] = {"metric": _identifier(src, "selector"),
                       "current": {"averageValue": src.get("currentAverageValue", "0")}}
    for key in ("resource", "containerResource"):
        if isinstance(m.get(key), dict):
            src = m[key]
            cur = {"averageValue": src.get("currentAverageValue", "0")}
            _put(cur, "averageUtilization", src.get("currentAverageUtilization"))
            v: dict[str, Any] = {"name": src.get("name", ""), "current": cur}
            if key == "containerResource":
                v["container"] = src.get("container", "")
            out[key] = v
    if isinstance(m.get("external"), dict):
        src = m["external"]
        cur = {"value": src.get("currentValue", "0")}
        _put(cur, "averageValue", src.get("currentAverageValue"))
        out["external"] = {"metric": _identifier(src, "metricSelector"), "current": cur}
    return out


# ---- behavior: Go's internal type without JSON tags ---------------------------------------------------


def _behavior_to_internal(behavior: dict[str, Any]) -> dict[str, Any]:
    def rules(r: Any) -> Any:
        if not isinstance(r, dict):
            return None
        return {"StabilizationWindowSeconds": r.get("stabilizationWindowSeconds"),
                "SelectPolicy": r.get("selectPolicy"),
                "Policies": [{"Type": p.get("type", ""), "Value": p.get("value", 0),
                              "PeriodSeconds": p.get("periodSeconds", 0)}
                             for p in r.get("policies") or [] if isinstance(p, dict)]
                if r.get("policies") is not None else None}
    return {"ScaleUp": rules(behavior.get("scaleUp")), "ScaleDown": rules(behavior.get("scaleDown"))}


def _folded(d: Any, name: str) -> Any:
    """encoding/json's case-insensitive field match."""
    if not isinstance(d, dict):
        return None
    for k, v in d.items():
        if k.lower() == name.lower():
            return v
    return None


def _behavior_from_internal(enc: dict[str, Any]) -> dict[str, Any]:
    def rules(r: Any) -> Any:
        if not isinstance(r, dict):
            return None
        out: dict[str, Any] = {}
        _put(out, "stabilizationWindowSeconds", _folded(r, "StabilizationWindowSeconds"))
        _put(out, "selectPolicy", _folded(r, "SelectPolicy"))
        policies = _folded(r, "Policies")
        if isinstance(policies, list):
            out["policies"] = [{"type": _folded(p, "Type") or "", "value": _folded(p, "Value") or 0,
                                "periodSeconds": _folded(p, "PeriodSeconds") or 0} for p in policies]
        return out
    out: dict[str, Any] = {}
    _put(out, "scaleUp", rules(_folded(enc, "ScaleUp")))
    _put(out, "scaleDown", rules(_folded(enc, "ScaleDown")))
    return out


# ---- the objects ----------------------------------------------------------------------------------------


def _is_cpu_utilization(m: Any) -> bool:
    res = _d(_d(m).get("resource"))
    return (_d(m).get("type") == "Resource" and res.get("name") == "cpu"
            and _d(res.get("target")).get("averageUtilization") is not None)


def hpa_v2_to_v1(obj: dict[str, Any]) -> dict[str, Any]:
    """``Convert_autoscaling_HorizontalPodAutoscaler_To_v1_HorizontalPodAutoscaler`` on JSON."""
    out = {k: copy.deepcopy(v) for k, v in obj.items() if k not in ("spec", "status")}
    out["apiVersion"] = "autoscaling/v1"
    meta = out.setdefault("metadata", {})
    annotations = {k: v for k, v in _d(meta.get("annotations")).items() if k not in _ROUND_TRIP}
    spec, status = _d(obj.get("spec")), _d(obj.get("status"))
    metrics = [m for m in spec.get("metrics") or [] if isinstance(m, dict)]
    v1_spec: dict[str, Any] = {"scaleTargetRef": _ref_v1(spec.get("scaleTargetRef"))}
    _put(v1_spec, "minReplicas", spec.get("minReplicas"))
    v1_spec["maxReplicas"] = spec.get("maxReplicas", 0)
    for m in metrics:
        res = _d(m.get("resource"))
        if m.get("type") == "Resource" and res.get("name") == "cpu":
            _put(v1_spec, "targetCPUUtilizationPercentage", _d(res.get("target")).get("averageUtilization"))
            break
    out["spec"] = v1_spec
    v1_status: dict[str, Any] = {}
    for k in ("observedGeneration", "lastScaleTime"):
        _put(v1_status, k, status.get(k))
    v1_status["currentReplicas"] = status.get("currentReplicas", 0)
    v1_status["desiredReplicas"] = status.get("desiredReplicas", 0)
    current = [m for m in status.get("currentMetrics") or [] if isinstance(m, dict)]
    for m in current:
        res = _d(m.get("resource"))
        if m.get("type") == "Resource" and res.get("name") == "cpu":
            utilization = _d(res.get("current")).get("averageUtilization")
            _put(v1_status, "currentCPUUtilizationPercentage", utilization)
    out["status"] = v1_status
    others = [_metric_spec_to_v1(m) for m in metrics if not _is_cpu_utilization(m)]
    if others:
        annotations[METRICS] = _dumps(others)
    if current:
        annotations[CURRENT_METRICS] = _dumps([_metric_status_to_v1(m) for m in current])
    if isinstance(spec.get("behavior"), dict):
        annotations[BEHAVIOR] = _dumps(_behavior_to_internal(spec["behavior"]))
    conditions = [c for c in status.get("conditions") or [] if isinstance(c, dict)]
    if conditions:
        annotations[CONDITIONS] = _dumps(conditions)
    if annotations:
        meta["annotations"] = annotations
    else:
        meta.pop("annotations", None)
    return out


def _loads(text: Any, want: type) -> Any:
    try:
        value = json.loads(text) if isinstance(text, str) else None
    except ValueError:
        return None
    return value if isinstance(value, want) else None


def hpa_v1_to_v2(obj: dict[str, Any]) -> dict[str, Any]:
    """``Convert_v1_HorizontalPodAutoscaler_To_autoscaling_HorizontalPodAutoscaler`` on JSON."""
    out = {k: copy.deepcopy(v) for k, v in obj.items() if k not in ("spec", "status")}
    out["apiVersion"] = "autoscaling/v2"
    meta = out.setdefault("metadata", {})
    annotations = dict(_d(meta.get("annotations")))
    spec, status = _d(obj.get("spec")), _d(obj.get("status"))
    v2_spec: dict[str, Any] = {"scaleTargetRef": _ref_v1(spec.get("scaleTargetRef"))}
    _put(v2_spec, "minReplicas", spec.get("minReplicas"))
    v2_spec["maxReplicas"] = spec.get("maxReplicas", 0)
    metrics: list[dict[str, Any]] = []
    if spec.get("targetCPUUtilizationPercentage") is not None:
        metrics = [{"type": "Resource", "resource": {"name": "cpu", "target": {
            "type": "Utilization", "averageUtilization": spec["targetCPUUtilizationPercentage"]}}}]
    if METRICS in annotations:
        others = _loads(annotations.pop(METRICS), list) or []
        metrics = [_metric_spec_to_v2(m) for m in others if isinstance(m, dict)] + metrics[:1]
    if not metrics:  # autoscaling/v1's implicit default, made explicit
        metrics = [{"type": "Resource", "resource": {"name": "cpu", "target": {
            "type": "Utilization", "averageUtilization": DEFAULT_CPU_UTILIZATION}}}]
    v2_spec["metrics"] = metrics
    if BEHAVIOR in annotations:
        behavior = _loads(annotations.pop(BEHAVIOR), dict)
        if behavior is not None:
            v2_spec["behavior"] = _behavior_from_internal(behavior)
    out["spec"] = v2_spec
    v2_status: dict[str, Any] = {}
    for k in ("observedGeneration", "lastScaleTime"):
        _put(v2_status, k, status.get(k))
    if status.get("currentReplicas"):
        v2_status["currentReplicas"] = status["currentReplicas"]
    v2_status["desiredReplicas"] = status.get("desiredReplicas", 0)
    v2_status["currentMetrics"] = None  # not omitempty in autoscaling/v2
    if status.get("currentCPUUtilizationPercentage") is not None:
        v2_status["currentMetrics"] = [{"type": "Resource", "resource": {"name": "cpu", "current": {
            "averageUtilization": status["currentCPUUtilizationPercentage"]}}}]
    if CURRENT_METRICS in annotations:
        current = _loads(annotations.pop(CURRENT_METRICS), list) or []
        v2_status["currentMetrics"] = [_metric_status_to_v2(m) for m in current if isinstance(m, dict)]
    if CONDITIONS in annotations:
        conditions = _loads(annotations.pop(CONDITIONS), list) or []
        v2_status["conditions"] = [c for c in conditions if isinstance(c, dict)]
    out["status"] = v2_status
    if annotations:
        meta["annotations"] = annotations
    else:
        meta.pop("annotations", None)
    return out
