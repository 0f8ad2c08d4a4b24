"""The proxy's aiohttp application: routes, middleware, transparent forwarding, ops endpoints.

* ``GET /_neardup/health``: the proxy and each upstream node (``GET /_cluster/health``).
* ``GET /_neardup/metrics``: Prometheus text format (:mod:`proxy.metrics`).
* ``GET /_neardup/``: the search playground page, when enabled (:mod:`proxy.playground`).
* ``GET|POST [/<index>]/_search`` and ``/_msearch``: collapsed (:mod:`proxy.searching`).
* everything else: forwarded unchanged, bodies streamed both ways.

The middleware turns every failure into an Elasticsearch-style error body (never a traceback),
records metrics and writes one structured access-log line per request, without credentials
(no header values, no query values, only the path and the names of the query parameters).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web

from neardup import __version__
from neardup.config import Config
from neardup.proxy import access, errors, jsonio, playground, searching, source_check
from neardup.proxy import http as httpx
from neardup.proxy.collapse import Algorithms
from neardup.proxy.errors import error_response
from neardup.proxy.fingerprints import default_algorithms
from neardup.proxy.metrics import Metrics
from neardup.proxy.params import parse_controls, resolve, split_query, wants_pretty
from neardup.proxy.pushdown_search import FactsCache
from neardup.proxy.routes import classify, index_of
from neardup.proxy.searching import OUTCOME, ROUTE
from neardup.proxy.upstream import Upstream
from neardup.tfidf_config import tfidf_version_of

log = logging.getLogger("neardup.proxy")
access_log = logging.getLogger("neardup.proxy.access")


class QuietMalformedRequests(logging.Filter):
    """aiohttp answers a request that is not valid HTTP with 400 itself and logs it at ERROR with
    a stack trace and the offending bytes (which may be a credential header). A client's bad bytes
    are not the proxy's failure: this turns the record into one WARNING line naming the problem,
    without the bytes and without the trace."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, aiohttp.http_exceptions.HttpProcessingError):
            problem = errors.malformed_problem(exc)
            record.levelno, record.levelname = logging.WARNING, "WARNING"
            record.msg, record.args = "malformed HTTP request answered with %s: %s", (exc.code, problem)
            record.exc_info, record.exc_text = None, None
        return True


_QUIET = QuietMalformedRequests()

#: Request bodies up to this size are read at once (and can be retried on another node);
#: larger ones are streamed to the upstream as they arrive.
BUFFERED_BODY_BYTES = 1024 * 1024


@dataclass
class ProxyState:
    config: Config
    upstream: Upstream
    metrics: Metrics
    algorithms: Algorithms
    policy: access.Policy   # read-only mode and path allow-list, compiled once
    admitted: int = 0       # requests in flight that count against proxy.max_in_flight
    pushdown_facts: FactsCache = field(default_factory=FactsCache)  # cluster push-down checks, per worker


STATE: web.AppKey[ProxyState] = web.AppKey("neardup_state", ProxyState)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


_UPSTREAM_ERROR_KINDS = {
    "neardup_upstream_unreachable_exception": "unreachable",
    "neardup_upstream_timeout_exception": "timeout",
    "neardup_upstream_exception": "broken",
}


