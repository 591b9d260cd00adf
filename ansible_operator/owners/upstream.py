"""The real API server behind the owner proxy: how to reach it and what it serves.

:class:`Upstream` holds the operator's own connection settings (TLS, bearer token or basic auth, token
refresh), :class:`Discovery` the resource lists the proxy classifies requests with, and the timeouts the
proxy gives each forwarded request (:func:`request_timeout`; :func:`stream_timeout` for watches and followed
logs).
"""

from __future__ import annotations

import asyncio
import base64
import ssl
import time
from typing import TYPE_CHECKING, Any, Callable
from urllib.parse import urlsplit

from ansible_operator.kube import CONNECT_TIMEOUT, bearer_token

if TYPE_CHECKING:  # pragma: no cover
    import kubernetes.client
    from aiohttp import ClientTimeout

__all__ = [
    "HOP_BY_HOP",
    "READ_TIMEOUT",
    "TOTAL_TIMEOUT",
    "Discovery",
    "Upstream",
    "request_timeout",
    "stream_timeout",
]

HOP_BY_HOP = {
    "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer", "trailers",
    "transfer-encoding", "upgrade", "host", "content-length", "authorization",
}
"""Request headers not passed upstream (hop-by-hop ones, and the role's own credentials)."""

READ_TIMEOUT = 60.0
"""Seconds the owner proxy waits for the API server's next bytes on a role's request (watches and followed
logs excepted); then the role's client gets 504, and a connection nobody answers is dropped."""
TOTAL_TIMEOUT = 300.0
"""Seconds one request of a role may take through the proxy in all (watches and followed logs excepted)."""


class Upstream:
    """How to reach the real API server, taken from a kubernetes.client.Configuration.

    The proxy forwards with exactly the operator's own connection settings (TLS verification, client
    certificates, bearer/basic auth, token refresh).
    """

    def __init__(self, configuration: "kubernetes.client.Configuration") -> None:
        self.configuration = configuration
        self.base = str(configuration.host).rstrip("/")
        self.ssl: ssl.SSLContext | bool = False
        scheme = urlsplit(self.base).scheme
        if scheme == "https":
            ctx = ssl.create_default_context(cafile=configuration.ssl_ca_cert or None)
            if configuration.cert_file:
                ctx.load_cert_chain(configuration.cert_file, configuration.key_file or None)
            if not configuration.verify_ssl:
                ctx.check_hostname = False
                ctx.verify_mode = ssl.CERT_NONE
            elif getattr(configuration, "assert_hostname", None) is False:
                ctx.check_hostname = False
            self.ssl = ctx
        elif scheme != "http":
            raise ValueError(f"upstream host {self.base!r} is not an http(s) URL")
        self.server_hostname: str | None = getattr(configuration, "tls_server_name", None) or None
        self._refreshed = 0.0
        self._lock = asyncio.Lock()

    async def auth_header(self) -> str | None:
        """``Authorization`` value for upstream; refreshes exec/OIDC tokens via the client's hook (<=
        1/min)."""
        cfg = self.configuration
        hook = getattr(cfg, "refresh_api_key_hook", None)
        if hook is not None and time.monotonic() - self._refreshed > 60:
            async with self._lock:
                if time.monotonic() - self._refreshed > 60:
                    await asyncio.to_thread(hook, cfg)
                    self._refreshed = time.monotonic()
        token = bearer_token(cfg) if cfg.api_key else None
        if token:
            return token
        if cfg.username or cfg.password:
            basic = base64.b64encode(f"{cfg.username or ''}:{cfg.password or ''}".encode()).decode()
            return f"Basic {basic}"
        return None


class Discovery:
    """Cached resource lists per group/version, fetched by the proxy itself (with the operator's auth).

    A miss re-fetches the group/version at once (a role may have just created a CRD); concurrent misses
    share one fetch. Fetch errors propagate: the caller must not create an object it cannot classify.
    """

    def __init__(self, fetch: Callable[[str], Any]) -> None:
        self._fetch = fetch
        self._by_gv: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}
        self._generation: dict[tuple[str, str], int] = {}
        self._locks: dict[tuple[str, str], asyncio.Lock] = {}

    async def lookup(self, group: str, version: str, plural: str) -> dict[str, Any] | None:
        """The APIResource for ``plural`` in group/version, or ``None`` if the server does not serve it."""
        key = (group, version)
        found = self._by_gv.get(key, {}).get(plural)
        if found is not None:
            return found
        seen_generation = self._generation.get(key, 0)
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:
            if self._generation.get(key, 0) == seen_generation:  # nobody refreshed while we waited
                path = f"/api/{version}" if not group else f"/apis/{group}/{version}"
                doc = await self._fetch(path)
                resources = doc.get("resources", []) if isinstance(doc, dict) else []
                self._by_gv[key] = {r["name"]: r for r in resources
                                    if isinstance(r, dict) and "/" not in str(r.get("name", ""))}
                self._generation[key] = seen_generation + 1
            return self._by_gv.get(key, {}).get(plural)


def request_timeout() -> "ClientTimeout":
    """Any request of a role but a watch or a followed log: :data:`READ_TIMEOUT` and :data:`TOTAL_TIMEOUT`."""
    from aiohttp import ClientTimeout

    return ClientTimeout(total=TOTAL_TIMEOUT, sock_connect=CONNECT_TIMEOUT, sock_read=READ_TIMEOUT)


def stream_timeout(timeout_seconds: str | None) -> "ClientTimeout":
    """A watch or a followed log: no limit between two chunks (a quiet watch is fine), but an end: the
    timeout it asked the API server for (which ends it then) and a minute more; an hour without one."""
    from aiohttp import ClientTimeout

    try:
        asked = max(0, int(timeout_seconds)) if timeout_seconds else 3600
    except ValueError:
        asked = 3600
    return ClientTimeout(total=asked + 60, sock_connect=CONNECT_TIMEOUT)
