"""The runs' ``$ANSIBLE_COLLECTIONS_PATH`` (``ansible_operator.collections.search_path``) keeps the
``collections_path`` of the project's ``ansible.cfg``.

The operator always exports ``$ANSIBLE_COLLECTIONS_PATH`` (to append the ``operator_sdk.util`` shim), and the
variable beats ``ansible.cfg`` in every run. The Operator SDK sets nothing, so there Ansible reads
``collections_path`` from the image's ``/etc/ansible/ansible.cfg``. Found running ansible-operator-plugins'
advanced-molecule-operator unchanged: its Dockerfile copies its ansible.cfg there (roles_path, library,
filter_plugins, inventory...; a collections_path in it would have been dropped by every run).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ansible_operator.collections import (
    ANSIBLE_DEFAULT_COLLECTIONS_PATHS,
    COMPAT_ROOT,
    configured_collections_paths,
    search_path,
)


@pytest.fixture
def ansible_cfg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An ansible.cfg that Ansible reads ($ANSIBLE_CONFIG: the only file read, whatever /etc holds)."""
    cfg = tmp_path / "ansible.cfg"
    monkeypatch.setenv("ANSIBLE_CONFIG", str(cfg))
    monkeypatch.delenv("ANSIBLE_COLLECTIONS_PATH", raising=False)
    monkeypatch.delenv("ANSIBLE_COLLECTIONS_PATHS", raising=False)
    return cfg


def test_collections_path_of_ansible_cfg_is_kept(ansible_cfg: Path, tmp_path: Path) -> None:
    ansible_cfg.write_text(f"[defaults]\ncollections_path = {tmp_path}/site:{tmp_path}/more\n"
                           "stdout_callback = yaml\n")
    assert configured_collections_paths() == [f"{tmp_path}/site", f"{tmp_path}/more"]
    assert search_path(None).split(os.pathsep) == [f"{tmp_path}/site", f"{tmp_path}/more", str(COMPAT_ROOT)]


def test_ansible_defaults_when_ansible_cfg_sets_no_collections_path(ansible_cfg: Path) -> None:
    ansible_cfg.write_text("[defaults]\nroles_path = /opt/ansible/roles\n")
    assert configured_collections_paths() is None
    expected = [str(Path(p).expanduser()) for p in ANSIBLE_DEFAULT_COLLECTIONS_PATHS]
    assert search_path(None).split(os.pathsep) == [*expected, str(COMPAT_ROOT)]


def test_the_users_variable_beats_ansible_cfg(ansible_cfg: Path, tmp_path: Path) -> None:
    """``--ansible-collections-path`` / ``$ANSIBLE_COLLECTIONS_PATH`` win, as they do in Ansible."""
    ansible_cfg.write_text(f"[defaults]\ncollections_path = {tmp_path}/site\n")
    assert search_path(f"{tmp_path}/given").split(os.pathsep) == [f"{tmp_path}/given", str(COMPAT_ROOT)]
