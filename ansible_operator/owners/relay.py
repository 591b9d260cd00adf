"""exec/attach/port-forward through the owner proxy (kubernetes.core.k8s_exec): the WebSocket upgrade is
made upstream with the operator's own credentials and the frames are relayed both ways."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from ansible_operator.owners.statuses import status_body, status_reason
from ansible_operator.owners.upstream import HOP_BY_HOP, Upstream

if TYPE_CHECKING:  # pragma: no cover
    from aiohttp import ClientSession, ClientWebSocketResponse, web

__all__ = ["relay_websocket"]

_WEBSOCKET_DROP = HOP_BY_HOP | {
    "sec-websocket-key", "sec-websocket-version", "sec-websocket-extensions", "sec-websocket-protocol",
}


async def relay_websocket(session: "ClientSession", upstream: Upstream,
                          request: "web.Request") -> "web.StreamResponse":
    """Upgrade ``request`` upstream too and relay WebSocket frames both ways until either side ends."""
    from aiohttp import web

    connected = await _connect(session, upstream, request)
    if isinstance(connected, web.Response):
        return connected
    downstream = web.WebSocketResponse(protocols=(connected.protocol,) if connected.protocol else (),
                                       max_msg_size=0)
    await downstream.prepare(request)
    tasks = [
        asyncio.ensure_future(_pump(connected, downstream)),
        asyncio.ensure_future(_pump(downstream, connected)),
    ]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await connected.close()
        await downstream.close()
    return downstream


async def _connect(session: "ClientSession", upstream: Upstream,
                   request: "web.Request") -> "ClientWebSocketResponse | web.Response":
    """The upstream WebSocket, or the error answer for the role's client when the upgrade failed."""
    from aiohttp import ClientError, WSServerHandshakeError, web

    protocols = tuple(p.strip() for p in request.headers.get("Sec-WebSocket-Protocol", "").split(",")
                      if p.strip())
    headers = {k: v for k, v in request.headers.items() if k.lower() not in _WEBSOCKET_DROP}
    auth = await upstream.auth_header()
    if auth:
        headers["Authorization"] = auth
    url = upstream.base + request.rel_url.raw_path_qs
    try:
        return await session.ws_connect(url, protocols=protocols, headers=headers,
                                        server_hostname=upstream.server_hostname,
                                        autoping=True, max_msg_size=0)
    except WSServerHandshakeError as exc:
        # aiohttp does not keep the refusal's body; keep at least its status and say what was refused
        # (a 403 stays Forbidden, not "Invalid response status (400 BadGateway)").
        code = exc.status if exc.status and exc.status >= 400 else 502
        return web.Response(
            status=code,
            body=status_body(code, status_reason(code), "owner proxy: the API server refused the WebSocket "
                             f"upgrade of {request.method} {request.rel_url.path}: HTTP {exc.status}"),
            content_type="application/json",
        )
    except (ClientError, OSError) as exc:
        return web.Response(
            status=502,
            body=status_body(502, "BadGateway", f"owner proxy: upstream: {exc}"),
            content_type="application/json",
        )


async def _pump(src: Any, dst: Any) -> None:
    """Binary and text frames from ``src`` to ``dst`` until ``src`` closes (or sends anything else)."""
    from aiohttp import WSMsgType

    async for msg in src:
        if msg.type == WSMsgType.BINARY:
            await dst.send_bytes(msg.data)
        elif msg.type == WSMsgType.TEXT:
            await dst.send_str(msg.data)
        else:
            break
    await dst.close()
