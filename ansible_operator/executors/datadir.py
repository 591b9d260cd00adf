"""Lay out one run's ansible-runner *private data dir*: inventory, extra vars file, playbook, environment.

Both executors run from the same layout, so a run can be inspected (or re-run by hand with
``ansible-runner run <dir> -p <playbook>``) the same way whichever executor produced it::

    <private_data_dir>/            0700
      inventory/hosts              localhost, local connection, this interpreter
      env/extravars                0600  the run's extra vars as YAML (``!unsafe`` tags from varsfile.dump)
      env/envvars                  0600  the environment additions below, as JSON (ansible-runner reads it)
      project/main.yml             only for a role: the play Operator SDK generates for it
      artifacts/<run_id>/          written by the run (ansible-runner's layout)

Extra vars live only in ``env/extravars`` and reach ansible-playbook as ``-e @<that file>``, never as
values on a command line (``/proc/<pid>/cmdline`` is world-readable), and the file is created 0600 before
any content is written.
"""

from __future__ import annotations

import functools
import json
import os
import secrets
import sys
import threading
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Mapping

import yaml

from ansible_operator.executors import varsfile
from ansible_operator.executors.base import RunRequest

__all__ = ["PreparedRun", "new_run_id", "prepare", "render_extravars", "role_play"]

DEFAULT_COLLECTIONS_PATH = (
    Path("~/.ansible/collections").expanduser(),
    Path("/usr/share/ansible/collections"),
)


def new_run_id(now: datetime | None = None) -> str:
    """``YYYYmmddTHHMMSSZ-<6 hex>``: sorts by start time, to the microsecond.

    The tail is the microseconds (5 hex digits) plus one random hex digit: warm runs can take a fraction of
    a second, and run directories are ordered (and pruned) by name, so two runs of one object in the same
    second must still sort in start order.
    """
    global _last_run_moment
    if now is not None and now.tzinfo is None:
        raise ValueError("new_run_id needs an aware datetime (got a naive one)")
    with _run_id_lock:
        moment = (now or datetime.now(timezone.utc)).astimezone(timezone.utc)
        if now is None and _last_run_moment is not None and moment <= _last_run_moment:
            moment = _last_run_moment + timedelta(microseconds=1)  # strictly increasing in this process
        if now is None:
            _last_run_moment = moment
    return f"{moment:%Y%m%dT%H%M%SZ}-{moment.microsecond:05x}{secrets.token_hex(1)[0]}"


_run_id_lock = threading.Lock()
_last_run_moment: datetime | None = None


@dataclass(frozen=True)
class PreparedRun:
    private_data_dir: Path
    playbook: Path
    """Absolute path of the playbook to run (the generated ``project/main.yml`` for a role)."""
    inventory: Path
    extravars_file: Path
    artifacts_dir: Path
    """``private_data_dir/artifacts/<run_id>``: where ansible-runner writes this run's artifacts."""
    env: dict[str, str]
    """Additions to the operator's own environment (PATH, ANSIBLE_* paths, the request's envvars)."""


def render_extravars(extra_vars: Mapping[str, Any]) -> str:
    """YAML for ``env/extravars``; ``varsfile.dump`` writes ``Unsafe`` values with ``!unsafe`` tags."""
    return varsfile.dump(extra_vars)


def _gather_facts(env: Mapping[str, str]) -> bool:
    """Operator SDK gathers facts for a role run unless ``ANSIBLE_GATHERING=explicit``."""
    return env.get("ANSIBLE_GATHERING", os.environ.get("ANSIBLE_GATHERING", "")).strip().lower() != "explicit"


def role_play(role_name: str, *, gather_facts: bool) -> str:
    """The play ansible-runner generates for ``--role`` (what Operator SDK runs): hosts localhost."""
    play = [{"hosts": "localhost", "gather_facts": gather_facts, "roles": [role_name]}]
    return yaml.safe_dump(play, default_flow_style=False, sort_keys=False)


