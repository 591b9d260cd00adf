"""Fast module tasks without a fork: an allowed module's AnsiballZ script run in the calling process.

``warm.fast_modules`` runs a fast module (``kubernetes.core.``, ``ansible_operator.util.``) in a fork of the
process that runs the task, which since ``warm.tasks`` is the run child itself. Measured per Memcached
task (bench, 2 cores, idle): 19-36 ms of wall time, of which the module's own code, client setup and API
calls are ~20 ms; the rest, and most of the fork's 10-30 ms of CPU, is the kernel forking, copying on
write and tearing down a ~100 MB process that lives for one module call.

This module runs *the same AnsiballZ script* (through ``fast_modules._execute``, the function the fork
runs, which the caller hands in) in the calling thread, and isolates what the fork isolated, item by item:

* **Output.** ``sys.stdout``/``sys.stderr`` are routed per thread while the module runs: what this thread
  prints (the result JSON, a traceback) is the module's stdout/stderr; other threads of the run child
  (Ansible's results thread printing callbacks) keep writing to the run's stream.
* **Exit.** ``sys.exit`` is caught as the fork's exit status was; an exception escaping the module is
  printed and gives rc 1, as ``python AnsiballZ_x.py`` would.
* **module_utils' side (2.19+).** This thread sees the module side of ``ansible.module_utils._internal``
  (what ``become_module_side`` sets in a fork); every other thread keeps the controller's
  (``ansible_compat.module_side_per_thread``).
* **module_utils' globals.** The module's arguments (``basic._ANSIBLE_ARGS`` and 2.19's parsed copy) and
  the global warning/deprecation lists start empty, as in a new process, and get their values back after.
* **Process state the wrapper and ``AnsibleModule`` change.** ``sys.argv``, ``sys.path`` and the importer
  cache entries of the payload's zip, modules imported from that zip, ``os.environ`` (the command's
  variable assignments, which carry the task's ``environment:``), the working directory, the locale and
  the open-files limit are saved before and restored after.
* **Exit handlers.** What the module registers with ``atexit`` (``AnsibleModule.tmpdir``'s removal) runs
  when the module returns, as it would at its process's exit. Except the handlers of libraries whose
  state the run's modules share on purpose (below): they clean up after that state, so they run when the
  run child ends (:func:`run_deferred`). kubernetes' kubeconfig loader writes a kubeconfig's embedded
  certificates and key (``certificate-authority-data``, ``client-*-data``) to temporary files and removes
  them at exit; the client kubernetes.core pools for the run's next tasks loads them on each new
  connection.

Shared on purpose, as the fork shared them with its parent: imported modules, and module-level caches
such as kubernetes.core's API client pool, so the tasks of one run reuse one client and its connection
pool for the same connection settings (a run child lives for one run).

Not isolated, which is why only the allowed prefixes run this way and any other module keeps its own
process: a module that calls ``os._exit``, leaves threads running, or damages the interpreter takes the
run child with it (the run then fails as a crashed run child does). A task ``timeout`` interrupts the
module in this thread as it interrupts the task; the state above is restored on the way out. Only one
module runs at a time in a process; a second thread that asks meanwhile gets the fork.
"""

from __future__ import annotations

import atexit
import io
import locale
import os
import sys
import threading
from typing import Any, Callable

from ansible_operator.executors import ansible_compat

_LOCK = threading.Lock()
_module_side: Any = None
# Top-level packages whose exit handlers wait for the end of the run child (see "Exit handlers" above).
SHARED_STATE_PACKAGES = ("kubernetes",)
_deferred: list[tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]] = []


class _ThreadRouted:
    """A text stream that is ``mine`` for one thread and ``other`` for every other thread."""

    def __init__(self, other: Any, mine: io.TextIOWrapper, owner: int) -> None:
        self._other = other
        self._mine = mine
        self._owner = owner

    def _target(self) -> Any:
        return self._mine if threading.get_ident() == self._owner else self._other

    def write(self, text: str) -> int:
        written: int = self._target().write(text)
        return written

    def flush(self) -> None:
        self._target().flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._target(), name)


def _captured() -> tuple[io.BytesIO, io.TextIOWrapper]:
    raw = io.BytesIO()
    return raw, io.TextIOWrapper(raw, encoding="utf-8", write_through=True)


class _Saved:
    """Process state a module may change, taken before it runs and put back after."""

    def __init__(self) -> None:
        self.argv = list(sys.argv)
        self.path = sys.path
        self.path_items = list(sys.path)
        self.importer_cache = set(sys.path_importer_cache)
        self.environ = dict(os.environ)
        self.cwd = os.getcwd()
        self.locale = locale.setlocale(locale.LC_ALL)
        self.nofile = _nofile()
        self.module_utils = _module_utils_globals()

    def restore(self) -> None:
        added_paths = [p for p in sys.path if p not in self.path_items]
        sys.argv[:] = self.argv
        sys.path = self.path
        sys.path[:] = self.path_items
        for key in set(sys.path_importer_cache) - self.importer_cache:
            sys.path_importer_cache.pop(key, None)
        _drop_modules_from(added_paths)
        _restore_environ(self.environ)
        try:
            os.chdir(self.cwd)
        except OSError:
            pass
        try:
            locale.setlocale(locale.LC_ALL, self.locale)
        except locale.Error:
            pass
        _set_nofile(self.nofile)
        _set_module_utils_globals(self.module_utils)


def _nofile() -> tuple[int, int] | None:
    try:
        import resource

        return resource.getrlimit(resource.RLIMIT_NOFILE)
    except (ImportError, OSError, ValueError):
        return None


def _set_nofile(limits: tuple[int, int] | None) -> None:
    if limits is None or _nofile() == limits:
        return
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_NOFILE, limits)
    except (OSError, ValueError):
        pass


