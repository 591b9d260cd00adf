"""Wire format shared by the warm executor (operator side) and its zygote process.

Kept dependency-free so the zygote can import it before Ansible and the operator can import it without
Ansible. Both directions are JSON lines (one object per ``\\n``-terminated line, UTF-8).

operator -> zygote (zygote's stdin):
    {"op": "run", "id": RUN_ID, "spec": RunSpec}       fork a child for this run
    {"op": "kill", "id": RUN_ID}                        SIGKILL the run's child and everything it started
    {"op": "exit"}                                      kill all children and exit (EOF means the same)

zygote -> operator (the zygote's original stdout; Ansible's own output never goes there):
    {"op": "ready", "pid": PID, "ansible_core": VERSION, "preload_seconds": FLOAT}
    {"op": "fatal", "error": TEXT}                      the zygote cannot serve (unsupported ansible-core)
    {"op": "started", "id": RUN_ID, "pid": PID}
    {"op": "event", "id": RUN_ID, "event": {...}}       an ansible-runner event, in emission order
    {"op": "result", "id": RUN_ID, "status": S, "rc": N}  the child finished the playbook normally
    {"op": "error", "id": RUN_ID, "error": TEXT}        the child hit an internal error (traceback in stderr)
    {"op": "exited", "id": RUN_ID, "pid": PID, "exit_code": N|null, "signal": N|null}
        always the last message for a run; every event/result line of that run precedes it.

child -> zygote (a private pipe per child): lines prefixed with one tag character,
    ``E`` + event JSON, ``R`` + result JSON, ``X`` + error JSON; the zygote re-wraps them without parsing.
"""

from __future__ import annotations

from typing import Any, TypedDict

REMOVE_CWD = "--remove-cwd-at-exit"
"""The zygote's argument when its working directory is the executor's private one: it removes it when it
exits, also when the operator was killed and never removes it itself."""

CHILD_TAG_EVENT = b"E"
CHILD_TAG_RESULT = b"R"
CHILD_TAG_ERROR = b"X"


class RunSpec(TypedDict):
    """What a forked child needs to run one playbook; every path is absolute."""

    ident: str
    private_data_dir: str
    cwd: str
    playbook: str
    inventory: str
    extravars_file: str | None
    artifacts_dir: str
    env: dict[str, str]
    """Additions to the zygote's environment (``PreparedRun.env``: ANSIBLE_ROLES_PATH, envvars...)."""
    verbosity: int
    fast_modules: list[str]
    """Module FQCN prefixes run in a fork of the worker instead of a new interpreter (warm.fast_modules)."""
    ansible_args: list[str]
    """Extra ansible-playbook arguments (``--ansible-args``), placed before the playbook."""
    fast_path: bool
    """The run child's fast path (issue 14): wake-up driven result wait instead of Ansible's 1 ms polling
    (``warm.child``). Off with ``ANSIBLE_OPERATOR_WARM_FAST_PATH=false``."""
    tasks_in_process: bool
    """Localhost tasks run in the run child, not in a forked Ansible worker (``warm.tasks``). Off with
    ``ANSIBLE_OPERATOR_WARM_TASKS_IN_PROCESS=false`` or without the fast path."""
    modules_in_process: bool
    """Fast modules run in the process that runs their task, not in a fork of it (``warm.inline_modules``).
    Off with ``ANSIBLE_OPERATOR_WARM_MODULES_IN_PROCESS=false`` or without the fast path."""


def encode(message: dict[str, Any]) -> bytes:
    """One protocol line. ``ensure_ascii`` keeps the line free of raw newlines and encoding surprises."""
    import json

    return json.dumps(message, ensure_ascii=True, separators=(",", ":")).encode("ascii") + b"\n"

