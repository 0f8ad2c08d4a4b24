"""A small HTTP/1.1 client for whole-body exchanges with the upstream: the search hot path.

A collapsed search sends a body held in memory and needs the whole answer before it can group
anything, so it does not need redirects, cookies, proxies or decompression, nor the per-request
objects :class:`aiohttp.ClientSession` builds for them (request and response objects, headers
merging, tracing hooks, a stream reader). Here one exchange is one ``write`` of the request and
an :class:`asyncio.Protocol` that collects the answer. A pass-through sends such a body too,
but the answer may be large: with ``stream_over`` an answer longer than that is handed over
early (:attr:`Reply.rest` yields the rest as it arrives, reading paused while the reader lags).

What it does, as RFC 9112 asks of a client:

* keep-alive connections per node, one request at a time on each (no pipelining); a semaphore
  shared by the nodes bounds the exchanges at once (more requests wait for a free one), so
  each node has at most that many connections in use, plus the idle ones of its pool, which
  are closed once idle for :data:`KEEPALIVE` seconds;
* responses framed by ``Transfer-Encoding: chunked`` (Elasticsearch's search answers; chunk
  extensions and trailers are read and dropped), by ``Content-Length``, or by the end of the
  connection; ``HEAD``, 1xx (skipped), 204 and 304 answers have no body;
* a connection is reused only after a complete answer that did not ask to close it, and only
  within :data:`KEEPALIVE` seconds of its last answer;
* a read timeout: no bytes from the node for ``read_timeout`` seconds fails the exchange (or
  the :class:`Rest` of a streamed answer; not while reading is paused for a slow reader).

Errors are exceptions of three kinds, which :mod:`neardup.proxy.transport.upstream` maps to 502/504 and retries:
:class:`ConnectFailed` (nothing was sent), :class:`ReadTimeout`, :class:`Broken` (the connection
failed or the answer was malformed after the request was written; ``answered`` says whether any
byte of an answer had arrived).
"""

from __future__ import annotations

import asyncio
import functools
import ssl
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

from multidict import CIMultiDict, CIMultiDictProxy

_NO_BODY_STATUS = (204, 304)
#: seconds an idle connection is kept for reuse (aiohttp's ``keepalive_timeout`` of the old path):
#: one idle longer may have been dropped silently on the way (NAT or firewall idle timeouts)
KEEPALIVE = 30.0
_MAX_HEAD = 64 * 1024   # status line and headers; aiohttp's client allows 8190 per line
#: bytes of a streamed answer held for a slow reader before reading from the node pauses
_REST_HIGH_WATER = 1024 * 1024


def no_connection_within(seconds: float) -> str:
    """The reason given for a node that did not take a connection in time (both upstream paths)."""
    return f"no connection within {seconds:g} s (upstream.connect_timeout)"


class ConnectFailed(Exception):
    """No connection to the node (refused, unreachable, TLS failure, no answer to the SYN in time)."""


class ReadTimeout(Exception):
    """The node sent nothing for the read timeout."""


class Broken(Exception):
    """The connection broke, or the answer was not HTTP/1.1, after the request was written."""

    def __init__(self, message: str, answered: bool) -> None:
        super().__init__(message)
        self.answered = answered


@dataclass(frozen=True, slots=True)
class Reply:
    """An upstream answer: the whole of it, or (``rest`` not None) its first ``body`` bytes."""

    status: int
    reason: str
    headers: CIMultiDictProxy[str]
    body: bytes
    rest: Rest | None = None

    @property
    def content_type(self) -> str:
        return self.headers.get("Content-Type", "").split(";", 1)[0].strip().lower()


