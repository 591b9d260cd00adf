"""The import-linter contracts in pyproject.toml name every runner module.

import-linter has no "every module but the launcher", so the contracts list the runner's modules one by one;
a new top-level module missing from a list would silently escape its contract. ``./dev.sh lint`` runs the
contracts themselves (lint-imports).
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

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


# What the runner is tested against, outside the runner: the real control plane's launcher. (The sandbox API
# server is a distribution of its own, ansible_operator_sandbox.)
TOOLS = {"ansible_operator.controlplane"}


def _runner_modules() -> set[str]:
    """Every top-level module and sub-package of ansible_operator except the control plane launcher."""
    return _top_level_modules() - TOOLS


def test_the_runner_module_list_is_found() -> None:
    expected = {"ansible_operator.manager", "ansible_operator.executors", "ansible_operator.collections",
                "ansible_operator.labels"}
    assert expected <= _runner_modules()
    assert not (PACKAGE / "sandbox").exists(), "the sandbox lives in sandbox/ (its own distribution)"


def test_the_sandbox_and_the_runner_are_independent() -> None:
    contract = _contract("never import each other")
    assert contract["type"] == "independence" and not contract.get("ignore_imports")
    assert contract["modules"] == ["ansible_operator", "ansible_operator_sandbox"]


def test_the_control_plane_imports_nothing_of_the_runner() -> None:
    contract = _contract("control plane launcher imports nothing")
    assert contract["source_modules"] == ["ansible_operator.controlplane"]
    assert set(contract["forbidden_modules"]) == _runner_modules()
    # ... and the runner never imports it (the CLI names its module, imported only for `cluster`)
    runner_contract = _contract("runner never imports the control plane")
    assert runner_contract["forbidden_modules"] == ["ansible_operator.controlplane"]
    assert set(runner_contract["source_modules"]) == _runner_modules()


# The lowest floor: every module may import it (executors too), it imports nothing of the runner: the error
# base and the TypedDicts of Kubernetes objects.
FLOOR = {"ansible_operator.errors", "ansible_operator.kubetypes"}


def test_executors_contract_names_every_module_above_them() -> None:
    assert set(_contract("Executors import nothing above")["forbidden_modules"]) == (
        _runner_modules() - {"ansible_operator.executors"} - FLOOR)


def test_the_floor_imports_nothing_of_the_runner() -> None:
    contract = _contract("The floor (")
    assert contract["type"] == "forbidden" and contract["source_modules"] == sorted(FLOOR)
    assert set(contract["forbidden_modules"]) == _top_level_modules() - FLOOR


def test_cycles_are_checked_for_the_whole_package() -> None:
    contract = _contract("No import cycles")
    assert contract["type"] == "acyclic_siblings" and contract["ancestors"] == ["ansible_operator"]


# import-linter cannot forbid an external package's sub-packages, so this test holds the compat walls (issue
# 23): kopf's private modules only in kopfcompat, ansible-core's private ones (``ansible._internal``,
# ``ansible.module_utils._internal``, ...) only in the executors' ansible_compat.
WALLS = {"kopf": "ansible_operator/kopfcompat.py",
         "ansible": "ansible_operator/executors/ansible_compat.py"}


def _private_module_of(module: str) -> str | None:
    """The walled package (a key of WALLS) whose private module ``module`` is (a part of its dotted name
    starts with ``_``), or None."""
    root, *rest = module.split(".")
    return root if root in WALLS and any(part.startswith("_") for part in rest) else None


def _imports(path: Path) -> list[tuple[int, str]]:
    import ast

    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.append((node.lineno, node.module))
    return found


def test_private_internals_of_kopf_and_ansible_core_are_imported_by_their_compat_modules_only() -> None:
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(ROOT).as_posix()
        for line, module in _imports(path):
            walled = _private_module_of(module)
            if walled is not None and relative != WALLS[walled]:
                offenders.append(f"{relative}:{line}: {module} (only {WALLS[walled]} may)")
    assert offenders == [], "\n".join(offenders)
    # and the walls themselves are where they say, and do import such modules
    for package, owner in WALLS.items():
        assert any(_private_module_of(m) == package for _, m in _imports(ROOT / owner)), owner


def test_the_walls_tell_private_modules_from_public_ones() -> None:
    assert _private_module_of("ansible._internal._templating") == "ansible"
    assert _private_module_of("ansible.module_utils._internal._ansiballz") == "ansible"
    assert _private_module_of("kopf._core.engines") == "kopf"
    assert _private_module_of("ansible.executor.module_common") is None
    assert _private_module_of("ansible_runner._internal") is None  # another distribution
    assert _private_module_of("kopf") is None


def test_the_executors_never_import_each_other() -> None:
    """Each implementation ``make_executor`` can load is in the independence contract (by its package)."""
    from ansible_operator.executors import EXECUTORS

    contract = _contract("Neither executor imports the other")
    assert contract["type"] == "independence" and not contract.get("ignore_imports")
    for module, _cls in EXECUTORS.values():
        assert any(module == m or module.startswith(m + ".") for m in contract["modules"]), module
    assert len(contract["modules"]) == len(EXECUTORS)


# Who may import the clients at all (issue 23, "one API client policy"). import-linter cannot name "every
# module but these" for an external package (a forbidden contract lists its sources one by one, and whole
# sub-packages at that), so this walk of every import -- function-local and TYPE_CHECKING ones included --
# holds the allow-list. An entry is a module or a package prefix (``ansible_operator.owners`` is owners.py
# today and may become a package).
CLIENTS: dict[str, dict[str, str]] = {
    "kubernetes": {
        "ansible_operator.kube":
            "the runner's one client: configuration loading, every request outside kopf's watch (Kube.request"
            " under RequestPolicy)",
        "ansible_operator.owners":
            "the owner proxy takes the upstream's kubernetes.client.Configuration (a type only; it forwards"
            " with aiohttp)",
        "ansible_operator.executors":
            "the zygote preloads the client for the roles' kubernetes.core tasks (role processes, not the"
            " runner)",
        "ansible_operator.collections": "our Ansible modules (k8s_status, k8s_event) run in role processes",
    },
    "urllib3": {
        "ansible_operator.kube": "the client's transport: keepalive, its own retries off, no-answer errors",
    },
    "aiohttp": {
        "ansible_operator.owners": "the owner proxy: an HTTP server for the roles and its upstream session",
        "ansible_operator.metrics": "the /metrics HTTP servers",
    },
    "kopf": {
        "ansible_operator.kopfcompat": "kopf's internals (watch stream, vault, errors): the compat wall",
        "ansible_operator.intake": "the kopf handlers: the watch intake",
        "ansible_operator.manager": "kopf.operator, its settings and login handler",
        "ansible_operator.kube": "kopf.ConnectionInfo from the runner's client configuration (the login)",
    },
}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _allowed(module: str, prefixes: dict[str, str]) -> str | None:
    return next((p for p in prefixes if module == p or module.startswith(p + ".")), None)


def test_only_the_allowed_modules_import_the_api_clients_kopf_and_aiohttp() -> None:
    offenders, used = [], set()
    for path in sorted(PACKAGE.rglob("*.py")):
        module = _module_name(path)
        for line, imported in _imports(path):
            top = imported.split(".")[0]
            if top not in CLIENTS:
                continue
            allowed = _allowed(module, CLIENTS[top])
            if allowed is None:
                offenders.append(f"{path.relative_to(ROOT)}:{line}: imports {imported} (allowed: "
                                 f"{', '.join(CLIENTS[top])}; add a module only with a reason)")
            else:
                used.add((top, allowed))
    assert offenders == [], "\n".join(offenders)
    stale = {(top, prefix) for top, prefixes in CLIENTS.items() for prefix in prefixes} - used
    assert not stale, f"allow-list entries no module needs any more: {sorted(stale)}"


def test_only_kube_makes_requests_with_the_kubernetes_client() -> None:
    """The generated API classes (CoordinationV1Api, CoreV1Api, ...) and ApiClients of their own would bring
    their own request path and retries: the runner's requests go through kube.Kube (one RequestPolicy). The
    Ansible modules under collections/ run in role processes and are not the runner's."""
    offenders = [f"{path.relative_to(ROOT)}: {word}" for path in sorted(PACKAGE.rglob("*.py"))
                 if path.name != "kube.py" and "collections" not in path.relative_to(PACKAGE).parts
                 for word in ("V1Api(", "ApiClient(", "CustomObjectsApi(", "DynamicClient(")
                 if word in path.read_text(encoding="utf-8")]
    assert offenders == []
