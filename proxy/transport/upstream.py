"""The upstream Elasticsearch nodes: one pooled client session per worker, round robin, timeouts.

* One :class:`aiohttp.ClientSession` per worker process with a keep-alive ``TCPConnector``
  of ``upstream.max_connections`` connections, for requests whose body streams
  (:meth:`Upstream.send`: pass-through of a large body); and for requests whose body is in
  memory (:meth:`Upstream.exchange`: the collapsed searches, which need the whole answer
  anyway, and the other pass-throughs, whose large answers stream on)
  :mod:`neardup.proxy.transport.http1_client`'s leaner keep-alive connections, up to
  ``upstream.max_connections`` of them as well.
* Requests go to the nodes in turn; a node that refuses the connection, or does not accept it
  within ``upstream.connect_timeout``, is skipped and the next one tried (the request was not
  sent, so this is safe for every method). A node that failed so is tried after the others
  for a while (0.5 s, doubling up to 30 s, reset by its next success), so one dead node costs
  the requests little; when every node failed, all are tried in turn.
* A connection that breaks before the response (reset, closed) fails the request with 502,
  unless the request only reads (:func:`neardup.access_rules.is_read`) and its body is in memory: it
  is then sent once more, to the next node (the same one when there is one node).
* The path and query go upstream exactly as received (no percent-decoding, no ``..``
  normalisation), and only to the configured nodes: the request target must be a path.
  User information in ``upstream.urls`` is not used by the proxy (clients bring their own
  credentials) and never shown in its messages.
* Bytes pass through untouched: no automatic decompression, no headers added by the client
  library (``User-Agent``, ``Accept``, ``Accept-Encoding``, ``Content-Type`` only if the client
  sent them).
* A node that sends nothing for ``upstream.request_timeout`` seconds gives a 504; one that cannot
  be reached gives a 502 (:mod:`neardup.proxy.transport.errors`).
* Which engine the nodes run (``Upstream.engine``, an
  :class:`~neardup.proxy.transport.engine.Engine`) is learned from their answers and from
  ``GET /`` (:meth:`Upstream.learn_engine`).
"""

from __future__ import annotations

import asyncio
import itertools
import ssl
import time
from collections.abc import AsyncIterable, Awaitable, Callable, Mapping
from typing import Any, TypeVar

import aiohttp
from yarl import URL

from neardup import access_rules
from neardup.config import UpstreamConfig
from neardup.proxy.transport import errors, http1_client, jsonio
from neardup.proxy.transport.engine import Engine
from neardup.upstream import auth_headers, without_credentials

#: Headers aiohttp would add on its own; the proxy sends only what the client sent.
_AUTO_HEADERS = ("Accept", "Accept-Encoding", "User-Agent", "Content-Type")

Body = bytes | AsyncIterable[bytes] | None
_T = TypeVar("_T")
#: While the engine is unknown, ``GET /`` is asked again at most this often (seconds).
LEARN_INTERVAL = 5.0


class _Unreachable(Exception):
    """This node did not take the request (nothing was sent): try the next."""


class _Broken(Exception):
    """The connection broke before any answer: a read may be sent once more."""


def ssl_context(config: UpstreamConfig) -> ssl.SSLContext | bool:
    """TLS settings for https upstreams: the CA bundle, verification on unless switched off."""
    if not any(url.startswith("https:") for url in config.url_strings):
        return True
    if not config.verify_certs:
        return False
    context = ssl.create_default_context(cafile=config.ca_certs or None)
    return context


