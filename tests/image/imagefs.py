"""Assemble a Dockerfile's filesystem without a container engine (none runs on the CI machine).

A small interpreter for the instructions our ``Dockerfile`` and an Operator SDK project's ``Dockerfile``
use: ``ARG``, ``ENV``, ``WORKDIR``, ``COPY`` (from the build context or ``--from`` an earlier stage),
``RUN`` (``/bin/sh -c``), ``USER``, ``EXPOSE``, ``ENTRYPOINT`` and ``FROM``. Instead of a root filesystem
per stage, image paths are mapped onto host directories (``/opt/venv`` -> ``<root>/opt/venv`` ...): every
absolute path the image knows about is rewritten in ``ENV`` values, ``RUN`` commands, ``COPY``
destinations, ``WORKDIR`` and the ``ENTRYPOINT``. All stages share that mapping, which is what
``COPY --from=build /opt/venv /opt/venv`` amounts to. The base image (``python:*-slim``) is the host's
Python; its own files (``/usr/bin`` ...) are the host's.

It is deliberately not a general Docker builder: an instruction it does not know fails the build.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

__all__ = ["Builder", "ImageConfig", "Instruction", "Stage", "parse", "tree_size"]

_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}|\$([A-Za-z_][A-Za-z0-9_]*)")


@dataclass
class Instruction:
    keyword: str
    args: str
    line: int


@dataclass(frozen=True)
class ImageConfig:
    """An image's configuration (what ``FROM`` it inherits), paths in image terms."""

    env: dict[str, str]
    workdir: str
    user: str
    entrypoint: list[str]
    exposed: list[str]


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[Instruction] = field(default_factory=list)


def parse(text: str) -> tuple[list[Instruction], list[Stage]]:
    """Global ARGs (before the first FROM) and the stages; continuation lines joined, comments dropped."""
    logical: list[tuple[int, str]] = []
    buf, start = "", 0
    for number, raw in enumerate(text.splitlines(), 1):
        stripped = raw.strip()
        if not buf and (not stripped or stripped.startswith("#")):
            continue
        if buf and stripped.startswith("#"):
            continue  # comment inside a continued instruction
        if not buf:
            start = number
        if stripped.endswith("\\"):
            buf += stripped[:-1] + " "
            continue
        logical.append((start, buf + stripped))
        buf = ""
    if buf:
        raise ValueError(f"line {start}: unterminated continuation")
    global_args: list[Instruction] = []
    stages: list[Stage] = []
    for number, line in logical:
        keyword, _, args = line.partition(" ")
        ins = Instruction(keyword.upper(), args.strip(), number)
        if ins.keyword == "FROM":
            parts = ins.args.split()
            name = parts[2] if len(parts) == 3 and parts[1].upper() == "AS" else None
            stages.append(Stage(parts[0], name))
        elif not stages:
            if ins.keyword != "ARG":
                raise ValueError(f"line {number}: {ins.keyword} before FROM")
            global_args.append(ins)
        else:
            stages[-1].instructions.append(ins)
    return global_args, stages


