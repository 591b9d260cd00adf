"""``RunResult`` → status conditions (pure functions; the caller does the HTTP). Events: ``events.py``.

The condition shape is Operator SDK's Ansible operator's: ``status.conditions`` holds ``Running``,
``Successful`` and ``Failure`` conditions with ``status`` "True"/"False", ``reason``, ``message``,
``lastTransitionTime`` and, on the final conditions of a run, ``ansibleResult`` {ok, changed, skipped,
failures, completion}. Differences from the SDK (see docs/reference/status.md):

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

:class:`Conditions` chooses: ``sdk`` (``--sdk-conditions``) writes them exactly as the SDK does instead
(``Successful`` goes ``False`` when a run starts, ``Running`` stays ``True`` after a success);
``kstatus`` (``--kstatus-conditions``) adds ``Ready``, ``Reconciling`` and ``Stalled``, as kstatus
(``sigs.k8s.io/cli-utils``), Flux's health checks and ``kubectl wait --for=condition=Ready`` read them.

Every other status field, and conditions of other types (a role may write its own through
``k8s_status``), are kept: callers pass the status read just before writing.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Literal, Mapping, cast

from ansible_operator.kubetypes import AnsibleResult, Condition, StatusBody
from ansible_operator.results import RunResult

__all__ = [
    "CONDITION_TYPES",
    "Conditions",
    "RUNNING_MESSAGE",
    "SUCCESSFUL_MESSAGE",
    "running_status",
    "result_status",
    "refused_status",
    "interrupted_status",
    "merge_conditions",
    "ansible_result",
    "format_time",
    "converged",
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


def merge_conditions(existing: list[Condition] | None, updates: list[Condition]) -> list[Condition]:
    """Replace conditions by ``type``, keeping the existing order and appending new types.

    An update's ``lastTransitionTime`` is replaced by the existing one when ``status`` did not change.
    Entries of ``existing`` that are not mappings with a ``type`` are dropped (the SDK drops them too).
    """
    merged: list[Condition] = [copy.deepcopy(c) for c in existing or []
                               if isinstance(c, Mapping) and "type" in c]
    index = {c["type"]: i for i, c in enumerate(merged)}
    for update in updates:
        new = cast(Condition, copy.deepcopy(dict(update)))
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


def ansible_result(result: RunResult, now: datetime) -> AnsibleResult:
    return {
        "ok": result.ok,
        "changed": result.changed,
        "skipped": result.skipped,
        "failures": result.failures + result.unreachable,
        "completion": _completion_time(now),
    }


def _condition(ctype: str, status: bool, reason: str, message: str, *, now: datetime,
               generation: int | None, result: AnsibleResult | None = None) -> Condition:
    cond: Condition = {
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


def _with_conditions(current: Mapping[str, Any] | None, updates: list[Condition], generation: int | None,
                     *, observed: bool = True) -> StatusBody:
    # the status read back (a role's own fields kept): typed for the fields written here
    status = cast(StatusBody, copy.deepcopy(dict(current))) if isinstance(current, Mapping) else StatusBody()
    existing = status.get("conditions")
    status["conditions"] = merge_conditions(existing if isinstance(existing, list) else [], updates)
    if observed and generation is not None:
        status["observedGeneration"] = generation
    return status


@dataclass(frozen=True)
class Conditions:
    """Which conditions the runner writes (see the module docstring)."""

    sdk: bool = False
    """Operator SDK's exact conditions (``--sdk-conditions``)."""
    kstatus: bool = False
    """Also ``Ready``/``Reconciling``/``Stalled`` (``--kstatus-conditions``)."""


DEFAULT = Conditions()

Phase = Literal["running", "succeeded", "failed", "refused", "interrupted"]


