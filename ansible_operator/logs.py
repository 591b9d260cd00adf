"""Logging: text or JSON lines, with the custom resource being reconciled on every record.

Why a context variable: a reconcile's log lines come from many modules (queue, reconcile, executor,
status, kubernetes client warnings). Passing ``kind/namespace/name`` to each call is error-prone; a
``contextvars.ContextVar`` set once around the reconcile is inherited by every asyncio task and
``asyncio.to_thread`` call started inside it, and a handler-level filter stamps it on each record, so
*every* record emitted in that context carries the object -- including records from third-party loggers.

Text:  ``2026-11-22T13:45:01Z INFO  [Memcached default/example] message``
JSON:  ``{"ts", "level", "logger", "msg", "kind", "namespace", "name", "run_id", ...extras}``

``ansible_event_logger`` turns ansible-runner events into short lines (``TASK [name] changed: host``)
so an operator's log shows what a run did without reading its artifacts.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import re
import sys
import time
import types
from typing import Any, Callable, Iterator, Mapping, TextIO

from ansible_operator.wording import failure_message, redact_result

__all__ = [
    "CR_FIELDS",
    "cr_context",
    "log_context",
    "setup_logging",
    "ContextFilter",
    "TextFormatter",
    "JsonFormatter",
    "ansible_event_logger",
    "escape_control",
]

CR_FIELDS = ("kind", "namespace", "name", "run_id")
"""Record attributes the context provides (always present on records passing our handler; None if unset)."""

cr_context: contextvars.ContextVar[Mapping[str, Any]] = contextvars.ContextVar(
    "cr_context", default=types.MappingProxyType({}))
"""The object (and run) the current task works on; set it with ``log_context``."""

_HANDLER_MARK = "_ansible_operator_handler"


@contextlib.contextmanager
def log_context(**fields: Any) -> Iterator[Mapping[str, Any]]:
    """Add ``fields`` (usually ``kind``, ``namespace``, ``name``, later ``run_id``) to every record logged
    inside the block, nesting over any outer context. Fields given as None are left unset/cleared."""
    merged = {**cr_context.get(), **fields}
    token = cr_context.set(merged)
    try:
        yield merged
    finally:
        cr_context.reset(token)


class RetriedRequestFilter(logging.Filter):
    """kopf logs each failed attempt of a request it will retry at ERROR ("Request attempt #1/5 failed; will
    retry: ..."): during an expected outage, a stream of errors for what is retried anyway. The runner says
    once that the API server stopped and once that it answers again (``ApiReachability``); these become
    debug records. kopf's final "escalating" attempt stays an error."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name.startswith("kopf") and record.levelno >= logging.ERROR and \
                isinstance(record.msg, str) and record.msg.startswith("Request attempt") and \
                "will re" in record.msg:  # "will retry", "will re-authenticate"
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
            return logging.getLogger().isEnabledFor(logging.DEBUG)
        return True


class ContextFilter(logging.Filter):
    """Copies ``cr_context`` onto each record passing the handler, never overriding an explicit ``extra=``.

    ``name`` clashes with ``LogRecord.name`` (the logger's name), so the object's name is stored as
    ``cr_name``; formatters print it as ``name``. Fields other than the CR ones (e.g. ``watch``) are
    copied too, so JSON output carries whatever the context holds.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        ctx = cr_context.get()
        ref = getattr(record, "k8s_ref", None)
        if not ctx and isinstance(ref, dict):
            # kopf's per-object loggers pass the object as extra={"k8s_ref": {...}}: use it when we have
            # no context of our own (kopf's internal tasks do not run inside ours).
            ctx = {"kind": ref.get("kind"), "namespace": ref.get("namespace"), "name": ref.get("name")}
        if getattr(record, "cr_name", None) is None:
            record.cr_name = ctx.get("name")
        for key in ("kind", "namespace", "run_id"):
            if getattr(record, key, None) is None:
                setattr(record, key, ctx.get(key))
        for key, value in ctx.items():
            if key not in CR_FIELDS and not hasattr(record, key):
                setattr(record, key, value)
        return True


def _utc(record: logging.LogRecord, millis: bool = False) -> str:
    base = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
    if millis:
        return f"{base}.{int(record.msecs):03d}Z"
    return base + "Z"


def _object_ref(record: logging.LogRecord) -> str:
    """``[Kind ns/name run=<id>] `` from the context fields, or "" outside any object's context."""
    kind = getattr(record, "kind", None)
    obj = getattr(record, "cr_name", None)
    namespace = getattr(record, "namespace", None)
    run_id = getattr(record, "run_id", None)
    ref = f"{namespace}/{obj}" if namespace and obj else (obj or "")
    parts = [p for p in (kind, ref, f"run={run_id}" if run_id else "") if p]
    return "[" + " ".join(parts) + "] " if parts else ""


_CONTROL = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029]")
_CONTROL_NAMES = {"\n": "\\n", "\r": "\\r"}


