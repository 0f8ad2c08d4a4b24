"""The search paths' exchanges with the upstream and their answers to the client.

Shared by the window path (:mod:`neardup.proxy.handlers.collapsed_search`), the push-down path
(:mod:`neardup.proxy.handlers.pushdown`) and the source check (:mod:`neardup.proxy.handlers.source_check`):
the headers of a rewritten request, one whole-body round trip, the collapsed answer, the
pass-through of a request the proxy does not collapse, and *failing open*: when anything in an
upstream answer is unexpected, the client's original request is sent again and that answer is
streamed back unchanged (logged, counted in ``neardup_proxy_fail_open_total``).
"""

from __future__ import annotations

import logging
from typing import Any

from aiohttp import web

from neardup.proxy.handlers.context import OUTCOME, Incoming, ProxyState
from neardup.proxy.handlers.forward import forward
from neardup.proxy.transport import framing, jsonio
from neardup.proxy.transport.engine import ENGINE

log = logging.getLogger("neardup.proxy")


class FailOpen(Exception):
    """Collapsing this response is impossible; answer with the upstream's answer to the original."""


def upstream_headers(request: web.Request, content_type: str) -> list[tuple[str, str]]:
    """The client's headers for a request body the proxy wrote itself, of ``content_type``."""
    headers = framing.request_headers(
        request.headers, drop=("content-length", "content-encoding", "accept-encoding", "content-type"))
    headers.append(("Content-Type", content_type))
    return headers


def json_headers(request: web.Request) -> list[tuple[str, str]]:
    """:func:`upstream_headers` for a JSON search body: the client's JSON ``Content-Type``, else
    one matching its ``Accept`` (Elasticsearch wants the same ``compatible-with`` on both;
    OpenSearch reads none)."""
    content_type = request.headers.get("Content-Type")
    if content_type is None or not framing.is_json(content_type):
        content_type = framing.json_content_type_for(request.headers.get("Accept"),
                                                     request.app[ENGINE].reads_compatible_with)
    return upstream_headers(request, content_type)


async def fetch(state: ProxyState, incoming: Incoming, path_qs: str,
                headers: list[tuple[str, str]], body: bytes) -> tuple[int, Any, bytes]:
    """(status, upstream headers, decoded body) of one upstream round."""
    reply = await state.upstream.exchange(incoming.request.method, path_qs, headers, body)
    try:
        raw = framing.gunzip_response(reply.body, reply.headers.get("Content-Encoding"))
    except (OSError, EOFError, ValueError) as exc:
        raise FailOpen(f"undecodable upstream body: {exc}") from None
    if not framing.is_json(reply.headers.get("Content-Type")):
        raise FailOpen(f"upstream answered {reply.content_type or 'no Content-Type'}, not JSON")
    return reply.status, reply.headers, raw


def respond(incoming: Incoming, status: int, headers: Any, value: Any, pretty: bool) -> web.Response:
    """``value`` as JSON with the upstream's ``headers``, gzipped if the client accepts it."""
    return upstream_response(incoming, status, headers, jsonio.dumps(value, pretty=pretty))


def upstream_response(incoming: Incoming, status: int, headers: Any, body: bytes) -> web.Response:
    """``body`` (decoded JSON) with the upstream's headers, gzipped if the client accepts it."""
    response = web.Response(status=status, body=body)
    for name, value in framing.response_headers(headers, drop=("content-length", "content-encoding")):
        response.headers.add(name, value)
    return framing.encoded_for(incoming.request, response)


def record(state: ProxyState, incoming: Incoming, collapsed: int) -> None:
    """Note a collapsed answer: the outcome, and the hits folded away."""
    incoming.request[OUTCOME] = "collapsed"
    state.metrics.inc("neardup_proxy_hits_collapsed_total", collapsed)


async def pass_through(incoming: Incoming, reason: str | None) -> web.StreamResponse:
    """The client's request forwarded as it came; ``reason`` (why it is not collapsed) goes
    into the outcome and the ``X-Neardup-Skipped`` header."""
    incoming.request[OUTCOME] = f"passed:{reason}" if reason else "passed"
    extra = [("X-Neardup-Skipped", reason)] if reason else []
    return await forward(incoming.request, incoming.raw_path, incoming.query,
                         body=incoming.raw_body, extra_headers=extra)


async def fail_open(state: ProxyState, incoming: Incoming, exc: BaseException) -> web.StreamResponse:
    """Collapsing failed on ``exc``: logged and counted, the upstream's answer to the original."""
    log.warning("collapse failed, answering uncollapsed: %s: %s", type(exc).__name__, exc,
                extra={"fields": {"event": "fail_open", "path": incoming.raw_path,
                                  "error.type": type(exc).__name__, "error.message": str(exc)}})
    state.metrics.inc("neardup_proxy_fail_open_total")
    response = await pass_through(incoming, "fail_open")
    incoming.request[OUTCOME] = "fail_open"
    return response
