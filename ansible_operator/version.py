"""``ansible-operator version`` (and ``--version``): what this runner is made of, in the Operator SDK
binary's one-line shape (``ansible-operator version: "v1.36.1", commit: ..., GOOS: "linux", GOARCH:
"amd64"``), naming what runs the roles instead of Go's toolchain."""

from __future__ import annotations

import argparse
import platform
import sys
from importlib import metadata
from typing import Any

from ansible_operator import __version__

#: the distributions a bug report needs, as named in the line
COMPONENTS = (("ansible-core", "ansible-core"), ("ansible-runner", "ansible-runner"), ("kopf", "kopf"),
              ("kubernetes client", "kubernetes"))
_ARCH = {"x86_64": "amd64", "aarch64": "arm64", "armv7l": "arm", "ppc64le": "ppc64le", "s390x": "s390x"}


def versions() -> dict[str, str]:
    out = {"ansible-operator": f"v{__version__}"}
    for label, dist in COMPONENTS:
        try:
            out[label] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[label] = "not installed"
    out["python"] = platform.python_version()
    return out


def line() -> str:
    parts = [f'{name} version: "{value}"' for name, value in versions().items()]
    machine = platform.machine().lower()
    parts += [f'GOOS: "{sys.platform}"', f'GOARCH: "{_ARCH.get(machine, machine)}"']
    return ", ".join(parts)


class VersionAction(argparse.Action):
    """``--version``: the same line, computed only when asked for."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS, **kwargs: Any) -> None:
        super().__init__(option_strings, dest=dest, nargs=0, help="print the versions and exit", **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        print(line())
        parser.exit()


def main(args: argparse.Namespace) -> int:
    print(line())
    return 0
