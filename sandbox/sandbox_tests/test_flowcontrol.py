"""API Priority and Fairness objects (``flowcontrol.apiserver.k8s.io/v1``) as kube-apiserver 1.36 serves them:
the configuration it creates at start, its printer columns, defaults, generation, validation and the
``Dangling`` condition its config controller keeps on every FlowSchema. The expected values were read off a
real 1.36 server.
"""

from __future__ import annotations

import json
import subprocess
import urllib.request
from importlib import resources
from pathlib import Path
from typing import Any

import kubernetes
import pytest
from kubernetes.client.rest import ApiException

from ansible_operator_sandbox import tables
from ansible_operator_sandbox.resources import Registry
from ansible_operator_sandbox.testing import SandboxHandle, call_api, start_in_thread

from .helpers import wait_for

GROUP = "flowcontrol.apiserver.k8s.io"
FLOW_SCHEMAS = ["catch-all", "exempt", "global-default", "kube-controller-manager", "kube-scheduler",
                "kube-system-service-accounts", "probes", "service-accounts", "system-leader-election",
                "system-node-high", "system-nodes"]
PRIORITY_LEVELS = ["catch-all", "exempt", "global-default", "leader-election", "node-high", "system",
                   "workload-high", "workload-low"]


@pytest.fixture
def api(sandbox: SandboxHandle):
    client = sandbox.api_client()
    yield client
    client.close()


def _raw(api: kubernetes.client.ApiClient, path: str, accept: str = "application/json") -> Any:
    req = urllib.request.Request(api.configuration.host + path, headers={"Accept": accept})
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.loads(resp.read())


def _dangling(fs: dict[str, Any]) -> tuple[str, str, str] | None:
    for c in (fs.get("status") or {}).get("conditions") or []:
        if c["type"] == "Dangling":
            return c["status"], c["reason"], c["message"]
    return None


def _found(level: str) -> tuple[str, str, str]:
    return ("False", "Found",
            f'This FlowSchema references the PriorityLevelConfiguration object named "{level}" and it exists')


def _not_found(level: str) -> tuple[str, str, str]:
    return ("True", "NotFound", f'This FlowSchema references the PriorityLevelConfiguration object named '
                                f'"{level}" but there is no such object')


def test_bootstrap_configuration(api):
    fc = kubernetes.client.FlowcontrolApiserverV1Api(api)
    assert [p.metadata.name for p in fc.list_priority_level_configuration().items] == PRIORITY_LEVELS
    assert [f.metadata.name for f in fc.list_flow_schema().items] == FLOW_SCHEMAS
    data = json.loads(resources.files("ansible_operator_sandbox").joinpath("apf_bootstrap.json").read_text())
    for plural, names in (("prioritylevelconfigurations", PRIORITY_LEVELS), ("flowschemas", FLOW_SCHEMAS)):
        items = _raw(api, f"/apis/{GROUP}/v1/{plural}")["items"]
        specs = {e["name"]: e["spec"] for e in data[plural]}
        assert sorted(specs) == names
        for obj in items:
            meta = obj["metadata"]
            assert meta["annotations"] == {"apf.kubernetes.io/autoupdate-spec": "true"}
            assert meta["generation"] == 1
            assert obj["spec"] == specs[meta["name"]]
            managers = {(m["manager"], m["operation"], m.get("subresource")) for m in meta["managedFields"]}
            expected: set[tuple[str, str, str | None]] = {
                ("api-priority-and-fairness-config-producer-v1", "Update", None)}
            if plural == "flowschemas":
                expected.add(("api-priority-and-fairness-config-consumer-v1", "Apply", "status"))
                assert _dangling(obj) == _found(obj["spec"]["priorityLevelConfiguration"]["name"])
            else:
                assert obj["status"] == {}
            assert managers == expected
    exempt = fc.read_priority_level_configuration("exempt")
    assert exempt.spec.type == "Exempt" and exempt.spec.exempt.nominal_concurrency_shares == 0
    assert fc.read_flow_schema("exempt").spec.rules[0].subjects[0].group.name == "system:masters"


def _kubectl(sandbox: SandboxHandle, *args: str) -> list[list[str]]:
    out = subprocess.run(["kubectl", *args], env=sandbox.kubectl_env(), capture_output=True, text=True,
                         check=True, timeout=60).stdout
    return [line.split() for line in out.splitlines()]


