"""One run inside a child forked from the zygote: re-point Ansible's import-time state, run the playbook.

The zygote imported Ansible with *its* environment, so everything Ansible resolved at import time is
stale for this run and is reset here explicitly (setting environment variables after import does nothing
for these):

* ``ansible.constants``: every constant whose environment variable differs between the zygote's
  environment and this run's is re-evaluated through ``C.config.get_config_value`` after the run's
  environment is applied (e.g. ``ANSIBLE_ROLES_PATH`` -> ``C.DEFAULT_ROLES_PATH``,
  ``ANSIBLE_CACHE_PLUGIN_CONNECTION`` -> ``C.CACHE_PLUGIN_CONNECTION``). Plugin *options* are read from
  the environment when a plugin is loaded, so they need nothing. Plugin *search paths*
  (``ANSIBLE_ACTION_PLUGINS``...) were baked into the loaders and are not re-applied.
* ``C.DEFAULT_LOCAL_TMP``: a fresh directory per run (the zygote's one is shared by all children); built
  AnsiballZ payloads are shared between runs through :mod:`~ansible_operator.executors.warm.payloads` instead.
* roles path: ``ANSIBLE_ROLES_PATH`` from the run's environment (``datadir.prepare`` puts the role's
  parent and ``RunRequest.roles_path`` there) becomes ``C.DEFAULT_ROLES_PATH`` through the rule above.
* collections: the already-installed ``_AnsibleCollectionFinder`` gets this run's ``C.COLLECTIONS_PATHS``
  (from ``ANSIBLE_COLLECTIONS_PATH``) and its path caches are dropped.
* verbosity, inventory and extra vars: CLI arguments to ``PlaybookCLI`` (``-v``, ``-i``, ``-e @file``),
  parsed fresh in each child (``context.CLIARGS``, ``display.verbosity``).
* ansible-runner's ``awx_display`` callback: its ``EventContext`` read ``AWX_ISOLATED_DATA_DIR`` when it
  was imported in the zygote; its partial-event writer is replaced by one for this run's artifacts dir.
* colour: ``ansible.utils.color.ANSIBLE_COLOR`` was decided from the zygote's (non-tty) stdout; it is
  set as ansible-runner's pseudo-terminal would (on unless ``ANSIBLE_NOCOLOR``), so event ``stdout`` matches.

Events: ansible-runner's own ``OutputEventFilter`` decodes the callback's stdout markers exactly as
ansible-runner's parent process does, and :class:`EventSink` repeats ``Runner.event_callback`` (merge the
partial event file, add ``runner_ident``/``created``, write ``job_events/<counter>-<uuid>.json``), then
pushes the event to the zygote at once, so the operator sees it live.
"""

from __future__ import annotations

import collections
import gc
import json
import os
import shutil
import signal
import stat
import sys
import tempfile
import threading
import time
import traceback
import warnings
from typing import Any

from ansible_operator.executors import ansible_compat
from ansible_operator.executors.lifetime import die_with_parent
from ansible_operator.executors.warm.protocol import (
    CHILD_TAG_ERROR,
    CHILD_TAG_EVENT,
    CHILD_TAG_RESULT,
    RunSpec,
)

RUNNER_TIMEOUT_RC = 254


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


