"""``RunResult`` → status conditions (pure functions; the caller does the HTTP). Events: ``events.py``.

The condition shape is Operator SDK's Ansible operator's: ``status.conditions`` holds ``Running``,
``Successful`` and ``Failure`` conditions with ``status`` "True"/"False", ``reason``, ``message``,
``lastTransitionTime`` and, on the final conditions of a run, ``ansibleResult`` {ok, changed, skipped,
failures, completion}. Differences from the SDK (see docs/status.md):

* after a run ``Running`` is ``False`` (reason ``Successful``/``Failed``); the SDK leaves it ``True`` with
  reason ``Successful`` "Awaiting next reconciliation", which makes "is it running?" unanswerable;
* every condition carries ``observedGeneration`` and so does ``status`` itself;
* ``message``/``ansibleResult`` are refreshed on every run (the SDK skips the update when status and
  reason are unchanged, leaving stale counts); ``lastTransitionTime`` still only moves when ``status``
  flips (Kubernetes convention);
* ``ansibleResult.failures`` counts unreachable hosts too;
* input refused before any run (``extravars.RefusedVariable``) gives ``Failure`` with reason ``Refused``;
* a run stopped by the operator's shutdown sets ``Running`` to ``False`` with reason ``Interrupted``
  (the SDK leaves ``Running=True`` with nobody running); ``Successful``/``Failure`` keep what the last
  finished run said.

Every other status field, and conditions of other types (a role may write its own through
``k8s_status``), are kept: callers pass the status read just before writing.
"""

from __future__ import annotations

import copy
from datetime import datetime, timezone
from typing import Any, Mapping

from ansible_operator.results import RunResult

__all__ = [
    "CONDITION_TYPES",
    "RUNNING_MESSAGE",
    "SUCCESSFUL_MESSAGE",
    "running_status",
    "result_status",
    "refused_status",
    "interrupted_status",
    "merge_conditions",
    "ansible_result",
    "format_time",
]

CONDITION_TYPES = ("Running", "Successful", "Failure")

RUNNING_REASON = "Running"
SUCCESSFUL_REASON = "Successful"
FAILED_REASON = "Failed"
REFUSED_REASON = "Refused"
INTERRUPTED_REASON = "Interrupted"

RUNNING_MESSAGE = "Running reconciliation"
AWAITING_MESSAGE = "Awaiting next reconciliation"
SUCCESSFUL_MESSAGE = "Last reconciliation succeeded"
FAILED_MESSAGE = "Last reconciliation failed"

MAX_MESSAGE = 32768
"""Condition messages are kept whole up to this size (an API server limits the object, not the field)."""


def format_time(now: datetime) -> str:
    """RFC 3339 in UTC with second precision, as ``metav1.Time`` serializes (``2026-11-22T13:45:01Z``)."""
    if now.tzinfo is None:
        now = now.replace(tzinfo=timezone.utc)
    return now.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _completion_time(now: datetime) -> str:
    """``ansibleResult.completion`` keeps microseconds like the SDK's eventapi.EventTime."""
    if now.tzinfo is None:
        now = now.replace(tzinfo=timezone.utc)
    return now.astimezone(timezone.utc).isoformat()


Condition = dict[str, Any]


def merge_conditions(existing: list[Condition] | None, updates: list[Condition]) -> list[Condition]:
    """Replace conditions by ``type``, keeping the existing order and appending new types.

    An update's ``lastTransitionTime`` is replaced by the existing one when ``status`` did not change.
    Entries of ``existing`` that are not mappings with a ``type`` are dropped (the SDK drops them too).
    """
    merged: list[Condition] = [copy.deepcopy(c) for c in existing or []
                               if isinstance(c, Mapping) and "type" in c]
    index = {c["type"]: i for i, c in enumerate(merged)}
    for update in updates:
        new = copy.deepcopy(dict(update))
        i = index.get(new["type"])
        if i is None:
            index[new["type"]] = len(merged)
            merged.append(new)
            continue
        old = merged[i]
        if old.get("status") == new.get("status") and old.get("lastTransitionTime"):
            new["lastTransitionTime"] = old["lastTransitionTime"]
        merged[i] = new
    return merged


