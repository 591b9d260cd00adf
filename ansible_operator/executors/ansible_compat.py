"""Which ansible-core versions the warm executor knows, and the internals that differ between them.

The zygote re-points import-time state of ansible-core per run (``warm.child``), forks module tasks
(``warm.fast_modules``) and shares module payloads (``warm.payloads``). Those internals come in two
shapes in the supported range:

* **2.16 - 2.18** ("classic"): the collection finder is built from ``C.COLLECTIONS_PATHS`` alone;
  Ansible's worker processes stay in the run's session; the AnsiballZ wrapper runs the module with
  ``runpy.run_module(mod_name=...)``; module_utils has no controller/module split.
* **2.19 - 2.21** ("data tagging"): the finder also gets ``ansible/_internal`` (the ``ansible._protomatter``
  collection); workers ``setsid`` in ``WorkerProcess._detach``; the wrapper names the module
  ``module_fqn=...``; ``ansible.module_utils._internal`` must be switched to the module side in a fork;
  payload building goes through ``_compile_module_ast`` / ``_CachedModule`` (shared payload store).
  2.20 and 2.21 (Python >= 3.12) keep every one of these: their finder's new ``internal_collections``
  argument is set on the finder the zygote installed (a run only recomputes its paths), and the wrapper,
  worker, module_utils switch and payload builder are unchanged (checked against 2.21.5's source and by
  the executor tests on it). One visible difference: 2.20 deprecates names imported from module_utils
  shims (``from ansible.module_utils._text import to_native``, as kubernetes.core 6.2.0 does), and the
  notice is emitted when the importing file is first executed. The zygote preloaded those files, so warm
  runs do not repeat those import-time notices (controller- or module-side); a fresh process shows them.

Every difference is a function here, chosen by the installed version; anything outside
:data:`SUPPORTED_MINORS` is refused before the zygote starts (``--executor runner`` still works: it only
drives ``ansible-playbook``). Kept free of Ansible imports at module level: the operator imports it too.
"""

from __future__ import annotations

import contextlib
import os
import re
from dataclasses import dataclass
from typing import Any, Callable, Iterator

SUPPORTED_MINORS: tuple[tuple[int, int], ...] = ((2, 16), (2, 17), (2, 18), (2, 19), (2, 20), (2, 21))
"""ansible-core minors whose internals the warm executor handles (tested in CI: the lowest and highest)."""

_VERSION = re.compile(r"^(\d+)\.(\d+)")


def minor(version: str) -> tuple[int, int] | None:
    found = _VERSION.match(version)
    return (int(found.group(1)), int(found.group(2))) if found else None


def supported_range() -> str:
    low, high = SUPPORTED_MINORS[0], SUPPORTED_MINORS[-1]
    return f"{low[0]}.{low[1]} - {high[0]}.{high[1]}"


def check(version: str) -> None:
    """RuntimeError (with the fallback named) unless ``version`` is a supported ansible-core."""
    if minor(version) not in SUPPORTED_MINORS:
        raise RuntimeError(
            f"the warm executor supports ansible-core {supported_range()} (it re-points those versions'"
            f" internals per run) but {version} is installed; use --executor runner"
        )


def data_tagging() -> bool:
    """True for ansible-core 2.19+ internals (``ansible._internal`` exists)."""
    import ansible.release

    return (minor(ansible.release.__version__) or (0, 0)) >= (2, 19)


def template_globals(templar: Any) -> set[str]:
    """The names of a ``Templar``'s Jinja globals. 2.19+ deprecates ``Templar.environment`` (a notice on
    stderr at each access) and keeps the environment on the template engine it wraps."""
    engine = getattr(templar, "_engine", None)
    environment = getattr(engine, "environment", None) if engine is not None else None
    if environment is None:
        environment = templar.environment
    return set(environment.globals)


def source_path(source: Any) -> str | None:
    """The file a module_utils source was read from (2.19+: its ``Origin`` tag; None before, or untagged)."""
    if not data_tagging():
        return None
    from ansible._internal._datatag._tags import Origin

    path = getattr(Origin.get_tag(source), "path", None)
    return path if isinstance(path, str) else None


