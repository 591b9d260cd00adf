"""The variable names ansible-core gives a meaning of its own: its magic variables and its template globals.

A spec field must never set one (``extravars`` refuses it). Read from the ansible-core the runs use, never
from a list of ours: :func:`collect` runs where ansible-core is imported anyway (the warm executor's zygote
reports them when it is ready), else in a child process (:func:`read`), so the operator does not keep all
of Ansible imported for a list of names. What a child process read is kept in a file of the user's cache
(``${XDG_CACHE_HOME:-~/.cache}/ansible-operator/``) under a key of the interpreter, the ansible-core files
the names come from and this code: the next start of an operator on the same installation reads the file
instead of starting a child (~0.4 CPU s).
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from ansible_operator.executors import ansible_compat

__all__ = ["DOCUMENTED_MAGIC", "cache_file", "collect", "parse", "read", "read_blocking"]

DOCUMENTED_MAGIC = frozenset({
    # Ansible's "Special variables" page, in case an ansible-core release moves the lists read below.
    "omit", "hostvars", "groups", "group_names", "inventory_hostname", "inventory_hostname_short",
    "inventory_dir", "inventory_file", "playbook_dir", "play_hosts", "role_name", "role_names", "role_path",
    "role_uuid", "vars", "lookup", "query", "q",
})

_SCRIPT = ("import json; from ansible_operator.executors.reserved import collect; "
           "print(json.dumps(collect()))")


def collect() -> list[str]:
    """The names, read from ansible-core in this process (imports it): sorted, without the documented list
    (see :func:`parse`)."""
    names: set[str] = set()
    try:
        import ansible.constants as C  # noqa: N812, PLC0415

        names.update(getattr(C, "INTERNAL_STATIC_VARS", ()))
    except Exception:  # noqa: BLE001, S110 - an ansible-core without it: the other sources still count
        pass
    try:
        from ansible.inventory.host import Host  # noqa: PLC0415

        names.update(Host("localhost").get_magic_vars())
    except Exception:  # noqa: BLE001, S110
        pass
    try:  # Ansible's own template globals (omit, lookup, query, q, now, undef), not Jinja's defaults
        from ansible.parsing.dataloader import DataLoader  # noqa: PLC0415
        from ansible.template import Templar  # noqa: PLC0415
        from jinja2.defaults import DEFAULT_NAMESPACE  # noqa: PLC0415

        names.update(ansible_compat.template_globals(Templar(loader=DataLoader())) - set(DEFAULT_NAMESPACE))
    except Exception:  # noqa: BLE001, S110
        pass
    return sorted(str(n) for n in names)


def parse(names: object, python: str) -> frozenset[str]:
    """What :func:`collect` returned (decoded), checked, with the documented names added; a clear error
    when ansible-core could not be read (``python``: whose)."""
    if not isinstance(names, list) or len(names) < 10:
        raise RuntimeError(f"could not read the reserved variable names from ansible-core ({python}):"
                           f" {str(names).strip()[:200]!r}")
    return frozenset(str(n) for n in names) | DOCUMENTED_MAGIC


def _decode(output: str) -> object:
    try:
        return json.loads(output)
    except ValueError:
        return output


async def read(python: str) -> frozenset[str]:
    """:func:`collect` in a child process of interpreter ``python``, without blocking the event loop (or
    from the cache, see the module: its files are read and written in a worker thread)."""
    cache, kept = await asyncio.to_thread(_kept, python)
    if kept is not None:
        return kept
    proc = await asyncio.create_subprocess_exec(python, "-c", _SCRIPT, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.DEVNULL)
    out, _ = await proc.communicate()
    return await asyncio.to_thread(_parse_and_keep, _decode(out.decode("utf-8", "replace")), python, cache)


def read_blocking(python: str, *, cached: bool = True) -> frozenset[str]:
    """:func:`read`, blocking; ``cached=False`` starts the child whatever the cache holds (and writes it)."""
    cache, kept = _kept(python, cached=cached)
    if kept is not None:
        return kept
    proc = subprocess.run([python, "-c", _SCRIPT], capture_output=True, text=True, timeout=120, check=False)
    return _parse_and_keep(_decode(proc.stdout), python, cache)


def _kept(python: str, *, cached: bool = True) -> tuple[Path | None, frozenset[str] | None]:
    """The cache file for ``python`` (see :func:`cache_file`) and the names it holds (None: none usable, or
    ``cached=False``)."""
    cache = cache_file(python)
    names = _load(cache) if cached else None
    return cache, (parse(names, python) if names is not None else None)


def cache_file(python: str) -> Path | None:
    """The cache file of the names ``python``'s ansible-core gives, or None where no key can be made here:
    another interpreter than this process's (its ansible-core is not the one found here), no ansible-core,
    an unreadable file. The key covers the interpreter, where ansible-core is installed and the files the
    names come from (its release, constants, inventory host and templar; size and modification time: an
    upgrade in place changes them), and this module and the compat module that read them."""
    try:
        if os.path.realpath(python) != os.path.realpath(sys.executable):
            return None
        spec = importlib.util.find_spec("ansible")  # finds the package, imports nothing of it
        if spec is None or not spec.submodule_search_locations:
            return None
        root = Path(next(iter(spec.submodule_search_locations)))
        sources = [root / "release.py", root / "constants.py", root / "inventory" / "host.py",
                   Path(__file__), Path(ansible_compat.__file__)]
        template = root / "template"
        sources.append(template / "__init__.py" if template.is_dir() else root / "template.py")
        parts = [os.path.realpath(python), str(root)]
        for source in sources:
            st = source.stat()
            parts.append(f"{source}:{st.st_size}:{st.st_mtime_ns}")
        # no $HOME and no passwd entry (an arbitrary uid in a container): RuntimeError, no cache
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    except (OSError, ValueError, ImportError, RuntimeError):
        return None
    key = hashlib.sha256("\n".join(parts).encode()).hexdigest()[:24]
    return base / "ansible-operator" / f"reserved-names-{key}.json"


def _load(cache: Path | None) -> list[str] | None:
    """The names kept in ``cache``; None when there are none (or the file is not what this module writes:
    it is read again, and written over)."""
    if cache is None:
        return None
    try:
        names = json.loads(cache.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(names, list) or len(names) < 10 or not all(isinstance(n, str) for n in names):
        return None
    return names


def _parse_and_keep(names: object, python: str, cache: Path | None) -> frozenset[str]:
    """:func:`parse`; what parses is written to ``cache`` (atomically: operators starting together may write
    it at once). A cache that cannot be written is left alone: the names were read."""
    parsed = parse(names, python)
    if cache is not None:
        try:
            cache.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=cache.name, dir=cache.parent)
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as f:
                    json.dump(names, f)
                os.replace(tmp, cache)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
        except OSError:
            pass
    return parsed
