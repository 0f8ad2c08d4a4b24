"""The proxy as a real process under overload and malformed HTTP.

* ``proxy.max_in_flight``: one request more than the limit is answered at once with 429 and
  Elasticsearch's own ``es_rejected_execution_exception`` body, counted, never sent upstream;
  the held requests complete; health and metrics are always answered.
* Bytes that are not valid HTTP (bad request line, bad header, invalid chunked encoding, a line
  over aiohttp's limit...) get an Elasticsearch-style JSON 400 from aiohttp's own parser
  path, not its plain-text one, and never a traceback.

The upstream here is :class:`HoldingUpstream`, a tiny HTTP server on loopback that holds every
request under ``/held`` until the test releases them and answers the rest at once.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import re
import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from aiohttp.http_exceptions import BadHttpMessage, BadHttpMethod, BadStatusLine, InvalidHeader, InvalidURLError
from pydantic import ValidationError

from neardup.config import Config, ConfigError, load_config
from neardup.proxy.transport import errors
from neardup.proxy.transport.errors import malformed_problem
from tests.faultproxy import _read_request, es_like_response
from tests.test_proxy_server import ProxyProcess, get

LIMIT = 4


class HoldingUpstream:
    """An Elasticsearch stand-in: requests whose path starts with ``/held`` wait for
    :meth:`release`; everything else is answered at once."""

    def __init__(self) -> None:
        self.held = 0          # requests under /held received so far
        self.received: list[str] = []
        self.port = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._release: asyncio.Event | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> HoldingUpstream:
        self._thread.start()
        assert self._ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._loop is not None and self._stop is not None
        self.release()
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)

    def release(self) -> None:
        assert self._loop is not None and self._release is not None
        self._loop.call_soon_threadsafe(self._release.set)

    def wait_held(self, count: int, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while self.held < count and time.monotonic() < deadline:
            time.sleep(0.02)
        assert self.held == count, f"{self.held} requests reached the upstream, expected {count}"

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._release, self._stop = asyncio.Event(), asyncio.Event()
        server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        await self._stop.wait()
        server.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        assert self._release is not None
        try:
            while (received := await _read_request(reader)) is not None:
                path = received.request_line.split(" ")[1]
                self.received.append(path)
                if path.startswith("/held"):
                    self.held += 1
                    await self._release.wait()
                writer.write(es_like_response(received))
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()


@pytest.fixture
def upstream() -> Iterator[HoldingUpstream]:
    with HoldingUpstream() as holding:
        yield holding


def metric(url: str, name: str) -> float:
    status, text = get(url + "/_neardup/metrics")
    assert status == 200
    found = re.search(rb"^" + name.encode() + rb"(?:\{[^}]*\})? (\S+)$", text, re.M)
    return float(found.group(1)) if found else 0.0


# ------------------------------------------------------------------ configuration

def test_max_in_flight_is_configured_and_validated(tmp_path: Path) -> None:
    assert Config().proxy.max_in_flight == 512
    assert Config.model_validate({"proxy": {"max_in_flight": 0}}).proxy.max_in_flight == 0
    with pytest.raises(ValidationError, match="max_in_flight"):
        Config.model_validate({"proxy": {"max_in_flight": -1}})
    path = tmp_path / "neardup.toml"
    path.write_text("[proxy]\nmax_in_flight = 8\n")
    assert load_config(path, environ={}).proxy.max_in_flight == 8
    assert load_config(path, environ={"NEARDUP_PROXY__MAX_IN_FLIGHT": "64"}).proxy.max_in_flight == 64
    with pytest.raises(ConfigError, match="max_in_flight"):
        load_config(path, environ={"NEARDUP_PROXY__MAX_IN_FLIGHT": "many"})


# ------------------------------------------------------------------ overload shedding

def test_one_request_over_the_limit_gets_429_and_the_held_ones_complete(upstream: HoldingUpstream) -> None:
    proxy = ProxyProcess(upstream.url, NEARDUP_PROXY__MAX_IN_FLIGHT=str(LIMIT))
    try:
        with ThreadPoolExecutor(LIMIT + 1) as pool:
            futures = [pool.submit(get, f"{proxy.url}/held-{k}/_doc/1?pretty", 60) for k in range(LIMIT + 1)]
            # The limit's worth are held upstream; the one more came back at once with 429.
            upstream.wait_held(LIMIT)
            deadline = time.monotonic() + 30
            while not any(f.done() for f in futures) and time.monotonic() < deadline:
                time.sleep(0.02)
            done = [f.result() for f in futures if f.done()]
            assert len(done) == 1, "exactly one request is refused while the others are held"
            status, body = done[0]
            assert status == 429
            reason = ("rejected execution: this proxy worker already handles 4 requests "
                      "(proxy.max_in_flight = 4); retry later")
            cause = {"type": "es_rejected_execution_exception", "reason": reason}
            assert json.loads(body) == {"error": {"root_cause": [cause], **cause}, "status": 429}
            assert body.startswith(b'{\n  "error" : {\n'), "?pretty is honoured on the 429 too"

            # Health and metrics are never shed, even at the limit.
            status, health = get(proxy.url + "/_neardup/health")
            assert status == 200 and json.loads(health)["proxy"]["in_flight_requests"] == LIMIT + 1
            assert metric(proxy.url, "neardup_proxy_rejected_total") == 1
            assert metric(proxy.url, "neardup_proxy_in_flight_requests") == LIMIT + 1
            # The refused request never reached the upstream.
            assert upstream.held == LIMIT

            upstream.release()
            held = [f.result(60) for f in futures if f.result(60)[0] != 429]
        assert len(held) == LIMIT and all(code == 200 for code, _ in held)
        assert all(json.loads(text) == {"acknowledged": True} for _, text in held)

        # Room again: the next request goes through.
        assert get(proxy.url + "/held-after/_doc/1")[0] == 200
        assert metric(proxy.url, "neardup_proxy_rejected_total") == 1
        status, text = get(proxy.url + "/_neardup/metrics")
        assert b'neardup_proxy_requests_total{route="rejected",status="429"} 1' in text
        assert sum(1 for path in upstream.received if path.startswith("/held")) == LIMIT + 1
        # The proxy's own errors are pretty-printed on request, compact otherwise.
        status, body = get(proxy.url + "/i/_search?neardup_threshold=2&pretty")
        assert status == 400 and body.startswith(b'{\n  "error" : {\n') and b"neardup_threshold" in body
        status, body = get(proxy.url + "/i/_search?neardup_threshold=2&pretty=false")
        assert status == 400 and body.startswith(b'{"error":{')
    finally:
        code, err = proxy.stop()
    assert code == 0 and "Traceback" not in err


def test_the_official_client_retries_the_429_and_reads_it_as_an_es_error(upstream: HoldingUpstream) -> None:
    from elasticsearch import ApiError, Elasticsearch

    proxy = ProxyProcess(upstream.url, NEARDUP_PROXY__MAX_IN_FLIGHT="1")
    client = Elasticsearch(proxy.url, max_retries=3)   # 429 is retried by default
    try:
        with ThreadPoolExecutor(1) as pool:
            blocker = pool.submit(get, f"{proxy.url}/held/_doc/1", 60)
            upstream.wait_held(1)
            with pytest.raises(ApiError) as caught:
                client.get(index="other", id="1")
            assert caught.value.meta.status == 429
            assert caught.value.error == "es_rejected_execution_exception"
            assert "proxy.max_in_flight = 1" in str(caught.value.info)
            assert metric(proxy.url, "neardup_proxy_rejected_total") == 4   # the first try and 3 retries
            upstream.release()
            assert blocker.result(60)[0] == 200
        assert client.get(index="other", id="1").meta.status == 200   # room again
        assert "/other/_doc/1" in upstream.received
    finally:
        client.close()
        code, err = proxy.stop()
    assert code == 0 and "Traceback" not in err


def test_zero_means_no_limit(upstream: HoldingUpstream) -> None:
    proxy = ProxyProcess(upstream.url, NEARDUP_PROXY__MAX_IN_FLIGHT="0")
    try:
        with ThreadPoolExecutor(8) as pool:
            futures = [pool.submit(get, f"{proxy.url}/held-{k}/_doc/1", 60) for k in range(8)]
            upstream.wait_held(8)
            upstream.release()
            assert all(f.result(60)[0] == 200 for f in futures)
        assert metric(proxy.url, "neardup_proxy_rejected_total") == 0
    finally:
        proxy.stop()


# ------------------------------------------------------------------ malformed HTTP

MALFORMED = {
    "request line": b"GARBAGE\r\n\r\n",
    "method": b"G(T /_search HTTP/1.1\r\nHost: x\r\n\r\n",
    "HTTP version": b"GET /_search HTTP/9.9\r\nHost: x\r\n\r\n",
    "header name": b"GET /_search HTTP/1.1\r\nHost: x\r\nBad Header: v\r\n\r\n",
    "header value": b"GET /_search HTTP/1.1\r\nHost: x\r\nAuthorization: Basic a\x01b\r\n\r\n",
    "header too large": b"GET / HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + b"s" * 20_000 + b"\r\n\r\n",
    "request line too long": b"GET /" + b"a" * 20_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",
    "chunk size": (b"POST /i/_search HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                   b"Transfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n"),
    "Content-Length": b"POST /_count HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n{}",
    "Content-Length with chunked": (b"POST /_count HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n"
                                    b"Transfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n"),
}
PROBLEMS = {
    "request line": "Invalid method encountered", "method": "Invalid method encountered",
    "HTTP version": "Bad status line", "header name": "Invalid header token",
    "header value": "Invalid header value char",
    "header too large": "a request line or header is longer than 8190 bytes",
    "request line too long": "a request line or header is longer than 8190 bytes",
    "chunk size": "Invalid character in chunk size",
    "Content-Length": "Invalid character in Content-Length",
    "Content-Length with chunked": "Transfer-Encoding can't be present with Content-Length",
}


def exchange(url: str, *parts: bytes, pause: float = 0.0) -> tuple[int, dict[str, str], bytes]:
    """Send raw bytes (``parts`` with ``pause`` seconds between them), read until the proxy
    closes the connection, parse the one response."""
    host, port = url.rsplit("/", 1)[-1].rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        for k, part in enumerate(parts):
            if k:
                time.sleep(pause)
            sock.sendall(part)
        data = b""
        while chunk := sock.recv(65536):   # the proxy closes the connection after the answer
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ")[1])
    headers = {name.lower(): value.strip() for name, _, value in (line.partition(":") for line in lines[1:])}
    assert int(headers["content-length"]) == len(body), "exactly one complete response"
    return status, headers, body


def assert_es_400(status: int, headers: dict[str, str], body: bytes, problem: str) -> None:
    assert status == 400
    assert headers["content-type"].startswith("application/json")
    reason = f"malformed HTTP request: {problem}"
    cause = {"type": "illegal_argument_exception", "reason": reason}
    assert json.loads(body) == {"error": {"root_cause": [cause], **cause}, "status": 400}


@pytest.fixture(scope="module")
def proxy_for_garbage() -> Iterator[ProxyProcess]:
    with HoldingUpstream() as holding:
        proxy = ProxyProcess(holding.url)
        yield proxy
        proxy.stop()


@pytest.mark.parametrize("case", list(MALFORMED))
def test_malformed_http_gets_an_elasticsearch_json_400(proxy_for_garbage: ProxyProcess, case: str) -> None:
    status, headers, body = exchange(proxy_for_garbage.url, MALFORMED[case])
    assert_es_400(status, headers, body, PROBLEMS[case])
    assert b"Traceback" not in body and b"sssss" not in body and b"a\\x01b" not in body


def test_a_chunked_body_that_breaks_off_midway_gets_a_400_at_once(proxy_for_garbage: ProxyProcess) -> None:
    # aiohttp parses the headers and the first chunk, hands the request to the proxy, and then
    # meets an invalid chunk size: the request reading the body fails (it used to wait forever).
    for path in (b"/_count", b"/i/_search", b"/_bulk"):
        started = time.monotonic()
        status, headers, body = exchange(
            proxy_for_garbage.url,
            b"POST " + path + b" HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n1\r\n{\r\n", b"zz\r\n}\r\n0\r\n\r\n", pause=0.3)
        assert_es_400(status, headers, body, "Invalid character in chunk size")
        assert time.monotonic() - started < 10


def test_garbage_leaves_no_traceback_and_the_proxy_keeps_serving() -> None:
    with HoldingUpstream() as holding:
        proxy = ProxyProcess(holding.url)
        try:
            for case, data in MALFORMED.items():
                assert exchange(proxy.url, data)[0] == 400, case
            assert get(proxy.url + "/i/_doc/1")[0] == 200
        finally:
            code, err = proxy.stop()
    assert code == 0
    assert "Traceback" not in err and "sssss" not in err
    records = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    malformed = [r for r in records if "malformed HTTP request" in r["message"]]
    assert len(malformed) >= len(MALFORMED) - 2   # aiohttp logs a first bad method at debug
    assert all(r["log.level"] == "WARNING" for r in malformed)
    assert not [r for r in records if r["log.level"] == "ERROR"]


def test_a_pipelined_request_whose_body_breaks_gets_its_own_400(upstream: HoldingUpstream) -> None:
    # The broken body belongs to a request queued behind one held upstream: the held one is
    # answered normally, the broken one with the 400, and the connection is then closed.
    proxy = ProxyProcess(upstream.url)
    try:
        host, port = proxy.url.rsplit("/", 1)[-1].rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=30) as sock:
            sock.sendall(b"GET /held/_doc/1 HTTP/1.1\r\nHost: x\r\n\r\n"
                         b"POST /_count HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         b"Transfer-Encoding: chunked\r\n\r\n1\r\n{\r\n")
            upstream.wait_held(1)
            sock.sendall(b"zz\r\n}\r\n0\r\n\r\n")
            time.sleep(0.3)
            upstream.release()
            data = b""
            while chunk := sock.recv(65536):
                data += chunk
        first, _, rest = data.partition(b"\r\n\r\n")
        assert first.startswith(b"HTTP/1.1 200") and rest.startswith(b'{"acknowledged": true}')
        second = rest[len(b'{"acknowledged": true}'):]
        head, _, body = second.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 400") and b"application/json" in head
        assert json.loads(body)["error"]["reason"] == "malformed HTTP request: Invalid character in chunk size"
        assert "/_count" not in upstream.received   # the broken request never went upstream
    finally:
        code, err = proxy.stop()
    assert code == 0 and "Traceback" not in err


@pytest.mark.parametrize("exc, problem", [
    (BadStatusLine("GET /?api_key=SECRET HTTP/1.x"), "bad request line"),
    (InvalidHeader(b"Basic SECRET\x01"), "invalid header"),
    (InvalidURLError("/\x00SECRET"), "invalid URL"),
    (BadHttpMethod("SECRET'"), "invalid method"),
    (BadHttpMessage("Invalid value 'SECRET'"), "BadHttpMessage"),
    (BadHttpMessage("Transfer-Encoding can't be present with Content-Length"),
     "Transfer-Encoding can't be present with Content-Length"),
])
def test_the_pure_python_parsers_quoted_bytes_never_reach_the_answer(exc: BaseException, problem: str) -> None:
    """aiohttp's pure-Python parser (``AIOHTTP_NO_EXTENSIONS=1``) quotes the offending line or
    value in its message; only the C parser's plain descriptions are passed on."""
    assert malformed_problem(exc) == problem
    assert "SECRET" not in errors.malformed_request(400, exc).reason


