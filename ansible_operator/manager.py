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
import functools
import gc
import logging
import os
import re
import signal
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from ansible_operator import kopfcompat
from ansible_operator import kube as kube_mod
from ansible_operator.errors import OperatorError
from ansible_operator.kube import NotFound, ResourceRef
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


def _seconds(value: float | None) -> float | None:
    """A parsed duration flag; 0 means "none" (no period, no limit)."""
    return value or None


def _artifacts_root(args: argparse.Namespace) -> Path:
    if args.artifacts_dir:
        return Path(args.artifacts_dir).expanduser().resolve()
    from ansible_operator.artifacts import default_artifacts_dir

    return default_artifacts_dir()


def import_for_run() -> None:
    """Import what every run imports, with Python's cyclic garbage collector off (``cli.main`` turns it off
    before it imports this module and the ``kubernetes`` client with it), then freeze what is there and
    turn the collector on (``metrics`` brings aiohttp's server). The imports make ~100,000 objects that
    live as long as the process; the collector's passes over them while they were made took ~20 % of the
    imports (0.80 → 0.63 CPU s on Python 3.11), and frozen they are never scanned again. What the imports
    left unreachable (~2,000 objects) is not collected: a collection here costs as much as it saves."""
    gc.disable()
    try:
        import kopf  # noqa: F401

        from ansible_operator import dependents, executors, intake, metrics, queue, reconcile  # noqa: F401
        from ansible_operator.owners import credentials, proxy  # noqa: F401
    finally:
        gc.freeze()
        gc.enable()


def main(args: argparse.Namespace) -> int:
    from ansible_operator.logs import setup_logging

    import_for_run()
    setup_logging(level=args.log_level, fmt=args.log_format)
    for warning in getattr(args, "warnings", ()):
        log.warning("%s", warning)
    try:
        watches = load_watches(
            args.watches_file,
            max_concurrent_reconciles=args.max_concurrent_reconciles,
            ansible_verbosity=args.ansible_verbosity,
            reconcile_period=_seconds(args.reconcile_period),
            max_annotation_verbosity=getattr(args, "max_annotation_verbosity", None),
        )
    except WatchesError as exc:
        log.error("%s", exc)
        return 2
    if not watches:
        log.error("%s: no watches defined", args.watches_file)
        return 2
    lease_flag = "--leader-elect" if args.leader_elect else "--sharding" if _sharding(args) else None
    if lease_flag and _leader_election_namespace(args) is None:
        # controller-runtime: "unable to find leader election namespace: not running in-cluster, please
        # specify LeaderElectionNamespace" (it never guesses one out of cluster)
        log.error("%s: unable to find the leader election namespace: not running in a cluster"
                  " (no %s); give --leader-election-namespace", lease_flag,
                  kube_mod.service_account_dir() / "namespace")
        return 2
    try:
        return asyncio.run(run_operator(args, watches))
    except KeyboardInterrupt:
        return 130
    except kube_mod.ConfigError as exc:
        log.error("%s", exc)
        return 2
    except StartupError as exc:
        log.error("%s", exc)
        return 1
    except OSError as exc:  # a listener could not bind: say which, no traceback
        log.error("%s", exc)
        return 1
    finally:
        # The process exits next: the interpreter's final garbage collection of everything imported and
        # built (kubernetes models, kopf, aiohttp) took 1-2 s of the shutdown; nothing left needs it.
        gc.freeze()


def _kopf_login(configuration: Any) -> Any:
    """A kopf login handler answering with our own client configuration (kubeconfig first, like kubectl)."""
    import kopf

    def login(**_: Any) -> kopf.ConnectionInfo:
        # kopf logs in again after a 401: kopf_connection_info refreshes a rotated token first
        info: kopf.ConnectionInfo = kube_mod.kopf_connection_info(configuration)
        return info

    return login


async def run_operator(args: argparse.Namespace, watches: list[Watch]) -> int:
    """Run the operator until a signal, a lost Lease or a crash of the watch streams; the exit code."""
    return await _OperatorRun(args, watches).run()


class _Readiness:
    """``/readyz``: kopf's watches started, every watched kind served, the API server answering. A stand-by
    replica (not the leader) is ready too: it watches and would take over at once."""

    def __init__(self, served: ServedKinds, api: ApiReachability) -> None:
        self.watching = False
        self.served = served
        self.api = api
        self.lease: Callable[[], bool | tuple[bool, str]] | None = None
        """With ``--sharding``: whether this replica holds its shard Lease."""

    def check(self) -> bool | tuple[bool, str]:
        if not self.watching:
            return False, "watches not started yet"
        if self.lease is not None:
            held = self.lease()
            if held is not True:
                return held
        missing = self.served.check()
        if missing is not True:
            return missing
        return self.api.check()


@dataclass
class _KopfRun:
    """kopf's tasks, started apart from ours (see :meth:`_OperatorRun.spawn_kopf`)."""

    task: asyncio.Task[Any]
    ready: asyncio.Event
    stop: asyncio.Event
    """Set after the drain: kopf watches (feeding paused queues) until then."""
    stop_waiter: asyncio.Task[Any]


