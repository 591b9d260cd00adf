"""ansible-runner events → ``RunResult``: stats, the task that failed and why, changed tasks, requeues.

Events arrive one by one while the run is going (``ResultCollector.feed``), so the partial view
(``failed_task``, ``stats``) is available for logs and metrics before the run ends; ``finish`` combines
them with the executor's ``RunOutcome``.

Rules (what the status conditions and Events end up saying):

* counts come from ``playbook_on_stats`` (summed over hosts; ``dark`` is ``unreachable``); when a run
  ends without one (timeout, crash, cancel) they are derived from the per-task events seen so far;
* a failure with ``ignore_errors`` never becomes the failed task; a failure that a ``rescue`` section
  handled is forgotten when the final stats show no failures (runner events carry no "rescued" flag);
  unreachable hosts count as failures;
* the failure message is the most useful single line of the result: the module's ``msg``, except when
  that is generic ("non-zero return code", "MODULE FAILURE") and stderr says more; Kubernetes API errors
  from kubernetes.core are reduced to the API's own message plus the HTTP status and reason.
"""

from __future__ import annotations

import ast
import base64
import binascii
import json
import math
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping

from ansible_operator.durations import parse_duration

if TYPE_CHECKING:  # pragma: no cover
    from ansible_operator.executors.base import RunOutcome

__all__ = ["FailedTask", "RunResult", "ResultCollector", "failure_message", "redact_result", "REDACTED",
           "REQUEUE_KEY"]

REQUEUE_KEY = "requeue_after_seconds"
MAX_MESSAGE = 1000
_GENERIC_MESSAGES = {
    "",
    "non-zero return code",
    "the command exited with a non-zero return code.",  # ansible-core 2.20+'s command/shell modules
    "module failure",
    "module failure\nsee stdout/stderr for the exact error",
    "all items completed",
    "one or more items failed",
}
_OK_EVENTS = {"runner_on_ok", "runner_on_async_ok"}
_FAILED_EVENTS = {"runner_on_failed", "runner_on_async_failed"}


@dataclass(frozen=True)
class FailedTask:
    name: str
    action: str | None
    role: str | None
    message: str
    host: str | None

    @property
    def label(self) -> str:
        """``role : task`` as Ansible prints it in ``TASK [...]``; just the task name outside roles."""
        return f"{self.role} : {self.name}" if self.role else self.name


@dataclass(frozen=True)
class RunResult:
    status: str
    """RunOutcome.status: successful | failed | timeout | canceled | error."""
    ok: int
    changed: int
    skipped: int
    failures: int
    unreachable: int
    rescued: int
    ignored: int
    failed_task: FailedTask | None
    changed_tasks: tuple[str, ...]
    requeue_after: float | None
    """Seconds, from a task result's ``requeue_after_seconds`` (the last one wins)."""
    error: str | None
    """Executor-level problem (RunOutcome.error), one line."""
    ansible_error: str | None = None
    """An ``ERROR`` Ansible printed outside any task (syntax error, missing role...), one line."""
    stats_seen: bool = True
    """False when the run ended without ``playbook_on_stats`` and the counts were derived from task events."""
    rc: int | None = None

    @property
    def succeeded(self) -> bool:
        return (self.status == "successful" and not self.failures and not self.unreachable
                and self.error is None)

    @property
    def message(self) -> str:
        """One line saying why the run did not succeed ("" when it did)."""
        if self.succeeded:
            return ""
        if self.failed_task is not None:
            return f"{self.failed_task.label}: {self.failed_task.message}"
        if self.error:
            return self.error
        if self.ansible_error:
            return self.ansible_error
        if self.status == "timeout":
            return "the run timed out"
        if self.status == "canceled":
            return "the run was canceled"
        rc = f" (rc={self.rc})" if self.rc is not None else ""
        return f"the run ended with status {self.status}{rc}"


# ---- redaction -------------------------------------------------------------------------------------

REDACTED = "<redacted>"
_SECRET_FIELDS = ("data", "stringData")
_MIN_SCRUBBED = 4
"""Secret values shorter than this are not searched for in free text (they would match everywhere)."""


def _is_secret(obj: Mapping[str, Any]) -> bool:
    if obj.get("kind") == "Secret":
        return True
    # List items (k8s_info ``resources``, a ``get`` of a list) carry no kind; a Secret always has ``type``.
    meta = obj.get("metadata")
    return (isinstance(obj.get("type"), str) and isinstance(meta, Mapping) and "name" in meta
            and any(isinstance(obj.get(f), Mapping) for f in _SECRET_FIELDS))


