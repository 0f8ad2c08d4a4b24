"""The proxy's aiohttp application: the route table, the middleware, start-up and shutdown.

* ``GET /_neardup/health`` and ``/_neardup/metrics``: :mod:`neardup.proxy.handlers.ops`, on the main
  address or on ``proxy.ops_address``;
* ``GET /_neardup/``: the search playground page, when enabled (:mod:`neardup.proxy.handlers.playground`);
* every other request: :func:`neardup.proxy.handlers.dispatch.proxy_request` (collapsed searches,
  everything else forwarded unchanged).

The middleware turns every failure into an error body of the upstream's engine (never a
traceback; :mod:`neardup.proxy.transport.engine`, learned on start-up or the first request),
sheds load beyond ``proxy.max_in_flight``, records metrics and writes one structured access-log
line per request, without credentials (no header values, no query values, only the path and the
names of the query parameters). A request only the catch-all route can take skips aiohttp's
router and middleware chain (:class:`AppHandler`): the same handler and middleware, called
directly.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Awaitable, Callable
from typing import cast

import aiohttp
from aiohttp import web
from aiohttp.web_urldispatcher import AbstractRoute, UrlMappingMatchInfo

from neardup.config import Config
from neardup.logs import direct_handler, format_direct, write_direct
from neardup.proxy.grouping.collapse import Algorithms
from neardup.proxy.grouping.fingerprints import default_algorithms
from neardup.proxy.handlers import missing_fingerprints, playground
from neardup.proxy.handlers.context import OUTCOME, ROUTE, STATE, ProxyState
from neardup.proxy.handlers.dispatch import proxy_request
from neardup.proxy.handlers.metrics import Metrics
from neardup.proxy.handlers.ops import health, metrics, ops_moved
from neardup.proxy.handlers.params import split_query, wants_pretty
from neardup.proxy.transport import access, errors, framing
from neardup.proxy.transport.engine import ENGINE
from neardup.proxy.transport.errors import error_response
from neardup.proxy.transport.upstream import Upstream
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

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


_UPSTREAM_ERROR_KINDS = {
    "neardup_upstream_unreachable_exception": "unreachable",
    "neardup_upstream_timeout_exception": "timeout",
    "neardup_upstream_exception": "broken",
}


@web.middleware
async def observe(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Errors → the engine's error bodies; metrics; one access-log line."""
    state = request.app[STATE]
    started = time.perf_counter()
    if not state.upstream.engine.known and not request.raw_path.startswith("/_neardup/"):
        await state.upstream.learn_engine()
    request[ROUTE] = "passthrough"
    request[OUTCOME] = None
    limit = state.config.proxy.max_in_flight
    counted = bool(limit) and not (request.raw_path.startswith("/_neardup/") and request.path in NEVER_SHED)
    response: web.StreamResponse
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
    state.metrics.answered(route, response.status, elapsed)
    if route in ("search", "msearch") and request[OUTCOME]:
        state.metrics.searched(str(request[OUTCOME]))
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
    """Overload: 429 at once, in the engine's own rejection format, nothing sent upstream."""
    request[ROUTE] = "rejected"
    request[OUTCOME] = "rejected"
    state.metrics.inc("neardup_proxy_rejected_total")
    return _error(request, errors.rejected(limit, state.upstream.engine))


async def _handle(request: web.Request, handler: Handler, state: ProxyState,
                  counted: bool) -> web.StreamResponse:
    """Run the handler; every failure becomes an error body of the engine."""
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
    """``error`` in the engine's format, pretty-printed when the request asked (``?pretty``)."""
    pretty = wants_pretty(split_query(request.raw_path.partition("?")[2]))
    return framing.encoded_for(request, error_response(error, pretty=pretty, engine=request.app[ENGINE]))


def _body_bytes(response: web.StreamResponse) -> int:
    """The answer's body length: what a streamed answer wrote, else the body a whole answer
    carries (aiohttp counts a whole body only once it is written, after the log line)."""
    body = response.body if isinstance(response, web.Response) else None
    return response.body_length or (len(body) if isinstance(body, (bytes, bytearray)) else 0)


def _log_access(request: web.Request, response: web.StreamResponse, elapsed: float) -> None:
    raw_path, _, raw_query = request.raw_path.partition("?")

    def fields() -> dict[str, object]:
        return {
            "event": "access",
            "http.request.method": request.method,
            "url.path": raw_path,
            "url.query_params": list(_parameter_names(raw_query)),
            "http.response.status_code": response.status,
            "http.response.body.bytes": _body_bytes(response),
            "event.duration_ms": round(elapsed * 1000, 3),
            "neardup.route": request[ROUTE],
            "neardup.outcome": request[OUTCOME],
            "client.address": request.remote,
        }

    message = f"{request.method} {raw_path} {response.status} {elapsed * 1000:.1f}ms {request[OUTCOME] or ''}"
    handler = direct_handler(access_log, logging.INFO)
    # the line logging would write, without a LogRecord, where the handler allows it
    if handler is not None and write_direct(handler, format_direct(handler, logging.INFO, access_log.name,
                                                                   message, fields)):
        return
    access_log.info("%s", message, extra={"fields": fields()})


