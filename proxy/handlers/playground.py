"""The search playground: a static page at ``/_neardup/`` to judge a threshold by eye.

Off unless ``proxy.playground = true``. The page (``proxy/handlers/static/playground.{html,css,js}``,
plain files, no build step, nothing loaded from elsewhere) runs its searches through the proxy
itself, from the browser, with the browser's own credentials, like any other client:

* ``GET /_cat/indices``, ``GET /_alias`` and ``GET /_mapping/field/neardup.v`` for the index picker;
* ``POST /<index>/_search?neardup=on&neardup_threshold=T&neardup_mode=M`` for the groups, and the
  same search with ``neardup=off`` for the page without collapsing.

The proxy serves:

=====================================  ============================================================
``GET /_neardup/``                     the page (``/_neardup`` redirects there)
``GET /_neardup/playground/<file>``    its script and style sheet
``GET /_neardup/playground/settings``  ``?index=NAME``: the configured collapse settings in force for
                                       that index, the modes the proxy accepts, the text fields
=====================================  ============================================================

When the playground is off, all of these answer 404 with an Elasticsearch-style error body.

It is bound like the other ``/_neardup`` endpoints: on the main address, or, when
``proxy.ops_address`` is set, on that address instead (404 on the main one), where the ops
application then also forwards the few read-only requests the page makes (:data:`PAGE_REQUESTS`),
through the same request path as the main address (controls, collapsing, access policy).

The page and its files are sent with a Content-Security-Policy that allows only the proxy's own
script and style sheet (no inline script, no other origin), so even a rendering bug could not run
a document's text as code; the page itself only ever writes document text with ``textContent``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from importlib import resources
from typing import Any

from aiohttp import web

from neardup.config import Config, collapse_settings_for, matching_override
from neardup.proxy.handlers.context import ROUTE
from neardup.proxy.handlers.params import MODES
from neardup.proxy.transport import errors, framing, jsonio

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

PAGE_PATH = "/_neardup/"
ASSET_PREFIX = "/_neardup/playground/"
#: The files of the page, by the name they are served under: (file in proxy/handlers/static, content type).
ASSETS = {
    "playground.js": ("playground.js", "text/javascript; charset=utf-8"),
    "playground.css": ("playground.css", "text/css; charset=utf-8"),
}
PAGE_FILE = "playground.html"
#: Everything the page needs comes from the proxy itself; nothing inline, nothing else.
CONTENT_SECURITY_POLICY = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
                           "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-cache",
}
DISABLED_REASON = "the playground is disabled; set proxy.playground = true to serve it"
MOVED_REASON = "the playground is served on proxy.ops_address, not on this address"
#: The requests the page sends, forwarded by the ops address when the playground is served there.
PAGE_REQUESTS = (("GET", "/_cat/indices"), ("GET", "/_mapping/field/{field}"), ("GET", "/_alias"),
                 ("POST", "/{index}/_search"))


def _static(name: str) -> bytes:
    return (resources.files("neardup.proxy.handlers") / "static" / name).read_bytes()


def settings_for(config: Config, index: str) -> dict[str, Any]:
    """What the page starts from for ``index``: the collapse settings the proxy would use for it
    without request controls, where they come from, the accepted modes and the text fields."""
    collapse = config.collapse
    first = index.split(",", 1)[0].strip()
    enabled, threshold, mode = collapse_settings_for(collapse, first)
    return {
        "index": index,
        "collapse": {"enabled": enabled, "threshold": threshold, "mode": mode,
                     "override": matching_override(collapse, first)},
        "defaults": {"enabled": collapse.enabled, "threshold": collapse.threshold,
                     "mode": collapse.mode, "max_window": collapse.max_window},
        "modes": list(MODES),
        "fields": list(config.indexer.fields),
    }


def _not_found(app: web.Application, reason: str) -> None:
    async def not_found(request: web.Request) -> web.Response:
        request[ROUTE] = "playground"
        raise errors.ProxyError(404, "resource_not_found_exception", reason)

    app.router.add_get("/_neardup", not_found, allow_head=True, expect_handler=framing.expect_continue)
    app.router.add_get(PAGE_PATH, not_found, allow_head=True, expect_handler=framing.expect_continue)
    app.router.add_get(ASSET_PREFIX + "{name:.*}", not_found, allow_head=True, expect_handler=framing.expect_continue)


def register(app: web.Application, config: Config) -> None:
    """Add the playground's routes to the proxy's main application (before its catch-all)."""
    if not config.proxy.playground:
        _not_found(app, DISABLED_REASON)
    elif config.proxy.ops_address:
        _not_found(app, MOVED_REASON)
    else:
        _serve(app, config)


def register_ops(ops: web.Application, config: Config, forward: Handler) -> None:
    """Add the playground to the ops application of ``proxy.ops_address``, with ``forward``
    (the main application's request handler) for the requests the page makes."""
    if not config.proxy.playground:
        return
    _serve(ops, config)
    for method, path in PAGE_REQUESTS:
        ops.router.add_route(method, path, forward, expect_handler=framing.expect_continue)


def _serve(app: web.Application, config: Config) -> None:
    page = _static(PAGE_FILE)
    assets = {name: (_static(file), content_type) for name, (file, content_type) in ASSETS.items()}

    async def redirect(request: web.Request) -> web.Response:
        request[ROUTE] = "playground"
        # Returned, not raised: the proxy's middleware turns raised HTTP exceptions into errors.
        return web.Response(status=308, headers={"Location": PAGE_PATH})

    async def serve_page(request: web.Request) -> web.Response:
        request[ROUTE] = "playground"
        return web.Response(body=page, content_type="text/html", charset="utf-8", headers=SECURITY_HEADERS)

    async def serve_asset(request: web.Request) -> web.Response:
        request[ROUTE] = "playground"
        name = request.match_info["name"]
        if name == "settings":
            settings = settings_for(config, request.query.get("index", ""))
            return web.Response(body=jsonio.dumps(settings), content_type="application/json",
                                headers=SECURITY_HEADERS)
        if name not in assets:
            raise errors.ProxyError(404, "resource_not_found_exception",
                                    f"no such playground file [{name}]")
        body, content_type = assets[name]
        return web.Response(body=body, headers={**SECURITY_HEADERS, "Content-Type": content_type})

    app.router.add_get("/_neardup", redirect, allow_head=True, expect_handler=framing.expect_continue)
    app.router.add_get(PAGE_PATH, serve_page, allow_head=True, expect_handler=framing.expect_continue)
    app.router.add_get(ASSET_PREFIX + "{name:.*}", serve_asset, allow_head=True, expect_handler=framing.expect_continue)