class _OperatorRun:
    """One ``run``, stage by stage (:meth:`run` reads top-down): connect to the API server and check what
    the watches need of it, start the executor, build one controller per watch, serve metrics and probes,
    start kopf's watches (and leader election), then on a signal shut down in order.

    Every stage that starts something registers its closing in ``cleanups``; they run in reverse at the
    end, whatever happened."""

    def __init__(self, args: argparse.Namespace, watches: list[Watch]) -> None:
        self.args = args
        self.watches = watches
        self.namespaces = _namespaces(args)
        self.shutdown = _Shutdown()
        self.cleanups: list[Any] = []
        self.controllers: list[Controller] = []
        self.controllers_by_gk: dict[tuple[str, str], Controller] = {}
        self.elector_state: dict[str, Any] = {"leading": not args.leader_elect}
        self.on_api_recovered: list[Callable[[], None]] = []
        """Called when the API server answers again after an outage (connections may be dead)."""
        self.exit_code = 0
        self.kopf_settings: Any = None
        """kopf's settings (set before kopf starts; the shard selector changes them at run time)."""

    async def run(self) -> int:
        self.shutdown.install()
        asyncio.get_running_loop().set_exception_handler(_quiet_stream_close)
        started = False  # the API server answered: from here on, a stop is a shutdown (and says so)
        try:
            if not await self.connect():
                return self.exit_code  # stopped while waiting for the API server
            unserved = await self.check_watched_kinds()
            started = True
            await self.start_executor()
            settings, vault = self.prepare_kopf()
            credentials = await self.start_credentials(settings, vault)
            registry = self.build_controllers(self.make_runtime(credentials))
            await self.start_queues()
            readiness = await self.serve_probes(unserved)
            await self.tune_kopf(settings)
            kopf_run = await self.spawn_kopf(registry, settings, vault)
            ready_task = asyncio.create_task(self.mark_ready(kopf_run, readiness))
            elector_task = (await self.start_leader_election() if self.args.leader_elect
                            else self.start_sharding(readiness) if _sharding(self.args) else None)
            waiters, done = await self.wait_for_stop(kopf_run, elector_task)
            self.shutdown.request()
            await self.wind_down(kopf_run, elector_task, waiters, done)
            ready_task.cancel()
            await _cancel_all(waiters)
        finally:
            if started:
                log.info("shutting down")
            await self.close()
        return self.exit_code

    # ---- stages, in order -------------------------------------------------------------------------

    async def connect(self) -> bool:
        """The client configuration (of the embedded sandbox with ``--sandbox``) and an API server that
        answers; False when a signal came first."""
        self.kubeconfig = self.args.kubeconfig
        if self.args.sandbox:
            self.kubeconfig = await _start_sandbox(self.args, self.cleanups)
        self.configuration = await asyncio.to_thread(kube_mod.load_client_config, self.kubeconfig)
        self.kube = kube_mod.Kube(self.configuration)
        self.cleanups.append(self.kube.close)
        await _wait_for_api(self.kube, self.configuration.host, self.args.api_unreachable_timeout,
                            self.shutdown.stop)
        return not self.shutdown.stop.is_set()

    async def check_watched_kinds(self) -> list[Watch]:
        """Discovery of every watched kind, once: RBAC refusing one is a :class:`StartupError`; the watches
        whose kind is not served (yet) are returned (:class:`ServedKinds` waits for them)."""
        resources = await _discover_watched(self.kube, self.watches)
        await _check_watch_permissions(self.kube, self.watches, resources, self.namespaces)
        return [w for w in self.watches if resources[w.key] is None]

    async def start_executor(self) -> None:
        """The metrics registry, the environment of the runs and the executor that runs them."""
        from ansible_operator.executors import make_executor
        from ansible_operator.metrics import Metrics

        args = self.args
        self.metrics = Metrics()
        self.kube.observers.append(self.metrics.api_request)  # rest_client_requests_total & co.
        # Before the executor starts: its processes inherit the environment (as the SDK's os.Setenv).
        _export_ansible_paths(args)
        await _start_osdk_metric(args, self.metrics, self.cleanups)
        executor_options: dict[str, Any] = {"ansible_args": tuple(args.ansible_args)}
        if args.executor == "warm":
            executor_options["idle_timeout"] = _seconds(args.warm_idle_timeout)
        self.executor = make_executor(args.executor, **executor_options)
        await self.executor.start()
        self.cleanups.append(self.executor.close)
        stop_restarting = getattr(self.executor, "stop_restarting", None)
        if stop_restarting is not None:
            # a zygote SIGTERMed with our process group stays down
            self.shutdown.on_stop.append(stop_restarting)

    def prepare_kopf(self) -> tuple[Any, Any]:
        """kopf's settings and credentials vault: its watch streams and the dependent watches share them."""
        import kopf

        kopfcompat.check()
        kopfcompat.install_bounded_decoding()  # no object can end kopf's watcher (nesting to 10,000 levels)
        kopfcompat.install_watch_restarts()  # ApiReachability restarts them when an outage ends
        return kopf.OperatorSettings(), kube_mod.kopf_vault()

    async def start_credentials(self, settings: Any, vault: Any) -> Any:
        """The credentials each run gets: the owner-injecting API proxy's (with its dependent watches)
        under ``--inject-owner-ref``, else the operator's own."""
        from ansible_operator.owners.credentials import PassThroughCredentials

        self.dependents: Any = None
        if not self.args.inject_owner_ref:
            return PassThroughCredentials(self.kubeconfig or os.environ.get("KUBECONFIG"))
        self.dependents = _dependent_watcher(settings, vault, self.watches, self.controllers_by_gk,
                                             self.namespaces, self.cleanups)
        return await _start_owner_proxy(self.configuration, self.dependents, self.watches, self.cleanups,
                                        self.on_api_recovered, port=self.args.proxy_port or 0)

    def make_runtime(self, credentials: Any) -> Any:
        """What every reconciler shares: clients, executor, artifacts, logging and status options."""
        from ansible_operator import artifacts
        from ansible_operator import status as status_mod
        from ansible_operator.collections import COLLECTIONS_ROOT
        from ansible_operator.logs import ansible_event_logger
        from ansible_operator.reconcile import Runtime

        args = self.args
        artifacts_root = artifacts.ensure_root(_artifacts_root(args))
        artifacts.recover_interrupted(artifacts_root)  # runs a killed predecessor left "running"
        janitor = artifacts.Janitor(artifacts_root,
                                    getattr(args, "max_artifacts_size", artifacts.DEFAULT_MAX_BYTES))
        self.cleanups.append(janitor.close)
        return Runtime(
            kube=self.kube, executor=self.executor, artifacts_root=artifacts_root, credentials=credentials,
            janitor=janitor,
            run_timeout=_seconds(args.run_timeout),
            collections_paths=(COLLECTIONS_ROOT,), hooks=[self.metrics],
            event_loggers=_event_loggers(args.ansible_log_events, ansible_event_logger,
                                         debug_logs=args.ansible_debug_logs),
            executor_name=args.executor,
            conditions=status_mod.Conditions(sdk=getattr(args, "sdk_conditions", False),
                                             kstatus=getattr(args, "kstatus_conditions", False)),
        )

    def build_controllers(self, runtime: Any) -> Any:
        """One controller per watch, its kopf handlers in a new registry (returned)."""
        import kopf

        registry = kopf.OperatorRegistry()
        kopf.on.login(registry=registry)(_kopf_login(self.configuration))
        for watch in self.watches:
            controller = _build_controller(watch, runtime, self.metrics, registry,
                                           getattr(self.args, "startup_resync", "spread"))
            self.controllers.append(controller)
            self.controllers_by_gk[(watch.group, watch.kind)] = controller
        return registry

    async def start_queues(self) -> None:
        """The work queues, paused under leader election until this replica leads (under sharding until
        the ring has settled)."""
        if self.args.leader_elect or _sharding(self.args):
            for c in self.controllers:
                c.queue.pause()
        for c in self.controllers:
            await c.queue.start()
            self.cleanups.append(c.queue.stop)

    async def serve_probes(self, unserved: list[Watch]) -> _Readiness:
        """API reachability and served kinds watched in the background; ``/metrics``, ``/healthz`` and
        ``/readyz`` served; the queue gauges sampled."""
        from ansible_operator.metrics import close_all, serve_endpoints

        args, kube, metrics = self.args, self.kube, self.metrics

        def recovered() -> int:  # connections from before the outage may be dead without a word
            kube.reset_connections()
            for hook in self.on_api_recovered:
                hook()
            return kopfcompat.restart_watches()

        api = ApiReachability(kube, args.api_unreachable_timeout, on_recovered=recovered)
        self._background(api.watch(), "api-reachability")
        served = ServedKinds(kube, unserved)
        self._background(served.watch(), "served-kinds")
        readiness = _Readiness(served, api)

        metrics.set_leader(not args.leader_elect)
        for c in self.controllers:
            metrics.register_watch(c.watch.key, c.watch.group, c.watch.version, c.watch.kind)
        servers = await serve_endpoints(args.metrics_bind_address, args.health_probe_bind_address,
                                        metrics=metrics, ready=readiness.check,
                                        **_metrics_security(args, kube))
        self.cleanups.append(lambda: close_all(servers))
        self._background(_refresh_gauges(metrics, self.controllers), "gauges")
        return readiness

    async def tune_kopf(self, settings: Any) -> None:
        """kopf's settings: our own Events, no peering, deadlines on every request, CRD scanning only
        where RBAC allows it, and only its warnings in the log."""
        self.kopf_settings = settings
        settings.posting.enabled = False  # we record our own, meaningful Events
        settings.peering.standalone = True
        settings.watching.server_timeout = 300
        settings.watching.client_timeout = 330
        settings.watching.connect_timeout = kube_mod.CONNECT_TIMEOUT
        # every other request of kopf's (lists, discovery) has a deadline too; its default is 5 minutes
        settings.networking.connect_timeout = kube_mod.CONNECT_TIMEOUT
        settings.networking.request_timeout = 60
        settings.networking.error_backoffs = [1, 2, 5, 10]
        if not await _may_watch_crds(self.kube):
            # kopf would otherwise retry the forbidden CRD watch for ~20 s (five ERROR lines) before giving
            # up the same way; the Operator SDK scaffold's role.yaml grants no access to CRDs
            settings.scanning.disabled = True
            log.info("no list/watch on customresourcedefinitions: CRDs installed after start-up are noticed"
                     " on restart only")
        logging.getLogger("kopf").setLevel(max(logging.WARNING, logging.getLogger().level))

    async def spawn_kopf(self, registry: Any, settings: Any, vault: Any) -> _KopfRun:
        """kopf's watch streams. kopf.operator() is spawn_tasks() + run_tasks(); called apart so that
        SIGINT/SIGTERM stay ours (see _Shutdown) and kopf is told which tasks are not its own to wait for
        when it stops. The stop waiter is one of those: when kopf fails it cancels every other task, and a
        cancelled waiter looked like a requested stop (the operator exited 0 after losing its API server at
        start)."""
        import kopf

        shutdown = self.shutdown
        kopf_ready = asyncio.Event()
        kopf_stop = asyncio.Event()
        stop_waiter = asyncio.create_task(shutdown.stop.wait(), name="stop-waiter")
        shutdown.settled.update(asyncio.all_tasks())
        kopf_tasks = await kopf.spawn_tasks(
            registry=registry, settings=settings, standalone=True,
            clusterwide=not self.namespaces, namespaces=self.namespaces,
            stop_flag=kopf_stop, ready_flag=kopf_ready, vault=vault,
        )
        shutdown.install()  # spawn_tasks() installed kopf's own handlers
        kopf_task = asyncio.create_task(kopf.run_tasks(kopf_tasks, ignored=shutdown.settled), name="kopf")
        return _KopfRun(task=kopf_task, ready=kopf_ready, stop=kopf_stop, stop_waiter=stop_waiter)

    async def mark_ready(self, kopf_run: _KopfRun, readiness: _Readiness) -> None:
        await kopf_run.ready.wait()
        readiness.watching = True
        log.info("operator ready: %d watch(es) [%s], executor=%s, namespaces=%s", len(self.controllers),
                 ", ".join(c.watch.key for c in self.controllers), self.args.executor,
                 ",".join(self.namespaces) or "all")

    async def start_leader_election(self) -> asyncio.Task[Any]:
        return await _start_leader_election(self.args, self.kube, self.controllers, self.elector_state,
                                            self.metrics, self.shutdown.stop)

    def start_sharding(self, readiness: _Readiness) -> asyncio.Task[Any]:
        """``--sharding``: our member Lease, the ring, the gates on the queues (ansible_operator.sharding).
        The task ends when this replica fences itself (it could not renew its Lease): the runs in flight
        are cancelled then and the operator exits 1, as on a lost leader election Lease."""
        from ansible_operator.sharding.coordinator import ShardCoordinator, ShardedWatch
        from ansible_operator.sharding.leases import KubeLeaseStore
        from ansible_operator.sharding.membership import Membership

        args = self.args
        namespace = _leader_election_namespace(args)
        assert namespace is not None  # main() refused to start without one
        ring = args.leader_election_id or Path(args.watches_file).resolve().parent.name or "ansible-operator"
        identity = f"{socket.gethostname()}_{os.getpid()}"
        lease_duration = args.leader_elect_lease_duration or 15

        async def fenced() -> None:
            self.elector_state["lost"] = True
            await asyncio.gather(*(c.queue.stop(cancel_running=True) for c in self.controllers),
                                 return_exceptions=True)
            self.shutdown.stop.set()

        coordinator = ShardCoordinator(
            KubeLeaseStore(self.kube, namespace=namespace, ring=ring, identity=identity,
                           lease_duration=lease_duration),
            Membership(identity),
            [ShardedWatch(c.watch.key, c.queue, c.intake.cache) for c in self.controllers],
            lease_duration=lease_duration, renew_deadline=args.leader_elect_renew_deadline or 10,
            retry_period=args.leader_elect_retry_period or 2, on_fenced=fenced,
            shard_by=getattr(args, "shard_by", "uid"), metrics=self.metrics,
            skip_handover=bool(getattr(args, "sharding_unsafe_skip_handover", False)),
            bucketed=bool(getattr(args, "shard_label", False)),
        )
        if getattr(args, "shard_selector", False) or coordinator.bucketed:
            coordinator.on_ring = self._server_side_shards(coordinator)
        if coordinator.skip_handover:
            log.warning("--sharding-unsafe-skip-handover: objects may run on two replicas at once"
                        " (for tests only)")
        readiness.lease = coordinator.ready
        self.shutdown.on_stop.append(coordinator.stop)  # the drain pauses the queues: never resume them
        return asyncio.create_task(coordinator.run(), name="sharding")

    def _server_side_shards(self, coordinator: Any) -> Callable[[Any], None]:
        """``--shard-selector`` or ``--shard-label``: every watch narrowed to our shard by the API server
        (kopf's selector settings, and a relist on each new ring); the intakes learn which missing objects
        moved away; with labels, a labeller per watch labels the new objects we own."""
        from ansible_operator.sharding.labeller import ShardLabeller
        from ansible_operator.sharding.serverside import BucketLabels, ServerSideShards

        by_key = {c.watch.key: c for c in self.controllers}
        settings = self.kopf_settings
        identity = coordinator.membership.identity
        labels = BucketLabels(coordinator.shard_by) if coordinator.bucketed else None
        labellers: dict[str, ShardLabeller] = {}

        def narrow(key: str, selector: str) -> None:
            w = by_key[key].watch
            set_selector = kopfcompat.set_label_selector if labels else kopfcompat.set_shard_selector
            set_selector(settings, w.group, w.version, w.kind, selector)
            kopfcompat.relist(w.group, w.version, w.kind)

        shards = ServerSideShards(identity, list(by_key), narrow, owns=coordinator.owns, labels=labels,
                                  labellers=labellers)
        for c in self.controllers:
            c.intake.shards = shards.view(c.watch.key, c.intake.cache)
        shards.start()
        if labels is None:
            self._background(_say_if_shards_are_served(self.kube, self.controllers, self.namespaces),
                             "shard-selector-check")
            return shards.on_ring
        for c in self.controllers:
            w = c.watch
            labellers[w.key] = labeller = ShardLabeller(
                self.kube, functools.partial(self.kube.discover, w.group, w.version, w.kind),
                list(self.namespaces) or [None], labels, identity=identity,
                ring=lambda: coordinator.membership.ring, interval=min(1.0, coordinator.retry_period))
            self._background(labeller.run(), f"shard-labels-{w.key}")
        return shards.on_ring

    async def wait_for_stop(self, kopf_run: _KopfRun, elector_task: asyncio.Task[Any] | None
                            ) -> tuple[list[asyncio.Task[Any]], set[asyncio.Task[Any]]]:
        """Until a signal, a lost Lease or the end of kopf's tasks (a crash: exit 1); the tasks waited for
        and those done."""
        waiters = [kopf_run.stop_waiter, kopf_run.task] + ([elector_task] if elector_task else [])
        done, _ = await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        kopf_task = kopf_run.task
        if not self.shutdown.stop.is_set() and (kopf_task in done or kopf_run.stop_waiter.cancelled()):
            # kopf stops only when kopf_run.stop is set (wind_down): ending before that is a crash
            exc = kopf_task.exception() if kopf_task.done() and not kopf_task.cancelled() else None
            log.error("watch streams stopped: %s", (kube_mod.error_from_kopf(exc) if exc else None) or exc
                      or "kopf ended")
            self.exit_code = 1
        return waiters, done

    async def wind_down(self, kopf_run: _KopfRun, elector_task: asyncio.Task[Any] | None,
                        waiters: list[asyncio.Task[Any]], done: set[asyncio.Task[Any]]) -> None:
        """Shutdown in order: drain the runs in flight (unless the Lease was lost: they were stopped),
        close the dependent watches, release the Lease, then stop kopf."""
        if elector_task is not None and elector_task in done and self.elector_state.get("lost"):
            self.exit_code = 1
        else:
            # Stop taking work, let runs in flight finish (still leading: the Lease is released after).
            if not await _drain(self.controllers, self.args.graceful_shutdown_timeout, self.shutdown.force):
                # a second signal stopped the runs: exit 1, as controller-runtime's os.Exit(1)
                self.exit_code = 1
        if self.dependents is not None:
            await self.dependents.close()  # their streams use kopf's vault, which kopf closes when it stops
        if elector_task is not None and not elector_task.done():
            # Release the Lease now, before kopf stops: kopf cancels every task it was not told to ignore
            # (below), and the release task the cancelled elector starts would be one of them (the Lease
            # stayed held after an idle SIGTERM, 2 runs in 10). No run is in flight any more.
            elector_task.cancel()
            await asyncio.gather(elector_task, return_exceptions=True)
        # Every task alive now is ours (closed by the cleanups) or a kopf root task's: kopf waits 5 s for the
        # "hung" tasks of an operator it stops, i.e. for everything it was not told to ignore.
        self.shutdown.settled.update(asyncio.all_tasks())
        kopf_run.stop.set()

    async def close(self) -> None:
        """Every cleanup, in reverse order of start; one failing does not stop the others."""
        for cleanup in reversed(self.cleanups):
            try:
                result = cleanup()
                if asyncio.iscoroutine(result):
                    async with asyncio.timeout(30):
                        await result
            except Exception:
                log.exception("error during shutdown")

    def _background(self, coroutine: Any, name: str) -> None:
        task = asyncio.create_task(coroutine, name=name)
        self.cleanups.append(task.cancel)


