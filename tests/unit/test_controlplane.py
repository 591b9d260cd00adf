"""The control plane's pure parts: generated replaces, the cache key, where binaries come from, the
provisioner's decisions (tests/controlplane runs the real thing)."""

from __future__ import annotations

import importlib.util
import stat
from pathlib import Path
from typing import Any

import pytest

from ansible_operator.controlplane import binaries, kwok, provisioner

REPO = Path(__file__).resolve().parents[2]


def _gen() -> Any:
    path = REPO / "scripts" / "gen_kube_modules.py"
    spec = importlib.util.spec_from_file_location("gen_kube_modules", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_staging_replaces_come_from_the_upstream_gomod() -> None:
    gomod = """module k8s.io/kubernetes
require (
\tgithub.com/x/y v1.2.3
\tk8s.io/api v0.0.0
\tk8s.io/client-go v0.0.0
\tk8s.io/utils v0.0.0-20260101000000-abcdef
)
require k8s.io/cri-api v0.0.0
replace k8s.io/api => ./staging/src/k8s.io/api
"""
    assert _gen().staging_replaces(gomod, "v1.36.3") == [
        ("k8s.io/api", "v0.36.3"), ("k8s.io/client-go", "v0.36.3"), ("k8s.io/cri-api", "v0.36.3")]


def test_committed_k8s_module_replaces_every_staging_module_of_its_kubernetes() -> None:
    text = (REPO / "tools" / "kube" / "k8s" / "go.mod").read_text()
    assert f"k8s.io/kubernetes {binaries.KUBERNETES_VERSION}" in text
    replaced = [line.split()[0] for line in text.splitlines() if "=>" in line]
    assert len(replaced) > 25 and "k8s.io/apiserver" in replaced
    minor_patch = binaries.KUBERNETES_VERSION.removeprefix("v1.")
    assert all(f"=> {m} v0.{minor_patch}" in text for m in replaced)


def _modules(tmp_path: Path) -> Path:
    modules = tmp_path / "modules"
    for sub in ("k8s", "etcd", "kwok"):
        (modules / sub).mkdir(parents=True)
        (modules / sub / "go.mod").write_text(f"module {sub}\n")
        (modules / sub / "go.sum").write_text("")
    return modules


def test_cache_key_follows_the_module_files(tmp_path: Path) -> None:
    modules = _modules(tmp_path)
    key = binaries.cache_key(modules)
    assert binaries.KUBERNETES_VERSION in key and binaries.ETCD_VERSION in key
    assert binaries.cache_key(modules) == key
    (modules / "etcd" / "go.sum").write_text("x v1 h1:abc\n")
    assert binaries.cache_key(modules) != key


def _exe(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_kubebuilder_assets_first_then_the_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    modules = _modules(tmp_path)
    monkeypatch.setenv("ANSIBLE_OPERATOR_KUBE_MODULES", str(modules))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assets = tmp_path / "assets"
    for name in ("etcd", "kube-apiserver"):  # what envtest's archives carry
        _exe(assets / name)
    monkeypatch.setenv("KUBEBUILDER_ASSETS", str(assets))
    with pytest.raises(binaries.BinariesUnavailable, match="not built yet"):
        binaries.find(build=False)
    cached = binaries.cache_root() / binaries.cache_key(modules)
    for name in binaries.NAMES:
        _exe(cached / "bin" / name)
    (cached / kwok.STAGES_FILE).write_text("kind: Stage\n")
    found = binaries.find(build=False)
    assert found.origin == {"etcd": "KUBEBUILDER_ASSETS", "kube-apiserver": "KUBEBUILDER_ASSETS",
                            "kube-controller-manager": "cache", "kube-scheduler": "cache", "kwok": "cache"}
    assert found["etcd"] == assets / "etcd" and found["kwok"] == cached / "bin" / "kwok"


def test_no_go_no_assets_says_what_to_do(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANSIBLE_OPERATOR_KUBE_MODULES", str(_modules(tmp_path)))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("KUBEBUILDER_ASSETS", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(binaries.BinariesUnavailable, match="no `go` on PATH"):
        binaries.find()


def _claim(name: str, phase: str = "Pending", **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}"},
            "spec": {"storageClassName": "standard", "accessModes": ["ReadWriteOnce"],
                     "resources": {"requests": {"storage": "2Gi"}}, **spec},
            "status": {"phase": phase}}


def test_provisioner_creates_a_prebound_volume_per_pending_claim_and_deletes_released_ones() -> None:
    calls: list[tuple[str, str, Any]] = []
    annotations = {"pv.kubernetes.io/provisioned-by": provisioner.NAME}
    ours = {"metadata": {"name": "pvc-old", "annotations": annotations}, "status": {"phase": "Released"}}
    foreign = {"metadata": {"name": "manual", "annotations": {}}, "status": {"phase": "Released"}}

    def request(method: str, path: str, body: Any = None) -> tuple[int, Any]:
        calls.append((method, path, body))
        if path == "/api/v1/persistentvolumeclaims":
            return 200, {"items": [_claim("new"), _claim("bound", "Bound", volumeName="pvc-x"),
                                   _claim("other", storageClassName="fast")]}
        if path == "/api/v1/persistentvolumes" and method == "GET":
            return 200, {"items": [ours, foreign]}
        return (201 if method == "POST" else 200), {}

    p = provisioner.Provisioner(request)
    p.once()
    created = [body for method, _, body in calls if method == "POST"]
    assert [v["metadata"]["name"] for v in created] == ["pvc-uid-new"]
    assert created[0]["spec"]["claimRef"] == {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                                              "namespace": "ns", "name": "new", "uid": "uid-new"}
    assert created[0]["spec"]["capacity"] == {"storage": "2Gi"}
    assert [path for method, path, _ in calls if method == "DELETE"] == ["/api/v1/persistentvolumes/pvc-old"]
    assert (p.provisioned, p.deleted) == (1, 1)
