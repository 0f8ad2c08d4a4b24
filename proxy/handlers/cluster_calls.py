"""The proxy's own questions to the cluster about an index expression (I/O).

The cluster facts a search path depends on (the push-down's mappings and counts,
:mod:`neardup.proxy.handlers.pushdown`; the result window, :mod:`neardup.proxy.handlers.result_window`)
are asked with the client's own credentials, since they describe what that client may search, and
remembered per :func:`identity` of the client.
"""

from __future__ import annotations

import hashlib
from typing import Any

from aiohttp import web

from neardup.proxy.transport import framing, jsonio
from neardup.proxy.transport.upstream import Upstream

#: Headers of the client's that identify who asks (the facts are remembered per identity).
_IDENTITY_HEADERS = ("authorization", "es-security-runas-user")
_DROPPED_HEADERS = ("content-length", "content-encoding", "accept-encoding", "content-type", "accept")


def identity(request: web.Request) -> str:
    """A short digest of the client's credentials ("" without any): part of a cache key."""
    headers = request.headers
    if not any(name in headers for name in _IDENTITY_HEADERS):
        return ""
    values = "\n".join(f"{name}={value}" for name in _IDENTITY_HEADERS
                       for value in headers.getall(name, []))
    return hashlib.sha256(values.encode()).hexdigest()[:16]


def check_headers(request: web.Request) -> list[tuple[str, str]]:
    """The client's headers (its credentials) for a plain JSON request of the proxy's own."""
    headers = framing.request_headers(request.headers, drop=_DROPPED_HEADERS)
    return headers + [("Content-Type", "application/json"), ("Accept", "application/json")]


async def call_json(upstream: Upstream, method: str, path_qs: str, headers: list[tuple[str, str]],
                    body: bytes | None) -> Any:
    """The parsed JSON answer of one upstream call, or None when it is not a 200."""
    reply = await upstream.exchange(method, path_qs, headers, body)
    if reply.status != 200:
        return None
    return jsonio.loads(framing.gunzip_response(reply.body, reply.headers.get("Content-Encoding")))
