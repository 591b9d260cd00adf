"""Talking to the Kubernetes API: one client configuration for the whole operator.

kopf (watch streams), the status writer, the owner proxy and leader election all derive their
connection from the same :class:`kubernetes.client.Configuration`, loaded the way kubectl does it:
an explicit ``--kubeconfig``, then ``$KUBECONFIG`` / ``~/.kube/config``, then the in-cluster service
account. Nothing here knows about the sandbox: it is just another API server behind a kubeconfig.

The ``kubernetes`` client is synchronous; every call runs in a worker thread so the event loop
never blocks.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import random
import re
import socket
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable
from urllib.parse import quote, urlsplit

import kubernetes
import urllib3
import yaml
from kubernetes.client.rest import ApiException

from ansible_operator import apijson, kopfcompat
from ansible_operator.errors import OperatorError
from ansible_operator.kubetypes import Event, KubeObject

log = logging.getLogger(__name__)

THROTTLE_RETRIES = 10
"""How many times :meth:`Kube.request` sends a request again after a ``429 Too Many Requests`` with
``Retry-After``, waiting what the server asks each time: client-go's REST client does the same (its default
``maxRetries``), and so does kopf for the runner's watches and lists. The API server refused the request
before handling it (max-in-flight limit, priority and fairness), so it is safe to send again whatever the
verb."""


CONNECT_TIMEOUT = 10.0
"""Seconds to connect (TCP and TLS) for each request the runner makes itself."""
READ_TIMEOUT = 30.0
"""Seconds the runner's own requests (status, Events, discovery, access reviews, reads) wait for an answer:
a request on a connection nobody answers any more (a silent network cut, a hung API server) fails then,
and is retried like any other failure, instead of wedging its caller for ever."""

IDEMPOTENT_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE"})
"""Verbs whose request may be sent again after it may have reached the server (RFC 9110's idempotent
methods; a ``PUT`` of the runner's carries a ``resourceVersion``, so a repeat that lost the race is a 409)."""

MERGE_PATCH = "application/merge-patch+json"
"""A JSON merge patch (RFC 7386) is idempotent too: applied twice, it gives what it gave once."""


@dataclass(frozen=True)
class RequestPolicy:
    """Timeouts and retries of every request the runner makes itself (outside kopf's watch streams), applied
    in one place, :meth:`Kube.request`; urllib3's own retries are off (:meth:`Kube.__init__`).

    What is sent again:

    * a ``429`` with ``Retry-After``, whatever the verb, after the wait the server asks for, up to
      ``throttle_retries`` times: the server refused it before handling it (client-go does the same);
    * a request that never reached the server (connection refused, DNS, connect timeout), whatever the verb;
    * an idempotent request (:data:`IDEMPOTENT_METHODS`, a merge patch) after no answer (reset, read
      timeout) or a 5xx, up to ``retries`` times, after an exponential backoff with jitter (or the answer's
      ``Retry-After``, if longer), and only while ``give_up_after`` seconds have not passed since the first
      attempt. A ``POST`` that may have reached the server is never sent twice: it could create twice.

    Each retry is one DEBUG record of logger ``ansible_operator.kube`` (``method``, ``path``, ``attempt``,
    ``cause``, ``delay`` as record attributes), and giving up after retries one WARNING; the caller gets the
    typed :class:`ApiError` of the last attempt."""

    connect_timeout: float = CONNECT_TIMEOUT
    read_timeout: float = READ_TIMEOUT
    retries: int = 3
    """Further attempts after no answer or a 5xx (0: one attempt only)."""
    backoff: float = 0.5
    """Seconds before the first such retry; doubled for each next one, up to ``max_backoff``."""
    max_backoff: float = 5.0
    jitter: float = 0.5
    """Each backoff is lengthened by up to this fraction, at random: callers failing together spread out."""
    give_up_after: float = 45.0
    """No retry of a failure starts later than this many seconds after the first attempt started."""
    throttle_retries: int = THROTTLE_RETRIES

    def idempotent(self, method: str, content_type: str | None) -> bool:
        """Whether a request may be sent again after it may have reached the server."""
        verb = method.upper()
        return verb in IDEMPOTENT_METHODS or (verb == "PATCH" and content_type == MERGE_PATCH)

    def may_resend(self, method: str, content_type: str | None, exc: "ApiError") -> bool:
        """Whether a failed attempt may be sent again (after a backoff): one that never reached the server,
        or an idempotent one that got no answer, a 5xx or a 429 without ``Retry-After``."""
        if isinstance(exc, ConnectFailed):
            return True
        return isinstance(exc, (ServerError, TooManyRequests)) and self.idempotent(method, content_type)

    def backoff_delay(self, retry: int) -> float:
        """Seconds before failure retry number ``retry`` (1-based), jitter included."""
        base = min(self.max_backoff, self.backoff * 2.0 ** (retry - 1))
        return float(base * (1 + random.random() * self.jitter))


DEFAULT_POLICY = RequestPolicy()
ONE_ATTEMPT = RequestPolicy(retries=0, throttle_retries=0)
"""For probes and for callers that keep their own cadence (leader election): no retry of any kind."""


_KEEPALIVE = [(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)] + [
    (socket.IPPROTO_TCP, getattr(socket, name), value)
    for name, value in (("TCP_KEEPIDLE", 30), ("TCP_KEEPINTVL", 10), ("TCP_KEEPCNT", 3))
    if hasattr(socket, name)
]
"""TCP keepalive for the runner's pooled connections: a peer gone without a word (a rebooted node, a lost
NAT entry) is noticed after about a minute of silence, before a request is sent on it."""


def with_keepalive(api_client: kubernetes.client.ApiClient) -> kubernetes.client.ApiClient:
    """``api_client`` whose new connections have TCP keepalive (:data:`_KEEPALIVE`) on."""
    pool_manager = api_client.rest_client.pool_manager
    pool_manager.connection_pool_kw["socket_options"] = [
        *urllib3.connection.HTTPConnection.default_socket_options, *_KEEPALIVE]
    return api_client


class ConfigError(OperatorError):
    """No usable cluster configuration."""


def load_client_config(kubeconfig: str | os.PathLike[str] | None = None) -> kubernetes.client.Configuration:
    """Load a client configuration like kubectl: kubeconfig first, in-cluster last."""
    configuration = kubernetes.client.Configuration()
    explicit = kubeconfig or os.environ.get("KUBECONFIG")
    if explicit:
        # $KUBECONFIG may list several files; like kubectl, the first existing one wins here.
        candidates = [p for p in str(explicit).split(os.pathsep) if p]
        existing = [p for p in candidates if Path(p).expanduser().is_file()]
        if not existing:
            raise ConfigError(f"kubeconfig not found: {explicit}")
        _load_kubeconfig(existing[0], configuration)
        return configuration
    default = Path("~/.kube/config").expanduser()
    if default.is_file():
        _load_kubeconfig(str(default), configuration)
        return configuration
    try:
        load_incluster_config(configuration)
    except kubernetes.config.ConfigException as exc:
        raise ConfigError(
            f"no cluster configuration ({' '.join(str(exc).split())}): pass --kubeconfig, set $KUBECONFIG,"
            " create ~/.kube/config, or run inside a pod with a service account"
        ) from None
    return configuration


def _load_kubeconfig(path: str, configuration: kubernetes.client.Configuration) -> None:
    """kubectl's reading of a kubeconfig file; what it cannot use is a ConfigError of one line."""
    try:
        kubernetes.config.load_kube_config(config_file=path, client_configuration=configuration)
    except (kubernetes.config.ConfigException, yaml.YAMLError, OSError, ValueError, KeyError, TypeError,
            AttributeError) as exc:
        reason = " ".join(str(exc).split()) or type(exc).__name__
        if isinstance(exc, yaml.YAMLError):
            reason = "not YAML: " + reason
        raise ConfigError(f"kubeconfig {path}: {reason}") from None


#: overrides where the service-account files are read from (tests; pods mounting them elsewhere)
SERVICE_ACCOUNT_DIR_ENV = "ANSIBLE_OPERATOR_SERVICE_ACCOUNT_DIR"
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


def service_account_dir() -> Path:
    """The in-cluster credentials directory (``token``, ``ca.crt``, ``namespace``)."""
    return Path(os.environ.get(SERVICE_ACCOUNT_DIR_ENV) or SERVICE_ACCOUNT_DIR)


def _file_stamp(path: Path) -> tuple[int, int, int] | None:
    try:
        st = path.stat()  # follows the kubelet's ..data symlink swap
    except OSError:
        return None
    return (st.st_ino, st.st_mtime_ns, st.st_size)


def load_incluster_config(configuration: kubernetes.client.Configuration) -> None:
    """The pod's service account (``$KUBERNETES_SERVICE_HOST``/``_PORT``, token and CA in
    :func:`service_account_dir`), with the token re-read as soon as the file changes.

    The kubelet rotates projected tokens by replacing the file; the client's own hook re-reads it only once
    a minute, so a rotation followed by the old token's revocation would give a minute of 401s. The hook runs
    before every request (``Configuration.get_api_key_with_prefix``): one ``stat`` each time.
    """
    sa_dir = service_account_dir()
    token_file = sa_dir / "token"
    kubernetes.config.incluster_config.InClusterConfigLoader(
        token_filename=str(token_file), cert_filename=str(sa_dir / "ca.crt"), try_refresh_token=False,
    ).load_and_set(configuration)
    # the client keeps the file's trailing newline, which no HTTP header may carry (`kubectl create token >
    # token` writes one); the newer client (37) files the token under "BearerToken": it goes under
    # "authorization", which both read (37 as the alias of "BearerToken") and the hook below refreshes
    loaded = configuration.api_key.pop("BearerToken", None) or configuration.api_key.get("authorization")
    configuration.api_key["authorization"] = str(loaded or "").strip()
    stamp = [_file_stamp(token_file)]

    def refresh(cfg: kubernetes.client.Configuration) -> None:
        now = _file_stamp(token_file)
        if now is None or now == stamp[0]:
            return  # unchanged, or briefly missing during a swap: keep the token we have
        try:
            token = token_file.read_text().strip()
        except OSError:
            return
        if token:
            cfg.api_key["authorization"] = f"bearer {token}"
            stamp[0] = now

    configuration.refresh_api_key_hook = refresh


#: where ``Configuration.api_key`` holds a bearer token (``Bearer <token>``): the client's kubeconfig and
#: in-cluster loaders write "authorization" up to 33.x, "BearerToken" in the pydantic-generated client (37)
BEARER_KEYS = ("BearerToken", "authorization")


def bearer_token(configuration: kubernetes.client.Configuration) -> str | None:
    """The ``Authorization`` header value of the configuration's bearer token, from either client line
    (runs its refresh hook, as the client does before each request)."""
    for key in BEARER_KEYS:
        if configuration.api_key.get(key):
            token = configuration.get_api_key_with_prefix(key)
            return str(token) if token else None
    return None


@dataclass(frozen=True)
class ResourceRef:
    """Where a kind lives in the REST API."""

    group: str
    version: str
    plural: str
    namespaced: bool

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, namespace: str | None = None, name: str | None = None,
             subresource: str | None = None) -> str:
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{quote(namespace, safe='')}"
        base += f"/{self.plural}"
        if name:
            base += f"/{quote(name, safe='')}"
        if subresource:
            base += f"/{subresource}"
        return base


