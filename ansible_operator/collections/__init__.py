"""Ansible collections shipped inside the package, for roles run by the operator.

Two collection roots, kept apart on purpose:

* ``ours/``   -> ``ansible_operator.util`` (k8s_status, requeue_after, k8s_event): the real modules.
* ``compat/`` -> ``operator_sdk.util``: only ``meta/runtime.yml`` redirects to ``ansible_operator.util``
  so roles written for Operator SDK run unchanged.

Ansible resolves a collection from the first ``ANSIBLE_COLLECTIONS_PATH`` entry that has it. The operator
therefore puts ``ours/`` first (``ansible_operator.util`` is always ours) and ``compat/`` last, after the
user's entries (``$ANSIBLE_COLLECTIONS_PATH``, else the ``collections_path`` of the ``ansible.cfg`` Ansible
reads, else Ansible's defaults: ``search_path``): a genuinely installed ``operator_sdk.util`` (a project's
``requirements.yml``) shadows the shim, as it would under the Operator SDK.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = [
    "ANSIBLE_DEFAULT_COLLECTIONS_PATHS", "COLLECTIONS_ROOT", "COMPAT_ROOT", "configured_collections_paths",
    "paths", "search_path",
]

_HERE = Path(__file__).resolve().parent
COLLECTIONS_ROOT = _HERE / "ours"
"""Directory containing ``ansible_collections/ansible_operator/util``."""
COMPAT_ROOT = _HERE / "compat"
"""Directory containing ``ansible_collections/operator_sdk/util`` (redirects only)."""


def paths() -> list[Path]:
    """Directories to append to ``ANSIBLE_COLLECTIONS_PATH`` (in this order, after the user's entries)."""
    return [COLLECTIONS_ROOT, COMPAT_ROOT]


ANSIBLE_DEFAULT_COLLECTIONS_PATHS = ("~/.ansible/collections", "/usr/share/ansible/collections")
"""ansible-core's ``COLLECTIONS_PATHS`` default, used when ``$ANSIBLE_COLLECTIONS_PATH`` is not set."""


def configured_collections_paths() -> list[str] | None:
    """``collections_path`` set in the ``ansible.cfg`` Ansible reads (``$ANSIBLE_CONFIG``, ``./ansible.cfg``,
    ``~/.ansible.cfg``, ``/etc/ansible/ansible.cfg``: the first found), ``None`` when none sets it.

    The operator exports ``$ANSIBLE_COLLECTIONS_PATH`` for every run (to append the shim), and that variable
    beats ``ansible.cfg``: without this, a project whose ``ansible.cfg`` names where its collections live
    (the SDK image's ``/etc/ansible/ansible.cfg``, say) would lose them, where the SDK, which sets nothing,
    keeps them."""
    from ansible_operator.executors.datadir import ansible_config, reads_no_config_file

    if reads_no_config_file():
        return None  # no ansible.cfg: nothing sets it but the environment
    try:
        value, origin = ansible_config().get_config_value_and_origin("COLLECTIONS_PATHS")
    except Exception:  # no ansible-core or an unreadable ansible.cfg: the runs will report the latter
        return None
    if origin == "default" or str(origin).startswith("env:") or not isinstance(value, list):
        return None
    return [str(v) for v in value]


def search_path(user: str | None) -> str:
    """``$ANSIBLE_COLLECTIONS_PATH`` for the runs: the user's entries (else ``ansible.cfg``'s
    ``collections_path``, else Ansible's defaults), then the ``operator_sdk.util`` shim, so an installed
    collection of that name wins."""
    given = ([e for e in (user or "").split(os.pathsep) if e] or configured_collections_paths()
             or list(ANSIBLE_DEFAULT_COLLECTIONS_PATHS))
    entries = [str(Path(e).expanduser()) for e in given]
    entries = [e for e in entries if Path(e) != COMPAT_ROOT]
    return os.pathsep.join([*entries, str(COMPAT_ROOT)])
