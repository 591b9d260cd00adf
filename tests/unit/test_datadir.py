"""Private data dir layout: modes, extra vars file, role play, environment, run ids, bad input."""

from __future__ import annotations

import os
import re
import stat
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import yaml

from ansible_operator.executors import datadir
from ansible_operator.executors.base import RunRequest
from ansible_operator.executors.datadir import new_run_id, prepare
from ansible_operator.extravars import Unsafe


def mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


@pytest.fixture
def playbook(tmp_path: Path) -> Path:
    pb = tmp_path / "site.yml"
    pb.write_text("- hosts: localhost\n  gather_facts: false\n  tasks: []\n")
    return pb


@pytest.fixture
def role_dir(tmp_path: Path) -> Path:
    d = tmp_path / "roles" / "memcached"
    (d / "tasks").mkdir(parents=True)
    (d / "tasks" / "main.yml").write_text("- debug: msg=hi\n")
    return d


def req(tmp_path: Path, **kw) -> RunRequest:
    kw.setdefault("extra_vars", {"size": 3})
    return RunRequest(run_id="20261122T134501Z-3f9a2c", private_data_dir=tmp_path / "run", **kw)


def test_new_run_id_format_and_order() -> None:
    t = datetime(2026, 11, 22, 13, 45, 1, tzinfo=timezone.utc)
    rid = new_run_id(t)
    assert re.fullmatch(r"20261122T134501Z-[0-9a-f]{6}", rid)
    later = new_run_id(t + timedelta(seconds=1))
    assert sorted([later, rid]) == [rid, later]
    # runs within one second still sort by start time (warm runs can be much shorter than a second)
    assert (
        new_run_id(t)
        < new_run_id(t + timedelta(microseconds=1))
        < new_run_id(t + timedelta(milliseconds=300))
    )
    other_tz = datetime(2026, 11, 22, 14, 45, 1, tzinfo=timezone(timedelta(hours=1)))
    assert new_run_id(other_tz).startswith("20261122T134501Z-")
    assert re.fullmatch(r"\d{8}T\d{6}Z-[0-9a-f]{6}", new_run_id())
    with pytest.raises(ValueError, match="aware"):
        new_run_id(datetime(2026, 1, 1))


def test_playbook_layout_modes_and_content(tmp_path: Path, playbook: Path) -> None:
    extra = {"size": 3, "name": "x", "nested": {"list": [1, "two"]}}
    p = prepare(req(tmp_path, playbook=playbook, extra_vars=extra, envvars={"K8S_AUTH_KUBECONFIG": "/k"}))
    pdd = tmp_path / "run"
    assert p.private_data_dir == pdd and mode(pdd) == 0o700
    assert p.playbook == playbook  # used as is
    assert p.artifacts_dir == pdd / "artifacts" / "20261122T134501Z-3f9a2c"
    assert p.extravars_file == pdd / "env" / "extravars" and mode(p.extravars_file) == 0o600
    assert yaml.safe_load(p.extravars_file.read_text()) == extra
    assert mode(pdd / "env" / "envvars") == 0o600
    assert p.inventory == pdd / "inventory" / "hosts"
    assert p.inventory.read_text().strip() == (
        f"localhost ansible_connection=local ansible_python_interpreter={sys.executable}")
    assert p.env["K8S_AUTH_KUBECONFIG"] == "/k"
    assert p.env.get("PATH", os.environ["PATH"]).split(os.pathsep)[0] == str(Path(sys.executable).parent)
    assert "ANSIBLE_ROLES_PATH" not in p.env and "ANSIBLE_COLLECTIONS_PATH" not in p.env
    assert not (pdd / "project" / "main.yml").exists()


def test_existing_extravars_file_is_tightened(tmp_path: Path, playbook: Path) -> None:
    env_dir = tmp_path / "run" / "env"
    env_dir.mkdir(parents=True)
    (env_dir / "extravars").write_text("old: 1\n")
    (env_dir / "extravars").chmod(0o644)
    (tmp_path / "run").chmod(0o755)
    p = prepare(req(tmp_path, playbook=playbook))
    assert mode(p.extravars_file) == 0o600 and mode(tmp_path / "run") == 0o700
    assert "old" not in p.extravars_file.read_text()