def _escape_one(match: re.Match[str]) -> str:
    char = match.group()
    named = _CONTROL_NAMES.get(char)
    if named:
        return named
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def escape_control(text: str) -> str:
    """Control characters (all but tab; also NEL and the Unicode line/paragraph separators) as visible
    escapes: a record is one line, whatever text from a custom resource it carries (no forged lines, no
    terminal escape sequences)."""
    return _CONTROL.sub(_escape_one, text)


_JSON_UNSAFE = {"\u2028": "\\u2028", "\u2029": "\\u2029", "\x85": "\\u0085"}


class TextFormatter(logging.Formatter):
    """``<UTC time> <LEVEL padded to 5> [Kind ns/name run=<id>] message`` plus traceback lines.

    The message and the object reference are escaped (:func:`escape_control`); a traceback (and a run's
    ``ansible_output``, ``$ANSIBLE_DEBUG_LOGS``) keeps its lines but each is indented, so none can pass for a
    record of its own."""

    def format(self, record: logging.LogRecord) -> str:
        msg = escape_control(record.getMessage())
        line = f"{_utc(record)} {record.levelname:<5} {escape_control(_object_ref(record))}{msg}"
        block = getattr(record, "ansible_output", None)
        if isinstance(block, str) and block:  # $ANSIBLE_DEBUG_LOGS: a run's output, indented like a traceback
            line += "\n" + _indented(block)
        if record.exc_info:
            line += "\n" + _indented(self.formatException(record.exc_info))
        if record.stack_info:
            line += "\n" + _indented(self.formatStack(record.stack_info))
        return line


def _indented(block: str) -> str:
    return "\n".join("    " + escape_control(part) for part in block.split("\n"))


_PLAIN = (str, int, float, bool, type(None), list, tuple, dict)
_STANDARD_ATTRS = frozenset(vars(logging.LogRecord("x", 0, "", 0, "", None, None))) | {
    "message", "asctime", "taskName", "cr_name", "k8s_ref", "k8s_skip",
}


