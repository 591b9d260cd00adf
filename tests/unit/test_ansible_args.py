"""``--ansible-args`` reaches ansible-playbook with both executors: a vault password file, ``--tags`` and
``-e @file`` given once to the executor apply to every run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from executor_helpers import started, write

from ansible_operator.executors import make_executor
from ansible_operator.executors.base import RunRequest
from ansible_operator.executors.datadir import new_run_id


def vault(text: str, password: str) -> str:
    from ansible.parsing.vault import VaultLib, VaultSecret

    lib = VaultLib([("default", VaultSecret(password.encode()))])
    return lib.encrypt(text).decode()


@pytest.mark.parametrize("executor_name", ["runner", "warm"])
async def test_ansible_args_apply_to_every_run(executor_name: str, tmp_path: Path) -> None:
    pw = write(tmp_path / "vault-pass", "pw\n")
    secret = vault("from-the-vault", "pw")
    extra = write(
        tmp_path / "extra.yml",
        "secret: !vault |\n"
        + "".join(f"  {line}\n" for line in secret.splitlines())
        + "from_file: file-value\n",
    )
    out = tmp_path / "out.json"
    playbook = write(
        tmp_path / "play.yml",
        f"""
- hosts: localhost
  gather_facts: false
  tasks:
    - name: tagged
      tags: [wanted]
      copy:
        dest: {out}
        content: "{{{{ {{'secret': secret, 'from_file': from_file}} | to_json }}}}"
    - name: not tagged, skipped by --tags
      tags: [other]
      fail:
        msg: --tags did not reach ansible-playbook
""",
    )
    args = ("--vault-password-file", str(pw), "--tags", "wanted", "-e", f"@{extra}")
    kw: dict[str, Any] = {"ansible_args": args}
    if executor_name == "warm":
        kw["max_workers"] = 1
    async with started(make_executor(executor_name, **kw)) as ex:
        for _ in range(2):
            out.unlink(missing_ok=True)
            rid = new_run_id()
            outcome = await ex.run(
                RunRequest(
                    run_id=rid,
                    private_data_dir=tmp_path / "runs" / rid,
                    extra_vars={},
                    playbook=playbook,
                    verbosity=0,
                    envvars={"ANSIBLE_GATHERING": "explicit"},
                ),
                lambda _e: None,
            )
            assert outcome.status == "successful", outcome
            assert json.loads(out.read_text()) == {"secret": "from-the-vault", "from_file": "file-value"}
