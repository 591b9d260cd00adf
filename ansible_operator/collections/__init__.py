"""Ansible collections shipped inside the package, for roles run by the operator.

Two collection roots, kept apart on purpose:

* ``ours/``   -> ``ansible_operator.util`` (k8s_status, requeue_after, k8s_event): the real modules.
* ``compat/`` -> ``operator_sdk.util``: only ``meta/runtime.yml`` redirects to ``ansible_operator.util``
  so roles written for Operator SDK run unchanged.

Ansible resolves a collection from the first ``ANSIBLE_COLLECTIONS_PATH`` entry that has it. Appending
``paths()`` (ours first, compat last) after the user's own entries therefore means a genuinely installed
``operator_sdk.util`` shadows the shim, while ``ansible_operator.util`` is always found.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["paths", "COLLECTIONS_ROOT", "COMPAT_ROOT"]

_HERE = Path(__file__).resolve().parent
COLLECTIONS_ROOT = _HERE / "ours"
"""Directory containing ``ansible_collections/ansible_operator/util``."""
COMPAT_ROOT = _HERE / "compat"
"""Directory containing ``ansible_collections/operator_sdk/util`` (redirects only)."""


def paths() -> list[Path]:
    """Directories to append to ``ANSIBLE_COLLECTIONS_PATH`` (in this order, after the user's entries)."""
    return [COLLECTIONS_ROOT, COMPAT_ROOT]
