"""The run-artifacts layout: the one module that knows where runs are kept, and writes, reads and prunes them.

    <root>/<group or "core">/<version>/<Kind>/<namespace or _cluster>/<name>/<run_id>/
        run.json                                        RunRecord, written at start and at end of the run
        artifacts/<run_id>/job_events/<n>-<uuid>.json   ansible-runner events (written by the executor)
        artifacts/<run_id>/{stdout,status,rc}

Run directories hold extra vars and task results in plain text, so everything here is private to the
operator's user: the root and every directory down to a run's are 0700 (whatever the umask), ``run.json``
0600; files the executor writes inside a run directory are out of other users' reach through it while it
runs, and 0600 (directories 0700) once it ended (:func:`make_private`).

Disk use is bounded three ways: per object (``maxRunnerArtifacts``: newest N runs, :func:`prune_runs`), per
object lifetime (:func:`remove_runs_of` once the object is gone from the API, :func:`remove_absent` for
objects a complete listing no longer holds, e.g. deleted while the operator was down) and globally
(:func:`cap_total`: oldest runs first until the whole tree fits ``--max-artifacts-size``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import shutil
from dataclasses import asdict, dataclass, field, fields, replace
from datetime import datetime
from pathlib import Path
from typing import Any, Iterator, Mapping, TypedDict

log = logging.getLogger(__name__)

__all__ = [
    "RUN_ID_RE",
    "ObjectPath",
    "default_artifacts_dir",
    "ensure_root",
    "object_dir",
    "new_run_dir",
    "RunRecord",
    "FailedTaskRecord",
    "write_run",
    "iter_run_dirs",
    "iter_object_dirs",
    "load_run",
    "prune_runs",
    "remove_runs_of",
    "remove_absent",
    "Janitor",
    "cap_total",
    "dir_size",
    "parse_size",
    "size_argument",
    "read_text",
    "object_of",
    "recover_interrupted",
    "INTERRUPTED",
]

DEFAULT_MAX_BYTES = 1 << 30
"""``--max-artifacts-size`` default: 1 GiB for the whole tree."""

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGTP]i?|[kKMGTP]B?|B)?\s*$")
_UNITS = {"": 1, "B": 1, "K": 10**3, "KB": 10**3, "k": 10**3, "kB": 10**3, "M": 10**6, "MB": 10**6,
          "G": 10**9, "GB": 10**9, "T": 10**12, "TB": 10**12, "P": 10**15, "PB": 10**15,
          "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50}


def parse_size(text: str) -> int:
    """``1Gi``, ``500Mi``, ``2G``, ``1048576`` → bytes (Kubernetes quantity suffixes); ``0`` means no cap."""
    m = _SIZE.match(str(text))
    if not m or (m.group(2) or "") not in _UNITS:
        raise ValueError(f"invalid size {text!r}: expected a number of bytes with an optional unit"
                         " (Ki, Mi, Gi, Ti, or k, M, G, T), e.g. 1Gi or 500Mi")
    return int(float(m.group(1)) * _UNITS[m.group(2) or ""])


def size_argument(text: str) -> int:
    """``parse_size`` for argparse: a bad value is a one-line usage error (exit 2)."""
    import argparse

    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


RUN_ID_RE = re.compile(r"^\d{8}T\d{6}Z-[0-9a-f]{6}$")
SUMMARY = "run.json"
CLUSTER_NAMESPACE = "_cluster"
CORE_GROUP = "core"


@dataclass(frozen=True)
class ObjectPath:
    """Which object a directory of runs belongs to."""

    group: str
    version: str
    kind: str
    namespace: str | None
    name: str


def default_artifacts_dir() -> Path:
    """``$ANSIBLE_OPERATOR_ARTIFACTS``, else ``$XDG_STATE_HOME/ansible-operator/runs``, else
    ``~/.local/state/ansible-operator/runs`` (the XDG default for state that outlives a process)."""
    explicit = os.environ.get("ANSIBLE_OPERATOR_ARTIFACTS")
    if explicit:
        return Path(explicit).expanduser()
    state = os.environ.get("XDG_STATE_HOME")
    base = Path(state).expanduser() if state else Path.home() / ".local" / "state"
    return base / "ansible-operator" / "runs"


def ensure_root(root: Path) -> Path:
    """Create the artifacts root (0700) and make it private if it already existed."""
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(root, 0o700)
    return root


def object_dir(root: Path, obj: ObjectPath) -> Path:
    return (root / (obj.group or CORE_GROUP) / obj.version / obj.kind / (obj.namespace or CLUSTER_NAMESPACE)
            / obj.name)


def new_run_dir(root: Path, obj: ObjectPath, run_id: str) -> Path:
    """The (new, empty, private) directory of one run."""
    run_dir = object_dir(root, obj) / run_id
    # mkdir's mode is masked by the umask and, with parents=True, not applied to the parents: each level
    # below the root is made here, 0700 explicitly.
    level = root
    for part in run_dir.relative_to(root).parts[:-1]:
        level = level / part
        try:
            level.mkdir(mode=0o700)
        except FileExistsError:
            continue
        os.chmod(level, 0o700)
    run_dir.mkdir(mode=0o700, exist_ok=False)
    os.chmod(run_dir, 0o700)
    return run_dir


def make_private(run_dir: Path) -> None:
    """At the end of a run: what the executor wrote (with the process umask, 0644/0755 typically) becomes
    0600/0700 like the rest of the tree."""
    for dirpath, dirnames, filenames in os.walk(run_dir):
        for name in dirnames:
            _chmod(os.path.join(dirpath, name), 0o700)
        for name in filenames:
            _chmod(os.path.join(dirpath, name), 0o600)


def _chmod(path: str, mode: int) -> None:
    try:
        if not os.path.islink(path):
            os.chmod(path, mode)
    except OSError:  # removed meanwhile (pruning), or not ours: nothing to protect
        pass


class FailedTaskRecord(TypedDict):
    """``run.json``'s ``failed_task``: the task that failed the run."""

    name: str | None
    action: str | None
    role: str | None
    message: str | None
    host: str | None


