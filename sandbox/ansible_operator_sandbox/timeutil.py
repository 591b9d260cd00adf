"""Timestamps as Kubernetes writes them (RFC 3339, UTC, second precision) and kubectl-style ages."""

from __future__ import annotations

import datetime as dt


def now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def rfc3339(t: dt.datetime) -> str:
    return t.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def now_rfc3339() -> str:
    return rfc3339(now())


def parse(s: str) -> dt.datetime | None:
    try:
        return dt.datetime.fromisoformat(s.replace("Z", "+00:00"))
    except (TypeError, ValueError):
        return None


def human_duration(seconds: float) -> str:
    """kubectl's ``duration.HumanDuration`` (e.g. ``5s``, ``3m20s``, ``2d3h``)."""
    s = int(max(seconds, 0))
    if s < 60 * 2:
        return f"{s}s"
    m = s // 60
    if m < 10:
        return f"{m}m{s % 60}s" if s % 60 else f"{m}m"
    if m < 60 * 3:
        return f"{m}m"
    h = m // 60
    if h < 8:
        return f"{h}h{m % 60}m" if m % 60 else f"{h}h"
    if h < 48:
        return f"{h}h"
    d = h // 24
    if h < 24 * 8:
        return f"{d}d{h % 24}h" if h % 24 else f"{d}d"
    if d < 365 * 2:
        return f"{d}d"
    return f"{d // 365}y"


def age(timestamp: str | None) -> str:
    t = parse(timestamp or "")
    if t is None:
        return "<unknown>"
    return human_duration((now() - t).total_seconds())


def duration_between(start: str, end: str) -> str:
    """``HumanDuration(end - start)`` (a finished Job's Duration column); empty if either does not parse."""
    a, b = parse(start), parse(end)
    if a is None or b is None:
        return ""
    return human_duration((b - a).total_seconds())
