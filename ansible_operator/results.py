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
* the failure message is :func:`ansible_operator.wording.failure_message` of the (redacted) result.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping

from ansible_operator.durations import parse_duration
from ansible_operator.wording import failure_message, one_line, redact_result

if TYPE_CHECKING:  # pragma: no cover
    from ansible_operator.executors.base import RunOutcome

__all__ = ["FailedTask", "RunResult", "ResultCollector", "REQUEUE_KEY"]

REQUEUE_KEY = "requeue_after_seconds"
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
                self._ansible_error = one_line(m.group(1))
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
            error=one_line(outcome.error) if outcome.error else None,
            ansible_error=ansible_error,
            stats_seen=self._stats is not None,
            rc=outcome.rc,
        )