@functools.lru_cache(maxsize=256)
def _parameter_names(raw_query: str) -> tuple[str, ...]:
    """The names of a query string's parameters, sorted, each once (the access log's)."""
    return tuple(sorted({name for name, _, _ in split_query(raw_query)}))


def create_app(config: Config, algorithms: Algorithms | None = None,
               metrics_dir: str | None = None) -> web.Application:
    """The application of one worker; the upstream session opens on start-up."""
    state = ProxyState(config=config, upstream=Upstream(config.upstream), metrics=Metrics(metrics_dir),
                       algorithms=algorithms or default_algorithms(config.fingerprint, tfidf_version_of(config)),
                       policy=access.policy(config.proxy.read_only, tuple(config.proxy.allowed_paths)))
    app = web.Application(middlewares=[observe], client_max_size=config.proxy.max_body_bytes)
    logging.getLogger("aiohttp.server").addFilter(_QUIET)   # once: the same filter object
    app[STATE] = state
    app[ENGINE] = state.upstream.engine
    app[framing.MAX_BODY_BYTES] = config.proxy.max_body_bytes
    app[framing.EXPECT_REFUSED] = _account_refused_expectation
    ops_elsewhere = bool(config.proxy.ops_address)   # then create_ops_app serves them
    expect = framing.expect_continue
    app.router.add_get("/_neardup/health", ops_moved if ops_elsewhere else health, allow_head=True, expect_handler=expect)
    app.router.add_get("/_neardup/metrics", ops_moved if ops_elsewhere else metrics, allow_head=True, expect_handler=expect)
    playground.register(app, config)
    app[CATCH_ALL] = app.router.add_route("*", "/{tail:.*}", proxy_request, expect_handler=framing.expect_continue)

    async def start(app: web.Application) -> None:
        await app[STATE].upstream.start()
        await app[STATE].upstream.learn_engine()
        missing_fingerprints.start(app[STATE])

    async def stop(app: web.Application) -> None:
        app[STATE].metrics.maybe_write_snapshot(force=True)
        fingerprints = app[STATE].query_fingerprints
        if fingerprints is not None:
            fingerprints.close()
        await app[STATE].upstream.close()

    app.on_startup.append(start)
    app.on_cleanup.append(stop)
    return app


#: The route of every request that is not the proxy's own (:func:`proxy_request`), in the
#: application of :func:`create_app`: :class:`AppHandler` answers it without the router.
CATCH_ALL: web.AppKey[AbstractRoute] = web.AppKey("catch_all", AbstractRoute)


class AppHandler:
    """The request handler of an application's server: :meth:`handle` is aiohttp's own
    (``Application._handle``: the router, then the middleware chain), except for a request
    whose path can only reach the catch-all route (:data:`CATCH_ALL`), which goes straight to
    :func:`observe` and :func:`proxy_request`. Resolving the route and building the chain cost
    more than all the rest a pass-through does in Python.

    A path takes the short way when the router could only match it to the catch-all: it starts
    with ``/`` and not with ``/_neardup``, and has no ``%`` escape, dot segment or empty
    segment, which the router would read after decoding and normalising (``/a/../_neardup/health``,
    ``%0A``). Any other request, and every request of an application without the catch-all,
    goes aiohttp's way.
    """

    def __init__(self, app: web.Application) -> None:
        self.app = app
        route = app.get(CATCH_ALL)
        self._match_info: UrlMappingMatchInfo | None = None
        if route is not None:
            # One for all these requests: it holds only the route and the application, and it
            # is frozen; the one middleware that would change it (the current application)
            # is not run on the short way.
            self._match_info = UrlMappingMatchInfo({}, route)
            self._match_info.add_app(app)
            self._match_info.freeze()

    async def handle(self, base: web.BaseRequest) -> web.StreamResponse:
        request = cast(web.Request, base)   # the application's request factory makes them
        match_info = self._match_info
        path = request.raw_path.partition("?")[0]
        if match_info is None or not _only_catch_all(path):
            return await self.app._handle(request)
        request._match_info = match_info
        if request.headers.get("Expect"):   # as aiohttp: the route's expect handler first
            response = await match_info.expect_handler(request)
            await request.writer.drain()
            if response is not None:
                return response
        return await observe(request, proxy_request)


def _only_catch_all(path: str) -> bool:
    """Whether the router can match ``path`` (a raw path) to nothing but the catch-all route."""
    return path[:1] == "/" and not path.startswith("/_neardup") and "%" not in path \
        and "/." not in path and "//" not in path


def create_ops_app(main: web.Application) -> web.Application:
    """``/_neardup/health`` and ``/_neardup/metrics`` alone, for ``proxy.ops_address``; they share
    the main application's state (upstream session, metrics), so start the main one first."""
    ops = web.Application(middlewares=[observe])
    ops[STATE] = main[STATE]
    ops[ENGINE] = main[ENGINE]
    ops[framing.EXPECT_REFUSED] = _account_refused_expectation
    ops.router.add_get("/_neardup/health", health, allow_head=True, expect_handler=framing.expect_continue)
    ops.router.add_get("/_neardup/metrics", metrics, allow_head=True, expect_handler=framing.expect_continue)
    playground.register_ops(ops, ops[STATE].config, proxy_request)
    return ops