def expect_refusals(url: str, status: int) -> float:
    _, text = get(url + "/_neardup/metrics")
    found = re.search(rb'^neardup_proxy_requests_total\{route="expect",status="%d"\} (\S+)$' % status, text, re.M)
    return float(found.group(1)) if found else 0.0


def test_an_unknown_expectation_gets_an_elasticsearch_json_417(proxy_for_garbage: ProxyProcess) -> None:
    """aiohttp answers ``Expect`` before any middleware runs; its default is a plain-text 417.
    The refusal is still counted in the metrics, as every answer is."""
    before = expect_refusals(proxy_for_garbage.url, 417)
    status, headers, body = exchange(proxy_for_garbage.url, b"POST /x/_search HTTP/1.1\r\nHost: x\r\n"
                                     b"Expect: foo\r\nContent-Length: 2\r\n\r\n{}")
    assert status == 417
    assert headers["content-type"].startswith("application/json")
    cause = {"type": "illegal_argument_exception",
             "reason": "unsupported Expect header: only 100-continue is accepted"}
    assert json.loads(body) == {"error": {"root_cause": [cause], **cause}, "status": 417}
    assert expect_refusals(proxy_for_garbage.url, 417) == before + 1


def test_an_expected_body_over_the_limit_is_refused_and_counted(proxy_for_garbage: ProxyProcess) -> None:
    before = expect_refusals(proxy_for_garbage.url, 413)
    status, headers, body = exchange(proxy_for_garbage.url, b"POST /x/_search HTTP/1.1\r\nHost: x\r\n"
                                     b"Expect: 100-continue\r\nContent-Type: application/json\r\n"
                                     b"Content-Length: 999999999999\r\n\r\n")
    assert status == 413 and json.loads(body)["error"]["type"] == "content_too_long_exception"
    assert expect_refusals(proxy_for_garbage.url, 413) == before + 1
    status, headers, body = exchange(proxy_for_garbage.url, b"POST /x/_search HTTP/1.1\r\nHost: x\r\n"
                                     b"Expect: 100-continue\r\nAccept-Encoding: gzip\r\n"
                                     b"Content-Length: 999999999999\r\n\r\n")
    assert status == 413 and headers["content-encoding"] == "gzip"   # as every error the proxy writes
    assert json.loads(gzip.decompress(body))["status"] == 413


def test_expect_100_continue_still_gets_the_interim_answer(proxy_for_garbage: ProxyProcess) -> None:
    host, port = proxy_for_garbage.url.rsplit("/", 1)[-1].rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(b"POST /x/_search HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
                     b"Content-Type: application/json\r\nContent-Length: 2\r\n\r\n")
        assert sock.recv(64).startswith(b"HTTP/1.1 100 Continue\r\n\r\n")