def _asks_for_secrets(res: Mapping[str, Any]) -> bool:
    """A module called with ``kind: Secret`` (k8s, k8s_info...): every data/stringData in its result is."""
    invocation = res.get("invocation")
    args = invocation.get("module_args") if isinstance(invocation, Mapping) else None
    return isinstance(args, Mapping) and str(args.get("kind") or "").lower() in ("secret", "secrets")


def _secret_values(values: Mapping[str, Any], field_name: str, found: set[str]) -> None:
    for value in values.values():
        if not isinstance(value, str) or not value:
            continue
        found.add(value)
        if field_name == "data":  # base64 in the API; roles often decode it (b64decode) and print that
            try:
                decoded = base64.b64decode(value, validate=True).decode("utf-8")
            except (binascii.Error, ValueError):
                continue
            if decoded:
                found.add(decoded)


def redact_result(res: Any, seen: set[str] | None = None) -> Any:
    """A copy of a task result in which no Secret value survives, at any verbosity.

    Kubernetes Secrets anywhere in the result (``kind: Secret``, kind-less list items shaped like one, or
    anything returned by a module called with ``kind: Secret``) get every ``data``/``stringData`` value
    replaced by ``<redacted>``; then every occurrence of those values (and of the base64-decoded ``data``
    values) in any string of the same result (``msg``, ``stdout``, a loop ``item``...) is replaced too.
    Values Ansible already censored (``no_log``) stay censored.

    ``seen`` (one set per run) remembers the values found so far, so a later task of the same run that
    prints one (``fail: msg="{{ secret.data.pw | b64decode }}"``) has it scrubbed too.
    """
    if not isinstance(res, Mapping):
        return res
    found: set[str] = set()
    everything = _asks_for_secrets(res)

    def walk(value: Any, in_secret: bool) -> Any:
        if isinstance(value, Mapping):
            secret = in_secret or _is_secret(value)
            out: dict[str, Any] = {}
            for key, item in value.items():
                if key in _SECRET_FIELDS and isinstance(item, Mapping) and (secret or everything):
                    _secret_values(item, key, found)
                    out[key] = {k: REDACTED for k in item}
                else:
                    out[key] = walk(item, False)
            return out
        if isinstance(value, list):
            return [walk(item, in_secret) for item in value]
        return value

    redacted = walk(res, False)
    if seen is not None:
        seen.update(v for v in found if len(v) >= _MIN_SCRUBBED)
        found = found | seen
    secrets = sorted((v for v in found if len(v) >= _MIN_SCRUBBED), key=len, reverse=True)
    if not secrets:
        return redacted

    def scrub(value: Any) -> Any:
        if isinstance(value, str):
            for secret in secrets:
                if secret in value:
                    value = value.replace(secret, REDACTED)
            return value
        if isinstance(value, Mapping):
            return {k: scrub(v) for k, v in value.items()}
        if isinstance(value, list):
            return [scrub(v) for v in value]
        return value

    return scrub(redacted)


# ---- messages --------------------------------------------------------------------------------------


def _one_line(text: str, limit: int = MAX_MESSAGE) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _last_line(text: Any) -> str:
    if isinstance(text, list):
        text = "\n".join(str(t) for t in text)
    lines = [ln.strip() for ln in str(text or "").splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def _api_status(msg: str) -> dict[str, Any] | None:
    """A Kubernetes ``Status`` body embedded in a kubernetes.core error message, e.g.
    ``Failed to create object: b'{"kind":"Status",...,"message":"...","reason":"Invalid","code":422}'``."""
    start, end = msg.find("{"), msg.rfind("}")
    if start < 0 or end <= start:
        return None
    body = msg[start: end + 1]
    candidates = [body]
    if msg[start - 2: start] in ("b'", 'b"'):  # str(bytes): a Python literal, escapes and all
        try:
            raw = ast.literal_eval(msg[start - 2: msg.rfind(msg[start - 1]) + 1])
            candidates.insert(0, raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw))
        except (ValueError, SyntaxError):
            pass
    for text in candidates:
        try:
            data = json.loads(text)
        except ValueError:
            continue
        if isinstance(data, dict) and isinstance(data.get("message"), str):
            return data
    m = re.search(r'"message"\s*:\s*"((?:[^"\\]|\\.)*)"', body)
    if not m:
        return None
    out: dict[str, Any] = {"message": m.group(1).replace('\\"', '"')}
    code = re.search(r'"code"\s*:\s*(\d+)', body)
    reason = re.search(r'"reason"\s*:\s*"([^"]*)"', body)
    if code:
        out["code"] = int(code.group(1))
    if reason:
        out["reason"] = reason.group(1)
    return out


