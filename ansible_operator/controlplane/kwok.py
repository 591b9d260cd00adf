"""kwok, the fake kubelet: how it is started, the Stages it plays, and the Nodes it manages.

kwok (sigs.k8s.io/kwok) manages Nodes and their Pods without a kubelet or containers: a Stage selects
objects and writes the status a kubelet would. The Stages are upstream's "fast" set, the one kwokctl
uses by default (node-initialize, node-heartbeat-with-lease, pod-ready, pod-complete for Pods owned by a
Job, pod-delete). They are copied from the kwok module into the binaries' cache at build time
(:func:`binaries.build_into`, ``kwok-stages.yaml``), never committed. Nodes get a Lease heartbeat every
10 s (duration 40 s, kube-controller-manager's defaults hold).
"""

from __future__ import annotations

import urllib.request
from pathlib import Path
from typing import Any

# Upstream's "fast" Stage set: kustomize/stage/fast = node/fast + node/heartbeat-with-lease + pod/fast
STAGE_DIRS = ("node/fast", "node/heartbeat-with-lease", "pod/fast")
STAGES_FILE = "kwok-stages.yaml"


def collect_stages(kwok_module_dir: Path) -> str:
    """The Stage documents of :data:`STAGE_DIRS` from a kwok module source tree, as one YAML stream."""
    docs = []
    for sub in STAGE_DIRS:
        for path in sorted((kwok_module_dir / "kustomize" / "stage" / sub).glob("*.yaml")):
            if path.name == "kustomization.yaml":
                continue
            docs.append(f"# {sub}/{path.name} (sigs.k8s.io/kwok)\n{path.read_text().strip()}\n")
    if not docs:
        raise FileNotFoundError(f"no kwok Stages under {kwok_module_dir}/kustomize/stage")
    return "---\n".join(docs)


def args(workdir: Path, kubeconfig: Path, port: int, cert: Path, key: Path, stages: Path) -> list[str]:
    workdir.mkdir(parents=True, exist_ok=True)
    return [
        f"--kubeconfig={kubeconfig}", f"--config={stages}", "--manage-all-nodes=true",
        f"--tls-cert-file={cert}", f"--tls-private-key-file={key}",
        "--node-ip=127.0.0.1", "--node-name=localhost", f"--node-port={port}",
        f"--server-address=127.0.0.1:{port}", "--node-lease-duration-seconds=40", "--cidr=10.244.0.0/16",
    ]


def serving(kwok_args: list[str]) -> bool:
    """kwok's own /healthz answers (plain HTTP on its server address)."""
    address = next(a.split("=", 1)[1] for a in kwok_args if a.startswith("--server-address="))
    with urllib.request.urlopen(f"http://{address}/healthz", timeout=5) as resp:
        return bool(resp.status == 200)


def node(name: str) -> dict[str, Any]:
    """A Node kwok manages: no taints (workloads need no tolerations), room for a few hundred pods."""
    capacity = {"cpu": "64", "memory": "256Gi", "pods": "1000", "ephemeral-storage": "1Ti"}
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
            "labels": {"kubernetes.io/arch": "amd64", "kubernetes.io/os": "linux",
                       "kubernetes.io/hostname": name, "type": "kwok"},
        },
        "status": {"allocatable": capacity, "capacity": capacity,
                   "nodeInfo": {"architecture": "amd64", "operatingSystem": "linux",
                                "kubeletVersion": "fake", "kubeProxyVersion": "fake"}},
    }
