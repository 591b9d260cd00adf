"""The variable names ansible-core gives a meaning of its own: its magic variables and its template globals.

A spec field must never set one (``extravars`` refuses it). Read from the ansible-core the runs use, never
from a list of ours: :func:`collect` runs where ansible-core is imported anyway (the warm executor's zygote
reports them when it is ready), else in a child process (:func:`read`), so the operator does not keep all
of Ansible imported for a list of names.
"""

from __future__ import annotations

import asyncio
import json
import subprocess

from ansible_operator.executors import ansible_compat

__all__ = ["DOCUMENTED_MAGIC", "collect", "parse", "read", "read_blocking"]

DOCUMENTED_MAGIC = frozenset({
    # Ansible's "Special variables" page, in case an ansible-core release moves the lists read below.
    "omit", "hostvars", "groups", "group_names", "inventory_hostname", "inventory_hostname_short",
    "inventory_dir", "inventory_file", "playbook_dir", "play_hosts", "role_name", "role_names", "role_path",
    "role_uuid", "vars", "lookup", "query", "q",
})

_SCRIPT = ("import json; from ansible_operator.executors.reserved import collect; "
           "print(json.dumps(collect()))")


def collect() -> list[str]:
    """The names, read from ansible-core in this process (imports it): sorted, without the documented list
    (see :func:`parse`)."""
    names: set[str] = set()
    try:
        import ansible.constants as C  # noqa: N812, PLC0415

        names.update(getattr(C, "INTERNAL_STATIC_VARS", ()))
    except Exception:  # noqa: BLE001, S110 - an ansible-core without it: the other sources still count
        pass
    try:
        from ansible.inventory.host import Host  # noqa: PLC0415

        names.update(Host("localhost").get_magic_vars())
    except Exception:  # noqa: BLE001, S110
        pass
    try:  # Ansible's own template globals (omit, lookup, query, q, now, undef), not Jinja's defaults
        from ansible.parsing.dataloader import DataLoader  # noqa: PLC0415
        from ansible.template import Templar  # noqa: PLC0415
        from jinja2.defaults import DEFAULT_NAMESPACE  # noqa: PLC0415

        names.update(ansible_compat.template_globals(Templar(loader=DataLoader())) - set(DEFAULT_NAMESPACE))
    except Exception:  # noqa: BLE001, S110
        pass
    return sorted(str(n) for n in names)


def parse(names: object, python: str) -> frozenset[str]:
    """What :func:`collect` returned (decoded), checked, with the documented names added; a clear error
    when ansible-core could not be read (``python``: whose)."""
    if not isinstance(names, list) or len(names) < 10:
        raise RuntimeError(f"could not read the reserved variable names from ansible-core ({python}):"
                           f" {str(names).strip()[:200]!r}")
    return frozenset(str(n) for n in names) | DOCUMENTED_MAGIC


def _decode(output: str) -> object:
    try:
        return json.loads(output)
    except ValueError:
        return output


async def read(python: str) -> frozenset[str]:
    """:func:`collect` in a child process of interpreter ``python``, without blocking the event loop."""
    proc = await asyncio.create_subprocess_exec(python, "-c", _SCRIPT, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.DEVNULL)
    out, _ = await proc.communicate()
    return parse(_decode(out.decode("utf-8", "replace")), python)


def read_blocking(python: str) -> frozenset[str]:
    """:func:`read`, blocking."""
    proc = subprocess.run([python, "-c", _SCRIPT], capture_output=True, text=True, timeout=120, check=False)
    return parse(_decode(proc.stdout), python)
