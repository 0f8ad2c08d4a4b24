"""Running the proxy: one worker in this process, or N forked workers sharing one socket.

The parent binds the listening socket once and forks the workers, which all accept on it (the
kernel spreads connections between them). SIGTERM or SIGINT makes every worker stop accepting,
finish the requests in flight (up to ``proxy.shutdown_timeout`` seconds) and exit; the parent
forwards the signal and waits. A worker that dies on its own is replaced.

Requests aiohttp cannot parse never reach the application: aiohttp answers them itself, with
no public hook for the answer. :class:`ElasticErrorRequestHandler` (aiohttp's connection
handler, two methods overridden) makes that answer an Elasticsearch error body too. It relies
on aiohttp internals, checked once at import (:data:`MISSING_INTERNALS`); on an aiohttp whose
internals differ it stays off, the proxy answers those requests as plain aiohttp does (a
plain-text 400), and :func:`warn_plain_errors` says so at start. (The error bodies follow the
upstream's engine, :mod:`neardup.proxy.transport.engine`; "Elasticsearch" below stands for both.)
"""

from __future__ import annotations

import asyncio
import gc
import inspect
import logging
import os
import shutil
import signal
import socket
import sys
import tempfile
import time
from collections.abc import Callable, Coroutine
from typing import Any, get_args

import aiohttp
from aiohttp import StreamReader, web, web_protocol
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.web_protocol import RequestHandler

from neardup.config import Config, split_host_port
from neardup.proxy.app import AppHandler, create_app, create_ops_app
from neardup.proxy.transport import errors
from neardup.proxy.transport.engine import ENGINE, Engine
from neardup.proxy.transport.errors import error_response
from neardup.upstream import UpstreamError, check_reachable, without_credentials

log = logging.getLogger("neardup.proxy")


class ListenError(OSError):
    """An address the proxy was told to listen on cannot be bound; the message names it."""


def bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise ListenError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from exc
    sock.listen(1024)
    sock.setblocking(False)
    sock.set_inheritable(True)
    return sock


def url_of(sock: socket.socket, scheme: str = "http") -> str:
    host, port = sock.getsockname()[:2]
    return f"{scheme}://[{host}]:{port}" if ":" in host else f"{scheme}://{host}:{port}"


#: aiohttp's record of a request it could not parse: a private class, hence looked up, not
#: imported.
_ErrInfo: type[Any] | None = getattr(web_protocol, "_ErrInfo", None)


def _parameters(function: Callable[..., Any]) -> list[str]:
    try:
        return list(inspect.signature(function).parameters)
    except (TypeError, ValueError):
        return []


def _missing_internals() -> tuple[str, ...]:
    """The aiohttp internals :class:`ElasticErrorRequestHandler` and :class:`ProxyRunner` use
    that this aiohttp lacks or has in another shape; empty when they are all as expected."""
    missing = []
    if not isinstance(_ErrInfo, type) or _parameters(_ErrInfo) != ["status", "exc", "message"]:
        missing.append("web_protocol._ErrInfo(status, exc, message)")
    # The entries of RequestHandler._messages: (request message or _ErrInfo, its body).
    entry = get_args(getattr(web_protocol, "_MsgType", None))
    if len(entry) != 2 or _ErrInfo not in get_args(entry[0]) or entry[1] is not StreamReader:
        missing.append("web_protocol._MsgType (message or _ErrInfo, StreamReader)")
    for name in ("_messages", "_current_request"):
        if not hasattr(RequestHandler, name):
            missing.append(f"RequestHandler.{name}")
    if _parameters(RequestHandler.handle_error) != ["self", "request", "status", "exc", "message"]:
        missing.append("RequestHandler.handle_error(request, status, exc, message)")
    if _parameters(RequestHandler.data_received) != ["self", "data"]:
        missing.append("RequestHandler.data_received(data)")
    if not inspect.iscoroutinefunction(getattr(web.AppRunner, "_make_server", None)):
        missing.append("AppRunner._make_server()")
    return tuple(missing)


#: What :func:`_missing_internals` found missing in the installed aiohttp (empty on the
#: versions the proxy is tested with).
MISSING_INTERNALS = _missing_internals()

#: Whether the proxy's connections answer unparsable requests with Elasticsearch error bodies
#: (:class:`ElasticErrorRequestHandler`) or as plain aiohttp does.
ELASTIC_ERRORS = not MISSING_INTERNALS


def warn_plain_errors() -> None:
    """Log one warning when :data:`ELASTIC_ERRORS` is off: the only visible difference."""
    if not ELASTIC_ERRORS:
        log.warning("aiohttp %s differs from the versions the proxy is tested with (%s): requests "
                    "aiohttp cannot parse get its plain-text answer, not an Elasticsearch error "
                    "body", aiohttp.__version__, ", ".join(MISSING_INTERNALS) or "switched off")


