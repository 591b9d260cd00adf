"""Command line: every flag of every command is declared here, so one file shows the whole surface.

Each command's work lives in the module named for it; those modules keep heavy imports (kopf,
ansible, aiohttp) inside their ``main`` so ``ansible-operator --help`` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from typing import Sequence

from ansible_operator import __version__


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    try:
        return int(value)
    except ValueError:
        raise SystemExit(f"ansible-operator: environment variable {name}={value!r} is not an integer") from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ansible-operator",
        description="Run Ansible roles as Kubernetes operators (Operator SDK watches.yaml compatible).",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    # ---- run -------------------------------------------------------------------------------------
    run = sub.add_parser("run", help="run the operator for the custom resources listed in watches.yaml")
    run.set_defaults(module="ansible_operator.manager")
    run.add_argument("--watches-file", default=os.environ.get("WATCHES_FILE", "watches.yaml"),
                     help="path to watches.yaml (default: ./watches.yaml, or $WATCHES_FILE)")
    run.add_argument("--kubeconfig", default=None,
                     help="kubeconfig to use (default: $KUBECONFIG, ~/.kube/config, then in-cluster config)")
    run.add_argument("--namespace", action="append", default=None, metavar="NS",
                     help="watch only this namespace (repeatable; default: $WATCH_NAMESPACE, comma-separated;"
                          " empty means all namespaces)")
    run.add_argument("--max-concurrent-reconciles", type=int, default=None, metavar="N",
                     help="concurrent runs per watch (default: CPU count; per kind:"
                          " $MAX_CONCURRENT_RECONCILES_<KIND>_<GROUP>)")
    run.add_argument("--ansible-verbosity", type=int, default=None, metavar="N",
                     help="ansible verbosity 0-7 (default 2; per kind: $ANSIBLE_VERBOSITY_<KIND>_<GROUP>)")
    run.add_argument("--reconcile-period", default=None, metavar="DURATION",
                     help="default resync period for watches without one, e.g. 10m, 1h30m (default: none)")
    run.add_argument("--artifacts-dir", default=os.environ.get("ANSIBLE_OPERATOR_ARTIFACTS", None),
                     help="where run artifacts are kept (default: $XDG_STATE_HOME/ansible-operator/runs"
                          " or ~/.local/state/ansible-operator/runs)")
    run.add_argument("--executor", choices=("warm", "runner"),
                     default=os.environ.get("ANSIBLE_OPERATOR_EXECUTOR", "warm"),
                     help="how playbooks run: 'warm' (default) = a pre-imported Ansible process forking one"
                          " child per run (see docs/warm-executor.md); 'runner' = a fresh ansible-runner"
                          " process per run, the fallback (env: ANSIBLE_OPERATOR_EXECUTOR)")
    run.add_argument("--warm-idle-timeout", default=os.environ.get("ANSIBLE_OPERATOR_WARM_IDLE_TIMEOUT", "5m"),
                     metavar="DURATION",
                     help="with --executor warm: stop the pre-imported Ansible process after this long without"
                          " runs and restart it (~1 s) on the next one; '0' keeps it"
                          " (default 5m, env ANSIBLE_OPERATOR_WARM_IDLE_TIMEOUT)")
    run.add_argument("--run-timeout", default="1h", metavar="DURATION",
                     help="stop a run that takes longer than this (default 1h)")
    run.add_argument("--sandbox", action="store_true",
                     help="start the embedded sandbox API server, install crds/, and run against it (demo)")
    run.add_argument("--sandbox-crds", action="append", default=None, metavar="PATH",
                     help="with --sandbox: CRD files or directories to install (default: ./crds)")
    run.add_argument("--sandbox-kubeconfig", default=None, metavar="PATH",
                     help="with --sandbox: where to write its kubeconfig (default:"
                          " ~/.local/state/ansible-operator/sandbox.kubeconfig)")
    run.add_argument("--inject-owner-ref", action=argparse.BooleanOptionalAction, default=True,
                     help="add ownerReferences (or primary-resource annotations) to objects roles create")
    run.add_argument("--metrics-bind-address", default=":8080",
                     help="Prometheus /metrics address (default :8080; '0' disables)")
    run.add_argument("--health-probe-bind-address", default=":6789",
                     help="/healthz and /readyz address (default :6789; '0' disables)")
    run.add_argument("--leader-elect", action="store_true", help="use a coordination.k8s.io Lease so only one"
                     " replica reconciles")
    run.add_argument("--leader-election-id", default=None, help="Lease name (default: <operator name>-lock)")
    run.add_argument("--leader-election-namespace", default=None,
                     help="Lease namespace (default: the pod's namespace, else 'default')")
    run.add_argument("--leader-elect-lease-duration", default="15s", metavar="DURATION")
    run.add_argument("--leader-elect-renew-deadline", default="10s", metavar="DURATION")
    run.add_argument("--leader-elect-retry-period", default="2s", metavar="DURATION")
    run.add_argument("--log-format", choices=("text", "json"), default=os.environ.get("LOG_FORMAT", "text"))
    run.add_argument("--log-level", default=os.environ.get("LOG_LEVEL", "INFO"))

    # ---- sandbox ---------------------------------------------------------------------------------
    sb = sub.add_parser("sandbox", help="serve a sandbox Kubernetes API on loopback (tests, demo, molecule)")
    sb.set_defaults(module="ansible_operator.sandbox.cli")
    sb.add_argument("--host", default="127.0.0.1")
    sb.add_argument("--port", type=int, default=0, help="0 picks a free port")
    sb.add_argument("--kubeconfig", default=None, help="write a kubeconfig here (default: a file it prints)")
    sb.add_argument("--crds", action="append", default=[], metavar="DIR_OR_FILE",
                    help="CustomResourceDefinition YAML files or directories to install at start (repeatable)")
    sb.add_argument("--data-dir", default=None, help="persist objects here (SQLite) across restarts")
    sb.add_argument("--no-simulate", dest="simulate", action="store_false",
                    help="turn off the simulated controllers (Deployment/StatefulSet/Job/PVC/CronJob status)")
    sb.add_argument("--log-level", default="INFO")

    # ---- runs ------------------------------------------------------------------------------------
    runs = sub.add_parser("runs", help="list recent runs per custom resource, or show one run's tasks")
    runs.set_defaults(module="ansible_operator.runs")
    runs.add_argument("target", nargs="?", default=None, metavar="KIND/NAME")
    runs.add_argument("--namespace", "-n", default=None)
    runs.add_argument("--show", default=None, metavar="RUN", help="print a run's task-by-task output")
    runs.add_argument("--artifacts-dir", default=os.environ.get("ANSIBLE_OPERATOR_ARTIFACTS", None))
    runs.add_argument("--limit", type=int, default=20)
    runs.add_argument("-o", "--output", choices=("table", "json"), default="table")

    # ---- generate --------------------------------------------------------------------------------
    gen = sub.add_parser("generate", help="generate deployment material")
    gen.set_defaults(module="ansible_operator.generate")
    gen_sub = gen.add_subparsers(dest="what", metavar="WHAT")
    gen_sub.required = True
    rbac = gen_sub.add_parser("rbac", help="ClusterRole derived from watches.yaml and what the roles touch")
    rbac.add_argument("--watches-file", default="watches.yaml")
    rbac.add_argument("--roles-dir", action="append", default=None)
    rbac.add_argument("--name", default="ansible-operator-manager-role")

    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    module = importlib.import_module(args.module)
    result = module.main(args)
    return int(result or 0)


if __name__ == "__main__":
    sys.exit(main())
