"""Command line: every flag of every command is declared here, so one file shows the whole surface.

Each command's work lives in the module named for it; those modules keep heavy imports (kopf,
ansible, aiohttp) inside their ``main`` so ``ansible-operator --help`` stays fast.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import os
import shlex
import sys
import tempfile
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from ansible_operator import completion
from ansible_operator.artifacts import size_argument
from ansible_operator.logs import LOG_FORMATS
from ansible_operator.version import VersionAction


def verbosity_argument(text: str) -> int:
    """An Ansible verbosity, 0..7 (a bad value is a one-line usage error, exit 2)."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value <= 7:
        raise argparse.ArgumentTypeError(f"invalid verbosity {text!r}: expected 0..7")
    return value


class _Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are one line (``prog: error: ...``) and exit 2, never a usage dump
    or a traceback: a crash-looping pod's log should say exactly what is wrong with its arguments."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


# ---- value types: each one validates and converts, so nothing bad gets past parse_args -----------------

_GO_TRUE = ("1", "t", "T", "TRUE", "true", "True")
_GO_FALSE = ("0", "f", "F", "FALSE", "false", "False")


def go_bool(text: str) -> bool:
    """Go's ``strconv.ParseBool``, which pflag uses for ``--flag=value``."""
    if text in _GO_TRUE:
        return True
    if text in _GO_FALSE:
        return False
    raise argparse.ArgumentTypeError(f"invalid boolean {text!r}: expected true or false")


