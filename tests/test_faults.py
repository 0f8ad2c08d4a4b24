"""The proxy between clients and a misbehaving upstream: stalls, cut connections, delays, resets,
one of two nodes down. A TCP fault injector (:mod:`tests.faultproxy`) sits between the proxy and
the real Elasticsearch.

The promise under test: every request is answered correctly or fails cleanly, in bounded time.
"Cleanly" means an Elasticsearch-style 502/504 error body, or, once the proxy has started to
stream a response, a connection closed before the response is complete, which every HTTP
client detects; never a complete-looking response that is not the upstream's.
"""

from __future__ import annotations

import http.client
import json
import signal
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.engine_support import delete_index
from tests.faultproxy import Fault, FaultProxy, blackhole, closed_port_url
from tests.reliability_support import Outcome, es_error_type, fetch
from tests.test_proxy_server import ProxyProcess
from tests.test_proxy_support import FamilyIndex, ProxyThread, family_index, make_config  # noqa: F401

pytestmark = pytest.mark.es

JSON = {"Content-Type": "application/json"}
TIMEOUT = 1.5          # upstream.request_timeout of the proxies here, seconds
#: A request may take its timeout plus this much (a loaded CI machine) before it counts as hung.
SLACK = 10.0


@pytest.fixture(scope="module")
def faults(es_url: str) -> Iterator[FaultProxy]:
    with FaultProxy(es_url) as injector:
        yield injector


@pytest.fixture
def passing(faults: FaultProxy) -> Iterator[FaultProxy]:
    faults.fault = Fault("pass")
    faults.seen.clear()
    yield faults
    faults.fault = Fault("pass")


@pytest.fixture(scope="module")
def big_doc(es: Any) -> Iterator[tuple[str, int]]:
    """An index holding one 3 MB document: its GET response is streamed, not buffered."""
    name = f"reliab-faults-big-{uuid.uuid4().hex[:8]}"
    es.indices.create(index=name, body={"settings": {"number_of_shards": 1, "number_of_replicas": 0},
                                        "mappings": {"properties": {"blob": {"type": "text", "index": False}}}})
    es.index(index=name, id="1", body={"blob": "x" * 3_000_000}, refresh=True)
    yield name, 3_000_000
    delete_index(es, name)


@pytest.fixture
def write_index(es: Any) -> Iterator[str]:
    name = f"reliab-faults-{uuid.uuid4().hex[:8]}"
    es.indices.create(index=name, body={"settings": {"number_of_shards": 1, "number_of_replicas": 0}})
    yield name
    delete_index(es, name)


def proxy_to(*urls: str, **upstream: object) -> ProxyThread:
    return ProxyThread(make_config(urls[0], upstream={"urls": list(urls), "request_timeout": TIMEOUT,
                                                      "connect_timeout": 1.0, **upstream}))


def search_requests(index: str) -> list[tuple[str, str, bytes | None]]:
    """A pass-through GET, a collapsed search and a collapsed _msearch."""
    query = json.dumps({"query": {"match": {"body": "said"}}, "size": 5}).encode()
    msearch = b"\n".join([json.dumps({"index": index}).encode(), query, b""])
    return [("GET", "/_cluster/health", None), ("POST", f"/{index}/_search", query),
            ("POST", "/_msearch", msearch)]


def headers_for(path: str) -> dict[str, str]:
    return {"Content-Type": "application/x-ndjson"} if "_msearch" in path else JSON


# -- an upstream that stops sending ---------------------------------------------------------
@pytest.mark.parametrize("after_bytes", [0, 60, 400])
def test_stalled_upstream_gives_504_within_the_timeout(passing: FaultProxy, family_index: FamilyIndex,
                                                        after_bytes: int) -> None:
    with proxy_to(passing.url) as proxy:
        for method, path, body in search_requests(family_index.name):
            passing.fault = Fault("stall", after_bytes=after_bytes)
            out = fetch(proxy.url, method, path, body, headers_for(path))
            assert out.complete and out.status == 504, (path, out)
            assert es_error_type(out) == "neardup_upstream_timeout_exception"
            assert out.elapsed < TIMEOUT + SLACK
        passing.fault = Fault("pass")
        for method, path, body in search_requests(family_index.name):   # and it recovers
            assert fetch(proxy.url, method, path, body, headers_for(path)).status == 200


def test_stall_in_a_streamed_body_breaks_the_client_connection(passing: FaultProxy,
                                                              big_doc: tuple[str, int]) -> None:
    index, size = big_doc
    with proxy_to(passing.url) as proxy:
        passing.fault = Fault("stall", after_bytes=1_500_000)
        out = fetch(proxy.url, "GET", f"/{index}/_doc/1")
        assert not out.complete and out.got_status_line, "a partial body must not look complete"
        assert out.status == 200 and len(out.body) < size
        assert out.elapsed < TIMEOUT + SLACK
        passing.fault = Fault("pass")
        whole = fetch(proxy.url, "GET", f"/{index}/_doc/1")
        assert whole.complete and len(whole.json()["_source"]["blob"]) == size
        assert proxy.metrics.counters["neardup_proxy_upstream_errors_total"][(("kind", "broken"),)] >= 1


