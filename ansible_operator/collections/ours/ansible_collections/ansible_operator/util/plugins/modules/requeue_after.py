#!/usr/bin/python
# -*- coding: utf-8 -*-
# Apache-2.0 (see the project's LICENSE)

from __future__ import absolute_import, annotations, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: requeue_after
short_description: Ask the operator to reconcile this object again after a delay
description:
  - Returns the requested delay; the operator reads it from the task result after the run and schedules
    the next reconcile of the object being reconciled that long after the run ends.
  - Compatible with Operator SDK's C(operator_sdk.util.requeue_after) (that name is redirected here).
  - If several tasks request a requeue in one run, the operator uses the last one.
  - Changes nothing on the cluster; always C(changed=false); works in check mode.
options:
  time:
    description:
      - Delay as a Go duration (C(30s), C(1m30s), C(1.5h), C(500ms)) or a plain number of seconds.
    type: str
    required: true
author: ansible-operator contributors
"""

EXAMPLES = r"""
- name: Check again in five minutes
  ansible_operator.util.requeue_after:
    time: 5m
"""

RETURN = r"""
requeue_after_seconds:
  description: The delay in seconds; the key the operator reads.
  returned: success
  type: float
period:
  description: The I(time) string as given (the key Operator SDK's runner reads).
  returned: success
  type: str
"""

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.ansible_operator.util.plugins.module_utils.duration import parse_duration  # noqa: E402


def main() -> None:
    module = AnsibleModule(
        argument_spec={"time": {"type": "str", "required": True}}, supports_check_mode=True
    )
    text = module.params["time"]
    try:
        seconds = parse_duration(text)
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=False, requeue_after_seconds=seconds, period=text)


if __name__ == "__main__":
    main()
