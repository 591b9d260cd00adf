"""A storage provisioner for the local control plane: every claim of the default StorageClass gets a volume.

A real cluster runs an external provisioner (a CSI driver's) for its StorageClass; kube-controller-manager's
PV controller only binds. Here claims of :data:`STORAGE_CLASS` (``standard``, the default, binding mode
``Immediate``) get a ``hostPath`` PersistentVolume pre-bound to them (``claimRef``, as external-provisioner
writes it), which the PV controller then binds: the claim goes ``Bound`` and a StatefulSet's pods can be
scheduled. A ``Released`` volume it provisioned is deleted (reclaim policy ``Delete``), as a provisioner
does. Nothing is written to the host path: kwok's pods never mount it.

Polls the API server twice a second: the claims of a test cluster are few, and a poll survives API server
restarts without a watch to re-establish.
"""

from __future__ import annotations

import threading
from typing import Any, Callable

NAME = "ansible-operator.dev/local"
STORAGE_CLASS: dict[str, Any] = {
    "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
    "metadata": {"name": "standard",
                 "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
    "provisioner": NAME, "reclaimPolicy": "Delete", "volumeBindingMode": "Immediate",
}
Request = Callable[..., tuple[int, Any]]


def volume_for(claim: dict[str, Any]) -> dict[str, Any]:
    meta, spec = claim["metadata"], claim.get("spec") or {}
    size = ((spec.get("resources") or {}).get("requests") or {}).get("storage", "1Gi")
    name = f"pvc-{meta['uid']}"
    return {
        "apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": {"name": name, "annotations": {"pv.kubernetes.io/provisioned-by": NAME}},
        "spec": {
            "capacity": {"storage": size},
            "accessModes": spec.get("accessModes") or ["ReadWriteOnce"],
            "volumeMode": spec.get("volumeMode") or "Filesystem",
            "persistentVolumeReclaimPolicy": "Delete",
            "storageClassName": STORAGE_CLASS["metadata"]["name"],
            "hostPath": {"path": f"/tmp/ansible-operator-volumes/{name}"},
            "claimRef": {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "namespace": meta["namespace"],
                         "name": meta["name"], "uid": meta["uid"]},
        },
    }


class Provisioner:
    def __init__(self, request: Request, interval: float = 0.5) -> None:
        self.request = request
        self.interval = interval
        self.provisioned = 0
        self.deleted = 0
        self.last_error: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="volume-provisioner", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(10)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.once()
            except Exception as exc:  # the API server may be restarting: try again next time
                self.last_error = repr(exc)

    def once(self) -> None:
        status, claims = self.request("GET", "/api/v1/persistentvolumeclaims")
        if status != 200:
            return
        class_name = STORAGE_CLASS["metadata"]["name"]
        for claim in claims.get("items") or []:
            spec = claim.get("spec") or {}
            if (spec.get("storageClassName") != class_name or spec.get("volumeName")
                    or (claim.get("status") or {}).get("phase") != "Pending"
                    or claim["metadata"].get("deletionTimestamp")):
                continue
            created, _ = self.request("POST", "/api/v1/persistentvolumes", volume_for(claim))
            if created == 201:
                self.provisioned += 1
        status, volumes = self.request("GET", "/api/v1/persistentvolumes")
        if status != 200:
            return
        for volume in volumes.get("items") or []:
            annotations = volume["metadata"].get("annotations") or {}
            if (annotations.get("pv.kubernetes.io/provisioned-by") == NAME
                    and (volume.get("status") or {}).get("phase") == "Released"
                    and not volume["metadata"].get("deletionTimestamp")):
                path = f"/api/v1/persistentvolumes/{volume['metadata']['name']}"
                if self.request("DELETE", path)[0] == 200:
                    self.deleted += 1