class JsonFormatter(logging.Formatter):
    """One JSON object per line; extras passed with ``extra=`` are included (non-JSON values as str)."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": _utc(record, millis=True),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
            "kind": getattr(record, "kind", None),
            "namespace": getattr(record, "namespace", None),
            "name": getattr(record, "cr_name", None),
            "run_id": getattr(record, "run_id", None),
        }
        for key, value in vars(record).items():
            # Only plain data: libraries attach objects to records (kopf: its settings), which would turn
            # into long reprs.
            if key not in _STANDARD_ATTRS and key not in out and not key.startswith("_") \
                    and isinstance(value, _PLAIN):
                out[key] = value
        if record.exc_info:
            out["exc_info"] = self.formatException(record.exc_info)
        if record.stack_info:
            out["stack_info"] = self.formatStack(record.stack_info)
        return _one_line(json.dumps(out, default=str, ensure_ascii=False))


def _one_line(text: str) -> str:
    """Valid JSON either way, but line-oriented readers (Python's splitlines, some log shippers) break lines
    at these: escape them so that one record stays one line."""
    for char, escaped in _JSON_UNSAFE.items():
        if char in text:
            text = text.replace(char, escaped)
    return text


_ZAP_LEVELS = ((logging.CRITICAL, "fatal"), (logging.ERROR, "error"), (logging.WARNING, "warn"),
               (logging.INFO, "info"))
_SDK_RENAMED = {"run_id": "job", "ansible_task": "EventData.Name"}
_SDK_DROPPED = {"kind", "ansible_host", "ansible_result"}


def zap_level(levelno: int) -> str:
    """zap's lowercase level name for a Python level (WARNING is ``warn``; anything below INFO ``debug``)."""
    return next((name for number, name in _ZAP_LEVELS if levelno >= number), "debug")


class SdkJsonFormatter(JsonFormatter):
    """The Operator SDK's log lines (controller-runtime's zap JSON encoder, production config): ``level``
    in zap's lowercase names, ``ts`` RFC 3339 (controller-runtime's default time encoder), ``logger``,
    ``msg``; the object as ``name``/``namespace``/``gvk`` (``group/version, Kind=Kind``); a run's id as
    ``job``, an Ansible event's type as ``event_type`` and its task as ``EventData.Name``, as the SDK's
    ``logging_event_handler`` writes them; an exception as ``error`` plus ``stacktrace``."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "level": zap_level(record.levelno),
            "ts": _utc(record),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key in ("namespace", "gvk"):
            if getattr(record, key, None) is not None:
                out[key] = getattr(record, key)
        name = getattr(record, "cr_name", None)
        if name is not None:
            out["name"] = name
        for key, value in vars(record).items():
            if key in _STANDARD_ATTRS or key in _SDK_DROPPED or key.startswith("_") or value is None \
                    or not isinstance(value, _PLAIN):
                continue
            out.setdefault(_SDK_RENAMED.get(key, key), value)
        if record.exc_info:
            out["error"] = str(record.exc_info[1]) if record.exc_info[1] is not None else "error"
            out["stacktrace"] = self.formatException(record.exc_info)
        if record.stack_info:
            out["stacktrace"] = self.formatStack(record.stack_info)
        return _one_line(json.dumps(out, default=str, ensure_ascii=False))


LOG_FORMATS = ("text", "json", "sdk-json")


def setup_logging(*, level: str = "INFO", fmt: str = "text", stream: TextIO | None = None) -> logging.Handler:
    """Configure the root logger once (calling again replaces our handler, never stacks a second one).

    ``level`` is a name (``DEBUG``, ``info``) or a number; ``fmt`` one of :data:`LOG_FORMATS`. Returns the
    handler (tests attach it to a StringIO via ``stream``)."""
    if fmt not in LOG_FORMATS:
        raise ValueError(f"unknown log format {fmt!r}: expected 'text', 'json' or 'sdk-json'")
    numeric = _parse_level(level)
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    formatter = {"json": JsonFormatter, "sdk-json": SdkJsonFormatter}.get(fmt, TextFormatter)
    handler.setFormatter(formatter())
    handler.addFilter(RetriedRequestFilter())
    handler.addFilter(ContextFilter())
    setattr(handler, _HANDLER_MARK, True)
    root = logging.getLogger()
    for old in list(root.handlers):
        if getattr(old, _HANDLER_MARK, False):
            root.removeHandler(old)
            old.close()
    root.addHandler(handler)
    root.setLevel(numeric)
    logging.captureWarnings(True)
    # The kubernetes client logs every request body at DEBUG; keep it quieter than our own debug output.
    # Its connection pool also warns once per retry ("Retrying (Retry(total=2...)) after connection
    # broken"): the failed call itself is what the runner reports, so those are debug output too.
    logging.getLogger("urllib3").setLevel(max(numeric, logging.INFO))
    logging.getLogger("urllib3.connectionpool").setLevel(max(numeric, logging.ERROR))
    return handler


def _parse_level(level: str | int) -> int:
    if isinstance(level, int):
        return level
    text = str(level).strip().upper()
    if text.isdigit():
        return int(text)
    value = logging.getLevelName(text)
    if not isinstance(value, int):
        raise ValueError(f"unknown log level {level!r}: expected DEBUG, INFO, WARNING, ERROR or CRITICAL")
    return value


# ---- ansible events → log lines ---------------------------------------------------------------------

_RESULT_EVENTS = {
    "runner_on_ok": "ok",
    "runner_on_failed": "failed",
    "runner_on_skipped": "skipped",
    "runner_on_unreachable": "unreachable",
    "runner_item_on_failed": "failed",
}
_RECAP_KEYS = (  # (label as ansible prints it, key in the playbook_on_stats event)
    ("ok", "ok"), ("changed", "changed"), ("unreachable", "dark"), ("failed", "failures"),
    ("skipped", "skipped"), ("rescued", "rescued"), ("ignored", "ignored"),
)


def _result_word(event: Mapping[str, Any]) -> str:
    kind = event.get("event", "")
    data = event.get("event_data") or {}
    word = _RESULT_EVENTS[kind]
    if word == "ok" and (data.get("res") or {}).get("changed"):
        word = "changed"
    if word == "failed" and data.get("ignore_errors"):
        word = "failed (ignored)"
    return word


def ansible_event_logger(
    verbosity: int, logger: logging.Logger | None = None
) -> Callable[[dict[str, Any]], None]:
    """Return an ``on_event`` callback that logs ansible-runner events at ``verbosity`` (0-7):

    * always: failed / unreachable task results (WARNING; INFO when ``ignore_errors``) with their message;
    * ``>= 1``: ok / changed results and the play recap;
    * ``>= 2``: skipped results;
    * ``>= 3``: the module's full result (``res``) as JSON after each task line.

    Item results (loops) are summarised by the task's final result, except failed items, which name the
    item. Called on the event loop thread for each event, in order.
    """
    log = logger or logging.getLogger("ansible_operator.ansible")
    secrets: set[str] = set()  # Secret values seen in this run's results so far (one logger per run)

    def on_event(event: dict[str, Any]) -> None:
        kind = event.get("event")
        data = event.get("event_data") or {}
        if kind in _RESULT_EVENTS:
            word = _result_word(event)
            failing = word in ("failed", "unreachable")
            res = redact_result(data.get("res") or {}, secrets)  # also learns this run's Secret values
            if word == "skipped" and verbosity < 2:
                return
            if not failing and word != "failed (ignored)" and verbosity < 1:
                return
            task = data.get("task") or data.get("task_action") or "?"
            host = data.get("host") or data.get("remote_addr") or "?"
            line = f"TASK [{task}] {word}: {host}"
            if kind == "runner_item_on_failed" and "item" in res:
                line += f" (item={json.dumps(res['item'], default=str)})"
            if failing or word == "failed (ignored)":
                message = failure_message(res)
                if message:
                    line += f": {message}"
            if verbosity >= 3 and res:
                line += " => " + json.dumps(res, default=str, sort_keys=True)
            level = logging.WARNING if failing else logging.INFO
            log.log(level, "%s", line, extra={"ansible_task": task, "ansible_host": host,
                                              "ansible_result": word, "event_type": kind})
        elif kind == "playbook_on_stats" and verbosity >= 1:
            hosts: set[str] = set()
            for key in [k for _, k in _RECAP_KEYS] + ["processed"]:
                value = data.get(key)
                if isinstance(value, dict):
                    hosts.update(value)
            if not hosts:
                log.info("PLAY RECAP (no hosts)")
            for host in sorted(hosts):
                counts = " ".join(
                    f"{label}={(data.get(key) or {}).get(host, 0)}" for label, key in _RECAP_KEYS
                )
                log.info("PLAY RECAP %s: %s", host, counts)

    return on_event
