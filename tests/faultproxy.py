"""A small TCP fault injector on loopback, for the reliability tests (not a pytest plugin).

:class:`FaultProxy` listens on ``127.0.0.1:<free port>`` and, for each accepted connection,
does what its current :class:`Fault` says:

* ``pass``: forward bytes both ways to the target (an Elasticsearch node), unchanged;
* ``delay``: forward, but hold each response's first byte back ``delay`` seconds;
* ``stall``: forward ``after_bytes`` bytes of each response, then nothing more (the connection
  stays open, as a hung server's does);
* ``cut``: forward ``after_bytes`` bytes of each response, then close both connections;
* ``reset``: accept, then reset the connection (RST) before any byte;
* ``respond``: be the server: read each HTTP/1.1 request and answer it with ``response``
  (raw bytes: status line, headers, body, exactly as given; a callable gets the
  :class:`Received` request and returns them), closing afterwards when ``close_after`` is set.

"Each response" means the bytes the target sends after a request arrived on that connection;
the fault in force when the request arrives applies to its answer, so a test sets the fault and
then sends the request. Every request head the injector sees is kept in :attr:`FaultProxy.seen`
(``respond`` mode: whole requests, with their bodies).

:func:`blackhole` gives a port that accepts no connection at all: its listen backlog is full,
so the kernel drops new SYNs and a connect attempt hangs until the client's connect timeout.

Runs its own event loop in a daemon thread; usable from synchronous tests.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Literal

Kind = Literal["pass", "delay", "stall", "cut", "reset", "respond"]


@dataclass(frozen=True)
class Received:
    """One request as the injector received it."""

    head: bytes          # request line and headers, without the blank line
    body: bytes

    @property
    def request_line(self) -> str:
        return self.head.split(b"\r\n", 1)[0].decode("latin-1")

    def headers(self) -> list[tuple[str, str]]:
        """Header (name, value) pairs in order, as sent (latin-1 decoded)."""
        lines = self.head.split(b"\r\n")[1:]
        pairs = []
        for line in lines:
            name, _, value = line.partition(b":")
            pairs.append((name.decode("latin-1"), value.strip().decode("latin-1")))
        return pairs

    def header(self, name: str) -> list[str]:
        return [v for n, v in self.headers() if n.lower() == name.lower()]


Responder = Callable[[Received], bytes]


@dataclass(frozen=True)
class Fault:
    kind: Kind = "pass"
    after_bytes: int = 0
    delay: float = 0.0
    response: bytes | Responder = b""
    close_after: bool = False


def http_response(status: int, body: bytes, content_type: str = "application/json",
                  headers: tuple[tuple[str, str], ...] = (), declared_length: int | None = None,
                  close: bool = False) -> bytes:
    """Raw HTTP/1.1 response bytes; ``declared_length`` may lie about the body's length."""
    length = len(body) if declared_length is None else declared_length
    lines = [f"HTTP/1.1 {status} X", f"Content-Type: {content_type}", f"Content-Length: {length}",
             "X-elastic-product: Elasticsearch"]
    lines += [f"{n}: {v}" for n, v in headers]
    if close:
        lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def chunked_response(status: int, chunks: list[bytes], content_type: str = "application/json",
                     finish: bool = True) -> bytes:
    """A chunked response; ``finish=False`` leaves out the last chunk (a broken-off body)."""
    head = (f"HTTP/1.1 {status} X\r\nContent-Type: {content_type}\r\nTransfer-Encoding: chunked\r\n"
            "X-elastic-product: Elasticsearch\r\n\r\n").encode()
    body = b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in chunks if c)
    return head + body + (b"0\r\n\r\n" if finish else b"")


@dataclass
class _Exchange:
    fault: Fault = field(default_factory=Fault)
    sent: int = 0
    started: bool = False


