"""Every request that is not an ops endpoint: checked, classified, then collapsed or forwarded.

The access policy (:mod:`neardup.proxy.transport.access`) may refuse it; the proxy's own controls
(:mod:`neardup.proxy.handlers.params`) are read and removed; a ``_search`` with collapsing on goes the
collapsed path (:mod:`neardup.proxy.handlers.collapsed_search`), an ``_msearch`` too unless collapsing
is switched off for the whole request, a write to an index of ``[enrich]`` gets its fingerprint
(:mod:`neardup.proxy.handlers.enriched_writes`), and anything else is forwarded unchanged
(:mod:`neardup.proxy.handlers.forward`).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping

from aiohttp import web

from neardup.proxy.handlers import collapsed_search, enriched_writes, source_check
from neardup.proxy.handlers.context import OUTCOME, ROUTE, STATE
from neardup.proxy.handlers.forward import forward
from neardup.proxy.handlers.params import (
    HEADER_MISSING,
    HEADER_MODE,
    HEADER_SOURCE,
    HEADER_SWITCH,
    HEADER_THRESHOLD,
    Controls,
    parse_controls,
    resolve,
)
from neardup.proxy.handlers.routes import classify, index_of
from neardup.proxy.handlers.write_routes import classify_write
from neardup.proxy.transport import errors


async def proxy_request(request: web.Request) -> web.StreamResponse:
    """Every request that is not an ops endpoint."""
    state = request.app[STATE]
    raw_path, _, raw_query = request.raw_path.partition("?")
    if not raw_path.startswith("/"):  # absolute-form target: the upstream is the configured one
        raise errors.illegal_argument("the request target must be a path starting with '/', "
                                      "not an absolute URI; the proxy forwards only to upstream.urls")
    refusal = state.policy.refusal(request.method, raw_path)
    if refusal is not None:
        raise refusal
    route = classify(request.method, raw_path)
    request[ROUTE] = route
    controls, query = controls_of(raw_query, request.headers)
    if route == "msearch":
        source_check.refuse_in_msearch(controls)   # neardup_source: _search only
    if route != "passthrough":
        if route == "search":
            if controls.enabled is not False or controls.source is not None:   # else off, as asked
                settings = resolve(controls, state.config.collapse, index_of(raw_path), state.config.tfidf.threshold)
                if controls.source is not None:   # else the settings stay as they are
                    settings = await source_check.settings_for(state, request, raw_path, settings, controls)
                if settings.enabled:
                    return await collapsed_search.search(state, request, raw_path, query, settings)
        elif controls.enabled is not False:  # per-item settings: each search decides
            return await collapsed_search.msearch(state, request, raw_path, query, controls)
        request[OUTCOME] = "passed:off"
    elif state.config.enrich.indices and (write := classify_write(request.method, raw_path)) is not None:
        return await enriched_writes.write(state, request, raw_path, query, write)
    return await forward(request, raw_path, query)


#: The control headers :func:`~neardup.proxy.handlers.params.parse_controls` reads.
_CONTROL_HEADERS = (HEADER_SWITCH, HEADER_THRESHOLD, HEADER_MODE, HEADER_SOURCE, HEADER_MISSING)


def controls_of(raw_query: str, headers: Mapping[str, str]) -> tuple[Controls, str]:
    """:func:`~neardup.proxy.handlers.params.parse_controls`' controls and query; without control
    headers they depend on the query string alone, and are remembered for the recent ones."""
    for name in _CONTROL_HEADERS:
        if name in headers:
            controls, query, _ = parse_controls(raw_query, headers)
            return controls, query
    return _query_controls(raw_query)


@functools.lru_cache(maxsize=256)
def _query_controls(raw_query: str) -> tuple[Controls, str]:
    controls, query, _ = parse_controls(raw_query, {})
    return controls, query
