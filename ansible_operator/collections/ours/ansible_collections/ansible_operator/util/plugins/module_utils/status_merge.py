# -*- coding: utf-8 -*-
# Apache-2.0 (see the project's LICENSE)
"""Pure status/condition merging for ``ansible_operator.util.k8s_status``.

Kept free of Ansible and Kubernetes imports so the rules can be unit-tested directly and so the
module itself stays a thin "read, merge, write" shell.

The rules follow Operator SDK's ``operator_sdk.util.k8s_status`` so roles written for it behave the
same here:

* ``status`` is sent as a JSON merge patch of ``.status``: nested dicts merge, ``null`` deletes a key,
  lists are replaced as a whole.
* Whether anything changed is decided like SDK's ``object_contains``: a list given in ``status`` whose
  items are all already present counts as "no change" (and is therefore not written) unless
  ``replace_lists`` is true, in which case lists must be equal.
* ``conditions`` merge by ``type``: an existing condition is only replaced when some field other than
  ``lastTransitionTime`` differs; new types are appended; conditions the task does not mention are kept.
* Beyond SDK (Kubernetes API conventions): when a condition's ``status`` value is unchanged its old
  ``lastTransitionTime`` is kept, and a condition that transitions (or is new) without an explicit
  ``lastTransitionTime`` gets the current time.
"""

from __future__ import absolute_import, annotations, division, print_function

import copy
import datetime
import re
from typing import TYPE_CHECKING

__metaclass__ = type

if TYPE_CHECKING:  # annotations only: never evaluated (postponed), so no import at run time
    from typing import Any, Sequence

