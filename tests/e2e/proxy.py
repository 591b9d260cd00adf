"""A TLS-terminating proxy in front of a real control plane's API server that can be cut and restored, and
sees the HTTP it carries: list and watch requests, and ``410`` answers (a watch that could not resume).

The proxy serves with the API server's own serving certificate (so the client's CA and the ``127.0.0.1``
name still verify) and talks to the API server with the admin client certificate: a client given
:meth:`TLSCutProxy.write_kubeconfig` is the admin, as with the control plane's own kubeconfig. HTTP/1.1
only (ALPN), so requests and answers can be read as they pass.

Without ``pki`` it passes TLS through untouched (a TCP proxy): the client's own credentials (a bearer
token, say) reach the API server, and nothing is counted.
"""

from __future__ import annotations

import asyncio
import re
import ssl
import threading
from collections import Counter
from pathlib import Path
from typing import Callable
from urllib.parse import urlparse

import yaml

REQUEST_LINE = re.compile(rb"(GET|POST|PUT|PATCH|DELETE) (\S+) HTTP/1\.[01]\r\n")
EXPIRED = re.compile(rb'"code":\s*410')


def server_of(kubeconfig: Path) -> str:
    """The server URL of a kubeconfig's current context."""
    config = yaml.safe_load(kubeconfig.read_text())
    context = next(c["context"] for c in config["contexts"] if c["name"] == config["current-context"])
    return str(next(c["cluster"]["server"] for c in config["clusters"] if c["name"] == context["cluster"]))


def is_collection(path: str) -> bool:
    """``/apis/g/v/[namespaces/ns/]plural`` or ``/api/v1/[namespaces/ns/]plural`` (not one named object)."""
    parts = [p for p in path.split("/") if p]
    if parts[:1] == ["apis"]:
        rest = parts[3:]
    elif parts[:1] == ["api"]:
        rest = parts[2:]
    else:
        return False
    if rest[:1] == ["namespaces"] and len(rest) >= 3:
        rest = rest[2:]
    return len(rest) == 1


