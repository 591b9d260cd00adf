#!/usr/bin/env bash
# The two set-up commands of this project (see README):
#   ./dev.sh demo   install everything into .venv, start the sandbox API server and the demo operator
#                   (--real: on the real control plane instead, built from tools/kube the first time)
#   ./dev.sh test   install everything into .venv and run the whole test suite
#   ./dev.sh test-ansible-low   every test that runs Ansible (marker `ansible_versions`, chosen in
#                   tests/conftest.py: e2e, examples, faults, bench, executor unit tests) again, on the lowest
#                   supported ansible-core (ANSIBLE_CORE_LOW, own venv under .venvs/); .ci/run runs both at once
#   ./dev.sh test-ansible-newest   the whole suite on the newest ansible-core (2.20+, needs a Python >= 3.12:
#                   scripts/venv_ansible.sh); .ci/run runs the whole suite there and `./dev.sh test` with the
#                   version scenario and executor tests on .venv's 2.19
#   ./dev.sh test-client-newest   the client-facing tests on the newest `kubernetes` client from PyPI
#                   (.venvs/kubernetes-newest; KUBERNETES_NEWEST=kubernetes==X.Y.Z picks one); .ci/run runs it
#   ./dev.sh lint   the static checks: ruff, mypy and the import-linter layer contracts (pyproject.toml)
set -euo pipefail
cd "$(dirname "$0")"

# Bytecode caches (__pycache__, gitignored) are written even where the environment says not to
# (PYTHONDONTWRITEBYTECODE, set on some CI machines): without them each pytest process rewrites and
# compiles every test module again (~4 of the ~8 CPU s a collection takes), and each process the tests
# start compiles whatever the installers did not.
unset PYTHONDONTWRITEBYTECODE

VENV=${VENV:-.venv}
PY=${PYTHON:-python3}
# The ends of the supported range on Python 3.11 (pyproject.toml: ansible-core>=2.16,<2.22; 2.20+ need Python
# >= 3.12: test-ansible-newest), exact for reproducible CI.
ANSIBLE_CORE_HIGH=${ANSIBLE_CORE_HIGH:-2.19.14}
ANSIBLE_CORE_LOW=${ANSIBLE_CORE_LOW:-2.16.19}

# install_venv DIR ANSIBLE_CORE_VERSION: the project (editable, with test extras), that ansible-core and
# kubernetes.core (scripts/install_kubernetes_core.py); redone only when pyproject.toml or the version changed.
install_venv() {
  local venv=$1 core=$2
  if [ ! -x "$venv/bin/python" ]; then
    scripts/pip_install.sh --create-venv "$venv" "$PY"
  fi
  local stamp="$venv/.installed-$(checksum pyproject.toml sandbox/pyproject.toml)-$core"
  if [ ! -f "$stamp" ]; then
    echo "installing into $venv (ansible-core $core; the first time takes up to a minute)..." >&2
    # uv when it can be had, else pip (scripts/pip_install.sh); progress on stderr (one line per package);
    # pipefail keeps the installer's exit status
    scripts/pip_install.sh "$venv" -e ".[test]" -e "./sandbox[test]" "ansible-core==$core" | { grep -v '^Requirement already' >&2 || true; }
    "$venv/bin/python" -c "import sys, ansible.release; sys.exit(ansible.release.__version__ != '$core')" \
      || { echo "$venv does not have ansible-core $core after the install" >&2; exit 1; }
    "$venv/bin/python" scripts/install_kubernetes_core.py >&2
    touch "$stamp"
  fi
}

# First 16 hex digits of the SHA-256 of the files given, together (GNU coreutils on Linux, shasum on macOS).
checksum() {
  if command -v sha256sum >/dev/null 2>&1; then cat "$@" | sha256sum | cut -c1-16
  else cat "$@" | shasum -a 256 | cut -c1-16; fi
}

install() {
  install_venv "$VENV" "$ANSIBLE_CORE_HIGH"
  if ! command -v kubectl >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
      echo "kubectl not found: installing Debian's kubernetes-client (apt-get, as root)" >&2
      apt-get update -qq && apt-get install -y -qq kubernetes-client
    else
      echo "kubectl not found: install it (https://kubernetes.io/docs/tasks/tools/; Debian/Ubuntu:" \
           "sudo apt-get install kubernetes-client; macOS: brew install kubectl) and run again" >&2
      exit 1
    fi
  fi
}