class EventSink:
    """``ansible_runner.runner.Runner.event_callback`` for one run, plus a live push to the zygote."""

    def __init__(self, event_fd: int, ident: str, artifacts_dir: str) -> None:
        self._fd = event_fd
        self._ident = ident
        self._events_dir = os.path.join(artifacts_dir, "job_events")
        self.partials: dict[str, str] | None = None
        """In-process hand-over of awx_display's partial event data (see :class:`InProcessPartials`);
        None: read the ``<uuid>-partial.json`` files, as ansible-runner does."""

    def send(self, tag: bytes, payload: dict[str, Any]) -> None:
        self._send_encoded(tag, json.dumps(payload))

    def _send_encoded(self, tag: bytes, encoded: str) -> None:
        _write_all(self._fd, tag + encoded.encode("utf-8") + b"\n")

    def _merge_partial(self, event_data: dict[str, Any]) -> None:
        uuid = event_data["uuid"]
        if self.partials is not None:
            partial = self.partials.pop(uuid, None)
            if partial is not None:
                event_data.update(json.loads(partial))
                return
        path = os.path.join(self._events_dir, f"{uuid}-partial.json")
        try:
            with open(path, encoding="utf-8") as fh:
                event_data.update(json.load(fh))
            os.remove(path)
        except OSError:
            pass  # verbose lines have no partial file

    def __call__(self, event_data: dict[str, Any]) -> None:
        import datetime

        if "uuid" not in event_data:
            return  # the filter's final {'event': 'EOF'}; ansible-runner drops it too
        event_data["runner_ident"] = self._ident
        self._merge_partial(event_data)
        if "created" not in event_data:
            event_data["created"] = datetime.datetime.now(datetime.timezone.utc).isoformat()
        full = os.path.join(self._events_dir, f"{event_data['counter']}-{event_data['uuid']}.json")
        tmp = full + ".tmp"
        encoded = json.dumps(event_data)  # once, for the job_events file and the pipe alike
        with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, stat.S_IRUSR | stat.S_IWUSR),
                  "w", encoding="utf-8") as fh:
            fh.write(encoded)
        os.rename(tmp, full)
        self._send_encoded(CHILD_TAG_EVENT, encoded)


class InProcessPartials:
    """awx_display's partial-event writer, handing the data to :class:`EventSink` in memory.

    ansible-runner's ``IsolatedFileWrite`` writes each event's data to ``job_events/<uuid>-partial.json``
    (temp file + rename) for ansible-runner's *parent* process to read and delete. Here the callback, the
    output filter and the sink run in the same process, so the same JSON text (encoded with the same
    encoder) goes through a dict instead: no file written, renamed, read and removed per event. The
    ``job_events/<counter>-<uuid>.json`` files and the events are unchanged.
    """

    def __init__(self, encoder: Any, store: dict[str, str]) -> None:
        self._encoder = encoder
        self._store = store

    def set(self, key: str, value: Any) -> None:
        self._store[key[len(":1:ev-"):]] = json.dumps(value, cls=self._encoder)


class PtyLikeStdout:
    """``sys.stdout``/``sys.stderr`` for the child: what ansible-runner's pseudo-terminal delivers.

    A pty turns ``\\n`` into ``\\r\\n`` and merges stdout with stderr; reproducing that keeps event
    ``stdout``/``start_line``/``end_line`` identical to the runner executor's.
    """

    encoding = "utf-8"
    errors = "replace"

    def __init__(self, event_filter: Any) -> None:
        self._filter = event_filter
        self._lock = threading.RLock()

    def write(self, data: str) -> int:
        with self._lock:
            self._filter.write(data.replace("\r\n", "\n").replace("\n", "\r\n"))
        return len(data)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        with self._lock:
            self._filter.flush()

    def isatty(self) -> bool:
        return False

    def getvalue(self) -> str:
        """Nothing held back: 2.19+ ``WorkerProcess._run`` warns about what a worker's ``StringIO`` stdout
        caught; a task run in this process (``warm.tasks``) writes to the run's stream instead."""
        return ""

    def fileno(self) -> int:
        import io

        raise io.UnsupportedOperation("fileno")

    def close(self) -> None:
        with self._lock:
            self._filter.close()


def _apply_environment(run_env: dict[str, str]) -> None:
    """Apply the run's environment and re-evaluate every Ansible constant it affects."""
    from ansible import constants as C

    if "ANSIBLE_CONFIG" in run_env and run_env["ANSIBLE_CONFIG"] != os.environ.get("ANSIBLE_CONFIG"):
        # the config file was parsed once, in the zygote; re-reading it per run is not supported
        raise RuntimeError("ANSIBLE_CONFIG cannot differ per run with the warm executor; set it in the"
                           " operator's environment or use --executor runner")
    before = dict(os.environ)
    os.environ.update(run_env)
    changed = {key for key in set(before) | set(os.environ) if before.get(key) != os.environ.get(key)}
    if not changed:
        return
    namespace = vars(C)
    for name, definition in C.config.get_configuration_definitions().items():
        if name == "DEFAULT_LOCAL_TMP":
            continue  # replaced per run below; re-evaluating would create a stray directory
        env_names = {entry.get("name") for entry in definition.get("env") or ()}
        if env_names & changed:
            setattr(C, name, C.config.get_config_value(name, variables=namespace))


