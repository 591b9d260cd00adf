"""Fast module tasks: run selected AnsiballZ modules in a fork of the (pre-imported) worker process.

Normally every module task starts a fresh Python interpreter for its AnsiballZ payload, which then
imports ``ansible.module_utils`` and, for kubernetes.core, the kubernetes client (~0.43 s) and
kubernetes.core's module_utils: ~0.7-2 s of CPU per task on a 2-core machine. The warm executor's worker
processes already imported all of that (in the zygote), so for modules whose FQCN starts with one of the
configured prefixes the local connection's ``exec_command`` forks the worker instead of starting
``python AnsiballZ_<module>.py``, and the fork executes *the same AnsiballZ script* with ``runpy``.

What stays identical: the command Ansible built (environment assignments, interpreter, script, or the
pipelined payload), the module's arguments and internal ``_ansible_*`` flags (check mode, diff,
verbosity...), the module code itself, its stdout/stderr/rc, and Ansible's parsing of them. The only
difference is that already-imported ``ansible.module_utils`` / ``kubernetes`` / collection module_utils
are reused instead of re-imported from the payload's zip -- the same files, since the payload is built
from the same installation (``warm.child`` re-imports collections that a run's collection path moves).

Anything that does not match the expected shape exactly (become, async wrapper, another interpreter, a
module outside the prefixes, a non-local connection) runs the normal way.

With the fast path's in-process modules (the default), the planned script runs in the calling process
instead of a fork (``warm.inline_modules``, through :func:`_execute_in_process`); the fork remains for a
thread that finds another module running, and when that part is switched off.
"""

from __future__ import annotations

import atexit
import os
import re
import shlex
import shutil
import signal
import sys
import tempfile
import traceback
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from ansible_operator.executors import ansible_compat
from ansible_operator.executors.lifetime import die_with_parent

DEFAULT_FAST_MODULE_PREFIXES: tuple[str, ...] = ("kubernetes.core.", "ansible_operator.util.")
"""kubernetes.core, and our own status/requeue/event modules (they use the same kubernetes client)."""

_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_TRAILER = ["&&", "sleep", "0"]


@dataclass(frozen=True)
class ForkPlan:
    """How to run one module command in a fork: environment, script (path or pipelined source)."""

    env: dict[str, str]
    script_path: str | None
    script_source: bytes
    module_name: str = "module"
    """The module's short name: a pipelined payload runs as ``AnsiballZ_<name>.py``, the file name a
    non-pipelined task's payload has (module tracebacks name it)."""


def _same_interpreter(path: str) -> bool:
    try:
        return os.path.realpath(path) == os.path.realpath(sys.executable)
    except OSError:
        return False


def _shell_script(cmd: Any, shell_executable: str | None) -> str | None:
    """SCRIPT of the local connection's ``/bin/sh -c SCRIPT`` (or the configured shell's); None otherwise."""
    if not isinstance(cmd, str):
        return None
    try:
        outer = shlex.split(cmd)
    except ValueError:
        return None
    if len(outer) != 3 or outer[1] != "-c" or outer[0] not in {"/bin/sh", shell_executable}:
        return None
    return outer[2]


def plan_for(cmd: Any, in_data: bytes | None, module_prefixes: Sequence[str],
             shell_executable: str | None) -> ForkPlan | None:
    """A :class:`ForkPlan` if ``cmd`` runs an allowed module's AnsiballZ script with this interpreter."""
    if not module_prefixes:
        return None
    script = _shell_script(cmd, shell_executable)
    if script is None:
        return None
    try:
        words = shlex.split(script)
    except ValueError:
        return None
    if words[-3:] == _TRAILER:
        words = words[:-3]
    env: dict[str, str] = {}
    while words and _ASSIGNMENT.match(words[0]):
        name, _, value = words.pop(0).partition("=")
        env[name] = value
    if not words or not _same_interpreter(words[0]):
        return None
    if len(words) == 1 and in_data:  # pipelining: the payload comes on stdin
        script_path, source = None, in_data
    elif len(words) == 2 and in_data is None and os.path.basename(words[1]).startswith("AnsiballZ_"):
        script_path = words[1]
        try:
            with open(script_path, "rb") as fh:
                source = fh.read()
        except OSError:
            return None
    else:
        return None
    fqn = ansible_compat.ansiballz_module_fqn(source)
    if fqn is None:
        return None
    short = _fqcn(fqn)
    if not any(short.startswith(p) for p in module_prefixes):
        return None
    return ForkPlan(env=env, script_path=script_path, script_source=source,
                    module_name=short.rpartition(".")[2])