def ansible_result(result: RunResult, now: datetime) -> dict[str, Any]:
    return {
        "ok": result.ok,
        "changed": result.changed,
        "skipped": result.skipped,
        "failures": result.failures + result.unreachable,
        "completion": _completion_time(now),
    }


def _condition(ctype: str, status: bool, reason: str, message: str, *, now: datetime,
               generation: int | None, result: dict[str, Any] | None = None) -> dict[str, Any]:
    cond: dict[str, Any] = {
        "type": ctype,
        "status": "True" if status else "False",
        "reason": reason,
        "message": message if len(message) <= MAX_MESSAGE else message[: MAX_MESSAGE - 1] + "…",
        "lastTransitionTime": format_time(now),
    }
    if generation is not None:
        cond["observedGeneration"] = generation
    if result is not None:
        cond["ansibleResult"] = result
    return cond


def _with_conditions(current: Mapping[str, Any] | None, updates: list[dict[str, Any]], generation: int | None,
                     *, observed: bool = True) -> dict[str, Any]:
    status = copy.deepcopy(dict(current)) if isinstance(current, Mapping) else {}
    existing = status.get("conditions")
    status["conditions"] = merge_conditions(existing if isinstance(existing, list) else [], updates)
    if observed and generation is not None:
        status["observedGeneration"] = generation
    return status


def running_status(current: Mapping[str, Any] | None, *, generation: int | None,
                   now: datetime) -> dict[str, Any]:
    """Status body for "a run started": Running=True; Successful/Failure are left as the last run set them.

    ``status.observedGeneration`` is not moved here: it says which generation the *conditions* describe,
    and the result is not known yet.
    """
    running = _condition("Running", True, RUNNING_REASON, RUNNING_MESSAGE, now=now, generation=generation)
    return _with_conditions(current, [running], generation, observed=False)


def result_status(current: Mapping[str, Any] | None, result: RunResult, *, generation: int | None,
                  now: datetime) -> dict[str, Any]:
    """Status body after a run (see the module docstring for the exact conditions)."""
    ar = ansible_result(result, now)
    if result.succeeded:
        updates = [
            _condition("Running", False, SUCCESSFUL_REASON, AWAITING_MESSAGE, now=now,
                       generation=generation, result=ar),
            _condition("Successful", True, SUCCESSFUL_REASON, SUCCESSFUL_MESSAGE, now=now,
                       generation=generation, result=ar),
            _condition("Failure", False, SUCCESSFUL_REASON, "", now=now, generation=generation),
        ]
    else:
        message = result.message
        updates = [
            _condition("Running", False, FAILED_REASON, message, now=now, generation=generation, result=ar),
            _condition("Successful", False, FAILED_REASON, FAILED_MESSAGE, now=now, generation=generation),
            _condition("Failure", True, FAILED_REASON, message, now=now, generation=generation, result=ar),
        ]
    return _with_conditions(current, updates, generation)


def refused_status(current: Mapping[str, Any] | None, *, message: str, generation: int | None,
                   now: datetime) -> dict[str, Any]:
    """Status body when the object was refused before any run (e.g. a spec field mapping to ``ansible_*``).

    Reason ``Refused`` on all three conditions; no ``ansibleResult`` since nothing ran.
    """
    updates = [
        _condition("Running", False, REFUSED_REASON, message, now=now, generation=generation),
        _condition("Successful", False, REFUSED_REASON, FAILED_MESSAGE, now=now, generation=generation),
        _condition("Failure", True, REFUSED_REASON, message, now=now, generation=generation),
    ]
    return _with_conditions(current, updates, generation)


def interrupted_status(current: Mapping[str, Any] | None, *, message: str, generation: int | None,
                       now: datetime) -> dict[str, Any]:
    """Status body when a run was stopped before it ended (the operator shutting down): ``Running`` goes
    ``False`` with reason ``Interrupted``; ``Successful``/``Failure`` and ``observedGeneration`` stay what
    the last finished run made them (nothing was concluded)."""
    running = _condition("Running", False, INTERRUPTED_REASON, message, now=now, generation=generation)
    return _with_conditions(current, [running], generation, observed=False)