def test_role_by_absolute_path_matches_operator_sdk_play(tmp_path: Path, role_dir: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANSIBLE_GATHERING", raising=False)
    monkeypatch.delenv("ANSIBLE_ROLES_PATH", raising=False)
    extra_roles = tmp_path / "more-roles"
    p = prepare(req(tmp_path, role=str(role_dir), roles_path=(extra_roles,)))
    assert p.playbook == tmp_path / "run" / "project" / "main.yml"
    assert yaml.safe_load(p.playbook.read_text()) == [
        {"hosts": "localhost", "gather_facts": True, "roles": ["memcached"]}]
    # then what Ansible itself would search (ansible.cfg's roles_path, else its default), as under the SDK
    configured = list(datadir.configured_roles_path())
    assert configured and str(Path("~/.ansible/roles").expanduser()) in configured
    expected = [str(role_dir.parent), str(extra_roles), *configured]
    assert p.env["ANSIBLE_ROLES_PATH"].split(os.pathsep) == expected


def test_roles_path_keeps_ansible_cfgs_roles_path(tmp_path: Path, role_dir: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    # A project's ansible.cfg roles_path (where its galaxy-installed role dependencies live) stays searchable.
    cfg = tmp_path / "ansible.cfg"
    cfg.write_text("[defaults]\nroles_path = /opt/galaxy-roles\n")
    monkeypatch.setenv("ANSIBLE_CONFIG", str(cfg))
    monkeypatch.delenv("ANSIBLE_ROLES_PATH", raising=False)
    datadir.configured_roles_path.cache_clear()
    try:
        p = prepare(req(tmp_path, role=str(role_dir)))
    finally:
        datadir.configured_roles_path.cache_clear()
        datadir._ansible_config.cache_clear()
    assert p.env["ANSIBLE_ROLES_PATH"].split(os.pathsep) == [str(role_dir.parent), "/opt/galaxy-roles"]


def test_role_gathering_explicit_skips_facts_and_inherits_roles_path(
        tmp_path: Path, role_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANSIBLE_ROLES_PATH", "/opt/ansible/roles")
    p = prepare(req(tmp_path, role=str(role_dir), envvars={"ANSIBLE_GATHERING": "explicit"}))
    assert yaml.safe_load(p.playbook.read_text())[0]["gather_facts"] is False
    assert p.env["ANSIBLE_ROLES_PATH"].split(os.pathsep) == [str(role_dir.parent), "/opt/ansible/roles"]


def test_fqcn_role_and_collections_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANSIBLE_COLLECTIONS_PATH", raising=False)
    coll = tmp_path / "collections"
    p = prepare(req(tmp_path, role="example.cache.memcached", collections_path=(coll,)))
    assert yaml.safe_load(p.playbook.read_text())[0]["roles"] == ["example.cache.memcached"]
    paths = p.env["ANSIBLE_COLLECTIONS_PATH"].split(os.pathsep)
    assert paths[0] == str(coll)
    assert str(Path("~/.ansible/collections").expanduser()) in paths
    assert "/usr/share/ansible/collections" in paths


def test_envvars_override_and_ansible_inventory(tmp_path: Path, playbook: Path) -> None:
    inv = tmp_path / "my-inventory"
    inv.write_text("localhost ansible_connection=local\n")
    p = prepare(req(tmp_path, playbook=playbook, envvars={"ANSIBLE_INVENTORY": str(inv), "PATH": "/only"}))
    assert p.inventory == inv
    assert not (tmp_path / "run" / "inventory" / "hosts").exists()
    assert p.env["PATH"] == "/only"  # the request's envvars win


@pytest.mark.parametrize("kw, message", [
    ({}, "exactly one"),
    ({"role": "r", "playbook": Path("/x.yml")}, "exactly one"),
    ({"role": "roles/memcached"}, "absolute"),
    ({"role": "/nonexistent/roles/memcached"}, "no such role directory"),
    ({"role": " "}, "empty"),
    ({"playbook": Path("site.yml")}, "absolute"),
    ({"playbook": Path("/nonexistent/site.yml")}, "does not exist"),
])
def test_bad_requests_fail_clearly_and_write_nothing(tmp_path: Path, kw: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        prepare(req(tmp_path, **kw))
    assert not (tmp_path / "run").exists()


def test_unrepresentable_extra_vars_fail_before_writing(tmp_path: Path, playbook: Path) -> None:
    with pytest.raises(yaml.representer.RepresenterError):
        prepare(req(tmp_path, playbook=playbook, extra_vars={"x": object()}))
    assert not (tmp_path / "run").exists()


def test_unsafe_values_are_tagged_in_the_file(tmp_path: Path, playbook: Path) -> None:
    class Loader(yaml.SafeLoader):
        pass

    def construct_unsafe(loader: yaml.SafeLoader, node: yaml.Node) -> object:
        assert isinstance(node, yaml.ScalarNode)
        return ("UNSAFE", loader.construct_scalar(node))

    Loader.add_constructor("!unsafe", construct_unsafe)
    p = prepare(req(tmp_path, playbook=playbook,
                    extra_vars={"x": Unsafe("{{ lookup('pipe','id') }}"), "n": 1}))
    text = p.extravars_file.read_text()
    assert "!unsafe" in text
    assert yaml.load(text, Loader=Loader) == {"x": ("UNSAFE", "{{ lookup('pipe','id') }}"), "n": 1}


def test_new_run_ids_are_unique_and_increasing_within_a_process() -> None:
    ids = [new_run_id() for _ in range(2000)]  # far more than one per microsecond of wall clock
    assert len(set(ids)) == len(ids)
    assert ids == sorted(ids)


def test_without_an_ansible_cfg_the_paths_are_ansible_cores_without_its_config_manager(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No ansible.cfg anywhere Ansible looks: the roles path (and that no collections path is configured)
    come without building a ConfigManager, and are what one says."""
    from ansible_operator import collections as ours

    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(tmp_path)
    for name in ("ANSIBLE_CONFIG", "ANSIBLE_HOME", "ANSIBLE_ROLES_PATH", "ANSIBLE_COLLECTIONS_PATH"):
        monkeypatch.delenv(name, raising=False)
    if os.path.lexists("/etc/ansible/ansible.cfg"):
        pytest.skip("this machine has /etc/ansible/ansible.cfg")
    assert datadir.reads_no_config_file()

    def no_config_manager() -> None:
        raise AssertionError("a ConfigManager was built")

    datadir.configured_roles_path.cache_clear()
    try:
        with monkeypatch.context() as m:
            m.setattr(datadir, "ansible_config", no_config_manager)
            fast = datadir.configured_roles_path()
            assert ours.configured_collections_paths() is None
        datadir.configured_roles_path.cache_clear()
        with monkeypatch.context() as m:
            m.setattr(datadir, "reads_no_config_file", lambda: False)  # the ConfigManager's answer
            assert datadir.configured_roles_path() == fast == (
                str(home / ".ansible" / "roles"), "/usr/share/ansible/roles", "/etc/ansible/roles")
            assert ours.configured_collections_paths() is None
        (tmp_path / "ansible.cfg").write_text("[defaults]\nroles_path = /opt/galaxy-roles\n")
        assert not datadir.reads_no_config_file()
        datadir.configured_roles_path.cache_clear()
        datadir._ansible_config.cache_clear()  # the one built above, before the file existed
        assert datadir.configured_roles_path() == ("/opt/galaxy-roles",)
    finally:
        datadir.configured_roles_path.cache_clear()
        datadir._ansible_config.cache_clear()