def template_compile_key() -> Any:
    """A function giving what ansible-core itself feeds into compiling a template (2.19+: the compile
    context's backslash escaping and embedded-template setting; None while a template must not be cached,
    e.g. debuggable sources); before 2.19 the source itself changes instead, so the key is always ``()``."""
    if not data_tagging():
        return lambda: ()
    from ansible._internal._templating import _jinja_bits

    def key() -> tuple[Any, ...] | None:
        if getattr(_jinja_bits.AnsibleEnvironment, "_debuggable_template_source", False):
            return None
        compiling = _jinja_bits._TemplateCompileContext.current(optional=True)
        return (getattr(compiling, "escape_backslashes", None),
                bool(getattr(_jinja_bits._TemplateConfig, "allow_embedded_templates", False)))

    return key


def collection_finder_paths(collections_paths: list[str]) -> list[str]:
    """The path list ``plugins.loader._configure_collection_loader`` gives a fresh finder."""
    if data_tagging():
        from ansible import _internal

        return [os.path.dirname(_internal.__file__)] + list(collections_paths)
    return list(collections_paths)


_MODULE_FQN = re.compile(
    rb"^module_fqn=(['\"])(?P<fqn>[A-Za-z0-9_.]+)\1,?\s*$"  # 2.19: _ansiballz.run_module(module_fqn=...)
    rb"|runpy\.run_module\(mod_name=(['\"])(?P<old>[A-Za-z0-9_.]+)\3",  # 2.16 - 2.18
    re.MULTILINE,
)


def ansiballz_module_fqn(source: bytes) -> str | None:
    """The Python module name an AnsiballZ wrapper script runs (``ansible_collections.x.y.plugins...``)."""
    found = _MODULE_FQN.search(source)
    if found is None:
        return None
    return (found.group("fqn") or found.group("old")).decode("ascii")


_WRAPPER_CALL = b'\n\nif __name__ == "__main__":\n    _ansiballz_main(\n'
_WRAPPER_KEYS = frozenset({"ansible_module", "module_fqn", "profile", "date_time", "rlimit_nofile", "params",
                           "extensions", "zip_data"})


def ansiballz_direct_call(source: bytes) -> dict[str, Any] | None:
    """2.19+: the arguments of the AnsiballZ wrapper's ``_ansiballz_main(...)`` call, for running the module
    without the wrapper (:func:`run_module_directly`); None for any other shape, or for a call that needs the
    wrapper itself (an extension such as a debugger or coverage, an open-files limit to set).

    ``module_common`` writes that call as the script's last lines, one ``key=repr(value),`` per line; the
    huge ``zip_data`` and the ``date_time`` (for the zip's ``sitecustomize``) are not read.
    """
    import ast

    if not data_tagging():
        return None
    start = source.rfind(_WRAPPER_CALL)
    if start < 0 or not source.endswith(b"\n)\n"):
        return None
    values: dict[str, Any] = {}
    seen = set()
    for line in source[start + len(_WRAPPER_CALL):-3].split(b"\n"):
        key, sep, value = line.partition(b"=")
        name = key.decode("ascii", "replace")
        if not sep or not value.endswith(b",") or name not in _WRAPPER_KEYS or name in seen:
            return None
        seen.add(name)
        if name in ("zip_data", "date_time"):
            continue
        try:
            values[name] = ast.literal_eval(value[:-1].decode("utf-8"))
        except (ValueError, SyntaxError, UnicodeDecodeError):
            return None
    if seen != _WRAPPER_KEYS or values["extensions"] != {} or values["rlimit_nofile"] != 0:
        return None
    if not all(isinstance(values[k], str) for k in ("ansible_module", "module_fqn", "profile", "params")):
        return None
    return values


NO_PAYLOAD_ZIP = "<the module ran in-process: no payload zip>"
"""The ``_modlib_path`` a directly run module sees (only ``respawn_module`` reads it; no fast module does)."""


