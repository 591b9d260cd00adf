#!/usr/bin/env python3
"""Install the kubernetes.core collection into a Python environment, reproducibly, from PyPI alone.

kubernetes.core is not on PyPI by itself and Galaxy may be unreachable (CI, image builds behind a proxy),
but the ``ansible`` community bundle on PyPI carries it. This downloads one pinned ``ansible`` wheel
(``--no-deps``: it never touches the installed ansible-core) and extracts only
``ansible_collections/kubernetes/core/`` into the interpreter's site-packages, where ansible-core finds
collections on ``sys.path`` (``COLLECTIONS_SCAN_SYS_PATH``). ~5 MB installed instead of the bundle's ~470 MB.

The default bundle, ansible 12.3.0, carries kubernetes.core 6.2.0, whose ``meta/runtime.yml`` declares
``requires_ansible: '>=2.16.0'``: the same collection serves every ansible-core this project supports.

    python scripts/install_kubernetes_core.py                 # into this interpreter's site-packages
    .venvs/x/bin/python scripts/install_kubernetes_core.py    # into that venv
    python scripts/install_kubernetes_core.py --target /usr/share/ansible/collections  # a collections dir
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import zipfile
from pathlib import Path

DEFAULT_BUNDLE = "12.3.0"
"""``ansible`` release on PyPI to take kubernetes.core from (12.3.0 -> kubernetes.core 6.2.0)."""
DEFAULT_EXPECT = "6.2.0"
PREFIX = "ansible_collections/kubernetes/core/"


def installed_version(target: Path) -> str | None:
    try:
        manifest = json.loads((target / PREFIX / "MANIFEST.json").read_text())
    except (OSError, ValueError):
        return None
    return str(manifest.get("collection_info", {}).get("version")) or None


def extract(wheel: Path, target: Path) -> str:
    """Replace ``target``/ansible_collections/kubernetes/core with the wheel's copy; returns its version."""
    destination = target / PREFIX
    staging = Path(tempfile.mkdtemp(prefix=".kubernetes-core-", dir=target))
    try:
        with zipfile.ZipFile(wheel) as archive:
            members = [m for m in archive.namelist() if m.startswith(PREFIX) and not m.endswith("/")]
            if not members:
                raise SystemExit(f"{wheel.name} carries no {PREFIX}")
            for member in members:
                archive.extract(member, staging)
        version = installed_version(staging)
        if version is None:
            raise SystemExit(f"{wheel.name}: kubernetes.core has no readable MANIFEST.json")
        if destination.exists():
            shutil.rmtree(destination)
        destination.parent.mkdir(parents=True, exist_ok=True)
        (staging / PREFIX).rename(destination)
        return version
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bundle", default=DEFAULT_BUNDLE, help="ansible (bundle) version to take it from")
    parser.add_argument("--expect", default=DEFAULT_EXPECT,
                        help="kubernetes.core version the bundle must carry ('' to accept any)")
    parser.add_argument("--target", type=Path, default=Path(sysconfig.get_paths()["purelib"]),
                        help="directory that gets ansible_collections/"
                             " (default: this interpreter's site-packages)")
    args = parser.parse_args(argv)

    if args.expect and installed_version(args.target) == args.expect:
        print(f"kubernetes.core {args.expect} already in {args.target}")
        return 0
    args.target.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="ansible-wheel-") as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                        "--only-binary=:all:", "--dest", tmp, f"ansible=={args.bundle}"], check=True)
        wheels = list(Path(tmp).glob("ansible-*.whl"))
        if len(wheels) != 1:
            raise SystemExit(f"pip download ansible=={args.bundle} gave {[w.name for w in wheels]}")
        version = extract(wheels[0], args.target)
    if args.expect and version != args.expect:
        raise SystemExit(f"ansible {args.bundle} carries kubernetes.core {version}, expected {args.expect}")
    print(f"kubernetes.core {version} (from ansible {args.bundle}) installed into {args.target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
