"""``ansible-operator run``: assemble the controller and run it until a signal.

Like controller-runtime's manager: one shared client configuration, one executor, and per watch a
controller made of an intake (kopf handler + cache), a work queue and a reconciler. Around them:
metrics and health probes, optional leader election, optional owner-injecting API proxy, and with
``--sandbox`` an embedded sandbox API server that is started first and then used through a
kubeconfig exactly like a real cluster.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import socket
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ansible_operator import kube as kube_mod
from ansible_operator.watches import Watch, WatchesError, load_watches

log = logging.getLogger("ansible_operator")


@dataclass
class Controller:
    """Everything serving one watch."""

    watch: Watch
    intake: Any  # intake.WatchIntake
    queue: Any  # queue.WorkQueue
    reconciler: Any  # reconcile.Reconciler


def _namespaces(args: argparse.Namespace) -> list[str]:
    if args.namespace:
        raw = args.namespace
    else:
        raw = [os.environ.get("WATCH_NAMESPACE", "")]
    return [ns.strip() for item in raw for ns in item.split(",") if ns.strip()]


def _duration(text: str | None, flag: str) -> float | None:
    from ansible_operator.watches import parse_duration

    if text is None or text == "":
        return None
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise SystemExit(f"ansible-operator: {flag}: {exc}") from None


def _artifacts_root(args: argparse.Namespace) -> Path:
    if args.artifacts_dir:
        return Path(args.artifacts_dir).expanduser().resolve()
    from ansible_operator.artifacts import default_artifacts_dir

    return default_artifacts_dir()


def main(args: argparse.Namespace) -> int:
    from ansible_operator.logs import setup_logging

    setup_logging(level=args.log_level, fmt=args.log_format)
    try:
        watches = load_watches(
            args.watches_file,
            max_concurrent_reconciles=args.max_concurrent_reconciles,
            ansible_verbosity=args.ansible_verbosity,
            reconcile_period=_duration(args.reconcile_period, "--reconcile-period"),
        )
    except WatchesError as exc:
        print(f"ansible-operator: {exc}", file=sys.stderr)
        return 2
    if not watches:
        print(f"ansible-operator: {args.watches_file}: no watches defined", file=sys.stderr)
        return 2
    try:
        return asyncio.run(run_operator(args, watches))
    except KeyboardInterrupt:
        return 130
    except kube_mod.ConfigError as exc:
        print(f"ansible-operator: {exc}", file=sys.stderr)
        return 2


def _kopf_login(configuration: Any) -> Any:
    """A kopf login handler answering with our own client configuration (kubeconfig first, like kubectl)."""
    import kopf

    def login(**_: Any) -> kopf.ConnectionInfo:
        token = None
        scheme = None
        header = configuration.api_key.get("BearerToken") or configuration.api_key.get("authorization")
        if header:
            prefix = configuration.api_key_prefix.get("BearerToken") or configuration.api_key_prefix.get(
                "authorization")
            value = f"{prefix} {header}" if prefix else header
            parts = value.split(" ", 1)
            scheme, token = (parts[0], parts[1]) if len(parts) == 2 else (None, parts[0])
        return kopf.ConnectionInfo(
            server=configuration.host,
            ca_path=configuration.ssl_ca_cert or None,
            insecure=not configuration.verify_ssl,
            username=configuration.username or None,
            password=configuration.password or None,
            scheme=scheme,
            token=token,
            certificate_path=configuration.cert_file or None,
            private_key_path=configuration.key_file or None,
        )

    return login


async def run_operator(args: argparse.Namespace, watches: list[Watch]) -> int:
    import kopf

    from ansible_operator.collections import paths as collection_paths
    from ansible_operator.executors import make_executor
    from ansible_operator.intake import ObjectCache, WatchIntake
    from ansible_operator.logs import ansible_event_logger
    from ansible_operator.metrics import Metrics, close_all, serve_endpoints
    from ansible_operator.queue import WorkQueue
    from ansible_operator.reconcile import PassThroughCredentials, Reconciler, Runtime
    from ansible_operator.sandbox.selectors import label_selector_from_dict

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)

    cleanups: list[Any] = []
    exit_code = 0
    namespaces = _namespaces(args)
    try:
        kubeconfig = args.kubeconfig
        if args.sandbox:
            kubeconfig = await _start_sandbox(args, cleanups)
        configuration = await asyncio.to_thread(kube_mod.load_client_config, kubeconfig)
        kube = kube_mod.Kube(configuration)
        cleanups.append(kube.close)

        metrics = Metrics()
        executor_options: dict[str, Any] = {}
        if args.executor == "warm":
            executor_options["idle_timeout"] = _duration(args.warm_idle_timeout, "--warm-idle-timeout") or None
        executor = make_executor(args.executor, **executor_options)
        await executor.start()
        cleanups.append(executor.close)

        controllers_by_gk: dict[tuple[str, str], Controller] = {}
        credentials: Any = PassThroughCredentials(kubeconfig or os.environ.get("KUBECONFIG"))
        if args.inject_owner_ref:
            dependents = _dependent_watcher(kube, watches, controllers_by_gk, namespaces, cleanups)
            credentials = await _start_owner_proxy(configuration, dependents, watches, cleanups)

        artifacts_root = _artifacts_root(args)
        artifacts_root.mkdir(parents=True, exist_ok=True, mode=0o700)
        runtime = Runtime(
            kube=kube, executor=executor, artifacts_root=artifacts_root, credentials=credentials,
            run_timeout=_duration(args.run_timeout, "--run-timeout"),
            collections_paths=tuple(collection_paths()), hooks=[metrics],
            event_loggers=ansible_event_logger, executor_name=args.executor,
        )

        registry = kopf.OperatorRegistry()
        kopf.on.login(registry=registry)(_kopf_login(configuration))
        controllers: list[Controller] = []
        for watch in watches:
            cache = ObjectCache()  # written by intake, read by the reconciler
            reconciler = Reconciler(watch, cache, runtime)
            queue = WorkQueue(watch.key, reconciler, max_concurrent=watch.max_concurrent_reconciles)
            selector = label_selector_from_dict(watch.selector) if watch.selector else None
            intake = WatchIntake(watch, queue, cache=cache, selector=selector, on_forget=reconciler.forget)
            intake.register(registry)
            controller = Controller(watch, intake, queue, reconciler)
            controllers.append(controller)
            controllers_by_gk[(watch.group, watch.kind)] = controller

        if args.leader_elect:
            for c in controllers:
                c.queue.pause()
        for c in controllers:
            await c.queue.start()
            cleanups.append(c.queue.stop)

        ready = {"kopf": False}

        def is_ready() -> bool:
            # A stand-by replica (not the leader) is ready too: it watches and would take over at once.
            return ready["kopf"]

        elector_state = {"leading": not args.leader_elect}
        metrics.set_leader(not args.leader_elect)
        for c in controllers:
            metrics.register_watch(c.watch.key, c.watch.group, c.watch.version, c.watch.kind)
        servers = await serve_endpoints(args.metrics_bind_address, args.health_probe_bind_address,
                                        metrics=metrics, ready=is_ready)
        cleanups.append(lambda: close_all(servers))
        gauges = asyncio.create_task(_refresh_gauges(metrics, controllers), name="gauges")
        cleanups.append(gauges.cancel)

        settings = kopf.OperatorSettings()
        settings.posting.enabled = False  # we record our own, meaningful Events
        settings.peering.standalone = True
        settings.watching.server_timeout = 300
        settings.watching.client_timeout = 330
        settings.watching.connect_timeout = 30
        settings.networking.error_backoffs = [1, 2, 5, 10]
        logging.getLogger("kopf").setLevel(max(logging.WARNING, logging.getLogger().level))

        kopf_ready = asyncio.Event()
        kopf_task = asyncio.create_task(kopf.operator(
            registry=registry, settings=settings, standalone=True,
            clusterwide=not namespaces, namespaces=namespaces,
            stop_flag=stop, ready_flag=kopf_ready,
        ), name="kopf")

        async def mark_ready() -> None:
            await kopf_ready.wait()
            ready["kopf"] = True
            log.info("operator ready: %d watch(es) [%s], executor=%s, namespaces=%s", len(controllers),
                     ", ".join(c.watch.key for c in controllers), args.executor, ",".join(namespaces) or "all")

        ready_task = asyncio.create_task(mark_ready())
        elector_task = None
        if args.leader_elect:
            elector_task = await _start_leader_election(args, kube, controllers, elector_state, metrics, stop)

        waiters = [asyncio.create_task(stop.wait()), kopf_task] + ([elector_task] if elector_task else [])
        done, _ = await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        if kopf_task in done and not stop.is_set():
            # kopf installs its own SIGINT/SIGTERM handlers and ends cleanly on them; anything else is a crash.
            exc = kopf_task.exception()
            if exc is not None:
                log.error("watch streams stopped: %s", exc)
                exit_code = 1
        if elector_task is not None and elector_task in done and elector_state.get("lost"):
            exit_code = 1
        stop.set()
        ready_task.cancel()
        for w in waiters:
            if not w.done():
                w.cancel()
        await asyncio.gather(*waiters, return_exceptions=True)
    finally:
        log.info("shutting down")
        for cleanup in reversed(cleanups):
            try:
                result = cleanup()
                if asyncio.iscoroutine(result):
                    await asyncio.wait_for(result, timeout=30)
            except Exception:
                log.exception("error during shutdown")
    return exit_code


async def _start_sandbox(args: argparse.Namespace, cleanups: list[Any]) -> str:
    from ansible_operator.sandbox import Sandbox

    crds = args.sandbox_crds or (["crds"] if Path("crds").exists() else [])
    sandbox = Sandbox(host="127.0.0.1", port=0, crds=tuple(crds))
    await asyncio.to_thread(sandbox.start_in_thread)
    cleanups.append(lambda: asyncio.to_thread(sandbox.stop_thread))
    if args.sandbox_kubeconfig:
        target = Path(args.sandbox_kubeconfig).expanduser()
    else:
        state = Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state") / "ansible-operator"
        target = state / "sandbox.kubeconfig"
    target.parent.mkdir(parents=True, exist_ok=True)
    kubeconfig = sandbox.write_kubeconfig(target)
    print(f"sandbox API server: {sandbox.url}", flush=True)
    print(f"kubeconfig: {kubeconfig}    (try: kubectl --kubeconfig {kubeconfig} get all -A)", flush=True)
    return str(kubeconfig)


def _dependent_watcher(kube: Any, watches: list[Watch], controllers: dict[tuple[str, str], Controller],
                       namespaces: list[str], cleanups: list[Any]) -> Any:
    """One watch per dependent kind; an event on an owned object re-queues its owner."""
    from ansible_operator.dependents import DependentWatcher
    from ansible_operator.queue import ObjectKey

    def enqueue_owner(api_version: str, kind: str, namespace: str | None, name: str) -> None:
        controller = controllers.get((api_version.rpartition("/")[0], kind))
        if controller is not None:
            controller.queue.add(ObjectKey(namespace=namespace, name=name))

    watcher = DependentWatcher(
        kube.api_client, enqueue_owner,
        owner_kinds={(w.group, w.kind) for w in watches if w.watch_dependent_resources},
        cluster_scoped=any(w.watch_cluster_scoped_resources for w in watches),
        namespaces=namespaces,
    )
    cleanups.append(watcher.close)
    return watcher


async def _start_owner_proxy(configuration: Any, dependents: Any, watches: list[Watch],
                             cleanups: list[Any]) -> "_ProxyCredentials":
    from ansible_operator.owners import DependentKind, OwnerProxy

    # blacklist: kinds never watched as dependents (Operator SDK's per-watch list, applied to all watches)
    blacklisted = {(b.get("group", ""), b.get("kind")) for w in watches for b in w.blacklist}

    def on_dependent(kind: DependentKind) -> None:
        if (kind.group, kind.kind) not in blacklisted:
            dependents.on_dependent(kind)  # starts the kind's watch once; the watcher owns the task

    proxy = OwnerProxy(configuration, on_dependent=on_dependent)
    await proxy.start()
    cleanups.append(proxy.close)
    return _ProxyCredentials(proxy)


class _ProxyCredentials:
    """Per-run kubeconfig pointing at the owner-injecting proxy."""

    def __init__(self, proxy: Any) -> None:
        self.proxy = proxy

    def envvars_for(self, owner: dict[str, Any], run_dir: Path) -> dict[str, str]:
        path = self.proxy.kubeconfig_for(owner, run_dir / "kubeconfig")
        return {"K8S_AUTH_KUBECONFIG": str(path), "KUBECONFIG": str(path)}

    def release(self, run_dir: Path) -> None:
        self.proxy.release(run_dir / "kubeconfig")


async def _refresh_gauges(metrics: Any, controllers: list[Controller], period: float = 1.0) -> None:
    """Queue depth and runs in flight are sampled (cheap) rather than pushed from the hot path."""
    while True:
        for c in controllers:
            metrics.set_queue_depth(c.watch.key, c.queue.depth)
            metrics.set_in_flight(c.watch.key, c.queue.in_flight)
        await asyncio.sleep(period)


async def _start_leader_election(args: argparse.Namespace, kube: Any, controllers: list[Controller],
                                 state: dict[str, Any], metrics: Any, stop: asyncio.Event) -> asyncio.Task[Any]:
    from ansible_operator.leader import LeaderElector

    namespace = args.leader_election_namespace or _pod_namespace() or "default"
    name = args.leader_election_id or f"{Path(args.watches_file).resolve().parent.name or 'ansible-operator'}-lock"
    identity = f"{socket.gethostname()}_{os.getpid()}"

    async def started() -> None:
        state["leading"] = True
        metrics.set_leader(True)
        log.info("became leader (lease %s/%s, identity %s)", namespace, name, identity)
        for c in controllers:
            c.queue.resume()

    async def stopped() -> None:
        # Stop acting before anyone else can start: pause, cancel in-flight runs, then exit (as
        # controller-runtime does) so a fresh process re-lists everything if it becomes leader again.
        if not state["leading"]:
            return
        state["leading"] = False
        metrics.set_leader(False)
        if stop.is_set():
            return  # a normal shutdown released the lease: nothing was lost
        state["lost"] = True
        log.error("lost leadership of lease %s/%s: stopping all runs", namespace, name)
        for c in controllers:
            c.queue.pause()
        await asyncio.gather(*(c.queue.stop(cancel_running=True) for c in controllers), return_exceptions=True)
        stop.set()

    elector = LeaderElector(
        kube.api_client, name=name, namespace=namespace, identity=identity,
        lease_duration=_duration(args.leader_elect_lease_duration, "--leader-elect-lease-duration") or 15,
        renew_deadline=_duration(args.leader_elect_renew_deadline, "--leader-elect-renew-deadline") or 10,
        retry_period=_duration(args.leader_elect_retry_period, "--leader-elect-retry-period") or 2,
        on_started_leading=started, on_stopped_leading=stopped,
    )
    return asyncio.create_task(elector.run(), name="leader-election")


def _pod_namespace() -> str | None:
    path = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
    try:
        return path.read_text().strip() or None
    except OSError:
        return None