def test_printer_columns_as_kubectl_shows_them(sandbox):
    """``kubectl get`` (and ``-o wide``, the same columns) prints what a real server's printer does:
    FlowSchemas ordered by matching precedence, then name; Age is left out here."""
    expected_fs = [
        ["NAME", "PRIORITYLEVEL", "MATCHINGPRECEDENCE", "DISTINGUISHERMETHOD", "MISSINGPL"],
        ["exempt", "exempt", "1", "<none>", "False"],
        ["probes", "exempt", "2", "<none>", "False"],
        ["system-leader-election", "leader-election", "100", "ByUser", "False"],
        ["system-node-high", "node-high", "400", "ByUser", "False"],
        ["system-nodes", "system", "500", "ByUser", "False"],
        ["kube-controller-manager", "workload-high", "800", "ByNamespace", "False"],
        ["kube-scheduler", "workload-high", "800", "ByNamespace", "False"],
        ["kube-system-service-accounts", "workload-high", "900", "ByNamespace", "False"],
        ["service-accounts", "workload-low", "9000", "ByUser", "False"],
        ["global-default", "global-default", "9900", "ByUser", "False"],
        ["catch-all", "catch-all", "10000", "ByUser", "False"],
    ]
    expected_pl = [
        ["NAME", "TYPE", "NOMINALCONCURRENCYSHARES", "QUEUES", "HANDSIZE", "QUEUELENGTHLIMIT"],
        ["catch-all", "Limited", "5", "<none>", "<none>", "<none>"],
        ["exempt", "Exempt", "<none>", "<none>", "<none>", "<none>"],
        ["global-default", "Limited", "20", "128", "6", "50"],
        ["leader-election", "Limited", "10", "16", "4", "50"],
        ["node-high", "Limited", "40", "64", "6", "50"],
        ["system", "Limited", "30", "64", "6", "50"],
        ["workload-high", "Limited", "40", "128", "6", "50"],
        ["workload-low", "Limited", "100", "128", "6", "50"],
    ]
    for wide in ((), ("-o", "wide")):
        rows = _kubectl(sandbox, "get", "flowschemas", *wide)
        assert [r[:4] + r[5:] for r in rows] == expected_fs  # without AGE (5th)
        rows = _kubectl(sandbox, "get", "prioritylevelconfigurations", *wide)
        assert [r[:-1] for r in rows] == expected_pl and rows[0][-1] == "AGE"


def test_table_cells_are_typed_as_the_real_printer_types_them(api):
    table = _raw(api, f"/apis/{GROUP}/v1/prioritylevelconfigurations",
                 "application/json;as=Table;v=v1;g=meta.k8s.io")
    assert [c["name"] for c in table["columnDefinitions"]] == [
        "Name", "Type", "NominalConcurrencyShares", "Queues", "HandSize", "QueueLengthLimit", "Age"]
    assert {c["type"] for c in table["columnDefinitions"]} == {"string"}
    assert [r["cells"][:-1] for r in table["rows"][:3]] == [
        ["catch-all", "Limited", 5, "<none>", "<none>", "<none>"],
        ["exempt", "Exempt", "<none>", "<none>", "<none>", "<none>"],
        ["global-default", "Limited", 20, 128, 6, 50]]
    table = _raw(api, f"/apis/{GROUP}/v1/flowschemas", "application/json;as=Table;v=v1;g=meta.k8s.io")
    assert [c["name"] for c in table["columnDefinitions"]] == [
        "Name", "PriorityLevel", "MatchingPrecedence", "DistinguisherMethod", "Age", "MissingPL"]
    first = table["rows"][0]["cells"]
    assert first[:4] + first[5:] == ["exempt", "exempt", 1, "<none>", "False"]


def test_missing_pl_column_before_the_condition_is_written():
    """MissingPL is ``?`` until the config controller has written the Dangling condition (a watch shows
    it)."""
    rtype = Registry().get(GROUP, "v1", "flowschemas")
    assert rtype is not None
    fs = {"metadata": {"name": "f", "creationTimestamp": "2024-01-01T00:00:00Z"},
          "spec": {"priorityLevelConfiguration": {"name": "p"}, "matchingPrecedence": 1000}}
    assert tables.to_table(rtype, [fs], "1")["rows"][0]["cells"][-1] == "?"
    fs["status"] = {"conditions": [{"type": "Dangling", "status": "True"}]}
    assert tables.to_table(rtype, [fs], "1")["rows"][0]["cells"][-1] == "True"