def run_module_directly(call: dict[str, Any]) -> None:
    """What the 2.19+ AnsiballZ wrapper does once its zip is written, minus the zip (the modules and
    module_utils it holds are the installed files this process imported): a working directory, no cwd on
    ``sys.path``, and ``_loader.run_module``, which runs the module as ``__main__`` and turns an exception
    into the module's failed result. Ends with the module's ``SystemExit``, as the wrapper does."""
    import sys

    from ansible.module_utils._internal._ansiballz import _loader

    try:
        os.getcwd()
    except OSError:
        try:
            os.chdir(os.path.expanduser("~"))
        except OSError:
            os.chdir("/")
    sys.path = [p for p in sys.path if p not in {"", "."}]
    _loader.run_module(json_params=call["params"].encode(), profile=call["profile"],
                       module_fqn=call["module_fqn"], modlib_path=NO_PAYLOAD_ZIP, extensions={})


_CONTROLLER_HOOKS = ("is_controller", "get_controller_serialize_map", "import_controller_module")


def _module_side_hook(name: str) -> Any:
    """The module side's value of one controller hook (what a module process without the controller has)."""
    return {"is_controller": False, "get_controller_serialize_map": lambda: {},
            "import_controller_module": lambda _name: None}[name]


def become_module_side() -> None:
    """In a forked module process: undo controller-only hooks module_utils got at import (2.19+ only)."""
    if not data_tagging():
        return
    from ansible.module_utils import _internal

    for name in _CONTROLLER_HOOKS:
        setattr(_internal, name, _module_side_hook(name))


def module_side_per_thread() -> Any:
    """2.19+: make module_utils' controller hooks answer per thread; a no-op before 2.19 (no split).

    ``ansible.module_utils._internal`` gets a module type whose three hooks are properties: a thread
    inside :func:`module_side_in_this_thread` sees the module side (what :func:`become_module_side`
    sets in a fork), every other thread the controller's values, which stay in the module's dict (and
    assignments still go there). module_utils reads the hooks through the module at each use ("the value
    of is_controller can change after import"). Controller-side caches a module-side caller would fill
    differently are filled first (:func:`_prime_controller_caches`). Returns the thread-local switch.
    """
    import threading
    import types

    if not data_tagging():
        return None
    from ansible.module_utils import _internal

    if isinstance(getattr(type(_internal), "_module_side", None), type(threading.local())):
        return type(_internal)._module_side
    _prime_controller_caches()
    local = threading.local()

    def hook(name: str) -> property:
        def get(module: types.ModuleType) -> Any:
            if getattr(local, "on", False):
                return _module_side_hook(name)
            return module.__dict__[name]

        def set_(module: types.ModuleType, value: Any) -> None:
            module.__dict__[name] = value

        return property(get, set_)

    namespace: dict[str, Any] = {name: hook(name) for name in _CONTROLLER_HOOKS}
    namespace["_module_side"] = local
    _internal.__class__ = type("_PerThreadControllerHooks", (types.ModuleType,), namespace)
    return local


def _prime_controller_caches() -> None:
    """Fill, on the controller side, what module_utils computes once from the hooks: the JSON profiles a
    module and the controller share (their serialize maps take the controller's types at class creation)
    and the cached encoding-check setting. Without this, a module imported or asked first would leave the
    controller its module-side answers."""
    import importlib

    for name in ("module_legacy_c2m", "module_legacy_m2c", "module_modern_c2m", "module_modern_m2c"):
        with contextlib.suppress(ImportError):
            importlib.import_module(f"ansible.module_utils._internal._json._profiles._{name}")
    with contextlib.suppress(ImportError, AttributeError):
        from ansible.module_utils._internal._json import _profiles

        _profiles._string_encoding_check_enabled()


