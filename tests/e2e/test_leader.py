"""Lease leader election against the API server (the shared real control plane, in a namespace of this
module's; or a sandbox), with short durations (lease 3 s, renew 2 s, retry 0.25 s) so hand-overs take a
couple of seconds."""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
from pathlib import Path
from typing import Any, AsyncIterator, Iterator

import kubernetes
import pytest

from ansible_operator import kube as kube_mod
from ansible_operator.leader import LeaderElector, format_micro_time
from ansible_operator_sandbox import Sandbox
from tests import kube

LEASE = "op-lock"
LEASE_S, RENEW_S, RETRY_S = 3.0, 2.0, 0.25
pytestmark = pytest.mark.e2e

MICRO_TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str]]:
    """(kubeconfig, namespace of the Leases)."""
    if kube.real():
        shared = kube.shared()
        try:
            yield shared.kubeconfig, shared.namespace("leader")
        finally:
            shared.cleanup()
        return
    sandbox = Sandbox(host="127.0.0.1", port=0, simulate=False)
    sandbox.start_in_thread()
    try:
        yield sandbox.write_kubeconfig(tmp_path_factory.mktemp("leader") / "kubeconfig"), "default"
    finally:
        sandbox.stop_thread()


@pytest.fixture
def kubeconfig(server: tuple[Path, str]) -> Path:
    return server[0]


@pytest.fixture
def ns(server: tuple[Path, str]) -> str:
    return server[1]


def _client(kubeconfig: Path) -> kubernetes.client.ApiClient:
    configuration = kubernetes.client.Configuration()
    kubernetes.config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
    return kubernetes.client.ApiClient(configuration)


def _kube(kubeconfig: Path) -> kube_mod.Kube:
    return kube_mod.Kube(kube_mod.load_client_config(kubeconfig))


class Candidate:
    """One LeaderElector with its own ApiClient, recording start/stop times on a shared timeline."""

    def __init__(self, kubeconfig: Path, ns: str, identity: str, timeline: list[tuple[float, str, str]],
                 lease: str, lease_duration: float = LEASE_S, renew_deadline: float = RENEW_S) -> None:
        self.identity = identity
        self.client = _kube(kubeconfig)
        self.timeline = timeline
        self.elector = LeaderElector(
            self.client, name=lease, namespace=ns, identity=identity, lease_duration=lease_duration,
            renew_deadline=renew_deadline, retry_period=RETRY_S,
            on_started_leading=lambda: self._mark("start"), on_stopped_leading=self._stopped)
        self.task: asyncio.Task[None] | None = None

    def _mark(self, what: str) -> None:
        self.timeline.append((time.monotonic(), self.identity, what))

    async def _stopped(self) -> None:
        self._mark("stop")

    def start(self) -> None:
        self.task = asyncio.create_task(self.elector.run(), name=self.identity)

    async def cancel(self) -> None:
        if self.task is not None and not self.task.done():
            self.task.cancel()
            try:
                await self.task
            except asyncio.CancelledError:
                pass

    def close(self) -> None:
        self.client.close()


@pytest.fixture
async def candidates(kubeconfig: Path, ns: str, request: pytest.FixtureRequest) -> AsyncIterator[Any]:
    timeline: list[tuple[float, str, str]] = []
    made: list[Candidate] = []
    lease = f"{LEASE}-{request.node.name.replace('_', '-')[:40]}"

    def make(identity: str, **timings: float) -> Candidate:
        c = Candidate(kubeconfig, ns, identity, timeline, lease, **timings)
        made.append(c)
        return c

    make.timeline = timeline  # type: ignore[attr-defined]
    make.lease = lease  # type: ignore[attr-defined]
    yield make
    for c in made:
        await c.cancel()
        c.close()


def read_lease(kubeconfig: Path, ns: str, name: str) -> dict[str, Any]:
    client = _client(kubeconfig)
    try:
        resp = kubernetes.client.CoordinationV1Api(client).read_namespaced_lease(name, ns,
                                                                                 _preload_content=False)
        return json.loads(resp.data)  # raw, so MicroTime strings are checked as the server stores them
    finally:
        client.close()


