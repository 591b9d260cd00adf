"""The runner's wheel (what ``pip install ansible-operator`` gets) holds no sandbox code and pulls in none of
the sandbox's own dependencies: the sandbox API server is a distribution of its own (sandbox/)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _name(requirement: str) -> str:
    """The normalised project name of a PEP 508 requirement ("PyYAML==6.0.3" -> "pyyaml")."""
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    assert match, requirement
    return re.sub(r"[-_.]+", "-", match.group(1)).lower()


def _dependencies(pyproject: Path) -> set[str]:
    return {_name(r) for r in tomllib.loads(pyproject.read_text())["project"]["dependencies"]}


def sandbox_only_dependencies() -> set[str]:
    """What the sandbox's pyproject.toml requires and the runner's does not."""
    return _dependencies(REPO / "sandbox/pyproject.toml") - _dependencies(REPO / "pyproject.toml")


def test_the_sandbox_has_dependencies_of_its_own() -> None:
    # the three the issue names; if one became the runner's too this test says so
    assert {"croniter", "jsonpatch", "protobuf"} <= sandbox_only_dependencies()


def test_the_runner_wheel_holds_no_sandbox_code_or_dependency(tmp_path: Path) -> None:
    # the Dockerfile's build context for the package: pyproject.toml, README.md and the package
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    shutil.copytree(REPO / "ansible_operator", src / "ansible_operator",
                    ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp_path / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
                    "--wheel-dir", str(out), str(src)], check=True)
    wheel = next(out.glob("ansible_operator-*.whl"))
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        metadata = zf.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert "ansible_operator/manager.py" in names
    assert "ansible_operator/sandbox_cli.py" in names  # the lazy door, with the install hint
    sandboxy = [n for n in names if n.startswith(("ansible_operator_sandbox/", "ansible_operator/sandbox/"))
                or n.endswith((".binpb", ".json.gz"))]
    assert not sandboxy, sandboxy
    requires = {_name(line.split(":", 1)[1]) for line in metadata.splitlines()
                if line.startswith("Requires-Dist:") and "extra ==" not in line}
    assert "kopf" in requires
    assert not requires & (sandbox_only_dependencies() | {"ansible-operator-sandbox"}), requires
