"""HorizontalPodAutoscaler autoscaling/v2 (stored) <-> autoscaling/v1 (served), as conversion.go does it."""

from __future__ import annotations

import copy
import json
from typing import Any

from ansible_operator_sandbox import conversion
from ansible_operator_sandbox.resources import Registry

REF = {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}
SELECTOR = {"matchLabels": {"app": "web"}}

V2: dict[str, Any] = {
    "apiVersion": "autoscaling/v2",
    "kind": "HorizontalPodAutoscaler",
    "metadata": {"name": "web", "namespace": "default", "annotations": {"team": "core"}},
    "spec": {
        "scaleTargetRef": REF,
        "minReplicas": 2,
        "maxReplicas": 9,
        "metrics": [
            {"type": "Pods", "pods": {"metric": {"name": "rps", "selector": SELECTOR},
                                      "target": {"type": "AverageValue", "averageValue": "10"}}},
            {"type": "Object", "object": {
                "describedObject": {"apiVersion": "v1", "kind": "Service", "name": "s"},
                "metric": {"name": "hits"}, "target": {"type": "Value", "value": "100"}}},
            {"type": "External", "external": {"metric": {"name": "queue", "selector": SELECTOR},
                                              "target": {"type": "AverageValue", "averageValue": "30"}}},
            {"type": "ContainerResource", "containerResource": {
                "name": "memory", "container": "app",
                "target": {"type": "AverageValue", "averageValue": "1Gi"}}},
            {"type": "Resource", "resource": {"name": "cpu", "target": {
                "type": "Utilization", "averageUtilization": 50}}},
        ],
        "behavior": {
            "scaleUp": {"stabilizationWindowSeconds": 0, "selectPolicy": "Max",
                        "policies": [{"type": "Pods", "value": 4, "periodSeconds": 15}]},
            "scaleDown": {"selectPolicy": "Min",
                          "policies": [{"type": "Percent", "value": 10, "periodSeconds": 60}]},
        },
    },
    "status": {
        "observedGeneration": 3,
        "currentReplicas": 2,
        "desiredReplicas": 3,
        "currentMetrics": [{"type": "Resource", "resource": {"name": "cpu", "current": {
            "averageUtilization": 70, "averageValue": "350m"}}}],
        "conditions": [{"type": "AbleToScale", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z",
                        "reason": "ReadyForNewScale", "message": "recommended size matches current size"}],
    },
}


def test_v2_to_v1_keeps_the_cpu_target_in_spec_and_the_rest_in_annotations() -> None:
    v1 = conversion.hpa_v2_to_v1(copy.deepcopy(V2))
    assert v1["apiVersion"] == "autoscaling/v1"
    assert v1["spec"] == {"scaleTargetRef": REF, "minReplicas": 2, "maxReplicas": 9,
                          "targetCPUUtilizationPercentage": 50}
    assert v1["status"] == {"observedGeneration": 3, "currentReplicas": 2, "desiredReplicas": 3,
                            "currentCPUUtilizationPercentage": 70}
    annotations = v1["metadata"]["annotations"]
    assert annotations["team"] == "core"
    assert json.loads(annotations[conversion.METRICS])[0] == {
        "type": "Pods", "pods": {"metricName": "rps", "targetAverageValue": "10", "selector": SELECTOR}}
    assert json.loads(annotations[conversion.BEHAVIOR])["ScaleDown"] == {
        "StabilizationWindowSeconds": None, "SelectPolicy": "Min",
        "Policies": [{"Type": "Percent", "Value": 10, "PeriodSeconds": 60}]}
    assert json.loads(annotations[conversion.CURRENT_METRICS]) == [{"type": "Resource", "resource": {
        "name": "cpu", "currentAverageUtilization": 70, "currentAverageValue": "350m"}}]
    assert json.loads(annotations[conversion.CONDITIONS]) == V2["status"]["conditions"]


def test_v2_round_trips_through_v1() -> None:
    back = conversion.hpa_v1_to_v2(conversion.hpa_v2_to_v1(copy.deepcopy(V2)))
    assert back == V2


def test_v1_without_a_target_gets_the_80_percent_cpu_default_and_drops_round_trip_annotations() -> None:
    v1: dict[str, Any] = {"apiVersion": "autoscaling/v1", "kind": "HorizontalPodAutoscaler",
          "metadata": {"name": "web", "annotations": {conversion.CONDITIONS: "[]"}},
          "spec": {"scaleTargetRef": REF, "maxReplicas": 3}}
    v2 = conversion.hpa_v1_to_v2(v1)
    assert v2["spec"]["metrics"] == [{"type": "Resource", "resource": {"name": "cpu", "target": {
        "type": "Utilization", "averageUtilization": 80}}}]
    assert "annotations" not in v2["metadata"] and "minReplicas" not in v2["spec"]
    assert v1["metadata"]["annotations"] == {conversion.CONDITIONS: "[]"}  # the input is not modified


def test_only_hpa_v1_converts() -> None:
    registry = Registry()
    v1, v2 = (registry.get("autoscaling", v, "horizontalpodautoscalers") for v in ("v1", "v2"))
    assert v1 is not None and v2 is not None
    assert conversion.converts(v1) and not conversion.converts(v2)
    assert conversion.storage_version(v1) == "v2"
    deployments = registry.get("apps", "v1", "deployments")
    assert deployments is not None and not conversion.converts(deployments)
    obj = {"apiVersion": "apps/v1"}
    assert conversion.from_storage(deployments, obj) is obj and conversion.to_storage(deployments, obj) is obj