def _fqcn(module_fqn: str) -> str:
    """Python module name of a module -> its FQCN (``ansible.modules.setup`` -> ``ansible.builtin.setup``)."""
    prefix = "ansible_collections."
    if module_fqn.startswith(prefix):
        return module_fqn[len(prefix):].replace(".plugins.modules.", ".", 1)
    if module_fqn.startswith("ansible.modules."):
        return "ansible.builtin." + module_fqn[len("ansible.modules."):]
    return module_fqn


def run_forked(plan: ForkPlan, cwd: str | None) -> tuple[int, bytes, bytes]:
    """Execute the planned AnsiballZ script in a fork; the ``(rc, stdout, stderr)`` Popen would give."""
    out = tempfile.TemporaryFile()
    err = tempfile.TemporaryFile()
    try:
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the grandchild; covered through the executor tests
            _grandchild(plan, cwd, out.fileno(), err.fileno())
        while True:
            try:
                _, status = os.waitpid(pid, 0)
                break
            except InterruptedError:
                continue
        rc = os.waitstatus_to_exitcode(status)  # negative signal number, as Popen.returncode
        out.seek(0)
        err.seek(0)
        return rc, out.read(), err.read()
    finally:
        out.close()
        err.close()


def _grandchild(plan: ForkPlan, cwd: str | None, out_fd: int, err_fd: int) -> None:
    code = 1
    try:
        die_with_parent(signal.SIGKILL)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.close(devnull)
        os.dup2(out_fd, 1)
        os.dup2(err_fd, 2)
        sys.stdin = open(0, "r", closefd=False)
        sys.stdout = open(1, "w", closefd=False, encoding="utf-8")
        sys.stderr = open(2, "w", closefd=False, encoding="utf-8")
        if cwd:
            os.chdir(cwd)
        os.environ.update(plan.env)
        _become_module_side()
        atexit._clear()  # the parent's exit handlers are not this module's to run
        code = _execute(plan)
    except BaseException:
        try:
            traceback.print_exc()
        except BaseException:
            pass
    finally:
        try:
            atexit._run_exitfuncs()  # the module's own (AnsibleModule.tmpdir's removal), as at its exit
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def _become_module_side() -> None:
    """Undo the controller-only hooks ``ansible._internal`` installed into module_utils at import."""
    ansible_compat.become_module_side()


def _execute_in_process(plan: ForkPlan) -> int:
    """For a module run in this process (``warm.inline_modules``): on 2.19+, the wrapper's own last step
    (``ansible_compat.run_module_directly``) instead of the whole script, whose compile, base64 decoding,
    zip writing and temporary directories were ~60 % of an in-process module task's time; the script
    otherwise (2.16 - 2.18, whose wrapper lets a module's exception through with its own frames)."""
    call = ansible_compat.ansiballz_direct_call(plan.script_source)
    if call is None:
        return _execute(plan)
    sys.argv = [plan.script_path or f"AnsiballZ_{plan.module_name}.py"]
    return _exit_status(lambda: ansible_compat.run_module_directly(call), sys.argv[0])


def _execute(plan: ForkPlan) -> int:
    import runpy

    path = plan.script_path
    if path is None:  # pipelined source: give it the file name the module's payload file would have
        path = os.path.join(tempfile.mkdtemp(prefix="ansible-pipelined-"), f"AnsiballZ_{plan.module_name}.py")
        with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as fh:
            fh.write(plan.script_source)
    sys.argv = [path]
    try:
        return _exit_status(lambda: runpy.run_path(path, run_name="__main__"), path)
    finally:
        if plan.script_path is None:
            shutil.rmtree(os.path.dirname(path), ignore_errors=True)


def _exit_status(run: Callable[[], object], path: str) -> int:
    """The exit status of a Python process running ``run`` as its script ``path``, with what it prints."""
    try:
        run()
    except SystemExit as exc:
        if exc.code is None:
            return 0
        if isinstance(exc.code, int):
            return exc.code
        print(exc.code, file=sys.stderr)
        return 1
    except Exception as exc:  # uncaught in the module (2.16 - 2.18 wrappers let it through): as `python x.py`
        _print_script_traceback(exc, path)
        return 1
    return 0