class _Connection(asyncio.Protocol):
    """One keep-alive connection; :meth:`exchange` sends a request and waits for its answer."""

    def __init__(self, loop: asyncio.AbstractEventLoop, read_timeout: float) -> None:
        self._loop = loop
        self._read_timeout = read_timeout
        self.transport: asyncio.Transport | None = None
        self._waiter: asyncio.Future[Reply] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0                  # loop time the timer fires
        self._deadline: float | None = None   # loop time the read times out, or None
        self._buffer = bytearray()
        self._head_request = False
        self._stream_over: int | None = None
        self._rest: Rest | None = None
        self._paused = False                  # reading paused for a slow reader of the rest
        self.reusable = False
        self.idle_since = 0.0                 # time.monotonic() when it went back to the pool
        self._reset_message()

    # -- the parser's state for one answer -------------------------------------------------
    def _reset_message(self) -> None:
        self._status: int | None = None
        self._reason = ""
        self._headers: CIMultiDict[str] | None = None
        self._length: int | None = None       # Content-Length, or None
        self._chunked = False
        self._until_close = False
        self._keep_alive = True
        self._chunks: list[bytes] = []        # body bytes read and not yet handed over
        self._received = 0                    # body bytes read
        self._chunk_left = 0                  # bytes left in the current chunk (+2 for its CRLF)
        self._in_trailers = False
        self._answered = False

    # -- asyncio.Protocol ------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        self.reusable = False
        self._drop_timer()
        reason = f"{type(exc).__name__}: {exc}" if exc else "the node closed the connection"
        rest, self._rest = self._rest, None
        if rest is not None:
            if self._until_close and exc is None:
                rest.feed(b"".join(self._chunks) + bytes(self._buffer))
                rest.finish()
            else:
                rest.fail(Broken(reason, True))
            return
        waiter, self._waiter = self._waiter, None
        if waiter is None or waiter.done():
            return
        if self._until_close and self._headers is not None and exc is None:
            self._finish(b"".join(self._chunks) + bytes(self._buffer), waiter)
            return
        waiter.set_exception(Broken(reason, self._answered))

    def data_received(self, data: bytes) -> None:
        # bytes nobody asked for (or waits for any more: cancelled, its task not yet resumed):
        # the connection is not usable
        if self._rest is None and (self._waiter is None or self._waiter.done()):
            self.reusable = False
            if self.transport is not None:
                self.transport.close()
            return
        self._answered = True
        self._buffer += data
        self._arm_timer()
        try:
            self._parse()
        except _Malformed as exc:
            waiter, self._waiter = self._waiter, None
            rest, self._rest = self._rest, None
            if self.transport is not None:
                self.transport.close()
            if rest is not None:
                rest.fail(Broken(f"malformed answer: {exc}", True))
            if waiter is not None and not waiter.done():
                waiter.set_exception(Broken(f"malformed answer: {exc}", True))

    def eof_received(self) -> bool | None:
        return None   # close the transport; connection_lost finishes a close-delimited answer

    # -- one exchange ----------------------------------------------------------------------
    async def exchange(self, request: bytes, head_request: bool, stream_over: int | None = None) -> Reply:
        assert self._waiter is None and self._rest is None
        if self.transport is None or self.transport.is_closing():
            # lost between connect and now (a node resetting new connections): nothing was sent
            raise Broken("the node closed the connection before the request was sent", False)
        self.reusable = False
        self._head_request = head_request
        self._stream_over = stream_over
        self._reset_message()
        self._buffer.clear()
        waiter = self._waiter = self._loop.create_future()
        self.transport.write(request)
        self._arm_timer()
        try:
            return await waiter
        finally:
            if self._rest is None:              # a streamed answer keeps its read timeout
                self._cancel_timer()
            if self._waiter is waiter:          # cancelled or timed out: the answer may still come
                self._waiter = None
                self.close()

    def close(self) -> None:
        self.reusable = False
        if self.transport is not None:
            self.transport.close()

    # -- timer -------------------------------------------------------------------------------
    # One timer per connection, moved lazily: arming only pushes the deadline on (no timer
    # handle made or cancelled per read); the timer, when it fires before the deadline, waits
    # again for the rest of it; a disarmed one fires and finds nothing to do.
    def _arm_timer(self) -> None:
        self._deadline = self._loop.time() + self._read_timeout
        if self._timer is None:
            self._timer_at = self._deadline
            self._timer = self._loop.call_at(self._deadline, self._timer_fired)

    def _cancel_timer(self) -> None:
        self._deadline = None

    def _drop_timer(self) -> None:
        self._deadline = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _timer_fired(self) -> None:
        self._timer = None
        if self._deadline is None:
            return
        if self._deadline > self._timer_at:
            self._timer_at = self._deadline
            self._timer = self._loop.call_at(self._deadline, self._timer_fired)
            return
        self._deadline = None
        self._timed_out()

    def _timed_out(self) -> None:
        waiter, self._waiter = self._waiter, None
        rest, self._rest = self._rest, None
        self.close()
        if rest is not None:
            rest.fail(ReadTimeout())
        if waiter is not None and not waiter.done():
            waiter.set_exception(ReadTimeout())

    # -- flow control of a streamed answer (called by its Rest) ----------------------------
    def pause(self) -> None:
        if self.transport is not None and not self._paused:
            self._paused = True
            self.transport.pause_reading()
            self._cancel_timer()        # the reader is slow, not the node

    def resume(self) -> None:
        if self._paused:
            self._paused = False
            if self.transport is not None:
                self.transport.resume_reading()
                if self._rest is not None:
                    self._arm_timer()

    # -- parsing -----------------------------------------------------------------------------
    def _parse(self) -> None:
        while self._headers is None:
            if not self._parse_head():
                return
        if self._chunked:
            done = self._parse_chunks()
        elif self._length is not None:
            left = self._length - self._received
            if len(self._buffer) > left:
                raise _Malformed("more bytes than Content-Length")
            if self._rest is not None or self._stream_over is not None:
                self._take(bytes(self._buffer))
                self._buffer.clear()
                done = self._received == self._length
            elif len(self._buffer) == left:   # whole: one copy, no list
                self._chunks.append(bytes(self._buffer))
                done = True
            else:
                return
        else:   # until close: connection_lost finishes it
            if self._rest is None and self._stream_over is None:
                return
            self._take(bytes(self._buffer))
            self._buffer.clear()
            done = False
        rest = self._rest
        if rest is not None:
            if self._chunks:
                rest.feed(self._body_so_far())
            if done:
                self._rest = None
                self._finish_rest(rest)
        elif done:
            waiter = self._waiter
            assert waiter is not None
            self._finish(self._body_so_far(), waiter)
        elif self._stream_over is not None and self._received > self._stream_over:
            self._hand_over(self._body_so_far())

    def _body_so_far(self) -> bytes:
        """The body bytes read and not yet handed over (then forgotten)."""
        chunks, self._chunks = self._chunks, []
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    def _take(self, data: bytes) -> None:
        if data:
            self._chunks.append(data)
            self._received += len(data)

    def _parse_head(self) -> bool:
        end = self._buffer.find(b"\r\n\r\n")
        if end < 0:
            if len(self._buffer) > _MAX_HEAD:
                raise _Malformed("header section too long")
            return False
        head = bytes(self._buffer[:end]).decode("utf-8", "surrogateescape")   # as aiohttp's client
        del self._buffer[:end + 4]
        lines = head.split("\r\n")
        version, _, rest = lines[0].partition(" ")
        code, _, reason = rest.partition(" ")
        if version not in ("HTTP/1.1", "HTTP/1.0") or len(code) != 3 or not code.isdigit():
            raise _Malformed(f"status line {lines[0][:40]!r}")
        status = int(code)
        headers: CIMultiDict[str] = CIMultiDict()
        for line in lines[1:]:
            name, colon, value = line.partition(":")
            if not colon or not name or name != name.strip() or line[:1] in " \t":
                raise _Malformed("header line")
            headers.add(name, value.strip(" \t"))
        if 100 <= status < 200:          # interim answer (e.g. 100 Continue): the real one follows
            return True
        connection = headers.get("Connection", "").lower()
        self._keep_alive = "close" not in connection and (version == "HTTP/1.1" or "keep-alive" in connection)
        self._status, self._reason, self._headers = status, reason, headers
        if self._head_request or status in _NO_BODY_STATUS:
            self._length = 0
        elif "chunked" in headers.get("Transfer-Encoding", "").lower():
            self._chunked = True
        elif "Content-Length" in headers:
            values = set(headers.getall("Content-Length"))
            text = values.pop()
            if values or not text.isdigit():
                raise _Malformed("Content-Length")
            self._length = int(text)
        else:
            self._until_close = True
            self._keep_alive = False
        return True

    def _parse_chunks(self) -> bool:
        """Read the chunks in the buffer into ``_chunks``; whether the last one (and the
        trailers) came."""
        buffer = self._buffer
        position = 0
        while True:
            if self._in_trailers:
                end = buffer.find(b"\r\n", position)
                if end < 0:
                    break
                if end == position:                       # the empty line after the trailers
                    if end + 2 != len(buffer):
                        raise _Malformed("bytes after the last chunk")
                    buffer.clear()
                    return True
                position = end + 2
                continue
            if self._chunk_left:
                if len(buffer) - position < self._chunk_left:
                    break
                data_end = position + self._chunk_left - 2
                if buffer[data_end:data_end + 2] != b"\r\n":
                    raise _Malformed("chunk not followed by CRLF")
                with memoryview(buffer) as view:   # one copy of the chunk, not two
                    self._take(bytes(view[position:data_end]))
                position = data_end + 2
                self._chunk_left = 0
                continue
            end = buffer.find(b"\r\n", position)
            if end < 0:
                if len(buffer) - position > 1024:
                    raise _Malformed("chunk size line too long")
                break
            size_text = bytes(buffer[position:end]).split(b";", 1)[0].strip()
            try:
                size = int(size_text, 16)
            except ValueError:
                raise _Malformed("chunk size") from None
            if not size_text.isalnum():   # int() also takes signs, "_" and spaces
                raise _Malformed("chunk size")
            position = end + 2
            if size == 0:
                self._in_trailers = True
            else:
                self._chunk_left = size + 2
        del buffer[:position]
        return False

    def _finish(self, body: bytes, waiter: asyncio.Future[Reply]) -> None:
        assert self._status is not None and self._headers is not None
        reply = Reply(self._status, self._reason, CIMultiDictProxy(self._headers), body)
        self.reusable = self._keep_alive and not self._until_close and self.transport is not None
        self._waiter = None
        self._cancel_timer()
        waiter.set_result(reply)

    def _hand_over(self, body: bytes) -> None:
        """The answer is longer than ``stream_over``: the reply now, with what came so far; the
        rest follows through a :class:`Rest`."""
        assert self._status is not None and self._headers is not None
        waiter, self._waiter = self._waiter, None
        assert waiter is not None
        rest = self._rest = Rest(self)
        waiter.set_result(Reply(self._status, self._reason, CIMultiDictProxy(self._headers), body, rest))

    def _finish_rest(self, rest: Rest) -> None:
        self.reusable = self._keep_alive and not self._until_close and self.transport is not None
        self._cancel_timer()
        self.resume()   # paused by the last bytes' own feed: a pooled connection must read
        rest.finish()


