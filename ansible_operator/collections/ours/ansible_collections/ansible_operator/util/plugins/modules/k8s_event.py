#!/usr/bin/python
# -*- coding: utf-8 -*-
# Apache-2.0 (see the project's LICENSE)

from __future__ import absolute_import, annotations, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: k8s_event
short_description: Record a Kubernetes Event (core/v1) about an object
description:
  - Creates or updates a C(core/v1) Event the way Operator SDK's C(operator_sdk.util.k8s_event) does
    (that name is redirected here). Recording an Event with the same name and reason again increments
    its C(count) and moves C(lastTimestamp); a different reason starts the count again.
  - With I(appendTimestamp) every call creates a new Event named C(<name>.<hex nanoseconds>), the naming
    client-go's event recorder uses.
  - The involved object's C(uid) and C(resourceVersion) are looked up when not given.
extends_documentation_fragment:
  - kubernetes.core.k8s_auth_options
options:
  state:
    description: C(present) records the Event, C(absent) deletes the Event named I(name).
    type: str
    default: present
    choices: [present, absent]
  name:
    description: Event name (a prefix when I(appendTimestamp) is true).
    type: str
    required: true
  namespace:
    description: Namespace of the Event (normally the involved object's namespace).
    type: str
    required: true
  message:
    description: Human readable description. Required when I(state=present).
    type: str
  reason:
    description: Short CamelCase reason. Required when I(state=present).
    type: str
  type:
    description: Event type.
    type: str
    default: Normal
    choices: [Normal, Warning]
  reportingComponent:
    description: Name of the controller that emitted the Event.
    type: str
  appendTimestamp:
    description: Make the name unique per call so each call creates a new Event.
    type: bool
    default: false
  merge_type:
    description: Accepted for compatibility with Operator SDK's module; updates always use a JSON merge patch.
    type: list
    elements: str
    choices: [json, merge, strategic-merge]
  source:
    description: Event source.
    type: dict
    suboptions:
      component: {description: Component name., type: str, required: true}
      host: {description: Node name., type: str}
  involvedObject:
    description: The object the Event is about.
    type: dict
    suboptions:
      apiVersion: {description: API version., type: str, required: true}
      kind: {description: Kind., type: str, required: true}
      name: {description: Name., type: str, required: true}
      namespace: {description: Namespace (omit for cluster-scoped objects)., type: str}
      uid: {description: UID (looked up when omitted)., type: str}
      resourceVersion: {description: Resource version (looked up when omitted)., type: str}
      fieldPath: {description: Field within the object the Event is about., type: str}
author: ansible-operator contributors
"""

EXAMPLES = r"""
- name: Tell users the backup finished
  ansible_operator.util.k8s_event:
    name: "{{ ansible_operator_meta.name }}-backup"
    namespace: "{{ ansible_operator_meta.namespace }}"
    reason: BackupDone
    message: "Backup {{ backup_id }} stored"
    type: Normal
    source:
      component: memcached-operator
    involvedObject:
      apiVersion: cache.example.com/v1alpha1
      kind: Memcached
      name: "{{ ansible_operator_meta.name }}"
      namespace: "{{ ansible_operator_meta.namespace }}"
"""

RETURN = r"""
result:
  description: The Event as stored (or as it would be stored, in check mode; empty after a delete).
  returned: success
  type: dict
"""

import copy  # noqa: E402
import datetime  # noqa: E402
import time  # noqa: E402
from typing import TYPE_CHECKING  # noqa: E402

from ansible_collections.ansible_operator.util.plugins.module_utils.k8s_common import (  # noqa: E402
    api_error,
    auth_argspec,
    client_for,
    find_resource,
    is_api_error,
)
from ansible_collections.kubernetes.core.plugins.module_utils.k8s.core import AnsibleK8SModule  # noqa: E402

if TYPE_CHECKING:  # annotations only: never evaluated (postponed), so no import at run time
    from typing import Any

    from ansible_collections.kubernetes.core.plugins.module_utils.k8s.client import K8SClient
    from kubernetes.dynamic.resource import Resource

EVENT_ARG_SPEC = {
    "state": {"type": "str", "default": "present", "choices": ["present", "absent"]},
    "name": {"type": "str", "required": True},
    "namespace": {"type": "str", "required": True},
    "message": {"type": "str"},
    "reason": {"type": "str"},
    "type": {"type": "str", "default": "Normal", "choices": ["Normal", "Warning"]},
    "reportingComponent": {"type": "str"},
    "appendTimestamp": {"type": "bool", "default": False},
    "merge_type": {"type": "list", "elements": "str", "choices": ["json", "merge", "strategic-merge"]},
    "source": {
        "type": "dict",
        "options": {"component": {"type": "str", "required": True}, "host": {"type": "str"}},
    },
    "involvedObject": {
        "type": "dict",
        "options": {
            "apiVersion": {"type": "str", "required": True},
            "kind": {"type": "str", "required": True},
            "name": {"type": "str", "required": True},
            "namespace": {"type": "str"},
            "uid": {"type": "str"},
            "resourceVersion": {"type": "str"},
            "fieldPath": {"type": "str"},
        },
    },
}


def argument_spec() -> dict[str, Any]:
    spec: dict[str, Any] = auth_argspec()
    spec.update(copy.deepcopy(EVENT_ARG_SPEC))
    return spec


def _drop_none(value: dict[str, Any]) -> dict[str, Any]:
    """``value`` without ``None`` entries, at every level of nested dicts."""
    return {k: _drop_none(v) if isinstance(v, dict) else v for k, v in value.items() if v is not None}


def _involved_object(module: AnsibleK8SModule, client: K8SClient) -> dict[str, Any]:
    """The involvedObject with uid/resourceVersion filled in from the API when the object exists."""
    involved = _drop_none(module.params.get("involvedObject") or {})
    if not involved or (involved.get("uid") and involved.get("resourceVersion")):
        return involved
    resource = find_resource(client, involved["kind"], involved["apiVersion"])
    if resource is None:
        return involved
    try:
        found = resource.get(name=involved["name"], namespace=involved.get("namespace")).to_dict()
    except Exception as exc:
        if is_api_error(exc, 404):
            return involved
        raise
    involved.setdefault("uid", found["metadata"].get("uid"))
    involved.setdefault("resourceVersion", found["metadata"].get("resourceVersion"))
    return involved


def _get(events: Resource, name: str, namespace: str) -> dict[str, Any] | None:
    try:
        found: dict[str, Any] = events.get(name=name, namespace=namespace).to_dict()
        return found
    except Exception as exc:
        if is_api_error(exc, 404):
            return None
        raise


def record(module: AnsibleK8SModule, client: K8SClient) -> dict[str, Any]:
    params = module.params
    for key in ("message", "reason"):
        if not params.get(key):
            module.fail_json(msg="`{0}` is required when state=present".format(key))
    events = client.resource("Event", "v1")
    now = datetime.datetime.now(datetime.timezone.utc)
    stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    name = params["name"]
    namespace = params["namespace"]
    if params["appendTimestamp"]:
        name = "{0}.{1:x}".format(name, time.time_ns())
    event: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": name, "namespace": namespace},
        "message": params["message"],
        "reason": params["reason"],
        "type": params["type"],
        "involvedObject": _involved_object(module, client),
        "count": 1,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
    }
    if params.get("source"):
        event["source"] = _drop_none(params["source"])
    if params.get("reportingComponent"):
        event["reportingComponent"] = params["reportingComponent"]

    prior = None if params["appendTimestamp"] else _get(events, name, namespace)
    if prior is not None and prior.get("reason") == params["reason"]:
        event["count"] = int(prior.get("count") or 1) + 1
        event["firstTimestamp"] = prior.get("firstTimestamp") or stamp
    if module.check_mode:
        return {"changed": True, "result": event}
    if prior is None:
        return {"changed": True, "result": events.create(body=event, namespace=namespace).to_dict()}
    patched = events.patch(
        body=event, name=name, namespace=namespace, content_type="application/merge-patch+json"
    ).to_dict()
    return {"changed": True, "result": patched}


def remove(module: AnsibleK8SModule, client: K8SClient) -> dict[str, Any]:
    events = client.resource("Event", "v1")
    params = module.params
    if _get(events, params["name"], params["namespace"]) is None:
        return {"changed": False, "result": {}}
    if not module.check_mode:
        try:
            events.delete(name=params["name"], namespace=params["namespace"])
        except Exception as exc:
            if not is_api_error(exc, 404):
                raise
    return {"changed": True, "result": {}}


def main() -> None:
    module = AnsibleK8SModule(argument_spec=argument_spec(), supports_check_mode=True)
    client = client_for(module)
    try:
        if module.params["state"] == "absent":
            module.exit_json(**remove(module, client))
        module.exit_json(**record(module, client))
    except Exception as exc:
        if is_api_error(exc):
            module.fail_json(msg="Event write failed: {0}".format(exc), error=api_error(exc))
        raise


if __name__ == "__main__":
    main()
