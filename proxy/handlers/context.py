"""What every request handler shares: the worker's state, the per-request notes, the client's request.

:class:`ProxyState` is one worker's state, stored on the application under :data:`STATE`.
:data:`ROUTE` and :data:`OUTCOME` are the per-request notes the middleware turns into metrics
and the access log. :class:`Incoming` is a client's search request with its body read;
:class:`Item` is one search of an ``_msearch`` body and its progress through the rounds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from neardup.config import Config
from neardup.proxy.grouping.collapse import Algorithms
from neardup.proxy.grouping.query_fingerprints import QueryFingerprints
from neardup.proxy.handlers.cluster_facts import RESULT_WINDOW_SECONDS, Facts, FactsCache
from neardup.proxy.handlers.metrics import Metrics
from neardup.proxy.handlers.search_plan import Plan, Window
from neardup.proxy.transport import errors, framing
from neardup.proxy.transport.access import Policy
from neardup.proxy.transport.upstream import Upstream


@dataclass
class ProxyState:
    config: Config
    upstream: Upstream
    metrics: Metrics
    algorithms: Algorithms
    policy: Policy          # read-only mode and path allow-list, compiled once
    admitted: int = 0       # requests in flight that count against proxy.max_in_flight
    pushdown_facts: FactsCache[Facts | None] = field(default_factory=FactsCache)  # cluster push-down checks
    result_windows: FactsCache[int | None] = field(default_factory=lambda: FactsCache(RESULT_WINDOW_SECONDS))
    query_fingerprints: QueryFingerprints | None = None   # made at first use (handlers.missing_fingerprints)


STATE: web.AppKey[ProxyState] = web.AppKey("neardup_state", ProxyState)

#: Per-request notes for metrics and the access log: the route, and what happened to a search
#: ("collapsed", "passed:<reason>", "fail_open", ...).
ROUTE: web.RequestKey[str] = web.RequestKey("neardup_route", str)
OUTCOME: web.RequestKey[str | None] = web.RequestKey("neardup_outcome", object)  # type: ignore[arg-type]


@dataclass
class Incoming:
    """The client's request as the search path needs it."""

    request: web.Request
    raw_path: str
    query: str          # without the neardup controls
    raw_body: bytes     # exactly as received (maybe gzip)
    body: bytes         # decoded

    @property
    def path_qs(self) -> str:
        return self.raw_path + ("?" + self.query if self.query else "")


@dataclass
class Item:
    """One search of an ``_msearch`` body: its lines, its plan, and what is sent for it next."""

    header: bytes
    body: bytes
    plan: Plan | None
    window: Window | None = None
    result: Any = None
    pending: tuple[int, int] | None = None   # next (offset, count) for a planned item
    original: bool = False                   # send the original body next (fallback)
    pushdown: bool = False                   # send it as native collapse on cluster ids next
    probe: bool = False                      # send the plan's probe_request next (the client's window)
    groups: list[list[int]] = field(default_factory=list)
    fingerprinted: int = 0
    index: str = ""                          # the header's index, else the path's (push-down looks it up)
    header_names: tuple[str, ...] = ()       # the header's keys (push-down checks them as parameters)


async def read_body(request: web.Request, limit: int) -> bytes:
    """The whole request body as received; 413 when it exceeds ``limit`` bytes."""
    errors.check_declared_length(request.content_length, limit)
    content = request.content
    if content.is_eof() and content.exception() is None:   # the whole body came with the head
        whole = content.read_nowait()
        if len(whole) > limit:
            raise errors.body_too_large(None, limit)
        return whole
    data = bytearray()
    try:
        async for chunk in content.iter_any():
            data += chunk
            if len(data) > limit:
                raise errors.body_too_large(None, limit)
    except ConnectionResetError:
        # aiohttp's word for "the client closed before the body's end": the client's doing,
        # not a proxy failure to log with a traceback and count as a 500.
        raise errors.client_closed() from None
    return bytes(data)


async def receive(request: web.Request, raw_path: str, query: str, limit: int) -> Incoming:
    """The client's request with its body read and decoded (``Content-Encoding``)."""
    raw = await read_body(request, limit)
    body = framing.decode_body(raw, request.headers.get("Content-Encoding"), limit)
    return Incoming(request, raw_path, query, raw, body)