async def wait_until(predicate: Any, timeout: float, what: str) -> None:
    """Poll ``predicate`` in a thread: some read the Lease over HTTP, which must not block the loop the
    electors renew on (a loaded machine then misses the renew deadline because of the test itself)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if await asyncio.to_thread(predicate):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


async def test_exactly_one_leads_and_handover_on_cancel(candidates: Any, kubeconfig: Path, ns: str) -> None:
    a, b = candidates("a"), candidates("b")
    a.start()
    b.start()
    await wait_until(lambda: a.elector.is_leader or b.elector.is_leader, 10, "a leader")
    # Over several renew periods, never two leaders and never a change of leader.
    first = a if a.elector.is_leader else b
    other = b if first is a else a
    for _ in range(20):
        assert first.elector.is_leader and not other.elector.is_leader
        await asyncio.sleep(RETRY_S / 2)
    lease = read_lease(kubeconfig, ns, candidates.lease)
    spec = lease["spec"]
    assert spec["holderIdentity"] == first.identity
    assert spec["leaseDurationSeconds"] == 3 and spec["leaseTransitions"] == 0
    assert MICRO_TIME.match(spec["renewTime"]) and MICRO_TIME.match(spec["acquireTime"])

    await first.cancel()  # releases the lease
    # the stand-by may already have taken over by the time this test runs again (a starved test process):
    # what matters is that it started only after the first one stopped
    timeline = [(who, what) for _, who, what in candidates.timeline]
    assert timeline[:2] == [(first.identity, "start"), (first.identity, "stop")]
    assert timeline[2:] in ([], [(other.identity, "start")])
    released = read_lease(kubeconfig, ns, candidates.lease)["spec"]
    assert released["holderIdentity"] in ("", None) or released["holderIdentity"] == other.identity
    await wait_until(lambda: other.elector.is_leader, LEASE_S + 4 * RETRY_S, "the standby to take over")
    spec = read_lease(kubeconfig, ns, candidates.lease)["spec"]
    assert spec["holderIdentity"] == other.identity
    assert spec["leaseTransitions"] == 1


async def test_takeover_after_leader_vanishes_without_release(candidates: Any, kubeconfig: Path,
                                                               ns: str) -> None:
    """A leader that dies silently (no release) is replaced once the lease expires on the standby's clock."""
    a = candidates("a")
    a.start()
    await wait_until(lambda: a.elector.is_leader, 10, "a to lead")
    # Simulate a crash: stop the task without running its release path.
    a.elector._release = lambda: None  # type: ignore[method-assign]
    await a.cancel()
    b = candidates("b")
    b.start()
    t0 = time.monotonic()
    await wait_until(lambda: b.elector.is_leader, LEASE_S + 2.0, "b to take over an expired lease")
    # b first saw a's last renewal when it started, so it must have waited about a lease duration.
    assert time.monotonic() - t0 >= LEASE_S - RETRY_S
    spec = read_lease(kubeconfig, ns, candidates.lease)["spec"]
    assert spec["holderIdentity"] == "b" and spec["leaseTransitions"] == 1


async def test_leader_that_cannot_renew_stops_before_other_acquires(
    candidates: Any, kubeconfig: Path, ns: str
) -> None:
    a = candidates("a")
    a.start()
    await wait_until(lambda: a.elector.is_leader, 10, "a to lead")
    b = candidates("b")
    b.start()
    await asyncio.sleep(3 * RETRY_S)
    assert not b.elector.is_leader

    def unreachable(*_args: Any, **_kwargs: Any) -> Any:
        raise ConnectionError("API server unreachable (injected)")

    a.elector._get_lease = unreachable  # type: ignore[method-assign]
    a.elector._replace_lease = unreachable  # type: ignore[method-assign]

    await wait_until(lambda: b.elector.is_leader, LEASE_S + RENEW_S + 2.0, "b to take over")
    assert a.task is not None and a.task.done() and a.task.exception() is None  # run() returned
    assert not a.elector.is_leader
    events = [(who, what) for _, who, what in candidates.timeline]
    assert events == [("a", "start"), ("a", "stop"), ("b", "start")]
    (t_stop,) = [t for t, who, what in candidates.timeline if (who, what) == ("a", "stop")]
    (t_start,) = [t for t, who, what in candidates.timeline if (who, what) == ("b", "start")]
    assert t_stop < t_start
    assert read_lease(kubeconfig, ns, candidates.lease)["spec"]["leaseTransitions"] == 1