class ApiError(OperatorError):
    """An API call failed; ``status`` is the HTTP code (0 when no answer) and ``reason`` Kubernetes' reason.

    Callers catch the typed subclasses (:class:`NotFound`, :class:`Conflict`, :class:`Gone`,
    :class:`Forbidden`, ...) rather than comparing ``status`` integers; :func:`api_error` picks the class,
    like apimachinery's ``errors.IsNotFound`` family."""

    status_code: int | None = None
    retry_after: float | None = None
    """Seconds from the answer's ``Retry-After`` header, when it had one."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message


class BadRequest(ApiError):
    status_code = 400


class Unauthorized(ApiError):
    status_code = 401


class Forbidden(ApiError):
    status_code = 403


class NotFound(ApiError):
    status_code = 404


class MethodNotAllowed(ApiError):
    status_code = 405


class Conflict(ApiError):
    """409: the object changed since it was read (resourceVersion precondition) or already exists."""

    status_code = 409


class Gone(ApiError):
    """410: the requested resourceVersion is too old (watch history compacted); list again."""

    status_code = 410


class Invalid(ApiError):
    status_code = 422


class TooManyRequests(ApiError):
    status_code = 429


class ServerError(ApiError):
    """5xx, or no answer at all (status 0)."""


class ConnectFailed(ServerError):
    """No connection to the API server (refused, name not resolved, connect timeout): nothing was sent."""


_BY_STATUS: dict[int, type[ApiError]] = {
    cls.status_code: cls
    for cls in (BadRequest, Unauthorized, Forbidden, NotFound, MethodNotAllowed, Conflict, Gone, Invalid,
                TooManyRequests)
    if cls.status_code is not None
}


def api_error(status: int, reason: str, message: str) -> ApiError:
    """The typed :class:`ApiError` for an HTTP status."""
    cls = _BY_STATUS.get(status)
    if cls is None:
        cls = ServerError if status >= 500 or status == 0 else ApiError
    return cls(status, reason, message)


def error_from_response(status: int, body: bytes | str | None, what: str = "") -> ApiError:
    """The typed :class:`ApiError` for an HTTP answer: ``status`` and its (usually ``Status``) body.

    For the runner's own raw-HTTP calls (the owner proxy's discovery and owner patches)."""
    reason, message = "Unknown", ""
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else (body or "")
    try:
        doc = json.loads(text) if text else None
    except ValueError:
        doc = None
    if isinstance(doc, dict) and doc.get("kind") == "Status":
        reason = str(doc.get("reason") or reason)
        message = str(doc.get("message") or "")
    else:
        message = text[:300]
    return api_error(status, reason, f"{what}: {message}" if what else message)


def check_response(status: int, body: bytes | str | None, what: str = "") -> None:
    """Raise the typed error unless ``status`` is a success (2xx)."""
    if not 200 <= status < 300:
        raise error_from_response(status, body, what)


def error_from_api_exception(exc: ApiException) -> ApiError:
    """The typed :class:`ApiError` for the ``kubernetes`` client's ``ApiException``."""
    reason, message = "Unknown", str(exc.reason or "")
    try:
        status_obj = json.loads(exc.body or b"{}")
        reason = status_obj.get("reason") or reason
        message = status_obj.get("message") or message
    except (ValueError, TypeError, AttributeError):
        pass
    error = api_error(exc.status or 0, reason, message)
    error.retry_after = _retry_after(getattr(exc, "headers", None))
    return error


