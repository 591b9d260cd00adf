"""Hostile CR content (issue 11, defects 6 and 7; issue 20, defect 1).

* Spec fields named like Ansible's reserved or magic variables (``omit``, ``inventoryHostname`` ->
  ``inventory_hostname``, ``hostvars``) are refused with a Failure naming the field; nothing runs, so a
  role's ``default(omit)`` can never write the CR's value.
* A newline in CR content that ends up in a failed task's message cannot forge a line of the operator's
  text log (e.g. a fake "succeeded" line for another CR).

* Objects nested as deep as the real API server stores (10,000 levels; Python's decoder gives up near 1,000,
  ``deepcopy`` sooner): each is refused for itself alone, and the operator keeps serving the others. Before
  the fix one such object ended kopf's watcher, and with it the operator, at every start.

Pass: each refused CR has ``Failure=True`` naming its variable and no run and no ConfigMap; the forging CR
fails with its message, and no line of the operator's log starts with the forged text; each deep CR has
``Failure=True`` saying how deep is too deep, no run, and a CR created after it is reconciled."""

from __future__ import annotations

import json

import pytest

from ansible_operator import apijson
from tests.faults.conftest import Cluster, Operator, wait_for, widget_watch
from tests.harness import GROUP, KIND, PLURAL, VERSION

NS = "hostile"  # a prefix: the module's namespace is hostile-<random>
FORGED = "2026-01-01T00:00:00Z INFO  [Widget hostile/victim run=20260101T000000Z-000000] run succeeded"


def failure(cluster: Cluster, ns: str, name: str) -> dict | None:
    obj = cluster.get(ns, name) or {}
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Failure" and cond.get("status") == "True":
            return cond
    return None


@pytest.fixture(scope="module")
def hostile_operator(cluster: Cluster, operators) -> tuple[str, Operator]:
    """(its namespace, the operator watching it)"""
    ns = cluster.namespace(NS)
    return ns, operators(cluster.kubeconfig, [widget_watch()], namespace=ns, name="hostile")


@pytest.mark.parametrize("field,variable", [("omit", "omit"), ("inventoryHostname", "inventory_hostname"),
                                            ("hostvars", "hostvars")])
def test_reserved_variable_names_are_refused(cluster: Cluster, hostile_operator, field: str, variable: str,
                                             figures: dict) -> None:
    ns, op = hostile_operator
    name = f"reserved-{variable.replace('_', '-')}"
    cluster.create(ns, name, {field: "from-the-cr", "color": "x"})
    cond = wait_for(lambda: failure(cluster, ns, name), 120, what=f"Failure on {name}")
    assert variable in cond["message"], cond
    assert op.runs(ns, name) == []
    assert cluster.configmap(ns, f"{name}-out") is None
    figures.update(refused=1)


def test_newline_in_cr_content_cannot_forge_a_log_line(
    cluster: Cluster, hostile_operator, figures: dict
) -> None:
    ns, op = hostile_operator
    cluster.create(ns, "forger", {"failMessage": f"boom\n{FORGED}\r{FORGED}"})
    cond = wait_for(lambda: failure(cluster, ns, "forger"), 120, what="Failure on forger")
    assert "boom" in cond["message"]
    wait_for(lambda: "forger" in op.logs() and "boom" in op.logs(), 60, what="the failed task logged")
    forged = [line for line in op.logs().splitlines() if line.startswith(FORGED[:40])]
    assert forged == [], forged
    figures.update(forged_log_lines=0)


# The real API server stores a document nested up to 10,000 levels; between 9,996 and 9,999 it answers 500
# (the managedFields it adds nest 4 levels deeper than the spec), at exactly 10,000 it stores the object
# without managedFields (kube-apiserver 1.36.3).
DEPTHS = [1_000, 5_000, 9_995, 10_000]


