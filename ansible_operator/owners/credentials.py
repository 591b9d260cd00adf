"""What each run's roles use to reach the cluster (:class:`Credentials`, asked by reconcile once per run).

:class:`ProxyCredentials` (the default) gives each run a kubeconfig of its own for the owner-injecting proxy
(:class:`~ansible_operator.owners.proxy.OwnerProxy`); :class:`PassThroughCredentials` the operator's own
kubeconfig (``--inject-owner-ref=false``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from ansible_operator.kubetypes import KubeObject

__all__ = ["Credentials", "PassThroughCredentials", "ProxyCredentials", "RunKubeconfigs"]


class Credentials(Protocol):
    """Gives each run the cluster credentials its roles use (reconcile asks, once per run)."""

    def envvars_for(self, owner: KubeObject, run_dir: Path) -> dict[str, str]: ...

    def release(self, run_dir: Path) -> None: ...


class RunKubeconfigs(Protocol):
    """What writes a run's kubeconfig bound to its owner and revokes it afterwards (``OwnerProxy``)."""

    def kubeconfig_for(self, owner: KubeObject, path: Path) -> Path: ...

    def release(self, path: Path) -> None: ...


class PassThroughCredentials:
    """Runs use the operator's own kubeconfig (or the in-cluster service account when there is none):
    ``--inject-owner-ref=false``."""

    def __init__(self, kubeconfig: str | None) -> None:
        self.kubeconfig = kubeconfig

    def envvars_for(self, owner: KubeObject, run_dir: Path) -> dict[str, str]:
        if not self.kubeconfig:
            return {}
        path = str(Path(self.kubeconfig).resolve())
        return {"K8S_AUTH_KUBECONFIG": path, "KUBECONFIG": path}

    def release(self, run_dir: Path) -> None:
        return None


class ProxyCredentials:
    """Each run gets a kubeconfig of its own pointing at the owner-injecting proxy, with a token bound to
    the run's custom resource (released, so refused, once the run ends)."""

    def __init__(self, proxy: RunKubeconfigs) -> None:
        self.proxy = proxy

    def envvars_for(self, owner: KubeObject, run_dir: Path) -> dict[str, str]:
        path = self.proxy.kubeconfig_for(owner, run_dir / "kubeconfig")
        return {"K8S_AUTH_KUBECONFIG": str(path), "KUBECONFIG": str(path)}

    def release(self, run_dir: Path) -> None:
        self.proxy.release(run_dir / "kubeconfig")
