"""The ``/metrics``, ``/healthz`` and ``/readyz`` listeners, HTTPS for ``--metrics-secure`` and the
TokenReview/SubjectAccessReview filter of ``--metrics-require-rbac``. See the package docstring."""

from __future__ import annotations

import json
import logging
import re
import socket
import ssl
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from prometheus_client.exposition import CONTENT_TYPE_LATEST

log = logging.getLogger("ansible_operator.metrics")


class Exposition(Protocol):
    """What ``/metrics`` serves (``Metrics``)."""

    def exposition(self) -> bytes: ...


# ---- HTTP endpoints ---------------------------------------------------------------------------------

ReadyCheck = Callable[[], "bool | tuple[bool, str]"]
"""Returns True when ready, or ``(False, "why")`` / False when not."""


def parse_bind_address(address: str) -> tuple[str | None, int] | None:
    """``":8080"`` → ``(None, 8080)`` (all interfaces), ``"127.0.0.1:0"`` → ``("127.0.0.1", 0)``,
    ``"[::1]:9000"`` → ``("::1", 9000)``, ``"0"`` or ``""`` → ``None`` (disabled), as controller-runtime
    reads ``--metrics-bind-address``. Raises ``ValueError`` with the accepted forms otherwise."""
    text = address.strip()
    if text in ("", "0"):
        return None
    host, sep, port_text = text.rpartition(":")
    if not sep:
        raise ValueError(f"invalid bind address {address!r}: expected HOST:PORT, :PORT, or 0 to disable")
    bracketed = host.startswith("[") and host.endswith("]")
    if bracketed:
        host = host[1:-1]
    if host and not _valid_host(host, ipv6_ok=bracketed):
        raise ValueError(f"invalid bind address {address!r}: {host!r} is not an IP address or host name"
                         + (" (write IPv6 as [addr]:port)" if ":" in host and not bracketed else ""))
    try:
        port = int(port_text)
    except ValueError:
        raise ValueError(f"invalid bind address {address!r}: port {port_text!r} is not a number") from None
    if not 0 <= port <= 65535:
        raise ValueError(f"invalid bind address {address!r}: port must be 0..65535")
    return (host or None), port


_HOST_LABEL = re.compile(r"^(?!-)[A-Za-z0-9-]{1,63}(?<!-)$")


def _valid_host(host: str, *, ipv6_ok: bool) -> bool:
    """An IPv4 address or host name, or (``ipv6_ok``: it was written in brackets) an IPv6 address."""
    import ipaddress

    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return not ipv6_ok and len(host) <= 253 \
            and all(_HOST_LABEL.match(label) for label in host.rstrip(".").split("."))
    return ip.version == 6 if ipv6_ok else ip.version == 4


@dataclass
class ServerHandle:
    """A running listener. ``port`` is the real port (useful with port 0)."""

    host: str | None
    port: int
    paths: tuple[str, ...]
    _runner: object
    scheme: str = "http"

    @property
    def url(self) -> str:
        host = self.host or "127.0.0.1"
        if ":" in host:
            host = f"[{host}]"
        return f"{self.scheme}://{host}:{self.port}"

    async def close(self) -> None:
        await self._runner.cleanup()  # type: ignore[attr-defined]


def _evaluate(check: ReadyCheck) -> tuple[bool, str]:
    try:
        value = check()
    except Exception as exc:  # noqa: BLE001 - a probe must answer, not crash the server
        return False, f"check raised {type(exc).__name__}: {exc}"
    if isinstance(value, tuple):
        ok, reason = bool(value[0]), str(value[1])
        return ok, reason
    return bool(value), ""