def _retry_after(headers: Any) -> float | None:
    """``Retry-After`` in seconds (the API server sends whole seconds), or None."""
    try:
        value = headers.get("Retry-After") if headers is not None else None
        return max(0.0, float(value)) if value is not None else None
    except (AttributeError, TypeError, ValueError):
        return None


def _fields(method: str, path: str, attempt: int, exc: ApiError) -> dict[str, Any]:
    """The structured fields of a retry or give-up record (``extra=``; JSON output prints them)."""
    message = exc.message.removeprefix(f"{method} {path}: ")
    return {"method": method, "path": path, "attempt": attempt, "status": exc.status,
            "cause": f"{exc.status} {exc.reason}: {message}" if exc.status else message}


def error_from_kopf(exc: BaseException) -> ApiError | None:
    """The typed :class:`ApiError` for one of kopf's client errors (they carry the HTTP ``status`` and the
    ``Status`` payload); ``None`` for anything else."""
    parts = kopfcompat.api_error(exc)
    if parts is None:
        return None
    status, reason, message = parts
    return api_error(status, reason, message)


# ---- kopf's client: the one list/watch path (kopf's watch streams and the dependent watches) ----------


def kopf_connection_info(configuration: kubernetes.client.Configuration) -> Any:
    """``kopf.ConnectionInfo`` for our client configuration (kubeconfig first, like kubectl).

    Runs the configuration's token refresh hook first, so that a re-login after a 401 picks up a rotated
    token (in-cluster token file, expired exec/OIDC credentials) rather than the one just refused."""
    import kopf

    hook = getattr(configuration, "refresh_api_key_hook", None)
    if hook is not None:
        hook(configuration)
    token = None
    scheme = None
    header = configuration.api_key.get("BearerToken") or configuration.api_key.get("authorization")
    if header:
        prefix = configuration.api_key_prefix.get("BearerToken") or configuration.api_key_prefix.get(
            "authorization")
        value = f"{prefix} {header}" if prefix else header
        parts = value.split(" ", 1)
        scheme, token = (parts[0], parts[1]) if len(parts) == 2 else (None, parts[0])
    return kopf.ConnectionInfo(
        server=configuration.host,
        ca_path=configuration.ssl_ca_cert or None,
        insecure=not configuration.verify_ssl,
        username=configuration.username or None,
        password=configuration.password or None,
        scheme=scheme,
        token=token,
        certificate_path=configuration.cert_file or None,
        private_key_path=configuration.key_file or None,
    )


