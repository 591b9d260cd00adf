"""The executor interface: "run this playbook or role with these extra vars, stream its events".

The queue and status code only ever see this interface, so the plain ansible-runner executor
(``executors/runner.py``) and the warm forking executor (``executors/warm/executor.py``) are interchangeable.

Events are plain dicts exactly as ansible-runner emits them (``event``, ``uuid``, ``counter``,
``stdout``, ``event_data`` with ``task``, ``task_action``, ``host``, ``res``, ``ok``/``changed``/... for
``playbook_on_stats``). ``on_event`` is always called on the event-loop thread, in emission order,
while the run is still going (never parsed after the fact from files).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Literal, Mapping, Protocol

EventCallback = Callable[[dict[str, Any]], None]

RunStatus = Literal["successful", "failed", "timeout", "canceled", "error"]


@dataclass(frozen=True)
class RunRequest:
    """Everything one run needs. Exactly one of ``playbook`` / ``role`` is set."""

    run_id: str
    """Unique, sortable id, e.g. ``20261122T134501Z-3f9a2c``; also the artifacts sub-directory name."""
    private_data_dir: Path
    """Private to this run; the executor creates it (inventory, env/extravars, project)."""
    extra_vars: Mapping[str, Any]
    """May contain ``varsfile.Unsafe`` strings; written to a 0600 file, never on a command line."""
    playbook: Path | None = None
    role: str | None = None
    """A role directory path or a collection FQCN (``namespace.collection.role``)."""
    verbosity: int = 2
    timeout: float | None = None
    """Seconds; the run is stopped and reported as ``timeout`` after this."""
    envvars: Mapping[str, str] = field(default_factory=dict)
    """Extra environment for the run (e.g. K8S_AUTH_KUBECONFIG pointing at the per-run kubeconfig)."""
    roles_path: tuple[Path, ...] = ()
    collections_path: tuple[Path, ...] = ()


@dataclass(frozen=True)
class RunOutcome:
    status: RunStatus
    rc: int | None
    artifacts_dir: Path
    error: str | None = None
    """Executor-level problem (could not start, worker crashed, timeout) in one line; None for a normal
    run."""


class Executor(Protocol):
    name: str

    async def start(self) -> None: ...

    async def run(self, request: RunRequest, on_event: EventCallback) -> RunOutcome:
        """Run to completion. Cancelling the awaiting task stops the run (status ``canceled``)."""
        ...

    async def close(self) -> None: ...

    async def reserved_names(self) -> frozenset[str]:
        """Every variable name the ansible-core of the runs gives a meaning of its own (see
        :mod:`ansible_operator.executors.reserved`)."""
        ...
