"""``ansible-operator runs``: what did the operator's recent runs do, without digging through directories.

Reads the run-artifacts layout through :mod:`ansible_operator.artifacts` (its one owner; see
docs/explanation/architecture.md, "Run identity and artifacts").

A run directory whose ``run.json`` is missing or unreadable (operator killed mid-write, disk full) is
still listed, from its path and ansible-runner's ``status`` file, so nothing silently disappears.
"""

from __future__ import annotations

import json
import re
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable

from ansible_operator.artifacts import RunRecord, default_artifacts_dir, iter_run_dirs, load_run, read_text
from ansible_operator.errors import OperatorError
from ansible_operator.generate import plural_of
from ansible_operator.wording import failure_message, redact_result

__all__ = [
    "RunsError",
    "default_artifacts_dir",
    "iter_run_dirs",
    "load_run",
    "list_runs",
    "find_run",
    "run_tasks",
    "run_detail",
    "show_run",
    "format_table",
    "main",
]

_STAT_KEYS = ("ok", "changed", "skipped", "failures", "unreachable", "rescued", "ignored")


class RunsError(OperatorError):
    """Nothing matched / unknown run id / unreadable artifacts dir; ``str(e)`` is the user-facing message."""


def _parse_target(target: str) -> tuple[str, str | None, str | None]:
    """``Kind/name``, ``kind.group/name``, ``kinds/name`` or just ``Kind`` → (kind, group, name)."""
    kind_part, _, name = target.partition("/")
    if not kind_part or (_ and not name):
        raise RunsError(f"invalid target {target!r}: expected KIND/NAME (e.g. Memcached/example or"
                        " memcached.cache.example.com/example)")
    kind, dot, group = kind_part.partition(".")
    return kind.lower(), (group.lower() if dot else None), (name or None)


def _matches(run: RunRecord, kind: str, group: str | None, name: str | None) -> bool:
    run_kind = str(run.kind or "")
    if kind not in (run_kind.lower(), plural_of(run_kind)):
        return False
    if group is not None and group != str(run.group or "").lower():
        return False
    return name is None or name == run.name


def list_runs(
    artifacts_dir: Path, *, namespace: str | None = None, target: str | None = None, limit: int = 20
) -> list[RunRecord]:
    """Run records, newest first (run ids sort by start time), filtered by namespace and target."""
    parsed = _parse_target(target) if target else None
    runs = []
    for run_dir in iter_run_dirs(artifacts_dir):
        run = load_run(run_dir)
        if namespace is not None and run.namespace != namespace:
            continue
        if parsed is not None and not _matches(run, *parsed):
            continue
        runs.append(run)
    runs.sort(key=lambda r: str(r.run_id), reverse=True)
    return runs[:limit] if limit > 0 else runs


def find_run(artifacts_dir: Path, run_id: str) -> Path:
    """The directory of ``run_id`` (a unique prefix is enough, as with git hashes)."""
    run_id = run_id.strip()
    if not run_id:
        raise RunsError("empty run id")
    matches = sorted(d for d in iter_run_dirs(artifacts_dir) if d.name.startswith(run_id))
    exact = [d for d in matches if d.name == run_id]
    if len(exact) == 1:
        return exact[0]
    if not matches:
        raise RunsError(f"no run {run_id!r} under {artifacts_dir} (list runs with: ansible-operator runs)")
    if len(matches) > 1:
        names = ", ".join(d.name for d in matches[:5])
        raise RunsError(f"run id {run_id!r} is ambiguous: {names}{' ...' if len(matches) > 5 else ''}")
    return matches[0]


# ---- one run's tasks ---------------------------------------------------------------------------------


def _events(run_dir: Path) -> list[dict[str, Any]]:
    events = []
    for events_dir in sorted((run_dir / "artifacts").glob("*/job_events")):
        for f in events_dir.glob("*.json"):
            try:
                event = json.loads(f.read_text())
            except (OSError, ValueError):
                continue  # a half-written event of a run still going or killed
            if isinstance(event, dict):
                events.append(event)
    events.sort(key=lambda e: (int(e.get("counter") or 0)))
    return events


_RESULT_EVENTS = {
    "runner_on_ok": "ok", "runner_on_failed": "failed", "runner_on_skipped": "skipped",
    "runner_on_unreachable": "unreachable", "runner_item_on_failed": "failed",
}