class ElasticErrorRequestHandler(RequestHandler):
    """aiohttp's connection handler, answering what it cannot hand to the application in
    Elasticsearch's error format instead of plain text.

    A request aiohttp cannot parse (bad request line, bad header, invalid chunked encoding, a
    line over 8190 bytes...) never reaches the application, its middleware or its signals:
    aiohttp answers it itself through :meth:`RequestHandler.handle_error`, and has no public
    hook for that answer. This override keeps what aiohttp does there (the status it chose, the
    log record, closing the connection, refusing once bytes were sent) and only changes the
    body: ``illegal_argument_exception`` naming the problem (not the offending bytes) for a
    malformed request, ``neardup_proxy_exception`` otherwise, as JSON, never a traceback.
    """

    __slots__ = ()   # the layout of aiohttp's handler, so that a handler can become one

    def data_received(self, data: bytes) -> None:
        """As aiohttp's, but a body that breaks off in the middle (invalid chunked encoding
        after the first chunks) fails the request reading it, instead of queueing the error as
        a next request while that one waits for the rest of its body forever."""
        request = self._current_request
        queued = len(self._messages)
        super().data_received(data)
        if _ErrInfo is None or len(self._messages) <= queued:
            return
        failure = self._messages[-1][0]
        if not isinstance(failure, _ErrInfo):
            return
        # Whose body was being read: the last request queued before the error, else the one
        # being handled now.
        if len(self._messages) >= 2:
            payload, current = self._messages[-2][1], False
        elif request is not None:
            payload, current = request.content, True
        else:
            return
        if payload.is_eof() or payload.exception() is not None:
            return   # the error is in a new request: aiohttp answers it (handle_error)
        self._messages.pop()
        payload.set_exception(failure.exc)   # reading the body raises it: the middleware's 400
        payload.feed_eof()
        if current:
            self.close()   # the connection's bytes are out of step: no further request on it

    def handle_error(self, request: web.BaseRequest, status: int = 500,
                     exc: BaseException | None = None, message: str | None = None) -> web.StreamResponse:
        super().handle_error(request, status, exc, message)   # logs it; raises once bytes went out
        if isinstance(exc, HttpProcessingError) or 400 <= status < 500:
            error = errors.malformed_request(status, exc)
        elif status == 504:
            error = errors.ProxyError(504, "neardup_proxy_exception", "the request took too long")
        else:
            error = errors.internal(type(exc).__name__ if exc is not None else "unexpected error")
        response = error_response(error, engine=self._engine())
        response.force_close()
        return response

    def _engine(self) -> Engine | None:
        """The upstream's engine, from the application this connection serves (aiohttp's server
        holds the application's request handler, a bound method of it)."""
        owner = getattr(getattr(self._manager, "request_handler", None), "__self__", None)
        app = owner.app if isinstance(owner, AppHandler) else owner
        return app.get(ENGINE) if isinstance(app, web.Application) else None


class ElasticErrorServer(web.Server):
    """:class:`aiohttp.web.Server` whose connections use :class:`ElasticErrorRequestHandler`."""

    __slots__ = ()   # the layout of aiohttp's server, so that a server can become one

    def __call__(self) -> RequestHandler:
        handler = super().__call__()
        if type(handler) is RequestHandler:   # the same object, with the error handling above
            handler.__class__ = ElasticErrorRequestHandler
        return handler


class ProxyRunner(web.AppRunner):
    """:class:`aiohttp.web.AppRunner` serving with :class:`ElasticErrorServer` when
    :data:`ELASTIC_ERRORS` is on, else with aiohttp's own server; requests go to
    :class:`~neardup.proxy.app.AppHandler` (the catch-all route without the router)."""

    async def _make_server(self) -> web.Server:
        server = await super()._make_server()
        server.request_handler = AppHandler(self.app).handle
        if ELASTIC_ERRORS and type(server) is web.Server:   # the same object, with the above
            server.__class__ = ElasticErrorServer
        return server


#: Net new container objects (dicts, lists) before a young-generation garbage collection; the
#: interpreter's default is 700. See :func:`tune_gc`.
GC_YOUNG_THRESHOLD = 100_000


def tune_gc() -> None:
    """Make the cyclic garbage collector cheap for a worker that parses big JSON responses.

    A collapsed search holds the parsed upstream window alive while it is grouped: thousands of
    dicts and lists. With the default young-generation threshold (700 net allocations) every
    such request sets off several collections that walk all of them and promote them to the
    older generations, and every few dozen requests a full collection walks everything the
    process imported as well. The request's objects are freed by reference counting when it
    ends, so with a threshold of :data:`GC_YOUNG_THRESHOLD` the collector only runs when that
    many objects are really accumulating (reference cycles), and ``gc.freeze()`` moves what
    start-up created out of the collector's sight for good.
    """
    gc.collect()
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, older, oldest)


