"""The import-linter contracts in pyproject.toml name every runner module.

import-linter has no "every module but the sandbox", so the contracts list the runner's modules one by one;
a new top-level module missing from a list would silently escape its contract. ``./dev.sh lint`` runs the
contracts themselves (lint-imports).
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "ansible_operator"


def _contracts() -> dict[str, dict[str, Any]]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    return {c["name"]: c for c in config["tool"]["importlinter"]["contracts"]}


def _top_level_modules() -> set[str]:
    """Every top-level module and sub-package of ansible_operator."""
    modules = {f"ansible_operator.{p.stem}" for p in PACKAGE.glob("*.py") if not p.stem.startswith("__")}
    packages = {f"ansible_operator.{p.parent.name}" for p in PACKAGE.glob("*/__init__.py")}
    return modules | packages


def _contract(word: str) -> dict[str, Any]:
    found = [c for name, c in _contracts().items() if word in name]
    assert len(found) == 1, f"expected one contract whose name contains {word!r}, found {len(found)}"
    return found[0]


def _neutral_modules() -> set[str]:
    """The modules both sides share (the neutral contract's sources)."""
    return set(_contract("Neutral modules import neither")["source_modules"])


# What the runner is tested against, outside the runner: the sandbox API server and the real control plane.
TOOLS = {"ansible_operator.sandbox", "ansible_operator.controlplane"}


def _runner_modules() -> set[str]:
    """Every top-level module and sub-package of ansible_operator except the sandbox, the control plane
    launcher and the neutral ones."""
    return _top_level_modules() - TOOLS - _neutral_modules()


def test_the_runner_module_list_is_found() -> None:
    expected = {"ansible_operator.manager", "ansible_operator.executors", "ansible_operator.collections"}
    assert expected <= _runner_modules()


def test_neutral_modules_exist_and_forbid_both_sides() -> None:
    neutral = _neutral_modules()
    assert "ansible_operator.labels" in neutral and neutral <= _top_level_modules()
    contract = _contract("Neutral modules import neither")
    assert contract["type"] == "forbidden" and not contract.get("ignore_imports")
    assert set(contract["forbidden_modules"]) == _runner_modules() | TOOLS


def test_the_control_plane_imports_nothing_of_the_runner_or_the_sandbox() -> None:
    contract = _contract("control plane launcher imports nothing")
    assert contract["source_modules"] == ["ansible_operator.controlplane"]
    assert set(contract["forbidden_modules"]) == _runner_modules() | {"ansible_operator.sandbox"}
    # ... and the runner never imports it (the CLI names its module, imported only for `cluster`)
    runner_contract = _contract("runner imports the sandbox only")
    assert "ansible_operator.controlplane" in runner_contract["forbidden_modules"]


def test_the_runner_imports_the_sandbox_only_to_start_it() -> None:
    assert _contract("runner imports the sandbox only")["ignore_imports"] == [
        "ansible_operator.manager -> ansible_operator.sandbox"]


@pytest.mark.parametrize("key, word", [
    ("forbidden_modules", "sandbox API server imports nothing"),
    ("source_modules", "runner imports the sandbox only"),
])
def test_sandbox_contracts_name_every_runner_module(key: str, word: str) -> None:
    assert set(_contract(word)[key]) == _runner_modules()


def test_executors_contract_names_every_module_above_them() -> None:
    assert set(_contract("Executors import nothing above")["forbidden_modules"]) == (
        _runner_modules() - {"ansible_operator.executors"})


def test_cycles_are_checked_for_the_whole_package() -> None:
    contract = _contract("No import cycles")
    assert contract["type"] == "acyclic_siblings" and contract["ancestors"] == ["ansible_operator"]