def _split_role(role: str) -> tuple[str, Path | None]:
    """``/abs/roles/memcached`` → (``memcached``, ``/abs/roles``); an FQCN or bare name → (name, None)."""
    if os.sep in role or role.startswith("~"):
        path = Path(role).expanduser()
        if not path.is_absolute():
            raise ValueError(f"role {role!r}: a role given as a path must be absolute")
        if not path.is_dir():
            raise ValueError(f"role {role!r}: no such role directory")
        return path.name, path.parent
    if not role.strip():
        raise ValueError("role name is empty")
    return role, None


def _join(paths: list[Path] | tuple[Path, ...]) -> str:
    return os.pathsep.join(dict.fromkeys(str(p) for p in paths))


def _write_private(path: Path, text: str) -> None:
    """Create ``path`` as 0600 *before* writing, so the content is never readable by others."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)  # an existing file keeps its old mode through O_CREAT
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            fd = -1
            f.write(text)
    finally:
        if fd != -1:
            os.close(fd)


RUN_ID_ENV = "ANSIBLE_OPERATOR_RUN_ID"
"""Set in every run's environment; every process of the run (modules too) inherits it, so a stopped run's
leftovers can be found even after they were re-parented (see ``runner.kill_leftovers``)."""


def ansible_config() -> Any:
    """ansible-core's ``ConfigManager`` as the runs will see it (raises without ansible-core, or for an
    unreadable ``ansible.cfg``). Building one parses ansible-core's definitions of every setting (~0.3 s
    of pure-Python YAML): built once per ``ansible.cfg`` location (``$ANSIBLE_CONFIG``, the working
    directory, the home directory)."""
    return _ansible_config(os.environ.get("ANSIBLE_CONFIG"), os.getcwd(), os.path.expanduser("~"))


@functools.lru_cache(maxsize=4)
def _ansible_config(_config: str | None, _cwd: str, _home: str) -> Any:
    from ansible.config.manager import ConfigManager

    return ConfigManager()


CONFIG_FILES = ("ansible.cfg", "~/.ansible.cfg", "/etc/ansible/ansible.cfg")
"""Where ansible-core looks for its configuration after ``$ANSIBLE_CONFIG``, first found wins (the first
relative to the working directory)."""


def reads_no_config_file() -> bool:
    """True when Ansible would read no ``ansible.cfg`` here: ``$ANSIBLE_CONFIG`` is unset and none of
    :data:`CONFIG_FILES` exists. Its settings are then their environment variables or defaults, and no
    ``ConfigManager`` (~0.25 CPU s: ansible-core's definitions of every setting, in YAML) is needed to know
    them. Conservative: a file Ansible would skip (``./ansible.cfg`` in a world-writable directory, an
    unreadable one) counts as read. ansible-core's own search (``find_ini_config_file``) is not called: its
    module imports 48 of ansible-core's (~0.1 CPU s at each operator start) for these few stat calls."""
    if os.environ.get("ANSIBLE_CONFIG") is not None:
        return False
    return not any(os.path.lexists(os.path.expanduser(p)) for p in CONFIG_FILES)


@functools.lru_cache(maxsize=1)
def configured_roles_path() -> tuple[str, ...]:
    """The roles path Ansible would use without ``$ANSIBLE_ROLES_PATH``: ``roles_path`` of the ``ansible.cfg``
    it reads, else its default (``~/.ansible/roles``, ``/usr/share/ansible/roles``, ``/etc/ansible/roles``,
    where ``ansible-galaxy role install`` puts roles). A run's ``ANSIBLE_ROLES_PATH`` puts the watched role's
    directory first and must keep these after it: the SDK sets no roles path, so a role's dependencies
    installed there resolve under it. Read once (the operator's working directory and config stay)."""
    if reads_no_config_file() and os.environ.get("ANSIBLE_HOME") is None:
        # ANSIBLE_HOME's default (~/.ansible, a `path`: expanded, normalised against the working directory)
        home = os.path.normpath(os.path.join(os.getcwd(), os.path.expanduser("~/.ansible")))
        return _default_roles_path(home)
    try:
        config = ansible_config()
        value, origin = config.get_config_value_and_origin("DEFAULT_ROLES_PATH")
        if origin == "default":
            return _default_roles_path(str(config.get_config_value("ANSIBLE_HOME")))
    except Exception:  # no ansible-core here, or an unreadable ansible.cfg (the run itself will report it)
        return ()
    return tuple(str(v) for v in value) if isinstance(value, list) else ()


def _default_roles_path(ansible_home: str) -> tuple[str, ...]:
    """base.yml's default DEFAULT_ROLES_PATH:
    ``{{ ANSIBLE_HOME ~ "/roles:/usr/share/ansible/roles:/etc/ansible/roles" }}``."""
    return (os.path.join(ansible_home, "roles"), "/usr/share/ansible/roles", "/etc/ansible/roles")


def _environment(request: RunRequest, role_parent: Path | None) -> dict[str, str]:
    env: dict[str, str] = {RUN_ID_ENV: request.run_id}
    # ansible-playbook must come from the operator's own installation (a venv may not be on PATH).
    bindir = str(Path(sys.executable).parent)
    path = os.environ.get("PATH", "")
    if path.split(os.pathsep)[:1] != [bindir]:
        env["PATH"] = os.pathsep.join(p for p in (bindir, path) if p)

    roles = ([role_parent] if role_parent else []) + list(request.roles_path)
    inherited_roles = os.environ.get("ANSIBLE_ROLES_PATH") or os.pathsep.join(configured_roles_path())
    if roles:
        env["ANSIBLE_ROLES_PATH"] = _join(roles) + (os.pathsep + inherited_roles if inherited_roles else "")

    if request.collections_path:
        inherited = os.environ.get("ANSIBLE_COLLECTIONS_PATH")
        tail = (
            [Path(p) for p in inherited.split(os.pathsep) if p]
            if inherited
            else list(DEFAULT_COLLECTIONS_PATH)
        )
        env["ANSIBLE_COLLECTIONS_PATH"] = _join(list(request.collections_path) + tail)

    env.update({str(k): str(v) for k, v in request.envvars.items()})
    return env


def prepare(request: RunRequest) -> PreparedRun:
    """Create the private data dir for ``request``; raises ``ValueError`` for a bad role/playbook."""
    if (request.playbook is None) == (request.role is None):
        raise ValueError("a run needs exactly one of playbook / role")
    role_name: str | None = None
    role_parent: Path | None = None
    if request.role is not None:
        role_name, role_parent = _split_role(request.role)
    else:
        assert request.playbook is not None
        if not request.playbook.is_absolute():
            raise ValueError(f"playbook {str(request.playbook)!r} must be an absolute path")
        if not request.playbook.is_file():
            raise ValueError(f"playbook {str(request.playbook)!r} does not exist")

    # Render first: a value extravars cannot represent fails before anything is written.
    extravars_text = render_extravars(request.extra_vars)
    env = _environment(request, role_parent)

    pdd = request.private_data_dir
    pdd.mkdir(parents=True, exist_ok=True, mode=0o700)
    pdd.chmod(0o700)  # mkdir's mode is filtered by the umask, and exist_ok keeps an old mode
    for sub in ("inventory", "env", "project"):
        (pdd / sub).mkdir(exist_ok=True, mode=0o700)

    # ANSIBLE_INVENTORY set for the operator replaces the generated one, as in Operator SDK.
    configured_inventory = env.get("ANSIBLE_INVENTORY") or os.environ.get("ANSIBLE_INVENTORY")
    if configured_inventory:
        inventory = Path(configured_inventory)
    else:
        inventory = pdd / "inventory" / "hosts"
        inventory.write_text(
            f"localhost ansible_connection=local ansible_python_interpreter={sys.executable}\n",
            encoding="utf-8",
        )

    extravars_file = pdd / "env" / "extravars"
    _write_private(extravars_file, extravars_text)
    _write_private(pdd / "env" / "envvars", json.dumps(env, indent=2, sort_keys=True) + "\n")

    if role_name is not None:
        playbook = pdd / "project" / "main.yml"
        playbook.write_text(role_play(role_name, gather_facts=_gather_facts(env)), encoding="utf-8")
    else:
        assert request.playbook is not None
        playbook = request.playbook

    return PreparedRun(private_data_dir=pdd, playbook=playbook, inventory=inventory,
                       extravars_file=extravars_file, artifacts_dir=pdd / "artifacts" / request.run_id,
                       env=env)