def _build_controller(watch: Watch, runtime: Any, metrics: Any, registry: Any,
                      startup_resync: str = "spread") -> Controller:
    """A watch's cache, reconciler, work queue (with controller-runtime's metrics) and kopf intake."""
    from ansible_operator.intake import ObjectCache, WatchIntake
    from ansible_operator.labels import label_selector_from_dict
    from ansible_operator.queue import WorkQueue
    from ansible_operator.reconcile import Reconciler

    cache = ObjectCache()  # written by intake, read by the reconciler
    reconciler = Reconciler(watch, cache, runtime)
    hooks = metrics.controller(watch.kind, watch.version, watch.max_concurrent_reconciles,
                               group=watch.group)  # controller-runtime's metrics
    queue = WorkQueue(watch.key, reconciler, max_concurrent=watch.max_concurrent_reconciles, hooks=hooks)
    selector = label_selector_from_dict(watch.selector) if watch.selector else None
    intake = WatchIntake(watch, queue, cache=cache, selector=selector, on_forget=reconciler.forget,
                         startup_resync=startup_resync)
    intake.register(registry)
    return Controller(watch, intake, queue, reconciler)


async def _cancel_all(tasks: list[asyncio.Task[Any]]) -> None:
    for task in tasks:
        if not task.done():
            task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


