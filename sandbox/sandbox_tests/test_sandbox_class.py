"""The public Sandbox interface: async start/stop, kubeconfig shape, CRDs installed at start."""

from __future__ import annotations

from pathlib import Path

import aiohttp
import yaml

from ansible_operator_sandbox import Sandbox

from .helpers import CRD


async def test_async_start_stop_kubeconfig_and_crds(tmp_path: Path):
    crd_file = tmp_path / "crds" / "widget.yaml"
    crd_file.parent.mkdir()
    crd_file.write_text(yaml.safe_dump_all([CRD, {"apiVersion": "v1", "kind": "ConfigMap",
                                                   "metadata": {"name": "ignored"}}]))
    sb = Sandbox(host="127.0.0.1", port=0, data_dir=None, crds=(str(crd_file.parent),), simulate=True)
    await sb.start()
    try:
        assert sb.url.startswith("http://127.0.0.1:") and sb.port > 0
        cfg = yaml.safe_load(sb.write_kubeconfig(tmp_path / "kc").read_text())
        assert cfg["current-context"] == "sandbox"
        assert cfg["clusters"] == [{"name": "sandbox", "cluster": {"server": sb.url}}]
        assert cfg["users"][0]["name"] == "sandbox"
        assert cfg["contexts"][0]["context"] == {
            "cluster": "sandbox",
            "user": "sandbox",
            "namespace": "default",
        }
        async with aiohttp.ClientSession() as session:
            async with session.get(f"{sb.url}/apis/test.example.com/v1") as resp:
                doc = await resp.json()
            assert [r["name"] for r in doc["resources"]] == ["widgets", "widgets/status"]
            async with session.get(f"{sb.url}/api/v1/namespaces") as resp:
                names = [n["metadata"]["name"] for n in (await resp.json())["items"]]
            assert {"default", "kube-system"} <= set(names)
            async with session.get(f"{sb.url}/api/v1/namespaces/default/configmaps/ignored") as resp:
                assert resp.status == 404  # only CRDs are installed from --crds files
    finally:
        await sb.stop()
