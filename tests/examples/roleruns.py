"""Run an example role the way the operator does, without the operator.

The operator's run for a custom resource is "ansible-playbook with the role, and extra vars built from
the object". These helpers build the extra vars with the runner's own ``extravars.build_extra_vars``
(same names, snake_casing and ``!unsafe`` marking as real runs), write a one-play playbook and run it
against a sandbox, so a role's whole lifecycle can be tested before (and independently of) the runner.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ansible_operator import extravars

REPO = Path(__file__).resolve().parents[2]
ROLES = REPO / "roles"
COLLECTIONS = REPO / "ansible_operator" / "collections" / "ours"
VENV_BIN = Path(sys.executable).parent


@dataclass(frozen=True)
class Kind:
    group: str
    version: str
    kind: str
    plural: str

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"


SAMPLEDB = Kind("db.ansible-operator.dev", "v1alpha1", "SampleDB", "sampledbs")
MEMCACHED = Kind("cache.example.com", "v1alpha1", "Memcached", "memcacheds")
ETCDCLUSTER = Kind("etcd.database.example.com", "v1beta2", "EtcdCluster", "etcdclusters")


@dataclass(frozen=True)
class RoleRun:
    rc: int
    output: str

    @property
    def ok(self) -> bool:
        return self.rc == 0

    def failure_messages(self) -> list[str]:
        """``msg`` of every failed task (from the JSON callback), in order."""
        try:
            data = json.loads(self.output[self.output.index("{"):])
        except ValueError:
            return []
        out: list[str] = []
        for play in data.get("plays", []):
            for task in play.get("tasks", []):
                for res in task.get("hosts", {}).values():
                    if res.get("failed"):
                        out.append(str(res.get("msg", "")))
        return out


def ansible_env(kubeconfig: Path) -> dict[str, str]:
    """Environment of a run: kubeconfig, the project's collection (ansible_operator.util), ./roles."""
    env = dict(os.environ)
    env.update(
        K8S_AUTH_KUBECONFIG=str(kubeconfig),
        KUBECONFIG=str(kubeconfig),
        ANSIBLE_COLLECTIONS_PATH=str(COLLECTIONS),
        ANSIBLE_ROLES_PATH=str(ROLES),
        ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json",
        ANSIBLE_LOCALHOST_WARNING="false",
        ANSIBLE_INVENTORY_UNPARSED_WARNING="false",
        ANSIBLE_PYTHON_INTERPRETER=sys.executable,
        ANSIBLE_NOCOLOR="1",
        PATH=f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}",
    )
    return env


def run_role(role: str, obj: dict[str, Any], kind: Kind, kubeconfig: Path, workdir: Path,
             *, finalizer_vars: dict[str, Any] | None = None, timeout: float = 240) -> RoleRun:
    """Run ``roles/<role>`` for ``obj`` (as read from the API) with the operator's extra vars."""
    workdir.mkdir(parents=True, exist_ok=True)
    evars = extravars.build_extra_vars(obj, watch_vars={}, snake_case=True, mark_unsafe=True,
                                       group=kind.group, kind=kind.kind, finalizer_vars=finalizer_vars)
    vars_file = workdir / "extravars.yml"
    vars_file.write_text(extravars.dump(evars), encoding="utf-8")
    playbook = workdir / "play.yml"
    playbook.write_text(yaml.safe_dump([{
        "hosts": "localhost", "connection": "local", "gather_facts": False,
        "roles": [str(ROLES / role)],
    }]), encoding="utf-8")
    proc = subprocess.run(
        [str(VENV_BIN / "ansible-playbook"), "-i", "localhost,", "-e", f"@{vars_file}", str(playbook)],
        cwd=workdir, env=ansible_env(kubeconfig), capture_output=True, text=True, timeout=timeout,
    )
    return RoleRun(proc.returncode, proc.stdout + proc.stderr)