async def test_conflicting_writes_are_retried(candidates: Any, kubeconfig: Path, ns: str) -> None:
    """Someone else rewrites the lease (new resourceVersion) between our read and write: we get 409,
    do not crash, and keep leading after re-reading."""
    a = candidates("a")
    a.start()
    await wait_until(lambda: a.elector.is_leader, 10, "a to lead")
    real_replace = a.elector._replace_lease
    conflicts = 0

    def replace_with_conflict(lease: dict[str, Any], timeout: float) -> Any:
        nonlocal conflicts
        if conflicts < 2:
            conflicts += 1
            raise kube_mod.Conflict(409, "Conflict", "the object has been modified")
        return real_replace(lease, timeout)

    a.elector._replace_lease = replace_with_conflict  # type: ignore[method-assign]
    await wait_until(lambda: conflicts == 2, 5, "two conflicts")
    lease = await asyncio.to_thread(read_lease, kubeconfig, ns, candidates.lease)
    renewed_before = lease["spec"]["renewTime"]
    await wait_until(
        lambda: read_lease(kubeconfig, ns, candidates.lease)["spec"]["renewTime"] != renewed_before,
        10, "a renewal after the conflicts")
    assert a.elector.is_leader


def test_invalid_timings_are_refused(kubeconfig: Path, ns: str) -> None:
    client = _kube(kubeconfig)
    try:
        with pytest.raises(ValueError, match="retry period < renew deadline < lease duration"):
            LeaderElector(client, name="x", namespace=ns, identity="i", lease_duration=5, renew_deadline=5,
                          retry_period=1, on_started_leading=lambda: None, on_stopped_leading=lambda: None)
    finally:
        client.close()


def test_micro_time_format() -> None:
    assert format_micro_time(0) == "1970-01-01T00:00:00.000000Z"
    assert format_micro_time(1.5) == "1970-01-01T00:00:01.500000Z"


async def test_coroutine_work_runs_while_leading_and_is_cancelled(kubeconfig: Path, ns: str) -> None:
    """An async on_started_leading is the "work" body (client-go style): it runs as a task while we lead
    and is cancelled before on_stopped_leading runs."""
    order: list[str] = []
    working = asyncio.Event()

    async def work() -> None:
        working.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            order.append("work cancelled")
            raise

    client = _kube(kubeconfig)
    elector = LeaderElector(client, name="coro-lock", namespace=ns, identity="c", lease_duration=LEASE_S,
                            renew_deadline=RENEW_S, retry_period=RETRY_S, on_started_leading=work,
                            on_stopped_leading=lambda: order.append("stopped"))
    task = asyncio.create_task(elector.run())
    try:
        await asyncio.wait_for(working.wait(), 10)
        assert elector.is_leader
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        client.close()
    assert order == ["work cancelled", "stopped"]
    assert read_lease(kubeconfig, ns, "coro-lock")["spec"]["holderIdentity"] in ("", None)


async def test_release_retries_when_the_lease_changed_since_its_read(candidates: Any,
                                                                     kubeconfig: Path, ns: str) -> None:
    """A release whose read is stale (our own renewal landed in between, say) gets a 409; it reads again and
    releases, instead of leaving the lease held until it expires (a standby would wait a lease duration).
    A patient lease: the test needs renewals, and a 2 s renew deadline was missed on a starved CI machine
    (both cores taken by hogs beside the stages), which ended ``a``'s leading before any renewal; the holder
    left empty below is then a release, not an expiry."""
    a = candidates("a", lease_duration=30.0, renew_deadline=20.0)
    a.start()
    await wait_until(lambda: a.elector.is_leader, 10, "a leader")
    stale = read_lease(kubeconfig, ns, candidates.lease)
    await wait_until(lambda: read_lease(kubeconfig, ns, candidates.lease)["metadata"]["resourceVersion"]
                     != stale["metadata"]["resourceVersion"], 10, "a renewal after the stale read")
    real_read = a.elector._read
    reads: list[int] = []

    def first_read_stale(timeout: float | None = None) -> Any:
        reads.append(1)
        return json.loads(json.dumps(stale)) if len(reads) == 1 else real_read(timeout)

    a.elector._read = first_read_stale  # type: ignore[method-assign]
    await a.cancel()
    assert len(reads) >= 2
    assert read_lease(kubeconfig, ns, candidates.lease)["spec"].get("holderIdentity") in ("", None)