class Rest:
    """The rest of a streamed answer (:attr:`Reply.rest`), as it arrives: ``async for data in
    rest``. Ends with :class:`Broken` or :class:`ReadTimeout` if the node fails first; a reader
    that stops early calls :meth:`close` (the connection is then closed, not reused)."""

    def __init__(self, connection: _Connection) -> None:
        self._connection = connection
        self._pieces: deque[bytes] = deque()
        self._held = 0
        self._ended = False
        self._error: BaseException | None = None
        self._waiter: asyncio.Future[None] | None = None
        #: called once when the connection is done with (finished, failed or closed)
        self.on_done: Callable[[], None] | None = None

    # -- the connection's side -------------------------------------------------------------
    def feed(self, data: bytes) -> None:
        self._pieces.append(data)
        self._held += len(data)
        if self._held > _REST_HIGH_WATER:
            self._connection.pause()
        self._wake()

    def finish(self) -> None:
        self._end(None)

    def fail(self, error: BaseException) -> None:
        self._end(error)

    def _end(self, error: BaseException | None) -> None:
        if self._ended:
            return
        self._ended, self._error = True, error
        self._wake()
        done, self.on_done = self.on_done, None
        if done is not None:
            done()

    def _wake(self) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    # -- the reader's side -----------------------------------------------------------------
    def __aiter__(self) -> AsyncIterator[bytes]:
        return self

    async def __anext__(self) -> bytes:
        while not self._pieces:
            if self._ended:
                if self._error is not None:
                    raise self._error
                raise StopAsyncIteration
            self._waiter = asyncio.get_running_loop().create_future()
            await self._waiter
        data = self._pieces.popleft()
        self._held -= len(data)
        if self._held <= _REST_HIGH_WATER // 4:
            self._connection.resume()
        return data

    def close(self) -> None:
        """Stop reading: the connection is closed unless the answer had already ended."""
        if not self._ended:
            self._connection.close()    # connection_lost fails this Rest: on_done runs
            self._end(Broken("the reader stopped", True))
        self._pieces.clear()


