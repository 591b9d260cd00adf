"""The warm executor's zygote: import Ansible once, then fork one child per playbook run.

Run as ``python -m ansible_operator.executors.warm.zygote`` by
:class:`~ansible_operator.executors.warm.executor.WarmExecutor` (always a separate, freshly exec'd process:
the asyncio operator itself is never forked).

Why: ``ansible-playbook`` spends ~0.55 s importing Ansible and loading plugins before the first task;
a child forked from a process that already did that starts running tasks in milliseconds and shares the
imported code copy-on-write.

The zygote is single-threaded (forking a threaded process is unsafe) and event-driven: a selector
watches its stdin (commands), a SIGCHLD wake-up pipe and one event pipe per child. It becomes a child
sub-reaper so everything a run starts stays under it, even processes that ``setsid`` away: a kill takes
the whole process tree of a run, and orphans are reaped. When the operator goes away -- even by SIGKILL:
stdin reaches EOF and ``PR_SET_PDEATHSIG`` sends SIGTERM -- it kills every process below it before it
exits (:mod:`ansible_operator.executors.lifetime`).
Protocol: :mod:`ansible_operator.executors.warm.protocol`.
"""

from __future__ import annotations

import fcntl
import gc
import json
import os
import selectors
import shutil
import signal
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from ansible_operator.executors import ansible_compat, reserved
from ansible_operator.executors.lifetime import (
    become_subreaper,
    die_with_parent,
    kill_descendants,
    kill_group,
    reap_children,
)
from ansible_operator.executors.warm.protocol import (
    CHILD_TAG_ERROR,
    CHILD_TAG_EVENT,
    CHILD_TAG_RESULT,
    REMOVE_CWD,
    RunSpec,
    encode,
)


def _runner_callback_dir() -> str:
    from importlib.util import find_spec

    spec = find_spec("ansible_runner.display_callback")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("ansible_runner.display_callback is not installed")
    return os.path.join(list(spec.submodule_search_locations)[0], "callback")


def _seed_environment() -> None:
    """What ansible-runner puts in every run's environment, set before Ansible reads its config."""
    callback_dir = _runner_callback_dir()
    existing = os.environ.get("ANSIBLE_CALLBACK_PLUGINS")
    os.environ["ANSIBLE_CALLBACK_PLUGINS"] = ":".join(p for p in (existing, callback_dir) if p)
    if os.environ.get("ANSIBLE_STDOUT_CALLBACK") and os.environ["ANSIBLE_STDOUT_CALLBACK"] != "awx_display":
        os.environ["ORIGINAL_STDOUT_CALLBACK"] = os.environ["ANSIBLE_STDOUT_CALLBACK"]
    os.environ["ANSIBLE_STDOUT_CALLBACK"] = "awx_display"
    os.environ["ANSIBLE_RETRY_FILES_ENABLED"] = "False"
    os.environ.setdefault("ANSIBLE_HOST_KEY_CHECKING", "False")
    # awx_display builds its partial-event writer at import only if this is set; each child re-points it.
    os.environ["AWX_ISOLATED_DATA_DIR"] = os.devnull