def _print_script_traceback(exc: BaseException, script: str) -> None:
    """The traceback a fresh interpreter prints: from the script's frame on, without runpy and ours."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename != script:
        tb = tb.tb_next
    traceback.print_exception(type(exc), exc, tb if tb is not None else exc.__traceback__, file=sys.stderr)


def install(module_prefixes: Sequence[str], in_process: bool = False) -> None:
    """Route allowed module commands of the ``local`` connection through :func:`run_forked`, or with
    ``in_process`` through ``inline_modules.run_inline`` (no fork; the fork when it declines)."""
    if not module_prefixes:
        return
    run_inline = None
    if in_process:
        from ansible_operator.executors.warm import inline_modules

        inline_modules.prepare()
        run_inline = inline_modules.run_inline
    from ansible import constants as C
    from ansible.module_utils.common.text.converters import to_text
    from ansible.plugins.connection import ConnectionBase
    from ansible.plugins.connection.local import Connection
    from ansible.utils.display import Display

    display = Display()
    original = Connection.exec_command
    prefixes = tuple(module_prefixes)

    def exec_command(self: Any, cmd: Any, in_data: bytes | None = None,
                     sudoable: bool = True) -> tuple[int, bytes, bytes]:
        shell = C.DEFAULT_EXECUTABLE.split()[0] if C.DEFAULT_EXECUTABLE else None
        plan = None if self.become is not None and sudoable else plan_for(cmd, in_data, prefixes, shell)
        if plan is None:
            result: tuple[int, bytes, bytes] = original(self, cmd, in_data=in_data, sudoable=sudoable)
            return result
        ConnectionBase.exec_command(self, cmd, in_data=in_data, sudoable=sudoable)
        display.vvv("EXEC {0}".format(to_text(cmd)), host=self._play_context.remote_addr)
        if run_inline is not None:
            done = run_inline(plan, self.cwd, _execute_in_process)
            if done is not None:
                return done
        return run_forked(plan, self.cwd)

    Connection.exec_command = exec_command


def pipeline(module_prefixes: Sequence[str]) -> None:
    """Pipeline the tasks of allowed modules on the ``local`` connection without become (issue 14).

    Without pipelining every module task runs ``/bin/sh`` helpers (``chmod u+x`` on the uploaded
    AnsiballZ file; for plain modules also ``mkdir`` of a temporary directory and ``rm -rf`` of it): two
    to five processes forked from the worker per task, before and after the module fork itself. With
    pipelining the AnsiballZ payload goes to the module process's stdin (:func:`plan_for` takes that form
    too) and those helpers are not needed. Ansible leaves pipelining off by default because of ``sudo``'s
    ``requiretty`` and of connections that cannot do it; neither applies to a task that uses the local
    connection without become, so only such tasks of a module under ``module_prefixes`` (the task's
    resolved action) are pipelined, as if ``ANSIBLE_PIPELINING=True`` were set for them; every other task
    keeps the configured behaviour (``ANSIBLE_PIPELINING`` still turns it on for all).
    """
    if not module_prefixes:
        return
    from ansible import constants as C
    from ansible.plugins.action import ActionBase
    from ansible.plugins.connection.local import Connection

    original = getattr(ActionBase, "_is_pipelining_enabled", None)
    if original is None:  # another ansible-core shape: leave Ansible's own decision alone
        return
    prefixes = tuple(module_prefixes)

    def _is_pipelining_enabled(self: Any, module_style: str, wrap_async: bool = False) -> bool:
        if original(self, module_style, wrap_async):
            return True
        task = self._task
        action = str(getattr(task, "resolved_action", None) or task.action)
        connection = self._connection
        return bool(module_style == "new" and not wrap_async and not C.DEFAULT_KEEP_REMOTE_FILES
                    and type(connection) is Connection and getattr(connection, "become", None) is None
                    and not getattr(self._play_context, "become", False) and action.startswith(prefixes))

    ActionBase._is_pipelining_enabled = _is_pipelining_enabled


_PLAIN_PATH = r"/[A-Za-z0-9_.+@%:,/-]*"  # nothing a shell would expand, quote or split
_ECHO_HOME = re.compile(r"^echo (~[a-z_][a-z0-9_-]*)$|^echo (~)$")
_MKDTEMP = re.compile(
    r'^\( umask 77 && mkdir -p "` echo (?P<base>' + _PLAIN_PATH + r') `"'
    r'&& mkdir "` echo (?P<dir>' + _PLAIN_PATH + r') `" '
    r'&& echo (?P<name>ansible-tmp-[0-9.-]+)="` echo (?P<dir2>' + _PLAIN_PATH + r') `" \)$')
_RM_TMP = re.compile(r"^rm -f -r (?P<path>" + _PLAIN_PATH + r") > /dev/null 2>&1$")


def helper_result(cmd: Any, shell_executable: str | None) -> tuple[int, bytes, bytes] | None:
    """Run one of Ansible's temporary-directory shell helpers in-process; None if ``cmd`` is not one.

    The ``sh`` shell plugin's ``echo ~[user]`` (home directory), ``( umask 77 && mkdir -p BASE && mkdir
    DIR && echo NAME=DIR )`` (a task's temporary directory) and ``rm -f -r DIR/ > /dev/null 2>&1``,
    each as ``/bin/sh -c '... && sleep 0'``, with paths a shell would pass through unchanged. The result
    is what the shell prints and returns. Anything else, or any error, returns None: the caller runs the
    real command (which then reports the error as the shell would).
    """
    inner = _shell_script(cmd, shell_executable)
    if inner is None or not inner.endswith(" && sleep 0"):
        return None
    inner = inner[: -len(" && sleep 0")]
    home = _ECHO_HOME.match(inner)
    if home:
        user = home.group(1) or home.group(2)
        expanded = os.path.expanduser(user)
        return (0, (expanded + "\n").encode(), b"") if expanded != user else None
    made = _MKDTEMP.match(inner)
    if made and made.group("dir") == made.group("dir2") and os.path.basename(made.group("dir")) == made.group(
            "name"):
        try:
            _mkdir_private(made.group("base"), parents=True)
            _mkdir_private(made.group("dir"), parents=False)
        except OSError:
            return None
        return 0, f"{made.group('name')}={made.group('dir')}\n".encode(), b""
    removed = _RM_TMP.match(inner)
    if removed:
        path = removed.group("path").rstrip("/")
        if not os.path.basename(path).startswith("ansible-tmp-"):
            return None
        if os.path.lexists(path):
            if os.path.islink(path) or not os.path.isdir(path):
                return None
            try:
                shutil.rmtree(path)
            except OSError:
                return None
        return 0, b"", b""
    return None


def _mkdir_private(path: str, parents: bool) -> None:
    """``umask 77 && mkdir [-p] path``: every directory it creates is 0700, existing ones are left alone."""
    if parents:
        parent = os.path.dirname(path.rstrip("/"))
        if parent and not os.path.isdir(parent):
            _mkdir_private(parent, parents=True)
        if os.path.isdir(path):
            return
    os.mkdir(path, 0o700)
    os.chmod(path, 0o700)  # whatever the process umask: the shell's is 077 for this command


def tmp_helpers_in_process() -> None:
    """Answer the local connection's temporary-directory helpers with :func:`helper_result` (issue 14).

    Three ``/bin/sh`` processes (and their ``mkdir``/``rm``) forked from the worker per task whose action
    plugin makes a temporary directory (``kubernetes.core.k8s``/``k8s_info`` declare ``TRANSFERS_FILES``):
    ~9 ms of CPU and ~25 ms of wall time per task here. ``-vvv`` shows the same ``EXEC`` lines.
    """
    from ansible import constants as C
    from ansible.module_utils.common.text.converters import to_text
    from ansible.plugins.connection import ConnectionBase
    from ansible.plugins.connection.local import Connection
    from ansible.utils.display import Display

    display = Display()
    original = Connection.exec_command

    def exec_command(self: Any, cmd: Any, in_data: bytes | None = None,
                     sudoable: bool = True) -> tuple[int, bytes, bytes]:
        if in_data is None and not (sudoable and self.become is not None):
            shell = C.DEFAULT_EXECUTABLE.split()[0] if C.DEFAULT_EXECUTABLE else None
            result = helper_result(cmd, shell)
            if result is not None:
                ConnectionBase.exec_command(self, cmd, in_data=in_data, sudoable=sudoable)
                display.vvv("EXEC {0}".format(to_text(cmd)), host=self._play_context.remote_addr)
                return result
        done: tuple[int, bytes, bytes] = original(self, cmd, in_data=in_data, sudoable=sudoable)
        return done

    Connection.exec_command = exec_command
