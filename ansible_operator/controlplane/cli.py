"""``ansible-operator cluster``: build the real control plane's binaries, or run one on loopback.

* ``cluster build``: find or build the binaries (``KUBEBUILDER_ASSETS``, the cache, or ``go build`` from
  ``tools/kube``) and print where each comes from and its version.
* ``cluster up``: start etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok; print the
  URL and the admin kubeconfig (also written to ``--kubeconfig`` if given); serve until SIGINT/SIGTERM,
  then stop every process. ``--crds`` installs CustomResourceDefinitions once it is up.
"""

from __future__ import annotations

import argparse
import shutil
import signal
import sys
import tempfile
import threading
from pathlib import Path

from ansible_operator.controlplane import binaries
from ansible_operator.controlplane.launcher import ControlPlane, ControlPlaneError


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def main(args: argparse.Namespace) -> int:
    try:
        bins = binaries.find(progress=_say)
    except binaries.BinariesUnavailable as exc:
        _say(f"cluster: {exc}")
        return 1
    if args.action == "build":
        for name, version in binaries.iter_versions(bins):
            print(f"{name}: {bins[name]} ({bins.origin[name]}): {version}")
        return 0
    directory = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="ansible-operator-cluster-"))
    plane = ControlPlane(directory, bins, nodes=args.nodes, crds=args.crds or (), progress=_say)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    try:
        plane.start()
        if args.kubeconfig:
            shutil.copyfile(plane.kubeconfig, args.kubeconfig)
            Path(args.kubeconfig).chmod(0o600)
        plane.write_state()
        print(f"cluster: serving {plane.url}", flush=True)
        print(f"kubeconfig: {args.kubeconfig or plane.kubeconfig}", flush=True)
        print(f"logs: {directory / 'logs'}", flush=True)
        while not stop.wait(1):
            for name, part in plane.parts.items():
                if not part.running():
                    raise ControlPlaneError(f"{name} exited ({part.log}):\n{part.tail()}")
    except ControlPlaneError as exc:
        _say(f"cluster: {exc}")
        return 1
    finally:
        plane.stop()
        if not args.dir and not args.keep:
            shutil.rmtree(directory, ignore_errors=True)
    _say("cluster: stopped")
    return 0