@dataclass(frozen=True)
class RunRecord:
    """A run's ``run.json``: what ran, when, and how it ended.

    Written by the reconciler when the run starts (``result="running"``) and when it ends; read by
    ``ansible-operator runs``, the janitor (``uid``) and :func:`recover_interrupted`. Files written by
    earlier versions may lack keys: those take the defaults below; unknown keys are ignored.
    """

    run_id: str
    group: str
    version: str
    kind: str
    namespace: str | None
    name: str
    uid: str | None = None
    generation: int | None = None
    phase: str | None = None
    """``reconcile`` or ``finalize``."""
    executor: str | None = None
    started: str | None = None
    finished: str | None = None
    duration_s: float | None = None
    result: str = "unknown"
    """``running`` until it ends, then the run's status (``successful``, ``failed``, ``interrupted``...)."""
    stats: dict[str, int] | None = None
    failed_task: FailedTaskRecord | None = None
    changed_tasks: list[str] = field(default_factory=list)
    error: str | None = None
    artifacts_dir: str | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any], run_dir: Path) -> RunRecord:
        """A record from a ``run.json`` object; the run's identity falls back to what its path says."""
        owner = object_of(run_dir)
        known = {f.name for f in fields(cls)}
        values: dict[str, Any] = {
            "run_id": run_dir.name, "group": owner.group, "version": owner.version, "kind": owner.kind,
            "namespace": owner.namespace, "name": owner.name,
        }
        values.update((k, v) for k, v in data.items() if k in known)
        # what the readers iterate or look into must have its shape, whatever an older file holds
        if not isinstance(values.get("changed_tasks"), list):
            values["changed_tasks"] = []
        for key in ("stats", "failed_task"):
            if not isinstance(values.get(key), dict):
                values[key] = None
        return cls(**values)


def write_run(run_dir: Path, record: RunRecord) -> None:
    """Write ``run.json`` atomically (no reader sees half a file), readable by the operator's user only."""
    path = run_dir / SUMMARY
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(json.dumps(record.to_json(), indent=2, default=str))
    os.replace(tmp, path)


# ---- reading -----------------------------------------------------------------------------------------


def iter_object_dirs(root: Path) -> Iterator[Path]:
    """Every ``<group>/<version>/<Kind>/<ns>/<name>`` directory under ``root``."""
    for path in root.glob("*/*/*/*/*"):
        if path.is_dir():
            yield path


def iter_run_dirs(root: Path) -> Iterator[Path]:
    """Every ``<group>/<version>/<Kind>/<ns>/<name>/<run_id>`` directory under ``root``."""
    for path in root.glob("*/*/*/*/*/*"):
        if path.is_dir() and RUN_ID_RE.match(path.name):
            yield path


def object_of(run_or_object_dir: Path) -> ObjectPath:
    """The object a run directory (or an object directory) belongs to, from its path."""
    parts = run_or_object_dir.parts
    if RUN_ID_RE.match(parts[-1]):
        parts = parts[:-1]
    group, version, kind, namespace, name = parts[-5:]
    return ObjectPath("" if group == CORE_GROUP else group, version, kind,
                      None if namespace == CLUSTER_NAMESPACE else namespace, name)