def preload() -> None:
    """Import Ansible and everything a typical operator run loads, so children inherit it.

    Raises RuntimeError when the installed ansible-core is not a supported one.
    """
    import ansible.release

    ansible_compat.check(ansible.release.__version__)
    from ansible import constants as C
    from ansible.cli.playbook import PlaybookCLI  # noqa: F401  (imports the CLI machinery)
    from ansible.executor import playbook_executor, task_queue_manager  # noqa: F401
    from ansible.plugins import loader
    from ansible.plugins.loader import init_plugin_loader

    init_plugin_loader([])
    from ansible_operator.executors.warm import plugin_docs

    plugin_docs.install()  # before any plugin is loaded: see the module
    import ansible_runner.utils  # noqa: F401  (OutputEventFilter, used by every child)
    # Every run loads these lazily (TaskQueueManager walks all callbacks, the inventory manager every
    # enabled inventory plugin, ...); loading them here also parses each plugin's DOCUMENTATION once.
    loader.callback_loader.get("awx_display", class_only=True)
    for plugin_loader in (loader.callback_loader, loader.connection_loader, loader.become_loader,
                          loader.shell_loader, loader.strategy_loader, loader.filter_loader,
                          loader.test_loader):
        list(plugin_loader.all(class_only=True))
    for name in C.INVENTORY_ENABLED:
        loader.inventory_loader.get(name, class_only=True)
    # vars plugin *instances* are cached with the options of the process that loaded them (and even a
    # class-only load records the plugin in the loader's load order): import only, and read the options
    # from its documentation as a run's load does, under the name a run uses.
    import ansible.plugins.vars.host_group_vars as host_group_vars

    loader.vars_loader._load_config_defs("host_group_vars", host_group_vars, host_group_vars.__file__)
    # by the names a run uses too: options are registered under the name the plugin was loaded by
    for name in ("ansible.builtin.jsonfile", "ansible.builtin.memory", "jsonfile", "memory"):
        loader.cache_loader.get(name, class_only=True)
    for name in ("ansible.builtin.normal", "ansible.builtin.debug", "ansible.builtin.set_fact",
                 "ansible.builtin.template", "ansible.builtin.include_role", "ansible.builtin.assert",
                 "ansible.builtin.command", "ansible.builtin.fail", "ansible.builtin.gather_facts",
                 "ansible.builtin.include_tasks", "ansible.builtin.include_vars", "ansible.builtin.copy",
                 "ansible.builtin.pause", "ansible.builtin.wait_for_connection"):
        loader.action_loader.get(name, class_only=True)
    for name in ("ansible.builtin.env", "ansible.builtin.file", "ansible.builtin.template",
                 "ansible.builtin.vars", "ansible.builtin.items", "ansible.builtin.dict"):
        loader.lookup_loader.get(name, class_only=True)
    import multiprocessing.popen_fork  # noqa: F401  (Ansible's workers)
    import multiprocessing.resource_tracker  # noqa: F401
    import multiprocessing.synchronize  # noqa: F401

    import ansible.executor.module_common  # noqa: F401  (builds module payloads)
    import ansible.executor.process.worker  # noqa: F401  (re-pointed by every child)
    import ansible.modules  # noqa: F401

    # the run child's own modules: imported per run they were compiled per run (no .pyc is written where
    # PYTHONDONTWRITEBYTECODE is set, as in many images)
    from ansible_operator.executors.warm import (  # noqa: F401
        child,
        fast_modules,
        inline_modules,
        payloads,
        tasks,
        templates,
    )
    ansible_compat.preload_json_profiles()
    _preload_kubernetes(loader)


def _preload_kubernetes(loader: Any) -> None:
    """kubernetes.core's controller-side plugins and the kubernetes client they import.

    The k8s lookup and the k8s/k8s_info action plugins run inside the playbook process, so importing
    the kubernetes client here saves every run ~0.4 s. Missing pieces are skipped: plain playbooks work.
    """
    import warnings

    with warnings.catch_warnings():  # the client's own DeprecationWarnings would land on our stderr
        # kubernetes.client.apis re-enables its warning with filterwarnings() first: filters are not enough
        warnings.showwarning = lambda *args, **kwargs: None
        _preload_kubernetes_quietly(loader)


def _preload_kubernetes_quietly(loader: Any) -> None:
    for kind, name in (("action", "kubernetes.core.k8s"), ("action", "kubernetes.core.k8s_info"),
                       ("lookup", "kubernetes.core.k8s")):
        plugin_loader = loader.action_loader if kind == "action" else loader.lookup_loader
        try:
            plugin_loader.get(name, class_only=True)
        except Exception:  # collection absent or broken: runs that use it will report the error
            pass
    try:
        import kubernetes.client  # noqa: F401
        import kubernetes.dynamic  # noqa: F401
    except ImportError:
        return
    _preload_module_code("kubernetes.core")


def _preload_module_code(collection: str) -> None:
    """Import a collection's *modules* (definitions only: ``main()`` runs under ``__main__``) and what they
    import, for the in-process module path of :mod:`~ansible_operator.executors.warm.fast_modules`; also the
    AnsiballZ loader."""
    import importlib
    import pkgutil
    import warnings

    ansible_compat.preload_module_side()

    package_name = f"ansible_collections.{collection}.plugins.modules"
    try:
        package = importlib.import_module(package_name)
    except ImportError:
        return
    with warnings.catch_warnings():  # deprecation notices of the client, printed again by each task anyway
        warnings.simplefilter("ignore")
        warnings.showwarning = lambda *args, **kwargs: None
        for info in pkgutil.iter_modules(package.__path__):
            try:
                importlib.import_module(f"{package_name}.{info.name}")
            except Exception:  # an optional dependency missing: that module will import it when run
                pass


@dataclass
class _Child:
    run_id: str
    pid: int
    event_fd: int
    buffer: bytearray = field(default_factory=bytearray)
    finished: bool = False
    """The child reported a result: whatever it leaves running is intentional (e.g. async tasks)."""