cmd=${1:-help}
shift || true
case "$cmd" in
  demo)
    install
    exec scripts/demo.sh "$@"
    ;;
  test)
    install
    set +e
    # Four workers on 2 cores: most end-to-end time is spent waiting on subprocesses (PYTEST_WORKERS=0 to
    # disable).
    "$VENV/bin/python" -m pytest -n "${PYTEST_WORKERS:-4}" "$@"
    rc=$?
    set -e
    if [ "$rc" = 5 ]; then echo "pytest collected no tests: that is a failure" >&2; exit 1; fi
    exit "$rc"
    ;;
  test-ansible-low)
    install
    low=.venvs/ansible-core-$ANSIBLE_CORE_LOW
    install_venv "$low" "$ANSIBLE_CORE_LOW"
    set +e
    # Every test that runs Ansible (marker `ansible_versions`, set in tests/conftest.py), both executors.
    "$low/bin/python" -m pytest -n "${PYTEST_WORKERS:-4}" -m ansible_versions "$@"
    rc=$?
    set -e
    if [ "$rc" = 5 ]; then echo "pytest collected no tests: that is a failure" >&2; exit 1; fi
    exit "$rc"
    ;;
  test-ansible-newest)
    # The whole suite on the newest ansible-core (2.20+ need Python >= 3.12: scripts/venv_ansible.sh finds
    # one, or says the stage is skipped and exits 0); pass test paths or -m to run fewer.
    install
    exec scripts/venv_ansible.sh test "$@"
    ;;
  test-client-newest)
    # The client-facing tests on the newest `kubernetes` Python client from PyPI (pyproject.toml pins the
    # one the image ships) in .venvs/kubernetes-newest; KUBERNETES_NEWEST=kubernetes==X.Y.Z (or a wheel's
    # path) to pick one. Arguments go to pytest; test paths among them replace the default files. pip's
    # note that ansible-operator pins another kubernetes is expected here.
    install
    newest=.venvs/kubernetes-newest
    install_venv "$newest" "$ANSIBLE_CORE_HIGH"
    scripts/pip_install.sh "$newest" --quiet --upgrade "${KUBERNETES_NEWEST:-kubernetes}"
    "$newest/bin/python" -c 'import kubernetes; print("kubernetes client", kubernetes.__version__)' >&2
    # of the runner core, what it writes through the client: status, Events, finalizers
    core=tests/e2e/test_runner_core.py
    tests=(sandbox/sandbox_tests/test_conformance_client.py sandbox/sandbox_tests/test_client_basics.py
           sandbox/sandbox_tests/test_content_type.py "$core::test_create_edit_delete_lifecycle"
           "$core::test_failure_condition_names_task_and_emits_warning"
           "$core::test_failing_finalizer_keeps_object_until_it_succeeds"
           tests/differential/test_differential.py)
    for arg in "$@"; do if [ -e "${arg%%::*}" ]; then tests=(); break; fi; done
    set +e
    # ${tests[@]+...}: an empty array is "unbound" to macOS's bash 3.2 under set -u. One executor: both
    # executors' modules and the runner itself use the one client of the venv.
    E2E_EXECUTORS="${E2E_EXECUTORS:-warm}" "$newest/bin/python" -m pytest -n "${PYTEST_WORKERS:-4}" ${tests[@]+"${tests[@]}"} "$@"
    rc=$?
    set -e
    if [ "$rc" = 5 ]; then echo "pytest collected no tests: that is a failure" >&2; exit 1; fi
    exit "$rc"
    ;;
  lint)
    install
    # All three run; any failing fails the command (the tool output says which).
    rc=0
    "$VENV/bin/ruff" check ansible_operator sandbox tests bench scripts || rc=1
    "$VENV/bin/mypy" || rc=1
    "$VENV/bin/lint-imports" --no-cache || rc=1
    exit "$rc"
    ;;
  install)
    install
    ;;
  install-low)
    install_venv ".venvs/ansible-core-$ANSIBLE_CORE_LOW" "$ANSIBLE_CORE_LOW"
    ;;
  *)
    echo "usage: ./dev.sh demo|test|test-ansible-low|test-ansible-newest|lint|install|install-low [args...]" >&2
    exit 2
    ;;
esac