def _kstatus(style: Conditions, phase: Phase, message: str, *, now: datetime,
             generation: int | None) -> list[Condition]:
    """kstatus' conditions for a phase: ``Reconciling`` while a run is in flight; ``Ready`` once the current
    spec was applied; ``Stalled`` after a failure (reconciled again with backoff: kstatus then reports
    Failed, with the message, until a run succeeds)."""
    if not style.kstatus:
        return []
    reason = {"running": RUNNING_REASON, "succeeded": SUCCESSFUL_REASON, "failed": FAILED_REASON,
              "refused": REFUSED_REASON, "interrupted": INTERRUPTED_REASON}[phase]
    reconciling = phase == "running"
    ready = phase == "succeeded"
    stalled = phase in ("failed", "refused")
    text = {"running": RUNNING_MESSAGE, "succeeded": SUCCESSFUL_MESSAGE}.get(phase, message)
    return [
        _condition("Reconciling", reconciling, reason, text if reconciling else "", now=now,
                   generation=generation),
        _condition("Ready", ready, reason, text, now=now, generation=generation),
        _condition("Stalled", stalled, reason, text if stalled else "", now=now, generation=generation),
    ]


def _flipped(current: Mapping[str, Any] | None, ctype: str, status: bool, *, now: datetime,
             generation: int | None) -> list[Condition]:
    """The existing ``ctype`` condition with only its status changed (the SDK's GetCondition/SetCondition
    pattern: reason and message stay); nothing when there is none."""
    conditions = current.get("conditions") if isinstance(current, Mapping) else None
    for cond in conditions if isinstance(conditions, list) else []:
        if isinstance(cond, Mapping) and cond.get("type") == ctype:
            flipped = cast(Condition, dict(cond))  # as read back: reason and message kept
            wanted = "True" if status else "False"
            if flipped.get("status") != wanted:
                flipped["lastTransitionTime"] = format_time(now)
            flipped["status"] = wanted
            if generation is not None:
                flipped["observedGeneration"] = generation
            return [flipped]
    return []


def running_status(current: Mapping[str, Any] | None, *, generation: int | None,
                   now: datetime, style: Conditions = DEFAULT) -> StatusBody:
    """Status body for "a run started": Running=True; Successful/Failure are left as the last run set them
    (with ``style.sdk``: Successful goes False, as the SDK's ``markRunning``).

    ``status.observedGeneration`` is not moved here: it says which generation the *conditions* describe,
    and the result is not known yet.
    """
    updates = _flipped(current, "Successful", False, now=now, generation=generation) if style.sdk else []
    updates.append(_condition("Running", True, RUNNING_REASON, RUNNING_MESSAGE, now=now,
                              generation=generation))
    updates += _kstatus(style, "running", RUNNING_MESSAGE, now=now, generation=generation)
    return _with_conditions(current, updates, generation, observed=False)


def result_status(current: Mapping[str, Any] | None, result: RunResult, *, generation: int | None,
                  now: datetime, style: Conditions = DEFAULT) -> StatusBody:
    """Status body after a run (see the module docstring for the exact conditions)."""
    ar = ansible_result(result, now)
    message = result.message
    if style.sdk and result.succeeded:  # the SDK's markDone
        updates = [
            _condition("Running", True, SUCCESSFUL_REASON, AWAITING_MESSAGE, now=now, generation=generation,
                       result=ar),
            _condition("Successful", True, SUCCESSFUL_REASON, SUCCESSFUL_MESSAGE, now=now,
                       generation=generation),
            _condition("Failure", False, "", "", now=now, generation=generation),
        ]
    elif style.sdk:
        updates = _flipped(current, "Running", False, now=now, generation=generation) + [
            _condition("Failure", True, FAILED_REASON, message, now=now, generation=generation, result=ar),
            _condition("Successful", False, "", "", now=now, generation=generation),
        ]
    elif result.succeeded:
        updates = [
            _condition("Running", False, SUCCESSFUL_REASON, AWAITING_MESSAGE, now=now,
                       generation=generation, result=ar),
            _condition("Successful", True, SUCCESSFUL_REASON, SUCCESSFUL_MESSAGE, now=now,
                       generation=generation, result=ar),
            _condition("Failure", False, SUCCESSFUL_REASON, "", now=now, generation=generation),
        ]
    else:
        updates = [
            _condition("Running", False, FAILED_REASON, message, now=now, generation=generation, result=ar),
            _condition("Successful", False, FAILED_REASON, FAILED_MESSAGE, now=now, generation=generation),
            _condition("Failure", True, FAILED_REASON, message, now=now, generation=generation, result=ar),
        ]
    updates += _kstatus(style, "succeeded" if result.succeeded else "failed", message, now=now,
                        generation=generation)
    return _with_conditions(current, updates, generation)