async def run_worker(config: Config, sock: socket.socket, metrics_dir: str | None = None,
                     ops_sock: socket.socket | None = None) -> None:
    """Serve on ``sock`` (and the ops endpoints on ``ops_sock``) until SIGTERM/SIGINT, then
    shut down gracefully.

    With ``proxy.tls_cert``, ``sock`` serves HTTPS: each worker builds its own SSL context (the
    parent only passes on the listening socket); the ops endpoints stay plain HTTP.
    """
    app = create_app(config, metrics_dir=metrics_dir)
    runner = ProxyRunner(app, handle_signals=False, access_log=None, auto_decompress=False,
                           shutdown_timeout=config.proxy.shutdown_timeout)
    await runner.setup()
    tune_gc()   # before accepting: the full collection must not stall a worker's first requests
    site = web.SockSite(runner, sock, ssl_context=config.proxy.ssl_context())
    await site.start()
    ops_runner = None
    if ops_sock is not None:
        ops_runner = ProxyRunner(create_ops_app(app), handle_signals=False, access_log=None,
                                   shutdown_timeout=1.0)
        await ops_runner.setup()
        await web.SockSite(ops_runner, ops_sock).start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    await stop.wait()
    log.info("shutting down: finishing requests in flight (at most %gs)", config.proxy.shutdown_timeout)
    if ops_runner is not None:
        await ops_runner.cleanup()
    await runner.cleanup()


def run_loop(main: Coroutine[Any, Any, None]) -> None:
    """Run ``main`` on uvloop when it is installed (it halves the event loop's cost per request),
    else on the standard asyncio loop."""
    try:
        import uvloop
    except ImportError:
        asyncio.run(main)
        return
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(main)


def serve(config: Config) -> int:
    """Bind, announce the URL, run ``proxy.workers`` workers until told to stop."""
    sock = bind(config.proxy.host, config.proxy.port)
    try:
        ops_sock = bind(*split_host_port(config.proxy.ops_address)) if config.proxy.ops_address else None
    except ListenError:
        sock.close()
        raise
    _check_upstream(config)
    workers = config.proxy.workers
    url = url_of(sock, "https" if config.proxy.tls_cert else "http")
    upstream = ", ".join(without_credentials(u) for u in config.upstream.url_strings)
    ops = f"; health and metrics on {url_of(ops_sock)}" if ops_sock is not None else ""
    message = f"neardup proxy listening on {url} (workers: {workers}, upstream: {upstream}{ops})"
    print(message, flush=True)
    log.info(message, extra={"fields": {"event": "listening", "url.full": url, "workers": workers}})
    warn_plain_errors()
    if workers == 1:
        run_loop(run_worker(config, sock, ops_sock=ops_sock))
        return 0
    metrics_dir = tempfile.mkdtemp(prefix="neardup-proxy-metrics-")
    try:
        return _supervise(config, sock, workers, metrics_dir, ops_sock)
    finally:
        shutil.rmtree(metrics_dir, ignore_errors=True)


def _check_upstream(config: Config) -> None:
    """Warn at start-up when no upstream node answers; the proxy serves anyway (502 until it does).

    Clients bring their own credentials, so a 401 to the proxy's credential-less probe is normal
    for a secured cluster and only noted.
    """
    try:
        check_reachable(config)
    except UpstreamError as exc:
        level = logging.INFO if "no credentials" in str(exc) else logging.WARNING
        log.log(level, "%s (serving anyway; requests get 502 while no node answers)", exc)


def _spawn(config: Config, sock: socket.socket, metrics_dir: str,
           ops_sock: socket.socket | None = None) -> int:
    pid = os.fork()
    if pid == 0:  # the worker
        code = 0
        try:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            run_loop(run_worker(config, sock, metrics_dir, ops_sock))
        except BaseException:  # noqa: BLE001 - report and leave the worker
            log.exception("worker %d failed", os.getpid())
            code = 1
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    return pid


def _supervise(config: Config, sock: socket.socket, workers: int, metrics_dir: str,
               ops_sock: socket.socket | None = None) -> int:
    stopping = False

    def on_signal(signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True
        for pid in list(children):
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass

    children: set[int] = set()
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    for _ in range(workers):
        children.add(_spawn(config, sock, metrics_dir, ops_sock))
    while children:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            break
        except InterruptedError:
            continue
        children.discard(pid)
        if not stopping:
            log.warning("worker %d exited (status %d); starting a new one", pid, status)
            time.sleep(0.5)
            children.add(_spawn(config, sock, metrics_dir, ops_sock))
    sock.close()
    return 0
