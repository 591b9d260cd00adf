"""Restarting ``ansible-operator sandbox`` on the same --data-dir keeps objects, CRDs and resourceVersions."""

from __future__ import annotations

import json
from pathlib import Path

import kubernetes
import pytest
from kubernetes.client.rest import ApiException

from .helpers import install_crd, widget


def test_restart_keeps_objects_and_monotonic_resource_version(tmp_path: Path, sandbox_process):
    data = tmp_path / "data"
    first = sandbox_process(data_dir=data)
    try:
        api = first.api_client()
        install_crd(api)
        core = kubernetes.client.CoreV1Api(api)
        custom = kubernetes.client.CustomObjectsApi(api)
        core.create_namespace({"metadata": {"name": "keep"}})
        cm = core.create_namespaced_config_map("keep", {"metadata": {"name": "cm", "labels": {"a": "b"}},
                                                        "data": {"k": "v"}})
        w = custom.create_namespaced_custom_object(
            "test.example.com", "v1", "keep", "widgets", widget("w", 4)
        )
        last_rv = int(core.list_namespaced_config_map("keep").metadata.resource_version)
        api.close()
    finally:
        assert first.stop() == 0
    port = first.port
    second = sandbox_process(data_dir=data, port=port)  # same port: clients keep working
    try:
        assert second.url == first.url
        api = second.api_client()
        core = kubernetes.client.CoreV1Api(api)
        custom = kubernetes.client.CustomObjectsApi(api)
        got = core.read_namespaced_config_map("cm", "keep")
        assert got.metadata.uid == cm.metadata.uid and got.data == {"k": "v"}
        assert got.metadata.resource_version == cm.metadata.resource_version
        got_w = custom.get_namespaced_custom_object("test.example.com", "v1", "keep", "widgets", "w")
        assert got_w["metadata"]["uid"] == w["metadata"]["uid"] and got_w["spec"]["size"] == 4
        new = core.create_namespaced_config_map("keep", {"metadata": {"name": "after"}})
        assert int(new.metadata.resource_version) > last_rv
        # watch history starts fresh: resuming from before the restart is 410 Gone, as after etcd compaction
        resp = core.list_namespaced_config_map(
            "keep",
            watch=True,
            resource_version=cm.metadata.resource_version,
            timeout_seconds=2,
            _preload_content=False,
        )
        event = json.loads(resp.readline())
        resp.release_conn()
        assert event["type"] == "ERROR" and event["object"]["code"] == 410
        with pytest.raises(ApiException) as e:
            core.read_namespaced_config_map("missing", "keep")
        assert e.value.status == 404
        api.close()
    finally:
        assert second.stop() == 0


def test_cli_rejects_invalid_crd_files(tmp_path: Path):
    import subprocess
    import sys
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {name: wrong}\n"
        "spec: {group: x}\n"
    )
    proc = subprocess.run([sys.executable, "-m", "ansible_operator_sandbox", "--crds", str(bad)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert 'CustomResourceDefinition.apiextensions.k8s.io "wrong" is invalid' in proc.stderr
    assert "sandbox: serving" not in proc.stdout