def _point_collection_finder() -> None:
    """Give the already-installed collection finder this run's collection search path."""
    from ansible import constants as C
    from ansible.utils.collection_loader import AnsibleCollectionConfig

    finder = AnsibleCollectionConfig.collection_finder
    if finder is None:  # the zygote always installs one; be explicit if that ever changes
        raise RuntimeError("the zygote did not install Ansible's collection finder")
    # the same path list a fresh process computes in plugins.loader._configure_collection_loader
    paths = ansible_compat.collection_finder_paths(C.COLLECTIONS_PATHS)
    fresh = type(finder)(paths, C.COLLECTIONS_SCAN_SYS_PATH)  # computes paths only; not installed
    finder._n_configured_paths = fresh._n_configured_paths
    finder._n_cached_collection_paths = None
    finder._n_cached_collection_qualified_paths = None
    finder._reload_hack("ansible_collections")
    _forget_moved_collections(finder._n_collection_paths)


def _forget_moved_collections(search_paths: list[str]) -> None:
    """Drop collections the zygote imported (kubernetes.core) that this run's path resolves elsewhere.

    A fresh ansible-playbook would import them from the run's collection path, so must we: their
    modules leave ``sys.modules`` and the plugin loaders' caches, and get imported again on use.
    """
    from ansible.plugins.loader import get_all_plugin_loaders

    # only collection packages (ansible_collections.<ns>.<name>); the zygote holds thousands of modules
    for name, module in [(n, m) for n, m in sys.modules.items()
                         if n.startswith("ansible_collections.") and n.count(".") == 2]:
        parts = name.split(".")
        if not getattr(module, "__path__", None):
            continue
        loaded_from = os.path.realpath(list(module.__path__)[0])
        wanted = next((os.path.join(p, *parts) for p in search_paths
                       if os.path.isdir(os.path.join(p, *parts))), None)
        if wanted is None or os.path.realpath(wanted) == loaded_from:
            continue
        # the namespace package too: its __path__ was computed from the zygote's search path
        namespace = ".".join(parts[:2])
        for key in [k for k in sys.modules if k == namespace or k.startswith(namespace + ".")]:
            del sys.modules[key]
        for _, plugin_loader in get_all_plugin_loaders():
            for path in [p for p in plugin_loader._module_cache if str(p).startswith(loaded_from)]:
                del plugin_loader._module_cache[path]
            for by_name in plugin_loader._plugin_path_cache.values():
                for key, value in list(by_name.items()):
                    if str(getattr(value, "path", value)).startswith(loaded_from):
                        del by_name[key]


def _repoint_awx_display(artifacts_dir: str, sink: EventSink | None = None) -> None:
    """``sink``: hand partial event data to it in memory (:class:`InProcessPartials`) if awx_display has
    the expected writer; None: ansible-runner's ``<uuid>-partial.json`` files."""
    from ansible.plugins.loader import callback_loader

    plugin_class = callback_loader.get("awx_display", class_only=True)
    module = sys.modules[plugin_class.__module__]
    writer = module.IsolatedFileWrite()  # reads AWX_ISOLATED_DATA_DIR, already set to artifacts_dir
    writer.private_data_dir = artifacts_dir
    encoder = getattr(module, "AnsibleJSONEncoderLocal", None)
    if sink is not None and encoder is not None and callable(getattr(writer, "set", None)):
        sink.partials = {}
        module.event_context.cache = InProcessPartials(encoder, sink.partials)
    else:
        module.event_context.cache = writer
    module.event_context._global_ctx = {}
    _plain_display_until_callback_loads(module)


def _plain_display_until_callback_loads(module: Any) -> None:
    """Print the preamble (version banner, config file, inventory parsing) as plain lines.

    Under ansible-runner, awx_display is imported (and wraps ``Display.display``) only when the
    TaskQueueManager loads the stdout callback, so earlier lines reach the event filter without event
    markers and become one ``verbose`` event per line without ``event_data``. Here it was imported in
    the zygote; unwrap ``Display.display`` until the callback is instantiated.
    """
    from ansible.utils.display import Display

    wrapped = Display.display
    if getattr(wrapped, "__code__", None) is None or wrapped.__code__.co_filename != module.__file__:
        return  # not awx_display's wrapper: leave it alone
    Display.display = wrapped.__wrapped__
    init = module.CallbackModule.__init__

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        Display.display = wrapped
        init(self, *args, **kwargs)

    module.CallbackModule.__init__ = __init__