def run_tasks(run_dir: Path) -> tuple[list[dict[str, Any]], dict[str, dict[str, int]]]:
    """Task results in order, and the per-host recap from ``playbook_on_stats``.

    Each task result: ``task``, ``role``, ``action``, ``host``, ``result`` (ok, changed, failed, skipped,
    unreachable, ignored), ``duration_s``, ``message`` (failed / unreachable / ignored only), ``item``.
    """
    tasks: list[dict[str, Any]] = []
    recap: dict[str, dict[str, int]] = {}
    secrets: set[str] = set()
    for event in _events(run_dir):
        kind = event.get("event")
        data = event.get("event_data") or {}
        if kind in _RESULT_EVENTS:
            res = redact_result(data.get("res") or {}, secrets)
            word = _RESULT_EVENTS[kind]
            if word == "ok" and res.get("changed"):
                word = "changed"
            if word == "failed" and data.get("ignore_errors"):
                word = "ignored"
            entry: dict[str, Any] = {
                "task": data.get("task") or "", "role": data.get("role") or None,
                "action": data.get("resolved_action") or data.get("task_action"),
                "host": data.get("host"), "result": word, "duration_s": data.get("duration"),
                "message": failure_message(res) if word in ("failed", "unreachable", "ignored") else None,
            }
            if kind == "runner_item_on_failed":
                entry["item"] = res.get("item")
            tasks.append(entry)
        elif kind == "playbook_on_stats":
            for label, key in (("ok", "ok"), ("changed", "changed"), ("unreachable", "dark"),
                               ("failed", "failures"), ("skipped", "skipped"), ("rescued", "rescued"),
                               ("ignored", "ignored")):
                for host, n in (data.get(key) or {}).items():
                    recap.setdefault(host, {k: 0 for k in ("ok", "changed", "unreachable", "failed",
                                                           "skipped", "rescued", "ignored")})[label] = n
    return tasks, recap


def run_detail(artifacts_dir: Path, run_id: str) -> dict[str, Any]:
    """``{"run": <run.json>, "tasks": [...], "recap": {...}, "stdout_tail": str|None}`` for ``-o json``."""
    record, detail = _detail(artifacts_dir, run_id)
    return {"run": record.to_json(), **detail}


def _detail(artifacts_dir: Path, run_id: str) -> tuple[RunRecord, dict[str, Any]]:
    run_dir = find_run(artifacts_dir, run_id)
    tasks, recap = run_tasks(run_dir)
    stdout_tail = None
    if not tasks:  # e.g. a syntax error or executor failure before the first task: stdout says why
        for stdout in sorted((run_dir / "artifacts").glob("*/stdout")):
            text = read_text(stdout)
            if text:
                stdout_tail = "\n".join(_strip_ansi(text).splitlines()[-20:])
    return load_run(run_dir), {"tasks": tasks, "recap": recap, "stdout_tail": stdout_tail}


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _strip_ansi(text: str) -> str:
    return _ANSI.sub("", text)


def show_run(artifacts_dir: Path, run_id: str) -> str:
    """A run's header, then every task result (name, host, result, duration; message when it failed),
    then the play recap."""
    run, detail = _detail(artifacts_dir, run_id)
    ns = run.namespace
    generation = "?" if run.generation is None else run.generation
    lines = [
        f"RUN       {run.run_id}",
        f"OBJECT    {run.kind} {ns + '/' if ns else ''}{run.name}"
        f"  ({_api_version(run)}, generation {generation})",
        f"PHASE     {run.phase or '?'}  executor {run.executor or '?'}",
        f"STARTED   {run.started or '?'}  finished {run.finished or '-'}"
        f"  duration {_duration(run)}",
        f"RESULT    {run.result}",
        f"ARTIFACTS {run.artifacts_dir}",
    ]
    if run.error:
        lines.append(f"ERROR     {run.error}")
    lines.append("")
    tasks = detail["tasks"]
    if not tasks:
        lines.append("(no task results recorded)")
        if detail["stdout_tail"]:
            lines += ["", "last lines of stdout:"]
            lines += ["  " + line for line in detail["stdout_tail"].splitlines()]
    previous = None
    for t in tasks:
        title = f"TASK [{t['role'] + ' : ' if t['role'] else ''}{t['task']}]"
        if title != previous:
            lines.append(f"{title}  {t['action'] or ''}".rstrip())
            previous = title
        item = f" (item={json.dumps(t['item'], default=str)})" if "item" in t else ""
        took = f"  {t['duration_s']:.2f}s" if isinstance(t.get("duration_s"), (int, float)) else ""
        lines.append(f"  {t['result']}: {t['host']}{item}{took}")
        if t["message"]:
            lines += ["      " + m for m in t["message"].splitlines()]
    if detail["recap"]:
        lines += ["", "PLAY RECAP"]
        for host, counts in sorted(detail["recap"].items()):
            lines.append(f"  {host}: " + " ".join(f"{k}={v}" for k, v in counts.items()))
    return "\n".join(lines) + "\n"


