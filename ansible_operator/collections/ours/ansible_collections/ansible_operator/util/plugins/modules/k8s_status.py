#!/usr/bin/python
# -*- coding: utf-8 -*-
# Apache-2.0 (see the project's LICENSE)

from __future__ import absolute_import, annotations, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: k8s_status
short_description: Set fields and conditions in the status of a Kubernetes object
description:
  - Merges I(status) and I(conditions) into the C(.status) of a Kubernetes object, the way Operator SDK's
    C(operator_sdk.util.k8s_status) does, so roles written for Operator SDK work unchanged (the
    C(operator_sdk.util.k8s_status) name is redirected here).
  - Writes through the C(status) subresource when the resource has one, otherwise through the object itself.
  - Reports C(changed) only when the status actually changes; supports check mode.
extends_documentation_fragment:
  - kubernetes.core.k8s_auth_options
options:
  api_version:
    description: API version of the object, e.g. C(apps.example.com/v1alpha1).
    type: str
    default: v1
    aliases: [api, version]
  kind:
    description: Kind of the object (plural, singular and short names also work).
    type: str
    required: true
  name:
    description: Name of the object.
    type: str
    required: true
  namespace:
    description: Namespace of the object (omit for cluster-scoped kinds).
    type: str
  status:
    description:
      - Key/value pairs merged into C(.status) (JSON merge patch semantics; C(null) deletes a key).
      - Do not put C(conditions) here when also using I(conditions).
    type: dict
  conditions:
    description:
      - Conditions merged into C(.status.conditions) by C(type).
      - An existing condition is only replaced when a field other than C(lastTransitionTime) differs;
        when its C(status) is unchanged its old C(lastTransitionTime) is kept.
      - A new or transitioning condition without C(lastTransitionTime) gets the current time.
    type: list
    elements: dict
    suboptions:
      type: {description: Condition type, unique within the object., type: str, required: true}
      status: {description: Condition status., type: str, required: true, choices: ["True", "False", "Unknown"]}
      reason: {description: One CamelCase word., type: str}
      message: {description: Human readable explanation., type: str}
      lastHeartbeatTime: {description: RFC 3339 date-time., type: str}
      lastTransitionTime: {description: RFC 3339 date-time., type: str}
  replace:
    description:
      - Replace the whole C(.status) with I(status) and I(conditions) (C(PUT)) instead of merging.
    type: bool
    default: false
    aliases: [force]
  replace_lists:
    description:
      - When false (default), a list in I(status) whose items are all already present counts as no change.
        When true, lists must be equal or they are replaced. C(conditions) always merge by type.
    type: bool
    default: false
author: ansible-operator contributors
"""  # noqa: E501 (Ansible module documentation: one option per YAML flow mapping)

EXAMPLES = r"""
- name: Publish custom status fields
  ansible_operator.util.k8s_status:
    api_version: apps.example.com/v1alpha1
    kind: Memcached
    name: "{{ ansible_operator_meta.name }}"
    namespace: "{{ ansible_operator_meta.namespace }}"
    status:
      replicas: 3
      endpoints: ["10.0.0.1", "10.0.0.2"]

- name: Set a custom condition
  ansible_operator.util.k8s_status:
    api_version: apps.example.com/v1alpha1
    kind: Memcached
    name: "{{ ansible_operator_meta.name }}"
    namespace: "{{ ansible_operator_meta.namespace }}"
    conditions:
      - type: Ready
        status: "True"
        reason: AllReplicasUp
        message: All replicas are serving
"""

RETURN = r"""
result:
  description: The object after the write (or as it would be, in check mode; unchanged when nothing changed).
  returned: success
  type: dict
