"""Reconcile one object: decide (run, finalize, or nothing), run the role, write the outcome.

Called by the work queue with an object key; never concurrently for the same key. The intake cache
says whether the object is there; each run then reads it from the API (the cache may lag), so a
follow-up run after coalesced edits sees the newest spec and a deletion is never missed.

    key ─► cache ─► API read ─► deleting? ─► finalizer run ─► remove finalizer
                                   └──► ensure finalizer ─► extra vars ─► Running ─► executor run
                                                                          ─► RunResult ─► status + Event
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Mapping, Protocol

from ansible_operator import artifacts, events, extravars, results, status
from ansible_operator.executors.base import Executor, RunOutcome, RunRequest
from ansible_operator.executors.datadir import new_run_id
from ansible_operator.intake import ObjectCache
from ansible_operator.kube import ApiError, Conflict, Kube, NotFound, ResourceRef
from ansible_operator.kubetypes import KubeObject, StatusBody
from ansible_operator.logs import log_context
from ansible_operator.owners.credentials import Credentials
from ansible_operator.queue import ObjectKey, Priority, ReconcileOutcome
from ansible_operator.watches import Watch, annotation_overrides

log = logging.getLogger(__name__)

_STATUS_WRITE_ATTEMPTS = 5
_INTERRUPTED_WRITE_TIMEOUT = 5.0
"""Seconds a stopped run may spend marking its CR `Running=False` (reason `Interrupted`) at shutdown."""
_GONE_REMEMBERED = 10_000


class RunHooks(Protocol):
    """Optional observers of runs (metrics, logs); all methods are cheap and synchronous."""

    def run_started(self, watch_key: str, phase: str) -> None: ...

    def run_finished(self, watch_key: str, phase: str, result: str, duration_s: float) -> None: ...


@dataclass
class Runtime:
    """What every reconciler shares: the API, the executor, where artifacts go, the observers."""

    kube: Kube
    executor: Executor
    artifacts_root: Path
    credentials: Credentials
    run_timeout: float | None = 3600.0
    collections_paths: tuple[Path, ...] = ()
    hooks: list[RunHooks] = field(default_factory=list)
    event_loggers: Callable[[int], Callable[[dict[str, Any]], None]] | None = None
    component: str = "ansible-operator"
    executor_name: str = "runner"
    janitor: artifacts.Janitor | None = None
    """Bounds the artifacts tree (``--max-artifacts-size``); a 1 GiB one when not given."""
    conditions: status.Conditions = status.DEFAULT
    """Which status conditions to write (``--sdk-conditions``, ``--kstatus-conditions``)."""

    def __post_init__(self) -> None:
        if self.janitor is None:
            self.janitor = artifacts.Janitor(self.artifacts_root, artifacts.DEFAULT_MAX_BYTES)


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


class Reconciler:
    """The reconcile function of one watch."""

    def __init__(self, watch: Watch, cache: ObjectCache, runtime: Runtime,
                 resource: ResourceRef | None = None) -> None:
        self.watch = watch
        self.cache = cache
        self.rt = runtime
        self._resource = resource
        self.events = events.EventRecorder(runtime.kube)
        cache.observe_listings(self._listed)
        self._gone: OrderedDict[str, None] = OrderedDict()
        """uids of objects known to be gone: a run of one that ends afterwards removes its artifacts."""
        self._gvk = f"{watch.group}/{watch.version}, Kind={watch.kind}"
        """On each log record of this watch (apimachinery's GroupVersionKind.String(), as the SDK logs it)."""

    @property
    def resource(self) -> ResourceRef:
        assert self._resource is not None, "resolve() first"
        return self._resource

    async def resolve(self) -> ResourceRef:
        """Plural and scope from discovery, once (the CRD may appear after the operator starts)."""
        if self._resource is None:
            w = self.watch
            resource = await self.rt.kube.discover(w.group, w.version, w.kind)
            # once per process, before the first run builds extra vars (and resolved only once they are:
            # a failure here is retried by the next reconcile, never left to a blocking read on the loop)
            await extravars.load_reserved_names(self.rt.executor)
            self._resource = resource
        return self._resource

    # -- entry point -------------------------------------------------------------------------------

    async def __call__(self, key: ObjectKey) -> ReconcileOutcome:
        with log_context(kind=self.watch.kind, namespace=key.namespace, name=key.name, gvk=self._gvk):
            try:
                return await self._reconcile(key)
            except ApiError as exc:
                # An API server restarting, unreachable or refusing: expected, and retried with backoff by
                # the queue (which logs the retry); one line, not a traceback.
                log.warning("API request failed: %s", exc)
                return ReconcileOutcome(failed=True)

    async def _reconcile(self, key: ObjectKey) -> ReconcileOutcome:
        cached = self.cache.get(key)
        if cached is None:
            return ReconcileOutcome()  # deleted meanwhile: nothing to do
        await self.resolve()
        # The cache can lag the API: each watch is its own stream. When the garbage collector deletes a
        # dependent of an owner being deleted in the foreground, the dependent's event may re-queue the
        # owner before the owner's own update (deletionTimestamp) arrives here; a run from the cache would
        # re-create that dependent under an owner that is waiting for it to go. After our finalizer is
        # removed, the same lag would start a second finalizer run (a snapshot, a deregistration). So
        # every run starts from the object as the API has it now (a quorum read).
        obj = await self._confirm(cached)
        if obj is None:  # gone, or gone and re-created: the cache's event for it follows
            log.debug("not running for uid %s: the object is gone", cached["metadata"].get("uid"))
            return ReconcileOutcome()
        meta = obj["metadata"]
        overrides = annotation_overrides(self.watch, meta.get("annotations"))
        for name, value, reason in overrides["invalid"]:
            log.warning("ignoring annotation %s=%r on %s: %s", name, value, key, reason)

        finalizer = self.watch.finalizer
        if meta.get("deletionTimestamp"):
            if not (finalizer and finalizer.name in (meta.get("finalizers") or [])):
                return ReconcileOutcome()
            return await self._finalize(obj, overrides)

        if finalizer and finalizer.name not in (meta.get("finalizers") or []):
            obj = await self._add_finalizer(obj)
            if obj is None:
                return ReconcileOutcome()

        try:
            variables = self._extra_vars(obj)
        except extravars.RefusedVariable as exc:
            return await self._refuse(obj, exc)

        if self.watch.manage_status:
            await self._write_status(obj, lambda cur, gen: status.running_status(
                cur, generation=gen, now=utcnow(), style=self.rt.conditions), fresh=obj)

        try:
            result = await self._run(obj, "reconcile", variables, role=self.watch.role,
                                     playbook=self.watch.playbook,
                                     overrides=overrides)
        except asyncio.CancelledError:
            if self.watch.manage_status:
                await self._interrupted(obj)
            raise
        await self._report(obj, result)
        if self._newer_generation(key, obj):
            # The spec changed during the run: it gets its own run now, whatever this one's outcome (the
            # intake's event normally marks the key dirty too; this holds even if that event was coalesced).
            log.info("generation %s was applied; generation %s arrived meanwhile: running again",
                     obj["metadata"].get("generation"),
                     (self.cache.get(key) or {}).get("metadata", {}).get("generation"))
            return ReconcileOutcome(requeue_after=0.0, priority=Priority.USER)
        if not result.succeeded:
            return ReconcileOutcome(failed=True)
        if result.requeue_after is not None:  # the role asked for it: exactly then
            return ReconcileOutcome(requeue_after=result.requeue_after)
        return ReconcileOutcome(requeue_after=overrides["reconcile_period"], resync=True)

    async def _confirm(self, obj: KubeObject) -> KubeObject | None:
        """``obj`` as the API has it now (a quorum read), if it is still the same object (same uid); None if
        it is gone, or gone and re-created under the same name (then not ours to run for or write to)."""
        meta = obj["metadata"]
        fresh = await self.rt.kube.get(self.resource, meta.get("namespace"), meta["name"])
        if fresh is None or fresh["metadata"].get("uid") != meta.get("uid"):
            return None
        return fresh

    def _newer_generation(self, key: ObjectKey, obj: KubeObject) -> bool:
        latest = self.cache.get(key)
        if latest is None:
            return False
        meta, latest_meta = obj["metadata"], latest["metadata"]
        if latest_meta.get("uid") != meta.get("uid") or latest_meta.get("deletionTimestamp"):
            return bool(latest_meta.get("uid") == meta.get("uid"))  # deletion started: finalizer runs next
        old, new = meta.get("generation"), latest_meta.get("generation")
        return isinstance(old, int) and isinstance(new, int) and new > old

    # -- deletion ----------------------------------------------------------------------------------

    async def _finalize(self, obj: KubeObject, overrides: dict[str, Any]) -> ReconcileOutcome:
        finalizer = self.watch.finalizer
        assert finalizer is not None
        # Operator SDK: a finalizer with only `vars` re-runs the main role/playbook with those vars added.
        role, playbook = finalizer.role, finalizer.playbook
        if role is None and playbook is None:
            role, playbook = self.watch.role, self.watch.playbook
        try:
            variables = self._extra_vars(obj, finalizer.vars)
        except extravars.RefusedVariable as exc:
            return await self._refuse(obj, exc)

        result = await self._run(obj, "finalize", variables, role=role, playbook=playbook,
                                 overrides=overrides)
        # On success the object is about to go: an Event is worth it, a status write is not.
        await self._report(obj, result, phase="finalize", write_status=not result.succeeded)
        if not result.succeeded:
            return ReconcileOutcome(failed=True)
        await self._remove_finalizer(obj, finalizer.name)
        return ReconcileOutcome()

    async def _refuse(self, obj: KubeObject, exc: extravars.RefusedVariable) -> ReconcileOutcome:
        """Input that must never reach Ansible: report it, run nothing, don't retry (an edit re-queues)."""
        log.error("refusing to run: %s", exc)
        if self.watch.manage_status:
            await self._write_status(obj, lambda cur, gen: status.refused_status(
                cur, message=str(exc), generation=gen, now=utcnow(), style=self.rt.conditions))
        await self.events.record(obj, events.refused(obj, str(exc), now=utcnow(),
                                                     component=self.rt.component))
        return ReconcileOutcome()

    async def _report(self, obj: KubeObject, result: results.RunResult, *, phase: str = "reconcile",
                      write_status: bool = True) -> None:
        """The outcome of a run: conditions (with manageStatus) and an Event."""
        if write_status and self.watch.manage_status:
            await self._write_status(obj, lambda cur, gen: status.result_status(
                cur, result, generation=gen, now=utcnow(), style=self.rt.conditions))
        await self.events.record(obj, events.for_result(obj, result, now=utcnow(), phase=phase,
                                                        component=self.rt.component))

    async def _add_finalizer(self, obj: KubeObject) -> KubeObject | None:
        name = self.watch.finalizer.name  # type: ignore[union-attr]
        meta = obj["metadata"]
        finalizers = list(meta.get("finalizers") or []) + [name]
        patch = {"metadata": {"finalizers": finalizers, "resourceVersion": meta["resourceVersion"]}}
        try:
            return await self.rt.kube.merge_patch(self.resource, meta.get("namespace"), meta["name"], patch)
        except NotFound:
            return None
        # Conflict propagates: the queue retries with backoff, by then the cache holds the newer object

    async def _remove_finalizer(self, obj: KubeObject, name: str) -> None:
        meta = obj["metadata"]
        for _ in range(_STATUS_WRITE_ATTEMPTS):
            fresh = await self._confirm(obj)
            if fresh is None:
                return
            current = list(fresh["metadata"].get("finalizers") or [])
            if name not in current:
                return
            patch = {"metadata": {"finalizers": [f for f in current if f != name],
                                  "resourceVersion": fresh["metadata"]["resourceVersion"]}}
            try:
                await self.rt.kube.merge_patch(self.resource, meta.get("namespace"), meta["name"], patch)
            except NotFound:
                return
            except Conflict:
                continue
            log.info("finalizer %s removed: the object can go", name)
            return
        raise RuntimeError(f"could not remove finalizer {name}: the object kept changing")

    # -- the run -----------------------------------------------------------------------------------

    def _extra_vars(self, obj: KubeObject, more_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        watch_vars = dict(self.watch.vars)
        if more_vars:
            watch_vars.update(more_vars)
        return extravars.build_extra_vars(
            obj, watch_vars=watch_vars, snake_case=self.watch.snake_case_parameters,
            mark_unsafe=self.watch.mark_unsafe, group=self.watch.group, kind=self.watch.kind,
        )

    def _object_path(self, obj: KubeObject) -> artifacts.ObjectPath:
        meta = obj["metadata"]
        return artifacts.ObjectPath(self.watch.group, self.watch.version, self.watch.kind,
                                    meta.get("namespace") or None, meta["name"])

    async def _run(self, obj: KubeObject, phase: str, variables: dict[str, Any], *, role: str | None,
                   playbook: Path | None, overrides: dict[str, Any]) -> results.RunResult:
        meta = obj["metadata"]
        object_path = self._object_path(obj)
        run_id = new_run_id()
        run_dir = artifacts.new_run_dir(self.rt.artifacts_root, object_path, run_id)
        janitor = self.rt.janitor
        assert janitor is not None
        janitor.active.add(run_dir)
        try:
            return await self._run_in(run_dir, obj, phase, variables, role=role, playbook=playbook,
                                      overrides=overrides)
        finally:
            janitor.active.discard(run_dir)
            if meta.get("uid") in self._gone:  # deleted while it ran
                janitor.in_background(artifacts.remove_runs_of, self.rt.artifacts_root, object_path,
                                      meta.get("uid"), keep=frozenset(janitor.active))
            janitor.poke()

    async def _run_in(self, run_dir: Path, obj: KubeObject, phase: str, variables: dict[str, Any], *,
                      role: str | None, playbook: Path | None,
                      overrides: dict[str, Any]) -> results.RunResult:
        meta = obj["metadata"]
        run_id = run_dir.name
        verbosity = overrides["ansible_verbosity"]
        started = utcnow()
        record = artifacts.RunRecord(
            run_id=run_id, group=self.watch.group, version=self.watch.version, kind=self.watch.kind,
            namespace=meta.get("namespace"), name=meta["name"], uid=meta.get("uid"),
            generation=meta.get("generation"), phase=phase, executor=self.rt.executor_name,
            started=status.format_time(started), result="running", artifacts_dir=str(run_dir),
        )
        artifacts.write_run(run_dir, record)

        collector = results.ResultCollector()
        log_event = self.rt.event_loggers(verbosity) if self.rt.event_loggers else None

        def on_event(event: dict[str, Any]) -> None:
            collector.feed(event)
            if log_event is not None:
                # Executors call back from the loop but not from this task's context: re-attach the CR.
                with self._run_log_context(obj, run_id):
                    try:
                        log_event(event)
                    except Exception:  # logging must never break a run
                        log.debug("event logger failed", exc_info=True)

        envvars = dict(self.rt.credentials.envvars_for(obj, run_dir))
        request = RunRequest(
            run_id=run_id, private_data_dir=run_dir, extra_vars=variables, playbook=playbook, role=role,
            verbosity=verbosity, timeout=self.rt.run_timeout, envvars=envvars,
            roles_path=tuple(self.watch.roles_paths),
            collections_path=tuple(self.watch.collections_paths) + tuple(self.rt.collections_paths),
        )
        for hook in self.rt.hooks:
            hook.run_started(self.watch.key, phase)
        log.info("%s run %s started (generation %s, uid %s)", phase, run_id, meta.get("generation"),
                 meta.get("uid"))
        try:
            with log_context(run_id=run_id):
                outcome = await self.rt.executor.run(request, on_event)
        except asyncio.CancelledError:
            artifacts.write_run(run_dir, replace(record, result="canceled",
                                                 finished=status.format_time(utcnow())))
            raise
        except Exception as exc:  # an executor bug must become a failed run, not a dead worker
            log.exception("executor failed")
            outcome = RunOutcome(status="error", rc=None, artifacts_dir=run_dir,
                                 error=f"executor error: {exc}")
        finally:
            self.rt.credentials.release(run_dir)
            flush = getattr(log_event, "flush", None)  # $ANSIBLE_DEBUG_LOGS: output of a run without stats
            if flush is not None:
                with self._run_log_context(obj, run_id):
                    flush()

        result = collector.finish(outcome)
        self._ended(run_dir, obj, record, result, started, overrides)
        return result

    def _run_log_context(self, obj: KubeObject, run_id: str) -> AbstractContextManager[Mapping[str, Any]]:
        meta = obj["metadata"]
        return log_context(kind=self.watch.kind, gvk=self._gvk, namespace=meta.get("namespace"),
                           name=meta["name"], run_id=run_id)

    def _ended(self, run_dir: Path, obj: KubeObject, record: artifacts.RunRecord,
               result: results.RunResult, started: datetime, overrides: dict[str, Any]) -> None:
        """After a run: hooks, the final ``run.json``, private files, pruning, the log line."""
        finished = utcnow()
        duration = (finished - started).total_seconds()
        phase, run_id = record.phase or "reconcile", record.run_id
        for hook in self.rt.hooks:
            hook.run_finished(self.watch.key, phase, result.status, duration)
        failed = result.failed_task
        artifacts.write_run(run_dir, replace(
            record, finished=status.format_time(finished), duration_s=round(duration, 3),
            result=result.status,
            stats={k: getattr(result, k) for k in ("ok", "changed", "skipped", "failures", "unreachable",
                                                   "rescued", "ignored")},
            failed_task=(None if failed is None else artifacts.FailedTaskRecord(
                name=failed.name, action=failed.action, role=failed.role, message=failed.message,
                host=failed.host)),
            changed_tasks=list(result.changed_tasks), error=result.error,
        ))
        artifacts.make_private(run_dir)
        artifacts.prune_runs(artifacts.object_dir(self.rt.artifacts_root, self._object_path(obj)),
                             keep=overrides["max_runner_artifacts"])
        if result.succeeded:
            log.info("%s run %s succeeded in %.1fs (ok=%d changed=%d)", phase, run_id, duration, result.ok,
                     result.changed)
        else:
            reason = failed.message if failed else (result.error or result.status)
            log.warning("%s run %s %s in %.1fs: %s", phase, run_id, result.status, duration, reason)

    # -- writing the outcome -----------------------------------------------------------------------

    async def _interrupted(self, obj: KubeObject) -> None:
        """The run was stopped (shutdown): say so in ``Running`` rather than leave ``Running=True`` with
        nobody running. Best effort, for at most :data:`_INTERRUPTED_WRITE_TIMEOUT` seconds."""
        message = "the operator stopped during the run; the next start runs it again"
        try:
            async with asyncio.timeout(_INTERRUPTED_WRITE_TIMEOUT):
                await self._write_status(obj, lambda cur, gen: status.interrupted_status(
                    cur, message=message, generation=gen, now=utcnow(), style=self.rt.conditions))
        except Exception as exc:  # noqa: BLE001 - unreachable, timed out: the restart re-runs it anyway
            log.info("could not mark the interrupted run in status: %s", exc or type(exc).__name__)

    async def _write_status(self, obj: KubeObject,
                            build: Callable[[dict[str, Any] | None, int | None], StatusBody],
                            *, fresh: KubeObject | None = None) -> None:
        """Read the object fresh (roles may have written status meanwhile), build, write; retry on conflict.

        ``build`` gets the fresh status and the generation of ``obj`` (the object the run used); ``fresh``:
        a body just read from the API, which saves the first read."""
        meta = obj["metadata"]
        namespace, name = meta.get("namespace"), meta["name"]
        for attempt in range(_STATUS_WRITE_ATTEMPTS):
            if fresh is None or attempt:
                fresh = await self._confirm(obj)
            if fresh is None:
                return
            fresh_meta = fresh["metadata"]
            # observedGeneration is the generation the run's extra vars came from, never the (maybe newer)
            # one read back here: a newer spec is not applied until its own run says so.
            new_status = build(fresh.get("status"), meta.get("generation"))
            patch = {"metadata": {"resourceVersion": fresh_meta["resourceVersion"]}, "status": new_status}
            try:
                await self.rt.kube.merge_patch(self.resource, namespace, name, patch, subresource="status")
                return
            except Conflict:
                continue
            except NotFound:
                if attempt != 0:
                    raise
            # Status subresource not enabled for this CRD: write through the main resource.
            try:
                await self.rt.kube.merge_patch(self.resource, namespace, name, patch)
                return
            except Conflict:
                continue
            except NotFound:
                return
        log.warning("gave up writing status of %s/%s after %d conflicts", namespace, name,
                    _STATUS_WRITE_ATTEMPTS)

    def _listed(self, namespace: str | None, present: frozenset[tuple[ObjectKey, str | None]]) -> None:
        """A complete listing: runs of objects it does not hold (deleted while the operator was down, or
        during a watch gap) are removed; runs that started after the listing are never touched."""
        janitor = self.rt.janitor
        assert janitor is not None
        kind_dir = artifacts.object_dir(self.rt.artifacts_root, artifacts.ObjectPath(
            self.watch.group, self.watch.version, self.watch.kind, namespace, "_")).parent
        if namespace is None:
            kind_dir = kind_dir.parent
        janitor.in_background(artifacts.remove_absent, self.rt.artifacts_root, kind_dir,
                              {(k.namespace, k.name, uid) for k, uid in present},
                              before=new_run_id()[:16], keep=frozenset(janitor.active))

    def forget(self, key: ObjectKey, old: KubeObject | None = None) -> None:
        """The object is gone (``old``: its last body): drop what we remember about it, and its run
        artifacts; a run of it still in progress removes its own when it ends."""
        self.events.forget(key)
        if old is None:
            return
        uid = (old.get("metadata") or {}).get("uid")
        if uid:
            self._gone[uid] = None
            while len(self._gone) > _GONE_REMEMBERED:
                self._gone.popitem(last=False)
        janitor = self.rt.janitor
        assert janitor is not None
        janitor.in_background(artifacts.remove_runs_of, self.rt.artifacts_root, self._object_path(old), uid,
                              keep=frozenset(janitor.active))