def test_defaults_and_generation(api):
    fc = kubernetes.client.FlowcontrolApiserverV1Api(api)
    pl = fc.create_priority_level_configuration({
        "metadata": {"name": "queued"},
        "spec": {"type": "Limited", "limited": {"limitResponse": {"type": "Queue", "queuing": {}}}}})
    assert pl.metadata.generation == 1
    limited = pl.spec.limited
    assert (limited.nominal_concurrency_shares, limited.lendable_percent) == (30, 0)
    queuing = limited.limit_response.queuing
    assert (queuing.queues, queuing.hand_size, queuing.queue_length_limit) == (64, 8, 50)
    fs = fc.create_flow_schema({"metadata": {"name": "mine"},
                                "spec": {"priorityLevelConfiguration": {"name": "queued"}}})
    assert fs.metadata.generation == 1 and fs.spec.matching_precedence == 1000
    # spec changes bump generation, metadata changes do not (as on the real server)
    assert fc.patch_flow_schema("mine", {"spec": {"matchingPrecedence": 500}}).metadata.generation == 2
    assert fc.patch_flow_schema("mine", {"metadata": {"labels": {"a": "b"}}}).metadata.generation == 2
    patched = fc.patch_priority_level_configuration(
        "queued", {"spec": {"limited": {"nominalConcurrencyShares": 7}}})
    assert patched.metadata.generation == 2 and patched.spec.limited.nominal_concurrency_shares == 7
    assert fc.patch_priority_level_configuration(
        "queued", {"metadata": {"annotations": {"x": "y"}}}).metadata.generation == 2
    # a status write leaves generation alone; conditions merge by type (strategic merge patch)
    wait_for(lambda: _dangling(_raw(api, f"/apis/{GROUP}/v1/flowschemas/mine")) == _found("queued"))
    status = fc.patch_flow_schema_status(
        "mine", {"status": {"conditions": [{"type": "Other", "status": "True"}]}})
    assert status.metadata.generation == 2
    assert {c.type for c in status.status.conditions} == {"Dangling", "Other"}


def test_dangling_condition_follows_the_priority_level(api):
    fc = kubernetes.client.FlowcontrolApiserverV1Api(api)
    path = f"/apis/{GROUP}/v1/flowschemas/orphan"
    fc.create_flow_schema({"metadata": {"name": "orphan"},
                           "spec": {"priorityLevelConfiguration": {"name": "later"}}})
    wait_for(lambda: _dangling(_raw(api, path)) == _not_found("later"), what="Dangling True")
    fc.create_priority_level_configuration({
        "metadata": {"name": "later"},
        "spec": {"type": "Limited", "limited": {"limitResponse": {"type": "Reject"}}}})
    wait_for(lambda: _dangling(_raw(api, path)) == _found("later"), what="Dangling False")
    fs = _raw(api, path)
    owners = {m["manager"]: m for m in fs["metadata"]["managedFields"]}
    assert owners["api-priority-and-fairness-config-consumer-v1"]["operation"] == "Apply"
    fc.delete_priority_level_configuration("later")
    wait_for(lambda: _dangling(_raw(api, path)) == _not_found("later"), what="Dangling True again")
    fc.patch_flow_schema("orphan", {"spec": {"priorityLevelConfiguration": {"name": "global-default"}}})
    wait_for(lambda: _dangling(_raw(api, path)) == _found("global-default"), what="pointed elsewhere")
    # a client overwriting the condition gets it back
    fc.patch_flow_schema_status("orphan",
                                {"status": {"conditions": [{"type": "Dangling", "status": "Unknown"}]}})
    wait_for(lambda: _dangling(_raw(api, path)) == _found("global-default"), what="condition restored")


