"""An API server that authenticates and enforces RBAC, for the tests about credentials: the shared real
control plane (tokens from its TokenRequest API, kubeconfigs built from the admin one's server and CA), or a
secure sandbox of the module's own (``ANSIBLE_OPERATOR_TEST_API=sandbox``)."""

from __future__ import annotations

import base64
import contextlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import kubernetes
import yaml

from ansible_operator_sandbox import Sandbox
from ansible_operator_sandbox.testing import start_in_thread
from tests import kube

from .proxy import server_of


@dataclass
class SecureServer:
    kubeconfig: Path  # the admin's (system:masters)
    url: str
    ca_pem: str
    sandbox: Sandbox | None = None  # None on the real control plane
    shared: kube.SharedCluster | None = field(default=None, repr=False)

    @property
    def real(self) -> bool:
        return self.sandbox is None

    def api_client(self) -> kubernetes.client.ApiClient:
        return kube.api_client_for(self.kubeconfig)

    def kubectl_env(self, kubeconfig: Path | None = None) -> dict[str, str]:
        config = kubeconfig or self.kubeconfig
        env = dict(os.environ, KUBECONFIG=str(config), K8S_AUTH_KUBECONFIG=str(config))
        if self.sandbox is not None:
            # kubectl caches discovery per host:port: private to this sandbox (a later one may reuse a port)
            env["KUBECACHEDIR"] = str(self.kubeconfig.parent / (self.kubeconfig.name + ".cache"))
        return env

    def create_namespace(self, name: str) -> None:
        """Namespace ``name`` (deleted at the end on the shared control plane: make the name unique)."""
        with self.api_client() as api:
            kubernetes.client.CoreV1Api(api).create_namespace({"metadata": {"name": name}})
        if self.shared is not None:
            self.shared.created.append(name)

    def create_token(self, namespace: str, service_account: str,
                     bound_to: tuple[str, str] | None = None) -> str:
        """A ServiceAccount token (TokenRequest), bound to a Secret or Pod ``(kind, name)`` if given: it
        stops working when that object is deleted."""
        if self.sandbox is not None:
            return self.sandbox.create_token(namespace, service_account, bound_to=bound_to)
        spec: dict[str, Any] = {}
        if bound_to is not None:
            spec["boundObjectRef"] = {"apiVersion": "v1", "kind": bound_to[0], "name": bound_to[1]}
        with self.api_client() as api:
            answer = kubernetes.client.CoreV1Api(api).create_namespaced_service_account_token(
                service_account, namespace, {"spec": spec})
        return str(answer.status.token)

    def write_kubeconfig(self, path: Path, namespace: str, token: str) -> Path:
        """A kubeconfig of a bearer ``token``: this server's URL and CA, nothing of the admin's."""
        if self.sandbox is not None:
            return self.sandbox.write_kubeconfig(path, namespace, token=token)
        config = {
            "apiVersion": "v1", "kind": "Config", "preferences": {}, "current-context": "token",
            "clusters": [{"name": "server", "cluster": {
                "server": self.url,
                "certificate-authority-data": base64.b64encode(self.ca_pem.encode()).decode()}}],
            "users": [{"name": "token", "user": {"token": token}}],
            "contexts": [{"name": "token", "context": {"cluster": "server", "user": "token",
                                                       "namespace": namespace}}],
        }
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        path.chmod(0o600)
        return path


def _ca_of(kubeconfig: Path) -> str:
    config = yaml.safe_load(kubeconfig.read_text())
    return base64.b64decode(config["clusters"][0]["cluster"]["certificate-authority-data"]).decode()


@contextlib.contextmanager
def secure_server(directory: Path, crds: list[Path] | None = None,
                  simulate: bool = True) -> Iterator[SecureServer]:
    """The shared real control plane (its namespaces made through :meth:`SecureServer.namespace` deleted
    afterwards), or a secure sandbox with ``crds`` in ``directory``."""
    if kube.real():
        shared = kube.shared()
        try:
            yield SecureServer(shared.kubeconfig, server_of(shared.kubeconfig), _ca_of(shared.kubeconfig),
                               shared=shared)
        finally:
            shared.cleanup()
        return
    handle = start_in_thread(directory / "admin.kubeconfig", crds=crds or [], simulate=simulate, secure=True)
    try:
        assert handle.sandbox.ca_pem
        yield SecureServer(handle.kubeconfig, handle.url, handle.sandbox.ca_pem, handle.sandbox)
    finally:
        handle.sandbox.stop_thread()
