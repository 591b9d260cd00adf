"""The one retry policy of the runner's own API requests (issue 23): ``Kube.request`` against a scripted local
HTTP server, so that urllib3 and the ``kubernetes`` client run for real (their own retries must be off)."""

from __future__ import annotations

import asyncio
import http.server
import json
import logging
import socket
import threading
import time
from typing import Any, Iterator

import kubernetes
import pytest
import urllib3

from ansible_operator import kube

FAST = kube.RequestPolicy(backoff=0.01, max_backoff=0.02, jitter=0.0, read_timeout=2.0, connect_timeout=2.0)

Answer = tuple[int, dict[str, str]] | str
"""(status, headers) to answer with, "drop" (close the connection without an answer), or "hang" (answer
nothing until the server's ``hold`` event is set, then close: a blackholed connection)."""


class Script(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.answers: list[Answer] = []
        self.seen: list[tuple[str, str]] = []


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Script

    def log_message(self, *_: Any) -> None:
        pass

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        self.server.seen.append((self.command, self.path))
        answer = self.server.answers.pop(0) if self.server.answers else (200, {})
        if answer == "hang":
            self.server.hold.wait(30)  # type: ignore[attr-defined]
        if isinstance(answer, str):  # "drop", or "hang" once held
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        status, headers = answer
        if 200 <= status < 300:
            body = json.dumps({"kind": "Thing", "n": len(self.server.seen)}).encode()
        else:
            status_doc = {"kind": "Status", "reason": "Scripted", "message": f"answer {status}"}
            body = json.dumps(status_doc).encode()
        self.send_response(status)
        for name, value in {"Content-Type": "application/json", **headers}.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _answer


@pytest.fixture
def server() -> Iterator[Script]:
    script = Script()
    thread = threading.Thread(target=script.serve_forever, daemon=True)
    thread.start()
    try:
        yield script
    finally:
        script.shutdown()
        script.server_close()


def _kube(port: int, policy: kube.RequestPolicy = FAST) -> kube.Kube:
    configuration = kubernetes.client.Configuration()
    configuration.host = f"http://127.0.0.1:{port}"
    return kube.Kube(configuration, policy)


def _records(caplog: pytest.LogCaptureFixture, level: int) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "ansible_operator.kube" and r.levelno == level]


def _urllib3(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name.startswith("urllib3")]