def _keep_workers_in_the_run() -> None:
    """Keep Ansible's worker processes (and the module processes they start) in this run's process group.

    ansible-core 2.19 workers ``setsid`` (``WorkerProcess._detach``) to lose the controlling terminal;
    this child already ``setsid``-ed (no terminal), so skipping it changes nothing else and lets
    ``killpg(run)`` reach every module process even after the child itself died (2.16 - 2.18 workers
    never leave the group). Workers also get ``PR_SET_PDEATHSIG`` so they die with the child.
    """
    from ansible.executor.process.worker import WorkerProcess

    hook = ansible_compat.worker_setsid_hook()
    if hook is not None:
        cls, name = hook
        detach = getattr(cls, name)

        def _detach_in_run_group(self: Any) -> None:
            # 2.21 compat hook: with WORKER_SESSION_ISOLATION false (ansible_worker_session_isolation) its
            # workers call os.setpgid(0, 0) instead of os.setsid(), which would leave the run's group too
            real_setsid, real_setpgid = os.setsid, os.setpgid
            os.setsid = lambda: None  # the worker is single-threaded here; restored right below
            os.setpgid = lambda pid, pgrp: None
            try:
                detach(self)
            finally:
                os.setsid, os.setpgid = real_setsid, real_setpgid

        setattr(cls, name, _detach_in_run_group)

    run = WorkerProcess.run

    def run_dying_with_the_child(self: Any) -> Any:
        die_with_parent(signal.SIGKILL)
        gc.freeze()  # the run's objects too: the worker's GC passes must not copy the pages they sit on
        return run(self)

    WorkerProcess.run = run_dying_with_the_child


RESULT_WAIT_CAP = 0.05
"""Longest wait between two checks of Ansible's result loop when no result arrives (seconds)."""


class _WakeOnResults:
    """Stand-in for the ``time`` module inside ``ansible.plugins.strategy`` (see :func:`_wait_on_results`).

    Every attribute is the real module's; only ``sleep`` called from ``_wait_on_pending_results`` waits for
    the next task result (or :data:`RESULT_WAIT_CAP`) instead of ``DEFAULT_INTERNAL_POLL_INTERVAL``.
    """

    def __init__(self, arrived: threading.Event) -> None:
        self._arrived = arrived

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)

    def sleep(self, seconds: float) -> None:
        caller = sys._getframe(1)
        if (caller.f_code.co_name != "_wait_on_pending_results"
                or not getattr(caller.f_locals.get("self"), "_wake_on_results", False)):
            time.sleep(seconds)  # e.g. _queue_task waiting for a free worker slot: unchanged
            return
        # A result appended after this loop's _process_pending_results set the event: return at once.
        # Clearing after the wait loses nothing: the loop processes every queued result next.
        self._arrived.wait(RESULT_WAIT_CAP)
        self._arrived.clear()


def _wait_on_results() -> bool:
    """Make the strategy's result loop wait for a result instead of polling every millisecond.

    ``StrategyBase._wait_on_pending_results`` (ansible-core 2.16 - 2.21: linear strategy, handlers, end
    of play) loops "process queued results; ``time.sleep(C.DEFAULT_INTERNAL_POLL_INTERVAL)``" (0.001 s)
    while a task runs: a thousand wake-ups per second in every run child, 31 % of a warm Memcached run's
    CPU in the profile. The strategy's results thread appends each result to ``self._results``; that
    deque is replaced by one that also sets an event on ``append``, and the loop's sleep waits for that
    event (at most :data:`RESULT_WAIT_CAP`, so the loop's other checks, dead workers and
    ``_terminated``, still run 20 times a second). Same results, same order, same callbacks: only the
    sleep between checks changes. Returns False, leaving Ansible's polling as it is, if the strategy
    module is not shaped as expected.
    """
    import ansible.plugins.strategy as strategy_module

    base = getattr(strategy_module, "StrategyBase", None)
    if (getattr(strategy_module, "time", None) is not time or base is None
            or not hasattr(base, "_wait_on_pending_results")):
        return False
    arrived = threading.Event()

    class _NotifyingResults(collections.deque):  # type: ignore[type-arg]
        def append(self, item: Any) -> None:
            super().append(item)
            arrived.set()

    init = base.__init__

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        lock = getattr(self, "_results_lock", None)
        if type(getattr(self, "_results", None)) is collections.deque and lock is not None:
            with lock:  # the results thread is already running; it appends under this lock
                self._results = _NotifyingResults(self._results)
                self._wake_on_results = True

    base.__init__ = __init__
    strategy_module.time = _WakeOnResults(arrived)
    return True