class FaultProxy:
    """``with FaultProxy("http://127.0.0.1:9200") as faults: faults.fault = Fault("stall", 100)``."""

    def __init__(self, target: str | None = None, fault: Fault | None = None) -> None:
        self.target = _host_port(target) if target else None
        self.fault = fault or Fault("pass" if target else "respond")
        self.seen: list[Received] = []
        self.accepted = 0
        self.open_connections = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.base_events.Server | None = None
        self._ready = threading.Event()
        self._stopped: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, daemon=True, name="faultproxy")
        self._tasks: set[asyncio.Task] = set()
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # -- life cycle -------------------------------------------------------------------------
    def __enter__(self) -> FaultProxy:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("fault proxy did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._loop is not None and self._stopped is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._stopped.set)
        self._thread.join(10)

    def _run(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stopped = asyncio.Event()
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        self._ready.set()
        await self._stopped.wait()
        self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    # -- one connection ---------------------------------------------------------------------
    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self.accepted += 1
        self.open_connections += 1
        try:
            fault = self.fault
            if fault.kind == "reset":
                _reset(writer)
                return
            if fault.kind == "respond" or self.target is None:
                await self._serve(reader, writer)
            else:
                await self._forward(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError, OSError):
            pass
        except asyncio.CancelledError:
            pass
        finally:
            self.open_connections -= 1
            writer.close()
            self._tasks.discard(task)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            received = await _read_request(reader)
            if received is None:
                return
            self.seen.append(received)
            fault = self.fault
            response = fault.response(received) if callable(fault.response) else fault.response
            if fault.delay:
                await asyncio.sleep(fault.delay)
            writer.write(response)
            await writer.drain()
            if fault.close_after or b"connection: close" in response.split(b"\r\n\r\n", 1)[0].lower():
                return

    async def _forward(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        assert self.target is not None
        up_reader, up_writer = await asyncio.open_connection(*self.target)
        exchange = _Exchange()
        done = asyncio.Event()

        async def requests() -> None:
            try:
                while chunk := await reader.read(65536):
                    if not exchange.started or exchange.sent:
                        exchange.fault, exchange.sent, exchange.started = self.fault, 0, True
                        if b"\r\n\r\n" in chunk:
                            self.seen.append(Received(chunk.split(b"\r\n\r\n", 1)[0], b""))
                    up_writer.write(chunk)
                    await up_writer.drain()
            finally:
                done.set()

        async def responses() -> None:
            try:
                while chunk := await up_reader.read(65536):
                    fault = exchange.fault
                    if fault.kind == "delay" and exchange.sent == 0:
                        await asyncio.sleep(fault.delay)
                    if fault.kind in ("stall", "cut"):
                        room = max(0, fault.after_bytes - exchange.sent)
                        if len(chunk) > room:
                            writer.write(chunk[:room])
                            await writer.drain()
                            exchange.sent += room
                            if fault.kind == "cut":
                                return
                            await done.wait()  # stalled: hold the connection until the client leaves
                            return
                    writer.write(chunk)
                    await writer.drain()
                    exchange.sent += len(chunk)
            finally:
                done.set()

        tasks = [asyncio.ensure_future(requests()), asyncio.ensure_future(responses())]
        try:
            await done.wait()
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            up_writer.close()


def _host_port(url: str) -> tuple[str, int]:
    host, _, port = url.split("//", 1)[-1].rstrip("/").rpartition(":")
    return host, int(port)


def _reset(writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    writer.transport.abort()


async def _read_request(reader: asyncio.StreamReader) -> Received | None:
    """One HTTP/1.1 request (Content-Length or chunked body); None at end of stream."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        return None
    head = head[:-4]
    length = 0
    chunked = False
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip() or 0)
        elif name.strip().lower() == b"transfer-encoding" and b"chunked" in value.lower():
            chunked = True
    if chunked:
        body = bytearray()
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";")[0].strip(), 16)
            data = await reader.readexactly(size + 2)
            if size == 0:
                break
            body += data[:-2]
        return Received(head, bytes(body))
    return Received(head, await reader.readexactly(length) if length else b"")


@contextlib.contextmanager
def blackhole() -> Iterator[str]:
    """A URL whose port never completes a TCP connection (full backlog: SYNs are dropped)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    fillers = []
    for _ in range(3):
        filler = socket.socket()
        filler.setblocking(False)
        with contextlib.suppress(BlockingIOError):
            filler.connect(("127.0.0.1", port))
        fillers.append(filler)
    time.sleep(0.1)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        for s in fillers:
            s.close()
        listener.close()


def closed_port_url() -> str:
    """A loopback URL where nothing listens (connection refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


def es_like_response(received: Received) -> bytes:
    """A plausible Elasticsearch answer to ``received``: a search result for ``_search``, one per
    search for ``_msearch``, ``{"acknowledged": true}`` for anything else (for header tests)."""
    import json

    path = received.request_line.split(" ")[1].split("?")[0]
    hits = [{"_index": "i", "_id": str(k), "_score": 1.0 - k / 10, "_source": {"title": f"t{k}"}}
            for k in range(3)]
    result = {"took": 1, "timed_out": False, "_shards": {"total": 1, "successful": 1, "skipped": 0, "failed": 0},
              "hits": {"total": {"value": len(hits), "relation": "eq"}, "max_score": 1.0, "hits": hits}}
    if path.endswith("/_msearch"):
        searches = len([line for line in received.body.split(b"\n") if line.strip()]) // 2
        value: object = {"took": 1, "responses": [{**result, "status": 200} for _ in range(searches)]}
    elif path.endswith("/_search"):
        value = result
    else:
        value = {"acknowledged": True}
    return http_response(200, json.dumps(value).encode())
