"""Pass-through over the lean upstream client: an answer the proxy does not collapse arrives
with its bytes, status and headers unchanged, whole with its ``Content-Length`` when it is
small (also when the upstream sent it chunked), streamed when it is large; the rest of a
streamed answer (:class:`neardup.proxy.transport.http1_client.Rest`) and its failures; the
gzip the proxy writes itself.

The upstream is scripted (no Elasticsearch): the real engines' pass-through is covered by
test_proxy*.py, test_faults.py and the protocol tests.
"""

from __future__ import annotations

import asyncio
import gzip
import io
import json
import logging
import re

import pytest
from isal import isal_zlib

from neardup.logs import TEXT_FORMAT, JsonFormatter, TextFormatter, direct_handler
from neardup.proxy.handlers.forward import BUFFERED_BODY_BYTES
from neardup.proxy.transport import framing, http1_client
from tests.faultproxy import Fault, FaultProxy, chunked_response, http_response
from tests.reliability_support import fetch, raw_exchange
from tests.test_proxy_http1 import ScriptedServer, asynchronous, chunked, node, ok
from tests.test_proxy_support import ProxyThread, make_config

COMPATIBLE = "application/vnd.elasticsearch+json;compatible-with=8"


def _es_chunked(chunks: list[bytes], extra: str = "", finish: bool = True) -> bytes:
    """Elasticsearch's chunked answer, with a compatible-with media type and ``extra`` headers."""
    answer = chunked_response(200, chunks, content_type=COMPATIBLE, finish=finish)
    return answer.replace(b"\r\n\r\n", f"\r\n{extra}\r\n".encode() if extra else b"\r\n\r\n", 1)


# -- through the proxy ---------------------------------------------------------------------------
def test_a_small_chunked_answer_arrives_byte_identical_with_its_content_length() -> None:
    chunks = [b'{"cluster_name":', b'"c","status":"green"', b"}"]
    with FaultProxy(fault=Fault("respond", response=_es_chunked(chunks, "Warning: 299 x\r\n"))) as upstream, \
            ProxyThread(make_config(upstream.url)) as proxy:
        out = fetch(proxy.url, "GET", "/_cluster/health?neardup=off")
    assert out.complete and out.status == 200
    assert out.body == b"".join(chunks)
    assert out.headers["content-length"] == str(len(out.body))
    assert "transfer-encoding" not in out.headers
    assert out.headers["content-type"] == COMPATIBLE
    assert out.headers["x-elastic-product"] == "Elasticsearch"
    assert out.headers["warning"] == "299 x"


def test_a_body_goes_upstream_unchanged_with_one_content_length() -> None:
    body = b'{"index":{"_id":"a"}}\n{"n":1}\n'
    with FaultProxy(fault=Fault("respond", response=http_response(200, b'{"errors":false}'))) as upstream, \
            ProxyThread(make_config(upstream.url)) as proxy:
        out = fetch(proxy.url, "POST", "/i/_bulk", body, {"Content-Type": "application/x-ndjson"})
        sent = upstream.seen[-1]
    assert out.status == 200 and out.body == b'{"errors":false}'
    assert sent.body == body and sent.header("content-length") == [str(len(body))]
    assert sent.header("content-type") == ["application/x-ndjson"]


def test_elasticsearchs_gzip_bytes_pass_through_unchanged() -> None:
    compressed = gzip.compress(b'{"hits":{"hits":[]}}' * 50, compresslevel=3)
    pieces = [compressed[:100], compressed[100:]]
    with FaultProxy(fault=Fault("respond", response=_es_chunked(pieces, "Content-Encoding: gzip\r\n"))) as upstream, \
            ProxyThread(make_config(upstream.url)) as proxy:
        out = fetch(proxy.url, "GET", "/_cat/indices", headers={"Accept-Encoding": "gzip"})
        asked = upstream.seen[-1].header("accept-encoding")
    assert out.complete and out.status == 200
    assert out.body == compressed   # Elasticsearch's own bytes, not decoded and compressed again
    assert out.headers["content-encoding"] == "gzip"
    assert out.headers["content-length"] == str(len(compressed))
    assert asked == ["gzip"]


