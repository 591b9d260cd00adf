"""Lease-based leader election (``coordination.k8s.io/v1`` Lease), following client-go's ``leaderelection``.

Why it works the way it does:

* **Expiry is judged on our own clock.** Like client-go we never compare the holder's ``renewTime`` with
  our clock (clocks of two pods may disagree by more than a lease). Instead we remember *when we first
  saw* the current record (``observed_time``); the lease is free once ``observed_time +
  leaseDurationSeconds`` has passed without the record changing.
* **Optimistic concurrency.** Every write is a full replace carrying the ``resourceVersion`` we read; a
  409 Conflict means someone else wrote first, and we simply try again next period.
* **We stop before anyone else can start.** A leader that has not renewed successfully for
  ``renew_deadline`` seconds stops leading (``on_stopped_leading`` runs) even if the API server is just
  unreachable. Other candidates wait ``lease_duration`` from when they observed our last renewal, and
  ``renew_deadline < lease_duration`` leaves the gap in between. (This is stricter than client-go, which
  starts counting the deadline one retry period after the last success.)
* **Clean hand-over.** Cancelling ``run()`` releases a held lease (empty ``holderIdentity``,
  ``leaseDurationSeconds: 1``) so a standby takes over in about one retry period instead of a full lease.

The Lease is read and written as raw JSON through :meth:`Kube.request_once
<ansible_operator.kube.Kube.request_once>` (the runner's one client: typed errors, ``rest_client_*``
metrics), one attempt per call, each in a worker thread under a timeout: the election loop's
``retry_period`` is its retry cadence, so the client's retry policy does not apply.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import random
import socket
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Awaitable, Callable, cast
from urllib.parse import quote

from ansible_operator.kube import Conflict, Kube, NotFound, ServerError, TooManyRequests
from ansible_operator.kubetypes import Lease, LeaseSpec

__all__ = ["LeaderElector", "LeaseRecord", "default_identity", "format_micro_time"]

log = logging.getLogger(__name__)

_RELEASE_ATTEMPTS = 5
"""Reads-and-writes tried when releasing the lease, all within ``renew_deadline`` (a conflict is usually our
own renewal in flight; a timeout, a starved API server)."""

Callback = Callable[[], "Awaitable[None] | None"]

JITTER_FACTOR = 1.2
"""client-go's JitterFactor for the acquire loop: candidates do not all hit the API at the same instant."""


def default_identity() -> str:
    """``<hostname>_<uuid4>``: the pod name is the hostname in Kubernetes; the uuid tells restarts apart."""
    return f"{socket.gethostname()}_{uuid.uuid4()}"


