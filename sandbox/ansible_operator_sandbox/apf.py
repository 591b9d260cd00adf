"""API Priority and Fairness objects (``flowcontrol.apiserver.k8s.io/v1``), as kube-apiserver keeps them.

kube-apiserver's APF config producer creates the mandatory and suggested configuration at start
(``apf_bootstrap.json``: eight PriorityLevelConfigurations, eleven FlowSchemas, each annotated
``apf.kubernetes.io/autoupdate-spec: "true"``), and its config consumer applies a ``Dangling`` condition to
every FlowSchema saying whether the priority level it names exists. Both are done here with the same field
managers: the bootstrap objects that are missing at start are created (a data dir keeps the others as they
are), and :mod:`simulate` keeps the conditions current. The sandbox serves the objects only: it does not
classify, queue or reject requests by them, and unlike the real producer (at start, then every minute) it
neither re-creates a deleted bootstrap object while running nor resets an edited one's spec.
"""

from __future__ import annotations

import functools
import json
import logging
from importlib import resources
from typing import Any

from ansible_operator_sandbox.api import Api, WriteOptions
from ansible_operator_sandbox.errors import ApiError
from ansible_operator_sandbox.timeutil import now_rfc3339

log = logging.getLogger(__name__)

GROUP = "flowcontrol.apiserver.k8s.io"
FLOWSCHEMAS = f"{GROUP}/flowschemas"
PRIORITY_LEVELS = f"{GROUP}/prioritylevelconfigurations"
AUTOUPDATE_ANNOTATION = "apf.kubernetes.io/autoupdate-spec"
PRODUCER = "api-priority-and-fairness-config-producer-v1"  # creates the bootstrap configuration
CONSUMER = "api-priority-and-fairness-config-consumer-v1"  # applies the Dangling condition
_KINDS = {"prioritylevelconfigurations": "PriorityLevelConfiguration", "flowschemas": "FlowSchema"}


@functools.cache
def _bootstrap_data() -> dict[str, Any]:
    return json.loads(resources.files(__package__).joinpath("apf_bootstrap.json").read_text())  # type: ignore[no-any-return]


def bootstrap_objects() -> list[tuple[str, dict[str, Any]]]:
    """(plural, object) of the configuration kube-apiserver creates at start, in its order (levels first)."""
    out = []
    for plural, kind in _KINDS.items():
        for entry in _bootstrap_data()[plural]:
            out.append((plural, {
                "apiVersion": f"{GROUP}/v1", "kind": kind,
                "metadata": {"name": entry["name"], "annotations": {AUTOUPDATE_ANNOTATION: "true"}},
                "spec": json.loads(json.dumps(entry["spec"])),
            }))
    return out


def ensure_bootstrap(api: Api) -> None:
    """Create the bootstrap objects that are missing (a data dir keeps the ones it has, edits included),
    then bring every FlowSchema's Dangling condition up to date."""
    for plural, obj in bootstrap_objects():
        rtype = api.registry.get(GROUP, "v1", plural)
        assert rtype is not None
        if api.store.peek(api.key(rtype, None, obj["metadata"]["name"])) is None:
            api.create(rtype, None, obj, WriteOptions(field_manager=PRODUCER))
    sync_conditions(api)


def dangling_condition(level: str, exists: bool) -> tuple[str, str, str]:
    """(status, reason, message) of the Dangling condition for a FlowSchema naming priority level ``level``,
    worded as the config consumer (k8s.io/apiserver/pkg/util/flowcontrol/apf_controller.go) words it."""
    if exists:
        return ("False", "Found",
                f"This FlowSchema references the PriorityLevelConfiguration object named {json.dumps(level)} "
                "and it exists")
    return ("True", "NotFound",
            f"This FlowSchema references the PriorityLevelConfiguration object named {json.dumps(level)} "
            "but there is no such object")


def sync_conditions(api: Api) -> None:
    """Apply the Dangling condition to each FlowSchema whose condition is missing or out of date (its status,
    reason or message; ``lastTransitionTime`` is the time of the write), as the config consumer does: a
    server-side apply of the status subresource, forced, by its field manager."""
    fs_type = api.registry.get(GROUP, "v1", "flowschemas")
    if fs_type is None:
        return
    levels = {(obj.get("metadata") or {}).get("name") for _, obj in api.store.items(PRIORITY_LEVELS)}
    for _, fs in list(api.store.items(FLOWSCHEMAS)):
        meta = fs.get("metadata") or {}
        if meta.get("deletionTimestamp"):
            continue
        level = str(((fs.get("spec") or {}).get("priorityLevelConfiguration") or {}).get("name", ""))
        status, reason, message = dangling_condition(level, level in levels)
        current = next((c for c in (fs.get("status") or {}).get("conditions") or []
                        if isinstance(c, dict) and c.get("type") == "Dangling"), {})
        if [current.get(k) for k in ("status", "reason", "message")] == [status, reason, message]:
            continue
        body = {"apiVersion": f"{GROUP}/v1", "kind": "FlowSchema", "metadata": {"name": meta["name"]},
                "status": {"conditions": [{"type": "Dangling", "status": status,
                                           "lastTransitionTime": now_rfc3339(), "reason": reason,
                                           "message": message}]}}
        try:
            api.patch(fs_type, None, meta["name"], "application/apply-patch+yaml", json.dumps(body).encode(),
                      subresource="status", opts=WriteOptions(field_manager=CONSUMER, force=True))
        except ApiError as e:  # deleted meanwhile (its event brings another pass): go on with the others
            log.debug("APF Dangling condition of FlowSchema %s: %s", meta["name"], e.message)