@contextlib.contextmanager
def module_side_in_this_thread(switch: Any) -> Iterator[None]:
    """Within: this thread sees module_utils' module side (``switch`` from :func:`module_side_per_thread`)."""
    if switch is None:
        yield
        return
    before = getattr(switch, "on", False)
    switch.on = True
    try:
        yield
    finally:
        switch.on = before


def preload_module_side() -> None:
    """Import what every forked module needs before its own code (the AnsiballZ loader on 2.19)."""
    import ansible.module_utils.basic  # noqa: F401

    if data_tagging():
        import ansible.module_utils._internal._ansiballz._loader  # noqa: F401


def preload_json_profiles() -> None:
    """2.19+ import a JSON profile module (``ansible.module_utils._internal._json._profiles._*``) the first
    time a run encodes or decodes with it (module arguments, results, callbacks): four per run, even an
    empty play's. Imported once in the zygote instead; nothing on 2.16 - 2.18, which have none."""
    import importlib
    import pkgutil

    try:
        package = importlib.import_module("ansible.module_utils._internal._json._profiles")
    except ImportError:
        return
    for info in pkgutil.iter_modules(package.__path__):
        importlib.import_module(f"{package.__name__}.{info.name}")


def worker_setsid_hook() -> tuple[Any, str] | None:
    """(class, method name) whose ``os.setsid`` call detaches Ansible's workers, or None (2.16 - 2.18).

    2.21's ``_detach`` calls ``os.setpgid(0, 0)`` instead when ``WORKER_SESSION_ISOLATION`` is false (a
    task may set ``ansible_worker_session_isolation``): the hook must neutralise both to keep the worker in
    the run's process group (``child._keep_workers_in_the_run``; tests/unit/test_ansible_compat.py).
    """
    from ansible.executor.process.worker import WorkerProcess

    return (WorkerProcess, "_detach") if hasattr(WorkerProcess, "_detach") else None


def payload_store_supported() -> bool:
    """The shared AnsiballZ payload store hooks 2.19's builder; older versions build per run."""
    if not data_tagging():
        return False
    from ansible.executor import module_common

    return all(hasattr(module_common, name) for name in
               ("_find_module_utils", "recursive_finder", "_compile_module_ast", "_CachedModule"))


@dataclass(frozen=True)
class PayloadBuilder:
    """The four steps of 2.19's AnsiballZ payload builder that the shared payload store hooks
    (``payloads.install``; only where :func:`payload_store_supported`): ``module_common._find_module_utils``
    (looks the payload up in the run's ``ansiballz_cache``, builds it if absent), ``recursive_finder``
    (collects the module_utils), ``_compile_module_ast`` (called per source file) and
    ``_CachedModule.dump`` (writes the cache file)."""

    find_module_utils: Callable[..., Any]
    recursive_finder: Callable[..., Any]
    compile_module_ast: Callable[..., Any]
    dump: Callable[..., Any]


def payload_builder() -> PayloadBuilder:
    """This process's payload builder as installed now (Ansible's own until :func:`set_payload_builder`)."""
    from ansible.executor import module_common

    return PayloadBuilder(find_module_utils=module_common._find_module_utils,
                          recursive_finder=module_common.recursive_finder,
                          compile_module_ast=module_common._compile_module_ast,
                          dump=module_common._CachedModule.dump)


def set_payload_builder(builder: PayloadBuilder) -> None:
    """Make ``builder``'s steps the ones ``module_common`` calls, in this process (a run child)."""
    from ansible.executor import module_common

    module_common._find_module_utils = builder.find_module_utils
    module_common.recursive_finder = builder.recursive_finder
    module_common._compile_module_ast = builder.compile_module_ast
    module_common._CachedModule.dump = builder.dump


