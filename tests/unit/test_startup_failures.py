"""Every start-up failure of ``ansible-operator run`` is one clear line and a non-zero exit (issue 21): no
traceback, JSON under ``--zap-encoder=json``, and nothing claiming the operator ran ("operator ready",
"shutting down") when it never did."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

WATCH = "- version: v1\n  group: x.example.com\n  kind: Foo\n  role: {role}\n"
UNREACHABLE = """apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
"""
NO_CONTEXT = UNREACHABLE.replace("current-context: c", "current-context: elsewhere")
BAD_SELECTOR = "  selector:\n    matchLabels:\n      'bad key!': x\n"

CASES = {
    # name: (kubeconfig text or None for a missing file, extra watches.yaml text, exit code, the line says)
    "API server unreachable": (UNREACHABLE, "", 1, "unreachable for 1s (--api-unreachable-timeout)"),
    "kubeconfig is not YAML": ("clusters: [\n", "", 2, "not YAML"),
    "kubeconfig missing": (None, "", 2, "kubeconfig not found"),
    "current-context missing": (NO_CONTEXT, "", 2, "elsewhere"),
    "invalid selector in watches.yaml": (UNREACHABLE, BAD_SELECTOR, 2, "invalid value for 'selector'"),
    "unknown key in watches.yaml": (UNREACHABLE, "  rol: nope\n", 2,
                                    "unknown key 'rol' (did you mean 'role'?)"),
}


@pytest.mark.parametrize("encoder", ["console", "json"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_a_start_up_failure_is_one_line_and_an_exit_code(case: str, encoder: str, tmp_path: Path) -> None:
    kubeconfig_text, extra, code, says = CASES[case]
    role = tmp_path / "role"
    (role / "tasks").mkdir(parents=True)
    (role / "tasks" / "main.yml").write_text("- ansible.builtin.debug: {msg: hi}\n")
    watches = tmp_path / "watches.yaml"
    watches.write_text(WATCH.format(role=role) + extra)
    kubeconfig = tmp_path / "kubeconfig"
    if kubeconfig_text is not None:
        kubeconfig.write_text(kubeconfig_text)
    done = subprocess.run(
        [sys.executable, "-m", "ansible_operator", "run", "--watches-file", str(watches),
         "--kubeconfig", str(kubeconfig), "--api-unreachable-timeout=1s", f"--zap-encoder={encoder}",
         "--metrics-bind-address=0", "--health-probe-bind-address=0"],
        capture_output=True, text=True, timeout=120, cwd=tmp_path)
    lines = (done.stdout + done.stderr).splitlines()
    assert done.returncode == code, lines
    errors = [line for line in lines if "ERROR" in line or '"error"' in line.lower()]
    assert len(errors) == 1 and says in errors[0], lines
    assert len(lines) <= 2, lines  # at most "waiting for the API server ..." before it
    text = "\n".join(lines)
    assert "Traceback" not in text and "operator ready" not in text and "shutting down" not in text
    if encoder == "json":
        for line in lines:
            assert isinstance(json.loads(line), dict), line


@pytest.mark.parametrize("encoder", ["console", "json"])
def test_unusable_in_cluster_credentials_are_one_line_and_exit_2(encoder: str, tmp_path: Path) -> None:
    """In a pod (KUBERNETES_SERVICE_HOST set, no kubeconfig) whose service account files are incomplete."""
    import os

    role = tmp_path / "roles" / "r"
    (role / "tasks").mkdir(parents=True)
    (role / "tasks" / "main.yml").write_text("- ansible.builtin.debug: {msg: hi}\n")
    (tmp_path / "watches.yaml").write_text(WATCH.format(role=role))
    sa = tmp_path / "serviceaccount"
    sa.mkdir()
    (sa / "token").write_text("t")  # no ca.crt
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    env.update(HOME=str(tmp_path), KUBERNETES_SERVICE_HOST="127.0.0.1", KUBERNETES_SERVICE_PORT="1",
               ANSIBLE_OPERATOR_SERVICE_ACCOUNT_DIR=str(sa))
    done = subprocess.run(
        [sys.executable, "-m", "ansible_operator", "run", "--watches-file", str(tmp_path / "watches.yaml"),
         f"--zap-encoder={encoder}", "--metrics-bind-address=0", "--health-probe-bind-address=0"],
        capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env)
    lines = (done.stdout + done.stderr).splitlines()
    assert done.returncode == 2 and len(lines) == 1, lines
    assert "no cluster configuration" in lines[0] and "Traceback" not in lines[0]
    if encoder == "json":
        assert json.loads(lines[0])["level"] == "error"
