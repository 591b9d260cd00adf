"""Plugin documentation is read once per zygote: a run child loading the plugins every run loads (by the
names a run uses) parses no DOCUMENTATION; with the fast path off it parses them as Ansible does."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

pytestmark = pytest.mark.ansible_versions  # also run on the lowest ansible-core (dev.sh test-ansible-low)

# What an empty play loads in a run child (cProfile of one, 2.19): these documents were parsed every run.
_PROBE = r"""
import json, os, sys
from ansible_operator.executors.warm import plugin_docs, zygote
zygote.preload()
from ansible import constants as C
from ansible.plugins import loader
parsed = []
original = loader.AnsibleLoader  # what _load_config_defs parses DOCUMENTATION with (2.16 - 2.21)
def counting_loader(*args, **kwargs):
    parsed.append(1)
    return original(*args, **kwargs)
loader.AnsibleLoader = counting_loader
if sys.argv[1] == "off":
    plugin_docs.disable()
pid = os.fork()
if pid == 0:  # a run child, as the zygote forks one
    for name in C.INVENTORY_ENABLED:
        loader.inventory_loader.get(name, class_only=True)
    loader.strategy_loader.get("linear", class_only=True)
    loader.cache_loader.get("jsonfile", class_only=True)
    list(loader.callback_loader.all(class_only=True))
    loader.vars_loader._load_config_defs(
        "host_group_vars", sys.modules["ansible.plugins.vars.host_group_vars"],
        sys.modules["ansible.plugins.vars.host_group_vars"].__file__)
    print(json.dumps({"parsed": len(parsed)}), flush=True)
    os._exit(0)
os.waitpid(pid, 0)
"""


def _probe(setting: str) -> dict[str, Any]:
    out = subprocess.run([sys.executable, "-c", _PROBE, setting], capture_output=True, text=True, timeout=300,
                         check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_run_child_parses_no_plugin_documentation_the_zygote_read() -> None:
    assert _probe("on")["parsed"] == 0
    # Ansible's own rule, off: every plugin without options is read again (host_list, auto, ini, toml,
    # linear, the callbacks without options...)
    assert _probe("off")["parsed"] >= 5
