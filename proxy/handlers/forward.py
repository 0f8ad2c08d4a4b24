"""Transparent forwarding: a request sent upstream unchanged, the answer streamed back.

Everything the proxy does not collapse goes this way, and so does a search it gives up on
(sent again as the client sent it). Small bodies are read whole (so the request can be retried
on another node); larger ones are streamed both ways as they arrive.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import aiohttp
from aiohttp import web

from neardup.proxy.handlers.context import OUTCOME, STATE, read_body
from neardup.proxy.transport import errors, framing

log = logging.getLogger("neardup.proxy")

#: Request bodies up to this size are read at once (and can be retried on another node);
#: larger ones are streamed to the upstream as they arrive.
BUFFERED_BODY_BYTES = 1024 * 1024


async def forward(request: web.Request, raw_path: str, query: str, body: bytes | None = None,
                  extra_headers: list[tuple[str, str]] | None = None) -> web.StreamResponse:
    """Send the request upstream unchanged (but for the proxy's controls) and stream the answer."""
    state = request.app[STATE]
    limit = state.config.proxy.max_body_bytes
    headers = framing.request_headers(request.headers)
    data: Any = body
    if body is None and request.body_exists:
        declared = request.content_length
        errors.check_declared_length(declared, limit)
        if declared is None or declared <= BUFFERED_BODY_BYTES:
            data = await read_body(request, limit)
        else:
            data = request.content
    path_qs = raw_path + ("?" + query if query else "")
    upstream = await state.upstream.send(request.method, path_qs, headers, data)
    return await stream_back(request, upstream, extra_headers or [])


async def stream_back(request: web.Request, upstream: aiohttp.ClientResponse,
                      extra_headers: list[tuple[str, str]]) -> web.StreamResponse:
    """Stream an upstream response to the client as it arrives, headers and bytes unchanged.

    If the upstream breaks off after the status line went out, the client connection is closed
    without finishing the body, so the client sees a broken response, never a short valid one.
    """
    response = web.StreamResponse(status=upstream.status, reason=upstream.reason)
    for name, value in framing.response_headers(upstream.headers):
        response.headers.add(name, value)
    for name, value in extra_headers:
        response.headers.add(name, value)
    length = upstream.headers.get("Content-Length")
    if length is not None and length.isdigit():
        response.content_length = int(length)
    try:
        if request.method != "HEAD" and response.content_length is not None \
                and response.content_length <= BUFFERED_BODY_BYTES:
            body = await upstream.read()   # small: one write instead of one per chunk
            await response.prepare(request)
            await response.write_eof(body)
            return response
        await response.prepare(request)
        if request.method != "HEAD":
            async for chunk in upstream.content.iter_any():
                await response.write(chunk)
        await response.write_eof()
    except (TimeoutError, aiohttp.ClientError) as exc:
        if not response.prepared:
            if isinstance(exc, asyncio.TimeoutError):  # aiohttp's read timeouts are TimeoutErrors
                raise errors.upstream_timeout(request.app[STATE].config.upstream.request_timeout) from None
            raise errors.upstream_broken(f"{type(exc).__name__}: {exc}") from None
        log.warning("upstream broke off a response: %s", type(exc).__name__,
                    extra={"fields": {"event": "upstream_broken", "url.path": request.path}})
        request.app[STATE].metrics.inc("neardup_proxy_upstream_errors_total", kind="broken")
        request[OUTCOME] = "upstream_broken"
        if request.transport is not None:
            request.transport.close()
    finally:
        upstream.release()
    return response