def duration(text: str) -> float:
    """A Go duration (``1h2m3s``, ``500ms``) or a number of seconds; returns seconds."""
    from ansible_operator.durations import parse_duration

    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def bind_address(text: str) -> str:
    """``HOST:PORT``, ``:PORT`` or ``0`` (disabled); returned unchanged once it parses."""
    from ansible_operator.metrics import parse_bind_address

    try:
        parse_bind_address(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def log_level(text: str) -> str:
    """A Python logging level name (any case) or number."""
    value = str(text).strip().upper()
    if value.isdigit() or value in ("DEBUG", "INFO", "WARNING", "WARN", "ERROR", "CRITICAL"):
        return "WARNING" if value == "WARN" else value
    raise argparse.ArgumentTypeError(
        f"unknown log level {text!r}: expected DEBUG, INFO, WARNING, ERROR or CRITICAL")


ZAP_LEVELS = {"debug": "DEBUG", "info": "INFO", "error": "ERROR"}
ZAP_STACKTRACE_LEVELS = ("info", "error", "panic")
ZAP_TIME_ENCODINGS = ("epoch", "millis", "nano", "iso8601", "rfc3339", "rfc3339nano")


def zap_level(text: str) -> str:
    """controller-runtime's ``--zap-log-level``: debug, info, error, or an integer > 0 (more verbose than
    debug). Returns the Python level name it maps to."""
    key = text.strip().lower()
    if key in ZAP_LEVELS:
        return ZAP_LEVELS[key]
    try:
        number = int(key)
    except ValueError:
        number = 0
    if number > 0:
        return "DEBUG"
    raise argparse.ArgumentTypeError(
        f"invalid log level {text!r}: expected debug, info, error or an integer > 0")


def _lower_choice(choices: Sequence[str], what: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        key = text.strip().lower()
        for choice in choices:
            if choice.lower() == key:
                return choice
        raise argparse.ArgumentTypeError(f"invalid {what} {text!r}: expected one of {', '.join(choices)}")
    return parse


def ansible_args(text: str) -> tuple[str, ...]:
    """``--ansible-args`` split like a shell would (``--tags "a,b" -e @vars.yml``).

    A container's args reach us without a shell, so a manifest's ``--ansible-args='--tags a'`` keeps its
    quotes; the SDK drops one enclosing pair of single quotes first (inputdir.go), and so do we."""
    if len(text) > 1 and text[0] == "'" and text[-1] == "'":
        text = text[1:-1]
    try:
        return tuple(shlex.split(text))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"cannot split {text!r}: {exc}") from None


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid integer {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1 (got {value})")
    return value


def port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid port {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"port must be 0..65535 (got {value})")
    return value


def _bool_flag(group: Any, *names: str, default: bool | None, help: str, dest: str | None = None) -> None:
    """A pflag-style boolean: ``--flag`` means true, ``--flag=false`` / ``--flag false`` set it."""
    kw: dict[str, Any] = {"dest": dest} if dest else {}
    group.add_argument(*names, nargs="?", const=True, default=default, type=go_bool, metavar="BOOL",
                       help=help, **kw)


def _add_run(sub: Any) -> None:
    run = sub.add_parser(
        "run", help="run the operator for the custom resources listed in watches.yaml",
        description="Run the operator. Accepts every flag of the Operator SDK's `ansible-operator run` with"
                    " the same names, defaults and meaning (Go syntax too: --flag=value, --bool-flag=false,"
                    " durations such as 1h2m3s or 500ms), plus this runner's own flags.")
    run.set_defaults(module="ansible_operator.manager", run_parser=run)
    _add_ansible_flags(run)
    _add_controller_flags(run)
    _add_metrics_flags(run)
    _add_leader_election_flags(run)
    _add_logging_flags(run)
    _add_runner_flags(run)


def _add_ansible_flags(run: argparse.ArgumentParser) -> None:
    """Ansible: the watches file, owner references, verbosity, roles and collections paths, arguments of
    every ansible-playbook run, which Ansible events are logged."""
    ansible = run.add_argument_group("Ansible")
    ansible.add_argument("--watches-file", default=os.environ.get("WATCHES_FILE", "./watches.yaml"),
                         metavar="PATH",
                         help="path to the watches file (default ./watches.yaml, or $WATCHES_FILE)")
    _bool_flag(ansible, "--inject-owner-ref", default=True,
               help="add ownerReferences (or primary-resource annotations) to objects roles create"
                    " (default true; --inject-owner-ref=false turns it off)")
    ansible.add_argument("--no-inject-owner-ref", dest="inject_owner_ref", action="store_false",
                         help="same as --inject-owner-ref=false")
    ansible.add_argument("--ansible-verbosity", type=verbosity_argument, default=None, metavar="N",
                         help="ansible verbosity 0-7 (default 2; per kind:"
                              " $ANSIBLE_VERBOSITY_<KIND>_<GROUP>)")
    ansible.add_argument("--ansible-roles-path", default=None, metavar="PATH",
                         help="Ansible roles path, exported as $ANSIBLE_ROLES_PATH (default: roles are"
                              " looked up next to the watches file and in ./roles)")
    ansible.add_argument("--ansible-collections-path", default=None, metavar="PATH",
                         help="installed collections: PATH/ansible_collections/... exported as"
                              " $ANSIBLE_COLLECTIONS_PATH (default ~/.ansible/collections and"
                              " /usr/share/ansible/collections)")
    ansible.add_argument("--ansible-args", type=ansible_args, default=(), metavar="ARGS",
                         help="arguments appended to every ansible-playbook run, split like a shell would,"
                              " e.g. \"--vault-password-file /etc/vault/pass --tags deploy"
                              " -e @/etc/extra.yml\"")
    ansible.add_argument("--ansible-log-events", type=_lower_choice(("Nothing", "Tasks", "Everything"),
                                                                     "log events value"),
                         default="Tasks", metavar="Nothing|Tasks|Everything",
                         help="which Ansible events are logged: Nothing, Tasks (task results and the recap;"
                              " default) or Everything (every event)")


def _add_controller_flags(run: argparse.ArgumentParser) -> None:
    """Controller: reconcile period, concurrency, graceful shutdown, the API proxy's port."""
    ctl = run.add_argument_group("Controller")
    ctl.add_argument("--reconcile-period", type=duration, default=duration("10h"), metavar="DURATION",
                     help="resync period for watches without reconcilePeriod (default 10h; 0 turns it off)")
    ctl.add_argument("--max-concurrent-reconciles", type=positive_int, default=None, metavar="N",
                     help="concurrent runs per watch (default: CPU count; per kind:"
                          " $MAX_CONCURRENT_RECONCILES_<KIND>_<GROUP>)")
    ctl.add_argument("--graceful-shutdown-timeout", type=duration, default=duration("30s"),
                     metavar="DURATION",
                     help="on SIGTERM/SIGINT stop starting runs and let the ones in flight finish for up to"
                          " this long, then stop them (default 30s)")
    ctl.add_argument("--proxy-port", type=port, default=None, metavar="PORT",
                     help="port of the loopback API proxy the roles talk to (SDK default 8888; default here:"
                          " a free port)")


def _add_metrics_flags(run: argparse.ArgumentParser) -> None:
    """Metrics and health probes: /metrics (address, HTTPS, RBAC filter), /healthz and /readyz, the API
    server's reachability, osdk_metric's endpoint."""
    mon = run.add_argument_group("Metrics and health probes")
    mon.add_argument("--metrics-bind-address", type=bind_address, default=None, metavar="ADDRESS",
                     help="where /metrics is served (default :8443; 0 disables)")
    mon.add_argument("--metrics-addr", type=bind_address, default=None, metavar="ADDRESS",
                     help="deprecated: use --metrics-bind-address")
    _bool_flag(mon, "--metrics-secure", default=False,
               help="serve /metrics over HTTPS (certificate from --metrics-cert-path, else self-signed)")
    _bool_flag(mon, "--metrics-require-rbac", default=False,
               help="authenticate /metrics callers with a TokenReview and authorize them with a"
                    " SubjectAccessReview (get on the path), like controller-runtime's"
                    " WithAuthenticationAndAuthorization filter; needs --metrics-secure")
    mon.add_argument("--metrics-cert-path", default=os.path.join(tempfile.gettempdir(), "k8s-metrics-server",
                                                                 "serving-certs"), metavar="DIR",
                     help="directory holding the metrics server certificate (default: controller-runtime's,"
                          " <tmp>/k8s-metrics-server/serving-certs); a self-signed one is made if absent")
    mon.add_argument("--metrics-cert-name", default="tls.crt", metavar="FILE",
                     help="certificate file name in --metrics-cert-path (default tls.crt)")
    mon.add_argument("--metrics-cert-key", default="tls.key", metavar="FILE",
                     help="private key file name in --metrics-cert-path (default tls.key)")
    _bool_flag(mon, "--enable-http2", default=False,
               help="enable HTTP/2 on the metrics server (default false: HTTP/1.1 only, as the SDK)")
    mon.add_argument("--health-probe-bind-address", type=bind_address, default=":6789", metavar="ADDRESS",
                     help="where /healthz and /readyz are served (default :6789; 0 disables)")
    mon.add_argument("--api-unreachable-timeout", type=duration, default=duration("60s"), metavar="DURATION",
                     help="/readyz fails once the API server has not answered for this long (/healthz stays"
                          " up); 0 turns the check off (default 60s)")
    mon.add_argument("--osdk-metric-bind-address", type=bind_address, default=None, metavar="ADDRESS",
                     help="where operator_sdk.util.osdk_metric posts custom metrics (default localhost:5050,"
                          " the address the SDK serves and the collection posts to; if it is taken, a free"
                          " port for the bundled module unless an installed operator_sdk.util needs"
                          " 5050; 0 disables)")


def _add_leader_election_flags(run: argparse.ArgumentParser) -> None:
    """Leader election: on or off, the Lease's name and namespace, its timings."""
    le = run.add_argument_group("Leader election")
    _bool_flag(le, "--leader-elect", default=None,
               help="use a coordination.k8s.io Lease so only one replica reconciles")
    _bool_flag(le, "--enable-leader-election", default=None, help="deprecated: use --leader-elect")
    le.add_argument("--leader-election-id", default=None, metavar="NAME",
                    help="Lease name (default: $OPERATOR_NAME, else <directory of the watches file>-lock)")
    le.add_argument("--leader-election-namespace", default=None, metavar="NS",
                    help="Lease namespace (default: the pod's namespace; required out of a cluster)")
    le.add_argument("--leader-elect-resource-lock", type=_lower_choice(
        ("leases", "endpointsleases", "configmapsleases", "endpoints", "configmaps"), "resource lock"),
                    default=None, metavar="TYPE",
                    help="deprecated; a Lease is always used (client-go supports nothing else)")
    le.add_argument("--leader-elect-lease-duration", type=duration, default=duration("15s"),
                    metavar="DURATION",
                    help="how long standbys wait after the last renewal before taking over (default 15s)")
    le.add_argument("--leader-elect-renew-deadline", type=duration, default=duration("10s"),
                    metavar="DURATION",
                    help="the leader stops leading if it could not renew for this long (default 10s)")
    le.add_argument("--leader-elect-retry-period", type=duration, default=duration("2s"), metavar="DURATION",
                    help="how often candidates try to acquire or renew the Lease (default 2s)")
    sh = run.add_argument_group("Sharding (active/active replicas)")
    _bool_flag(sh, "--sharding", default=False,
               help="active/active: every replica runs the objects a consistent-hash ring gives it, each"
                    " holding a Lease of its own (named after --leader-election-id, in"
                    " --leader-election-namespace, with the --leader-elect-* timings); not with"
                    " --leader-elect")
    sh.add_argument("--shard-by", choices=("uid", "namespace"), default="uid",
                    help="with --sharding: place objects on the ring by their uid (default) or namespace")
    _bool_flag(sh, "--shard-selector", default=False,
               help="with --sharding: have the API server list and watch only this replica's shard (its"
                    " shardSelector: Kubernetes 1.36+ with the ShardedListAndWatch feature gate; a server"
                    " without it sends every object, which still works); with --shard-by=uid only")
    _bool_flag(sh, "--shard-label", default=False,
               help="with --sharding: have the API server list and watch only this replica's shard, on any"
                    " Kubernetes: the replicas label every object with its hash bucket"
                    " (ansible-operator.dev/shard-bucket) and each watches the buckets it owns")
    # test only: run without waiting for the others to drain (shows the overlap detector works)
    _bool_flag(sh, "--sharding-unsafe-skip-handover", default=False, help=argparse.SUPPRESS)


def _add_logging_flags(run: argparse.ArgumentParser) -> None:
    """Logging: controller-runtime's zap flags and this runner's --log-format and --log-level."""
    zap = run.add_argument_group("Logging (controller-runtime zap flags, mapped onto this runner's logging)")
    _bool_flag(zap, "--zap-devel", default=False,
               help="development mode: debug level and text (console) output unless set otherwise")
    zap.add_argument("--zap-encoder", type=_lower_choice(("json", "console"), "encoder"), default=None,
                     metavar="json|console",
                     help="json = --log-format sdk-json (the SDK's keys), console = --log-format text")
    zap.add_argument("--zap-log-level", type=zap_level, default=None, metavar="LEVEL",
                     help="debug, info, error, or an integer > 0 (debug and more)")
    zap.add_argument("--zap-stacktrace-level", type=_lower_choice(ZAP_STACKTRACE_LEVELS, "level"),
                     default=None, metavar="info|error|panic",
                     help="accepted; tracebacks are logged with the errors that have one")
    zap.add_argument("--zap-time-encoding", type=_lower_choice(ZAP_TIME_ENCODINGS, "time encoding"),
                     default=None, metavar="ENCODING",
                     help="accepted (epoch, millis, nano, iso8601, rfc3339, rfc3339nano); timestamps are"
                          " always RFC 3339 UTC")
    zap.add_argument("--log-format", type=_lower_choice(LOG_FORMATS, "log format"), default=None,
                     metavar="text|json|sdk-json",
                     help="text (default); json: one JSON object per line and nothing else; sdk-json: the"
                          " same with the Operator SDK's (zap's) keys and level names ($LOG_FORMAT)")
    zap.add_argument("--log-level", type=log_level, default=None, metavar="LEVEL",
                     help="DEBUG, INFO (default), WARNING, ERROR or CRITICAL ($LOG_LEVEL)")


def _add_runner_flags(run: argparse.ArgumentParser) -> None:
    """This runner's own: cluster access, namespaces, artifacts, executor, run limits, status conditions,
    the embedded sandbox."""
    ours = run.add_argument_group("This runner (not in the Operator SDK)")
    ours.add_argument("--kubeconfig", default=None, metavar="PATH",
                      help="kubeconfig to use (default: $KUBECONFIG, ~/.kube/config, then in-cluster config)")
    ours.add_argument("--namespace", action="append", default=None, metavar="NS",
                      help="watch only this namespace (repeatable; default: $WATCH_NAMESPACE,"
                           " comma-separated; empty means all namespaces)")
    ours.add_argument("--artifacts-dir", default=os.environ.get("ANSIBLE_OPERATOR_ARTIFACTS", None),
                      metavar="DIR",
                      help="where run artifacts are kept (default: $XDG_STATE_HOME/ansible-operator/runs"
                           " or ~/.local/state/ansible-operator/runs)")
    ours.add_argument("--executor", choices=("warm", "runner"),
                      default=os.environ.get("ANSIBLE_OPERATOR_EXECUTOR", "warm"),
                      help="how playbooks run: 'warm' (default) = a pre-imported Ansible process forking one"
                           " child per run (see docs/explanation/warm-executor.md); 'runner' = a fresh"
                           " ansible-runner process per run, the fallback (env: ANSIBLE_OPERATOR_EXECUTOR)")
    ours.add_argument("--warm-idle-timeout", type=duration,
                      default=os.environ.get("ANSIBLE_OPERATOR_WARM_IDLE_TIMEOUT", "5m"), metavar="DURATION",
                      help="with --executor warm: stop the pre-imported Ansible process after this long"
                           " without runs and restart it (~1 s) on the next one; '0' keeps it"
                           " (default 5m, env ANSIBLE_OPERATOR_WARM_IDLE_TIMEOUT)")
    ours.add_argument("--run-timeout", type=duration, default="1h", metavar="DURATION",
                      help="stop a run that takes longer than this (default 1h; 0 = no limit)")
    ours.add_argument("--max-artifacts-size", type=size_argument, default=size_argument("1Gi"),
                      metavar="SIZE",
                      help="bound the whole run-artifacts tree to this size, oldest runs removed first"
                           " (e.g. 500M, 2Gi; default 1Gi)")
    ours.add_argument("--max-annotation-verbosity", type=verbosity_argument, default=None, metavar="N",
                      help="highest verbosity a CR's ansible.sdk.operatorframework.io/verbosity annotation"
                           " may ask for (0-7, default 2; at 3 and above the log shows whole task results)")
    _bool_flag(ours, "--sdk-conditions", default=False,
               help="write status conditions exactly as Operator SDK does: Successful goes False when a run"
                    " starts, Running stays True after a success (default false: see"
                    " docs/reference/status.md)")
    _bool_flag(ours, "--kstatus-conditions", default=False,
               help="also write Ready, Reconciling and Stalled conditions as kstatus reads them (Flux health"
                    " checks, kubectl wait --for=condition=Ready) (default false)")
    ours.add_argument("--startup-resync", choices=("background", "spread", "immediate"), default="background",
                      help="at start-up, re-run objects already converged behind new and edited ones"
                           " (background, default), or each at a random time within its reconcile period"
                           " (spread: for thousands of objects), or all at once as Operator SDK does"
                           " (immediate)")
    ours.add_argument("--sandbox", action="store_true",
                      help="start the embedded sandbox API server, install crds/, and run against it (demo)")
    ours.add_argument("--sandbox-crds", action="append", default=None, metavar="PATH",
                      help="with --sandbox: CRD files or directories to install (default: ./crds)")
    ours.add_argument("--sandbox-kubeconfig", default=None, metavar="PATH",
                      help="with --sandbox: where to write its kubeconfig (default:"
                           " ~/.local/state/ansible-operator/sandbox.kubeconfig)")


def finish_run_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Resolve aliases, environment defaults and flag combinations of ``run``; ``parser.error`` (one line,
    exit 2) on a contradiction. Sets ``args.warnings``: one line per flag accepted but not honoured."""
    warnings: list[str] = []
    _finish_metrics_address(parser, args, warnings)
    _finish_leader_election_aliases(parser, args, warnings)
    _finish_ansible_debug_logs(args, warnings)
    _finish_lease(parser, args, warnings)
    _finish_metrics_security(parser, args, warnings)
    _finish_logging(parser, args, warnings)
    _finish_runner_flags(parser, args, warnings)
    args.warnings = warnings


def _finish_metrics_address(parser: argparse.ArgumentParser, args: argparse.Namespace,
                            warnings: list[str]) -> None:
    """``--metrics-addr`` (deprecated) as ``--metrics-bind-address``; the default, :8443."""
    if args.metrics_addr is not None:
        if args.metrics_bind_address is not None and args.metrics_addr != args.metrics_bind_address:
            parser.error("--metrics-addr and --metrics-bind-address disagree;"
                         " use --metrics-bind-address only")
        warnings.append("--metrics-addr is deprecated: use --metrics-bind-address")
        args.metrics_bind_address = args.metrics_addr
    if args.metrics_bind_address is None:
        args.metrics_bind_address = ":8443"


def _finish_leader_election_aliases(parser: argparse.ArgumentParser, args: argparse.Namespace,
                                    warnings: list[str]) -> None:
    """``--enable-leader-election`` (deprecated) as ``--leader-elect``; ``--leader-elect-resource-lock``
    accepted with a warning (a Lease is always used)."""
    if args.enable_leader_election is not None:
        if args.leader_elect is not None:
            parser.error("only one of --leader-elect and --enable-leader-election may be set")
        warnings.append("--enable-leader-election is deprecated: use --leader-elect")
        args.leader_elect = args.enable_leader_election
    args.leader_elect = bool(args.leader_elect)
    if args.leader_elect_resource_lock is not None:
        note = "--leader-elect-resource-lock is deprecated"
        if args.leader_elect_resource_lock != "leases":
            note += (f": it would have used {args.leader_elect_resource_lock} for the lock; a"
                     " coordination.k8s.io Lease is used (the only lock client-go still supports)")
        warnings.append(note)


def _finish_ansible_debug_logs(args: argparse.Namespace, warnings: list[str]) -> None:
    """``$ANSIBLE_DEBUG_LOGS`` (the SDK's): a Go boolean; anything else is false, with a warning."""
    args.ansible_debug_logs = False
    debug_logs = os.environ.get("ANSIBLE_DEBUG_LOGS")
    if debug_logs:
        try:
            args.ansible_debug_logs = go_bool(debug_logs)
        except argparse.ArgumentTypeError:
            warnings.append(f"environment variable ANSIBLE_DEBUG_LOGS={debug_logs!r} is not a boolean;"
                            " using false")


def _finish_lease(parser: argparse.ArgumentParser, args: argparse.Namespace, warnings: list[str]) -> None:
    """The Lease's name from ``$OPERATOR_NAME`` (deprecated) when not given; its timings consistent."""
    if args.leader_election_id is None and os.environ.get("OPERATOR_NAME"):
        warnings.append("environment variable OPERATOR_NAME is deprecated: use --leader-election-id")
        args.leader_election_id = os.environ["OPERATOR_NAME"]
    if args.sharding and args.leader_elect:
        parser.error("--sharding and --leader-elect exclude each other: with --sharding every replica is"
                     " active")
    if (args.leader_elect or args.sharding) and \
            args.leader_elect_renew_deadline >= args.leader_elect_lease_duration:
        parser.error("--leader-elect-renew-deadline must be shorter than --leader-elect-lease-duration")
    if args.sharding and args.leader_elect_retry_period >= args.leader_elect_renew_deadline:
        parser.error("--leader-elect-retry-period must be shorter than --leader-elect-renew-deadline")
    if args.shard_selector and not args.sharding:
        parser.error("--shard-selector narrows the watches to this replica's shard: it needs --sharding")
    if args.shard_selector and args.shard_by != "uid":
        parser.error("--shard-selector needs --shard-by=uid: the API server hashes namespaces plainly, the"
                     " ring spreads them first (names such as team-1, team-2 would share one arc)")
    if args.shard_label and not args.sharding:
        parser.error("--shard-label narrows the watches to this replica's shard: it needs --sharding")
    if args.shard_label and args.shard_selector:
        parser.error("--shard-label and --shard-selector exclude each other: choose the label (any"
                     " Kubernetes) or the API server's shardSelector (1.36+ with ShardedListAndWatch)")


def _finish_metrics_security(parser: argparse.ArgumentParser, args: argparse.Namespace,
                             warnings: list[str]) -> None:
    if args.metrics_require_rbac and not args.metrics_secure:
        parser.error("--metrics-secure flag is required when --metrics-require-rbac is present")
    if args.enable_http2:
        warnings.append("--enable-http2: would allow HTTP/2 on the metrics server; it speaks HTTP/1.1 only")


def _finish_logging(parser: argparse.ArgumentParser, args: argparse.Namespace, warnings: list[str]) -> None:
    """This runner's --log-level/--log-format (or $LOG_LEVEL/$LOG_FORMAT) > the zap flags > defaults."""
    if args.log_level is not None and args.zap_log_level is not None:
        parser.error("--log-level and --zap-log-level both given; use one")
    if args.log_format is not None and args.zap_encoder is not None:
        parser.error("--log-format and --zap-encoder both given; use one")
    if args.log_level is None:
        args.log_level = args.zap_log_level or ("DEBUG" if args.zap_devel else None) \
            or _env_value(parser, "LOG_LEVEL", log_level, "--log-level") or "INFO"
    if args.log_format is None:
        zap_format = {"json": "sdk-json", "console": "text"}.get(args.zap_encoder or "")
        args.log_format = zap_format or ("text" if args.zap_devel else None) \
            or _env_value(parser, "LOG_FORMAT", _lower_choice(LOG_FORMATS, "log format"), "--log-format") \
            or "text"
    if args.zap_stacktrace_level is not None:
        warnings.append(f"--zap-stacktrace-level={args.zap_stacktrace_level}: would add a stack trace to"
                        f" every record at {args.zap_stacktrace_level} and above; tracebacks are logged only"
                        " with the errors that carry one")
    if args.zap_time_encoding not in (None, "rfc3339", "iso8601"):
        warnings.append(f"--zap-time-encoding={args.zap_time_encoding}: would write {args.zap_time_encoding}"
                        " timestamps; they are always RFC 3339 UTC")


def _env_value(parser: argparse.ArgumentParser, name: str, convert: Callable[[str], Any], flag: str) -> Any:
    """``$name`` converted as ``flag`` would be; None when unset or empty; a bad value is ``parser.error``."""
    value = os.environ.get(name)
    if value is None or value == "":
        return None
    try:
        return convert(value)
    except argparse.ArgumentTypeError as exc:
        parser.error(f"environment variable {name} (for {flag}): {exc}")


def _finish_runner_flags(parser: argparse.ArgumentParser, args: argparse.Namespace,
                         warnings: list[str]) -> None:
    """The API proxy's port and the sandbox's flags, with what they need."""
    if args.proxy_port is not None and not args.inject_owner_ref:
        warnings.append("--proxy-port: the API proxy only runs with --inject-owner-ref; roles talk to the API"
                        " server directly")
    if args.sandbox_crds and not args.sandbox:
        parser.error("--sandbox-crds needs --sandbox")
    if args.sandbox:
        from ansible_operator import sandbox_cli

        if not sandbox_cli.available():
            parser.error(f"--sandbox: {sandbox_cli.NOT_INSTALLED}")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="ansible-operator",
        description="Run Ansible roles as Kubernetes operators (Operator SDK watches.yaml compatible).",
    )
    parser.add_argument("--version", action=VersionAction)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

    # ---- version ---------------------------------------------------------------------------------
    version = sub.add_parser("version", help="print the versions of the runner, ansible-core, ansible-runner,"
                                             " kopf, the kubernetes client and Python")
    version.set_defaults(module="ansible_operator.version")

    # ---- completion ------------------------------------------------------------------------------
    comp = sub.add_parser("completion", help="print shell code that completes ansible-operator's command"
                                             " line (e.g. source <(ansible-operator completion bash))")
    comp.add_argument("shell", choices=("bash", "zsh", "fish"), help="the shell to complete in")
    comp.set_defaults(module="ansible_operator.completion")

    # ---- run -------------------------------------------------------------------------------------
    _add_run(sub)

    # ---- sandbox ---------------------------------------------------------------------------------
    # The sandbox is its own distribution (sandbox/ in this repository); its own parser takes the rest.
    sb = sub.add_parser("sandbox", add_help=False,
                        help="serve a sandbox Kubernetes API on loopback (demo, quick looks; needs the"
                             " ansible-operator-sandbox package)")
    sb.set_defaults(module="ansible_operator.sandbox_cli", sandbox_args=[])

    # ---- cluster ---------------------------------------------------------------------------------
    cl = sub.add_parser("cluster", help="build or run a real Kubernetes control plane on loopback (etcd,"
                                        " kube-apiserver, controller-manager, scheduler, kwok)")
    cl.set_defaults(module="ansible_operator.controlplane.cli")
    cl_sub = cl.add_subparsers(dest="action", metavar="ACTION", parser_class=_Parser)
    cl_sub.required = True
    cl_sub.add_parser("build", help="find or build the binaries (KUBEBUILDER_ASSETS, the cache, or go build)"
                                    " and print their versions")
    up = cl_sub.add_parser("up", help="start the control plane and serve until SIGINT/SIGTERM")
    up.add_argument("--dir", default=None, help="where its data, certificates and logs go (default: a temp"
                                                " dir removed at exit)")
    up.add_argument("--keep", action="store_true", help="keep the temp dir at exit")
    up.add_argument("--kubeconfig", default=None, help="also write the admin kubeconfig here")
    up.add_argument("--crds", action="append", default=[], metavar="DIR_OR_FILE",
                    help="CustomResourceDefinition YAML files or directories to install (repeatable)")
    up.add_argument("--nodes", type=positive_int, default=1, help="fake (kwok) nodes (default 1)")

    # ---- runs ------------------------------------------------------------------------------------
    runs = sub.add_parser("runs", help="list recent runs per custom resource, or show one run's tasks")
    runs.set_defaults(module="ansible_operator.runs")
    runs.add_argument("target", nargs="?", default=None, metavar="KIND/NAME",
                      help="only this custom resource's runs (default: every resource's latest runs)")
    runs.add_argument("--namespace", "-n", default=None, help="namespace of KIND/NAME")
    runs.add_argument("--show", default=None, metavar="RUN", help="print a run's task-by-task output")
    runs.add_argument("--artifacts-dir", default=os.environ.get("ANSIBLE_OPERATOR_ARTIFACTS", None),
                      help="the operator's --artifacts-dir (default: the same default, or"
                           " $ANSIBLE_OPERATOR_ARTIFACTS)")
    runs.add_argument("--limit", type=positive_int, default=20, help="at most this many runs (default 20)")
    runs.add_argument("-o", "--output", choices=("table", "wide", "json"), default="table",
                      help="table (default), wide (with each run's artifacts directory) or json")

    # ---- generate --------------------------------------------------------------------------------
    gen = sub.add_parser("generate", help="generate deployment material")
    gen.set_defaults(module="ansible_operator.generate")
    gen_sub = gen.add_subparsers(dest="what", metavar="WHAT")
    gen_sub.required = True
    rbac = gen_sub.add_parser("rbac", help="ClusterRole derived from watches.yaml and what the roles touch")
    rbac.add_argument("--watches-file", default="watches.yaml",
                      help="path to watches.yaml (default ./watches.yaml)")
    rbac.add_argument("--roles-dir", action="append", default=None,
                      help="where the roles live (repeatable; default: resolved like the operator does)")
    rbac.add_argument("--name", default="ansible-operator-manager-role",
                      help="the ClusterRole's name (default ansible-operator-manager-role)")

    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["sandbox"]:  # everything after it is the sandbox's own command line (sandbox_cli.py)
        args = argparse.Namespace(command="sandbox", module="ansible_operator.sandbox_cli",
                                  sandbox_args=argv[1:])
    else:
        completion.complete_if_asked(parser)  # the shell asking for completions: answered, then exit
        args = parser.parse_args(argv)
    if args.command == "run":
        finish_run_args(args.run_parser, args)
        gc.disable()  # until the run's imports are done: manager.import_for_run
    module = importlib.import_module(args.module)
    result = module.main(args)
    return int(result or 0)


if __name__ == "__main__":
    sys.exit(main())