async def serve(
    bind_address: str,
    *,
    metrics: Exposition | None = None,
    ready: ReadyCheck | None = None,
    live: ReadyCheck | None = None,
    health: bool = True,
    tls: ssl.SSLContext | None = None,
    metrics_filter: RbacFilter | None = None,
) -> ServerHandle | None:
    """Start an HTTP listener on ``bind_address``; return None when the address disables it (``"0"``).

    Serves ``/metrics`` when ``metrics`` is given, and ``/healthz`` + ``/readyz`` when ``health`` is true
    (``ready`` defaults to "always ready", ``live`` to "always alive"). Both answer ``200 ok`` or
    ``500`` with the reason in the body, like Kubernetes' own components. ``tls`` serves HTTPS;
    ``metrics_filter`` must allow a request before ``/metrics`` answers it.
    """
    from aiohttp import web

    parsed = parse_bind_address(bind_address)
    if parsed is None:
        return None
    host, port = parsed
    app = web.Application()
    paths: list[str] = []

    if metrics is not None:
        async def metrics_handler(request: web.Request) -> web.Response:
            if metrics_filter is not None:
                refusal = await metrics_filter.check(request.headers.get("Authorization", ""), request.path,
                                                     request.method)
                if refusal is not None:
                    return web.Response(status=refusal[0], text=refusal[1])
            return web.Response(body=metrics.exposition(), headers={"Content-Type": CONTENT_TYPE_LATEST})

        app.router.add_get("/metrics", metrics_handler)
        paths.append("/metrics")

    if health:
        def probe(check: ReadyCheck | None, failing: str) -> Callable[[web.Request], Awaitable[web.Response]]:
            async def handler(_request: web.Request) -> web.Response:
                ok, reason = (True, "") if check is None else _evaluate(check)
                if ok:
                    return web.Response(text="ok")
                return web.Response(status=500, text=f"{failing}: {reason}" if reason else failing)
            return handler

        app.router.add_get("/healthz", probe(live, "not alive"))
        app.router.add_get("/readyz", probe(ready, "not ready"))
        paths += ["/healthz", "/readyz"]

    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host=host, port=port, ssl_context=tls)
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        what = ", ".join(paths)
        raise OSError(exc.errno, f"cannot listen on {bind_address!r} for {what}: {exc.strerror}") from exc
    server = getattr(site, "_server", None)
    sockets = getattr(server, "sockets", None) or []
    # With port 0 on all interfaces each address family gets its own port: report the IPv4 one, which
    # ``url`` (127.0.0.1) reaches.
    ipv4 = [s for s in sockets if s.family == socket.AF_INET]
    real_port = (ipv4 or sockets)[0].getsockname()[1] if sockets else port
    log.info("serving %s on %s", " ".join(paths), f"{host or '*'}:{real_port}")
    return ServerHandle(host=host, port=real_port, paths=tuple(paths), _runner=runner,
                        scheme="https" if tls is not None else "http")


async def serve_endpoints(
    metrics_address: str,
    health_address: str,
    *,
    metrics: Exposition,
    ready: ReadyCheck | None = None,
    live: ReadyCheck | None = None,
    tls: ssl.SSLContext | None = None,
    metrics_filter: RbacFilter | None = None,
) -> list[ServerHandle]:
    """Start what ``run --metrics-bind-address/--health-probe-bind-address`` ask for: one listener when
    both addresses are the same (and name a port: two ``:0`` are two listeners, each on a port of its own),
    two when they differ, fewer when one is ``"0"``. ``tls`` and
    ``metrics_filter`` apply to the metrics listener (to the probes too when they share it). Close them with
    ``close_all``."""
    handles: list[ServerHandle] = []
    try:
        bound = parse_bind_address(metrics_address)
        same = bound is not None and bound[1] != 0 and bound == parse_bind_address(health_address)
        if same:
            h = await serve(metrics_address, metrics=metrics, ready=ready, live=live, tls=tls,
                            metrics_filter=metrics_filter)
            if h:
                handles.append(h)
            return handles
        h = await serve(metrics_address, metrics=metrics, health=False, tls=tls,
                        metrics_filter=metrics_filter)
        if h:
            handles.append(h)
        h = await serve(health_address, ready=ready, live=live)
        if h:
            handles.append(h)
        return handles
    except BaseException:
        await close_all(handles)
        raise


async def close_all(handles: Iterable[ServerHandle]) -> None:
    for h in handles:
        await h.close()


# ---- HTTPS for /metrics (--metrics-secure) -----------------------------------------------------------

def tls_context(cert_dir: str | Path, cert_name: str = "tls.crt",
                key_name: str = "tls.key") -> ssl.SSLContext:
    """A server context from ``cert_dir/cert_name`` + ``cert_dir/key_name`` when both exist (a mounted
    Secret, as controller-runtime's metrics server reads them), else from a fresh self-signed certificate
    for ``localhost``, this host name and 127.0.0.1 (controller-runtime does the same). HTTP/1.1 only."""
    import tempfile

    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.set_alpn_protocols(["http/1.1"])
    cert, key = Path(cert_dir) / cert_name, Path(cert_dir) / key_name
    if cert.is_file() and key.is_file():
        context.load_cert_chain(cert, key)
        log.info("metrics server certificate from %s", cert)
        return context
    cert_pem, key_pem = _self_signed()
    with tempfile.TemporaryDirectory(prefix="metrics-cert-") as tmp:
        (Path(tmp) / "tls.crt").write_bytes(cert_pem)
        key_file = Path(tmp) / "tls.key"
        key_file.touch(mode=0o600)
        key_file.write_bytes(key_pem)
        context.load_cert_chain(Path(tmp) / "tls.crt", key_file)
    log.info("metrics server certificate: self-signed (no %s in %s)", cert_name, cert_dir)
    return context


