"""Every task of a warm run reaches a TLS API server whose kubeconfig embeds its certificates and key.

kubernetes' kubeconfig loader writes ``certificate-authority-data`` / ``client-*-data`` to temporary files
and registers their removal with ``atexit``. With modules in the run child (``warm.inline_modules``) the
exit handlers of a module ran when it returned, so the first kubernetes.core task removed the files the
client kubernetes.core pools for the run's next tasks still loads on each new connection: every later
task of the run failed (``SSLError(FileNotFoundError)``). Operators that pass their own kubeconfig to runs
(``--inject-owner-ref=false``) against a real cluster (a secure sandbox here, whose kubeconfig is of
that kind) and roles run directly with a cluster's kubeconfig hit it. Those handlers now run when the run
child ends: the files live as long as the run, and not longer.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator

import pytest
from executor_helpers import started, write

from ansible_operator import collections
from ansible_operator.executors.base import RunRequest
from ansible_operator.executors.datadir import new_run_id
from ansible_operator.executors.warm.executor import WarmExecutor
from ansible_operator.executors.warm.fast_modules import DEFAULT_FAST_MODULE_PREFIXES
from ansible_operator_sandbox.testing import SandboxHandle, start_in_thread

pytestmark = pytest.mark.ansible_versions

# Which temporary files kubernetes' loader holds in the process that runs it, and whether they exist.
PROBE = '''
from ansible.module_utils.basic import AnsibleModule


def main():
    module = AnsibleModule(argument_spec={})
    from kubernetes.config import kube_config
    import os
    files = sorted(kube_config._temp_files.values())
    module.exit_json(changed=False, files=files, exist=[os.path.exists(f) for f in files], pid=os.getpid())


if __name__ == "__main__":
    main()
'''

PLAYBOOK = """
- hosts: localhost
  gather_facts: false
  tasks:
    - name: first
      kubernetes.core.k8s_info: {kind: Namespace, name: default}
    - name: second
      kubernetes.core.k8s_info: {kind: Namespace, name: default}
    - name: write
      kubernetes.core.k8s:
        definition: {apiVersion: v1, kind: ConfigMap, metadata: {name: tls-probe, namespace: default}}
    - name: probe
      testns.tls.probe: {}
"""


@pytest.fixture(scope="module")
def secure_sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SandboxHandle]:
    """One secure sandbox (TLS, its own CA) for both ways to run modules: each test's run is its own."""
    handle = start_in_thread(tmp_path_factory.mktemp("secure") / "kubeconfig", secure=True)
    try:
        yield handle
    finally:
        handle.sandbox.stop_thread()


@pytest.mark.parametrize("in_process", [True, False], ids=["inline", "forked"])
async def test_every_task_of_a_run_reaches_the_api_server(in_process: bool, secure_sandbox: SandboxHandle,
                                                          tmp_path: Path) -> None:
    handle = secure_sandbox
    assert "certificate-authority-data" in handle.kubeconfig.read_text()
    extra = tmp_path / "collections"
    write(extra / "ansible_collections" / "testns" / "tls" / "plugins" / "modules" / "probe.py", PROBE)
    rid = new_run_id()
    request = RunRequest(
        run_id=rid, private_data_dir=tmp_path / "runs" / rid, extra_vars={},
        playbook=write(tmp_path / "pb.yml", PLAYBOOK),
        collections_path=(extra, *collections.paths()),
        envvars={"K8S_AUTH_KUBECONFIG": str(handle.kubeconfig), "ANSIBLE_GATHERING": "explicit"})
    events: list[dict[str, Any]] = []
    executor = WarmExecutor(max_workers=1, modules_in_process=in_process,
                            fast_modules=(*DEFAULT_FAST_MODULE_PREFIXES, "testns.tls."))
    async with started(executor) as ex:
        outcome = await ex.run(request, events.append)
    results = {e["event_data"]["task"]: e for e in events
               if e["event"] in ("runner_on_ok", "runner_on_failed")}
    failed = {t: e["event_data"]["res"].get("msg") for t, e in results.items()
              if e["event"] == "runner_on_failed"}
    assert outcome.status == "successful" and not failed, failed
    assert set(results) == {"first", "second", "write", "probe"}
    probe = results["probe"]["event_data"]["res"]
    if in_process:
        # the run child's loader still holds the files of the first task, present until the run ended
        assert probe["files"] and all(probe["exist"]), probe
        assert not any(Path(f).exists() for f in probe["files"]), json.dumps(probe)
    # a forked module is a process of its own: the files of the probe's fork are none of its own
