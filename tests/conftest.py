"""Shared fixtures.

``shared_cluster``: the session's real control plane (tests/kube.py). The ``sandbox`` and
``sandbox_process`` fixtures come from the sandbox package's pytest plugin
(``ansible_operator_sandbox.pytest_plugin``, see docs/reference/sandbox.md).

Which tests run again on the lowest supported ansible-core (``./dev.sh test-ansible-low``, marker
``ansible_versions``) is decided here, in :func:`pytest_collection_modifyitems`, and nowhere else.
"""

from __future__ import annotations

import json
import os
import re
import resource
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
    "bench/test_sharding_smoke.py": "a smoke test of the sharding benchmark's harness; replicas sharing "
                                    "objects run once too (e2e/test_sharding.py below)",
    "bench/test_scale_smoke.py": "a smoke test of the scale benchmark's harness; its one-ConfigMap role and "
                                 "both executors run on both ends in tests/e2e",
    # Faults in the runner's own machinery (API server, leader, network, watch, intake), whatever Ansible
    # runs; test_operator_kill (process lifetime, which differs between ansible-core shapes) and
    # test_secret_canary (what Ansible prints) stay on both ends.
    **{f"faults/{name}.py": "a fault in the runner's own machinery, not in how Ansible runs" for name in (
        "test_apiserver_kill", "test_blackhole", "test_edit_burst", "test_hostile_content",
        "test_leader_kill", "test_network_cut", "test_throttling", "test_watch_gap")},
    "e2e/test_leader.py": "Lease leader election against the API server: no Ansible runs at all",
    "e2e/test_relist.py": "the watch's relist after a 410 and the intake's forgetting of deleted objects; "
                          "the one-task Widget role it runs runs on both ends in test_runner_core",
    "e2e/test_work_queue.py": "the work queue and the status writer (no self-triggered runs, back-off, "
                              "coalescing); the Widget roles it runs run on both ends in test_runner_core",
    "e2e/test_fairness.py": "the work queue's order (user changes before resyncs, start-up re-checks); the "
                            "Widget roles it runs run on both ends in test_runner_core",
    "e2e/test_sharding.py": "replicas sharing objects through Leases; a run is a run of the warm executor, "
                            "which runs on both ends in test_runner_core and the executor unit tests",
    "differential/test_differential.py": "the sandbox against the real API server: the servers' behaviour "
                                         "(its one playbook scenario drives both with the same modules)",
    "e2e/test_owners_proxy.py": "the owner proxy's HTTP (ours) as kubernetes.core's modules see it: the same "
                                "collection on both ends, whose modules run on both in test_runner_core and "
                                "tests/examples",
    "e2e/test_real_cluster.py": "kube-controller-manager's garbage collector and namespace controller acting "
                                "on what the proxy and the finalizer wrote; the finalizer role runs on both "
                                "ends in test_runner_core",
    "examples/test_config.py": "the examples' manifests, kustomize output and RBAC: no Ansible runs",
    "e2e/test_secure_sandbox.py": "TLS, authentication and RBAC of the API server (the sandbox's, held to "
                                  "the real one): no Ansible runs",
    "e2e/test_secure.py": "the operator's credentials and RBAC against the API server; the Memcached role "
                          "it runs runs on both ends in tests/examples, and how the warm executor hands "
                          "credentials to modules on both in tests/unit/test_zygote_kubeconfig_data.py",
    # What the runner does around a run (flags, signals, status, metrics, owners), with one-task roles
    # whose runs on both ends test_runner_core, the executor contract tests and test_executor_lifetime
    # (a run stopped at shutdown) cover:
    **{f"e2e/{name}.py": "what the runner does around a run, whatever Ansible runs" for name in (
        "test_sdk_flags", "test_production", "test_generations", "test_no_adoption")},
}


def pytest_configure(config: pytest.Config) -> None:
    """The shared real control plane (tests/kube.py), started once, before any xdist worker."""
    kube.configure(config)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    kube.sessionfinish(session, exitstatus)


def pytest_unconfigure(config: pytest.Config) -> None:
    kube.unconfigure(config)


# The order tests are handed to xdist workers (pyproject.toml sets --maxschedchunk=2: a worker gets two at a
# time as it frees up, so the order below is the order they start): the longest first, the many short unit
# tests last to fill the gaps, so no worker is left alone with a long test at the end (longest processing
# time first). Classes by what a test starts: `slow` ones (over ~20 s: molecule, the image, the private
# control planes), then operators on the ansible-runner executor (2-3x the warm one's time), then the others
# that start operators or control planes, then the rest.
STARTS_PROCESSES = ("examples", "image", "differential", "e2e", "faults", "bench")


PROCESS_TEST_TIMEOUT = 600
"""The hang guard (pytest-timeout) of a test under STARTS_PROCESSES without a ``timeout`` marker
of its own, unless ``--timeout`` was given."""


def _top(item: pytest.Item) -> str | None:
    try:
        return Path(str(item.path)).relative_to(TESTS).parts[0]
    except ValueError:
        return None


def _start_order(item: pytest.Item) -> int:
    if item.get_closest_marker("slow"):
        return 0
    callspec = getattr(item, "callspec", None)
    if callspec is not None and callspec.params.get("executor") == "runner":
        return 1
    top = _top(item)
    if top is None:
        return 3
    return 2 if top in STARTS_PROCESSES else 3


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """``TEST_CPU_REPORT=FILE``: the CPU seconds each test cost (setup, call, teardown), its worker's own and
    its reaped subprocesses' (operators and what they ran, molecule, ansible-playbook), one JSON line per
    test in ``FILE.<worker>``; ``scripts/cpu_report.py FILE`` sums them up. The shared control plane's CPU
    is nobody's. The stages of ``.ci/run`` share 2 cores, so CPU, not wall time, is what makes it long."""
    path = os.environ.get("TEST_CPU_REPORT")
    if not path:
        yield
        return
    before = [resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
    yield
    after = [resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
    own, children = ((a.ru_utime + a.ru_stime) - (b.ru_utime + b.ru_stime) for a, b in zip(after, before))
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    record = {"test": item.nodeid, "own": round(own, 3), "children": round(children, 3)}
    with open(f"{path}.{worker}", "a") as out:
        out.write(json.dumps(record) + "\n")


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
    """Mark ``ansible_versions`` every test that runs Ansible (see ANSIBLE_DIRS, RUNS_ANSIBLE); put the
    longest first (:func:`_start_order`)."""
    items.sort(key=_start_order)  # stable: within a class, the collection order
    # a --timeout on the command line (0 when debugging) is the user's: no marker may override it
    guard = config.getoption("timeout", None) is None
    for item in items:
        if guard and item.get_closest_marker("timeout") is None and _top(item) in STARTS_PROCESSES:
            # pyproject's 300 s guard is for hangs; tests that start operators and control planes wait
            # on conditions with bounds of their own, several of 180 s, and on a loaded CI machine their
            # sum passed 300 s without anything hanging (official CI at c91bb18)
            item.add_marker(pytest.mark.timeout(PROCESS_TEST_TIMEOUT))
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