def kopf_vault(configuration: kubernetes.client.Configuration | None = None) -> Any:
    """kopf's credentials vault, for ``kopf.operator(vault=)`` and the dependent watches that share it.
    Empty: kopf's login handler fills it (and refills it after a 401). With a ``configuration``: filled
    from it at once, for use without ``kopf.operator`` (tests)."""
    return kopfcompat.vault(None if configuration is None else kopf_connection_info(configuration))


def call_raw(api_client: Any, method: str, path: str, query: list[tuple[str, str]], headers: dict[str, str],
             body: Any, timeout: tuple[float, float] | None = (CONNECT_TIMEOUT, READ_TIMEOUT),
             ) -> tuple[int, bytes]:
    """One request through ``api_client`` (bearer token, TLS and proxy settings of its configuration): the
    answer's status and body, or ``ApiException`` for a non-2xx answer, with either generation of the
    client.
    ``timeout``: (connect, read) seconds; ``urllib3``'s ``HTTPError`` when either runs out.

    The client up to 33.x (python-legacy generator) takes everything in ``call_api`` and raises on non-2xx
    answers itself; the pydantic-generated one (37) splits it into ``param_serialize`` and
    ``call_api(method, url, headers, body, post_params)``, and returns every answer.
    """
    if not hasattr(api_client, "param_serialize"):
        response = api_client.call_api(
            path, method, query_params=query, header_params=headers, body=body,
            auth_settings=["BearerToken"], _preload_content=False, _return_http_data_only=True,
            _request_timeout=timeout,
        )
        return int(response.status), bytes(response.data or b"")
    request = api_client.param_serialize(method, path, query_params=query, header_params=headers, body=body,
                                         auth_settings=["BearerToken"])
    response = api_client.call_api(*request, _request_timeout=timeout)
    data = response.read()
    if not 200 <= response.status <= 299:
        raise ApiException(http_resp=response)
    return int(response.status), bytes(data or b"")