class _Malformed(Exception):
    pass


class Node:
    """The pooled keep-alive connections to one upstream node (``http`` or ``https`` URL)."""

    def __init__(self, url: str, slots: asyncio.Semaphore, connect_timeout: float, read_timeout: float,
                 ssl_context: ssl.SSLContext | bool, keepalive: float = KEEPALIVE) -> None:
        parts = urlsplit(url)
        self.https = parts.scheme == "https"
        default_port = 443 if self.https else 80
        self.host = parts.hostname or "localhost"
        self.port = parts.port or default_port
        self._prefix = parts.path.rstrip("/")    # a node behind a gateway under a path
        host = f"[{self.host}]" if ":" in self.host else self.host
        self._host_line = (f"Host: {host}" + ("" if self.port == default_port else f":{self.port}") + "\r\n")
        self._ssl = _client_ssl(ssl_context) if self.https else None
        self._connect_timeout = connect_timeout
        self._read_timeout = read_timeout
        self._keepalive = keepalive
        self._idle: list[_Connection] = []
        self._slots = slots    # shared by the nodes of a pool: at most that many exchanges at once

    async def exchange(self, method: str, path_qs: str, headers: list[tuple[str, str]],
                       body: bytes | None, stream_over: int | None = None) -> Reply:
        """Send one request on an idle connection (or a new one) and return the whole answer;
        with ``stream_over``, an answer longer than that comes with its :attr:`Reply.rest` to
        read (the connection and its slot are held until the rest is read or closed)."""
        request = _request_bytes(method, self._prefix + path_qs, self._host_line, headers, body)
        await self._slots.acquire()
        try:
            connection = self._idle_connection() or await self._connect()
            try:
                reply = await connection.exchange(request, method == "HEAD", stream_over)
            except BaseException:
                # Also a cancel that lands after the answer came (the waiter was already done):
                # the connection is then in step, but nobody would pool or close it.
                connection.close()
                raise
        except BaseException:
            self._slots.release()
            raise
        if reply.rest is not None:   # the slot and the connection go with the rest
            reply.rest.on_done = functools.partial(self._done_with, connection)
        else:
            self._done_with(connection)
        return reply

    def _done_with(self, connection: _Connection) -> None:
        """Pool ``connection`` if it can be reused, else close it; give its slot back."""
        self._slots.release()
        if connection.reusable:
            now = connection.idle_since = time.monotonic()
            self._idle.append(connection)
            # The stack's bottom is its oldest: after a burst, connections no longer needed
            # would otherwise stay open as long as traffic keeps the top ones busy.
            while now - self._idle[0].idle_since > self._keepalive:
                self._idle.pop(0).close()
        else:
            connection.close()

    def close(self) -> None:
        while self._idle:
            self._idle.pop().close()

    def _idle_connection(self) -> _Connection | None:
        """The most recently used idle connection, unless idle for longer than ``keepalive``
        (then it and all older ones are closed: the pool is a stack)."""
        # time.monotonic(), not the loop's time: Python 3.11's get_running_loop() makes a
        # getpid() system call, and this runs on every exchange.
        now = time.monotonic()
        while self._idle:
            connection = self._idle.pop()
            if now - connection.idle_since > self._keepalive:
                connection.close()
                self.close()
                return None
            if connection.transport is not None and not connection.transport.is_closing():
                return connection
        return None

    async def _connect(self) -> _Connection:
        loop = asyncio.get_running_loop()
        try:
            _, connection = await asyncio.wait_for(loop.create_connection(
                lambda: _Connection(loop, self._read_timeout), self.host, self.port,
                ssl=self._ssl, server_hostname=self.host if self._ssl else None), self._connect_timeout)
        except TimeoutError:
            raise ConnectFailed(no_connection_within(self._connect_timeout)) from None
        except OSError as exc:   # ssl.SSLError (a failed handshake or verification) is one too
            raise ConnectFailed(getattr(exc, "strerror", None) or str(exc) or type(exc).__name__) from None
        return connection


