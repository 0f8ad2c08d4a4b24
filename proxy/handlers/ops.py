"""The proxy's own endpoints: ``/_neardup/health`` and ``/_neardup/metrics``.

The health answer is 200 while at least one upstream node answers ``GET /_cluster/health``, else
503; it names each node's reachability, HTTP status and cluster status. The metrics answer is the
Prometheus text exposition of every worker's counters (:mod:`neardup.proxy.handlers.metrics`).
"""

from __future__ import annotations

import os

import aiohttp
from aiohttp import web

from neardup import __version__
from neardup.proxy.handlers.context import ROUTE, STATE
from neardup.proxy.transport import errors, jsonio


async def health(request: web.Request) -> web.Response:
    """The proxy is up; each upstream node: reachable, HTTP status, cluster status."""
    state = request.app[STATE]
    request[ROUTE] = "health"
    config = state.config.upstream
    headers: dict[str, str] = {}
    if config.api_key:
        headers["Authorization"] = f"ApiKey {config.api_key}"
    elif config.username:
        headers["Authorization"] = aiohttp.BasicAuth(config.username, config.password).encode()
    elif "Authorization" in request.headers:
        headers["Authorization"] = request.headers["Authorization"]
    nodes = await state.upstream.health(headers)
    reachable = any(node["reachable"] for node in nodes)
    body = {
        "status": "ok" if reachable else "upstream_unreachable",
        "proxy": {"version": __version__, "pid": os.getpid(),
                  "in_flight_requests": state.metrics.in_flight},
        "upstream": nodes,
    }
    return web.Response(status=200 if reachable else 503, body=jsonio.dumps(body),
                        content_type="application/json")


async def metrics(request: web.Request) -> web.Response:
    state = request.app[STATE]
    request[ROUTE] = "metrics"
    text = state.metrics.combined().render()
    return web.Response(text=text, content_type="text/plain", charset="utf-8",
                        headers={"X-Content-Type-Options": "nosniff"})



async def ops_moved(request: web.Request) -> web.Response:
    """The main port's answer for the ops endpoints when ``proxy.ops_address`` serves them."""
    request[ROUTE] = "ops_moved"
    raise errors.ProxyError(404, "resource_not_found_exception",
                            f"[{request.path}] is not served on this address (proxy.ops_address)")
