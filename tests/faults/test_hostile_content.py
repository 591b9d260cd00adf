"""Hostile CR content (issue 11, defects 6 and 7).

* Spec fields named like Ansible's reserved or magic variables (``omit``, ``inventoryHostname`` ->
  ``inventory_hostname``, ``hostvars``) are refused with a Failure naming the field; nothing runs, so a
  role's ``default(omit)`` can never write the CR's value.
* A newline in CR content that ends up in a failed task's message cannot forge a line of the operator's
  text log (e.g. a fake "succeeded" line for another CR).

Pass: each refused CR has ``Failure=True`` naming its variable and no run and no ConfigMap; the forging CR
fails with its message, and no line of the operator's log starts with the forged text."""

from __future__ import annotations

import pytest

from tests.faults.conftest import Cluster, Operator, wait_for, widget_watch

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
