"""``ansible-operator version`` / ``--version``: the SDK binary's line shape, with what runs the roles."""

from __future__ import annotations

import re
import subprocess
import sys
from importlib import metadata

from ansible_operator import __version__


def test_version_names_every_component_in_the_sdks_shape() -> None:
    for argv in (["version"], ["--version"]):
        done = subprocess.run([sys.executable, "-m", "ansible_operator", *argv], capture_output=True,
                              text=True, timeout=300)
        assert done.returncode == 0 and done.stderr == ""
        (line,) = done.stdout.splitlines()
        pairs = dict(re.findall(r'([\w -]+?): "([^"]*)"(?:, |$)', line))
        assert pairs["ansible-operator version"] == f"v{__version__}"
        assert pairs["ansible-core version"] == metadata.version("ansible-core")
        assert pairs["kopf version"] == metadata.version("kopf")
        assert pairs["kubernetes client version"] == metadata.version("kubernetes")
        assert pairs["ansible-runner version"] == metadata.version("ansible-runner")
        assert pairs["python version"] == ".".join(map(str, sys.version_info[:3]))
        assert pairs["GOOS"] == "linux" and pairs["GOARCH"]
