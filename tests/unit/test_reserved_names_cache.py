"""The reserved names a child process read are kept in the user's cache, keyed by the installation."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from ansible_operator.executors import reserved


@pytest.fixture
def cache_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    return tmp_path


def _no_child(*args: object, **kwargs: object) -> None:
    raise AssertionError("a child process was started although the names were kept")


async def test_the_second_read_takes_the_names_from_the_cache(cache_home: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    first = await reserved.read(sys.executable)
    cache = reserved.cache_file(sys.executable)
    assert cache is not None and cache.is_relative_to(cache_home / "ansible-operator")
    assert set(json.loads(cache.read_text())) | reserved.DOCUMENTED_MAGIC == first
    monkeypatch.setattr(asyncio, "create_subprocess_exec", _no_child)
    monkeypatch.setattr(subprocess, "run", _no_child)
    assert await reserved.read(sys.executable) == first
    assert reserved.read_blocking(sys.executable) == first


def test_a_damaged_cache_is_read_again_and_written_over(cache_home: Path) -> None:
    cache = reserved.cache_file(sys.executable)
    assert cache is not None
    cache.parent.mkdir(parents=True)
    for damaged in ("not json", json.dumps(["only", "a", "few"]), json.dumps({"omit": 1})):
        cache.write_text(damaged)
        names = reserved.read_blocking(sys.executable)
        assert {"omit", "hostvars", "inventory_hostname"} <= names
        assert set(json.loads(cache.read_text())) | reserved.DOCUMENTED_MAGIC == names


def test_cached_false_reads_from_ansible_core_whatever_is_kept(cache_home: Path) -> None:
    cache = reserved.cache_file(sys.executable)
    assert cache is not None
    cache.parent.mkdir(parents=True)
    cache.write_text(json.dumps([f"stale_{i}" for i in range(12)]))
    assert "stale_0" in reserved.read_blocking(sys.executable)  # what the key says is current
    fresh = reserved.read_blocking(sys.executable, cached=False)
    assert "stale_0" not in fresh and "hostvars" in fresh


def test_no_cache_for_another_interpreter_or_an_unwritable_home(cache_home: Path, tmp_path: Path) -> None:
    assert reserved.cache_file(str(tmp_path / "python3")) is None
    (cache_home / "ansible-operator").write_text("a file where the directory would be")
    assert {"omit", "hostvars"} <= reserved.read_blocking(sys.executable)  # read; nothing kept


def test_the_key_follows_the_installation(cache_home: Path, tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Another ansible-core (another place, or its files changed in place) is another key."""
    def install(root: Path) -> Path:
        for name in ("release.py", "constants.py", "inventory/host.py", "template/__init__.py"):
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            (root / name).write_text("# ansible-core\n")
        return root

    spec = type("Spec", (), {})()
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: spec)
    spec.submodule_search_locations = [str(install(tmp_path / "a" / "ansible"))]  # type: ignore[attr-defined]
    key = reserved.cache_file(sys.executable)
    assert key is not None and reserved.cache_file(sys.executable) == key
    (tmp_path / "a" / "ansible" / "release.py").write_text("__version__ = '2.99.0'\n")  # upgraded in place
    upgraded = reserved.cache_file(sys.executable)
    assert upgraded not in (None, key)
    spec.submodule_search_locations = [str(install(tmp_path / "b" / "ansible"))]  # type: ignore[attr-defined]
    assert reserved.cache_file(sys.executable) not in (None, key, upgraded)
    spec.submodule_search_locations = [str(tmp_path / "none" / "ansible")]  # type: ignore[attr-defined]
    assert reserved.cache_file(sys.executable) is None  # nothing to key on: no cache


def test_no_cache_without_a_home(monkeypatch: pytest.MonkeyPatch) -> None:
    """An arbitrary uid in a container: no $HOME, no passwd entry (Path.home() raises): read, nothing kept."""
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)

    def no_home() -> Path:
        raise RuntimeError("Could not determine home directory.")

    monkeypatch.setattr(Path, "home", staticmethod(no_home))
    assert reserved.cache_file(sys.executable) is None
    assert {"omit", "hostvars"} <= reserved.read_blocking(sys.executable)