def _playbook_args(spec: RunSpec) -> list[str]:
    # argv[0] as the runner executor's ansible-playbook would have it ("executable location" at -vv)
    args = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", spec["inventory"]]
    if spec["extravars_file"]:
        args += ["-e", "@" + spec["extravars_file"]]
    if spec["verbosity"] > 0:
        args.append("-" + "v" * min(int(spec["verbosity"]), 7))
    args += spec.get("ansible_args") or []
    args.append(spec["playbook"])
    return args


def _run_playbook_cli(args: list[str]) -> int:
    from ansible.cli.playbook import PlaybookCLI

    try:
        PlaybookCLI.cli_executor(args)
    except SystemExit as exc:
        code = exc.code
        if code is None:
            return 0
        return code if isinstance(code, int) else 1
    return 0


def run_child(spec: RunSpec, event_fd: int) -> None:
    """Body of a forked child. Returns normally after reporting; the caller calls ``os._exit``."""
    sink = EventSink(event_fd, spec["ident"], spec["artifacts_dir"])
    try:
        _run(spec, sink)
    except BaseException as exc:  # report, never unwind into the zygote's loop
        detail = "".join(traceback.format_exception(exc))
        try:
            os.write(2, detail.encode("utf-8", "replace"))
        except OSError:
            pass
        sink.send(CHILD_TAG_ERROR, {"error": f"{type(exc).__name__}: {exc}".splitlines()[0][:500]})
    finally:
        inline = sys.modules.get("ansible_operator.executors.warm.inline_modules")
        if inline is not None:  # exit handlers in-process modules left for the end of the run
            inline.run_deferred()


def _run(spec: RunSpec, sink: EventSink) -> None:
    """One run, in order: its stdio and environment, Ansible's import-time state re-pointed at it, the fast
    path's hooks, the playbook, and the result (artifacts ``status``/``rc`` and the ``R`` message)."""
    artifacts = spec["artifacts_dir"]
    os.makedirs(os.path.join(artifacts, "job_events"), mode=0o700, exist_ok=True)
    _redirect_stdio(artifacts)
    os.chdir(spec["cwd"])
    _apply_environment(_run_environment(spec["env"], artifacts))

    from ansible import constants as C

    zygote_tmp = C.DEFAULT_LOCAL_TMP  # the zygote's; this run gets its own, next to it
    C.DEFAULT_LOCAL_TMP = tempfile.mkdtemp(prefix=f"ansible-local-{os.getpid()}",
                                           dir=os.path.dirname(zygote_tmp))
    try:
        _repoint_ansible(spec, sink)
        _install_hooks(spec, zygote_tmp)
        rc = _run_playbook(spec, sink)
    finally:
        shutil.rmtree(C.DEFAULT_LOCAL_TMP, ignore_errors=True)
    _report(artifacts, rc, sink)