class Zygote:
    """The command loop. Only :meth:`serve` runs in the zygote; :meth:`_fork` also starts children."""

    def __init__(self, ctl_out: int) -> None:
        self._ctl_out = ctl_out
        self._selector = selectors.DefaultSelector()
        self._children: dict[int, _Child] = {}  # pid -> child
        self._by_run: dict[str, _Child] = {}
        self._stdin_buffer = bytearray()
        self._closing = False
        self._terminated = False
        self._wake_r, self._wake_w = os.pipe()

    # -- output -----------------------------------------------------------------------------------
    def send(self, message: dict[str, Any]) -> None:
        self._write(encode(message))

    def _write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            try:
                view = view[os.write(self._ctl_out, view):]
            except InterruptedError:
                continue
            except BrokenPipeError:  # the operator is gone (killed): nobody to tell; stop as on SIGTERM
                self._terminated = True
                return

    # -- main loop --------------------------------------------------------------------------------
    def serve(self) -> None:
        for fd in (self._wake_r, self._wake_w):
            os.set_blocking(fd, False)
            fcntl.fcntl(fd, fcntl.F_SETFD, fcntl.FD_CLOEXEC)
        signal.set_wakeup_fd(self._wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        # PR_SET_PDEATHSIG (the operator died) or an explicit stop: kill everything below us, then exit.
        signal.signal(signal.SIGTERM, self._on_terminate)
        self._selector.register(0, selectors.EVENT_READ, "stdin")
        self._selector.register(self._wake_r, selectors.EVENT_READ, "wake")
        while not (self._closing and not self._children):
            for key, _ in self._selector.select(timeout=1.0):
                if key.data == "stdin":
                    self._read_commands()
                elif key.data == "wake":
                    try:
                        os.read(self._wake_r, 4096)
                    except BlockingIOError:
                        pass
                else:
                    self._read_child(key.data)
            if self._terminated:
                self._shutdown()
            if self._closing:
                # every process of every run, including those that left the run's process group and
                # those left running by a finished run (async tasks): nothing outlives the zygote
                kill_descendants(reap=False)
            self._reap()

    def _on_terminate(self, *_: Any) -> None:
        self._terminated = True  # the wake-up fd gets the signal number and wakes the loop

    def _read_commands(self) -> None:
        try:
            chunk = os.read(0, 65536)
        except OSError:  # the operator's end is gone: same as EOF
            chunk = b""
        if not chunk:
            self._shutdown()
            return
        self._stdin_buffer += chunk
        while b"\n" in self._stdin_buffer:
            line, _, rest = bytes(self._stdin_buffer).partition(b"\n")
            self._stdin_buffer = bytearray(rest)
            if line.strip():
                self._command(json.loads(line))

    def _command(self, message: dict[str, Any]) -> None:
        op = message.get("op")
        if op == "run":
            self._fork(message["id"], message["spec"])
        elif op == "kill":
            child = self._by_run.get(message["id"])
            if child is not None:
                _kill_tree(child.pid)
        elif op == "exit":
            self._shutdown()

    def _shutdown(self) -> None:
        if not self._closing:
            self._closing = True
            self._selector.unregister(0)
            for child in list(self._children.values()):
                _kill_tree(child.pid)

    # -- children ---------------------------------------------------------------------------------
    def _fork(self, run_id: str, spec: RunSpec) -> None:
        if self._closing or run_id in self._by_run:
            self.send({"op": "exited", "id": run_id, "pid": None, "exit_code": None, "signal": None})
            return
        read_fd, write_fd = os.pipe()
        try:
            pid = os.fork()
        except OSError as exc:
            os.close(read_fd)
            os.close(write_fd)
            self.send({"op": "error", "id": run_id, "error": f"fork failed: {exc}"})
            self.send({"op": "exited", "id": run_id, "pid": None, "exit_code": None, "signal": None})
            return
        if pid == 0:  # pragma: no cover - runs in the child, measured through the executor tests
            self._become_child(read_fd, write_fd, spec)
        os.close(write_fd)
        os.set_blocking(read_fd, False)
        child = _Child(run_id=run_id, pid=pid, event_fd=read_fd)
        self._children[pid] = child
        self._by_run[run_id] = child
        self._selector.register(read_fd, selectors.EVENT_READ, child)
        self.send({"op": "started", "id": run_id, "pid": pid})

    def _become_child(self, read_fd: int, write_fd: int, spec: RunSpec) -> None:
        code = 70
        try:
            os.setsid()
            die_with_parent(signal.SIGKILL)
            signal.set_wakeup_fd(-1)
            for signum in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP):
                signal.signal(signum, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.default_int_handler)
            os.close(read_fd)
            self._selector.close()
            keep = sorted({0, 1, 2, write_fd})
            for low, high in zip(keep, keep[1:] + [os.sysconf("SC_OPEN_MAX")]):
                os.closerange(low + 1, high)
            from ansible_operator.executors.warm.child import run_child

            run_child(spec, write_fd)
            code = 0
        finally:
            os._exit(code)

    def _read_child(self, child: _Child, final: bool = False) -> None:
        while True:
            try:
                chunk = os.read(child.event_fd, 1 << 16)
            except BlockingIOError:
                break
            except InterruptedError:
                continue
            if not chunk:
                break
            child.buffer += chunk
            if not final:
                break  # let other fds have a turn; the selector will call again
        self._forward_lines(child)

    def _forward_lines(self, child: _Child) -> None:
        data = bytes(child.buffer)
        end = data.rfind(b"\n")
        if end < 0:
            return
        child.buffer = bytearray(data[end + 1:])
        run_id = json.dumps(child.run_id).encode()
        out = bytearray()
        for line in data[:end].split(b"\n"):
            tag, body = line[:1], line[1:]
            if tag == CHILD_TAG_EVENT:
                out += b'{"op":"event","id":' + run_id + b',"event":' + body + b"}\n"
            elif tag == CHILD_TAG_RESULT:
                child.finished = True
                out += b'{"op":"result","id":' + run_id + b"," + body.lstrip()[1:] + b"\n"
            elif tag == CHILD_TAG_ERROR:
                out += b'{"op":"error","id":' + run_id + b"," + body.lstrip()[1:] + b"\n"
        self._write(bytes(out))

    def _reap(self) -> None:
        for pid, status in reap_children():
            child = self._children.pop(pid, None)
            if child is None:
                continue  # an orphaned Ansible worker re-parented to us (sub-reaper)
            self._by_run.pop(child.run_id, None)
            self._read_child(child, final=True)  # everything the child wrote is in the pipe by now
            self._selector.unregister(child.event_fd)
            os.close(child.event_fd)
            if not child.finished:
                kill_group(pid)  # killed or crashed: its module processes must not run on
            self.send({
                "op": "exited", "id": child.run_id, "pid": pid,
                "exit_code": os.WEXITSTATUS(status) if os.WIFEXITED(status) else None,
                "signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else None,
            })