CONDITION_KEYS = ("type", "status", "reason", "message", "lastHeartbeatTime", "lastTransitionTime")
CONDITION_STATUSES = ("True", "False", "Unknown")
_CAMEL_CASE = re.compile(r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")
_RFC3339 = re.compile(r"^\d{4}-\d\d-\d\d[Tt ]\d\d:\d\d(:\d\d)?(\.\d+)?(([+-]\d\d:\d\d)|[Zz])$")


class ConditionError(ValueError):
    """A condition given to the module is malformed; the message names the offending field."""


def now_rfc3339() -> str:
    """Current UTC time the way Kubernetes serialises ``metav1.Time`` (seconds, ``Z``)."""
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def validate_conditions(conditions: object) -> list[dict[str, Any]]:
    """Check and normalise conditions (SDK rules); returns new dicts without ``None`` values.

    Booleans for ``status`` become ``"True"``/``"False"`` because YAML turns an unquoted ``True`` into
    a boolean and users rarely mean anything else.
    """
    if conditions is None:
        return []
    if not isinstance(conditions, list):
        raise ConditionError("`conditions` must be a list of objects")
    out: list[dict[str, Any]] = []
    for index, condition in enumerate(conditions):
        where = "conditions[{0}]".format(index)
        if not isinstance(condition, dict):
            raise ConditionError("{0} must be an object, got {1!r}".format(where, condition))
        cleaned: dict[str, Any] = {}
        for key, value in condition.items():
            if key not in CONDITION_KEYS:
                raise ConditionError(
                    "{0}: {1!r} is not a valid condition field; accepted fields are {2}".format(
                        where, key, ", ".join(CONDITION_KEYS)
                    )
                )
            if value is None:
                continue
            cleaned[key] = value
        if isinstance(cleaned.get("status"), bool):
            cleaned["status"] = "True" if cleaned["status"] else "False"
        for key in ("type", "status"):
            if not cleaned.get(key):
                raise ConditionError("{0}: `{1}` must be set".format(where, key))
        if cleaned["status"] not in CONDITION_STATUSES:
            raise ConditionError(
                "{0}: status must be one of \"True\", \"False\", \"Unknown\", not {1!r}".format(
                    where, cleaned["status"]
                )
            )
        reason = cleaned.get("reason")
        if reason and not (isinstance(reason, str) and _CAMEL_CASE.match(reason)):
            raise ConditionError("{0}: reason {1!r} must be a single CamelCase word".format(where, reason))
        for key in ("lastHeartbeatTime", "lastTransitionTime"):
            value = cleaned.get(key)
            if value and not (isinstance(value, str) and _RFC3339.match(value)):
                raise ConditionError(
                    "{0}: {1} {2!r} must be an RFC 3339 date-time such as 2024-01-31T12:00:00Z".format(
                        where, key, value
                    )
                )
        out.append(cleaned)
    return out


def _find(conditions: Sequence[object], type_: object) -> int | None:
    for index, condition in enumerate(conditions):
        if isinstance(condition, dict) and condition.get("type") == type_:
            return index
    return None


def merge_conditions(old: object, new: list[dict[str, Any]], now: str) -> list[Any]:
    """Merge validated ``new`` conditions into ``old`` by type (see module docstring); returns a new list."""
    merged: list[Any] = copy.deepcopy(old) if isinstance(old, list) else []
    for condition in new:
        index = _find(merged, condition["type"])
        if index is None:
            added = dict(condition)
            added.setdefault("lastTransitionTime", now)
            merged.append(added)
            continue
        previous = merged[index]
        transitioned = any(
            key != "lastTransitionTime" and value != previous.get(key) for key, value in condition.items()
        )
        if not transitioned:
            continue
        replacement = dict(condition)
        if condition["status"] == previous.get("status") and previous.get("lastTransitionTime"):
            replacement["lastTransitionTime"] = previous["lastTransitionTime"]
        else:
            replacement.setdefault("lastTransitionTime", now)
        merged[index] = replacement
    return merged


def contains(old: object, patch: dict[str, Any] | None, replace_lists: bool) -> bool:
    """True when applying ``patch`` (a merge patch of a status dict) to ``old`` would change nothing.

    Mirrors SDK's ``object_contains``: lists are compared as "every patch item already present" unless
    ``replace_lists`` (never for ``conditions``, whose merge already produced the full wanted list).
    """

    def value_contains(old_value: object, new_value: object, key: str) -> bool:
        if isinstance(new_value, dict):
            if not isinstance(old_value, dict):
                return False
            return all(value_contains(old_value.get(k), v, k) for k, v in new_value.items())
        if isinstance(new_value, (list, tuple)):
            if not isinstance(old_value, list):
                return False
            if key == "conditions":
                return list(new_value) == old_value
            if replace_lists:
                return list(new_value) == old_value
            return all(item in old_value for item in new_value)
        return old_value == new_value

    if not isinstance(old, dict):
        old = {}
    return all(value_contains(old.get(k), v, k) for k, v in (patch or {}).items())


def apply_merge_patch(target: object, patch: object) -> Any:
    """RFC 7386 JSON merge patch (what the API server does with ``application/merge-patch+json``)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = apply_merge_patch(result.get(key), value)
    return result


def plan_status_patch(
    old_status: object,
    status: dict[str, Any] | None,
    conditions: list[dict[str, Any]],
    replace_lists: bool,
    now: str | None = None,
) -> tuple[dict[str, Any], bool, dict[str, Any]]:
    """Work out the merge patch for ``.status`` and whether it changes anything.

    Returns ``(patch, changed, new_status)`` where ``new_status`` is what ``.status`` will be after the
    write (used for check mode and for the module result).
    """
    now = now or now_rfc3339()
    old_status = old_status if isinstance(old_status, dict) else {}
    patch = copy.deepcopy(status) if status else {}
    if conditions:
        if "conditions" in patch:
            raise ConditionError("give conditions either in `status.conditions` or in `conditions`, not both")
        patch["conditions"] = merge_conditions(old_status.get("conditions"), conditions, now)
    if not patch:
        return {}, False, copy.deepcopy(old_status)
    if contains(old_status, patch, replace_lists):
        return patch, False, copy.deepcopy(old_status)
    return patch, True, apply_merge_patch(old_status, patch)


def plan_status_replace(
    old_status: object,
    status: dict[str, Any] | None,
    conditions: list[dict[str, Any]],
    now: str | None = None,
) -> tuple[dict[str, Any], bool]:
    """``replace: true``: the whole ``.status`` becomes ``status`` (+ merged ``conditions``).

    Conditions still keep their old ``lastTransitionTime`` when their status did not change, so a
    replace that restates the same condition is not reported as a change.
    """
    now = now or now_rfc3339()
    old_status = old_status if isinstance(old_status, dict) else {}
    new_status = copy.deepcopy(status) if status else {}
    if conditions:
        if "conditions" in new_status:
            raise ConditionError("give conditions either in `status.conditions` or in `conditions`, not both")
        kept = [
            c for c in (old_status.get("conditions") or []) if _find(conditions, c.get("type")) is not None
        ]
        new_status["conditions"] = merge_conditions(kept, conditions, now)
    return new_status, new_status != old_status