class StartupError(OperatorError):
    """The operator cannot start (exit 1, one line): no API server answered in time, or it refused us."""


async def _wait_for_api(kube: Any, server: str, timeout: float, stop: asyncio.Event) -> None:
    """controller-runtime's manager does not start without an API server; neither does this one. ``GET
    /version`` until it answers, for at most ``--api-unreachable-timeout`` (0: for ever), then a
    StartupError that says what was tried and what happened. A 401 (bad credentials) fails at once."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout if timeout else None
    delay, said = 0.5, False
    while not stop.is_set():
        try:
            await asyncio.wait_for(kube.request("GET", "/version"), timeout=10)
            if said:
                log.info("API server %s answered", server)
            return
        except kube_mod.ApiError as exc:
            if exc.status == 401:
                raise StartupError(f"API server {server} refused the credentials: {exc}") from None
            if exc.status:  # any other answer: it is there (its errors are for the requests that follow)
                return
            reason = str(exc)
        except Exception as exc:  # noqa: BLE001 - connection refused, TLS, DNS, timeout: all "no answer"
            reason = " ".join(str(exc).split()) or type(exc).__name__
        if deadline is not None and loop.time() >= deadline:
            raise StartupError(f"API server {server} unreachable for {timeout:.0f}s"
                               f" (--api-unreachable-timeout): {reason}")
        if not said:
            log.warning("waiting for the API server %s: %s", server, reason)
            said = True
        wait = delay if deadline is None else min(delay, max(0.0, deadline - loop.time()))
        try:
            await asyncio.wait_for(stop.wait(), timeout=wait)
        except asyncio.TimeoutError:
            pass
        delay = min(delay * 2, 5.0)


def _quiet_stream_close(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """The loop's exception handler: as asyncio's, except for one shutdown artefact of kopf.

    kopf's watcher awaits inside its ``async for`` over ``infinite_watch``; cancelled there, it leaves the
    generator open, and ``asyncio.run`` closes every open generator at exit *concurrently*: the inner
    ``streaming_block`` first, then ``infinite_watch``, whose ``async with`` finds it closed and raises
    ``RuntimeError: generator didn't stop after athrow()``. Nothing is lost (the streams' connections are
    closed with kopf's session), so that one goes to the debug log rather than as an error with a
    traceback on every such exit."""
    agen = context.get("asyncgen")
    exc = context.get("exception")
    code = getattr(agen, "ag_code", None)
    if (isinstance(exc, RuntimeError) and "didn't stop after athrow" in str(exc)
            and code is not None and code.co_name == "infinite_watch" and "kopf" in code.co_filename):
        log.debug("%s: %s (kopf's watch stream, closed at exit)", context.get("message"), exc)
        return
    loop.default_exception_handler(context)


class _Shutdown:
    """SIGINT/SIGTERM, handled by us rather than by kopf so that a shutdown goes in our order: stop taking
    work, let runs in flight finish (``--graceful-shutdown-timeout``), stop kopf, release the Lease, close
    the rest. (kopf's own handler stopped kopf first and then waited 5 s for its stop-flag waiter, which a
    signal leaves pending: an idle operator took 5 s to exit.)

    The first signal sets ``stop`` and runs the ``on_stop`` hooks; a second one sets ``force``: runs in
    flight are stopped at once (controller-runtime exits 1 on a second signal)."""

    def __init__(self) -> None:
        self.stop = asyncio.Event()
        self.force = asyncio.Event()
        self.on_stop: list[Callable[[], object]] = []
        self.settled: set[asyncio.Task[Any]] = set()
        """Tasks kopf's ``run_tasks`` must not wait for when it stops (``ignored``; ours, or alive before)."""

    def install(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self._on_signal, sig)

    def _on_signal(self, sig: signal.Signals) -> None:
        if self.stop.is_set():
            if not self.force.is_set():
                log.warning("%s again: stopping the runs in flight now", sig.name)
            self.force.set()
            return
        log.info("%s received: shutting down", sig.name)
        self.request()

    def request(self) -> None:
        if not self.stop.is_set():
            self.stop.set()
        hooks, self.on_stop = self.on_stop, []
        for hook in hooks:
            try:
                hook()
            except Exception:
                log.exception("error during shutdown")