def _kill_tree(pid: int) -> None:
    """SIGKILL a run's child, every process below it and its process group."""
    import psutil

    try:
        parent = psutil.Process(pid)
        victims = [parent] + parent.children(recursive=True)
    except psutil.Error:
        victims = []
    for proc in victims:
        try:
            proc.kill()
        except psutil.Error:
            pass
    kill_group(pid)  # anything in the run's group that psutil missed (already re-parented)


def main() -> int:
    # Keep the protocol channel private: Ansible and plugins print to fd 1, which now goes to stderr.
    ctl_out = os.dup(1)
    fcntl.fcntl(ctl_out, fcntl.F_SETFD, fcntl.FD_CLOEXEC)
    os.dup2(2, 1)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the operator decides when we stop (stdin EOF)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    die_with_parent(signal.SIGTERM)  # never outlive the operator: serve() turns SIGTERM into kill-all
    become_subreaper()
    zygote = Zygote(ctl_out)
    started = time.monotonic()
    # No collector passes while the preload makes its ~200,000 lasting objects (~10 % of the preload on
    # Python 3.11); one collection before they are frozen, below.
    gc.disable()
    try:
        _seed_environment()
        with ansible_compat.import_time_notices_dropped():
            preload()
    except Exception as exc:
        zygote.send({"op": "fatal", "error": f"{type(exc).__name__}: {exc}"})
        return 1
    import ansible.release

    names = reserved.collect()  # ansible-core is imported: the operator need not start one more process
    # Children share the preloaded heap copy-on-write; a GC pass in a child (or in Ansible's workers)
    # would touch every object's header and copy those pages. Frozen objects are never scanned.
    gc.collect()
    gc.freeze()
    gc.enable()
    zygote.send({"op": "ready", "pid": os.getpid(), "ansible_core": ansible.release.__version__,
                 "preload_seconds": round(time.monotonic() - started, 3), "reserved_names": names})
    try:
        zygote.serve()
    finally:
        if REMOVE_CWD in sys.argv[1:]:
            # the executor's private directory: an operator that was killed (SIGKILL, OOM) never removes it
            shutil.rmtree(os.getcwd(), ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