# -- an upstream that closes half-way -------------------------------------------------------
@pytest.mark.parametrize("after_bytes", [0, 60, 400])
def test_connection_closed_half_way_gives_502(passing: FaultProxy, family_index: FamilyIndex,
                                              after_bytes: int) -> None:
    with proxy_to(passing.url) as proxy:
        for method, path, body in search_requests(family_index.name):
            passing.fault = Fault("cut", after_bytes=after_bytes)
            out = fetch(proxy.url, method, path, body, headers_for(path))
            assert out.complete and out.status == 502, (path, out)
            assert es_error_type(out) == "neardup_upstream_exception"


def test_close_in_a_streamed_body_breaks_the_client_connection(passing: FaultProxy,
                                                              big_doc: tuple[str, int]) -> None:
    index, size = big_doc
    with proxy_to(passing.url) as proxy:
        passing.fault = Fault("cut", after_bytes=1_200_000)
        out = fetch(proxy.url, "GET", f"/{index}/_doc/1")
        assert not out.complete and out.got_status_line and len(out.body) < size


def test_a_write_is_never_sent_twice_when_the_connection_breaks(passing: FaultProxy, write_index: str,
                                                                es: Any) -> None:
    """Reads are sent once more after a broken connection; writes never (the first may have landed)."""
    bulk = b'{"index":{"_id":"a"}}\n{"n":1}\n'
    with proxy_to(passing.url) as proxy:
        passing.fault = Fault("cut", after_bytes=0)   # the request arrives, the answer never does
        write = fetch(proxy.url, "POST", f"/{write_index}/_bulk", bulk, {"Content-Type": "application/x-ndjson"})
        writes_seen = sum(1 for r in passing.seen if "/_bulk" in r.request_line)
        passing.seen.clear()
        read = fetch(proxy.url, "POST", f"/{write_index}/_search?neardup=off", b"{}", JSON)
        reads_seen = sum(1 for r in passing.seen if "/_search" in r.request_line)
    assert write.status == 502 and es_error_type(write) == "neardup_upstream_exception"
    assert writes_seen == 1
    assert read.status == 502 and reads_seen == 2
    es.indices.refresh(index=write_index)
    assert es.count(index=write_index)["count"] == 1   # the bulk landed once


# -- a slow upstream --------------------------------------------------------------------------
def test_delay_below_the_timeout_is_answered_correctly_and_above_it_504(
        passing: FaultProxy, family_index: FamilyIndex, es_url: str) -> None:
    path = f"/{family_index.name}/_doc/{family_index.ranked[0]}"
    direct = fetch(es_url, "GET", path)
    with proxy_to(passing.url) as proxy:
        passing.fault = Fault("delay", delay=TIMEOUT / 3)
        slow = fetch(proxy.url, "GET", path)
        passing.fault = Fault("delay", delay=TIMEOUT + 1.0)
        late = fetch(proxy.url, "GET", path)
    assert slow.status == 200 and slow.body == direct.body
    assert late.status == 504 and es_error_type(late) == "neardup_upstream_timeout_exception"
    assert late.elapsed < TIMEOUT + SLACK


# -- several nodes, one of them down ----------------------------------------------------------
def mixed_requests(index: str, family: FamilyIndex, count: int) -> Iterator[tuple[str, str, bytes | None, dict]]:
    search = json.dumps({"query": {"match": {"body": "said"}}, "size": 5}).encode()
    for k in range(count):
        kind = k % 4
        if kind == 0:
            yield "POST", f"/{family.name}/_search", search, JSON
        elif kind == 1:
            yield "GET", f"/{family.name}/_doc/{family.ranked[k % len(family.ranked)]}", None, {}
        elif kind == 2:
            yield "PUT", f"/{index}/_doc/d{k}", json.dumps({"k": k}).encode(), JSON
        else:
            yield "GET", "/_cluster/health", None, {}


@pytest.mark.parametrize("down", ["refused", "blackhole"])
def test_one_of_two_nodes_down_requests_go_to_the_other(down: str, es_url: str, es: Any,
                                                       family_index: FamilyIndex, write_index: str) -> None:
    with blackhole() as hole:
        dead = closed_port_url() if down == "refused" else hole
        with proxy_to(dead, es_url) as proxy:
            outcomes = [fetch(proxy.url, m, p, b, h) for m, p, b, h in
                        mixed_requests(write_index, family_index, 24)]
    assert [o.status for o in outcomes if o.status not in (200, 201)] == []
    es.indices.refresh(index=write_index)
    assert es.count(index=write_index)["count"] == 6
    # A dead node is tried again only after a back-off: few requests pay the connect timeout.
    slow = [o for o in outcomes if o.elapsed >= 1.0]
    assert len(slow) <= 4, [round(o.elapsed, 2) for o in outcomes]