async def _start_sandbox(args: argparse.Namespace, cleanups: list[Any]) -> str:
    from ansible_operator import sandbox_cli

    Sandbox = sandbox_cli.load().Sandbox
    crds = args.sandbox_crds or (["crds"] if Path("crds").exists() else [])
    sandbox = Sandbox(host="127.0.0.1", port=0, crds=tuple(crds))
    await asyncio.to_thread(sandbox.start_in_thread)
    cleanups.append(lambda: asyncio.to_thread(sandbox.stop_thread))
    if args.sandbox_kubeconfig:
        target = Path(args.sandbox_kubeconfig).expanduser()
    else:
        state_home = Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state")
        state = state_home / "ansible-operator"
        target = state / "sandbox.kubeconfig"
    target.parent.mkdir(parents=True, exist_ok=True)
    kubeconfig = sandbox.write_kubeconfig(target)
    # (the sandbox logs its own URL when it starts)
    log.info("kubeconfig: %s    (try: kubectl --kubeconfig %s get all -A)", kubeconfig, kubeconfig)
    return str(kubeconfig)


def _dependent_watcher(settings: Any, vault: Any, watches: list[Watch],
                       controllers: dict[tuple[str, str], Controller],
                       namespaces: list[str], cleanups: list[Any]) -> Any:
    """One watch per dependent kind; an event on an owned object re-queues its owner."""
    from ansible_operator.dependents import DependentWatcher
    from ansible_operator.queue import ObjectKey, Priority

    def enqueue_owner(api_version: str, kind: str, namespace: str | None, name: str) -> None:
        controller = controllers.get((api_version.rpartition("/")[0], kind))
        if controller is not None:  # an echo of a run (or drift): behind users' changes
            controller.queue.add(ObjectKey(namespace=namespace, name=name), Priority.BACKGROUND)

    watcher = DependentWatcher(
        enqueue_owner, settings=settings, vault=vault,
        owner_kinds={(w.group, w.kind) for w in watches if w.watch_dependent_resources},
        cluster_scoped=any(w.watch_cluster_scoped_resources for w in watches),
        namespaces=namespaces,
    )
    cleanups.append(watcher.close)
    return watcher


