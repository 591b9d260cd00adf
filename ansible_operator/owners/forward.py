"""Forwarding a role's HTTP request to the real API server untouched, and its answer back.

Reads, deletes, patches, subresources, status codes and headers pass through as they are; watches and
followed logs (and any answer without a ``Content-Length``) stream chunk by chunk. The request goes with the
operator's own credentials (:class:`~ansible_operator.owners.upstream.Upstream`), never the role's token.
When the API server does not answer in time the role's client gets ``504``, when it cannot be reached
``502``.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from ansible_operator.owners.statuses import status_body
from ansible_operator.owners.upstream import (
    HOP_BY_HOP,
    READ_TIMEOUT,
    Upstream,
    request_timeout,
    stream_timeout,
)

if TYPE_CHECKING:  # pragma: no cover
    from aiohttp import ClientResponse, ClientSession, web

log = logging.getLogger("ansible_operator.owners")

__all__ = ["forward"]

_RESPONSE_DROP = {
    "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer", "trailers",
    "transfer-encoding", "upgrade", "content-length",
}


async def forward(session: "ClientSession", upstream: Upstream, request: "web.Request",
                  body: bytes) -> "web.StreamResponse":
    """``request`` (whose body was read: ``body``) sent upstream; its answer, buffered or streamed."""
    from aiohttp import ClientError

    headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP}
    auth = await upstream.auth_header()
    if auth:
        headers["Authorization"] = auth
    url = upstream.base + request.rel_url.raw_path_qs
    streams = (request.query.get("watch") in ("true", "1") or "/watch/" in request.path
               or request.query.get("follow") in ("true", "1"))
    try:
        answer = await session.request(
            request.method,
            url,
            data=body if body or request.method in ("POST", "PUT", "PATCH") else None,
            headers=headers,
            allow_redirects=False,
            server_hostname=upstream.server_hostname,
            timeout=(stream_timeout(request.query.get("timeoutSeconds")) if streams
                     else request_timeout()),
        )
    except (ClientError, OSError) as exc:  # TimeoutError included
        return _upstream_failed(exc, dropped=session.closed)
    streaming = streams or answer.headers.get("Content-Length") is None
    try:
        out_headers = {k: v for k, v in answer.headers.items() if k.lower() not in _RESPONSE_DROP}
        if not streaming:
            return await _buffered(answer, out_headers)
        return await _streamed(request, answer, out_headers)
    finally:
        if streaming:
            answer.close()  # never return a half-read watch connection to the pool
        else:
            answer.release()


async def _buffered(answer: "ClientResponse", headers: dict[str, str]) -> "web.Response":
    """An answer of known length, read whole."""
    from aiohttp import ClientError, web

    try:
        data = await answer.read()
    except (ClientError, OSError) as exc:
        return _upstream_failed(exc)
    return web.Response(status=answer.status, body=data, headers=headers)


async def _streamed(request: "web.Request", answer: "ClientResponse",
                    headers: dict[str, str]) -> "web.StreamResponse":
    """Watches and logs: pass each chunk on as soon as it arrives."""
    from aiohttp import ClientPayloadError, web

    response = web.StreamResponse(status=answer.status, headers=headers)
    await response.prepare(request)
    try:
        async for chunk in answer.content.iter_any():
            await response.write(chunk)
        await response.write_eof()
    except (ClientPayloadError, ConnectionError) as exc:
        log.debug("owner proxy: stream %s ended: %s", request.path, exc)
    return response


def _upstream_failed(exc: BaseException, *, dropped: bool = False) -> "web.Response":
    """What a role's client gets when the API server did not answer in time (504) or at all (502);
    ``dropped``: the proxy itself closed the connection (``OwnerProxy.drop_connections``, after an outage)."""
    from aiohttp import web

    timed_out = isinstance(exc, TimeoutError) or "timeout" in type(exc).__name__.lower()
    status, reason = (504, "Timeout") if timed_out and not dropped else (502, "BadGateway")
    what = f"no answer within {READ_TIMEOUT:g}s" if timed_out and not str(exc) else str(exc)
    if dropped:
        what = "the connection dated from before an API server outage and was dropped; send the request again"
    return web.Response(status=status, body=status_body(status, reason, f"owner proxy: upstream: {what}"),
                        content_type="application/json")