_POOL_PREFIX = re.compile(r"^\w*Connection(?:Pool)?\(host=.*?, port=\d+\): ")
_NEW_CONNECTION = re.compile(r"^.*?Failed to establish a new connection: ")


def no_answer_cause(exc: BaseException) -> str:
    """One line saying why a request got no answer, without urllib3's wrapping ("HTTPSConnectionPool(...):
    Max retries exceeded with url ... (Caused by ...)")."""
    inner: BaseException = exc
    if isinstance(exc, urllib3.exceptions.MaxRetryError) and exc.reason is not None:
        inner = exc.reason
    if isinstance(inner, urllib3.exceptions.ProtocolError) and len(inner.args) == 2:
        what, why = inner.args
        return f"{str(what).rstrip('.').lower()}: {why}"
    text = _NEW_CONNECTION.sub("cannot connect: ", _POOL_PREFIX.sub("", str(inner)))
    return " ".join(text.split()) or type(inner).__name__


def _never_sent(exc: BaseException) -> bool:
    """Whether the request failed before any of it was sent (no connection could be made)."""
    inner = exc.reason if isinstance(exc, urllib3.exceptions.MaxRetryError) else exc
    return isinstance(inner, (urllib3.exceptions.ConnectTimeoutError, urllib3.exceptions.NewConnectionError))


