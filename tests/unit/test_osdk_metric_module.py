"""The bundled ``osdk_metric`` (``ansible_operator.util.osdk_metric``, and the SDK name
``operator_sdk.util.osdk_metric`` redirected to it) run by real ansible-playbook against the operator's
endpoint: metrics land on /metrics, a refused request fails the task with the operator's reason."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

from ansible_operator import collections as aocollections
from ansible_operator.metrics import OSDK_METRIC_ENV, Metrics, serve_osdk_metric

PLAY = """
- hosts: localhost
  gather_facts: false
  tasks:
    - operator_sdk.util.osdk_metric:
        name: demo_reconciles
        description: Reconciles of the demo role
        counter: {increment: true}
    - ansible_operator.util.osdk_metric:
        name: demo_reconciles
        description: Reconciles of the demo role
        counter: {add: 2}
    - operator_sdk.util.osdk_metric:
        name: demo_replicas
        description: Replicas wanted
        gauge: {set: "{{ 3 }}"}
    - operator_sdk.util.osdk_metric:
        name: demo_seconds
        description: Durations
        histogram: {observe: 0.2}
    - operator_sdk.util.osdk_metric:
        name: demo_summary
        description: Summary
        summary: {observe: 1.5}
    - operator_sdk.util.osdk_metric:
        name: demo_replicas
        description: now a counter?
        counter: {increment: true}
      register: refused
      ignore_errors: true
    - copy:
        dest: "{{ out }}"
        content: "{{ refused | to_json }}"
"""


async def test_bundled_module_posts_to_the_operator(tmp_path: Path) -> None:
    metrics = Metrics()
    handle = await serve_osdk_metric("127.0.0.1:0", metrics.user)
    assert handle is not None
    play = tmp_path / "play.yml"
    play.write_text(PLAY)
    out = tmp_path / "refused.json"
    env = {
        **os.environ,
        OSDK_METRIC_ENV: f"{handle.url}/metrics",
        "ANSIBLE_GATHERING": "explicit",
        "ANSIBLE_COLLECTIONS_PATH": os.pathsep.join(str(p) for p in aocollections.paths()),
    }
    try:
        proc = await asyncio.create_subprocess_exec(
            str(Path(sys.executable).parent / "ansible-playbook"),
            "-i",
            "localhost,",
            "-c",
            "local",
            "-e",
            f"ansible_python_interpreter={sys.executable}",
            "-e",
            f"out={out}",
            str(play),
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        stdout, _ = await proc.communicate()
    finally:
        await handle.close()
    assert proc.returncode == 0, stdout.decode()[-3000:]
    text = metrics.exposition().decode()
    assert "# TYPE demo_reconciles counter\ndemo_reconciles 3\n" in text
    assert "demo_replicas 3\n" in text
    assert "demo_seconds_count 1\n" in text and "demo_summary_sum 1.5\n" in text
    refused = json.loads(out.read_text())
    assert refused["failed"] and refused["status_code"] == 400
    assert "cannot change metric type of demo_replicas, which is a gauge" in refused["msg"]


REAL_MODULE = """
from ansible.module_utils.basic import AnsibleModule

def main():
    module = AnsibleModule(argument_spec={"name": {}, "description": {}, "counter": {"type": "dict"}})
    module.exit_json(changed=False, installed_collection=True)

if __name__ == "__main__":
    main()
"""

SHADOW_PLAY = """
- hosts: localhost
  gather_facts: false
  tasks:
    - operator_sdk.util.osdk_metric:
        name: demo
        description: demo
        counter: {increment: true}
      register: result
    - copy:
        dest: "{{ out }}"
        content: "{{ result | to_json }}"
"""


async def test_an_installed_operator_sdk_util_shadows_the_shim(tmp_path: Path) -> None:
    """The operator's search path (ours, the user's collections, the shim last): a project's installed
    operator_sdk.util is the one its roles get, as under the SDK."""
    installed = tmp_path / "installed"
    module = (
        installed / "ansible_collections" / "operator_sdk" / "util" / "plugins" / "modules" / "osdk_metric.py"
    )
    module.parent.mkdir(parents=True)
    module.write_text(REAL_MODULE)
    play = tmp_path / "play.yml"
    play.write_text(SHADOW_PLAY)
    out = tmp_path / "result.json"
    path = os.pathsep.join([str(aocollections.COLLECTIONS_ROOT), aocollections.search_path(str(installed))])
    assert path.endswith(str(aocollections.COMPAT_ROOT))
    env = {**os.environ, "ANSIBLE_COLLECTIONS_PATH": path}
    proc = await asyncio.create_subprocess_exec(
        str(Path(sys.executable).parent / "ansible-playbook"),
        "-i",
        "localhost,",
        "-c",
        "local",
        "-e",
        f"ansible_python_interpreter={sys.executable}",
        "-e",
        f"out={out}",
        str(play),
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    stdout, _ = await proc.communicate()
    assert proc.returncode == 0, stdout.decode()[-3000:]
    assert json.loads(out.read_text()).get("installed_collection") is True