class Builder:
    """Runs stages with image paths mapped to host directories.

    ``mapping``: image path prefix -> host directory (longest prefix wins). ``env`` starts as the
    host's environment minus anything image-specific, like a base image's.
    """

    def __init__(self, context: Path, mapping: dict[str, Path], base_env: dict[str, str],
                 build_args: dict[str, str] | None = None, *, execute: bool = True,
                 images: dict[str, ImageConfig] | None = None, default_cwd: Path | None = None) -> None:
        self.context = context
        self.default_cwd = default_cwd  # where RUN runs while WORKDIR is an unmapped path such as /
        self.execute = execute  # False: only compute the image's configuration (its files are cached)
        self.images = dict(images or {})
        self.mapping = dict(sorted(mapping.items(), key=lambda kv: -len(kv[0])))
        self.base_env = dict(base_env)
        self.build_args = dict(build_args or {})
        self.global_args: dict[str, str] = {}
        # what the last stage ends with (the image's configuration), paths in image terms
        self.env: dict[str, str] = {}
        self.workdir = "/"
        self.user = "0"
        self.entrypoint: list[str] = []
        self.exposed: list[str] = []

    def config(self) -> "ImageConfig":
        return ImageConfig(dict(self.env), self.workdir, self.user, list(self.entrypoint), list(self.exposed))

    # -- paths --------------------------------------------------------------------------------------

    def host_path(self, image_path: str) -> Path:
        if not image_path.startswith("/"):
            image_path = self.workdir.rstrip("/") + "/" + image_path
        for prefix, host in self.mapping.items():
            if image_path == prefix or image_path.startswith(prefix.rstrip("/") + "/"):
                return Path(str(host) + image_path[len(prefix.rstrip("/")):])
        raise ValueError(f"image path {image_path} is outside the mapped directories {list(self.mapping)}")

    def cwd(self) -> Path:
        try:
            return self.host_path(self.workdir)
        except ValueError:
            if self.default_cwd is None:
                raise
            return self.default_cwd

    def rewrite(self, text: str) -> str:
        """Every mapped absolute image path in ``text`` replaced by its host path."""
        def sub(match: re.Match[str]) -> str:
            return str(self.host_path(match.group(0)))
        prefixes = "|".join(re.escape(p.rstrip("/")) for p in self.mapping)
        return re.sub(rf"(?<![\w./-])(?:{prefixes})(?=[/\s\"':;]|$)[^\s\"':;]*", sub, text)

    def expand(self, text: str, variables: dict[str, str]) -> str:
        def sub(match: re.Match[str]) -> str:
            name = match.group(1) or match.group(3)
            default = match.group(2)
            value = variables.get(name)
            return value if value not in (None, "") else (default or "")
        return _VAR.sub(sub, text)

    # -- running ------------------------------------------------------------------------------------

    def run_file(self, dockerfile: Path, *, stages: list[str] | None = None,
                 log: list[str] | None = None) -> None:
        global_args, parsed = parse(dockerfile.read_text())
        for ins in global_args:
            name, _, default = ins.args.partition("=")
            self.global_args[name] = self.build_args.get(name, default)
        for stage in parsed:
            if stages is not None and (stage.name or "") not in stages:
                continue
            self.run_stage(stage, log if log is not None else [])

    def run_stage(self, stage: Stage, log: list[str]) -> None:
        stage_args: dict[str, str] = {}
        base = self.images.get(self.expand(stage.base, self.global_args))
        if base is not None:
            self.env, self.workdir, self.user = dict(base.env), base.workdir, base.user
            self.entrypoint, self.exposed = list(base.entrypoint), list(base.exposed)
        else:
            self.env, self.workdir, self.user = dict(self.base_env), "/", "0"
        for ins in stage.instructions:
            variables = {**self.global_args, **stage_args, **self.env}
            log.append(f"{ins.keyword} {ins.args}")
            if ins.keyword == "ARG":
                name, eq, default = ins.args.partition("=")
                stage_args[name] = self.build_args.get(name, self.global_args.get(name, default) if not eq
                                                        else default)
            elif ins.keyword == "ENV":
                for token in shlex.split(ins.args):
                    name, _, value = token.partition("=")
                    value = self.expand(value, variables)
                    self.env[name] = value
                    variables[name] = value
            elif ins.keyword == "WORKDIR":
                self.workdir = self.expand(ins.args, variables)
                if self.execute:
                    self.host_path(self.workdir).mkdir(parents=True, exist_ok=True)
            elif ins.keyword == "COPY":
                if self.execute:
                    self._copy(shlex.split(self.expand(ins.args, variables)))
            elif ins.keyword == "RUN":
                if not self.execute:
                    continue
                cmd = self.rewrite(ins.args)
                env = {**self.runtime_env(), **{k: v for k, v in {**self.global_args, **stage_args}.items()
                                                if k not in self.env}}
                done = subprocess.run(["/bin/sh", "-c", cmd], cwd=self.cwd(), env=env,
                                      capture_output=True, text=True, preexec_fn=self.as_user())
                if done.returncode != 0:
                    raise RuntimeError(f"RUN (line {ins.line}) exit {done.returncode}: {cmd}\n"
                                       f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
            elif ins.keyword == "USER":
                self.user = self.expand(ins.args, variables)
            elif ins.keyword == "EXPOSE":
                self.exposed.extend(ins.args.split())
            elif ins.keyword == "ENTRYPOINT":
                import json

                self.entrypoint = json.loads(ins.args)
            elif ins.keyword in ("LABEL", "HEALTHCHECK", "CMD"):
                pass
            else:
                raise ValueError(f"line {ins.line}: {ins.keyword} is not supported by this assembler")

    def _copy(self, words: list[str]) -> None:
        from_stage = None
        rest = []
        for word in words:
            if word.startswith("--from="):
                from_stage = word.split("=", 1)[1]
            elif word.startswith("--chown=") or word.startswith("--chmod="):
                continue
            else:
                rest.append(word)
        *sources, dest = rest
        for source in sources:
            if from_stage is not None:
                src = self.host_path(source)  # stages share the mapping: same host path
            else:
                src = self.context / source.rstrip("/")
            dst = self.host_path(dest)
            if src == dst:
                continue
            if src.is_dir():
                # Docker copies a directory's contents into dest
                shutil.copytree(src, dst, dirs_exist_ok=True,
                                ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
            else:
                if dest.endswith("/"):
                    dst = dst / src.name
                dst.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, dst)

    def command(self) -> list[str]:
        """The ENTRYPOINT with image paths mapped to the host."""
        return [self.rewrite(arg) for arg in self.entrypoint]

    def runtime_env(self) -> dict[str, str]:
        """The image's environment with image paths mapped to the host (host values untouched)."""
        return {k: (v if self.base_env.get(k) == v else self.rewrite(v)) for k, v in self.env.items()}

    def uid_gid(self) -> tuple[int, int] | None:
        """``USER`` as numbers, or ``None`` for root / when this process cannot switch users."""
        user, _, group = self.user.partition(":")
        if user in ("", "0", "root") or os.geteuid() != 0:
            return None
        return int(user), int(group or 0)

    def as_user(self) -> "Callable[[], None] | None":
        """A ``preexec_fn`` running a command as ``USER`` (uid and group, no supplementary groups)."""
        ids = self.uid_gid()
        if ids is None:
            return None
        uid, gid = ids

        def switch() -> None:
            os.setgroups([])
            os.setgid(gid)
            os.setuid(uid)
        return switch


def tree_size(path: Path) -> int:
    total = 0
    for dirpath, _, files in os.walk(path):
        for name in files:
            p = Path(dirpath) / name
            if not p.is_symlink():
                total += p.stat().st_size
    return total
