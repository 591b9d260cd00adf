"""A real Kubernetes control plane for tests, the demo and molecule: built from upstream Go modules, run as
processes on loopback (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok).

>>> from ansible_operator.controlplane import ControlPlane
>>> with ControlPlane(tmp_dir) as plane:         # binaries from KUBEBUILDER_ASSETS, the cache, or built
...     plane.kubeconfig                         # admin (system:masters) kubeconfig
...     plane.restart("kube-apiserver")          # faults: restart / kill a component
...     plane.compact()                          # etcd compaction: old resourceVersions get 410

The runner never imports this package (import contract): it is what the runner is tested against.
"""

from ansible_operator.controlplane.binaries import Binaries, BinariesUnavailable, find
from ansible_operator.controlplane.launcher import ControlPlane, ControlPlaneError
from ansible_operator.controlplane.objects import install_crds

__all__ = ["Binaries", "BinariesUnavailable", "ControlPlane", "ControlPlaneError", "find", "install_crds"]