async def _start_owner_proxy(configuration: Any, dependents: Any, watches: list[Watch],
                             cleanups: list[Any], on_api_recovered: list[Callable[[], None]],
                             port: int = 0) -> Any:
    from ansible_operator.owners.credentials import ProxyCredentials
    from ansible_operator.owners.injection import DependentKind
    from ansible_operator.owners.proxy import OwnerProxy

    # blacklist: kinds never watched as dependents (Operator SDK's per-watch list, applied to all watches)
    blacklisted = {(b.get("group", ""), b.get("kind")) for w in watches for b in w.blacklist}

    def on_dependent(kind: DependentKind) -> None:
        if (kind.group, kind.kind) not in blacklisted:
            dependents.on_dependent(kind)  # starts the kind's watch once; the watcher owns the task

    proxy = OwnerProxy(configuration, on_dependent=on_dependent, port=port)
    await proxy.start()
    cleanups.append(proxy.close)
    on_api_recovered.append(proxy.drop_connections)
    return ProxyCredentials(proxy)


async def _refresh_gauges(metrics: Any, controllers: list[Controller], period: float = 1.0) -> None:
    """Queue depth and runs in flight are sampled (cheap) rather than pushed from the hot path."""
    while True:
        for c in controllers:
            metrics.set_queue_depth(c.watch.key, c.queue.depth)
            metrics.set_cached_objects(c.watch.key, len(c.intake.cache))
            metrics.set_in_flight(c.watch.key, c.queue.in_flight)
        await asyncio.sleep(period)


async def _start_leader_election(args: argparse.Namespace, kube: Any, controllers: list[Controller],
                                 state: dict[str, Any], metrics: Any,
                                 stop: asyncio.Event) -> asyncio.Task[Any]:
    from ansible_operator.leader import LeaderElector

    namespace = _leader_election_namespace(args)
    assert namespace is not None  # main() refused to start without one
    project = Path(args.watches_file).resolve().parent.name or "ansible-operator"
    name = args.leader_election_id or f"{project}-lock"
    identity = f"{socket.gethostname()}_{os.getpid()}"

    metrics.set_leader(False, lease=name)  # a candidate until it acquires the Lease

    async def started() -> None:
        state["leading"] = True
        metrics.set_leader(True, lease=name)  # leader.py logs "became leader"
        for c in controllers:
            c.queue.resume()

    async def stopped() -> None:
        # Stop acting before anyone else can start: pause, cancel in-flight runs, then exit (as
        # controller-runtime does) so a fresh process re-lists everything if it becomes leader again.
        if not state["leading"]:
            return
        state["leading"] = False
        metrics.set_leader(False, lease=name)
        if stop.is_set():
            return  # a normal shutdown released the lease: nothing was lost
        state["lost"] = True
        log.error("lost leadership of lease %s/%s: stopping all runs", namespace, name)
        for c in controllers:
            c.queue.pause()
        await asyncio.gather(*(c.queue.stop(cancel_running=True) for c in controllers),
                             return_exceptions=True)
        stop.set()

    elector = LeaderElector(
        kube, name=name, namespace=namespace, identity=identity,
        lease_duration=args.leader_elect_lease_duration or 15,
        renew_deadline=args.leader_elect_renew_deadline or 10,
        retry_period=args.leader_elect_retry_period or 2,
        on_started_leading=started, on_stopped_leading=stopped,
    )
    return asyncio.create_task(elector.run(), name="leader-election")


async def _allowed(kube: Any, group: str, resource: str, verb: str, namespace: str | None = None) -> bool:
    """Whether this operator's identity may ``verb`` ``resource`` (a SelfSubjectAccessReview, which every
    authenticated user may create). Unknown (the review itself failed) counts as yes."""
    attributes = {"group": group, "resource": resource, "verb": verb}
    if namespace:
        attributes["namespace"] = namespace
    review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
              "spec": {"resourceAttributes": attributes}}
    try:
        answer = await kube.request("POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
                                    body=review)
    except kube_mod.ApiError:
        return True
    return bool(isinstance(answer, dict) and (answer.get("status") or {}).get("allowed"))


async def _may_watch_crds(kube: Any) -> bool:
    """Whether this operator's identity may list and watch CustomResourceDefinitions."""
    return all([await _allowed(kube, "apiextensions.k8s.io", "customresourcedefinitions", verb)
                for verb in ("list", "watch")])


async def _discover_watched(kube: Any, watches: list[Watch]) -> dict[str, ResourceRef | None]:
    """Plural and scope of every watched kind from discovery, once at start, by ``Watch.key``; None for a
    kind not served (its CRD not installed yet) or when the API server failed the request."""
    resources: dict[str, ResourceRef | None] = {}
    for w in watches:
        try:
            resources[w.key] = await kube.discover(w.group, w.version, w.kind)
        except kube_mod.ApiError:
            resources[w.key] = None
    return resources


async def _check_watch_permissions(kube: Any, watches: list[Watch], resources: dict[str, ResourceRef | None],
                                   namespaces: list[str]) -> None:
    """RBAC that forbids listing or watching a watched kind is a start-up failure of one line (kopf would
    retry the forbidden list five times, five ERROR lines, then stop; controller-runtime times out its cache
    sync after two minutes). Kinds not served yet (None in ``resources``) are skipped: see ServedKinds."""
    for w in watches:
        ref = resources.get(w.key)
        if ref is None:
            continue
        scopes: list[str | None] = list(namespaces) if namespaces and ref.namespaced else [None]
        for namespace in scopes:
            refused = [verb for verb in ("list", "watch")
                       if not await _allowed(kube, w.group, ref.plural, verb, namespace)]
            if refused:
                where = f"namespace {namespace}" if namespace else "all namespaces"
                raise StartupError(
                    f"RBAC: this operator may not {' or '.join(refused)} {ref.plural}"
                    f"{'.' + w.group if w.group else ''} in {where}; its role needs {{apiGroups:"
                    f" [\"{w.group}\"], resources: [{ref.plural}, {ref.plural}/status], verbs: [get, list,"
                    " watch, patch, update]} (ansible-operator generate rbac prints the whole role)")


