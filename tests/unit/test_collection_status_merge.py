"""Pure merge rules of ansible_operator.util.k8s_status (module_utils/status_merge.py) and the duration
parser of requeue_after, loaded from the collection files the modules use."""

from __future__ import annotations

import importlib.util
from types import ModuleType

import pytest

from ansible_operator import collections as aocollections

UTILS = aocollections.COLLECTIONS_ROOT / "ansible_collections/ansible_operator/util/plugins/module_utils"
NOW = "2026-01-01T00:00:00Z"
LATER = "2026-01-02T00:00:00Z"


def _load(name: str) -> ModuleType:
    path = UTILS / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"_aoutil_{name}", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


sm = _load("status_merge")
dur = _load("duration")


def test_paths_order_and_layout() -> None:
    ours, compat = aocollections.paths()
    assert (ours / "ansible_collections/ansible_operator/util/plugins/modules/k8s_status.py").is_file()
    assert (compat / "ansible_collections/operator_sdk/util/meta/runtime.yml").is_file()
    assert not (compat / "ansible_collections/ansible_operator").exists()


def test_validate_conditions_normalises_and_rejects() -> None:
    out = sm.validate_conditions([{"type": "Ready", "status": True, "reason": "AllGood", "message": None}])
    assert out == [{"type": "Ready", "status": "True", "reason": "AllGood"}]
    with pytest.raises(sm.ConditionError, match="conditions\\[0\\].*bogus"):
        sm.validate_conditions([{"type": "Ready", "status": "True", "bogus": 1}])
    with pytest.raises(sm.ConditionError, match="status must be one of"):
        sm.validate_conditions([{"type": "Ready", "status": "yes"}])
    with pytest.raises(sm.ConditionError, match="CamelCase"):
        sm.validate_conditions([{"type": "Ready", "status": "True", "reason": "not camel"}])
    with pytest.raises(sm.ConditionError, match="RFC 3339"):
        sm.validate_conditions([{"type": "Ready", "status": "True", "lastTransitionTime": "yesterday"}])
    with pytest.raises(sm.ConditionError, match="`type` must be set"):
        sm.validate_conditions([{"status": "True"}])


def test_merge_conditions_keeps_others_and_transition_time() -> None:
    old = [
        {"type": "Running", "status": "True", "reason": "Running", "lastTransitionTime": NOW},
        {"type": "Ready", "status": "False", "reason": "Waiting", "lastTransitionTime": NOW},
    ]
    # Ready: same status, new message -> replaced but keeps lastTransitionTime
    merged = sm.merge_conditions(
        old, [{"type": "Ready", "status": "False", "reason": "Waiting", "message": "m"}], LATER
    )
    assert merged[0] == old[0]
    assert merged[1] == {
        "type": "Ready",
        "status": "False",
        "reason": "Waiting",
        "message": "m",
        "lastTransitionTime": NOW,
    }
    # Ready flips -> new lastTransitionTime
    merged = sm.merge_conditions(old, [{"type": "Ready", "status": "True", "reason": "Up"}], LATER)
    assert merged[1]["lastTransitionTime"] == LATER and merged[1]["status"] == "True"
    # identical apart from lastTransitionTime -> untouched
    merged = sm.merge_conditions(
        old, [{"type": "Ready", "status": "False", "reason": "Waiting", "lastTransitionTime": LATER}], LATER
    )
    assert merged == old
    # new type appended with a time
    merged = sm.merge_conditions(old, [{"type": "Backup", "status": "Unknown"}], LATER)
    assert merged[2] == {"type": "Backup", "status": "Unknown", "lastTransitionTime": LATER}


def test_plan_patch_merges_and_detects_no_change() -> None:
    old = {"conditions": [{"type": "Running", "status": "True", "lastTransitionTime": NOW}], "a": {"b": 1}}
    patch, changed, new = sm.plan_status_patch(old, {"a": {"c": 2}, "x": "y"}, [], False, LATER)
    assert changed and patch == {"a": {"c": 2}, "x": "y"}
    assert new == {"conditions": old["conditions"], "a": {"b": 1, "c": 2}, "x": "y"}
    _, changed, same = sm.plan_status_patch(new, {"a": {"c": 2}, "x": "y"}, [], False, LATER)
    assert not changed and same == new
    # null deletes a key (merge patch semantics)
    _, changed, new2 = sm.plan_status_patch(new, {"x": None}, [], False, LATER)
    assert changed and "x" not in new2
    _, changed, _ = sm.plan_status_patch(new2, {"x": None}, [], False, LATER)
    assert not changed


def test_plan_patch_lists_follow_replace_lists() -> None:
    old = {"nodes": ["a", "b", "c"]}
    _, changed, new = sm.plan_status_patch(old, {"nodes": ["a", "b"]}, [], False, LATER)
    assert not changed and new == old  # subset -> SDK treats as unchanged
    _, changed, new = sm.plan_status_patch(old, {"nodes": ["a", "b"]}, [], True, LATER)
    assert changed and new == {"nodes": ["a", "b"]}
    _, changed, new = sm.plan_status_patch(old, {"nodes": ["d"]}, [], False, LATER)
    assert changed and new == {"nodes": ["d"]}


def test_plan_patch_conditions_and_conflict() -> None:
    old = {"conditions": [{"type": "Running", "status": "True", "lastTransitionTime": NOW}]}
    cond = sm.validate_conditions([{"type": "Ready", "status": "True"}])
    patch, changed, new = sm.plan_status_patch(old, None, cond, False, LATER)
    assert changed and [c["type"] for c in patch["conditions"]] == ["Running", "Ready"]
    _, changed, _ = sm.plan_status_patch(new, None, cond, False, "2027-01-01T00:00:00Z")
    assert not changed
    with pytest.raises(sm.ConditionError, match="not both"):
        sm.plan_status_patch(old, {"conditions": []}, cond, False, LATER)


def test_plan_replace() -> None:
    old = {"a": 1, "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": NOW},
                                  {"type": "Old", "status": "True", "lastTransitionTime": NOW}]}
    cond = sm.validate_conditions([{"type": "Ready", "status": "True"}])
    new, changed = sm.plan_status_replace(old, {"b": 2}, cond, LATER)
    assert changed
    assert new == {"b": 2, "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": NOW}]}
    assert sm.plan_status_replace(new, {"b": 2}, cond, LATER) == (new, False)


def test_apply_merge_patch() -> None:
    assert sm.apply_merge_patch({"a": {"b": 1, "c": 2}, "l": [1]}, {"a": {"b": None, "d": 3}, "l": [2]}) == {
        "a": {"c": 2, "d": 3},
        "l": [2],
    }


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("30s", 30.0), ("1m30s", 90.0), ("1.5h", 5400.0), ("500ms", 0.5), ("45", 45.0), ("0", 0.0), (12, 12.0)],
)
def test_duration_ok(text: object, seconds: float) -> None:
    assert dur.parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "-5s", "5 minutes", "1d", "s", True, None])
def test_duration_bad(text: object) -> None:
    with pytest.raises(ValueError, match="invalid duration"):
        dur.parse_duration(text)
