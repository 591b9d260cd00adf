"""The optional sandbox API server, as the runner reaches it: ``ansible-operator sandbox`` and
``run --sandbox``.

The sandbox is a distribution of its own (``ansible-operator-sandbox``, ``sandbox/`` in this repository):
the runner's wheel and image do not contain it. This module is the one place that imports it, lazily, and
the one place that says how to install it where it is not.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys
from types import ModuleType

PACKAGE = "ansible_operator_sandbox"
NOT_INSTALLED = (
    "the sandbox API server is not installed: it is the separate package ansible-operator-sandbox"
    " (from a checkout of this project: pip install ./sandbox; ./dev.sh installs it). To run against a"
    " cluster instead, pass --kubeconfig or set KUBECONFIG")


def available() -> bool:
    return importlib.util.find_spec(PACKAGE) is not None


def load(module: str = "") -> ModuleType:
    """``ansible_operator_sandbox`` (or one of its modules); :class:`SystemExit` with the install hint when it
    is not installed."""
    if not available():
        raise SystemExit(f"ansible-operator: {NOT_INSTALLED}")
    return importlib.import_module(f"{PACKAGE}.{module}" if module else PACKAGE)


def main(args: argparse.Namespace) -> int:
    """``ansible-operator sandbox ARGS``: the sandbox's own command line (``ansible-operator-sandbox``)."""
    if not available():
        print(f"ansible-operator sandbox: {NOT_INSTALLED}", file=sys.stderr)
        return 2
    result: int = load("cli").main(list(args.sandbox_args), prog="ansible-operator sandbox")
    return result
