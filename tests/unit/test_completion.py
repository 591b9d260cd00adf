"""``ansible-operator completion``: shell code whose completions come from the command's own parser."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_completion_prints_shell_code_for_the_command(shell: str) -> None:
    done = subprocess.run([sys.executable, "-m", "ansible_operator", "completion", shell],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "ansible-operator" in done.stdout and "_ARGCOMPLETE" in done.stdout


def test_an_unknown_shell_is_a_usage_error() -> None:
    done = subprocess.run([sys.executable, "-m", "ansible_operator", "completion", "tcsh"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and "invalid choice: 'tcsh'" in done.stderr


@pytest.mark.parametrize("line,expected", [
    ("ansible-operator ru", ["runs", "run"]),
    ("ansible-operator run --sdk-c", ["--sdk-conditions"]),
    ("ansible-operator run --executor ", ["warm", "runner"]),
    ("ansible-operator completion ", ["bash", "zsh", "fish"]),
])
def test_bash_completes_subcommands_flags_and_choices(line: str, expected: list[str]) -> None:
    """Real bash, sourcing what `completion bash` prints, asked as readline asks."""
    if shutil.which("bash") is None or not (BIN / "ansible-operator").exists():
        pytest.skip("needs bash and the ansible-operator script")
    words = line.split() + ([""] if line.endswith(" ") else [])
    script = ("source <(ansible-operator completion bash)\n"
              f"COMP_LINE={line!r}; COMP_POINT=${{#COMP_LINE}}\n"
              f"COMP_WORDS=({' '.join(repr(w) for w in words)}); COMP_CWORD={len(words) - 1}\n"
              "_python_argcomplete ansible-operator\n"
              'printf "%s\\n" "${COMPREPLY[@]}"\n')
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PATH": f"{BIN}:{os.environ.get('PATH', '')}"})
    assert done.returncode == 0, done.stderr
    got = {w.strip() for w in done.stdout.split()}
    assert set(expected) <= got and got - set(expected) <= {"-h", "--help"}, done.stdout + done.stderr
