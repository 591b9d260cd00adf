"""AnsiballZ payloads built once per zygote, not once per run: a cache shared by the warm executor's runs.

Before a module task runs, Ansible builds its AnsiballZ payload: it parses the module and, recursively,
every ``module_utils`` file it imports (``module_common.recursive_finder``) and zips them. For a
kubernetes.core module that is ~60 files and ~0.15-0.2 s of CPU -- measured with py-spy, 62 % of a warm
Memcached run. Ansible caches the result in ``<DEFAULT_LOCAL_TMP>/ansiballz_cache``, i.e. for one
``ansible-playbook`` process; a warm run has its own ``DEFAULT_LOCAL_TMP`` (and a plain ansible-runner run
its own process), so every run paid the build again.

This module keeps built payloads in a store under the zygote's temporary directory (it lives exactly as
long as the zygote) and hands each run the entries that are still valid:

* an entry is keyed by the **module file Ansible resolved for the task** (so a run whose collection or
  roles path resolves the same name to another file never gets it) and Ansible's own cache name
  (FQCN, compression, extensions such as the debugger);
* it records every source file that went into the payload (the module and each ``module_utils`` file
  parsed by ``_compile_module_ast``), with size and mtime; a changed or missing file invalidates it, and
  the task builds the payload again, as a fresh ``ansible-playbook`` would;
* store files are written to a temporary name and renamed, so a concurrent run sees a whole entry or none.

Everything else about a module task is unchanged: Ansible's ``_find_module_utils`` still finds the entry
in the run's own ``ansiballz_cache`` (we copy it there just before the lookup) and does the rest
(interpreter, arguments, wrapper) for this task. Relies on ansible-core internals
(``module_common._find_module_utils``, ``recursive_finder``, ``_compile_module_ast``, ``_CachedModule``),
reached only through ``ansible_compat.PayloadBuilder``: ansible-core 2.19's
(``ansible_compat.payload_store_supported``; 2.16 - 2.18 runs build their payloads as ``ansible-playbook``
does) and tested in ``tests/unit/test_zygote_payloads.py``.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import tempfile
from typing import Any

STORE_DIRNAME = "ansiballz-store"
_HEADER = struct.Struct(">I")

Source = tuple[str, int, int]
"""(path, st_mtime_ns, st_size) of one file that went into a payload."""


def _stat(path: str) -> Source | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (path, st.st_mtime_ns, st.st_size)


def _prefix(module_path: str) -> str:
    return hashlib.sha256(os.path.realpath(module_path).encode("utf-8", "surrogateescape")).hexdigest()[:24]


def _write_atomically(path: str, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(prefix=".part-", dir=os.path.dirname(path))
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def encode_entry(sources: list[Source], payload: bytes) -> bytes:
    header = json.dumps({"sources": sources}).encode("utf-8")
    return _HEADER.pack(len(header)) + header + payload


def decode_entry(data: bytes) -> tuple[list[Source], bytes] | None:
    """(sources, Ansible's cache file bytes), or None for a truncated or foreign file."""
    if len(data) < _HEADER.size:
        return None
    (length,) = _HEADER.unpack_from(data)
    end = _HEADER.size + length
    try:
        header = json.loads(data[_HEADER.size:end])
        sources = [(str(p), int(m), int(s)) for p, m, s in header["sources"]]
    except (ValueError, KeyError, TypeError):
        return None
    return sources, data[end:]


def is_fresh(sources: list[Source]) -> bool:
    """Every recorded source still has the same size and mtime (and there is at least one)."""
    return bool(sources) and all(_stat(path) == (path, mtime, size) for path, mtime, size in sources)


class PayloadStore:
    """The shared store, one file per (resolved module file, Ansible cache name)."""

    def __init__(self, root: str) -> None:
        self.root = root
        os.makedirs(root, mode=0o700, exist_ok=True)

    def _entry_path(self, module_path: str, cache_name: str) -> str:
        return os.path.join(self.root, f"{_prefix(module_path)}--{cache_name}")

    def hand_out(self, module_path: str, cache_dir: str) -> int:
        """Copy this module's fresh entries into a run's ``ansiballz_cache``; returns how many."""
        prefix = _prefix(module_path) + "--"
        try:
            names = [n for n in os.listdir(self.root) if n.startswith(prefix)]
        except OSError:
            return 0
        copied = 0
        for name in names:
            target = os.path.join(cache_dir, name[len(prefix):])
            if os.path.exists(target):
                continue
            try:
                with open(os.path.join(self.root, name), "rb") as fh:
                    decoded = decode_entry(fh.read())
            except OSError:
                continue
            if decoded is None or not is_fresh(decoded[0]):
                continue  # the task builds it again and publish() replaces this entry
            os.makedirs(cache_dir, exist_ok=True)
            _write_atomically(target, decoded[1])
            copied += 1
        return copied

    def publish(self, module_path: str, cache_file: str, sources: list[Source]) -> None:
        """Store the payload Ansible just wrote to ``cache_file`` (in a run's ``ansiballz_cache``)."""
        with open(cache_file, "rb") as fh:
            payload = fh.read()
        _write_atomically(self._entry_path(module_path, os.path.basename(cache_file)),
                          encode_entry(sources, payload))


def install(store_root: str) -> PayloadStore:
    """Wrap ansible-core's payload builder in this process (a run child) to use the shared store."""
    from ansible_operator.executors import ansible_compat

    store = PayloadStore(store_root)
    state: dict[str, Any] = {"module_path": None, "sources": None, "built": None}
    original = ansible_compat.payload_builder()

    def find_module_utils(*args: Any, **kwargs: Any) -> Any:
        from ansible import constants as C

        module_path = kwargs.get("module_path")
        if not isinstance(module_path, str):
            return original.find_module_utils(*args, **kwargs)
        store.hand_out(module_path, os.path.join(C.DEFAULT_LOCAL_TMP, "ansiballz_cache"))
        state["module_path"] = module_path
        try:
            return original.find_module_utils(*args, **kwargs)
        finally:
            state["module_path"] = None

    def recursive_finder(*args: Any, **kwargs: Any) -> Any:
        state["sources"] = []
        try:
            result = original.recursive_finder(*args, **kwargs)
            state["built"] = state["sources"]
            return result
        finally:
            state["sources"] = None

    def compile_module_ast(module_name: str, source_code: Any) -> Any:
        sources = state["sources"]
        if sources is not None:
            path = ansible_compat.source_path(source_code)
            if path and (entry := _stat(path)) is not None:
                sources.append(entry)
        return original.compile_module_ast(module_name, source_code)

    def dump_and_publish(self: Any, path: str) -> None:
        original.dump(self, path)
        module_path, built = state["module_path"], state["built"]
        state["built"] = None
        if module_path and built and (module := _stat(module_path)) is not None:
            try:
                store.publish(module_path, path, sorted(set(built) | {module}))
            except OSError:
                pass  # a full disk costs the next run a rebuild, nothing else

    ansible_compat.set_payload_builder(ansible_compat.PayloadBuilder(
        find_module_utils=find_module_utils, recursive_finder=recursive_finder,
        compile_module_ast=compile_module_ast, dump=dump_and_publish))
    return store
