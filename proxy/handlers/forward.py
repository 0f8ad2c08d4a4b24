"""Transparent forwarding: a request sent upstream unchanged, the answer sent back unchanged.

Everything the proxy does not collapse goes this way, and so does a search it gives up on
(sent again as the client sent it). Small bodies are read whole (so the request can be retried
on another node) and go over the lean upstream connections
(:meth:`~neardup.proxy.transport.upstream.Upstream.exchange`); larger ones are streamed both
ways as they arrive. An answer up to :data:`BUFFERED_BODY_BYTES` is read whole and sent with
its ``Content-Length`` (one write; the upstream's ``Transfer-Encoding`` is hop-by-hop, the body
bytes are the same, compressed or not); a longer one is streamed on as it arrives.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import aiohttp
from aiohttp import web
from multidict import CIMultiDict

from neardup.proxy.handlers.context import OUTCOME, STATE, read_body
from neardup.proxy.transport import errors, framing, http1_client

log = logging.getLogger("neardup.proxy")

#: Request bodies up to this size are read at once (and can be retried on another node);
#: larger ones are streamed to the upstream as they arrive. Answers up to this size are read
#: whole before they are sent on; larger ones are streamed.
BUFFERED_BODY_BYTES = 1024 * 1024
#: Answers that never have a body, whatever their headers say (RFC 9110 §6.4.1).
_NO_BODY_STATUS = (204, 304)


async def forward(request: web.Request, raw_path: str, query: str, body: bytes | None = None,
                  extra_headers: list[tuple[str, str]] | None = None) -> web.StreamResponse:
    """Send the request upstream unchanged (but for the proxy's controls) and send the answer back."""
    state = request.app[STATE]
    limit = state.config.proxy.max_body_bytes
    data: Any = body
    if body is None and request.body_exists:
        declared = request.content_length
        errors.check_declared_length(declared, limit)
        if declared is None or declared <= BUFFERED_BODY_BYTES:
            data = await read_body(request, limit)
        else:
            data = request.content
    path_qs = raw_path + ("?" + query if query else "")
    if (data is None or isinstance(data, bytes)) and http1_client.plain_request_line(request.method, path_qs):
        # the lean client writes the Content-Length of the body it sends (the client's, unless
        # the body came chunked); a request without a body keeps the client's headers as sent
        headers = framing.request_headers(request.headers, drop=("content-length",) if data is not None else ())
        reply = await state.upstream.exchange(request.method, path_qs, headers, data,
                                              stream_over=BUFFERED_BODY_BYTES)
        return await send_back(request, reply, extra_headers or [])
    upstream = await state.upstream.send(request.method, path_qs, framing.request_headers(request.headers), data)
    return await stream_back(request, upstream, extra_headers or [])


async def send_back(request: web.Request, reply: http1_client.Reply,
                    extra_headers: list[tuple[str, str]]) -> web.StreamResponse:
    """An upstream answer to the client, status, headers and bytes unchanged: in one write with
    its ``Content-Length`` when it came whole, else its start and then :attr:`reply.rest
    <neardup.proxy.transport.http1_client.Reply.rest>` as it arrives.

    If the upstream breaks off a streamed answer, the client connection is closed without
    finishing the body, so the client sees a broken response, never a short valid one.
    """
    headers = framing.response_headers(reply.headers)
    headers += extra_headers
    if reply.rest is None and request.method != "HEAD" and reply.status not in _NO_BODY_STATUS:
        # whole: a Response writes head and body at once, with the body's own Content-Length
        whole = CIMultiDict(headers)
        if "Content-Length" in whole:   # in its place; else the Response appends it
            whole["Content-Length"] = str(len(reply.body))
        return web.Response(body=reply.body, status=reply.status, reason=reply.reason, headers=whole)
    response = web.StreamResponse(status=reply.status, reason=reply.reason)
    for name, value in headers:
        response.headers.add(name, value)
    # HEAD, 204, 304, or a streamed answer: the upstream's own length, if it gave one
    length = reply.headers.get("Content-Length")
    if length is not None and length.isdigit():
        response.content_length = int(length)
    rest = reply.rest
    if rest is None:
        await response.prepare(request)
        await response.write_eof(reply.body)
        return response
    try:
        await response.prepare(request)
        await response.write(reply.body)
        async for data in rest:
            await response.write(data)
        await response.write_eof()
    except (http1_client.Broken, http1_client.ReadTimeout) as exc:
        _broke_off(request, exc)
    finally:
        rest.close()
    return response


async def stream_back(request: web.Request, upstream: aiohttp.ClientResponse,
                      extra_headers: list[tuple[str, str]]) -> web.StreamResponse:
    """Stream an upstream response to the client as it arrives, headers and bytes unchanged
    (the answer to a request whose body was streamed upstream).

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
        _broke_off(request, exc)
    finally:
        upstream.release()
    return response


def _broke_off(request: web.Request, exc: BaseException) -> None:
    """The upstream failed after the answer's status line went out: logged, counted, and the
    client connection closed so that the short body cannot pass for a whole one."""
    log.warning("upstream broke off a response: %s", type(exc).__name__,
                extra={"fields": {"event": "upstream_broken", "url.path": request.path}})
    request.app[STATE].metrics.inc("neardup_proxy_upstream_errors_total", kind="broken")
    request[OUTCOME] = "upstream_broken"
    if request.transport is not None:
        request.transport.close()