async def _say_if_shards_are_served(kube: Any, controllers: list[Controller], namespaces: list[str]) -> None:
    """Log whether the API server honours ``shardSelector``: one that parses it refuses a malformed one
    (v1.36 answers 500 "invalid shard selector" for custom resources, 400 would be right), one that ignores
    it answers (custom resource lists carry no ``metadata.shardInfo`` to tell). Without it every object
    still arrives, and the ring's gate still shards the runs."""
    if not controllers:
        return
    w = controllers[0].watch
    try:
        ref = await kube.discover(w.group, w.version, w.kind)
        await kube.request("GET", ref.path(namespaces[0] if namespaces else None), query=[
            ("limit", "1"), ("shardSelector", _MALFORMED_SHARD_SELECTOR)])
    except kube_mod.ApiError as exc:
        if exc.status in (400, 500) and "shard selector" in str(exc):
            log.info("--shard-selector: the API server lists and watches this replica's shard only")
            return
        log.info("--shard-selector: could not check whether the API server serves it: %s", exc)
        return
    except Exception as exc:  # noqa: BLE001 - only a log line depends on it
        log.info("--shard-selector: could not check whether the API server serves it: %s", exc)
        return
    log.warning("--shard-selector: the API server ignores shardSelector (Kubernetes before 1.36, or the"
                " ShardedListAndWatch feature gate off): every replica receives every object; the ring"
                " still decides which replica runs it")


_MALFORMED_SHARD_SELECTOR = "shardRange(object.metadata.uid, '0x0000000000000001', '0x0000000000000000')"
"""Its start is past its end: a server that parses shard selectors refuses it (see above)."""


def _sharding(args: argparse.Namespace) -> bool:
    return bool(getattr(args, "sharding", False))


def _leader_election_namespace(args: argparse.Namespace) -> str | None:
    """``--leader-election-namespace``, else the pod's namespace (its service account's ``namespace`` file),
    as controller-runtime; None out of a cluster."""
    return str(args.leader_election_namespace or "") or _pod_namespace()


def _pod_namespace() -> str | None:
    path = kube_mod.service_account_dir() / "namespace"
    try:
        return path.read_text().strip() or None
    except OSError:
        return None



# ---- SDK flags: ansible paths, log events, osdk_metric, metrics security, readiness, shutdown ---------

def _export_ansible_paths(args: argparse.Namespace) -> None:
    """``--ansible-roles-path`` / ``--ansible-collections-path`` become ``$ANSIBLE_ROLES_PATH`` /
    ``$ANSIBLE_COLLECTIONS_PATH`` for every run, as the SDK's ``os.Setenv``. The bundled ``operator_sdk.util``
    shim goes after the collections path, so an installed ``operator_sdk.util`` is the one used."""
    from ansible_operator.collections import search_path

    if args.ansible_roles_path:
        os.environ["ANSIBLE_ROLES_PATH"] = args.ansible_roles_path
    user = args.ansible_collections_path or os.environ.get("ANSIBLE_COLLECTIONS_PATH")
    os.environ["ANSIBLE_COLLECTIONS_PATH"] = search_path(user)


async def _start_osdk_metric(args: argparse.Namespace, metrics: Any, cleanups: list[Any]) -> None:
    """The endpoint ``osdk_metric`` posts to (metrics.start_osdk_metric_endpoint decides where); the runs
    find it through ``$ANSIBLE_OPERATOR_OSDK_METRIC_URL`` (the bundled module) or at localhost:5050."""
    from ansible_operator.metrics import OSDK_METRIC_ENV, start_osdk_metric_endpoint

    handle = await start_osdk_metric_endpoint(args.osdk_metric_bind_address, metrics.user,
                                              collections_path=os.environ.get("ANSIBLE_COLLECTIONS_PATH", ""))
    if handle is None:
        os.environ.pop(OSDK_METRIC_ENV, None)
        return
    cleanups.append(handle.close)
    os.environ[OSDK_METRIC_ENV] = f"{handle.url}/metrics"


_ANSI_SGR = re.compile(r"\x1b\[[0-9;]*m")


def _event_loggers(mode: str, tasks_logger: Any, debug_logs: bool = False) -> Any:
    """``--ansible-log-events``: Nothing = no Ansible events in the log, Tasks = task results and the recap
    (the verbosity decides which), Everything = that plus one line for every other event.

    ``debug_logs`` (the SDK's ``$ANSIBLE_DEBUG_LOGS``): also log each run's whole ansible-playbook output,
    in one record, when the run ends."""
    events_log = logging.getLogger("ansible_operator.ansible")
    base: Any
    if mode == "Nothing":
        base = None
    elif mode == "Tasks":
        base = tasks_logger
    else:
        def base(verbosity: int) -> Any:
            tasks = tasks_logger(verbosity)

            def on_event(event: dict[str, Any]) -> None:
                tasks(event)
                kind = event.get("event", "")
                if kind.startswith(("runner_on_", "runner_item_on_")) or kind == "playbook_on_stats":
                    return  # the tasks logger's lines
                data = event.get("event_data") or {}
                what = data.get("task") or data.get("play") or data.get("playbook") or ""
                events_log.info("%s%s", kind or "event", f" [{what}]" if what else "",
                                extra={"ansible_event": kind})

            return on_event

    if not debug_logs:
        return base

    class WithOutput:
        """Per run: the inner logger's lines, and the run's whole output in one record at its end (the
        stats event, or ``flush()`` -- which reconcile calls when the run ends -- for a run that never got
        that far, e.g. a playbook that does not parse). Colour codes are dropped; the formatter indents the
        lines (text) or puts them in ``ansible_output`` (JSON)."""

        def __init__(self, verbosity: int) -> None:
            self.inner = base(verbosity) if base is not None else None
            self.output: list[str] = []

        def __call__(self, event: dict[str, Any]) -> None:
            if self.inner is not None:
                self.inner(event)
            if event.get("stdout"):
                self.output.append(_ANSI_SGR.sub("", str(event["stdout"])))
            if event.get("event") == "playbook_on_stats":
                self.flush()

        def flush(self) -> None:
            if self.output:
                events_log.info("Ansible Debug Result",
                                extra={"ansible_event": "output", "ansible_output": "\n".join(self.output)})
                self.output.clear()

    return WithOutput