def _redirect_stdio(artifacts: str) -> None:
    """stdin: nothing to read; anything written below Python's ``sys.stdout`` (C code, inherited fds) lands
    in ``artifacts/stderr``, which ansible-runner also creates."""
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    err_fd = os.open(os.path.join(artifacts, "stderr"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(err_fd, 1)
    os.dup2(err_fd, 2)
    os.close(err_fd)


def _run_environment(env: dict[str, str], artifacts: str) -> dict[str, str]:
    """The run's environment plus what ansible-runner would set for its callback, event filter and facts."""
    run_env = dict(env)
    run_env.update({
        "AWX_ISOLATED_DATA_DIR": artifacts,
        "ANSIBLE_STDOUT_CALLBACK": "awx_display",
        "ANSIBLE_CACHE_PLUGIN": run_env.get("ANSIBLE_CACHE_PLUGIN", "jsonfile"),
        "ANSIBLE_CACHE_PLUGIN_CONNECTION": os.path.join(artifacts, "fact_cache"),
        "RUNNER_OMIT_EVENTS": run_env.get("RUNNER_OMIT_EVENTS", "False"),
        "RUNNER_ONLY_FAILED_EVENTS": run_env.get("RUNNER_ONLY_FAILED_EVENTS", "False"),
    })
    return run_env


def _repoint_ansible(spec: RunSpec, sink: EventSink) -> None:
    """What Ansible resolved at import time in the zygote, made this run's (see the module docstring)."""
    from ansible import constants as C
    from ansible.utils import color

    fast_path = spec.get("fast_path", True)
    _point_collection_finder()
    _repoint_awx_display(spec["artifacts_dir"], sink if fast_path else None)
    _keep_workers_in_the_run()
    if fast_path:
        _wait_on_results()
    else:
        from ansible_operator.executors.warm import plugin_docs

        plugin_docs.disable()
    color.ANSIBLE_COLOR = bool(C.ANSIBLE_FORCE_COLOR or not C.ANSIBLE_NOCOLOR)
    # CLI.run() calls init_plugin_loader() again; the zygote already did, and Python would print a warning.
    warnings.filterwarnings("ignore", message="AnsibleCollectionFinder has already been configured")


def _install_hooks(spec: RunSpec, zygote_tmp: str) -> None:
    """The warm executor's hooks into this run's Ansible: fast modules (always: only the prefixes in the
    spec take it), the payload store (2.19+), and the rest of the fast path unless it is off. The stores
    live under the zygote's temporary directory ``zygote_tmp``, shared by its runs."""
    from ansible_operator.executors.warm import fast_modules, payloads

    fast_path = spec.get("fast_path", True)
    modules_in_process = bool(fast_path and spec.get("modules_in_process", True))
    fast_modules.install(spec.get("fast_modules") or (), in_process=modules_in_process)
    if fast_path:
        fast_modules.pipeline(spec.get("fast_modules") or ())
        fast_modules.tmp_helpers_in_process()
    if fast_path and spec.get("tasks_in_process", True):
        from ansible_operator.executors.warm import tasks

        tasks.install()
    if ansible_compat.payload_store_supported():
        payloads.install(os.path.join(zygote_tmp, payloads.STORE_DIRNAME))
    if fast_path:
        from ansible_operator.executors.warm import templates

        templates.install(os.path.join(zygote_tmp, templates.STORE_DIRNAME))


def _run_playbook(spec: RunSpec, sink: EventSink) -> int:
    """``ansible-playbook`` in this process, its output through ansible-runner's event filter to ``sink``
    and ``artifacts/stdout``; the command recorded in ``artifacts/command``. Returns its exit code."""
    from ansible_runner.utils import OutputEventFilter

    artifacts = spec["artifacts_dir"]
    args = _playbook_args(spec)
    with open(os.open(os.path.join(artifacts, "command"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600),
              "w", encoding="utf-8") as fh:
        json.dump({"command": args, "cwd": spec["cwd"], "env": dict(os.environ)}, fh)

    stdout_handle = open(os.path.join(artifacts, "stdout"), "w", encoding="utf-8")
    stream = PtyLikeStdout(OutputEventFilter(stdout_handle, sink, suppress_ansible_output=True))
    sys.stdout = sys.stderr = stream
    sys.argv = list(args)
    try:
        return _run_playbook_cli(args)
    finally:
        sys.stdout, sys.stderr = sys.__stdout__, sys.__stderr__
        stream.close()  # flushes trailing output as events and closes artifacts/stdout


def _report(artifacts: str, rc: int, sink: EventSink) -> None:
    """The run's ``status`` and ``rc`` as ansible-runner writes them, then the result message."""
    status = "successful" if rc == 0 else "failed"
    for name, value in (("status", status), ("rc", str(rc))):
        with open(os.open(os.path.join(artifacts, name), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600),
                  "w") as fh:
            fh.write(value)
    sink.send(CHILD_TAG_RESULT, {"status": status, "rc": rc})