RequestObserver = Callable[[str, str, str, float], None]
"""(method, status code or ``<error>``, host, seconds) of one request the runner made."""


class Kube:
    """The runner's one client for everything it asks the API server outside kopf's watch streams (status and
    finalizer writes, Events, discovery, access reviews, leader election's Lease): an async facade over the
    synchronous ``kubernetes`` client, with one :class:`RequestPolicy` for timeouts and retries, typed errors
    (:class:`ApiError`) and structured log records."""

    def __init__(self, configuration: kubernetes.client.Configuration,
                 policy: RequestPolicy = DEFAULT_POLICY) -> None:
        self.configuration = configuration
        self.policy = policy
        self._reset = asyncio.Event()
        """Set (and replaced) by :meth:`reset_connections`: attempts in flight on a connection from before
        an outage stop waiting for it."""
        self.api_client = with_keepalive(kubernetes.client.ApiClient(configuration))
        # urllib3 would retry on its own (3 times, no backoff, one "Retrying (Retry(total=2...))" warning
        # each) under our retries: off, so that the policy above is the only one
        self.api_client.rest_client.pool_manager.connection_pool_kw["retries"] = urllib3.Retry(total=False)
        self.host = urlsplit(configuration.host).netloc
        self.observers: list[RequestObserver] = []
        """Told of every request (method, HTTP status or ``<error>``, host, seconds): the
        ``rest_client_*`` metrics. Called from worker threads."""

    def close(self) -> None:
        self.api_client.close()

    def reset_connections(self) -> None:
        """After an outage some connections may be dead without a word: close the pooled ones, so the next
        requests connect afresh, and stop waiting for the idempotent attempts in flight (each would wait
        out :data:`READ_TIMEOUT` on a dead connection): they are sent again on a new one. A POST in flight
        is waited for (it may have arrived). Called on the event loop."""
        self.api_client.rest_client.pool_manager.clear()
        self._reset.set()
        self._reset = asyncio.Event()

    async def request(self, method: str, path: str, *, body: Any = None, content_type: str | None = None,
                      query: list[tuple[str, str]] | None = None, read_timeout: float | None = None,
                      policy: RequestPolicy | None = None) -> Any:
        """One API call under ``policy`` (default: this client's, :class:`RequestPolicy`), whose read timeout
        ``read_timeout`` replaces; the answer's JSON, or the typed :class:`ApiError` of the last attempt
        (no answer: :class:`ServerError`, status 0)."""
        policy = policy or self.policy
        if read_timeout is not None:
            policy = replace(policy, read_timeout=read_timeout)
        started = time.monotonic()
        attempt = throttled = failed = 0
        while True:
            attempt += 1
            try:
                return await self._attempt(policy, method, path, body, content_type, query)
            except ApiError as exc:
                delay: float | None = None
                throttle = isinstance(exc, TooManyRequests) and exc.retry_after is not None
                failure = not throttle and policy.may_resend(method, content_type, exc)
                if throttle and throttled < policy.throttle_retries:
                    throttled += 1
                    delay = exc.retry_after
                elif failure and failed < policy.retries:
                    wait = max(policy.backoff_delay(failed + 1), exc.retry_after or 0.0)
                    if time.monotonic() + wait - started <= policy.give_up_after:
                        failed += 1
                        delay = wait
                fields = _fields(method, path, attempt, exc)
                if delay is None:
                    if attempt > 1 and (throttle or failure):
                        # the caller logs the error (one line); it says how long we tried
                        took = time.monotonic() - started
                        exc.message = f"{exc.message} (gave up after {attempt} attempts in {took:.1f}s)"
                        exc.args = (f"{exc.status} {exc.reason}: {exc.message}",)
                        log.debug("%s %s: giving up after %d attempts in %.1fs: %s", method, path, attempt,
                                  took, fields["cause"], extra=fields)
                    raise
                log.debug("%s %s: attempt %d failed (%s); retrying in %.1fs", method, path, attempt,
                          fields["cause"], delay, extra={**fields, "delay": round(delay, 3)})
                await asyncio.sleep(delay)

    async def _attempt(self, policy: RequestPolicy, method: str, path: str, body: Any,
                       content_type: str | None, query: list[tuple[str, str]] | None) -> Any:
        """One attempt in a worker thread; abandoned (:class:`ConnectFailed`, which the policy sends again)
        when :meth:`reset_connections` says its connection may be dead and resending it is safe."""
        attempt = asyncio.ensure_future(asyncio.to_thread(
            self.request_once, method, path, body, content_type, query,
            read_timeout=policy.read_timeout, connect_timeout=policy.connect_timeout))
        if not policy.idempotent(method, content_type):
            return await attempt
        reset = asyncio.ensure_future(self._reset.wait())
        try:
            await asyncio.wait({attempt, reset}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            attempt.cancel()
            raise
        finally:
            reset.cancel()
        if attempt.done():
            return attempt.result()
        # the thread ends by its own timeout; its outcome is nobody's any more
        attempt.add_done_callback(lambda f: f.cancelled() or f.exception())
        raise ConnectFailed(0, "ServiceUnavailable", f"{method} {path}: connection from before an API outage "
                                                     "abandoned")

    def request_once(self, method: str, path: str, body: Any = None, content_type: str | None = None,
                     query: list[tuple[str, str]] | None = None, *, read_timeout: float = READ_TIMEOUT,
                     connect_timeout: float = CONNECT_TIMEOUT) -> Any:
        """One attempt, blocking (in a worker thread): the answer's JSON, or the typed :class:`ApiError`.
        :meth:`request` runs it under the policy; leader election calls it directly, its own loop being its
        retry cadence."""
        headers = {"Accept": "application/json"}
        if content_type:
            headers["Content-Type"] = content_type
        elif body is not None:
            headers["Content-Type"] = "application/json"  # the client 37 would send none
        started, code = time.monotonic(), "<error>"  # client-go's code label when there was no answer
        try:
            status, data = call_raw(self.api_client, method, path, query or [], headers, body,
                                    (connect_timeout, read_timeout))
            code = str(status)
        except ApiException as exc:
            code = str(exc.status or "<error>")
            raise error_from_api_exception(exc) from None
        except urllib3.exceptions.HTTPError as exc:  # no answer: refused, reset, timed out
            cls = ConnectFailed if _never_sent(exc) else ServerError
            raise cls(0, "ServiceUnavailable", f"{method} {path}: {no_answer_cause(exc)}") from None
        finally:
            for observe in self.observers:
                observe(method, code, self.host, time.monotonic() - started)
        return apijson.loads(data) if data else None

    # -- the calls the runner needs ----------------------------------------------------------------

    async def get(self, ref: ResourceRef, namespace: str | None, name: str) -> KubeObject | None:
        try:
            found: KubeObject = await self.request("GET", ref.path(namespace, name))
        except NotFound:
            return None
        return found

    async def merge_patch(self, ref: ResourceRef, namespace: str | None, name: str, patch: dict[str, Any],
                          *, subresource: str | None = None) -> KubeObject:
        path = ref.path(namespace, name, subresource)
        patched: KubeObject = await self.request("PATCH", path, body=patch,
                                                 content_type="application/merge-patch+json")
        return patched

    async def create_event(self, namespace: str, event: Event) -> Event:
        path = f"/api/v1/namespaces/{quote(namespace, safe='')}/events"
        created: Event = await self.request("POST", path, body=event)
        return created

    async def discover(self, group: str, version: str, kind: str) -> ResourceRef:
        """Find plural and scope of a kind from the discovery document."""
        path = f"/apis/{group}/{version}" if group else f"/api/{version}"
        doc = await self.request("GET", path)
        for resource in doc.get("resources", []):
            if resource.get("kind") == kind and "/" not in resource.get("name", ""):
                return ResourceRef(group, version, resource["name"], bool(resource.get("namespaced")))
        raise NotFound(404, "NotFound", f"kind {kind} not served at {path}")