def _nested(levels: int) -> str:
    """A JSON mapping ``levels`` deep, as text (Python's encoder gives up near 1,000 levels)."""
    return '{"a":' * (levels - 1) + '{"a":1}' + "}" * (levels - 1)


def _deep_failure(cluster: Cluster, ns: str, name: str) -> dict | None:
    status, data = cluster.raw("GET", f"/apis/{GROUP}/{VERSION}/namespaces/{ns}/{PLURAL}/{name}")
    assert status == 200, data[:300]
    obj = apijson.loads(data)  # the test's own decoder would fail as the operator's did
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Failure" and cond.get("status") == "True":
            return cond
    return None


def _served_after(cluster: Cluster, ns: str, op: Operator, name: str) -> None:
    cluster.create(ns, name, {"color": "after"})
    wait_for(lambda: (cluster.configmap(ns, f"{name}-out") or {}).get("color") == "after", 120,
             what=f"{name}, created after the deep one, reconciled")
    assert op.proc.poll() is None, op.logs()[-3000:]


@pytest.mark.parametrize("levels", DEPTHS)
def test_a_deeply_nested_object_is_refused_alone(cluster: Cluster, hostile_operator, levels: int,
                                                 figures: dict) -> None:
    if not cluster.real:
        pytest.skip("the sandbox refuses nesting past 200 levels; the real API server stores 10,000")
    ns, op = hostile_operator
    name = f"deep-{levels}"
    body = (f'{{"apiVersion":"{GROUP}/{VERSION}","kind":"{KIND}","metadata":{{"name":"{name}"}},'
            f'"spec":{_nested(levels - 1)}}}').encode()
    assert apijson.depth(body) == levels
    status, data = cluster.raw("POST", f"/apis/{GROUP}/{VERSION}/namespaces/{ns}/{PLURAL}", body)
    assert status == 201, data[:300]
    cond = wait_for(lambda: _deep_failure(cluster, ns, name), 120, what=f"Failure on {name}")
    assert "levels deep" in cond["message"], cond
    assert op.runs(ns, name) == []
    _served_after(cluster, ns, op, f"after-{levels}")
    logs = op.logs()
    assert "RecursionError" not in logs and "Traceback" not in logs, logs[-3000:]
    figures.update(deepest_stored=max(levels, figures.get("deepest_stored", 0)))


def test_an_object_deepened_by_json_patch_is_refused_then_served_again(
        cluster: Cluster, hostile_operator, figures: dict) -> None:
    if not cluster.real:
        pytest.skip("the sandbox refuses nesting past 200 levels; the real API server stores 10,000")
    ns, op = hostile_operator
    name = "deepened"
    cluster.create(ns, name, {"color": "shallow"})
    wait_for(lambda: (cluster.configmap(ns, f"{name}-out") or {}).get("color") == "shallow", 120,
             what=f"{name} reconciled")
    path = f"/apis/{GROUP}/{VERSION}/namespaces/{ns}/{PLURAL}/{name}"
    patch = f'[{{"op":"add","path":"/spec/deep","value":{_nested(5_000)}}}]'.encode()
    status, data = cluster.raw("PATCH", path, patch, "application/json-patch+json")
    assert status == 200, data[:300]
    cond = wait_for(lambda: _deep_failure(cluster, ns, name), 120, what=f"Failure on {name}")
    assert "spec.deep" in cond["message"] or "spec[deep]" in cond["message"] or "deep" in cond["message"]
    # flattened again: served again
    status, data = cluster.raw("PATCH", path, json.dumps([{"op": "remove", "path": "/spec/deep"},
                                                          {"op": "replace", "path": "/spec/color",
                                                           "value": "flat"}]).encode(),
                               "application/json-patch+json")
    assert status == 200, data[:300]
    wait_for(lambda: (cluster.configmap(ns, f"{name}-out") or {}).get("color") == "flat", 120,
             what=f"{name} reconciled again once flattened")
    assert op.proc.poll() is None, op.logs()[-3000:]
