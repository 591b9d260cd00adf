"""The control plane's binaries: taken from ``KUBEBUILDER_ASSETS``, or from the build cache, or built.

Built from the Go modules in ``tools/kube/{k8s,etcd,kwok}`` (written by ``scripts/gen_kube_modules.py``: one
module per upstream project, each pinning its commands with go.mod ``tool`` lines) the way upstream builds
them: ``CGO_ENABLED=0``, ``-trimpath``, tags ``selinux,notest``, the version stamped with ``-X`` so
``kube-apiserver --version`` prints the real one. Binaries land in
``${XDG_CACHE_HOME:-~/.cache}/ansible-operator/kube/<key>/bin`` where the key is the versions plus a hash of
the module files: another pin is another directory. A build runs under a lock file and writes a temporary
directory renamed into place when complete, so concurrent callers (xdist workers, two checkouts) build once
and never see half a directory.

``KUBEBUILDER_ASSETS`` (envtest's layout: one directory with ``etcd``, ``kube-apiserver``, ...) is looked at
first, per binary: envtest's published archives carry etcd and kube-apiserver only, so the other components
still come from the cache or a build.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

from ansible_operator.controlplane import kwok

KUBERNETES_VERSION = "v1.36.3"
ETCD_VERSION = "v3.6.16"
KWOK_VERSION = "v0.8.0"


@dataclass(frozen=True)
class Command:
    name: str
    module_dir: str  # under tools/kube
    package: str
    upstream: str  # the module the version comes from
    version: str


COMMANDS = (
    Command("etcd", "etcd", "go.etcd.io/etcd/server/v3", "go.etcd.io/etcd/server/v3", ETCD_VERSION),
    Command("kube-apiserver", "k8s", "k8s.io/kubernetes/cmd/kube-apiserver", "k8s.io/kubernetes",
            KUBERNETES_VERSION),
    Command("kube-controller-manager", "k8s", "k8s.io/kubernetes/cmd/kube-controller-manager",
            "k8s.io/kubernetes", KUBERNETES_VERSION),
    Command("kube-scheduler", "k8s", "k8s.io/kubernetes/cmd/kube-scheduler", "k8s.io/kubernetes",
            KUBERNETES_VERSION),
    Command("kwok", "kwok", "sigs.k8s.io/kwok/cmd/kwok", "sigs.k8s.io/kwok", KWOK_VERSION),
)
NAMES = tuple(c.name for c in COMMANDS)
Progress = Callable[[str], None]


class BinariesUnavailable(RuntimeError):
    """No binaries and no way to build them here (the message says why and what to do)."""


@dataclass(frozen=True)
class Binaries:
    paths: dict[str, Path]
    origin: dict[str, str]  # name -> "KUBEBUILDER_ASSETS", "cache" or "built"

    @property
    def kwok_stages(self) -> Path:
        """kwok's Stages (kwok.STAGES_FILE), beside the kwok binary's directory."""
        return self.paths["kwok"].parent.parent / kwok.STAGES_FILE

    def __getitem__(self, name: str) -> Path:
        return self.paths[name]

    def describe(self) -> str:
        by: dict[str, list[str]] = {}
        for name, origin in self.origin.items():
            by.setdefault(origin, []).append(name)
        return "; ".join(f"{', '.join(names)} from {origin}" for origin, names in by.items())


def modules_dir() -> Path | None:
    """tools/kube of the source checkout this package runs from (or ``$ANSIBLE_OPERATOR_KUBE_MODULES``)."""
    env = os.environ.get("ANSIBLE_OPERATOR_KUBE_MODULES")
    if env:
        return Path(env)
    candidate = Path(__file__).resolve().parents[2] / "tools" / "kube"
    return candidate if (candidate / "k8s" / "go.mod").is_file() else None


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "ansible-operator" / "kube"


def cache_key(modules: Path) -> str:
    digest = hashlib.sha256()
    for sub in ("k8s", "etcd", "kwok"):
        for name in ("go.mod", "go.sum"):
            path = modules / sub / name
            digest.update(f"{sub}/{name}\0".encode())
            digest.update(path.read_bytes() if path.is_file() else b"")
    return f"k8s-{KUBERNETES_VERSION}_etcd-{ETCD_VERSION}_kwok-{KWOK_VERSION}_{digest.hexdigest()[:12]}"


def _from_assets() -> dict[str, Path]:
    assets = os.environ.get("KUBEBUILDER_ASSETS")
    if not assets:
        return {}
    found = {}
    for name in NAMES:
        path = Path(assets) / name
        if path.is_file() and os.access(path, os.X_OK):
            found[name] = path
    return found


def find(build: bool = True, progress: Progress | None = None) -> Binaries:
    """Every binary of :data:`NAMES`: from ``KUBEBUILDER_ASSETS``, else the cache, else built (when
    ``build``). Raises :class:`BinariesUnavailable` with the reason and the remedy."""
    say = progress or _stderr
    paths = _from_assets()
    origin = dict.fromkeys(paths, "KUBEBUILDER_ASSETS")
    missing = [n for n in NAMES if n not in paths]
    if not missing:
        return Binaries(paths, origin)
    modules = modules_dir()
    if modules is None:
        raise BinariesUnavailable(
            f"no {', '.join(missing)} binary: set KUBEBUILDER_ASSETS to a directory holding them (envtest's "
            "binaries carry etcd and kube-apiserver), or run from a source checkout (tools/kube) with Go "
            "installed to build them")
    bin_dir = cache_root() / cache_key(modules) / "bin"
    if not all((bin_dir / n).is_file() for n in missing) or not (bin_dir.parent / kwok.STAGES_FILE).is_file():
        if not build:
            raise BinariesUnavailable(f"{bin_dir} is not built yet (ansible-operator cluster build)")
        build_into(modules, bin_dir, say)
        built = "built"
    else:
        built = "cache"
    for name in missing:
        paths[name] = bin_dir / name
        origin[name] = built
    return Binaries(paths, origin)


def go_available() -> str | None:
    """Why Go cannot build here, or None when it can."""
    if shutil.which("go") is None:
        return "no `go` on PATH (https://go.dev/dl/: the Go toolchain builds the control plane from source)"
    return None


def build_into(modules: Path, bin_dir: Path, say: Progress) -> None:
    """Build every command into ``bin_dir`` (atomically, under a lock); a no-op if another process did."""
    reason = go_available()
    if reason:
        raise BinariesUnavailable(f"cannot build the control plane: {reason}")
    root = bin_dir.parent
    root.parent.mkdir(parents=True, exist_ok=True)
    with _locked(root.parent / f"{root.name}.lock", say):
        if all((bin_dir / n).is_file() for n in NAMES) and (root / kwok.STAGES_FILE).is_file():
            return
        say(f"building the control plane from Go modules into {root} (first time only: ~15-30 min on 2 "
            "cores; set KUBEBUILDER_ASSETS to use prebuilt binaries instead)")
        started = time.monotonic()
        tmp = Path(tempfile.mkdtemp(prefix=f".{root.name}.", dir=root.parent))
        try:
            (tmp / "bin").mkdir()
            for sub in ("k8s", "etcd", "kwok"):
                commands = [c for c in COMMANDS if c.module_dir == sub]
                _go_build(modules / sub, commands, tmp / "bin", say)
            kwok_source = subprocess.run(["go", "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/kwok"],
                                         cwd=modules / "kwok", capture_output=True, text=True,
                                         check=True).stdout.strip()
            (tmp / kwok.STAGES_FILE).write_text(kwok.collect_stages(Path(kwok_source)))
            (tmp / "versions.json").write_text(json.dumps(
                {c.name: c.version for c in COMMANDS} | {"go": _go_version()}, indent=1))
            if root.exists():  # a partial directory of an interrupted older layout
                shutil.rmtree(root)
            tmp.rename(root)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        say(f"control plane built in {time.monotonic() - started:.0f} s")


def _go_version() -> str:
    return subprocess.run(["go", "env", "GOVERSION"], capture_output=True, text=True).stdout.strip()


def _ldflags(command: Command, module_dir: Path) -> str:
    flags = ["-s", "-w"]
    if command.upstream == "k8s.io/kubernetes":
        match = re.fullmatch(r"v(\d+)\.(\d+)\.\d+", command.version)
        assert match, command.version
        info = _module_info(module_dir, command.upstream, command.version)
        values = {"gitVersion": command.version, "gitMajor": match.group(1), "gitMinor": match.group(2),
                  "gitCommit": (info.get("Origin") or {}).get("Hash", ""), "gitTreeState": "clean",
                  "buildDate": info.get("Time", "")}
        for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
            flags += [f"-X '{pkg}.{key}={value}'" for key, value in values.items()]
    elif command.upstream == "sigs.k8s.io/kwok":
        flags.append(f"-X 'sigs.k8s.io/kwok/pkg/consts.Version={command.version.lstrip('v')}'")
    return " ".join(flags)


def _module_info(module_dir: Path, module: str, version: str) -> dict[str, Any]:
    out = subprocess.run(["go", "mod", "download", "-json", f"{module}@{version}"], cwd=module_dir,
                         capture_output=True, text=True)
    try:
        info = json.loads(out.stdout)
        return json.loads(Path(info["Info"]).read_text()) if info.get("Info") else {}
    except (ValueError, KeyError, OSError):
        return {}


def _go_build(module_dir: Path, commands: list[Command], out: Path, say: Progress) -> None:
    env = {**os.environ, "CGO_ENABLED": "0", "GOFLAGS": "-mod=mod"}
    for command in commands:
        started = time.monotonic()
        args = ["go", "build", "-v", "-trimpath", "-tags", "selinux,notest",
                "-ldflags", _ldflags(command, module_dir), "-o", str(out / command.name), command.package]
        say(f"  go build {command.package} ({command.version})")
        proc = subprocess.Popen(args, cwd=module_dir, env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True)
        assert proc.stderr is not None
        compiled, tail, last = 0, list[str](), time.monotonic()
        for line in proc.stderr:
            tail = (tail + [line.rstrip()])[-40:]
            if line.strip() and not line.startswith((" ", "\t", "#")):
                compiled += 1  # `go build -v` names each package it compiles
            if time.monotonic() - last > 30:
                say(f"    {command.name}: {compiled} packages compiled, {time.monotonic() - started:.0f} s")
                last = time.monotonic()
        if proc.wait() != 0:
            raise BinariesUnavailable(f"go build {command.package} failed (exit {proc.returncode}):\n"
                                      + "\n".join(tail))
        say(f"    {command.name}: done in {time.monotonic() - started:.0f} s")


class _locked:
    """An exclusive ``flock`` on ``path`` (says so while it waits for another builder)."""

    def __init__(self, path: Path, say: Progress) -> None:
        self.path, self.say = path, say

    def __enter__(self) -> None:
        self.fd = os.open(self.path, os.O_CREAT | os.O_RDWR, 0o644)
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self.say(f"waiting for another build of the control plane ({self.path})...")
            fcntl.flock(self.fd, fcntl.LOCK_EX)

    def __exit__(self, *exc: object) -> None:
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        os.close(self.fd)


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def iter_versions(binaries: Binaries) -> Iterator[tuple[str, str]]:
    """(name, what ``<binary> --version`` prints) for each binary."""
    for name, path in binaries.paths.items():
        arg = "--version"
        out = subprocess.run([str(path), arg], capture_output=True, text=True, timeout=30)
        yield name, (out.stdout or out.stderr).strip().splitlines()[0] if (out.stdout or out.stderr) else "?"