@contextlib.contextmanager
def import_time_notices_dropped() -> Iterator[None]:
    """While the zygote preloads: drop what ``ansible.module_utils.common.warnings`` records or displays.

    ansible-core 2.20+ emits deprecation notices when a file imports a module_utils shim
    (``from ansible.module_utils._text import to_native``, ``module_utils.common._collections_compat``:
    kubernetes.core 6.2.0 does both). In the zygote they are not about any run: on the controller side
    Display printed them to the operator's stderr (awx_display already loaded, as bare event markers with no
    newline, which broke ``--log-format json``); on older versions the module side would have kept them in
    the list every forked module inherits and reports. A fresh ``ansible-playbook`` shows them per run.

    Modules first imported meanwhile that bind the functions by name (``basic`` does
    ``from ...warnings import warn``) get the real ones back afterwards: without that, every warm module's
    ``module.warn()`` and ``module.deprecate()`` were dropped too.
    """
    import sys

    from ansible.module_utils.common import warnings as module_warnings

    saved_deprecate, saved_warn = module_warnings.deprecate, module_warnings.warn

    def drop_deprecate(*_args: Any, **_kwargs: Any) -> None:
        return None

    def drop_warn(*_args: Any, **_kwargs: Any) -> None:
        return None

    module_warnings.deprecate, module_warnings.warn = drop_deprecate, drop_warn
    try:
        yield
    finally:
        module_warnings.deprecate, module_warnings.warn = saved_deprecate, saved_warn
        for module in list(sys.modules.values()):
            namespace = getattr(module, "__dict__", None)
            if not isinstance(namespace, dict):
                continue
            for name, value in list(namespace.items()):
                if value is drop_deprecate:
                    namespace[name] = saved_deprecate
                elif value is drop_warn:
                    namespace[name] = saved_warn


def worker_task_context(worker: Any) -> contextlib.AbstractContextManager[Any]:
    """The ambient task context ``WorkerProcess.run`` enters around ``_run`` (2.19+; nothing before)."""
    if not data_tagging():
        return contextlib.nullcontext()
    from ansible._internal import _task

    context = _task.TaskContext
    if not hasattr(context, "create"):
        entered: contextlib.AbstractContextManager[Any] = context(worker._task)
        return entered
    # 2.21: the task vars and the host name too, and an inventory RPC client (add_host, group_by)
    created: contextlib.AbstractContextManager[Any] = context.create(
        task=worker._task, task_vars=worker._task_vars, host_name=worker._host.name)
    if "inventory_rpc_client" in vars(context):
        vars(created)["inventory_rpc_client"] = _InventoryCallsInStrategyThread()
    return created


class _InventoryCallsInStrategyThread:
    """2.21's inventory RPC client for a task run in the strategy's own thread (``warm.tasks``).

    A worker's ``add_host``/``add_group`` go through a manager socket to the controller, which queues them
    for the strategy's main thread (``_process_rpc_queue``, between task results). A task run in that
    thread would wait for itself: its calls run the implementation directly, which is what the queue would
    have done, in the same thread, serially.
    """

    def __getattr__(self, name: str) -> Any:
        from ansible._internal._worker._inventory_rpc import InventoryRPC

        call = getattr(InventoryRPC, name)
        return getattr(call, "__wrapped__", call)  # without dispatch_to_strategy_result_thread


def send_worker_failure(worker: Any, exc: BaseException) -> None:
    """Send a failed result for ``worker``'s task, built from ``exc`` as the version's worker would."""
    queue = worker._final_q
    if not data_tagging():  # 2.16 - 2.18: host name, task uuid, result dict, task fields
        import traceback

        queue.send_task_result(worker._host.name, worker._task._uuid,
                               {"failed": True, "msg": str(exc),
                                "exception": "".join(traceback.format_exception(exc))}, task_fields={})
        return
    from ansible._internal import _task

    if hasattr(_task, "UnifiedTaskResult"):  # 2.21
        result = _task.UnifiedTaskResult.create_from_action_exception(exc)
        result.finalize_registered_values()
        queue.send_task_result(worker._host, worker._task, result)
        return
    from ansible._internal._errors import _error_utils
    from ansible.executor.task_result import _RawTaskResult

    queue.send_task_result(_RawTaskResult(host=worker._host, task=worker._task,
                                          return_data=_error_utils.result_dict_from_exception(exc),
                                          task_fields={}))
