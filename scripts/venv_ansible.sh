#!/usr/bin/env bash
# The newest supported ansible-core in its own venv, and the test suite on it.
#
# ansible-core 2.20+ declare requires-python >= 3.12, so the project's .venv (Python 3.11 is enough for
# everything else) resolves 2.19. This builds .venvs/ansible-core-<version>-py3.<minor> with a Python >= 3.12
# found on this machine and runs the tests there:
#
#   scripts/venv_ansible.sh venv           build (or reuse) the venv; print its path on stdout
#   scripts/venv_ansible.sh test [ARGS]    build it, then pytest -n ${PYTEST_WORKERS:-4} ARGS (no ARGS: the
#                                          whole suite, as `./dev.sh test` on .venv)
#
# Python: $ANSIBLE_NEWEST_PYTHON if set, else python3.12 / python3.13 / python3.14 on PATH, else pyenv's
# (`pyenv root`, ~/.pyenv, /root/.pyenv) 3.12+ versions. With none, both commands say so on stderr and exit 0
# (`venv` prints nothing): machines with only Python 3.11 still pass CI (.ci/run then runs the whole suite
# on .venv's 2.19 instead), and the message says what was skipped.
# The version is exact (reproducible CI): ANSIBLE_CORE_NEWEST, default below; pyproject.toml's range must
# include it. Redone only when pyproject.toml or the version changed (same stamp as dev.sh's install_venv).
set -euo pipefail
cd "$(dirname "$0")/.."
unset PYTHONDONTWRITEBYTECODE  # bytecode caches kept, as dev.sh does (see there)

ANSIBLE_CORE_NEWEST=${ANSIBLE_CORE_NEWEST:-2.21.5}

# A Python >= 3.12 interpreter's path on stdout, or nothing.
find_python() {
  local candidate
  if [ -n "${ANSIBLE_NEWEST_PYTHON:-}" ]; then
    candidate=$(command -v "$ANSIBLE_NEWEST_PYTHON" || true)
    if [ -n "$candidate" ] && python_ok "$candidate"; then echo "$candidate"; return; fi
    echo "ANSIBLE_NEWEST_PYTHON=$ANSIBLE_NEWEST_PYTHON is not a Python >= 3.12 with venv; looking further" >&2
  fi
  for name in python3.12 python3.13 python3.14; do
    candidate=$(command -v "$name" || true)
    if [ -n "$candidate" ] && python_ok "$candidate"; then echo "$candidate"; return; fi
  done
  local roots=()
  if command -v pyenv >/dev/null 2>&1; then roots+=("$(pyenv root)"); fi
  roots+=("$HOME/.pyenv" /root/.pyenv)
  local root dir
  for root in "${roots[@]}"; do
    [ -d "$root/versions" ] || continue
    # plain CPython releases only (3.12.1, 3.13.0...), lowest minor first
    for dir in $(ls "$root/versions" 2>/dev/null | grep -E '^3\.(1[2-9])\.[0-9]+$' | sort -t. -k2,2n -k3,3n); do
      candidate=$root/versions/$dir/bin/python3
      if [ -x "$candidate" ] && python_ok "$candidate"; then echo "$candidate"; return; fi
    done
  done
}

python_ok() {
  "$1" -c 'import sys, venv, ensurepip; sys.exit(sys.version_info < (3, 12))' >/dev/null 2>&1
}

checksum() {
  if command -v sha256sum >/dev/null 2>&1; then cat "$@" | sha256sum | cut -c1-16
  else cat "$@" | shasum -a 256 | cut -c1-16; fi
}

# Build (or reuse) the venv; its path on stdout, nothing if there is no Python >= 3.12.
build_venv() {
  local py
  py=$(find_python)
  if [ -z "$py" ]; then
    echo "no Python >= 3.12 found (python3.12/3.13/3.14 on PATH, pyenv versions, ANSIBLE_NEWEST_PYTHON):" \
         "ansible-core $ANSIBLE_CORE_NEWEST (requires Python >= 3.12) is NOT tested here" >&2
    return 0
  fi
  local pyver
  pyver=$("$py" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
  local venv=.venvs/ansible-core-$ANSIBLE_CORE_NEWEST-py$pyver
  if [ ! -x "$venv/bin/python" ]; then
    scripts/pip_install.sh --create-venv "$venv" "$py"
  fi
  local stamp="$venv/.installed-$(checksum pyproject.toml sandbox/pyproject.toml)-$ANSIBLE_CORE_NEWEST"
  if [ ! -f "$stamp" ]; then
    echo "installing into $venv (Python $pyver from $py, ansible-core $ANSIBLE_CORE_NEWEST;" \
         "the first time takes up to a minute)..." >&2
    scripts/pip_install.sh "$venv" -e ".[test]" -e "./sandbox[test]" "ansible-core==$ANSIBLE_CORE_NEWEST" \
      | { grep -v '^Requirement already' >&2 || true; }
    "$venv/bin/python" -c \
      "import sys, ansible.release; sys.exit(ansible.release.__version__ != '$ANSIBLE_CORE_NEWEST')" \
      || { echo "$venv does not have ansible-core $ANSIBLE_CORE_NEWEST after the install" >&2; exit 1; }
    "$venv/bin/python" scripts/install_kubernetes_core.py >&2
    touch "$stamp"
  fi
  echo "$venv"
}

cmd=${1:-}
shift || true
case "$cmd" in
  venv)
    build_venv
    ;;
  test)
    venv=$(build_venv)
    if [ -z "$venv" ]; then
      echo "skipped: the tests on ansible-core $ANSIBLE_CORE_NEWEST" >&2
      exit 0
    fi
    echo "tests on ansible-core $ANSIBLE_CORE_NEWEST ($venv)" >&2
    set +e
    "$venv/bin/python" -m pytest -n "${PYTEST_WORKERS:-4}" "$@"
    rc=$?
    set -e
    if [ "$rc" = 5 ]; then echo "pytest collected no tests: that is a failure" >&2; exit 1; fi
    exit "$rc"
    ;;
  *)
    echo "usage: scripts/venv_ansible.sh venv|test [pytest args...]" >&2
    exit 2
    ;;
esac
