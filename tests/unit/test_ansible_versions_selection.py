"""tests/conftest.py decides which tests also run on the lowest ansible-core (marker ``ansible_versions``):
checked on a scratch test tree that uses that conftest, through pytest's own collection."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

CONFTEST = Path(__file__).parents[1] / "conftest.py"
INI = """[pytest]
markers =
    e2e: e2e
    slow: slow
    ansible_versions: both ends
"""


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    (tmp_path / "pytest.ini").write_text(INI)
    (tmp_path / "tests").mkdir()
    shutil.copy(CONFTEST, tmp_path / "tests" / "conftest.py")
    shutil.copy(CONFTEST.parent / "kube.py", tmp_path / "tests" / "kube.py")  # the conftest imports it
    for rel, text in files.items():
        path = tmp_path / "tests" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


def _collect(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "ansible_versions",
                           "-p", "no:cacheprovider", "tests"], cwd=root, capture_output=True, text=True,
                          timeout=120)


def test_low_stage_takes_ansible_directories_and_modules_that_run_ansible(tmp_path: Path) -> None:
    root = _tree(tmp_path, {
        "e2e/test_new_scenario.py": "def test_scenario():\n    pass\n",
        "unit/test_new_executor.py": "import ansible_runner  # noqa\n\ndef test_run():\n    pass\n",
        "unit/test_pure.py": "def test_logic():\n    pass\n",
        "sandbox/test_api.py": "def test_api():\n    pass\n",
    })
    proc = _collect(root)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "tests/e2e/test_new_scenario.py::test_scenario" in proc.stdout
    assert "tests/unit/test_new_executor.py::test_run" in proc.stdout
    assert "test_pure.py" not in proc.stdout and "test_api.py" not in proc.stdout
    assert "2/4 tests collected" in proc.stdout


def test_an_e2e_test_outside_them_is_a_collection_error(tmp_path: Path) -> None:
    root = _tree(tmp_path, {
        "sandbox/test_scenario.py": "import pytest\n\npytestmark = pytest.mark.e2e\n\n"
                                    "def test_scenario():\n    pass\n",
    })
    proc = _collect(root)
    assert proc.returncode == 4, proc.stdout + proc.stderr  # pytest's usage error
    assert "sandbox/test_scenario.py" in proc.stderr and "VERSION_INDEPENDENT" in proc.stderr