async def test_release_retries_a_slow_or_failed_request(candidates: Any, kubeconfig: Path, ns: str) -> None:
    """On a starved machine one answer can take longer than a renewal's timeout: the release tries again
    within renew_deadline instead of leaving the lease held until it expires."""
    a = candidates("a")
    a.start()
    await wait_until(lambda: a.elector.is_leader, 10, "a leader")
    real_read = a.elector._read
    reads: list[int] = []

    def first_read_times_out(timeout: float | None = None) -> Any:
        reads.append(1)
        if len(reads) == 1:
            raise kube_mod.ServerError(0, "ServiceUnavailable", "GET /lease: read timed out")
        return real_read(timeout)

    a.elector._read = first_read_times_out  # type: ignore[method-assign]
    await a.cancel()
    assert len(reads) >= 2
    assert read_lease(kubeconfig, ns, candidates.lease)["spec"].get("holderIdentity") in ("", None)


async def test_a_cancel_landing_as_a_renewal_returns_is_not_swallowed(candidates: Any,
                                                                     kubeconfig: Path, ns: str) -> None:
    """The cancel (shutdown) arrives in the instant a renewal's worker thread has finished but the elector has
    not resumed yet. On Python 3.11, ``asyncio.wait_for`` returned the result then and dropped the cancel: the
    elector went on renewing and the shutdown awaiting it hung (seen under CPU contention as a 300 s teardown
    timeout of test_conflicting_writes_are_retried). The window is a few event-loop callbacks wide, so the
    renewal's thread schedules the cancel 0, 1, ... 5 callbacks after it returns: each lands in turn."""
    loop = asyncio.get_running_loop()

    def cancel_after(task: asyncio.Task[None], hops: int) -> None:
        if hops == 0:
            task.cancel()
        else:
            loop.call_soon(cancel_after, task, hops - 1)

    async def lead_then_cancel(hops: int) -> None:
        c = candidates(f"c{hops}")
        c.start()
        await wait_until(lambda: c.elector.is_leader, 10, f"c{hops} to lead")
        real_renew = c.elector._try_acquire_or_renew
        fired = asyncio.Event()

        def renew_then_cancel() -> bool:
            result = real_renew()
            if not fired.is_set():
                loop.call_soon_threadsafe(fired.set)
                loop.call_soon_threadsafe(cancel_after, c.task, hops)
            return bool(result)

        c.elector._try_acquire_or_renew = renew_then_cancel
        await asyncio.wait_for(fired.wait(), 10)
        done, _ = await asyncio.wait({c.task}, timeout=10)
        assert done, f"the elector swallowed a cancel landing {hops} callbacks late and is still renewing"
        assert c.task.cancelled()
        assert not read_lease(kubeconfig, ns, candidates.lease)["spec"].get("holderIdentity")  # it released

    for hops in range(6):
        await lead_then_cancel(hops)


async def test_a_cancel_while_the_first_acquire_is_in_flight_still_releases(
        candidates: Any, kubeconfig: Path, ns: str) -> None:
    """SIGTERM right after start: the cancel lands while the first acquire's worker thread waits for the API
    server's answer. The server has written the Lease with us as holder, the elector does not know yet: it
    must wait for that attempt and release, not exit with the Lease held (seen beside CPU hogs in
    test_idle_sigterm_to_the_process_group_exits_0_and_releases_the_lease: the successor waits a whole
    lease duration)."""
    c = candidates("early")
    real_create = c.elector._create_lease
    written = threading.Event()
    answer = threading.Event()

    def create_with_a_slow_answer(*args: Any, **kwargs: Any) -> Any:
        created = real_create(*args, **kwargs)  # the server has written the Lease ...
        written.set()
        answer.wait(10)  # ... and its answer reaches the elector only after the cancel
        return created

    c.elector._create_lease = create_with_a_slow_answer  # type: ignore[method-assign]
    c.start()
    assert await asyncio.to_thread(written.wait, 10)
    assert read_lease(kubeconfig, ns, candidates.lease)["spec"].get("holderIdentity") == "early"
    assert c.task is not None
    c.task.cancel()
    await asyncio.sleep(0.2)  # the cancel has reached run() while the attempt is still in its thread
    answer.set()
    done, _ = await asyncio.wait({c.task}, timeout=10)
    assert done and c.task.cancelled()
    assert not read_lease(kubeconfig, ns, candidates.lease)["spec"].get("holderIdentity")