def _read_record(run_dir: Path) -> RunRecord:
    """The run's ``run.json``; ``OSError``/``ValueError`` when it is missing, unreadable or not an object."""
    loaded = json.loads((run_dir / SUMMARY).read_text())
    if not isinstance(loaded, dict):
        raise ValueError("not a JSON object")
    return RunRecord.from_json(loaded, run_dir)


def load_run(run_dir: Path) -> RunRecord:
    """The run's ``run.json`` (``artifacts_dir`` set to where it is now); reconstructed from the path and
    ansible-runner's ``status`` file when it is missing or unreadable (``error`` says which)."""
    try:
        record = _read_record(run_dir)
    except (OSError, ValueError) as exc:
        problem = "run.json missing" if isinstance(exc, FileNotFoundError) else f"run.json unreadable: {exc}"
        runner_status = read_text(run_dir / "artifacts" / run_dir.name / "status")
        record = RunRecord.from_json({"started": _started_from_id(run_dir.name),
                                      "result": runner_status or "unknown", "error": problem}, run_dir)
    return replace(record, artifacts_dir=str(run_dir))


def read_text(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _started_from_id(run_id: str) -> str:
    return datetime.strptime(run_id[:16], "%Y%m%dT%H%M%SZ").strftime("%Y-%m-%dT%H:%M:%SZ")


# ---- pruning -----------------------------------------------------------------------------------------


def prune_runs(obj_dir: Path, *, keep: int) -> None:
    """Keep the newest ``keep`` run directories of one object (run ids sort by time); 0 keeps all."""
    if keep <= 0 or not obj_dir.is_dir():
        return
    runs = sorted((p for p in obj_dir.iterdir() if p.is_dir() and RUN_ID_RE.match(p.name)),
                  key=lambda p: p.name)
    for old in runs[:-keep]:
        shutil.rmtree(old, ignore_errors=True)


def remove_runs_of(root: Path, obj: ObjectPath, uid: str | None, *,
                   keep: frozenset[Path] | set[Path] = frozenset()) -> int:
    """Remove the runs of one object *incarnation* (its ``uid``: a re-created object with the same name keeps
    its own runs), except those in ``keep`` (in progress). ``uid`` None removes every run of the name; runs
    without a readable uid are otherwise left to :func:`cap_total` (one may be a run just being created).
    Empty directories up to ``root`` are removed. Returns how many runs were removed."""
    target = object_dir(root, obj)
    if not target.is_dir():
        return 0
    removed = 0
    for run_dir in list(target.iterdir()):
        if not run_dir.is_dir() or not RUN_ID_RE.match(run_dir.name) or run_dir in keep:
            continue
        run_uid = load_run(run_dir).uid
        if uid is None or run_uid == uid:
            shutil.rmtree(run_dir, ignore_errors=True)
            removed += 1
    parent = target
    while parent != root and root in parent.parents:
        try:
            parent.rmdir()  # only when empty
        except OSError:
            break
        parent = parent.parent
    return removed


def remove_absent(root: Path, under: Path, present: set[tuple[str | None, str, str | None]], *, before: str,
                  keep: frozenset[Path] | set[Path] = frozenset()) -> int:
    """Remove the runs under ``under`` (a kind's or a kind-and-namespace's directory) of objects not in
    ``present`` ((namespace, name, uid) of every object a complete listing held), except runs in ``keep``
    and runs whose id is not older than ``before`` (a run id prefix, ``YYYYmmddTHHMMSSZ``: runs that began
    after the listing belong to objects it could not know). Returns how many runs were removed."""
    if not under.is_dir():
        return 0
    removed = 0
    for run_dir in [d for d in iter_run_dirs(root) if under in d.parents]:
        if run_dir in keep or run_dir.name[:16] >= before:
            continue
        owner = object_of(run_dir)
        uid = load_run(run_dir).uid
        if (owner.namespace, owner.name, uid) in present:
            continue
        shutil.rmtree(run_dir, ignore_errors=True)
        removed += 1
        parent = run_dir.parent
        while parent != root and root in parent.parents:
            try:
                parent.rmdir()
            except OSError:
                break
            parent = parent.parent
    if removed:
        log.info("removed %d run(s) of objects that no longer exist", removed)
    return removed


def dir_size(path: Path) -> int:
    """Bytes used by the files under ``path`` (apparent size, not following symlinks)."""
    total = 0
    for dirpath, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_size
            except OSError:
                pass
    return total


def cap_total(root: Path, max_bytes: int, *, keep: frozenset[Path] = frozenset()) -> list[Path]:
    """Remove whole runs, oldest first (across all objects), until the tree holds at most ``max_bytes``.

    Runs in ``keep`` (e.g. the ones in progress) are never removed. Returns the removed run directories.
    ``max_bytes`` <= 0 disables the cap.
    """
    if max_bytes <= 0 or not root.is_dir():
        return []
    runs = [(d.name, d, dir_size(d)) for d in iter_run_dirs(root)]
    total = sum(size for _, _, size in runs)
    removed: list[Path] = []
    for _, run_dir, size in sorted(runs, key=lambda r: r[0]):
        if total <= max_bytes:
            break
        if run_dir in keep:
            continue
        shutil.rmtree(run_dir, ignore_errors=True)
        total -= size
        removed.append(run_dir)
        try:
            run_dir.parent.rmdir()  # the object's last run: drop its directory too
        except OSError:
            pass
    if removed:
        log.info("artifacts over %d bytes: removed the %d oldest run(s)", max_bytes, len(removed))
    return removed


class Janitor:
    """Keeps the whole artifacts tree under ``max_bytes``: after runs finish, one :func:`cap_total` pass at
    most every ``interval`` seconds, in a worker thread (walking the tree never blocks the event loop)."""

    def __init__(self, root: Path, max_bytes: int, *, interval: float = 10.0) -> None:
        self.root = root
        self.max_bytes = max_bytes
        self.interval = interval
        self.active: set[Path] = set()
        """Run directories in progress: never removed."""
        self._task: asyncio.Task[None] | None = None
        self._background: set[asyncio.Task[Any]] = set()

    def poke(self) -> None:
        """A run finished: schedule a pass unless one is pending."""
        if self.max_bytes <= 0 or (self._task is not None and not self._task.done()):
            return
        self._task = asyncio.get_running_loop().create_task(self._pass(), name="artifacts-janitor")

    async def _pass(self) -> None:
        await asyncio.sleep(self.interval)
        try:
            await asyncio.to_thread(cap_total, self.root, self.max_bytes, keep=frozenset(self.active))
        except Exception:  # disk trouble must never stop the operator
            log.warning("artifacts cap pass failed", exc_info=True)

    def in_background(self, fn: Any, *args: Any, **kwargs: Any) -> None:
        """Run blocking clean-up work off the loop (or inline when there is no loop: tests, shutdown)."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            fn(*args, **kwargs)
            return
        task = loop.create_task(asyncio.to_thread(fn, *args, **kwargs))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def settle(self) -> None:
        """Wait for the scheduled pass and the background removals (tests, shutdown)."""
        while True:
            tasks = list(self._background) + ([self._task] if self._task and not self._task.done() else [])
            if not tasks:
                return
            await asyncio.gather(*tasks, return_exceptions=True)

    async def close(self) -> None:
        tasks = list(self._background) + ([self._task] if self._task else [])
        if self._task is not None:
            self._task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


# ---- runs a previous operator process left unfinished ------------------------------------------------

INTERRUPTED = "interrupted"
"""``result`` of a run whose operator died (SIGKILL, OOM, node loss) before it finished."""
_LOCK = ".operator.lock"
_held_locks: dict[Path, int] = {}


def recover_interrupted(root: Path) -> int:
    """Mark runs left ``running`` by an operator that is gone as ``interrupted``; returns how many.

    Called once at startup. Every operator process using ``root`` holds a shared ``flock`` on
    ``<root>/.operator.lock`` for its lifetime (the kernel drops it when the process dies, even by
    SIGKILL); the sweep runs only if this process can take it exclusively, i.e. no other live operator
    (a second replica on the same volume) might still be running one of those runs.
    """
    import fcntl  # noqa: PLC0415 - POSIX only, like the executors

    fd = _held_locks.get(root)
    if fd is None:
        fd = os.open(root / _LOCK, os.O_RDWR | os.O_CREAT, 0o600)
        _held_locks[root] = fd
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        fcntl.flock(fd, fcntl.LOCK_SH)
        log.info("artifacts: another operator is using %s; not sweeping its running runs", root)
        return 0
    swept = 0
    try:
        for run_dir in iter_run_dirs(root):
            try:
                record = _read_record(run_dir)
            except (OSError, ValueError):
                continue
            if record.result != "running":
                continue
            record = replace(record, result=INTERRUPTED, error="the operator stopped during this run"
                             " (found unfinished at the next start)")
            try:
                write_run(run_dir, record)
                swept += 1
            except OSError as exc:
                log.warning("artifacts: cannot mark %s interrupted: %s", run_dir, exc)
    finally:
        fcntl.flock(fd, fcntl.LOCK_SH)  # downgrade: later operators see us alive
    if swept:
        log.warning("artifacts: %d run(s) left running by a previous operator process marked interrupted",
                    swept)
    return swept
