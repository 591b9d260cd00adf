"""Log records carry the custom resource from the context; ansible events become short log lines."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import re
from typing import Any, Iterator

import pytest

from ansible_operator.logs import ansible_event_logger, log_context, setup_logging


@pytest.fixture
def capture() -> Iterator[tuple[io.StringIO, Any]]:
    """Install our handler on a StringIO; restore the root logger afterwards."""
    root = logging.getLogger()
    old_level, old_handlers = root.level, list(root.handlers)
    stream = io.StringIO()

    def install(fmt: str, level: str = "DEBUG") -> logging.Handler:
        return setup_logging(level=level, fmt=fmt, stream=stream)

    yield stream, install
    for h in list(root.handlers):
        if h not in old_handlers:
            root.removeHandler(h)
    root.setLevel(old_level)


def test_text_format_carries_object_and_run(capture: Any) -> None:
    stream, install = capture
    install("text")
    log = logging.getLogger("ansible_operator.test")
    log.info("outside")
    with log_context(kind="Memcached", namespace="default", name="example"):
        log.info("reconciling")
        with log_context(run_id="20261122T134501Z-abc123"):
            logging.getLogger("some.library").warning("from a library")
    lines = stream.getvalue().splitlines()
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ INFO  outside", lines[0])
    assert lines[1].endswith("INFO  [Memcached default/example] reconciling")
    assert lines[2].endswith("WARNING [Memcached default/example run=20261122T134501Z-abc123] from a library")


def test_json_format_fields_and_extras(capture: Any) -> None:
    stream, install = capture
    install("json")
    log = logging.getLogger("ansible_operator.test")
    with log_context(kind="Memcached", namespace="ns1", name="cache", run_id="r1", watch="Memcached.x.io"):
        log.info("hello %s", "world", extra={"generation": 3})
    log.error("no object")
    first, second = (json.loads(line) for line in stream.getvalue().splitlines())
    assert (
        first["msg"] == "hello world"
        and first["level"] == "INFO"
        and first["logger"] == "ansible_operator.test"
    )
    assert (first["kind"], first["namespace"], first["name"], first["run_id"]) == (
        "Memcached",
        "ns1",
        "cache",
        "r1",
    )
    assert first["generation"] == 3 and first["watch"] == "Memcached.x.io"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", first["ts"])
    assert second["kind"] is None and second["name"] is None


def test_json_includes_traceback(capture: Any) -> None:
    stream, install = capture
    install("json")
    try:
        raise ValueError("bad spec")
    except ValueError:
        logging.getLogger("x").exception("run failed")
    record = json.loads(stream.getvalue())
    assert "ValueError: bad spec" in record["exc_info"]


async def test_context_follows_asyncio_tasks_and_threads(capture: Any) -> None:
    stream, install = capture
    install("json")
    log = logging.getLogger("ansible_operator.test")

    async def reconcile(name: str) -> None:
        with log_context(kind="Memcached", namespace="default", name=name):
            await asyncio.sleep(0)
            await asyncio.create_task(asyncio.sleep(0))
            log.info("in task")
            await asyncio.to_thread(log.info, "in thread")

    await asyncio.gather(reconcile("a"), reconcile("b"))
    records = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert sorted((r["name"], r["msg"]) for r in records) == [
        ("a", "in task"), ("a", "in thread"), ("b", "in task"), ("b", "in thread")]


def test_setup_logging_replaces_own_handler_and_rejects_bad_input(capture: Any) -> None:
    _, install = capture
    install("text")
    install("json")
    ours = [h for h in logging.getLogger().handlers if getattr(h, "_ansible_operator_handler", False)]
    assert len(ours) == 1
    with pytest.raises(ValueError, match="log format"):
        setup_logging(fmt="xml")
    with pytest.raises(ValueError, match="log level"):
        setup_logging(level="LOUD")


def _event(counter: int, event: str, **data: Any) -> dict[str, Any]:
    return {"counter": counter, "event": event, "uuid": f"u{counter}", "stdout": "", "event_data": data}


EVENTS = [
    _event(1, "playbook_on_start"),
    _event(
        2,
        "runner_on_ok",
        task="say hi",
        task_action="debug",
        host="localhost",
        res={"msg": "hi", "changed": False},
    ),
    _event(
        3,
        "runner_on_ok",
        task="create deployment",
        task_action="k8s",
        host="localhost",
        res={"changed": True, "result": {"kind": "Deployment"}},
    ),
    _event(4, "runner_on_skipped", task="skip me", task_action="debug", host="localhost"),
    _event(
        5,
        "runner_on_failed",
        task="optional",
        task_action="command",
        host="localhost",
        ignore_errors=True,
        res={"msg": "non-zero return code", "rc": 1},
    ),
    _event(
        6,
        "runner_on_failed",
        task="boom",
        task_action="fail",
        host="localhost",
        res={"msg": "replicas must be positive", "changed": False},
    ),
    _event(
        7,
        "playbook_on_stats",
        ok={"localhost": 3},
        changed={"localhost": 1},
        failures={"localhost": 1},
        skipped={"localhost": 1},
        ignored={"localhost": 1},
        dark={},
        rescued={},
        processed={"localhost": 1},
    ),
]


def _lines(caplog: pytest.LogCaptureFixture, verbosity: int) -> list[tuple[int, str]]:
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="ansible_operator.ansible"):
        on_event = ansible_event_logger(verbosity)
        for e in EVENTS:
            on_event(e)
    return [(r.levelno, r.getMessage()) for r in caplog.records]


def test_event_logger_verbosity_levels(caplog: pytest.LogCaptureFixture) -> None:
    v0 = _lines(caplog, 0)
    assert v0 == [
        (logging.INFO, "TASK [optional] failed (ignored): localhost: non-zero return code (rc=1)"),
        (logging.WARNING, "TASK [boom] failed: localhost: replicas must be positive"),
    ]
    v1 = [m for _, m in _lines(caplog, 1)]
    assert v1 == [
        "TASK [say hi] ok: localhost",
        "TASK [create deployment] changed: localhost",
        "TASK [optional] failed (ignored): localhost: non-zero return code (rc=1)",
        "TASK [boom] failed: localhost: replicas must be positive",
        "PLAY RECAP localhost: ok=3 changed=1 unreachable=0 failed=1 skipped=1 rescued=0 ignored=1",
    ]
    v2 = [m for _, m in _lines(caplog, 2)]
    assert "TASK [skip me] skipped: localhost" in v2 and len(v2) == 6
    v3 = [m for _, m in _lines(caplog, 3)]
    assert (
        'TASK [create deployment] changed: localhost => {"changed": true, "result": {"kind": "Deployment"}}'
        in v3
    )


def test_kopf_object_loggers_fill_the_object_and_objects_are_not_dumped(capture: Any) -> None:
    stream, install = capture
    install("json")
    ref = {"apiVersion": "cache.example.com/v1alpha1", "kind": "Memcached", "namespace": "ns", "name": "m",
           "uid": "u"}
    # Real kopf settings with posting off, as the operator runs kopf: importing kopf (intake does) puts
    # kopf's own K8sPoster on this logger, and it reads these settings.
    import kopf

    settings = kopf.OperatorSettings()
    settings.posting.enabled = False
    logging.getLogger("kopf.objects").info("handler done", extra={"k8s_ref": ref, "k8s_skip": False,
                                                                  "settings": settings})
    record = json.loads(stream.getvalue())
    assert (record["kind"], record["namespace"], record["name"]) == ("Memcached", "ns", "m")
    assert "settings" not in record and "k8s_ref" not in record


# ---- hostile CR content (issue 11, defects 4 and 7) ----------------------------------------------------

FORGED = (
    "bad value\n2026-11-22T13:45:01Z INFO  [Memcached ns/other] reconcile run x succeeded\r\x1b[2K\u2028tail"
)


def test_text_log_escapes_control_characters_no_forged_lines(capture: Any) -> None:
    stream, install = capture
    install("text")
    with log_context(kind="Memcached", namespace="ns", name="evil"):
        ansible_event_logger(0)(_event(1, "runner_on_failed", task="validate", task_action="fail",
                                       host="localhost", res={"msg": FORGED}))
        logging.getLogger("ansible_operator.test").warning("spec said: %s", FORGED)
    out = stream.getvalue()
    assert out.count("\n") == 2 and out.endswith("\n")
    lines = out.splitlines()  # splitlines also splits at \r and \u2028: still exactly one line per record
    assert len(lines) == 2 and all("[Memcached ns/evil]" in ln for ln in lines)
    assert "\x1b" not in out
    assert "spec said: bad value\\n2026-11-22T13:45:01Z INFO  [Memcached ns/other]" in lines[1]
    assert "\\r\\x1b[2K\\u2028tail" in lines[1]


def test_traceback_lines_are_indented_and_escaped(capture: Any) -> None:
    stream, install = capture
    install("text")
    try:
        raise ValueError("boom\r\nINFO forged")
    except ValueError:
        logging.getLogger("ansible_operator.test").exception("failed")
    lines = stream.getvalue().splitlines()
    assert len(lines) > 2 and all(ln.startswith("    ") for ln in lines[1:])
    assert "ValueError: boom\\r" in lines[-2] + lines[-1] or any("boom\\r" in ln for ln in lines)


def test_json_log_stays_one_valid_object_per_line(capture: Any) -> None:
    stream, install = capture
    install("json")
    with log_context(kind="Memcached", namespace="ns", name="evil"):
        logging.getLogger("ansible_operator.test").warning("%s", FORGED)
    lines = stream.getvalue().splitlines()
    assert len(lines) == 1
    assert json.loads(lines[0])["msg"] == FORGED


SECRET_B64 = "czNjcjN0LXBhc3N3b3Jk"  # s3cr3t-password
SECRET_RESULT = {
    "changed": False,
    "invocation": {"module_args": {"kind": "Secret", "name": "db"}},
    "resources": [{"metadata": {"name": "db"}, "type": "Opaque", "data": {"password": SECRET_B64}}],
    "msg": "password is s3cr3t-password",
}


@pytest.mark.parametrize("verbosity", range(0, 8))
def test_secret_values_never_reach_the_log(caplog: pytest.LogCaptureFixture, verbosity: int) -> None:
    with caplog.at_level(logging.DEBUG, logger="ansible_operator.ansible"):
        on_event = ansible_event_logger(verbosity)
        on_event(_event(1, "runner_on_ok", task="read", task_action="k8s_info", host="localhost",
                        res=SECRET_RESULT))
        on_event(_event(2, "runner_on_failed", task="use", task_action="fail", host="localhost",
                        res=dict(SECRET_RESULT, failed=True)))
        on_event(_event(3, "runner_item_on_failed", task="loop", task_action="debug", host="localhost",
                        res={"item": {"kind": "Secret", "metadata": {"name": "x"},
                                      "stringData": {"token": "plain-token-value"}}, "msg": "x"}))
    text = "\n".join(r.getMessage() for r in caplog.records)
    for leaked in (SECRET_B64, "s3cr3t-password", "plain-token-value"):
        assert leaked not in text
    if verbosity >= 3:
        assert '"password": "<redacted>"' in text


@pytest.mark.parametrize("verbosity", [0, 3])
def test_a_secret_seen_earlier_in_the_run_is_scrubbed_from_later_lines(caplog: pytest.LogCaptureFixture,
                                                                       verbosity: int) -> None:
    with caplog.at_level(logging.DEBUG, logger="ansible_operator.ansible"):
        on_event = ansible_event_logger(verbosity)  # one logger per run
        on_event(_event(1, "runner_on_ok", task="read", task_action="k8s_info", host="localhost",
                        res=SECRET_RESULT))
        on_event(_event(2, "runner_on_failed", task="use", task_action="fail", host="localhost",
                        res={"msg": "decoded: s3cr3t-password"}))
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "s3cr3t-password" not in text and "decoded: <redacted>" in text


def test_sdk_json_has_the_operator_sdks_zap_keys() -> None:
    """What the SDK's ansible-operator writes under --zap-encoder=json: zap's production JSON (lowercase
    levels, RFC 3339 ts, logger, msg) and its reconcile fields (name, namespace, gvk, job, event_type,
    EventData.Name)."""
    import io
    import json as json_mod
    import logging as logging_mod

    from ansible_operator.logs import ansible_event_logger, log_context, setup_logging

    stream = io.StringIO()
    setup_logging(level="DEBUG", fmt="sdk-json", stream=stream)
    try:
        with log_context(kind="Memcached", namespace="ns", name="mc",
                         gvk="cache.example.com/v1alpha1, Kind=Memcached", run_id="20261127T000000Z-abcdef"):
            logging_mod.getLogger("ansible_operator.reconcile").warning("run failed")
            ansible_event_logger(1)({"event": "runner_on_ok", "event_data": {
                "task": "memcached : start memcached", "host": "localhost", "res": {"changed": False}}})
        try:
            raise ValueError("boom")
        except ValueError:
            logging_mod.getLogger("x").exception("failed")
    finally:
        setup_logging(level="INFO", fmt="text")
    warn, task, error = (json_mod.loads(line) for line in stream.getvalue().splitlines())
    assert list(warn)[:4] == ["level", "ts", "logger", "msg"]
    assert warn["level"] == "warn" and warn["ts"].endswith("Z") and "T" in warn["ts"]
    assert (warn["name"], warn["namespace"], warn["gvk"], warn["job"]) == (
        "mc", "ns", "cache.example.com/v1alpha1, Kind=Memcached", "20261127T000000Z-abcdef")
    assert "kind" not in warn and "run_id" not in warn
    assert task["level"] == "info" and task["event_type"] == "runner_on_ok"
    assert task["EventData.Name"] == "memcached : start memcached"
    assert error["level"] == "error" and error["error"] == "boom" and "ValueError" in error["stacktrace"]


def test_kopfs_retried_request_errors_are_debug_records_and_its_last_attempt_stays_an_error() -> None:
    import io
    import logging as logging_mod

    from ansible_operator.logs import setup_logging

    stream = io.StringIO()
    setup_logging(level="INFO", fmt="text", stream=stream)
    try:
        kopf_log = logging_mod.getLogger("kopf._cogs.clients.api")
        kopf_log.error("Request attempt #1/5 failed; will retry: GET /x -> ClientConnectorError()")
        kopf_log.error("Request attempt #5/5 failed; escalating: GET /x -> ClientConnectorError()")
        setup_logging(level="DEBUG", fmt="text", stream=stream)
        kopf_log.error("Request attempt #2/5 failed; will retry: GET /x -> ClientConnectorError()")
    finally:
        setup_logging(level="INFO", fmt="text")
    lines = stream.getvalue().splitlines()
    assert len(lines) == 2, lines
    assert " ERROR " in lines[0] and "escalating" in lines[0]
    assert " DEBUG " in lines[1] and "#2/5" in lines[1]