# ---- table -------------------------------------------------------------------------------------------


def _api_version(run: RunRecord) -> str:
    return f"{run.group}/{run.version}" if run.group else str(run.version)


def _duration(run: RunRecord) -> str:
    seconds = run.duration_s
    if not isinstance(seconds, (int, float)):
        if run.result == "running" and run.started:
            try:
                started = datetime.fromisoformat(str(run.started).replace("Z", "+00:00"))
                seconds = (datetime.now(timezone.utc) - started).total_seconds()
                return _human(seconds) + "+"
            except ValueError:
                return "-"
        return "-"
    return _human(seconds)


def _human(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(round(seconds)), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def _truncate(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def format_table(runs: Iterable[RunRecord], *, message_width: int = 60, wide: bool = False) -> str:
    """A kubectl-style table; ``wide`` (``-o wide``) adds each run's artifacts directory."""
    headers = ["KIND", "NAMESPACE", "NAME", "RUN", "STARTED", "DURATION", "RESULT", "CHANGED", "FAILED TASK",
               "ARTIFACTS"]
    rows = []
    for run in runs:
        stats = run.stats or {}
        failed = run.failed_task
        if failed:
            failed_text = f"{failed.get('name') or '?'}: {failed.get('message') or ''}".rstrip(": ")
        else:
            failed_text = "" if run.result in ("successful", "running") else (run.error or "")
        result = str(run.result)
        if run.phase == "finalize":
            result += " (finalize)"
        rows.append([
            str(run.kind or ""), str(run.namespace or "-"), str(run.name or ""),
            str(run.run_id), str(run.started or "-"), _duration(run), result,
            str(stats.get("changed", "-")), _truncate(str(failed_text), message_width) or "-",
            str(run.artifacts_dir or ""),
        ])
    if not wide:
        headers = headers[:-1]
        rows = [row[:-1] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    out = []
    for row in [headers] + rows:
        out.append("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip())
    return "\n".join(out) + "\n"


# ---- command -----------------------------------------------------------------------------------------


def main(args: Any) -> int:
    """``ansible-operator runs [KIND/NAME] [-n NS] [--show RUN] [-o table|wide|json] [--limit N]
    [--artifacts-dir D]``
    """
    artifacts_dir = Path(args.artifacts_dir).expanduser() if getattr(args, "artifacts_dir", None) \
        else default_artifacts_dir()
    output = getattr(args, "output", "table")
    try:
        if not artifacts_dir.is_dir():
            raise RunsError(f"no runs found: artifacts dir {artifacts_dir} does not exist"
                            " (set --artifacts-dir or $ANSIBLE_OPERATOR_ARTIFACTS to where the operator"
                            " writes)")
        if getattr(args, "show", None):
            if output == "json":
                print(json.dumps(run_detail(artifacts_dir, args.show), indent=2, default=str))
            else:
                sys.stdout.write(show_run(artifacts_dir, args.show))
            return 0
        runs = list_runs(artifacts_dir, namespace=args.namespace, target=args.target, limit=args.limit)
        if not runs:
            in_ns = f"in namespace {args.namespace}" if args.namespace else None
            what = " ".join(filter(None, [args.target, in_ns]))
            raise RunsError(f"no runs found{' for ' + what if what else ''} under {artifacts_dir}")
        if output == "json":
            print(json.dumps([run.to_json() for run in runs], indent=2, default=str))
        else:
            sys.stdout.write(format_table(runs, wide=output == "wide"))
        return 0
    except RunsError as exc:
        print(f"ansible-operator runs: {exc}", file=sys.stderr)
        return 1
