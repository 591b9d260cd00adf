"""The objects every cluster has that no client creates, kept as kube-controller-manager / kube-apiserver keep
them.

* the ServiceAccount controller: a ``default`` ServiceAccount in every active namespace (re-created if
  deleted);
* the root-CA publisher: a ``kube-root-ca.crt`` ConfigMap (key ``ca.crt``) in every active namespace, reset if
  changed or deleted;
* kube-apiserver's ``kubernetes`` Service in ``default`` (ClusterIP ``10.96.0.1``, port 443 ``https``);
* one Node, ``sandbox-node``, Ready, the node simulated Pods are scheduled on (its InternalIP is their
  hostIP).

The CA certificate is the sandbox's own when it serves TLS (passed in), otherwise a self-signed CA made once
per
process: a real certificate that signs nothing, so code that reads and parses ``ca.crt`` works.
"""

from __future__ import annotations

import copy
import datetime as dt
import functools
from typing import Any

from ansible_operator_sandbox.api import Api
from ansible_operator_sandbox.errors import ApiError
from ansible_operator_sandbox.timeutil import now, rfc3339

NODE_NAME = "sandbox-node"
NODE_LEASE_NAMESPACE = "kube-node-lease"
NODE_IP = "10.0.0.1"
ROOT_CA_CONFIGMAP = "kube-root-ca.crt"
DEFAULT_SERVICE_ACCOUNT = "default"
KUBERNETES_SERVICE_IP = "10.96.0.1"