async def test_an_idempotent_request_is_retried_after_5xx_with_one_debug_record_each(
        server: Script, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    server.answers = [(503, {}), (500, {}), (200, {})]
    k = _kube(server.server_address[1])
    try:
        assert await k.request("GET", "/api/v1/things") == {"kind": "Thing", "n": 3}
    finally:
        k.close()
    assert server.seen == [("GET", "/api/v1/things")] * 3
    retries = _records(caplog, logging.DEBUG)
    assert [(r.method, r.path, r.attempt, r.status) for r in retries] == [  # type: ignore[attr-defined]
        ("GET", "/api/v1/things", 1, 503), ("GET", "/api/v1/things", 2, 500)]
    assert retries[0].cause == "503 Scripted: answer 503"  # type: ignore[attr-defined]
    assert not _records(caplog, logging.WARNING)


async def test_giving_up_is_the_typed_error_saying_how_long_it_tried(
        server: Script, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    server.answers = [(503, {})] * 10
    k = _kube(server.server_address[1])
    try:
        with pytest.raises(kube.ServerError, match=r"answer 503 \(gave up after 4 attempts in [0-9.]+s\)"):
            await k.request("PUT", "/api/v1/things/a", body={"a": 1})
    finally:
        k.close()
    assert len(server.seen) == 1 + FAST.retries
    assert not _records(caplog, logging.WARNING)  # the caller logs the error, once
    debug = _records(caplog, logging.DEBUG)
    assert len(debug) == FAST.retries + 1 and debug[-1].attempt == 4  # type: ignore[attr-defined]
    assert "giving up after 4 attempts" in debug[-1].getMessage()


async def test_a_post_that_reached_the_server_is_never_sent_again(server: Script,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    k = _kube(server.server_address[1])
    try:
        server.answers = [(503, {}), (200, {})]
        with pytest.raises(kube.ServerError):
            await k.request("POST", "/api/v1/namespaces/n/events", body={})
        server.answers = ["drop", (200, {})]
        with pytest.raises(kube.ServerError) as dropped:
            await k.request("POST", "/api/v1/namespaces/n/events", body={})
        assert type(dropped.value) is kube.ServerError and dropped.value.status == 0
        assert "HTTPConnectionPool" not in dropped.value.message  # urllib3's wrapping is not the message
    finally:
        k.close()
    assert len(server.seen) == 2
    assert not _records(caplog, logging.WARNING) and not _urllib3(caplog)


async def test_a_dropped_connection_is_retried_for_an_idempotent_request(
        server: Script, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    server.answers = ["drop", (200, {})]
    k = _kube(server.server_address[1])
    try:
        assert (await k.request("GET", "/version"))["n"] == 2
    finally:
        k.close()
    assert not [m for m in _urllib3(caplog) if "Retrying" in m]  # urllib3's own retry is off
    (retry,) = _records(caplog, logging.DEBUG)
    assert retry.status == 0 and retry.attempt == 1  # type: ignore[attr-defined]


async def test_a_merge_patch_is_idempotent_other_patches_are_not(server: Script) -> None:
    k = _kube(server.server_address[1])
    try:
        server.answers = [(500, {}), (200, {})]
        await k.request("PATCH", "/x", body={"a": 1}, content_type=kube.MERGE_PATCH)
        assert len(server.seen) == 2
        server.answers = [(500, {}), (200, {})]
        with pytest.raises(kube.ServerError):
            await k.request("PATCH", "/x", body=[{"op": "add"}], content_type="application/json-patch+json")
        assert len(server.seen) == 3
    finally:
        k.close()


async def test_429_with_retry_after_is_waited_out_whatever_the_verb(server: Script) -> None:
    server.answers = [(429, {"Retry-After": "0"}), (429, {"Retry-After": "0"}), (201, {})]
    k = _kube(server.server_address[1])
    try:
        assert (await k.request("POST", "/api/v1/namespaces/n/events", body={}))["n"] == 3
        server.answers = [(429, {})]  # no Retry-After: a POST is not sent again
        with pytest.raises(kube.TooManyRequests):
            await k.request("POST", "/api/v1/namespaces/n/events", body={})
    finally:
        k.close()
    assert len(server.seen) == 4


async def test_nothing_sent_is_retried_whatever_the_verb(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    k = _kube(port)
    try:
        with pytest.raises(kube.ConnectFailed, match="cannot connect") as exc:
            await k.request("POST", "/api/v1/namespaces/n/events", body={})
    finally:
        k.close()
    assert exc.value.status == 0 and "HTTPConnection(" not in exc.value.message
    assert len(_records(caplog, logging.DEBUG)) == FAST.retries + 1  # each retry, and giving up
    assert not _records(caplog, logging.WARNING) and not _urllib3(caplog)


async def test_one_attempt_and_the_deadline_bound_the_retries(server: Script,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    k = _kube(server.server_address[1])
    try:
        server.answers = [(503, {})] * 10
        with pytest.raises(kube.ServerError):
            await k.request("GET", "/version", policy=kube.ONE_ATTEMPT)
        assert len(server.seen) == 1
        with pytest.raises(kube.ServerError):
            await k.request("GET", "/version", policy=kube.RequestPolicy(give_up_after=0.0))
        assert len(server.seen) == 2
    finally:
        k.close()
    assert not _records(caplog, logging.WARNING)  # a single attempt is the caller's to report


def test_the_policy_backs_off_exponentially_with_bounded_jitter() -> None:
    policy = kube.RequestPolicy(backoff=0.5, max_backoff=5.0, jitter=0.5)
    for retry, base in ((1, 0.5), (2, 1.0), (3, 2.0), (5, 5.0), (9, 5.0)):
        assert base <= policy.backoff_delay(retry) <= base * 1.5
    assert policy.idempotent("get", None) and policy.idempotent("PATCH", kube.MERGE_PATCH)
    assert not policy.idempotent("POST", None) and not policy.idempotent("PATCH", None)


def test_no_answer_causes_are_one_line_without_urllib3_wrapping() -> None:
    refused = urllib3.exceptions.NewConnectionError(
        urllib3.connection.HTTPSConnection("10.0.0.1", 6443),
        "Failed to establish a new connection: [Errno 111] Connection refused")
    assert kube.no_answer_cause(refused) == "cannot connect: [Errno 111] Connection refused"
    aborted = urllib3.exceptions.ProtocolError("Connection aborted.", ConnectionResetError(104, "reset"))
    wrapped = urllib3.exceptions.MaxRetryError(None, "/x", aborted)  # type: ignore[arg-type]
    assert kube.no_answer_cause(wrapped) == "connection aborted: [Errno 104] reset"


async def test_a_reset_abandons_an_idempotent_attempt_on_a_dead_connection(server: Script) -> None:
    """After an outage the connection of an attempt in flight may never answer (a blackhole): the reset the
    reachability probe makes on recovery sends a GET again on a new connection at once, instead of after
    the read timeout; a POST is waited for (it may have arrived)."""
    hold = threading.Event()
    server.answers = ["hang"]
    server.hold = hold  # type: ignore[attr-defined]
    k = _kube(server.server_address[1], kube.RequestPolicy(read_timeout=30.0, backoff=0.01, jitter=0.0))
    try:
        pending = asyncio.ensure_future(k.request("GET", "/api/v1/things/a"))
        await _until(lambda: len(server.seen) == 1)
        started = time.monotonic()
        k.reset_connections()
        answer = await asyncio.wait_for(pending, 10)
        assert answer["n"] == 2 and time.monotonic() - started < 10
        assert server.seen == [("GET", "/api/v1/things/a")] * 2
        server.answers = ["hang"]
        posted = asyncio.ensure_future(k.request("POST", "/api/v1/things", body={}))
        await _until(lambda: len(server.seen) == 3)
        k.reset_connections()
        await asyncio.sleep(0.3)
        assert not posted.done()  # still waiting for its own answer
        hold.set()  # the hung attempt's connection closes without an answer
        with pytest.raises(kube.ServerError):
            await asyncio.wait_for(posted, 10)
        assert len(server.seen) == 3  # never sent twice
    finally:
        hold.set()
        k.close()


async def _until(predicate: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.02)