def _self_signed() -> tuple[bytes, bytes]:
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    host = socket.gethostname()
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{host}@{int(time.time())}")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=365))
        .add_extension(x509.SubjectAlternativeName([
            x509.DNSName("localhost"), x509.DNSName(host),
            x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    return (cert.public_bytes(serialization.Encoding.PEM),
            key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                              serialization.NoEncryption()))


# ---- --metrics-require-rbac ----------------------------------------------------------------------------

PostJson = Callable[[str, dict[str, Any]], Awaitable[Any]]
"""POST a JSON body to an API server path and return the decoded answer (``Kube.request`` bound)."""


class RbacFilter:
    """controller-runtime's ``filters.WithAuthenticationAndAuthorization`` for ``/metrics``.

    The caller's bearer token is checked with a ``TokenReview``; the user it names must then be allowed
    ``<verb> <path>`` (a non-resource URL, e.g. ``get /metrics``) by a ``SubjectAccessReview``. Missing or
    rejected tokens get 401, denied users 403, a failing API server 500. Answers are cached like
    controller-runtime's: tokens 1 minute, allowed 5 minutes, denied 30 seconds.
    """

    TOKEN_TTL = 60.0
    ALLOW_TTL = 300.0
    DENY_TTL = 30.0

    def __init__(self, post: PostJson, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._post = post
        self._clock = clock
        self._tokens: dict[str, tuple[float, dict[str, Any] | None]] = {}
        self._decisions: dict[str, tuple[float, bool]] = {}

    async def check(self, authorization: str, path: str, method: str) -> tuple[int, str] | None:
        """None when the request may proceed, else ``(status, body)``."""
        scheme, _, token = authorization.partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            return 401, "Unauthorized: a bearer token is required"
        try:
            user = await self._authenticate(token)
            if user is None:
                return 401, "Unauthorized: the token was not accepted by a TokenReview"
            verb = method.lower() if method.upper() != "HEAD" else "get"
            if not await self._authorize(user, path, verb):
                return 403, f"Forbidden: user {user.get('username', '?')!r} may not {verb} {path}"
        except Exception as exc:  # noqa: BLE001 - the API server failed us: refuse, say why, keep serving
            log.warning("metrics authorization failed: %s", exc)
            return 500, f"Authorization failed: {exc}"
        return None

    async def _authenticate(self, token: str) -> dict[str, Any] | None:
        now = self._clock()
        cached = self._tokens.get(token)
        if cached is not None and cached[0] > now:
            return cached[1]
        review = await self._post("/apis/authentication.k8s.io/v1/tokenreviews", {
            "apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}})
        status = (review or {}).get("status") or {}
        user = status.get("user") if status.get("authenticated") else None
        self._prune(self._tokens, now)
        self._tokens[token] = (now + self.TOKEN_TTL, user)
        return user

    async def _authorize(self, user: dict[str, Any], path: str, verb: str) -> bool:
        spec: dict[str, Any] = {"user": user.get("username", ""), "groups": user.get("groups") or [],
                                "nonResourceAttributes": {"path": path, "verb": verb}}
        if user.get("uid"):
            spec["uid"] = user["uid"]
        if user.get("extra"):
            spec["extra"] = user["extra"]
        key = json.dumps(spec, sort_keys=True)
        now = self._clock()
        cached = self._decisions.get(key)
        if cached is not None and cached[0] > now:
            return cached[1]
        review = await self._post("/apis/authorization.k8s.io/v1/subjectaccessreviews", {
            "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec})
        allowed = bool(((review or {}).get("status") or {}).get("allowed"))
        self._prune(self._decisions, now)
        self._decisions[key] = (now + (self.ALLOW_TTL if allowed else self.DENY_TTL), allowed)
        return allowed

    @staticmethod
    def _prune(cache: dict[str, Any], now: float) -> None:
        if len(cache) > 1024:
            for k in [k for k, v in cache.items() if v[0] <= now]:
                del cache[k]
