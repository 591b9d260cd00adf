#!/usr/bin/env bash
# scripts/pip_install.sh VENV PIP-INSTALL-ARGS...: `pip install ARGS` into the venv VENV, done by uv
# (https://github.com/astral-sh/uv) when it can be had: ~12 CPU s for the project's test venv against
# ~40 with pip (bytecode compiled in parallel, like the rest), and .ci/run builds four of them on a clean
# clone. uv is pinned (UV_VERSION) and kept in the cache outside the repository
# ($XDG_CACHE_HOME or ~/.cache, ansible-operator/uv-VERSION), installed there once with pip. Where that
# fails (no pip for the system Python, no uv wheel for this platform, or ANSIBLE_OPERATOR_PIP=pip) the
# venv's own pip installs, as before; the result is the same packages.
#
# scripts/pip_install.sh --create-venv VENV PYTHON: create the venv VENV for the interpreter PYTHON, with
# pip in it: `uv venv --seed` (~0.3 CPU s) where uv can be had, else `PYTHON -m venv` (~5 CPU s: ensurepip
# installs and compiles its bundled pip).
set -euo pipefail

UV_VERSION=${UV_VERSION:-0.13.9}

# uv's path on stdout, or nothing (the reason on stderr)
find_uv() {
  [ "${ANSIBLE_OPERATOR_PIP:-}" = pip ] && return 0
  local dir="${XDG_CACHE_HOME:-$HOME/.cache}/ansible-operator/uv-$UV_VERSION"
  if [ ! -x "$dir/bin/uv" ]; then
    # stages of .ci/run may get here at once: each installs into a directory of its own, the first
    # rename wins
    local tmp="$dir.tmp.$$"
    rm -rf "$tmp"
    if ! "${PYTHON:-python3}" -m pip install --quiet --disable-pip-version-check --target "$tmp" \
        "uv==$UV_VERSION" >&2 2>/dev/null || [ ! -x "$tmp/bin/uv" ]; then
      rm -rf "$tmp"
      echo "uv $UV_VERSION could not be installed into $dir: pip installs instead (slower)" >&2
      return 0
    fi
    mkdir -p "$(dirname "$dir")"
    [ -e "$dir" ] || mv "$tmp" "$dir" 2>/dev/null || true
    rm -rf "$tmp"
    if [ ! -x "$dir/bin/uv" ]; then
      echo "uv $UV_VERSION could not be put into $dir: pip installs instead (slower)" >&2
      return 0
    fi
  fi
  echo "$dir/bin/uv"
}

if [ "${1:-}" = --create-venv ]; then
  venv=$2 python=$3
  uv=$(find_uv)
  interpreter=$(command -v "$python" || true)
  # the interpreter by its path: uv would otherwise look for (or download) one of its own
  if [ -n "$uv" ] && [ -n "$interpreter" ] && \
      "$uv" venv --quiet --seed --allow-existing --no-python-downloads --no-managed-python \
        --python "$interpreter" "$venv"; then
    exit 0
  fi
  exec "$python" -m venv "$venv"
fi

venv=$1
shift
uv=$(find_uv)
if [ -n "$uv" ]; then
  # PIP_FIND_LINKS, as pip would read it from the environment
  if [ -n "${PIP_FIND_LINKS:-}" ] && [ -z "${UV_FIND_LINKS:-}" ]; then export UV_FIND_LINKS=$PIP_FIND_LINKS; fi
  # bytecode compiled at install, as pip does: where PYTHONDONTWRITEBYTECODE is set (images, CI machines)
  # no process would ever write it, and each would compile every module it imports, every time
  exec "$uv" pip install --compile-bytecode --python "$venv/bin/python" "$@"
fi
"$venv/bin/python" -m pip install --quiet --upgrade pip
exec "$venv/bin/python" -m pip install "$@"