def refused_status(current: Mapping[str, Any] | None, *, message: str, generation: int | None,
                   now: datetime, style: Conditions = DEFAULT) -> StatusBody:
    """Status body when the object was refused before any run (e.g. a spec field mapping to ``ansible_*``).

    Reason ``Refused`` on all three conditions; no ``ansibleResult`` since nothing ran. (``style.sdk``: as
    the SDK's ``markError``: Running and Successful go False as they are, Failure True, reason Failed.)
    """
    if style.sdk:
        updates = (_flipped(current, "Running", False, now=now, generation=generation)
                   + _flipped(current, "Successful", False, now=now, generation=generation)
                   + [_condition("Failure", True, FAILED_REASON, message, now=now, generation=generation)])
    else:
        updates = [
            _condition("Running", False, REFUSED_REASON, message, now=now, generation=generation),
            _condition("Successful", False, REFUSED_REASON, FAILED_MESSAGE, now=now, generation=generation),
            _condition("Failure", True, REFUSED_REASON, message, now=now, generation=generation),
        ]
    updates += _kstatus(style, "refused", message, now=now, generation=generation)
    return _with_conditions(current, updates, generation)


def interrupted_status(current: Mapping[str, Any] | None, *, message: str, generation: int | None,
                       now: datetime, style: Conditions = DEFAULT) -> StatusBody:
    """Status body when a run was stopped before it ended (the operator shutting down): ``Running`` goes
    ``False`` with reason ``Interrupted``; ``Successful``/``Failure`` and ``observedGeneration`` stay what
    the last finished run made them (nothing was concluded)."""
    updates = [_condition("Running", False, INTERRUPTED_REASON, message, now=now, generation=generation)]
    updates += _kstatus(style, "interrupted", message, now=now, generation=generation)
    return _with_conditions(current, updates, generation, observed=False)


def converged(obj: Mapping[str, Any]) -> bool:
    """Whether the status says the object's current spec was applied and nothing is pending: a ``Successful``
    condition ``True`` whose ``observedGeneration`` (or, failing that, ``status.observedGeneration``) is
    ``metadata.generation``, and no run left in flight (``Running`` ``True`` with reason ``Running``: an
    operator killed mid-run). Both condition styles qualify (``--sdk-conditions`` sets ``Successful`` to
    ``False`` when a run starts). No generation, no status, conditions without ``observedGeneration`` (an
    Operator SDK operator wrote them), a deletion: not converged."""
    meta = obj.get("metadata")
    status = obj.get("status")
    if not isinstance(meta, Mapping) or not isinstance(status, Mapping) or meta.get("deletionTimestamp"):
        return False
    generation = meta.get("generation")
    conditions = status.get("conditions")
    if not isinstance(generation, int) or not isinstance(conditions, list):
        return False
    successful = False
    for cond in conditions:
        if not isinstance(cond, Mapping):
            continue
        in_flight = cond.get("type") == "Running" and cond.get("reason") == RUNNING_REASON
        if in_flight and cond.get("status") == "True":
            return False
        if cond.get("type") == "Successful" and cond.get("status") == "True":
            observed = cond.get("observedGeneration", status.get("observedGeneration"))
            successful = observed == generation
    return successful