def failure_message(res: Mapping[str, Any] | None) -> str:
    """The most useful one-line text of a failed (or unreachable) task result."""
    if not isinstance(res, Mapping):
        return "task failed"
    results = res.get("results")
    if isinstance(results, list):
        for item in results:
            if isinstance(item, Mapping) and (item.get("failed") or item.get("unreachable")):
                label = item.get("_ansible_item_label", item.get("item"))
                text = failure_message(item)
                return _one_line(f"{text} (item={label!r})" if label is not None else text)
    msg = res.get("msg")
    if isinstance(msg, str):
        msg_text = _one_line(msg)
    else:
        msg_text = _one_line(json.dumps(msg)) if msg is not None else ""

    if isinstance(msg, str) and "{" in msg:
        api = _api_status(msg)
        if api is not None:
            head = msg[: msg.find("{")].rstrip(" b'\"")
            prefix = head[:-1].strip() if head.endswith(":") else head.strip()
            code = api.get("code", res.get("status"))
            reason = api.get("reason", res.get("reason"))
            detail = " ".join(str(x) for x in (code, reason) if x not in (None, ""))
            text = f"{prefix}: {api['message']}" if prefix else str(api["message"])
            return _one_line(f"{text} ({detail})" if detail else text)
    status, reason = res.get("status"), res.get("reason")
    if isinstance(status, int) and not isinstance(status, bool) and msg_text:
        detail = f"{status} {reason}" if isinstance(reason, str) and reason else str(status)
        return _one_line(f"{msg_text} ({detail})")

    generic = msg_text.lower() in _GENERIC_MESSAGES or msg_text.lower().startswith("module failure")
    if msg_text and not generic:
        return msg_text
    for key in ("stderr", "module_stderr", "stdout", "module_stdout", "reason"):
        line = _last_line(res.get(key))
        if line:
            rc = res.get("rc")
            suffix = f" (rc={rc})" if isinstance(rc, int) and key in ("stderr", "stdout") else ""
            return _one_line(line + suffix)
    exc = _last_line(res.get("exception"))
    if exc and exc != "(traceback unavailable)":
        return _one_line(exc)
    if res.get("censored"):
        return _one_line(str(res["censored"]))
    if msg_text:
        rc = res.get("rc")
        return msg_text + (f" (rc={rc})" if isinstance(rc, int) else "")
    return "task failed"


def _requeue_value(res: Any, action: str | None = None) -> float | None:
    """``requeue_after_seconds`` from our module; Operator SDK's own ``requeue_after`` returns ``period``
    (a Go duration string), which a role gets when the real operator_sdk.util collection is installed."""
    if not isinstance(res, Mapping):
        return None
    found: float | None = None
    value = res.get(REQUEUE_KEY)
    seconds = float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
    if seconds is not None and math.isfinite(seconds) and seconds >= 0:
        found = seconds
    elif action and action.endswith("requeue_after") and isinstance(res.get("period"), (str, int, float)):
        try:
            found = parse_duration(res["period"])
        except ValueError:
            found = None
    items = res.get("results")
    for item in items if isinstance(items, list) else ():
        v = _requeue_value(item)
        if v is not None:
            found = v
    return found


# ---- collector -------------------------------------------------------------------------------------


_ERROR_LINE = re.compile(r"^\s*(?:\[ERROR\]:|ERROR!)\s*(.*)$")
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


@dataclass
class _Counts:
    ok: int = 0
    changed: int = 0
    skipped: int = 0
    failures: int = 0
    unreachable: int = 0
    rescued: int = 0
    ignored: int = 0


