"""neardup.proxy.transport.http1_client (the search path's whole-body upstream client) and Upstream.exchange's failover.

The upstream here is a scripted loopback server that answers each request with given bytes, so
every framing an HTTP/1.1 server may use (chunked with extensions and trailers, Content-Length,
close-delimited, interim 100, HEAD, 204) and every failure (reset before or during an answer,
silence, garbage) is exercised exactly; the real Elasticsearch paths are in test_proxy*.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

import pytest

from neardup.config import UpstreamConfig
from neardup.proxy.transport import errors, http1_client
from neardup.proxy.transport.upstream import Upstream


def asynchronous(test: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., None]:
    """Run an async test function on a fresh event loop (the suite has no asyncio plugin)."""
    @functools.wraps(test)
    def run(*args: Any, **kwargs: Any) -> None:
        asyncio.run(test(*args, **kwargs))
    return run


Script = Callable[[bytes, int], bytes | None]   # (request bytes, request number on the connection) -> answer


class ScriptedServer:
    """Answers each request (read up to the end of its head + Content-Length) with ``script``'s
    bytes; ``None`` closes the connection without answering. Records connections and requests."""

    def __init__(self, script: Script, close_after: bool = False) -> None:
        self.script = script
        self.close_after = close_after
        self.connections = 0
        self.open = 0          # connections the client has not closed yet
        self.requests: list[bytes] = []
        self.server: asyncio.base_events.Server | None = None

    async def __aenter__(self) -> ScriptedServer:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.open += 1
        number = 0
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":", 1)[1])
                request = head + (await reader.readexactly(length) if length else b"")
                self.requests.append(request)
                answer = self.script(request, number)
                number += 1
                if answer is None:
                    break
                writer.write(answer)
                await writer.drain()
                if self.close_after:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self.open -= 1
            writer.close()


def node(url: str, read_timeout: float = 5.0, limit: int = 10) -> http1_client.Node:
    return http1_client.Node(url, asyncio.Semaphore(limit), 2.0, read_timeout, True)


def ok(body: bytes, extra: bytes = b"") -> bytes:
    return (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Elastic-Product: Elasticsearch\r\n"
            + extra + b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)


def chunked(*chunks: bytes, trailer: bytes = b"") -> bytes:
    out = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    for i, chunk in enumerate(chunks):
        out += f"{len(chunk):x}".encode() + (b";ext=1" if i == 0 else b"") + b"\r\n" + chunk + b"\r\n"
    return out + b"0\r\n" + trailer + b"\r\n"


@asynchronous
async def test_chunked_answer_with_extensions_and_trailers_is_joined_and_the_connection_reused() -> None:
    body = b'{"hits":' + b"x" * 300_000 + b"}"
    async with ScriptedServer(lambda req, n: chunked(body[:1000], body[1000:], trailer=b"X-T: 1\r\n")) as server:
        pool = node(server.url)
        for _ in range(3):
            reply = await pool.exchange("POST", "/i/_search?q=1", [("Content-Type", "application/json")], b"{}")
            assert (reply.status, reply.body) == (200, body)
            assert reply.headers.getall("Content-Type") == ["application/json"]
        assert server.connections == 1 and len(server.requests) == 3
        pool.close()


@asynchronous
async def test_request_bytes_are_exactly_method_target_headers_and_body() -> None:
    async with ScriptedServer(lambda req, n: ok(b"{}")) as server:
        pool = node(server.url)
        await pool.exchange("POST", "/a%2Fb/_search?x=%20y", [("Authorization", "Basic dTpw"),
                                                             ("X-Dup", "1"), ("X-Dup", "2")], b'{"q":1}')
        port = server.url.rsplit(":", 1)[1]
        assert server.requests[0] == (f"POST /a%2Fb/_search?x=%20y HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                                      "Authorization: Basic dTpw\r\nX-Dup: 1\r\nX-Dup: 2\r\n"
                                      'Content-Length: 7\r\n\r\n{"q":1}').encode()
        pool.close()


@pytest.mark.parametrize("answer, status, body", [
    (b"HTTP/1.1 100 Continue\r\n\r\n" + ok(b'{"a":1}'), 200, b'{"a":1}'),
    (b"HTTP/1.1 204 No Content\r\n\r\n", 204, b""),
    (ok(b"", extra=b"Warning: 299 Elasticsearch \"deprecated\"\r\n"), 200, b""),
    (b"HTTP/1.1 404 Not Found\r\nContent-Length: 2\r\n\r\n{}", 404, b"{}"),
])
@asynchronous
async def test_framings(answer: bytes, status: int, body: bytes) -> None:
    async with ScriptedServer(lambda req, n: answer) as server:
        pool = node(server.url)
        reply = await pool.exchange("GET", "/", [], None)
        assert (reply.status, reply.body) == (status, body)
        again = await pool.exchange("GET", "/", [], None)   # and the connection is still in step
        assert (again.status, again.body) == (status, body)
        assert server.connections == 1
        pool.close()


@asynchronous
async def test_head_answer_has_no_body_even_with_a_content_length() -> None:
    async with ScriptedServer(lambda req, n: b"HTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\n") as server:
        pool = node(server.url)
        for _ in range(2):
            reply = await pool.exchange("HEAD", "/i", [], None)
            assert (reply.status, reply.body, reply.headers["Content-Length"]) == (200, b"", "99")
        assert server.connections == 1
        pool.close()


@asynchronous
async def test_close_delimited_answer_and_connection_close_are_not_reused() -> None:
    answers = {0: b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n{\"until\":\"close\"}"}
    async with ScriptedServer(lambda req, n: answers[0], close_after=True) as server:
        pool = node(server.url)
        for _ in range(2):
            reply = await pool.exchange("GET", "/", [], None)
            assert reply.body == b'{"until":"close"}'
        assert server.connections == 2
        pool.close()
    async with ScriptedServer(lambda req, n: ok(b"{}", extra=b"Connection: close\r\n")) as server:
        pool = node(server.url)
        for _ in range(2):
            assert (await pool.exchange("GET", "/", [], None)).body == b"{}"
        assert server.connections == 2
        pool.close()


@pytest.mark.parametrize("answer", [
    b"HTTP/1.1 2x0 OK\r\nContent-Length: 0\r\n\r\n",
    b"SPDY/3 200 OK\r\nContent-Length: 0\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}",
    b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}XX0\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}garbage",
    b"HTTP/1.1 200 OK\r\n folded: header\r\nContent-Length: 0\r\n\r\n",
])
@asynchronous
async def test_a_malformed_answer_is_broken_after_an_answer(answer: bytes) -> None:
    async with ScriptedServer(lambda req, n: answer) as server:
        pool = node(server.url)
        with pytest.raises(http1_client.Broken) as caught:
            await pool.exchange("GET", "/", [], None)
        assert caught.value.answered
        pool.close()


@asynchronous
async def test_silence_is_a_read_timeout_and_the_connection_is_dropped() -> None:
    async with ScriptedServer(lambda req, n: b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n{") as server:
        pool = node(server.url, read_timeout=0.3)
        with pytest.raises(http1_client.ReadTimeout):
            await pool.exchange("GET", "/", [], None)
        with pytest.raises(http1_client.ReadTimeout):
            await pool.exchange("GET", "/", [], None)
        assert server.connections == 2
        pool.close()


@asynchronous
async def test_refused_connection_is_connect_failed() -> None:
    async with ScriptedServer(lambda req, n: None) as server:
        url = server.url
    with pytest.raises(http1_client.ConnectFailed):
        await node(url).exchange("GET", "/", [], None)


@asynchronous
async def test_line_breaks_in_headers_or_target_are_refused_before_sending() -> None:
    async with ScriptedServer(lambda req, n: ok(b"{}")) as server:
        pool = node(server.url)
        with pytest.raises(ValueError):
            await pool.exchange("GET", "/", [("X-A", "1\r\nX-Injected: 1")], None)
        with pytest.raises(ValueError):
            await pool.exchange("GET", "/ HTTP/1.1\r\nX: y", [], None)
        assert server.requests == []
        pool.close()


@asynchronous
async def test_the_limit_queues_requests_instead_of_opening_more_connections() -> None:
    async with ScriptedServer(lambda req, n: ok(b"{}")) as server:
        pool = node(server.url, limit=2)
        replies = await asyncio.gather(*(pool.exchange("GET", "/", [], None) for _ in range(20)))
        assert all(r.body == b"{}" for r in replies)
        assert server.connections <= 2
        pool.close()


# -- Upstream.exchange: failover, 502, 504 ----------------------------------------------------
@contextlib.asynccontextmanager
async def upstream(*urls: str, read_timeout: float = 5.0) -> AsyncIterator[Upstream]:
    """A started :class:`Upstream` over ``urls``, closed afterwards."""
    started = Upstream(UpstreamConfig(urls=list(urls), request_timeout=read_timeout, connect_timeout=2.0))
    await started.start()
    try:
        yield started
    finally:
        await started.close()


@asynchronous
async def test_exchange_skips_a_dead_node_and_reports_502_when_all_are_dead() -> None:
    async with ScriptedServer(lambda req, n: None) as dead:
        dead_url = dead.url
    async with ScriptedServer(lambda req, n: ok(b'{"ok":1}')) as live:
        async with upstream(dead_url, live.url) as up:
            for _ in range(3):
                assert (await up.exchange("POST", "/i/_search", [], b"{}")).body == b'{"ok":1}'
    async with upstream(dead_url) as up:
        with pytest.raises(errors.ProxyError) as caught:
            await up.exchange("POST", "/i/_search", [], b"{}")
        assert caught.value.status == 502 and dead_url.split("//")[1] in caught.value.reason


@asynchronous
async def test_a_read_whose_connection_breaks_before_any_answer_is_sent_once_more() -> None:
    # The first request is dropped unanswered; the resend (a new connection) gets an answer.
    calls: list[bytes] = []
    drop = [True]

    def script(req: bytes, n: int) -> bytes | None:
        calls.append(req)
        return None if drop and drop.pop() else ok(b'{"second":1}')

    async with ScriptedServer(script) as server:
        async with upstream(server.url) as up:
            reply = await up.exchange("POST", "/i/_search", [], b"{}")
            assert reply.body == b'{"second":1}' and len(calls) == 2
            calls.clear()
            drop.append(True)   # the next request is dropped again
            with pytest.raises(errors.ProxyError) as caught:   # a write is never sent twice
                await up.exchange("POST", "/i/_doc/1", [], b"{}")
            assert caught.value.status == 502 and len(calls) == 1


@asynchronous
async def test_a_connection_that_breaks_mid_answer_is_502_and_not_resent() -> None:
    calls: list[bytes] = []

    def script(req: bytes, n: int) -> bytes | None:
        calls.append(req)
        return b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{\"partial\""

    async with ScriptedServer(script, close_after=True) as server:
        async with upstream(server.url) as up:
            with pytest.raises(errors.ProxyError) as caught:
                await up.exchange("POST", "/i/_search", [], b"{}")
            assert caught.value.status == 502 and len(calls) == 1


@asynchronous
async def test_exchange_timeout_is_504() -> None:
    async with ScriptedServer(lambda req, n: b"HTTP/1.1 200 OK\r\n") as server:
        async with upstream(server.url, read_timeout=0.3) as up:
            with pytest.raises(errors.ProxyError) as caught:
                await up.exchange("POST", "/i/_search", [], b"{}")
            assert caught.value.status == 504


@asynchronous
async def test_a_cancel_that_lands_after_the_answer_came_neither_leaks_nor_pools_the_connection(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The answer completes the waiter, and the client goes away before the task resumes: the
    # connection must go back to the pool (in step) or be closed, never be left open and lost.
    connections: list[http1_client._Connection] = []
    finish = http1_client._Connection._finish

    def finish_then_cancel(self: http1_client._Connection, body: bytes, waiter: asyncio.Future[http1_client.Reply]) -> None:
        connections.append(self)
        finish(self, body, waiter)
        task.cancel()

    async with ScriptedServer(lambda req, n: ok(b"{}")) as server:
        pool = node(server.url, limit=1)
        monkeypatch.setattr(http1_client._Connection, "_finish", finish_then_cancel)
        task = asyncio.ensure_future(pool.exchange("GET", "/", [], None))
        with pytest.raises(asyncio.CancelledError):
            await task
        monkeypatch.undo()
        [connection] = connections
        assert connection in pool._idle or connection.transport is None or connection.transport.is_closing()
        assert (await pool.exchange("GET", "/", [], None)).body == b"{}"   # the slot came back
        pool.close()


@asynchronous
async def test_a_connection_idle_longer_than_the_keep_alive_time_is_not_reused() -> None:
    # As aiohttp's keepalive_timeout (30 s) did: a connection idle that long may have been
    # dropped silently on the way (a NAT or firewall idle timeout, no FIN): a request on it would
    # wait for the whole read timeout and fail with 504 instead of going out on a new one.
    async with ScriptedServer(lambda req, n: ok(b"{}")) as server:
        pool = http1_client.Node(server.url, asyncio.Semaphore(4), 2.0, 5.0, True, keepalive=0.2)
        assert (await pool.exchange("GET", "/", [], None)).body == b"{}"
        assert (await pool.exchange("GET", "/", [], None)).body == b"{}"
        assert server.connections == 1
        await asyncio.sleep(0.3)
        assert (await pool.exchange("GET", "/", [], None)).body == b"{}"
        assert server.connections == 2
        pool.close()


@asynchronous
async def test_connections_left_idle_after_a_burst_are_closed_while_traffic_goes_on() -> None:
    # The pool is a stack: steady traffic reuses its top; the connections a burst opened sink to
    # the bottom and are closed once idle for the keep-alive time, not kept open for good.
    async with ScriptedServer(lambda req, n: ok(b"{}")) as server:
        pool = http1_client.Node(server.url, asyncio.Semaphore(8), 2.0, 5.0, True, keepalive=0.3)
        await asyncio.gather(*(pool.exchange("GET", "/", [], None) for _ in range(5)))
        assert server.connections == 5
        for _ in range(8):
            assert (await pool.exchange("GET", "/", [], None)).body == b"{}"
            await asyncio.sleep(0.1)
        await asyncio.sleep(0.05)
        assert server.connections == 5 and server.open == 1
        pool.close()


@asynchronous
async def test_a_path_in_the_node_url_prefixes_every_request_as_on_the_streaming_path() -> None:
    # upstream.urls may name Elasticsearch behind a gateway under a path; Upstream.send (aiohttp)
    # sends url + path_qs, and so must the search path, or collapsed searches miss the node.
    async with ScriptedServer(lambda req, n: ok(b"{}")) as server:
        async with upstream(server.url + "/es/") as up:
            await up.exchange("POST", "/i/_search?q=1", [], b"{}")
            response = await up.send("GET", "/i/_count", [])
            response.release()
        assert [r.split(b" ", 2)[1] for r in server.requests] == [b"/es/i/_search?q=1", b"/es/i/_count"]


@asynchronous
async def test_an_answer_arriving_between_a_cancel_and_its_delivery_is_dropped_quietly() -> None:
    # task.cancel() cancels the waiter at once; the task runs its cleanup on a later turn of the
    # loop. Bytes read in between must not raise out of data_received (asyncio would log a
    # "Fatal error: protocol.data_received() call failed" traceback) and the connection closes.
    class Transport(asyncio.Transport):
        closed = False

        def write(self, data: Any) -> None:
            pass

        def close(self) -> None:
            self.closed = True

        def is_closing(self) -> bool:
            return self.closed

    connection = http1_client._Connection(asyncio.get_running_loop(), 5.0)
    transport = Transport()
    connection.connection_made(transport)
    task = asyncio.ensure_future(connection.exchange(b"GET / HTTP/1.1\r\n\r\n", False))
    await asyncio.sleep(0)
    task.cancel()
    connection.data_received(ok(b"{}"))     # must not raise InvalidStateError
    with pytest.raises(asyncio.CancelledError):
        await task
    assert transport.closed and not connection.reusable


@asynchronous
async def test_a_connection_lost_before_its_request_is_an_unanswered_break() -> None:
    # A node that resets new connections can do so between connect and the first write: the
    # request was never sent, so the exchange fails as an unanswered break, never an assertion.
    connection = http1_client._Connection(asyncio.get_running_loop(), 5.0)
    connection.connection_made(asyncio.Transport())
    connection.connection_lost(ConnectionResetError("reset by peer"))
    with pytest.raises(http1_client.Broken) as caught:
        await connection.exchange(b"GET / HTTP/1.1\r\n\r\n", False)
    assert caught.value.answered is False and not connection.reusable


@asynchronous
async def test_read_timeout_counts_from_the_last_bytes_not_the_first() -> None:
    async def trickle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n")
        for byte in b"abcde":   # every gap under the timeout, the whole answer over it
            await asyncio.sleep(0.12)
            writer.write(bytes([byte]))
        await reader.read()
        writer.close()

    server = await asyncio.start_server(trickle, "127.0.0.1", 0)
    pool = node(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}", read_timeout=0.3)
    reply = await pool.exchange("GET", "/", [], None)
    assert reply.body == b"abcde"
    pool.close()
    server.close()


@asynchronous
async def test_a_pooled_connection_outlives_its_last_read_timeout_and_times_out_again() -> None:
    whole, silent = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n{"
    async with ScriptedServer(lambda req, n: whole if n < 2 else silent) as server:
        pool = node(server.url, read_timeout=0.2)
        assert (await pool.exchange("GET", "/", [], None)).body == b"ok"
        await asyncio.sleep(0.5)   # idle past the first exchange's deadline: still pooled, still open
        assert (await pool.exchange("GET", "/", [], None)).body == b"ok"
        with pytest.raises(http1_client.ReadTimeout):
            await pool.exchange("GET", "/", [], None)
        assert server.connections == 1
        pool.close()