def _client_ssl(context: ssl.SSLContext | bool) -> ssl.SSLContext:
    if isinstance(context, ssl.SSLContext):
        return context
    if context:
        return ssl.create_default_context()
    unverified = ssl.create_default_context()
    unverified.check_hostname = False
    unverified.verify_mode = ssl.CERT_NONE
    return unverified


def plain_request_line(method: str, path_qs: str) -> bool:
    """Whether this client writes the request line (a method of letters, a target without
    spaces or line breaks)."""
    return method.isalpha() and not any(c in path_qs for c in " \r\n")


def _request_bytes(method: str, path_qs: str, host_line: str, headers: list[tuple[str, str]],
                   body: bytes | None) -> bytes:
    """The request's head and body. Header names and values never hold CR or LF here (aiohttp's
    server refuses such requests), but a value that did would start a header of its own: refuse."""
    if not plain_request_line(method, path_qs):
        raise ValueError("the request line holds a space or a line break")
    lines = [f"{method} {path_qs} HTTP/1.1\r\n", host_line]
    for name, value in headers:
        if "\r" in value or "\n" in value or "\r" in name or "\n" in name:
            raise ValueError(f"header {name!r} holds a line break")
        lines.append(f"{name}: {value}\r\n")
    if body is not None and (body or method not in ("GET", "HEAD", "DELETE", "OPTIONS")):
        lines.append(f"Content-Length: {len(body)}\r\n")
    lines.append("\r\n")
    # aiohttp's server reads header bytes as UTF-8 with surrogateescape: the same bytes go on
    data = "".join(lines).encode("utf-8", "surrogateescape")
    return data + body if body else data