@dataclass
class ResultCollector:
    """Feed it every ansible-runner event of one run, in order; then ``finish(outcome)``."""

    _derived: _Counts = field(default_factory=_Counts)
    _stats: _Counts | None = None
    _failed: FailedTask | None = None
    _changed: list[str] = field(default_factory=list)
    _requeue: float | None = None
    _ansible_error: str | None = None
    events_seen: int = 0
    _secrets: set[str] = field(default_factory=set)

    @property
    def failed_task(self) -> FailedTask | None:
        """The last non-ignored failure so far (may still turn out rescued)."""
        return self._failed

    @property
    def requeue_after(self) -> float | None:
        """The delay the last ``requeue_after`` task so far asked for, in seconds."""
        return self._requeue

    @property
    def stats(self) -> dict[str, int]:
        """Counts so far: final ``playbook_on_stats`` when seen, else derived from task events."""
        c = self._stats or self._derived
        return dict(ok=c.ok, changed=c.changed, skipped=c.skipped, failures=c.failures,
                    unreachable=c.unreachable, rescued=c.rescued, ignored=c.ignored)

    @property
    def changed_tasks(self) -> tuple[str, ...]:
        return tuple(self._changed)

    def feed(self, event: Mapping[str, Any]) -> None:
        self.events_seen += 1
        name = event.get("event")
        data = event.get("event_data") or {}
        if not isinstance(data, Mapping):
            data = {}
        if name == "playbook_on_stats":
            self._stats = self._sum_stats(data)
            return
        if name in ("verbose", "error", "playbook_on_start", "playbook_on_play_start") or not name:
            self._scan_errors(event.get("stdout"))
            return
        if not isinstance(name, str) or not name.startswith("runner_on_") or name == "runner_on_start":
            return
        res = redact_result(data.get("res"), self._secrets)
        task = str(data.get("task") or data.get("task_action") or "?")
        role = data.get("role") or None
        label = f"{role} : {task}" if role else task
        if name in _OK_EVENTS:
            self._derived.ok += 1
            if isinstance(res, Mapping) and res.get("changed"):
                self._derived.changed += 1
                if label not in self._changed:
                    self._changed.append(label)
        elif name == "runner_on_skipped":
            self._derived.skipped += 1
        elif name in _FAILED_EVENTS or name == "runner_on_unreachable":
            unreachable = name == "runner_on_unreachable"
            if not unreachable and data.get("ignore_errors"):
                self._derived.ignored += 1
                self._derived.ok += 1  # Ansible counts an ignored failure as ok too
            else:
                if unreachable:
                    self._derived.unreachable += 1
                else:
                    self._derived.failures += 1
                self._failed = FailedTask(
                    name=task,
                    action=data.get("task_action") or None,
                    role=role,
                    message=failure_message(res) if not unreachable or isinstance(res, Mapping)
                    else "host unreachable",
                    host=data.get("host") or None,
                )
            if isinstance(res, Mapping) and res.get("changed") and label not in self._changed:
                self._changed.append(label)
        requeue = _requeue_value(res, data.get("task_action"))
        if requeue is not None:
            self._requeue = requeue

    def _scan_errors(self, stdout: Any) -> None:
        for line in _ANSI.sub("", str(stdout or "")).splitlines():
            m = _ERROR_LINE.match(line)
            if m and m.group(1).strip():
                self._ansible_error = _one_line(m.group(1))
                return

    @staticmethod
    def _sum_stats(data: Mapping[str, Any]) -> _Counts:
        def total(key: str) -> int:
            per_host = data.get(key) or {}
            if not isinstance(per_host, Mapping):
                return 0
            return sum(v for v in per_host.values() if isinstance(v, int) and not isinstance(v, bool))

        return _Counts(ok=total("ok"), changed=total("changed"), skipped=total("skipped"),
                       failures=total("failures"), unreachable=total("dark"), rescued=total("rescued"),
                       ignored=total("ignored"))

    def finish(self, outcome: "RunOutcome") -> RunResult:
        counts = self._stats or self._derived
        failed = self._failed
        if self._stats is not None and not counts.failures and not counts.unreachable:
            failed = None  # every failure seen was rescued (or ignored)
        status = str(outcome.status)
        ansible_error = self._ansible_error if status != "successful" else None
        return RunResult(
            status=status,
            ok=counts.ok,
            changed=counts.changed,
            skipped=counts.skipped,
            failures=counts.failures,
            unreachable=counts.unreachable,
            rescued=counts.rescued,
            ignored=counts.ignored,
            failed_task=failed,
            changed_tasks=tuple(self._changed),
            requeue_after=self._requeue,
            error=_one_line(outcome.error) if outcome.error else None,
            ansible_error=ansible_error,
            stats_seen=self._stats is not None,
            rc=outcome.rc,
        )