def test_node_resetting_connections_reads_move_on_writes_fail_cleanly(
        passing: FaultProxy, es_url: str, es: Any, family_index: FamilyIndex,
        write_index: str) -> None:
    passing.fault = Fault("reset")
    with proxy_to(passing.url, es_url) as proxy:
        outcomes = [(m, fetch(proxy.url, m, p, b, h)) for m, p, b, h in
                    mixed_requests(write_index, family_index, 24)]
    reads = [o for m, o in outcomes if m != "PUT"]
    writes = [o for m, o in outcomes if m == "PUT"]
    assert all(o.status == 200 for o in reads), [o.status for o in reads]
    assert all(o.status in (201, 502) for o in writes)
    assert all(es_error_type(o) in ("neardup_upstream_exception", "neardup_upstream_unreachable_exception")
               for o in writes if o.status == 502)
    es.indices.refresh(index=write_index)
    assert es.count(index=write_index)["count"] == sum(1 for o in writes if o.status == 201)


def test_every_node_down_answers_502_at_once() -> None:
    with proxy_to(closed_port_url(), closed_port_url()) as proxy:
        outcomes = [fetch(proxy.url, "GET", "/_cluster/health") for _ in range(5)]
        outcomes.append(fetch(proxy.url, "POST", "/x/_search", b"{}", JSON))
    for out in outcomes:
        assert out.status == 502 and es_error_type(out) == "neardup_upstream_unreachable_exception"
        assert out.elapsed < SLACK


# -- SIGTERM under load -----------------------------------------------------------------------
SLOW_PATH = "/_cluster/health?wait_for_status=green&timeout=3s&wait_for_nodes=99"  # held 3 s by ES


def _keep_alive_loop(url: str, stop: threading.Event, outcomes: list[Outcome]) -> None:
    """Requests on one persistent connection (reopened after a failure) until ``stop``."""
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
    while not stop.is_set():
        out = Outcome(started=time.monotonic())
        try:
            connection.request("GET", "/_cluster/health")
            response = connection.getresponse()
            out.got_status_line, out.status = True, response.status
            out.body = response.read()
        except (OSError, http.client.HTTPException) as exc:
            out.error = type(exc).__name__
            connection.close()
            connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
            time.sleep(0.05)
        out.elapsed = time.monotonic() - out.started
        outcomes.append(out)
    connection.close()


def _new_connection_loop(url: str, stop: threading.Event, outcomes: list[Outcome]) -> None:
    while not stop.is_set():
        outcomes.append(fetch(url, "GET", "/_cluster/health"))
        time.sleep(0.02)


def test_sigterm_under_load_finishes_requests_in_flight_and_refuses_new_ones(es_url: str) -> None:
    proxy = ProxyProcess(es_url, NEARDUP_LOGGING__LEVEL="WARNING")  # no access log to fill the pipe
    stop = threading.Event()
    slow: list[Outcome] = []
    fast: list[Outcome] = []
    threads = [threading.Thread(target=lambda: slow.append(fetch(proxy.url, "GET", SLOW_PATH)))
               for _ in range(4)]
    threads += [threading.Thread(target=_keep_alive_loop, args=(proxy.url, stop, fast)) for _ in range(4)]
    threads += [threading.Thread(target=_new_connection_loop, args=(proxy.url, stop, fast)) for _ in range(4)]
    try:
        for thread in threads:
            thread.start()
        time.sleep(1.0)
        signalled = time.monotonic()
        proxy.process.send_signal(signal.SIGTERM)
        code = proxy.process.wait(60)
        exited = time.monotonic()
        time.sleep(0.5)
        stop.set()
        for thread in threads:
            thread.join(60)
    finally:
        stop.set()
        proxy.stop()
    assert code == 0
    # In flight at SIGTERM: finished, with Elasticsearch's own answer, before the proxy exited.
    assert len(slow) == 4
    for out in slow:
        assert out.complete and out.status == 408 and out.json()["timed_out"] is True, out
        assert out.started + out.elapsed <= exited + 0.5
    # Everything else: a complete valid answer, or refused before any byte of a response.
    assert any(o.status == 200 for o in fast)
    for out in fast:
        if out.complete:
            assert out.status == 200 and json.loads(out.body)["cluster_name"], out
        else:
            assert not out.got_status_line, f"a response broke off: {out}"
    late = [o for o in fast if o.started >= signalled + 1.0]
    assert late, "no request was tried after SIGTERM"
    assert all(not o.complete for o in late), "the proxy accepted new requests after SIGTERM"
