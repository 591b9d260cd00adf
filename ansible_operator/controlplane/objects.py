"""Objects a test or demo installs on the control plane: CustomResourceDefinitions, waited until served."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Iterable, Mapping, Protocol

import yaml

CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


def crd_documents(paths: Iterable[str | Path]) -> list[dict[str, Any]]:
    """Every CustomResourceDefinition in the given YAML files or directories (``*.yaml``/``*.yml``)."""
    files: list[Path] = []
    for p in paths:
        path = Path(p)
        files += sorted([*path.glob("*.yaml"), *path.glob("*.yml")]) if path.is_dir() else [path]
    docs = []
    for file in files:
        for doc in yaml.safe_load_all(file.read_text()):
            if isinstance(doc, dict) and doc.get("kind") == "CustomResourceDefinition":
                docs.append(doc)
    return docs


class Server(Protocol):
    """What installing needs of a control plane (:class:`~.launcher.ControlPlane`, which calls this as soon
    as its kube-apiserver is ready: this module sits below it)."""

    def apply(self, obj: Mapping[str, Any]) -> dict[str, Any]: ...

    def request(self, method: str, path: str, body: Any = ...,
                content_type: str = ...) -> tuple[int, Any]: ...


def install_crds(plane: Server, paths: Iterable[str | Path], timeout: float = 60.0) -> list[str]:
    """Apply the CRDs and wait until each is Established; their names."""
    names = []
    for doc in crd_documents(paths):
        plane.apply(doc)
        names.append(doc["metadata"]["name"])
    deadline = time.monotonic() + timeout
    for name in names:
        while True:
            status, crd = plane.request("GET", f"{CRDS}/{name}")
            conditions = (crd.get("status") or {}).get("conditions") or [] if status == 200 else []
            if any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions):
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"CRD {name} not Established after {timeout:.0f} s: {conditions}")
            time.sleep(0.2)
    return names