@pytest.mark.parametrize("body, message", [
    ({"kind": "FlowSchema", "metadata": {"name": "x"}, "spec": {}},
     'FlowSchema.flowcontrol.apiserver.k8s.io "x" is invalid: spec.priorityLevelConfiguration.name: '
     "Required value: must reference a priority level"),
    ({"kind": "FlowSchema", "metadata": {"name": "x"},
      "spec": {"priorityLevelConfiguration": {"name": ""}, "matchingPrecedence": 10001}},
     'FlowSchema.flowcontrol.apiserver.k8s.io "x" is invalid: [spec.matchingPrecedence: Invalid value: '
     "10001: must not be greater than 10000, spec.priorityLevelConfiguration.name: Required value: must "
     "reference a priority level]"),
    ({"kind": "FlowSchema", "metadata": {"name": "x"},
      "spec": {"priorityLevelConfiguration": {"name": "a"}, "distinguisherMethod": {"type": "Foo"}}},
     'FlowSchema.flowcontrol.apiserver.k8s.io "x" is invalid: spec.distinguisherMethod.type: Unsupported '
     'value: {"Type":"Foo"}: supported values: "ByNamespace", "ByUser"'),
    ({"kind": "PriorityLevelConfiguration", "metadata": {"name": "x"}},
     'PriorityLevelConfiguration.flowcontrol.apiserver.k8s.io "x" is invalid: spec.type: Required value'),
    ({"kind": "PriorityLevelConfiguration", "metadata": {"name": "x"}, "spec": {"type": "Exempt"}},
     'PriorityLevelConfiguration.flowcontrol.apiserver.k8s.io "x" is invalid: spec.type: Invalid value: '
     "\"Exempt\": must be 'Exempt' if and only if `name` is 'exempt'"),
    ({"kind": "PriorityLevelConfiguration", "metadata": {"name": "x"}, "spec": {"type": "Limited"}},
     'PriorityLevelConfiguration.flowcontrol.apiserver.k8s.io "x" is invalid: spec.limited: Required value: '
     "must not be empty when type is Limited"),
    ({"kind": "PriorityLevelConfiguration", "metadata": {"name": "x"},
      "spec": {"type": "Limited", "limited": {"limitResponse": {"type": "Queue"}}}},
     'PriorityLevelConfiguration.flowcontrol.apiserver.k8s.io "x" is invalid: '
     "spec.limited.limitResponse.queuing: Required value: must not be empty if limited.limitResponse.type is "
     "Limited"),
    ({"kind": "PriorityLevelConfiguration", "metadata": {"name": "x"},
      "spec": {"type": "Limited", "limited": {"limitResponse": {"type": "Queue",
                                                                "queuing": {"queues": 4, "handSize": 9}}}}},
     'PriorityLevelConfiguration.flowcontrol.apiserver.k8s.io "x" is invalid: '
     "spec.limited.limitResponse.queuing.handSize: Invalid value: 9: should not be greater than queues (4)"),
])
def test_validation_as_the_real_server_words_it(api, body, message):
    plural = "flowschemas" if body["kind"] == "FlowSchema" else "prioritylevelconfigurations"
    with pytest.raises(ApiException) as e:
        call_api(api, "POST", f"/apis/{GROUP}/v1/{plural}", dict(body, apiVersion=f"{GROUP}/v1"),
                 response_type="object")
    status = json.loads(e.value.body)
    assert (e.value.status, status["reason"], status["message"]) == (422, "Invalid", message)


def test_bootstrap_without_simulation_and_after_a_restart(tmp_path: Path):
    """The bootstrap objects (and their conditions) are the server's, not a simulated controller's; a data dir
    keeps edits, and what is missing at start is created again."""
    data = tmp_path / "data"
    handle = start_in_thread(tmp_path / "kc1", simulate=False, data_dir=data)
    try:
        api = handle.api_client()
        fc = kubernetes.client.FlowcontrolApiserverV1Api(api)
        assert _dangling(_raw(api, f"/apis/{GROUP}/v1/flowschemas/catch-all")) == _found("catch-all")
        fc.create_flow_schema({"metadata": {"name": "mine"},
                               "spec": {"priorityLevelConfiguration": {"name": "nowhere"}}})
        assert _dangling(_raw(api, f"/apis/{GROUP}/v1/flowschemas/mine")) is None  # no controller: "?"
        fc.patch_flow_schema("global-default", {"spec": {"matchingPrecedence": 9800}})
        uid = fc.read_priority_level_configuration("workload-low").metadata.uid
        fc.delete_priority_level_configuration("workload-low")
        api.close()
    finally:
        handle.sandbox.stop_thread()
    handle = start_in_thread(tmp_path / "kc2", simulate=False, data_dir=data)
    try:
        api = handle.api_client()
        fc = kubernetes.client.FlowcontrolApiserverV1Api(api)
        assert fc.read_flow_schema("global-default").spec.matching_precedence == 9800
        again = fc.read_priority_level_configuration("workload-low")
        assert again.metadata.uid != uid and again.spec.limited.nominal_concurrency_shares == 100
        # the start-up pass of the config controller: the FlowSchema that named a missing level says so
        assert _dangling(_raw(api, f"/apis/{GROUP}/v1/flowschemas/mine")) == _not_found("nowhere")
        api.close()
    finally:
        handle.sandbox.stop_thread()