def test_a_large_chunked_answer_is_streamed_unchanged() -> None:
    pieces = [bytes([65 + k % 26]) * 300_000 for k in range(6)]   # 1.8 MB, over BUFFERED_BODY_BYTES
    assert sum(map(len, pieces)) > BUFFERED_BODY_BYTES
    with FaultProxy(fault=Fault("respond", response=_es_chunked(pieces))) as upstream, \
            ProxyThread(make_config(upstream.url)) as proxy:
        out = fetch(proxy.url, "GET", "/big/_doc/1")
    assert out.complete and out.status == 200
    assert out.body == b"".join(pieces)
    assert out.headers.get("transfer-encoding") == "chunked" and "content-length" not in out.headers


def test_a_large_answer_with_a_content_length_keeps_it() -> None:
    body = b"x" * (BUFFERED_BODY_BYTES + 10)
    with FaultProxy(fault=Fault("respond", response=http_response(200, body))) as upstream, \
            ProxyThread(make_config(upstream.url)) as proxy:
        out = fetch(proxy.url, "GET", "/big/_doc/1")
    assert out.complete and out.body == body and out.headers["content-length"] == str(len(body))


def test_a_small_chunked_answer_that_breaks_off_is_a_whole_502() -> None:
    # Read whole before anything is sent, so the client gets an error, never a short body.
    broken = _es_chunked([b'{"a":', b"1"], finish=False)
    with FaultProxy(fault=Fault("respond", response=broken, close_after=True)) as upstream, \
            ProxyThread(make_config(upstream.url)) as proxy:
        out = fetch(proxy.url, "GET", "/_cat/health")
    assert out.complete and out.status == 502
    assert b"neardup_upstream_exception" in out.body


def test_a_large_answer_that_breaks_off_breaks_the_client_connection() -> None:
    broken = _es_chunked([b"y" * 700_000, b"z" * 700_000], finish=False)
    with FaultProxy(fault=Fault("respond", response=broken, close_after=True)) as upstream, \
            ProxyThread(make_config(upstream.url)) as proxy:
        out = fetch(proxy.url, "GET", "/big/_doc/1")
    assert not out.complete and out.got_status_line and out.status == 200


# -- the lean client's streamed answers ------------------------------------------------------------
@asynchronous
async def test_an_answer_over_stream_over_comes_with_its_rest_and_the_connection_is_reused() -> None:
    pieces = [b"a" * 1_000_000, b"b" * 1_000_000, b"c" * 1_000_000]   # arrives in many reads
    async with ScriptedServer(lambda request, number: chunked(*pieces) if number == 0 else ok(b"{}")) as server:
        pool = node(server.url, limit=1)
        reply = await pool.exchange("GET", "/big", [], None, stream_over=4000)
        assert reply.rest is not None and len(reply.body) < len(b"".join(pieces))
        rest = [data async for data in reply.rest]
        assert reply.body + b"".join(rest) == b"".join(pieces)
        small = await pool.exchange("GET", "/small", [], None, stream_over=4000)
        assert small.rest is None and small.body == b"{}"
        assert server.connections == 1   # pooled after the streamed answer ended
        pool.close()


