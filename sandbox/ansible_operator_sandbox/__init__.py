"""Sandbox Kubernetes API server: enough of kube-apiserver for kubectl, the Python client, kopf and
kubernetes.core to work unchanged, on loopback HTTP, with simulated controllers and optional persistence.

Usage::

    sb = Sandbox(port=0, data_dir=None, crds=("crds/",), simulate=True)
    await sb.start(); print(sb.url); ...; await sb.stop()
    # or, from synchronous code (tests, CLI):
    sb.start_in_thread(); sb.write_kubeconfig(path); ...; sb.stop_thread()

``secure=True`` serves HTTPS with a generated CA, authenticates client certificates and ServiceAccount tokens
and enforces RBAC (:mod:`ansible_operator_sandbox.auth`); the written kubeconfig then holds the CA and an
admin client certificate (``system:masters``), so everything that used the kubeconfig keeps working.

See docs/reference/sandbox.md for what is emulated and what is not.
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import logging
import shutil
import tempfile
import threading
from pathlib import Path
from typing import Any, Iterable

import yaml

log = logging.getLogger(__name__)

__all__ = ["Sandbox", "kubeconfig_dict", "load_crd_documents"]


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def kubeconfig_dict(url: str, namespace: str = "default", ca_pem: str | None = None,
                    user: dict[str, Any] | None = None) -> dict[str, Any]:
    """A kubeconfig with cluster/user/context all named ``sandbox`` pointing at ``url``.

    Plain HTTP without ``ca_pem``; with it the cluster carries ``certificate-authority-data`` and ``user`` the
    credentials (``client-certificate-data``/``client-key-data`` or ``token``).
    """
    cluster: dict[str, Any] = {"server": url}
    if ca_pem:
        cluster["certificate-authority-data"] = _b64(ca_pem)
    return {
        "apiVersion": "v1", "kind": "Config", "preferences": {},
        "clusters": [{"name": "sandbox", "cluster": cluster}],
        "users": [{"name": "sandbox", "user": dict(user or {})}],
        "contexts": [{"name": "sandbox", "context": {"cluster": "sandbox", "user": "sandbox",
                                                      "namespace": namespace}}],
        "current-context": "sandbox",
    }


def load_crd_documents(paths: Iterable[str | Path]) -> list[dict[str, Any]]:
    """Every CustomResourceDefinition document in the given YAML files / directories (sorted)."""
    files: list[Path] = []
    for p in paths:
        path = Path(p)
        if path.is_dir():
            files.extend(sorted(f for f in path.rglob("*") if f.suffix in (".yaml", ".yml", ".json")))
        elif path.exists():
            files.append(path)
        else:
            raise FileNotFoundError(f"CRD path not found: {path}")
    docs = []
    for f in files:
        try:
            loaded = list(yaml.safe_load_all(f.read_text()))
        except yaml.YAMLError as e:
            raise ValueError(f"{f}: not valid YAML: {e}") from None
        for doc in loaded:
            if isinstance(doc, dict) and doc.get("kind") == "CustomResourceDefinition":
                docs.append(doc)
    return docs


class Sandbox:
    """One sandbox API server (aiohttp on ``host:port``; port 0 picks a free one)."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0, data_dir: str | Path | None = None,
                 crds: Iterable[str | Path] = (), simulate: bool = True, secure: bool = False) -> None:
        self.host = host
        self.port = port
        self.data_dir = Path(data_dir) if data_dir is not None else None
        self.crds = tuple(crds)
        self.simulate = simulate
        self.secure = secure
        self.pki: Any = None  # auth.Pki in secure mode, once started
        self._tmp_pki: str | None = None
        self.server: Any = None  # server.ApiServer once started
        self._runner: Any = None
        self._simulator: Any = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop_event: asyncio.Event | None = None

    @property
    def url(self) -> str:
        if self.server is None:
            raise RuntimeError("sandbox not started")
        host = f"[{self.host}]" if ":" in self.host else self.host  # IPv6 literal
        return f"{'https' if self.secure else 'http'}://{host}:{self.port}"

    @property
    def ca_pem(self) -> str | None:
        """The CA certificate (PEM) clients verify the server with; None without ``secure``."""
        return self.pki.ca_pem if self.pki is not None else None

    def _pki_dir(self) -> Path:
        if self.data_dir is not None:
            return self.data_dir / "pki"
        if self._tmp_pki is None:
            self._tmp_pki = tempfile.mkdtemp(prefix="sandbox-pki-")
        return Path(self._tmp_pki)

    def _make_pki(self) -> Any:
        from ansible_operator_sandbox.auth import Pki
        return Pki(self._pki_dir(), (self.host,))

    # ---- async lifecycle -------------------------------------------------------------------------
    async def start(self) -> None:
        from aiohttp import web

        from ansible_operator_sandbox import server as server_mod
        from ansible_operator_sandbox.simulate import Simulator

        crd_docs = load_crd_documents(self.crds)  # fail before binding anything
        srv = server_mod.build(str(self.data_dir) if self.data_dir is not None else None)
        srv.lifecycle.loop = asyncio.get_running_loop()
        srv.bootstrap()
        ssl_context = None
        if self.secure:
            self.pki = await asyncio.to_thread(self._make_pki)
            srv.enable_security(self.pki)
            ssl_context = self.pki.ssl_context()
        else:
            srv._pki_factory = self._make_pki  # noqa: SLF001 - tokens on demand, nothing enforced
        runner = web.AppRunner(srv.app, handler_cancellation=True, access_log=None, shutdown_timeout=2.0)
        await runner.setup()
        site = web.TCPSite(runner, self.host, self.port, reuse_address=True, ssl_context=ssl_context)
        try:
            await site.start()
        except BaseException:
            await runner.cleanup()
            srv.store.close()
            raise
        sockets = getattr(site._server, "sockets", None) or []  # noqa: SLF001 - aiohttp has no public getter
        if sockets:
            self.port = sockets[0].getsockname()[1]
        srv.address = f"{self.host}:{self.port}"
        self.server = srv
        self._runner = runner
        try:
            for doc in crd_docs:
                srv.install(doc)
        except Exception:  # an invalid CRD file: do not leave a half-started server behind
            await self.stop()
            raise
        srv.lifecycle.resume()
        if self.simulate:
            self._simulator = Simulator(srv.api, self.ca_pem)
            self._simulator.start()
        log.info("sandbox API server on %s", self.url)

    async def stop(self) -> None:
        if self._simulator is not None:
            await self._simulator.stop()
            self._simulator = None
        if self.server is not None:
            self.server.store.close()  # ends watch streams
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        self.server = None
        if self._tmp_pki is not None:
            shutil.rmtree(self._tmp_pki, ignore_errors=True)
            self._tmp_pki = None

    async def serve_forever(self) -> None:
        self._stop_event = asyncio.Event()
        await self._stop_event.wait()

    # ---- threaded helpers ------------------------------------------------------------------------
    def start_in_thread(self, timeout: float = 30.0) -> None:
        """Start on a private event loop in a daemon thread; returns once it serves (or raises)."""
        started: concurrent.futures.Future[None] = concurrent.futures.Future()

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(self.start())
            except BaseException as e:  # report to the caller's thread
                started.set_exception(e)
                loop.close()
                return
            started.set_result(None)
            try:
                loop.run_forever()
            finally:
                loop.run_until_complete(self.stop())
                loop.run_until_complete(loop.shutdown_asyncgens())
                loop.close()

        self._thread = threading.Thread(target=run, name="sandbox-apiserver", daemon=True)
        self._thread.start()
        started.result(timeout)

    def stop_thread(self, timeout: float = 30.0) -> None:
        if self._thread is None or self._loop is None:
            return
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout)
        self._thread = None
        self._loop = None

    def call(self, fn: Any, *args: Any) -> Any:
        """Run ``fn(*args)`` on the sandbox loop (thread mode) and return its result: for test inspection."""
        if self._loop is None:
            return fn(*args)
        fut: concurrent.futures.Future[Any] = concurrent.futures.Future()

        def run() -> None:
            try:
                fut.set_result(fn(*args))
            except BaseException as e:
                fut.set_exception(e)
        self._loop.call_soon_threadsafe(run)
        return fut.result(30)

    # ---- kubeconfig ------------------------------------------------------------------------------
    def write_kubeconfig(self, path: str | Path, namespace: str = "default",
                         token: str | None = None) -> Path:
        """Write a kubeconfig for this sandbox (0600).

        In secure mode the user is the admin (client certificate ``kubernetes-admin`` in ``system:masters``)
        unless ``token`` is given (e.g. a ServiceAccount token from :meth:`create_token`).
        """
        user: dict[str, Any] | None = None
        if self.pki is not None:
            if token is not None:
                user = {"token": token}
            else:
                from ansible_operator_sandbox.auth import ADMIN_USER, MASTERS
                cert, key = self.pki.client_certificate(ADMIN_USER, (MASTERS,))
                user = {"client-certificate-data": _b64(cert), "client-key-data": _b64(key)}
        elif token is not None:
            user = {"token": token}
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        config = kubeconfig_dict(self.url, namespace, self.ca_pem, user)
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        path.chmod(0o600)
        return path

    def create_token(self, namespace: str, service_account: str, expiration_seconds: int = 3600,
                     audiences: Iterable[str] = (), bound_to: tuple[str, str] | None = None) -> str:
        """A token for an existing ServiceAccount, as ``kubectl create token`` gets it (TokenRequest).

        ``bound_to`` = (kind, name) of a Pod or Secret in ``namespace`` (or a Node): the token stops working
        when that object is deleted, as the kubelet's pod-bound tokens do.
        """
        if self.server is None:
            raise RuntimeError("sandbox not started")
        spec: dict[str, Any] = {"expirationSeconds": expiration_seconds}
        if audiences:
            spec["audiences"] = list(audiences)
        if bound_to is not None:
            spec["boundObjectRef"] = {"kind": bound_to[0], "apiVersion": "v1", "name": bound_to[1]}
        req = self.call(self.server.authenticator.token_request, namespace, service_account, {"spec": spec})
        return str(req["status"]["token"])
