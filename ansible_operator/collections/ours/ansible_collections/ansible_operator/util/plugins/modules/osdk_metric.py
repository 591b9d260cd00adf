#!/usr/bin/python
# -*- coding: utf-8 -*-
# Apache-2.0 (see the project's LICENSE)

from __future__ import absolute_import, annotations, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: osdk_metric
short_description: Create or update a custom Prometheus metric exported on the operator's /metrics
description:
  - Sends the metric to the operator, which exports it under exactly I(name) on its C(/metrics) endpoint.
  - Compatible with Operator SDK's C(operator_sdk.util.osdk_metric) (that name is redirected here), with the
    same options, the same request (a JSON POST of the SDK's UserMetric), same rules.
  - The first task naming a metric creates it with its type and I(description); a later task must use the
    same type (histogram and summary are interchangeable, as in the SDK).
options:
  name:
    description: The metric's name (Prometheus syntax, C([a-zA-Z_:][a-zA-Z0-9_:]*)).
    type: str
    required: true
  description:
    description: The metric's help text.
    type: str
    required: true
  address:
    description:
      - Where to post. Default, the endpoint the running operator serves
        (C($ANSIBLE_OPERATOR_OSDK_METRIC_URL)), else C(http://localhost:5050/metrics), the SDK's address.
    type: str
  counter:
    description: A counter; I(increment) adds 1, I(add) adds a value >= 0.
    type: dict
    suboptions:
      increment: {type: bool, description: Add 1.}
      add: {type: float, description: Add this value (not negative).}
  gauge:
    description: A gauge; the first option given in this order applies.
    type: dict
    suboptions:
      increment: {type: bool, description: Add 1.}
      decrement: {type: bool, description: Subtract 1.}
      add: {type: float, description: Add this value.}
      subtract: {type: float, description: Subtract this value.}
      set: {type: float, description: Set to this value.}
      set_to_current_time: {type: bool, description: Set to the current Unix time in seconds.}
  histogram:
    description: A histogram (Prometheus default buckets).
    type: dict
    suboptions:
      observe: {type: float, description: Add one observation.}
  summary:
    description: A summary (count and sum).
    type: dict
    suboptions:
      observe: {type: float, description: Add one observation.}
author: ansible-operator contributors
"""

EXAMPLES = r"""
- name: Count reconciles of this role
  ansible_operator.util.osdk_metric:
    name: my_thing_counter
    description: This metric counts things
    counter:
      increment: true

- name: Record a size
  operator_sdk.util.osdk_metric:
    name: my_size_gauge
    description: Current size
    gauge:
      set: "{{ size }}"
"""

RETURN = r"""
msg:
  description: The operator's answer when the metric was refused.
  returned: failure
  type: str
status_code:
  description: HTTP status of the refusal.
  returned: failure
  type: int
"""

import json  # noqa: E402
import os  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible.module_utils.urls import fetch_url  # noqa: E402

DEFAULT_ADDRESS = "http://localhost:5050/metrics"
ADDRESS_ENV = "ANSIBLE_OPERATOR_OSDK_METRIC_URL"


def main() -> None:
    flag = {"type": "bool"}
    number = {"type": "float"}
    module = AnsibleModule(
        argument_spec={
            "name": {"type": "str", "required": True},
            "description": {"type": "str", "required": True},
            "address": {"type": "str"},
            "counter": {"type": "dict", "options": {"increment": flag, "add": number}},
            "gauge": {"type": "dict", "options": {
                "set": number, "increment": flag, "decrement": flag, "add": number, "subtract": number,
                "set_to_current_time": flag}},
            "histogram": {"type": "dict", "options": {"observe": number}},
            "summary": {"type": "dict", "options": {"observe": number}},
        },
        supports_check_mode=True,
    )
    payload = {"name": module.params["name"], "description": module.params["description"]}
    for kind in ("counter", "gauge", "histogram", "summary"):
        if module.params.get(kind) is not None:
            payload[kind] = module.params[kind]
    if module.check_mode:
        module.exit_json(changed=True)
    url = module.params.get("address") or os.environ.get(ADDRESS_ENV) or DEFAULT_ADDRESS
    response, info = fetch_url(module, url, data=json.dumps(payload), method="POST", use_proxy=False,
                               headers={"Content-Type": "application/json"}, timeout=30)
    status = info.get("status", -1)
    if status != 200:
        body = info.get("body") or info.get("msg") or ""
        if isinstance(body, bytes):
            body = body.decode("utf-8", "replace")
        module.fail_json(msg="{0}: {1}".format(url, body.strip() or "no answer"), status_code=status)
    module.exit_json(changed=True)


if __name__ == "__main__":
    main()