class Upstream:
    """The pool of upstream nodes of one worker. ``start()`` inside the event loop first."""

    def __init__(self, config: UpstreamConfig) -> None:
        self.config = config
        self.urls = [without_credentials(url) for url in config.url_strings]
        self._turn = itertools.cycle(range(len(self.urls)))
        #: url -> (consecutive connection failures, monotonic time before which it goes last)
        self._down: dict[str, tuple[int, float]] = {}
        self._session: aiohttp.ClientSession | None = None
        self._nodes: dict[str, http1_client.Node] = {}
        self.engine = Engine()
        self._learning: asyncio.Future[None] | None = None
        self._learned_at = -LEARN_INTERVAL

    async def start(self) -> None:
        connector = aiohttp.TCPConnector(
            limit=self.config.max_connections, limit_per_host=0, keepalive_timeout=30,
            ssl=ssl_context(self.config), enable_cleanup_closed=False)
        self._session = aiohttp.ClientSession(
            connector=connector, auto_decompress=False, skip_auto_headers=_AUTO_HEADERS,
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=self.config.connect_timeout,
                                          sock_read=self.config.request_timeout),
            cookie_jar=aiohttp.DummyCookieJar(), raise_for_status=False, trust_env=False)
        slots = asyncio.Semaphore(self.config.max_connections)
        self._nodes = {url: http1_client.Node(url, slots, self.config.connect_timeout,
                                       self.config.request_timeout, ssl_context(self.config))
                       for url in self.urls}

    async def close(self) -> None:
        for node in self._nodes.values():
            node.close()
        if self._session is not None:
            await self._session.close()
            self._session = None

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            raise RuntimeError("Upstream.start() was not awaited")
        return self._session

    async def send(self, method: str, path_qs: str, headers: Mapping[str, str] | list[tuple[str, str]],
                   body: Body = None, base_url: str | None = None) -> aiohttp.ClientResponse:
        """Send one request; return the response with its body not yet read (release it!).

        Raises :class:`~neardup.proxy.transport.errors.ProxyError` 502/504 on connection failures and timeouts.
        """
        async def attempt(url: str) -> aiohttp.ClientResponse:
            try:
                return await self.session.request(
                    method, URL(url + path_qs, encoded=True), headers=headers, data=body,
                    allow_redirects=False, compress=None, chunked=None)
            except aiohttp.ClientConnectorError as exc:
                raise _Unreachable(exc.os_error.strerror or str(exc) if exc.os_error else str(exc)) from None
            except aiohttp.ConnectionTimeoutError:
                raise _Unreachable(http1_client.no_connection_within(self.config.connect_timeout)) from None
            except (TimeoutError, aiohttp.ServerTimeoutError):
                raise errors.upstream_timeout(self.config.request_timeout, self.engine.name) from None
            except aiohttp.ClientError as exc:
                raise _Broken(f"{type(exc).__name__}: {exc}") from None

        replayable = body is None or isinstance(body, (bytes, bytearray))
        response = await self._with_failover(method, path_qs, replayable, base_url, attempt)
        self.engine.note_headers(response.headers)
        return response

    async def exchange(self, method: str, path_qs: str, headers: list[tuple[str, str]],
                       body: bytes | None = None, stream_over: int | None = None) -> http1_client.Reply:
        """One request whose body is in memory, and its whole answer: :meth:`send` with the
        answer read, the same failover, 502 and 504, over :mod:`neardup.proxy.transport.http1_client`'s leaner
        connections (the search path's hot loop). With ``stream_over``, an answer longer than
        that comes with its :attr:`~neardup.proxy.transport.http1_client.Reply.rest` to read
        (failing with :class:`~neardup.proxy.transport.http1_client.Broken` or
        :class:`~neardup.proxy.transport.http1_client.ReadTimeout` if the node does)."""
        async def attempt(url: str) -> http1_client.Reply:
            try:
                return await self._nodes[url].exchange(method, path_qs, headers, body, stream_over)
            except http1_client.ConnectFailed as exc:
                raise _Unreachable(str(exc)) from None
            except http1_client.ReadTimeout:
                raise errors.upstream_timeout(self.config.request_timeout, self.engine.name) from None
            except http1_client.Broken as exc:
                if exc.answered:   # part of an answer came: like a body that breaks in read()
                    raise errors.upstream_broken(str(exc), self.engine.name) from None
                raise _Broken(str(exc)) from None

        reply = await self._with_failover(method, path_qs, True, None, attempt)
        self.engine.note_headers(reply.headers)
        return reply

    async def learn_engine(self) -> None:
        """Ask ``GET /`` (with ``upstream.username``/``api_key`` if configured) which engine the
        nodes run, unless it is known or was asked less than :data:`LEARN_INTERVAL` seconds ago;
        concurrent callers share one question. Failures leave it unknown, for a later try."""
        if self.engine.known:
            return
        if self._learning is None:
            if time.monotonic() - self._learned_at < LEARN_INTERVAL:
                return
            self._learned_at = time.monotonic()
            self._learning = asyncio.ensure_future(self._ask_root())
        learning = self._learning
        try:
            await asyncio.shield(learning)
        finally:
            if learning.done():
                self._learning = None

    async def _ask_root(self) -> None:
        headers = [("Accept", "application/json"), *auth_headers(self.config).items()]
        try:
            reply = await self.exchange("GET", "/", headers)
        except errors.ProxyError:
            return
        if reply.status == 200:
            try:
                self.engine.note_root(jsonio.loads(reply.body))
            except ValueError:
                pass

    async def _with_failover(self, method: str, path_qs: str, replayable: bool, base_url: str | None,
                             attempt: Callable[[str], Awaitable[_T]]) -> _T:
        """Try the nodes in turn (:meth:`_round_robin`) until one takes the request; resend a
        read whose connection broke before any answer once (see the module docstring)."""
        order = [base_url] if base_url else self._round_robin()
        resent = False
        last_error = ""
        tried = 0
        while tried < len(order):
            url = order[tried]
            tried += 1
            try:
                result = await attempt(url)
            except _Unreachable as exc:
                last_error = f"{url}: {exc}"
            except _Broken as exc:
                if resent or not replayable or not access_rules.is_read(method, path_qs.partition("?")[0]):
                    raise errors.upstream_broken(str(exc), self.engine.name) from None
                resent = True
                if tried == len(order):
                    order.append(url)
                continue
            else:
                self._down.pop(url, None)
                return result
            self._mark_down(url)
            if not replayable:
                break
        raise errors.upstream_unreachable(last_error or "no nodes configured", self.engine.name)

    def _round_robin(self) -> list[str]:
        """Every node once, starting with the next in turn; nodes that failed lately go last."""
        first = next(self._turn)
        order = [self.urls[(first + k) % len(self.urls)] for k in range(len(self.urls))]
        if not self._down:
            return order
        now = time.monotonic()
        late = {url for url, (_, until) in self._down.items() if until > now}
        return [u for u in order if u not in late] + [u for u in order if u in late]

    def _mark_down(self, url: str) -> None:
        failures = self._down.get(url, (0, 0.0))[0] + 1
        self._down[url] = (failures, time.monotonic() + min(30.0, 0.5 * 2 ** min(failures - 1, 6)))

    async def health(self, headers: Mapping[str, str]) -> list[dict[str, Any]]:
        """``GET /_cluster/health`` on every node (short timeout): reachability and cluster status."""
        async def probe(url: str) -> dict[str, Any]:
            try:
                async with self.session.get(url + "/_cluster/health", headers=headers,
                                            timeout=aiohttp.ClientTimeout(total=min(5.0, self.config.request_timeout))) as r:
                    raw = await r.read()
                    entry: dict[str, Any] = {"url": url, "reachable": True, "http_status": r.status}
                    if r.status == 200:
                        try:
                            entry["cluster_status"] = jsonio.loads(raw).get("status")
                        except (ValueError, AttributeError):
                            pass
                    return entry
            except Exception as exc:  # noqa: BLE001 - any failure is "unreachable"
                return {"url": url, "reachable": False, "error": type(exc).__name__}
        return list(await asyncio.gather(*(probe(url) for url in self.urls)))