@functools.lru_cache(maxsize=1)
def self_signed_ca() -> str:
    """PEM of a self-signed CA certificate (EC P-256, ten years), made once per process."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "sandbox-ca")])
    start = dt.datetime.now(dt.timezone.utc) - dt.timedelta(minutes=5)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(start + dt.timedelta(days=3650))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM).decode()


class ClusterObjects:
    """Creates and repairs the cluster-provided objects; ``ensure_namespace`` runs on every namespace
    change."""

    def __init__(self, api: Api, root_ca_pem: str | None = None) -> None:
        self.api = api
        self.root_ca_pem = root_ca_pem

    def _type(self, group: str, plural: str) -> Any:
        rtype = self.api.registry.get(group, "v1", plural)
        assert rtype is not None
        return rtype

    def ensure_all(self) -> None:
        self.ensure_node()
        self.renew_node_lease()
        self.ensure_kubernetes_service()
        for _, ns in list(self.api.store.items("/namespaces")):
            self.ensure_namespace(ns["metadata"]["name"])

    def ensure_namespace(self, namespace: str) -> None:
        ns = self.api.store.peek(("/namespaces", "", namespace))
        if ns is None or (ns.get("metadata") or {}).get("deletionTimestamp"):
            return
        if self.api.store.peek(("/serviceaccounts", namespace, DEFAULT_SERVICE_ACCOUNT)) is None:
            self._create(self._type("", "serviceaccounts"), namespace,
                         {"metadata": {"name": DEFAULT_SERVICE_ACCOUNT}})
        ca = self.root_ca_pem or self_signed_ca()
        data = {"ca.crt": ca}
        current = self.api.store.peek(("/configmaps", namespace, ROOT_CA_CONFIGMAP))
        cm_type = self._type("", "configmaps")
        if current is None:
            self._create(
                cm_type,
                namespace,
                {
                    "metadata": {
                        "name": ROOT_CA_CONFIGMAP,
                        "annotations": {
                            "kubernetes.io/description": "Contains a CA bundle that can be used to verify "
                            "the kube-apiserver "
                            "when using internal endpoints such as the internal service IP or "
                            "kubernetes.default.svc. No other usage is guaranteed across "
                            "distributions of Kubernetes clusters."
                        },
                    },
                    "data": data,
                },
            )
        elif current.get("data") != data:
            body = copy.deepcopy(current)
            body["data"] = data
            body.pop("binaryData", None)
            body["metadata"].pop("resourceVersion", None)
            self.api.update(cm_type, namespace, ROOT_CA_CONFIGMAP, body)

    def ensure_kubernetes_service(self) -> None:
        if self.api.store.peek(("/services", "default", "kubernetes")) is not None:
            return
        self._create(
            self._type("", "services"),
            "default",
            {
                "metadata": {
                    "name": "kubernetes",
                    "labels": {"component": "apiserver", "provider": "kubernetes"},
                },
                "spec": {
                    "type": "ClusterIP",
                    "clusterIP": KUBERNETES_SERVICE_IP,
                    "sessionAffinity": "None",
                    "ports": [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": 6443}],
                },
            },
        )

    def renew_node_lease(self) -> None:
        """The kubelet's heartbeat: the Node's Lease in kube-node-lease, renewed every 10 s (40 s)."""
        lease_type = self._type("coordination.k8s.io", "leases")
        node = self.api.store.peek(("/nodes", "", NODE_NAME))
        if node is None or self.api.store.peek(("/namespaces", "", NODE_LEASE_NAMESPACE)) is None:
            return
        now = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        lease = self.api.store.peek(("coordination.k8s.io/leases", NODE_LEASE_NAMESPACE, NODE_NAME))
        if lease is None:
            self._create(lease_type, NODE_LEASE_NAMESPACE, {
                "metadata": {"name": NODE_NAME, "namespace": NODE_LEASE_NAMESPACE, "ownerReferences": [
                    {"apiVersion": "v1", "kind": "Node", "name": NODE_NAME, "uid": node["metadata"]["uid"]}]},
                "spec": {"holderIdentity": NODE_NAME, "leaseDurationSeconds": 40, "renewTime": now}})
            return
        body = copy.deepcopy(lease)
        body.setdefault("spec", {})["renewTime"] = now
        self.api.update(lease_type, NODE_LEASE_NAMESPACE, NODE_NAME, body)

    def ensure_node(self) -> None:
        if self.api.store.peek(("/nodes", "", NODE_NAME)) is not None:
            return
        node_type = self._type("", "nodes")
        self._create(node_type, None, {"metadata": {"name": NODE_NAME, "labels": {
            "kubernetes.io/hostname": NODE_NAME, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
            "beta.kubernetes.io/os": "linux", "beta.kubernetes.io/arch": "amd64",
            "node-role.kubernetes.io/control-plane": ""}},
            "spec": {"podCIDR": "10.244.0.0/16", "podCIDRs": ["10.244.0.0/16"]}})
        node = self.api.store.get(("/nodes", "", NODE_NAME))
        if node is None:
            return
        stamp = rfc3339(now())
        resources = {"cpu": "8", "memory": "32Gi", "pods": "110", "ephemeral-storage": "100Gi"}

        def cond(type_: str, status: str, reason: str, message: str) -> dict[str, Any]:
            return {"type": type_, "status": status, "reason": reason, "message": message,
                    "lastHeartbeatTime": stamp, "lastTransitionTime": stamp}
        node["status"] = {
            "capacity": resources,
            "allocatable": resources,
            "conditions": [
                cond(
                    "MemoryPressure",
                    "False",
                    "KubeletHasSufficientMemory",
                    "kubelet has sufficient memory available",
                ),
                cond("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
                cond(
                    "PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"
                ),
                cond(
                    "Ready",
                    "True",
                    "KubeletReady",
                    "kubelet is posting ready status (simulated: the sandbox runs no containers)",
                ),
            ],
            "addresses": [
                {"type": "InternalIP", "address": NODE_IP},
                {"type": "Hostname", "address": NODE_NAME},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "machineID": "",
                "systemUUID": "",
                "bootID": "",
                "kernelVersion": "",
                "osImage": "sandbox",
                "containerRuntimeVersion": "none://0",
                "kubeletVersion": "v1.32.0",
                "kubeProxyVersion": "",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
        }
        self.api.update(node_type, None, NODE_NAME, node, "status")

    def _create(self, rtype: Any, namespace: str | None, body: dict[str, Any]) -> None:
        try:
            self.api.create(rtype, namespace, body)
        except ApiError as e:
            if e.code != 409:  # created concurrently by a client: fine
                raise