class TLSCutProxy:
    """``TLSCutProxy(plane.url, plane.directory / "pki").start()``; ``.cut()``, ``.restore()``,
    ``.close()``."""

    def __init__(self, upstream_url: str, pki: Path | None) -> None:
        parsed = urlparse(upstream_url)
        assert parsed.hostname and parsed.port, upstream_url
        self.upstream = (parsed.hostname, parsed.port)
        self.port = 0
        self.lists: Counter[str] = Counter()  # collection path -> list (non-watch) GETs
        self.watches: Counter[str] = Counter()  # collection path -> watch GETs
        self.expired = 0  # 410 answers: ERROR events in watch streams or 410 responses
        self.refused = 0  # connections reset because the proxy was cut
        self._cut = False
        self._held: str | None = None  # lists of collections whose path contains this wait for release()
        self._released: asyncio.Event | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._server_ctx: ssl.SSLContext | None = None
        self._client_ctx: ssl.SSLContext | None = None
        if pki is not None:
            self._server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            self._server_ctx.load_cert_chain(pki / "apiserver.crt", pki / "apiserver.key")
            self._server_ctx.set_alpn_protocols(["http/1.1"])
            self._client_ctx = ssl.create_default_context(cafile=str(pki / "ca.crt"))
            self._client_ctx.load_cert_chain(pki / "admin.crt", pki / "admin.key")
            self._client_ctx.set_alpn_protocols(["http/1.1"])
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.base_events.Server | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, name="tls-cut-proxy", daemon=True)

    @classmethod
    def in_front_of(cls, kubeconfig: Path, pki: Path | None) -> TLSCutProxy:
        """A proxy to the server ``kubeconfig`` names (the control plane's ``pki`` directory; None: TLS
        passed through)."""
        return cls(server_of(kubeconfig), pki)

    def start(self) -> TLSCutProxy:
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._accept, "127.0.0.1", 0, ssl=self._server_ctx), self._loop).result(10)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def write_kubeconfig(self, admin_kubeconfig: Path, path: Path) -> Path:
        """``admin_kubeconfig`` with its server moved to the proxy."""
        config = yaml.safe_load(admin_kubeconfig.read_text())
        for cluster in config["clusters"]:
            cluster["cluster"]["server"] = self.url
        path.write_text(yaml.safe_dump(config))
        return path

    def relists(self, path_part: str = "") -> int:
        """List GETs of collections so far (of every resource, or those whose path contains path_part)."""
        return sum(n for p, n in self.lists.items() if path_part in p)

    def cut(self) -> None:
        """From now on every connection is reset, open ones included, until :meth:`restore`."""
        def do() -> None:
            self._cut = True
            for w in list(self._writers):
                w.transport.abort()
        self._call(do)

    def restore(self) -> None:
        self._call(lambda: setattr(self, "_cut", False))

    def hold_lists(self, path_part: str) -> None:
        """From now on a list (not a watch) of a collection whose path contains ``path_part`` is held
        back until :meth:`release` (the client waits for its answer; every other request goes through):
        one resource's relist made to come after the others'."""
        def do() -> None:
            self._held, self._released = path_part, asyncio.Event()
        self._call(do)

    def release(self) -> None:
        def do() -> None:
            if self._released is not None:
                self._released.set()
            self._held = None
        self._call(do)

    def close(self) -> None:
        """Stop listening (connections are refused from now on) and end every connection; idempotent."""
        if self._loop.is_closed():
            return

        async def shutdown() -> None:
            if self._server is not None:
                self._server.close()
            for w in list(self._writers):
                w.transport.abort()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(shutdown(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    def _call(self, fn: Callable[[], None]) -> None:
        done = threading.Event()

        def run() -> None:
            try:
                fn()
            finally:
                done.set()
        self._loop.call_soon_threadsafe(run)
        if not done.wait(10):
            raise TimeoutError("the proxy's loop did not answer in 10 s")

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await self._serve(reader, writer)
        except asyncio.CancelledError:
            # close(): the connection's task ends here (asyncio's start_server callback would log a
            # cancelled handler task as an error)
            writer.transport.abort()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._cut:
            self.refused += 1
            writer.transport.abort()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.upstream, ssl=self._client_ctx)
        except OSError:
            writer.transport.abort()
            return
        self._writers.update((writer, up_writer))
        try:
            await asyncio.gather(self._pump(reader, up_writer, self._requests),
                                 self._pump(up_reader, writer, self._responses))
        finally:
            for w in (writer, up_writer):
                self._writers.discard(w)
                w.transport.abort()

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                    inspect: Callable[[bytes, int], None]) -> None:
        tail = b""
        try:
            while not self._cut:
                data = await reader.read(65536)
                if not data or self._cut:
                    break
                if self._client_ctx is not None:  # plain HTTP here (TLS terminated)
                    # a request line or a 410 split across two reads is still seen, and seen once
                    inspect(tail + data, len(tail))
                    tail = data[-200:]
                    released = self._released
                    if inspect == self._requests and released is not None and self._held_list(data):
                        await released.wait()
                writer.write(data)
                await writer.drain()
        except OSError:  # ConnectionError, ssl.SSLError
            pass
        finally:
            writer.transport.abort()

    def _held_list(self, data: bytes) -> bool:
        held = self._held
        if held is None:
            return False
        for m in REQUEST_LINE.finditer(data):
            path, _, query = m.group(2).decode().partition("?")
            if m.group(1) == b"GET" and held in path and is_collection(path) \
                    and not re.search(r"(^|&)watch=(1|true)", query):
                return True
        return False

    def _requests(self, data: bytes, seen: int) -> None:
        for m in REQUEST_LINE.finditer(data):
            if m.end() <= seen or m.group(1) != b"GET":
                continue
            path, _, query = m.group(2).decode().partition("?")
            if re.search(r"(^|&)watch=(1|true)", query):
                self.watches[path] += 1
            elif is_collection(path):
                self.lists[path] += 1

    def _responses(self, data: bytes, seen: int) -> None:
        self.expired += sum(1 for m in EXPIRED.finditer(data) if m.end() > seen)
