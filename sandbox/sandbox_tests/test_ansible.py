"""kubernetes.core (k8s, k8s_info, wait) against the sandbox through ansible-playbook; idempotent re-run."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from ansible_operator_sandbox.testing import SandboxHandle

PLAYBOOK = """
- hosts: localhost
  gather_facts: false
  tasks:
    - kubernetes.core.k8s:
        state: present
        definition:
          apiVersion: v1
          kind: Namespace
          metadata: {name: demo}
    - kubernetes.core.k8s:
        state: present
        definition:
          - apiVersion: v1
            kind: ConfigMap
            metadata: {name: cfg, namespace: demo, labels: {app: demo}}
            data: {key: value}
          - apiVersion: v1
            kind: Secret
            metadata: {name: sec, namespace: demo}
            stringData: {password: hunter2}
    - kubernetes.core.k8s:
        state: present
        wait: true
        wait_timeout: 30
        definition:
          apiVersion: apps/v1
          kind: Deployment
          metadata: {name: web, namespace: demo}
          spec:
            replicas: 2
            selector: {matchLabels: {app: web}}
            template:
              metadata: {labels: {app: web}}
              spec:
                containers: [{name: web, image: nginx}]
    - kubernetes.core.k8s_info:
        kind: ConfigMap
        namespace: demo
        label_selectors: ["app=demo"]
      register: info
    - assert:
        that:
          - info.resources | length == 1
          - info.resources[0].data.key == 'value'
    - kubernetes.core.k8s:
        state: absent
        api_version: v1
        kind: ConfigMap
        name: never-existed
        namespace: demo
"""

ansible_playbook = Path(sys.executable).parent / "ansible-playbook"


def _run(playbook: Path, env: dict[str, str]) -> str:
    proc = subprocess.run([str(ansible_playbook), str(playbook)], env=env, capture_output=True, text=True,
                          timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def test_playbook_present_wait_info_absent_idempotent(sandbox: SandboxHandle, tmp_path: Path):
    playbook = tmp_path / "play.yml"
    playbook.write_text(PLAYBOOK)
    env = sandbox.kubectl_env()
    env.update(ANSIBLE_LOCALHOST_WARNING="False", ANSIBLE_INVENTORY_UNPARSED_WARNING="False",
               ANSIBLE_LOCAL_TEMP=str(tmp_path / "tmp"), ANSIBLE_NOCOLOR="1")
    env.pop("ANSIBLE_CONFIG", None)
    first = _run(playbook, env)
    assert re.search(r"localhost\s+: ok=6\s+changed=3 ", first), first
    second = _run(playbook, env)
    assert re.search(r"localhost\s+: ok=6\s+changed=0 ", second), second