def format_micro_time(ts: float) -> str:
    """Kubernetes ``MicroTime``: RFC 3339 with exactly six fractional digits, UTC ``Z``."""
    return datetime.fromtimestamp(ts, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass(frozen=True)
class LeaseRecord:
    """The election-relevant part of a Lease's spec, plus its resourceVersion."""

    holder: str
    lease_duration: float
    acquire_time: str | None
    renew_time: str | None
    transitions: int
    resource_version: str | None

    @classmethod
    def from_lease(cls, lease: Lease) -> "LeaseRecord":
        spec: LeaseSpec = lease.get("spec") or {}
        return cls(
            holder=spec.get("holderIdentity") or "",
            lease_duration=float(spec.get("leaseDurationSeconds") or 0),
            acquire_time=spec.get("acquireTime"),
            renew_time=spec.get("renewTime"),
            transitions=int(spec.get("leaseTransitions") or 0),
            resource_version=(lease.get("metadata") or {}).get("resourceVersion"),
        )

    def same_spec(self, other: "LeaseRecord | None") -> bool:
        """client-go compares the whole record: any renewal changes renewTime, so equality = no progress."""
        return other is not None and (self.holder, self.lease_duration, self.acquire_time, self.renew_time,
                                      self.transitions) == (other.holder, other.lease_duration,
                                                            other.acquire_time, other.renew_time,
                                                            other.transitions)


def _retrieve(future: "asyncio.Future[Any]") -> None:
    """Mark an attempt's outcome as seen: nobody awaits an attempt a cancel or timeout left running."""
    if not future.cancelled():
        future.exception()


def _log_task_failure(task: "asyncio.Future[Any]") -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("on_started_leading failed", exc_info=task.exception())


class LeaderElector:
    """Campaign for a Lease; run ``on_started_leading`` while holding it.

    ``on_started_leading`` may be a plain function or a coroutine function; a coroutine runs as a task
    that is cancelled when leadership ends (so it can be the whole "do the work" body, as in client-go).
    ``on_stopped_leading`` is awaited before ``run()`` returns, and before the lease could expire in other
    candidates' eyes. ``run()`` returns after leadership is lost (the caller should exit or restart, as
    controller-runtime does); cancelling it releases the lease.
    """

    def __init__(
        self,
        kube: Kube,
        *,
        name: str,
        namespace: str,
        identity: str,
        lease_duration: float = 15,
        renew_deadline: float = 10,
        retry_period: float = 2,
        on_started_leading: Callback,
        on_stopped_leading: Callback,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not identity:
            raise ValueError("leader election identity must not be empty")
        if not (0 < retry_period < renew_deadline < lease_duration):
            raise ValueError(
                "leader election needs 0 < retry period < renew deadline < lease duration, got"
                f" retry={retry_period}s renew={renew_deadline}s lease={lease_duration}s")
        self._kube = kube
        self.name = name
        self.namespace = namespace
        self.identity = identity
        self.lease_duration = float(lease_duration)
        self.renew_deadline = float(renew_deadline)
        self.retry_period = float(retry_period)
        self._on_started = on_started_leading
        self._on_stopped = on_stopped_leading
        self._clock = clock
        self._observed: LeaseRecord | None = None
        self._observed_time = 0.0
        self._leading = False
        self._leading_task: asyncio.Task[Any] | None = None
        self._last_success = 0.0
        """Our clock at the *start* of the last successful acquire/renew attempt."""
        self._attempt: asyncio.Future[bool] | None = None
        """The latest acquire/renew attempt's worker-thread future (it outlives a cancelled await)."""

    # ---- public state -------------------------------------------------------------------------------

    @property
    def is_leader(self) -> bool:
        return self._leading

    @property
    def observed_holder(self) -> str | None:
        """Holder of the lease as last seen (for logs and ``/readyz`` reasons)."""
        return self._observed.holder if self._observed else None

    # ---- main loop ----------------------------------------------------------------------------------

    async def run(self) -> None:
        """Acquire, then renew until a renewal misses ``renew_deadline`` (returns) or we are cancelled."""
        try:
            await self._acquire()
            await self._become_leader()
            await self._renew_until_lost()
        except asyncio.CancelledError:
            # An attempt still running in its worker thread may yet make us the holder (the API server has
            # written the Lease, the answer is on its way): settle it first, then release what we hold.
            if self._leading or self._attempt_in_flight() or self._holds_observed():
                release = asyncio.ensure_future(self._settle_and_release())
                while not release.done():
                    try:
                        await asyncio.shield(release)
                    except asyncio.CancelledError:
                        # Cancelled again (a shutdown cancelling what is left): the release is bounded by
                        # renew_deadline, so wait for it rather than exit with the lease still held.
                        continue
            raise
        if self._leading:
            await self._stop_leading("lease lost")

    async def _acquire(self) -> None:
        log.info("waiting for leader election lease %s/%s as %s", self.namespace, self.name, self.identity)
        while True:
            if await self._try_with_timeout(self.retry_period * 2):
                return
            await asyncio.sleep(self.retry_period * (1 + random.random() * (JITTER_FACTOR - 1)))

    async def _become_leader(self) -> None:
        self._leading = True
        log.info("became leader (lease %s/%s, identity %s)", self.namespace, self.name, self.identity)
        result = self._on_started()
        if inspect.isawaitable(result):
            self._leading_task = asyncio.ensure_future(result)
            self._leading_task.add_done_callback(_log_task_failure)

    async def _renew_until_lost(self) -> None:
        """Renew every ``retry_period``; give up once ``renew_deadline`` has passed since the start of the
        last successful renewal (others see that renewal no earlier than that instant)."""
        while True:
            await asyncio.sleep(self.retry_period)
            while True:
                remaining = self._last_success + self.renew_deadline - self._clock()
                if remaining <= 0:
                    log.warning("failed to renew lease %s/%s within %.1fs; stopping leading",
                                self.namespace, self.name, self.renew_deadline)
                    return
                if await self._try_with_timeout(remaining):
                    break
                remaining = self._last_success + self.renew_deadline - self._clock()
                await asyncio.sleep(max(0.0, min(self.retry_period, remaining)))

    async def _try_with_timeout(self, timeout: float) -> bool:
        # The worker thread runs on when the await is cancelled or times out; keep its future (shielded, so
        # a cancel does not mark it done early) for run() to wait on before deciding whether to release.
        attempt = asyncio.get_running_loop().run_in_executor(None, self._try_acquire_or_renew)
        attempt.add_done_callback(_retrieve)
        self._attempt = attempt
        try:
            async with asyncio.timeout(timeout):  # not wait_for: on 3.11 it can swallow a cancel
                return await asyncio.shield(attempt)
        except asyncio.TimeoutError:
            log.warning("lease %s/%s: API call timed out after %.1fs", self.namespace, self.name, timeout)
            return False
        except Exception as exc:  # the API may be down; the loop's deadline decides what that means
            log.warning("lease %s/%s: %s: %s", self.namespace, self.name, type(exc).__name__, exc)
            return False

    # ---- stopping -----------------------------------------------------------------------------------

    async def _stop_leading(self, why: str) -> None:
        self._leading = False
        log.info("stopped leading (%s)", why)
        task, self._leading_task = self._leading_task, None
        if task is not None and not task.done():
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
            except Exception:
                pass  # already logged by _log_task_failure
        result = self._on_stopped()
        if inspect.isawaitable(result):
            await result

    def _attempt_in_flight(self) -> bool:
        return self._attempt is not None and not self._attempt.done()

    def _holds_observed(self) -> bool:
        return self._observed is not None and self._observed.holder == self.identity

    async def _settle_and_release(self) -> None:
        if self._attempt is not None and not self._attempt.done():
            await asyncio.wait({self._attempt}, timeout=self.renew_deadline)
        if self._leading or self._holds_observed():
            await self._release_and_stop()

    async def _release_and_stop(self) -> None:
        try:
            async with asyncio.timeout(self.renew_deadline):
                await asyncio.to_thread(self._release)
        except Exception as exc:
            log.warning("could not release lease %s/%s: %s", self.namespace, self.name, exc)
        if self._leading:
            await self._stop_leading("released")

    # ---- blocking API calls (worker thread) -----------------------------------------------------------

    def _path(self, name: str | None = None) -> str:
        base = f"/apis/coordination.k8s.io/v1/namespaces/{quote(self.namespace, safe='')}/leases"
        return f"{base}/{quote(name, safe='')}" if name else base

    def _call(self, method: str, path: str, body: Lease | None, timeout: float) -> Lease:
        """One request (no retry: the election loop retries), connect and answer within ``timeout``."""
        answer = self._kube.request_once(method, path, body, read_timeout=timeout, connect_timeout=timeout)
        if not isinstance(answer, dict):
            raise ValueError(f"lease {self.namespace}/{self.name}: {method} answered no JSON object")
        return cast(Lease, answer)  # the API server's JSON

    def _get_lease(self, timeout: float) -> Lease:
        return self._call("GET", self._path(self.name), None, timeout)

    def _create_lease(self, lease: Lease, timeout: float) -> Lease:
        return self._call("POST", self._path(), lease, timeout)

    def _replace_lease(self, lease: Lease, timeout: float) -> Lease:
        """A full replace (``PUT``) carrying the ``resourceVersion`` read: 409 when someone wrote since."""
        return self._call("PUT", self._path(self.name), lease, timeout)

    def _read(self, timeout: float | None = None) -> Lease | None:
        try:
            return self._get_lease(timeout or self.retry_period * 2)
        except NotFound:
            return None

    def _spec(self, *, acquire_time: str, now: float, transitions: int, holder: str | None = None,
              duration: float | None = None) -> LeaseSpec:
        return {
            "holderIdentity": self.identity if holder is None else holder,
            "leaseDurationSeconds": max(1, int(round(self.lease_duration if duration is None else duration))),
            "acquireTime": acquire_time,
            "renewTime": format_micro_time(now),
            "leaseTransitions": transitions,
        }

    def _try_acquire_or_renew(self) -> bool:
        """One attempt (client-go ``tryAcquireOrRenew``). True when we hold the lease afterwards."""
        now = self._clock()
        lease = self._read()
        if lease is None:
            body: Lease = {
                "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": self._spec(acquire_time=format_micro_time(now), now=now, transitions=0),
            }
            try:
                created = self._create_lease(body, self.retry_period * 2)
            except Conflict:  # another candidate created it first
                return False
            self._observe(LeaseRecord.from_lease(created), now)
            self._last_success = now
            return True

        record = LeaseRecord.from_lease(lease)
        if not record.same_spec(self._observed):
            self._observe(record, now)
        elif self._observed is not None and record.resource_version != self._observed.resource_version:
            self._observed = record  # same spec, new version (e.g. a label change): keep observed_time
        held_by_other = bool(record.holder) and record.holder != self.identity
        if held_by_other and self._observed_time + record.lease_duration > now:
            return False

        if record.holder == self.identity:
            acquire_time = record.acquire_time or format_micro_time(now)
            transitions = record.transitions
        else:
            acquire_time = format_micro_time(now)
            transitions = record.transitions + 1
        lease["spec"] = {**(lease.get("spec") or {}),
                         **self._spec(acquire_time=acquire_time, now=now, transitions=transitions)}
        try:
            replaced = self._replace_lease(lease, self.retry_period * 2)
        except Conflict:  # somebody wrote since our read; re-read next time
            return False
        self._observe(LeaseRecord.from_lease(replaced), now)
        self._last_success = now
        if held_by_other or not record.holder:
            log.info("acquired lease %s/%s (previous holder %r)", self.namespace, self.name, record.holder)
        return True

    def _observe(self, record: LeaseRecord, now: float) -> None:
        self._observed = record
        self._observed_time = now

    def _release(self) -> None:
        """Give the lease up if we still hold it: empty holder, 1 s duration (client-go ``release``).

        A conflict means the lease changed since our read -- often our own renewal, still in flight in its
        worker thread when ``run()`` was cancelled -- so read again and retry while we are the holder. A slow
        or failed request is retried too, within ``renew_deadline`` (the caller's bound): on a starved
        machine one answer can take longer than a renewal's ``2 x retry_period``, and a lease left held
        makes a successor wait its whole duration."""
        deadline = self._clock() + self.renew_deadline * 0.9
        for _ in range(_RELEASE_ATTEMPTS):
            remaining = deadline - self._clock()
            if remaining <= 0:
                break
            try:
                lease = self._read(timeout=remaining)
                if lease is None:
                    return
                record = LeaseRecord.from_lease(lease)
                if record.holder != self.identity:
                    return
                now = self._clock()
                lease["spec"] = {**(lease.get("spec") or {}),
                                 **self._spec(acquire_time=format_micro_time(now), now=now,
                                              transitions=record.transitions, holder="", duration=1)}
                self._replace_lease(lease, max(0.5, deadline - self._clock()))
            except Conflict:
                continue
            except (ServerError, TooManyRequests, OSError) as exc:
                # a timeout, a reset connection, a 5xx/429: try again while time remains
                log.debug("releasing lease %s/%s: %s; retrying", self.namespace, self.name, exc)
                continue
            log.info("released lease %s/%s", self.namespace, self.name)
            return
        log.warning("could not release lease %s/%s within %.0fs; a successor waits for it to expire",
                    self.namespace, self.name, self.renew_deadline)
