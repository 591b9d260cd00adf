"""Ansible collections shipped inside the package, for roles run by the operator.

Two collection roots, kept apart on purpose:

* ``ours/``   -> ``ansible_operator.util`` (k8s_status, requeue_after, k8s_event): the real modules.
* ``compat/`` -> ``operator_sdk.util``: only ``meta/runtime.yml`` redirects to ``ansible_operator.util``
  so roles written for Operator SDK run unchanged.

Ansible resolves a collection from the first ``ANSIBLE_COLLECTIONS_PATH`` entry that has it. The operator
therefore puts ``ours/`` first (``ansible_operator.util`` is always ours) and ``compat/`` last, after the
user's entries or Ansible's defaults (``search_path``): a genuinely installed ``operator_sdk.util`` (a
project's ``requirements.yml``) shadows the shim, as it would under the Operator SDK.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["ANSIBLE_DEFAULT_COLLECTIONS_PATHS", "COLLECTIONS_ROOT", "COMPAT_ROOT", "paths", "search_path"]

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


def search_path(user: str | None) -> str:
    """``$ANSIBLE_COLLECTIONS_PATH`` for the runs: the user's entries (Ansible's defaults when there are
    none), then the ``operator_sdk.util`` shim, so an installed collection of that name wins."""
    given = [e for e in (user or "").split(os.pathsep) if e] or list(ANSIBLE_DEFAULT_COLLECTIONS_PATHS)
    entries = [str(Path(e).expanduser()) for e in given]
    entries = [e for e in entries if Path(e) != COMPAT_ROOT]
    return os.pathsep.join([*entries, str(COMPAT_ROOT)])