def _metrics_security(args: argparse.Namespace, kube: Any) -> dict[str, Any]:
    """``--metrics-secure`` (HTTPS) and ``--metrics-require-rbac`` (TokenReview + SubjectAccessReview)."""
    from ansible_operator.metrics import RbacFilter, tls_context

    out: dict[str, Any] = {}
    if args.metrics_secure and args.metrics_bind_address not in ("0", ""):
        out["tls"] = tls_context(args.metrics_cert_path, args.metrics_cert_name, args.metrics_cert_key)
    if args.metrics_require_rbac:
        async def post(path: str, body: dict[str, Any]) -> Any:
            return await kube.request("POST", path, body=body, content_type="application/json")

        out["metrics_filter"] = RbacFilter(post)
    return out


class ServedKinds:
    """Whether the API server serves every watched kind. One that is not (its CRD not installed yet) is not
    a start-up failure here: kopf watches for CRDs and serves the kind once it appears (controller-runtime
    instead exits and the pod restarts until then). Start-up discovery finds them (``unserved``); meanwhile
    ``/readyz`` fails naming them, one warning says so at start and one line when each appears; discovery is
    asked again every ``period`` seconds."""

    def __init__(self, kube: Any, unserved: list[Watch], period: float = 10.0) -> None:
        self.kube = kube
        self.period = period
        self.missing: dict[str, Watch] = {w.key: w for w in unserved}

    def check(self) -> bool | tuple[bool, str]:
        if not self.missing:
            return True
        return False, "not served by the API server (CRD not installed?): " + ", ".join(sorted(self.missing))

    async def watch(self) -> None:
        if not self.missing:
            return
        log.warning("%s not served by the API server (CRD not installed?): /readyz fails until it"
                    " is; its objects are reconciled as soon as it is", ", ".join(sorted(self.missing)))
        while self.missing:
            await asyncio.sleep(self.period)
            await self._discover_missing()

    async def _discover_missing(self) -> None:
        for key, w in list(self.missing.items()):
            try:
                await self.kube.discover(w.group, w.version, w.kind)
            except NotFound:
                continue
            except Exception:  # noqa: BLE001 - unreachable API server: ApiReachability says so
                return
            del self.missing[key]
            log.info("%s is served now: its objects are reconciled", key)


class ApiReachability:
    """Whether the API server answered recently: ``/readyz`` fails once it has not for ``timeout`` seconds
    (``--api-unreachable-timeout``; 0: never), while ``/healthz`` stays up (the process is fine; restarting
    it would not bring the API server back). One ``GET /version`` at a time, every few seconds.

    An outage is logged once when it starts and once when it ends; when it ends every watch request is
    restarted (``on_recovered``), so that none waits on a connection that died silently meanwhile."""

    def __init__(self, kube: Any, timeout: float, *, clock: Any = time.monotonic,
                 on_recovered: Callable[[], int] | None = None) -> None:
        self.kube = kube
        self.timeout = timeout
        self.period = max(0.5, min(5.0, timeout / 3)) if timeout else 5.0
        self._clock = clock
        self._on_recovered = on_recovered
        self.last_ok = clock()
        self.error = ""
        self._down_since: float | None = None

    def check(self) -> bool | tuple[bool, str]:
        if not self.timeout:
            return True
        silent = self._clock() - self.last_ok
        if silent <= self.timeout:
            return True
        return False, f"API server unreachable for {silent:.0f}s" + (f": {self.error}" if self.error else "")

    def _failed(self, error: str) -> None:
        self.error = error
        if self._down_since is None:
            self._down_since = self.last_ok
            log.warning("API server not answering: %s (checking every %gs)", error, self.period)

    def _answered(self) -> None:
        self.last_ok = self._clock()
        self.error = ""
        if self._down_since is not None:
            restarted = self._on_recovered() if self._on_recovered is not None else 0
            log.warning("API server answers again after %.0fs%s", self.last_ok - self._down_since,
                        f"; restarting {restarted} watch request(s)" if restarted else "")
            self._down_since = None

    async def watch(self) -> None:
        pending: asyncio.Future[Any] | None = None
        while True:
            if pending is None:
                pending = asyncio.ensure_future(self.kube.request(  # a probe: one attempt, no retry
                    "GET", "/version", policy=kube_mod.ONE_ATTEMPT, read_timeout=max(self.period, 5.0)))
            done, _ = await asyncio.wait({pending}, timeout=self.period)
            if not done:
                self._failed("no answer")
                continue  # still waiting for the same request (it has a deadline): never two in flight
            try:
                pending.result()
            except Exception as exc:  # noqa: BLE001 - any failure means "no answer"
                self._failed(str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__)
            else:
                self._answered()
            pending = None
            await asyncio.sleep(self.period)


async def _drain(controllers: list[Controller], timeout: float, force: asyncio.Event | None = None) -> bool:
    """Graceful shutdown: no new runs; runs in flight may finish for ``timeout`` seconds (or until ``force``
    is set: a second signal), then are stopped. False when ``force`` stopped runs."""
    for c in controllers:
        c.queue.pause()
    busy = sum(c.queue.in_flight for c in controllers)
    if busy:
        log.info("shutting down: waiting up to %gs for %d run(s) in flight", timeout, busy)
    stops = [asyncio.create_task(c.queue.stop(cancel_running=False)) for c in controllers]
    if not stops:
        return True
    waiters: list[asyncio.Future[Any]] = [asyncio.ensure_future(asyncio.wait(stops))]
    if force is not None:
        waiters.append(asyncio.ensure_future(force.wait()))
    await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    pending = [task for task in stops if not task.done()]
    forced = force is not None and force.is_set() and bool(pending)
    if pending:
        left = sum(c.queue.in_flight for c in controllers)
        why = "second signal" if forced else f"graceful shutdown timeout ({timeout:g}s) reached"
        log.warning("%s: stopping %d run(s) still in flight", why, left)
        for task in pending:
            task.cancel()  # cancels the queue's workers, which cancels their runs
        await asyncio.gather(*pending, return_exceptions=True)
    for waiter in waiters:
        waiter.cancel()
    await asyncio.gather(*waiters, return_exceptions=True)
    return not forced
