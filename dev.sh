#!/usr/bin/env bash
# The two set-up commands of this project (see README):
#   ./dev.sh demo   install everything into .venv, start the sandbox API server and the demo operator
#   ./dev.sh test   install everything into .venv and run the whole test suite
set -euo pipefail
cd "$(dirname "$0")"

VENV=${VENV:-.venv}
PY=${PYTHON:-python3}

install() {
  if [ ! -x "$VENV/bin/python" ]; then
    "$PY" -m venv "$VENV"
  fi
  # Re-install only when pyproject.toml changed since the last install.
  local stamp="$VENV/.installed-$(sha256sum pyproject.toml | cut -c1-16)"
  if [ ! -f "$stamp" ]; then
    "$VENV/bin/pip" install --quiet --upgrade pip
    "$VENV/bin/pip" install --quiet -e ".[test]"
    touch "$stamp"
  fi
  if ! command -v kubectl >/dev/null 2>&1; then
    echo "kubectl not found: installing Debian's kubernetes-client" >&2
    if [ "$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq kubernetes-client;
    else sudo apt-get update -qq && sudo apt-get install -y -qq kubernetes-client; fi
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
    # Two workers: most end-to-end time is spent waiting on subprocesses (PYTEST_WORKERS=0 to disable).
    "$VENV/bin/python" -m pytest -n "${PYTEST_WORKERS:-2}" "$@"
    rc=$?
    set -e
    if [ "$rc" = 5 ]; then echo "pytest collected no tests: that is a failure" >&2; exit 1; fi
    exit "$rc"
    ;;
  install)
    install
    ;;
  *)
    echo "usage: ./dev.sh demo|test|install [args...]" >&2
    exit 2
    ;;
esac