@web.middleware
async def observe(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Errors → Elasticsearch error bodies; metrics; one access-log line."""
    state = request.app[STATE]
    started = time.perf_counter()
    request[ROUTE] = "passthrough"
    request[OUTCOME] = None
    limit = state.config.proxy.max_in_flight
    counted = bool(limit) and not (request.raw_path.startswith("/_neardup/") and request.path in NEVER_SHED)
    if counted and state.admitted >= limit:
        response = _shed(request, state, limit)
    else:
        response = await _handle(request, handler, state, counted)
    account(request, response, time.perf_counter() - started)
    return response


def account(request: web.Request, response: web.StreamResponse, elapsed: float) -> None:
    """The metrics and the access-log line of one answered request."""
    state = request.app[STATE]
    route = request[ROUTE]
    state.metrics.inc("neardup_proxy_requests_total", route=route, status=str(response.status))
    state.metrics.observe(elapsed, route=route)
    if route in ("search", "msearch") and request[OUTCOME]:
        outcome, _, reason = str(request[OUTCOME]).partition(":")
        state.metrics.inc("neardup_proxy_searches_total", outcome=outcome, reason=reason)
    state.metrics.maybe_write_snapshot()
    if access_log.isEnabledFor(logging.INFO):
        _log_access(request, response, elapsed)


def _account_refused_expectation(request: web.Request, response: web.StreamResponse) -> None:
    """An ``Expect`` refused before the body (413, 417): aiohttp answers it before any
    middleware runs, so :func:`observe` never sees it; counted and logged here instead."""
    request[ROUTE] = "expect"
    request[OUTCOME] = "expectation_refused"
    account(request, response, 0.0)


#: Paths answered even when ``proxy.max_in_flight`` requests are in flight: an overloaded proxy
#: must still say so to its health checks and metrics scrapers.
NEVER_SHED = frozenset({"/_neardup/health", "/_neardup/metrics"})


def _shed(request: web.Request, state: ProxyState, limit: int) -> web.Response:
    """Overload: 429 at once, in Elasticsearch's own rejection format, nothing sent upstream."""
    request[ROUTE] = "rejected"
    request[OUTCOME] = "rejected"
    state.metrics.inc("neardup_proxy_rejected_total")
    return _error(request, errors.rejected(limit))


async def _handle(request: web.Request, handler: Handler, state: ProxyState,
                  counted: bool) -> web.StreamResponse:
    """Run the handler; every failure becomes an Elasticsearch error body."""
    state.metrics.in_flight += 1
    if counted:
        state.admitted += 1
    try:
        response = await handler(request)
    except errors.ProxyError as exc:
        kind = _UPSTREAM_ERROR_KINDS.get(exc.type)
        if kind:
            state.metrics.inc("neardup_proxy_upstream_errors_total", kind=kind)
        request[OUTCOME] = request[OUTCOME] or exc.type
        response = _error(request, exc)
    except aiohttp.http_exceptions.HttpProcessingError as exc:   # the body broke HTTP framing
        response = _error(request, errors.malformed_request(exc.code or 400, exc))
        response.force_close()   # the connection's bytes are out of step: nothing more on it
    except web.HTTPRequestEntityTooLarge:
        response = _error(request, errors.body_too_large(request.content_length,
                                                         state.config.proxy.max_body_bytes))
    except web.HTTPException as exc:  # aiohttp's own (e.g. a malformed request)
        response = _error(request, errors.ProxyError(exc.status, "neardup_http_exception", exc.reason))
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # noqa: BLE001 - a bug must not leak a traceback to the client
        log.exception("unhandled error on %s %s", request.method, request.path)
        response = _error(request, errors.internal(type(exc).__name__))
    finally:
        state.metrics.in_flight -= 1
        if counted:
            state.admitted -= 1
    return response


def _error(request: web.Request, error: errors.ProxyError) -> web.Response:
    """``error`` in Elasticsearch's format, pretty-printed when the request asked (``?pretty``)."""
    pretty = wants_pretty(split_query(request.raw_path.partition("?")[2]))
    return httpx.encoded_for(request, error_response(error, pretty=pretty))


def _body_bytes(response: web.StreamResponse) -> int:
    """The answer's body length: what a streamed answer wrote, else the body a whole answer
    carries (aiohttp counts a whole body only once it is written, after the log line)."""
    body = response.body if isinstance(response, web.Response) else None
    return response.body_length or (len(body) if isinstance(body, (bytes, bytearray)) else 0)


def _log_access(request: web.Request, response: web.StreamResponse, elapsed: float) -> None:
    raw_path, _, raw_query = request.raw_path.partition("?")
    fields = {
        "event": "access",
        "http.request.method": request.method,
        "url.path": raw_path,
        "url.query_params": sorted({name for name, _, _ in split_query(raw_query)}),
        "http.response.status_code": response.status,
        "http.response.body.bytes": _body_bytes(response),
        "event.duration_ms": round(elapsed * 1000, 3),
        "neardup.route": request[ROUTE],
        "neardup.outcome": request[OUTCOME],
        "client.address": request.remote,
    }
    access_log.info("%s %s %s %.1fms %s", request.method, raw_path, response.status,
                    elapsed * 1000, request[OUTCOME] or "", extra={"fields": fields})


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
    controls, query, _ = parse_controls(raw_query, request.headers)
    if route == "msearch":
        source_check.refuse_in_msearch(controls)   # neardup_source: _search only
    if route != "passthrough":
        if route == "search":
            settings = resolve(controls, state.config.collapse, index_of(raw_path), state.config.tfidf.threshold)
            settings = await source_check.settings_for(state, request, raw_path, settings, controls)
            if settings.enabled:
                return await searching.search(state, request, raw_path, query, settings)
        elif controls.enabled is not False:  # per-item settings: each search decides
            return await searching.msearch(state, request, raw_path, query, controls)
        request[OUTCOME] = "passed:off"
    return await forward(request, raw_path, query)


async def forward(request: web.Request, raw_path: str, query: str, body: bytes | None = None,
                  extra_headers: list[tuple[str, str]] | None = None) -> web.StreamResponse:
    """Send the request upstream unchanged (but for the proxy's controls) and stream the answer."""
    state = request.app[STATE]
    limit = state.config.proxy.max_body_bytes
    headers = httpx.request_headers(request.headers)
    data: Any = body
    if body is None and request.body_exists:
        declared = request.content_length
        errors.check_declared_length(declared, limit)
        if declared is None or declared <= BUFFERED_BODY_BYTES:
            data = await searching.read_body(request, limit)
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
    for name, value in httpx.response_headers(upstream.headers):
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


def create_app(config: Config, algorithms: Algorithms | None = None,
               metrics_dir: str | None = None) -> web.Application:
    """The application of one worker; the upstream session opens on start-up."""
    state = ProxyState(config=config, upstream=Upstream(config.upstream), metrics=Metrics(metrics_dir),
                       algorithms=algorithms or default_algorithms(config.fingerprint, tfidf_version_of(config)),
                       policy=access.policy(config.proxy.read_only, tuple(config.proxy.allowed_paths)))
    app = web.Application(middlewares=[observe], client_max_size=config.proxy.max_body_bytes)
    logging.getLogger("aiohttp.server").addFilter(_QUIET)   # once: the same filter object
    app[STATE] = state
    app[httpx.MAX_BODY_BYTES] = config.proxy.max_body_bytes
    app[httpx.EXPECT_REFUSED] = _account_refused_expectation
    ops_elsewhere = bool(config.proxy.ops_address)   # then create_ops_app serves them
    app.router.add_get("/_neardup/health", ops_moved if ops_elsewhere else health, allow_head=True, **httpx.EXPECT)
    app.router.add_get("/_neardup/metrics", ops_moved if ops_elsewhere else metrics, allow_head=True, **httpx.EXPECT)
    playground.register(app, config)
    app.router.add_route("*", "/{tail:.*}", proxy_request, **httpx.EXPECT)

    async def start(app: web.Application) -> None:
        await app[STATE].upstream.start()

    async def stop(app: web.Application) -> None:
        app[STATE].metrics.maybe_write_snapshot(force=True)
        await app[STATE].upstream.close()

    app.on_startup.append(start)
    app.on_cleanup.append(stop)
    return app


async def ops_moved(request: web.Request) -> web.Response:
    """The main port's answer for the ops endpoints when ``proxy.ops_address`` serves them."""
    request[ROUTE] = "ops_moved"
    raise errors.ProxyError(404, "resource_not_found_exception",
                            f"[{request.path}] is not served on this address (proxy.ops_address)")


def create_ops_app(main: web.Application) -> web.Application:
    """``/_neardup/health`` and ``/_neardup/metrics`` alone, for ``proxy.ops_address``; they share
    the main application's state (upstream session, metrics), so start the main one first."""
    ops = web.Application(middlewares=[observe])
    ops[STATE] = main[STATE]
    ops[httpx.EXPECT_REFUSED] = _account_refused_expectation
    ops.router.add_get("/_neardup/health", health, allow_head=True, **httpx.EXPECT)
    ops.router.add_get("/_neardup/metrics", metrics, allow_head=True, **httpx.EXPECT)
    playground.register_ops(ops, ops[STATE].config, proxy_request)
    return ops
