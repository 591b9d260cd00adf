"""Shared fixtures.

``shared_cluster``: the session's real control plane (tests/kube.py). The ``sandbox`` and
``sandbox_process`` fixtures come from the sandbox package's pytest plugin
(``ansible_operator_sandbox.pytest_plugin``, see docs/reference/sandbox.md).

Which tests run again on the lowest supported ansible-core (``./dev.sh test-ansible-low``, marker
``ansible_versions``) is decided here, in :func:`pytest_collection_modifyitems`, and nowhere else.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Iterator

import pytest

from tests import kube

TESTS = Path(__file__).parent
# Every test under these directories runs Ansible (operators, roles, molecule, the benchmark): all of them
# run on both ends of the supported ansible-core range.
ANSIBLE_DIRS = ("e2e", "examples", "faults", "bench")
# A test module elsewhere (unit, controlplane) runs on both when its source imports Ansible, ansible-runner or
# the executors, or calls ansible-playbook: new executor tests are picked up without a list to update.
RUNS_ANSIBLE = re.compile(
    r"ansible-playbook|ansible_runner|^\s*(?:from|import) ansible(?:\.|\s|$)"
    r"|^\s*(?:from|import) ansible_operator\.executors", re.MULTILINE)
# Test modules that do not depend on the test environment's ansible-core, with the reason: run once. Any
# other test marked e2e outside ANSIBLE_DIRS is a collection error, so none skips the lowest ansible-core
# silently.
VERSION_INDEPENDENT = {
    "image/test_image.py": "the image is built in its own venv with the Dockerfile's pinned ansible-core",
    # Run once, on the highest, to keep .ci/run under 10 minutes on 2 cores; what they exercise on the
    # Ansible side also runs on both ends elsewhere:
    "examples/test_molecule.py": "molecule (~90 s of one worker) drives the example roles that "
                                 "tests/examples/test_roles.py runs on both ends",
    "bench/test_bench_smoke.py": "a smoke test of the benchmark harness; the Memcached role and both "
                                 "executors it times run on both ends in tests/examples and tests/e2e",
    # Faults in the runner's own machinery (API server, leader, network, watch, intake), whatever Ansible
    # runs; test_operator_kill (process lifetime, which differs between ansible-core shapes) and
    # test_secret_canary (what Ansible prints) stay on both ends.
    **{f"faults/{name}.py": "a fault in the runner's own machinery, not in how Ansible runs" for name in (
        "test_apiserver_kill", "test_edit_burst", "test_hostile_content", "test_leader_kill",
        "test_network_cut", "test_throttling", "test_watch_gap")},
}


def pytest_configure(config: pytest.Config) -> None:
    """The shared real control plane (tests/kube.py), started once, before any xdist worker."""
    kube.configure(config)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    kube.sessionfinish(session, exitstatus)


def pytest_unconfigure(config: pytest.Config) -> None:
    kube.unconfigure(config)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    kube.summary(terminalreporter)


@pytest.fixture
def shared_cluster() -> Iterator[kube.SharedCluster]:
    """The session's real control plane with namespaces of this test's own (deleted afterwards); skips
    nothing: on the sandbox backend it is an error to ask for it."""
    cluster = kube.shared()
    try:
        yield cluster
    finally:
        cluster.cleanup()


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark ``ansible_versions`` every test that runs Ansible (see ANSIBLE_DIRS, RUNS_ANSIBLE)."""
    runs_ansible: dict[Path, bool] = {}
    unlisted: set[str] = set()
    for item in items:
        path = Path(str(item.path))
        try:
            rel = path.relative_to(TESTS)
        except ValueError:
            continue
        if rel.as_posix() in VERSION_INDEPENDENT:
            continue
        if path not in runs_ansible:
            runs_ansible[path] = rel.parts[0] in ANSIBLE_DIRS or bool(RUNS_ANSIBLE.search(path.read_text()))
        if runs_ansible[path]:
            item.add_marker(pytest.mark.ansible_versions)
        elif item.get_closest_marker("e2e"):
            unlisted.add(rel.as_posix())
    if unlisted:
        raise pytest.UsageError(
            f"e2e tests outside tests/{{{','.join(ANSIBLE_DIRS)}}} that would not run on the lowest "
            f"ansible-core: {sorted(unlisted)}; move them, or add them to VERSION_INDEPENDENT in "
            f"tests/conftest.py with the reason")