@pytest.mark.parametrize("framing_kind", ["chunked", "content_length", "until_close"])
@asynchronous
async def test_an_answer_within_stream_over_is_whole(framing_kind: str) -> None:
    body = b'{"x":1}' * 100
    answer = {"chunked": chunked(body[:300], body[300:]), "content_length": ok(body),
              "until_close": b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n" + body}[framing_kind]
    async with ScriptedServer(lambda request, number: answer, close_after=framing_kind == "until_close") as server:
        pool = node(server.url)
        reply = await pool.exchange("GET", "/", [], None, stream_over=10_000)
        assert reply.rest is None and reply.body == body
        pool.close()


@asynchronous
async def test_a_rest_that_breaks_off_raises_broken() -> None:
    def answer(request: bytes, number: int) -> bytes:
        if b"/whole" in request:
            return ok(b"{}")
        return b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n" + b"x" * 20_000

    async with ScriptedServer(answer, close_after=True) as server:
        pool = node(server.url, limit=1)
        reply = await pool.exchange("GET", "/", [], None, stream_over=1000)
        assert reply.rest is not None
        with pytest.raises(http1_client.Broken):
            async for _ in reply.rest:
                pass
        # its slot came back: the next exchange is not stuck behind the broken one
        assert (await asyncio.wait_for(pool.exchange("GET", "/whole", [], None), 5)).body == b"{}"
        pool.close()


@asynchronous
async def test_a_rest_that_stalls_raises_read_timeout() -> None:
    head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    async with ScriptedServer(lambda request, number: head + b"4e20\r\n" + b"x" * 20_000 + b"\r\n") as server:
        pool = node(server.url, read_timeout=0.5, limit=1)
        reply = await pool.exchange("GET", "/", [], None, stream_over=1000)
        assert reply.rest is not None
        with pytest.raises(http1_client.ReadTimeout):
            async for _ in reply.rest:
                pass
        pool.close()


@asynchronous
async def test_closing_a_rest_early_closes_the_connection_and_frees_its_slot() -> None:
    def answer(request: bytes, number: int) -> bytes:
        return ok(b"z" * 4_000_000) if b"/big" in request else ok(b"{}")

    async with ScriptedServer(answer) as server:
        pool = node(server.url, limit=1)
        reply = await pool.exchange("GET", "/big", [], None, stream_over=1000)
        assert reply.rest is not None
        reply.rest.close()
        small = await asyncio.wait_for(pool.exchange("GET", "/small", [], None), 5)
        assert small.body == b"{}" and server.connections == 2   # the first was not reused
        pool.close()


@asynchronous
async def test_a_slow_reader_gets_every_byte_of_a_large_rest_and_the_connection_reads_again() -> None:
    body = bytes(range(256)) * 16_384   # 4 MiB: reading pauses and resumes
    async with ScriptedServer(lambda request, number: ok(body)) as server:
        pool = node(server.url)
        reply = await pool.exchange("GET", "/", [], None, stream_over=1000)
        assert reply.rest is not None
        got = [reply.body]
        async for data in reply.rest:
            got.append(data)
            await asyncio.sleep(0)
        assert b"".join(got) == body
        again = await asyncio.wait_for(pool.exchange("GET", "/", [], None), 5)   # reads again, pooled
        assert again.body == body and server.connections == 1
        pool.close()


# -- the gzip the proxy writes ---------------------------------------------------------------------
def test_the_proxys_own_gzip_is_isal_level_1_and_decodes_to_the_same_bytes() -> None:
    page = b'{"hits":{"hits":[' + b",".join(b'{"_id":"%d","title":"oil prices"}' % k for k in range(500)) + b"]}}"
    compressed = framing.gzip_bytes(page)
    assert framing.GZIP_LEVEL == 1
    assert gzip.decompress(compressed) == page
    assert compressed[:3] == b"\x1f\x8b\x08" and compressed[4:8] == b"\0\0\0\0"   # deflate, mtime 0
    assert compressed == isal_zlib.compress(page, 1, wbits=31)
    assert len(compressed) < len(page) / 10


# -- the catch-all route without the router ------------------------------------------------------
@pytest.mark.parametrize("path", ["/i/_search?neardup=off", "/i/_doc/1", "/", "/_cat/indices?v"])
def test_a_request_for_the_upstream_goes_upstream_once_and_is_counted(path: str) -> None:
    with FaultProxy(fault=Fault("respond", response=http_response(200, b'{"ok":true}'))) as upstream, \
            ProxyThread(make_config(upstream.url)) as proxy:
        out = fetch(proxy.url, "GET", path)
        seen = [r.head.split(b"\r\n", 1)[0] for r in upstream.seen]
        requests = dict(proxy.metrics.counters["neardup_proxy_requests_total"])
    sent = path.replace("neardup=off", "").rstrip("?")
    assert out.status == 200 and out.body == b'{"ok":true}'
    assert seen[-1] == f"GET {sent} HTTP/1.1".encode()
    route = "search" if "_search" in path else "passthrough"
    assert requests == {(("route", route), ("status", "200")): 1.0}


@pytest.mark.parametrize(("path", "upstream_answers"), [
    ("/_neardup/health", False), ("/_neardup/metrics", False),
    # the router reads the path with its escapes decoded, dot segments kept
    ("/x/../_neardup/health", True), ("/./_neardup/health", True),
    ("/%5Fneardup/health", False)])   # escapes it decodes
def test_only_an_ops_path_as_sent_is_answered_by_the_proxy(path: str, upstream_answers: bool) -> None:
    with FaultProxy(fault=Fault("respond", response=http_response(200, b'{"upstream":true}'))) as upstream, \
            ProxyThread(make_config(upstream.url)) as proxy:
        before = len(upstream.seen)
        out = fetch(proxy.url, "GET", path)
        forwarded = [r.request_line for r in upstream.seen[before:] if "neardup" in r.request_line]
    assert out.status in (200, 503)
    assert forwarded == ([f"GET {path} HTTP/1.1"] if upstream_answers else [])
    assert (out.body == b'{"upstream":true}') == upstream_answers


def test_an_expect_100_continue_on_the_catch_all_gets_its_interim_answer_then_the_upstreams() -> None:
    body = b'{"query":{"match_all":{}}}'
    request = (b"POST /i/_search?neardup=off HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               b"Expect: 100-continue\r\nContent-Length: " + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n")
    with FaultProxy(fault=Fault("respond", response=http_response(200, b'{"hits":{}}'))) as upstream, \
            ProxyThread(make_config(upstream.url)) as proxy:
        answer = raw_exchange(proxy.url, request + body)
        sent = upstream.seen[-1]
    assert answer.startswith(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 ")
    assert answer.endswith(b'{"hits":{}}') and sent.body == body


@pytest.mark.parametrize("json_lines", [False, True], ids=["text", "json"])
def test_the_access_line_written_directly_is_the_configured_format(json_lines: bool) -> None:
    access = logging.getLogger("neardup.proxy.access")
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter() if json_lines else TextFormatter(TEXT_FORMAT))
    saved = access.handlers[:], access.propagate, access.level
    access.handlers[:], access.propagate = [handler], False
    access.setLevel(logging.INFO)
    try:
        assert direct_handler(access, logging.INFO) is handler   # the line goes the direct way
        with FaultProxy(fault=Fault("respond", response=http_response(200, b'{"hits":{}}'))) as upstream, \
                ProxyThread(make_config(upstream.url)) as proxy:
            assert fetch(proxy.url, "GET", "/i/_search?neardup=off&q=secret").status == 200
    finally:
        access.handlers[:], access.propagate = saved[0], saved[1]
        access.setLevel(saved[2])
    line = stream.getvalue().splitlines()[-1]
    if not json_lines:
        assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} INFO neardup.proxy.access: "
                            r"GET /i/_search 200 \d+\.\dms passed:off", line)
        return
    entry = json.loads(line)
    assert entry["log.level"] == "INFO" and entry["log.logger"] == "neardup.proxy.access"
    assert re.fullmatch(r"GET /i/_search 200 \d+\.\dms passed:off", entry["message"])
    assert entry["url.path"] == "/i/_search" and entry["url.query_params"] == ["neardup", "q"]
    assert (entry["event"], entry["http.response.status_code"], entry["http.response.body.bytes"]) == ("access", 200, 11)
    assert (entry["neardup.route"], entry["neardup.outcome"]) == ("search", "passed:off")
    assert "secret" not in line