"""

import copy  # noqa: E402
import time  # noqa: E402
from typing import TYPE_CHECKING  # noqa: E402

from ansible_collections.ansible_operator.util.plugins.module_utils.k8s_common import (  # noqa: E402
    NAME_ARG_SPEC,
    api_error,
    auth_argspec,
    client_for,
    find_resource,
    is_api_error,
)
from ansible_collections.ansible_operator.util.plugins.module_utils.status_merge import (  # noqa: E402
    CONDITION_STATUSES,
    ConditionError,
    now_rfc3339,
    plan_status_patch,
    plan_status_replace,
    validate_conditions,
)
from ansible_collections.kubernetes.core.plugins.module_utils.k8s.core import AnsibleK8SModule  # noqa: E402

if TYPE_CHECKING:  # annotations only: never evaluated (postponed), so no import at run time
    from typing import Any

    from kubernetes.dynamic.resource import Resource

CONFLICT_RETRIES = 5


def argument_spec() -> dict[str, Any]:
    spec: dict[str, Any] = auth_argspec()
    spec.update(copy.deepcopy(NAME_ARG_SPEC))
    spec.update(
        status={"type": "dict"},
        conditions={
            "type": "list",
            "elements": "dict",
            "options": {
                "type": {"type": "str", "required": True},
                # raw so YAML booleans (status: true) can be normalised instead of rejected
                "status": {"type": "raw", "required": True},
                "reason": {"type": "str"},
                "message": {"type": "str"},
                "lastHeartbeatTime": {"type": "str"},
                "lastTransitionTime": {"type": "str"},
            },
        },
        replace={"type": "bool", "default": False, "aliases": ["force"]},
        replace_lists={"type": "bool", "default": False},
    )
    return spec


def _write(
    module: AnsibleK8SModule,
    resource: Resource,
    instance: dict[str, Any],
    new_status: dict[str, Any],
    patch: dict[str, Any] | None,
) -> dict[str, Any]:
    """PUT or merge-PATCH the status; optimistic concurrency via resourceVersion (409 -> caller retries)."""
    meta = instance["metadata"]
    target = resource.status if resource.subresources and "status" in resource.subresources else resource
    namespace = meta.get("namespace")
    if module.params["replace"]:
        body = copy.deepcopy(instance)
        body["status"] = new_status
        replaced: dict[str, Any] = target.replace(body=body, name=meta["name"], namespace=namespace).to_dict()
        return replaced
    body = {
        "metadata": {"name": meta["name"], "resourceVersion": meta.get("resourceVersion")},
        "status": patch,
    }
    if namespace:
        body["metadata"]["namespace"] = namespace
    patched: dict[str, Any] = target.patch(
        body=body, name=meta["name"], namespace=namespace, content_type="application/merge-patch+json"
    ).to_dict()
    return patched


def run(module: AnsibleK8SModule) -> None:
    params = module.params
    if not params.get("status") and not params.get("conditions"):
        module.fail_json(msg="give at least one of `status` or `conditions`")
    try:
        conditions = validate_conditions(params.get("conditions"))
    except ConditionError as exc:
        module.fail_json(msg="invalid conditions: {0}".format(exc), valid_statuses=list(CONDITION_STATUSES))

    client = client_for(module)
    resource = find_resource(client, params["kind"], params["api_version"])
    if resource is None:
        module.fail_json(
            msg="the API server has no kind {0!r} in {1!r}".format(params["kind"], params["api_version"])
        )

    for attempt in range(CONFLICT_RETRIES):
        try:
            instance = resource.get(name=params["name"], namespace=params.get("namespace")).to_dict()
        except Exception as exc:
            if is_api_error(exc):
                module.fail_json(
                    msg="could not read {0} {1}: {2}".format(params["kind"], params["name"], exc),
                    error=api_error(exc),
                )
            raise
        old_status = instance.get("status") or {}
        now = now_rfc3339()
        try:
            if params["replace"]:
                patch = None
                new_status, changed = plan_status_replace(old_status, params.get("status"), conditions, now)
            else:
                patch, changed, new_status = plan_status_patch(
                    old_status, params.get("status"), conditions, params["replace_lists"], now
                )
        except ConditionError as exc:
            module.fail_json(msg=str(exc))
        if not changed:
            module.exit_json(changed=False, result=instance)
        if module.check_mode:
            preview = copy.deepcopy(instance)
            preview["status"] = new_status
            module.exit_json(changed=True, result=preview)
        try:
            result = _write(module, resource, instance, new_status, patch)
        except Exception as exc:
            if is_api_error(exc, 409) and attempt + 1 < CONFLICT_RETRIES:
                time.sleep(0.05 * (attempt + 1))
                continue
            if is_api_error(exc):
                module.fail_json(msg="could not write the status: {0}".format(exc), error=api_error(exc))
            raise
        module.exit_json(changed=True, result=result)
    module.fail_json(msg="the object kept changing under us ({0} conflicts)".format(CONFLICT_RETRIES))


def main() -> None:
    module = AnsibleK8SModule(argument_spec=argument_spec(), supports_check_mode=True)
    run(module)


if __name__ == "__main__":
    main()