def _drop_modules_from(paths: list[str]) -> None:
    """Forget modules the payload's zip provided (only the module's run put the zip on ``sys.path``, so
    they were imported during it): the zip is gone once the module returns."""
    if not paths:
        return
    for name, module in list(sys.modules.items()):
        origin = str(getattr(module, "__file__", None) or "")
        if any(origin.startswith(path) for path in paths):
            sys.modules.pop(name, None)


def _restore_environ(saved: dict[str, str]) -> None:
    for key in [k for k in os.environ if k not in saved]:
        del os.environ[key]
    for key, value in saved.items():
        if os.environ.get(key) != value:
            os.environ[key] = value


_ARGUMENT_GLOBALS = ("_ANSIBLE_ARGS", "_ANSIBLE_PROFILE", "_PARSED_MODULE_ARGS")


def _module_utils_globals() -> dict[str, Any]:
    """module_utils' per-process module state: the arguments and the collected warnings/deprecations."""
    from ansible.module_utils import basic
    from ansible.module_utils.common import warnings

    saved: dict[str, Any] = {name: getattr(basic, name) for name in _ARGUMENT_GLOBALS if hasattr(basic, name)}
    for name in ("_global_warnings", "_global_deprecations"):
        collected = getattr(warnings, name, None)
        if collected is not None:
            saved[name] = collected.copy()
    return saved


def _set_module_utils_globals(values: dict[str, Any]) -> None:
    from ansible.module_utils import basic
    from ansible.module_utils.common import warnings

    for name in _ARGUMENT_GLOBALS:
        if hasattr(basic, name):
            setattr(basic, name, values.get(name))
    for name in ("_global_warnings", "_global_deprecations"):
        collected = getattr(warnings, name, None)
        if collected is not None:
            collected.clear()
            if name not in values:
                continue
            if isinstance(collected, dict):  # 2.19+: summaries as keys
                collected.update(values[name])
            else:  # 2.16 - 2.18: lists
                collected.extend(values[name])


def _fresh_module_utils() -> None:
    """What a new module process starts with: no arguments, no warnings, no deprecations."""
    _set_module_utils_globals({})


class _ExitHandlers:
    """``atexit.register`` for one thread: the module's handlers, to run when it returns."""

    def __init__(self, owner: int) -> None:
        self.owner = owner
        self.handlers: list[tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]] = []
        self.original = atexit.register

    def register(self, func: Callable[..., Any], *args: Any, **kwargs: Any) -> Callable[..., Any]:
        if threading.get_ident() != self.owner:
            return self.original(func, *args, **kwargs)
        module = getattr(func, "__module__", None) or ""
        if module.partition(".")[0] in SHARED_STATE_PACKAGES:
            _deferred.append((func, args, kwargs))
        else:
            self.handlers.append((func, args, kwargs))
        return func

    def run(self) -> None:
        while self.handlers:
            func, args, kwargs = self.handlers.pop()
            try:
                func(*args, **kwargs)
            except Exception:  # as at interpreter exit: a failing handler does not stop the others
                pass


def run_deferred() -> None:
    """At the end of the run child (it leaves through ``os._exit``, so ``atexit`` never runs there): the
    exit handlers modules registered for shared state, newest first, as at an interpreter's exit."""
    while _deferred:
        func, args, kwargs = _deferred.pop()
        try:
            func(*args, **kwargs)
        except Exception:
            pass


def prepare() -> None:
    """Once per run child, before the first inline module: the per-thread module_utils side (2.19+)."""
    global _module_side
    _module_side = ansible_compat.module_side_per_thread()


Outcome = tuple[int, bytes, bytes]


def run_inline(plan: Any, cwd: str | None, execute: Callable[[Any], int]) -> Outcome | None:
    """Run ``plan`` (a ``fast_modules.ForkPlan``) here with ``execute`` (what the fork runs for it): the
    ``(rc, stdout, stderr)`` the fork would give, or None if this process cannot (another thread is
    running a module, no working directory): the caller forks instead."""
    if not _LOCK.acquire(blocking=False):
        return None
    try:
        return _run_locked(plan, cwd, execute)
    finally:
        _LOCK.release()


def _run_locked(plan: Any, cwd: str | None, execute: Callable[[Any], int]) -> Outcome | None:
    try:
        saved = _Saved()
    except OSError:  # no working directory to come back to: the fork needs none
        return None
    me = threading.get_ident()
    out_raw, out = _captured()
    err_raw, err = _captured()
    streams = (sys.stdout, sys.stderr)
    exits = _ExitHandlers(me)
    code = 1
    try:
        with _routed(streams, out, err, me), ansible_compat.module_side_in_this_thread(_module_side):
            atexit.register = exits.register  # type: ignore[assignment]
            try:
                if cwd:
                    os.chdir(cwd)
                os.environ.update(plan.env)
                _fresh_module_utils()
                code = execute(plan)
            finally:
                atexit.register = exits.original
                exits.run()
    finally:
        saved.restore()
    return code, out_raw.getvalue(), err_raw.getvalue()


class _routed:
    """``sys.stdout``/``sys.stderr`` are the captures for thread ``owner`` within the block."""

    def __init__(self, streams: tuple[Any, Any], out: io.TextIOWrapper, err: io.TextIOWrapper,
                 owner: int) -> None:
        self._streams = streams
        self._out = out
        self._err = err
        self._owner = owner

    def __enter__(self) -> None:
        sys.stdout = _ThreadRouted(self._streams[0], self._out, self._owner)
        sys.stderr = _ThreadRouted(self._streams[1], self._err, self._owner)

    def __exit__(self, *exc: Any) -> None:
        self._out.flush()
        self._err.flush()
        sys.stdout, sys.stderr = self._streams
