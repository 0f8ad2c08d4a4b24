"""Hostile and malformed input, case by case: request bodies, sizes, query strings, headers,
and upstream responses of unexpected shape (property-based fuzzing: tests/test_hostile_fuzz.py).

What must hold for every case: no traceback anywhere a client can see it, no 500 caused by the
proxy's own code (no ``neardup_proxy_exception``, nothing logged as an unhandled error), and no
answer a client could take for a valid one when it is not: a body Elasticsearch itself would
reject gets Elasticsearch's own answer (the same status as asking it directly), and a response
the proxy cannot collapse reaches the client as the upstream sent it, or as a clean 502.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator

import pytest

from tests.faultproxy import Fault, FaultProxy, chunked_response, http_response
from tests.reliability_support import (
    LogCapture,
    Outcome,
    assert_faithful_collapse,
    es_error,
    es_error_type,
    fetch,
    parse_raw_response,
    raw_exchange,
)
from tests.test_proxy_support import FamilyIndex, ProxyThread, family_index, make_config  # noqa: F401

pytestmark = pytest.mark.es

LIMIT = 64 * 1024            # proxy.max_body_bytes here
JSON = {"Content-Type": "application/json"}
NDJSON = {"Content-Type": "application/x-ndjson"}


@pytest.fixture(scope="module")
def guarded(es_url: str) -> Iterator[tuple[ProxyThread, LogCapture]]:
    """A proxy with a 64 KiB body limit, and the log records it writes."""
    with LogCapture() as logs, ProxyThread(make_config(es_url, proxy={"max_body_bytes": LIMIT})) as proxy:
        yield proxy, logs


def assert_clean(out: Outcome, logs: LogCapture) -> None:
    """No proxy 500, no traceback shown, nothing logged as an unhandled error."""
    assert out.complete, out
    assert es_error_type(out) != "neardup_proxy_exception", out.body[:300]
    assert b"Traceback" not in out.body
    assert not logs.errors(), [r.getMessage() for r in logs.errors()]


def same_as_direct(proxy_url: str, es_url: str, method: str, path: str, body: bytes | None,
                   headers: dict[str, str], logs: LogCapture) -> tuple[Outcome, Outcome]:
    via = fetch(proxy_url, method, path, body, headers)
    direct = fetch(es_url, method, path, body, headers)
    assert_clean(via, logs)
    assert via.status == direct.status, (path, body and body[:100], via.body[:300], direct.body[:300])
    if via.status >= 400:
        assert es_error(via.body) or via.body == direct.body
    return via, direct


DEEP = b'{"query":' * 3000 + b'{"match_all":{}}' + b"}" * 3000
BAD_BODIES = [
    b"{", b'{"query":', b"[]", b'"text"', b"null", b"42", b"{}}", b"\xff\xfe{}", b'{"query": {"match_all": {}}} trailing',
    b'{"size": "ten"}', b'{"size": -1}', b'{"from": -5}', b'{"size": 1.5}', b'{"size": true}', b'{"size": 1e400}',
    b'{"size": 99999999999999999999999}', b'{"query": []}', b'{"query": {"match_all": []}}', b'{"_source": 7}',
    b'{"fields": {"a": 1}}', b'{"stored_fields": 5}', b'{"docvalue_fields": [1, 2]}', b'{"script_fields": []}',
    b'{"sort": {"rank": "sideways"}}', b'{"collapse": 3}', b'{"search_after": "x"}', b'{"query": {"match": {"body": "\\ud800"}}}',
    b'{"query": {"match": {"body": "\xc3\x28"}}}', b'{"query": {"match": {"body": "a\x00b"}}}', b'\xef\xbb\xbf{"size": 1}',
    '{"size": 2}'.encode("utf-16"), b'{"size": 2, "size": 3}', b'{"aggs": {"x": {"terms": {"field": 5}}}}',
    b'{"highlight": "yes"}', b'{"track_total_hits": "maybe"}', b'{"pit": {"id": 5}}', b'{"size": NaN}', DEEP,
]


@pytest.mark.parametrize("body", BAD_BODIES, ids=range(len(BAD_BODIES)))
def test_bad_search_bodies_get_elasticsearchs_own_answer(guarded, es_url: str, family_index: FamilyIndex,
                                                         body: bytes) -> None:
    proxy, logs = guarded
    same_as_direct(proxy.url, es_url, "POST", f"/{family_index.name}/_search", body, JSON, logs)


BAD_MSEARCH = [
    b'{}\n', b'{}\n{}', b'not json\n{}\n', b'{}\nnot json\n', b'[]\n{}\n', b'{}\n[]\n', b'{"index": 5}\n{}\n',
    b'{"index": ["a", 1]}\n{}\n', b'{}\n{"size": "x"}\n', b'\n\n\n\n', b'{}\r\n{}\r\n', b'{}\n{}\n' * 200,
    b'{"index": "' + b"x" * 300 + b'"}\n{}\n', b'{}\n' + DEEP + b'\n',
]


@pytest.mark.parametrize("body", BAD_MSEARCH, ids=range(len(BAD_MSEARCH)))
def test_bad_msearch_bodies_get_elasticsearchs_own_answer(guarded, es_url: str, family_index: FamilyIndex,
                                                          body: bytes) -> None:
    proxy, logs = guarded
    same_as_direct(proxy.url, es_url, "POST", f"/{family_index.name}/_msearch", body, NDJSON, logs)


# -- sizes ---------------------------------------------------------------------------------------
def test_bodies_over_the_limit_get_413(guarded, family_index: FamilyIndex) -> None:
    proxy, logs = guarded
    big = b'{"query": {"match": {"body": "' + b"a " * LIMIT + b'"}}}'
    bomb = gzip.compress(b" " * (50 * LIMIT))
    chunked = (f"POST /{family_index.name}/_search HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n").encode()
    chunk = b"{" + b" " * 8190
    chunked += b"".join(b"%x\r\n%s\r\n" % (len(chunk), chunk) for _ in range(2 * LIMIT // len(chunk))) + b"0\r\n\r\n"
    outcomes = [
        fetch(proxy.url, "POST", f"/{family_index.name}/_search", big, JSON),
        fetch(proxy.url, "POST", f"/{family_index.name}/_msearch", b"{}\n" + big + b"\n", NDJSON),
        fetch(proxy.url, "POST", f"/{family_index.name}/_search", bomb, {**JSON, "Content-Encoding": "gzip"}),
        fetch(proxy.url, "PUT", f"/{family_index.name}-nope/_doc/1", big, JSON),
        fetch(proxy.url, "POST", "/_bulk", big, NDJSON),
    ]
    status, _, body = parse_raw_response(raw_exchange(proxy.url, chunked))
    outcomes.append(Outcome(status=status, body=body))
    for out in outcomes:
        assert_clean(out, logs)
        assert out.status == 413 and es_error_type(out) == "content_too_long_exception", out
        assert "proxy.max_body_bytes" in json.loads(out.body)["error"]["reason"]
    just_under = b'{"query": {"match_all": {"_name": "' + b"a" * (LIMIT - 100) + b'"}}, "size": 1}'
    assert fetch(proxy.url, "POST", f"/{family_index.name}/_search", just_under, JSON).status == 200


# -- query strings and headers -----------------------------------------------------------------------
@pytest.mark.parametrize("query, named", [
    ("neardup_colour=red", "neardup_colour"), ("neardup=on&neardup=off", "neardup"),
    ("neardup=maybe", "neardup"), ("neardup_threshold=NaN", "neardup_threshold"),
    ("neardup_threshold=inf", "neardup_threshold"), ("neardup_threshold=-0.1", "neardup_threshold"),
    ("neardup_threshold=0x1", "neardup_threshold"), ("neardup_threshold=", "neardup_threshold"),
    ("neardup_mode=%FF", "neardup_mode"), ("neardup_threshold=0.5&neardup_threshold=0.6", "neardup_threshold"),
    ("NEARDUP=on&neardup_=1", "neardup_"),
])
def test_bad_neardup_parameters_get_400_naming_them(guarded, family_index: FamilyIndex, query: str, named: str) -> None:
    proxy, logs = guarded
    for path in (f"/{family_index.name}/_search", f"/{family_index.name}/_msearch"):
        out = fetch(proxy.url, "POST", f"{path}?{query}", b"{}\n{}\n" if "msearch" in path else b"{}",
                    NDJSON if "msearch" in path else JSON)
        assert_clean(out, logs)
        assert out.status == 400 and es_error_type(out) == "illegal_argument_exception", out
        assert f"[{named}]" in json.loads(out.body)["error"]["reason"]


@pytest.mark.parametrize("query", [
    "neardup=on&neardup=on", "size=1&size=2", "size=%FF", "q=%00", "q=%zz", "from=99999999999999999999",
    "filter_path=%FF", "_source=%C3%28", "pretty&pretty", "size=1e3", "sort=rank:sideways", "q=body:said&q=x",
    "filter_path=hits.hits._id,-hits.hits._id", "filter_path=**.**", "neardup=off&size=-1",
])
def test_odd_query_strings_never_break_the_proxy(guarded, es_url: str, family_index: FamilyIndex, query: str) -> None:
    proxy, logs = guarded
    via = fetch(proxy.url, "GET", f"/{family_index.name}/_search?{query}")
    direct_query = "&".join(p for p in query.split("&") if not p.startswith("neardup"))
    direct = fetch(es_url, "GET", f"/{family_index.name}/_search?{direct_query}")
    assert_clean(via, logs)
    assert via.status == direct.status, (via.body[:300], direct.body[:300])


def test_odd_headers_never_break_the_proxy(guarded, family_index: FamilyIndex) -> None:
    proxy, logs = guarded
    path = f"/{family_index.name}/_search"
    cases = [
        ({"X-Neardup": "sideways"}, 400), ({"X-Neardup-Threshold": "2"}, 400), ({"X-Neardup-Mode": "x"}, 400),
        ({"Content-Encoding": "br"}, 400), ({"Content-Encoding": "gzip"}, 400),
        ({"Content-Type": "text/plain"}, None), ({"Content-Type": "application/json; charset=ebcdic"}, None),
        ({"Accept": "application/yaml"}, None), ({"Accept-Encoding": "gzip;q=abc"}, None),
        ({"Accept": "application/vnd.elasticsearch+json; compatible-with=99"}, None),
    ]
    for headers, status in cases:
        out = fetch(proxy.url, "POST", path, b"{}", {**JSON, **headers})
        assert_clean(out, logs)
        if status is not None:
            assert out.status == status and es_error(out.body), (headers, out)
    raw_cases = [
        b"X-Neardup: \xff\xfe\r\n", b"X-Opaque-Id: \xc3\x28\x00\r\n", b"Authorization: Basic \xe9\xe9\r\n",
        b"X-Neardup-Threshold: 0.5\r\nX-Neardup-Threshold: 0.6\r\n", b"X-Long: " + b"a" * 9000 + b"\r\n",
        b"Content-Length: 2\r\nTransfer-Encoding: chunked\r\n", b"Content-Length: -1\r\n", b"Content-Length: 1, 2\r\n",
    ]
    for extra in raw_cases:
        data = (f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nConnection: close\r\n"
                .encode() + extra + (b"" if b"Content-Length" in extra else b"Content-Length: 2\r\n") + b"\r\n{}")
        raw = raw_exchange(proxy.url, data, timeout=10)
        assert raw.startswith(b"HTTP/1."), (extra, raw[:200])
        status, _, body = parse_raw_response(raw)
        assert status != 500 and b"Traceback" not in raw and b"neardup_proxy_exception" not in raw, raw[:400]
    assert not logs.errors()


# -- upstream responses of unexpected shape --------------------------------------------------------
HIT = {"_index": "i", "_id": "1", "_score": 1.0, "_source": {"title": "x"}}
SHAPES = {
    "not_an_object": http_response(200, b"[1, 2]"),
    "no_hits": http_response(200, b'{"took": 1}'),
    "hits_not_object": http_response(200, b'{"hits": 7}'),
    "hits_hits_not_list": http_response(200, b'{"hits": {"hits": {"a": 1}}}'),
    "hit_not_object": http_response(200, b'{"hits": {"hits": [1, "two", null]}}'),
    "source_not_object": http_response(200, json.dumps({"hits": {"hits": [{**HIT, "_source": [1]}]}}).encode()),
    "neardup_garbage": http_response(200, json.dumps({"hits": {"hits": [
        {**HIT, "_source": {"neardup": {"v": 1, "sig": ["x"], "n": "many"}}},
        {**HIT, "_id": "2", "_source": {"neardup": "zzz"}}]}}).encode()),
    "fields_garbage": http_response(200, json.dumps({"hits": {"hits": [{**HIT, "fields": [1]},
                                                                     {**HIT, "fields": {"neardup.sig": 3}}]}}).encode()),
    "html_200": http_response(200, b"<html>oops</html>", content_type="text/html"),
    "html_as_json": http_response(200, b"<html>oops</html>"),
    "empty_200": http_response(200, b""),
    "bad_gzip": http_response(200, b"not gzip at all", headers=(("Content-Encoding", "gzip"),)),
    "nan_and_huge": http_response(200, b'{"took": NaN, "hits": {"total": 1e999, "hits": []}}'),
    "deep": http_response(200, b'{"hits": {"hits": [' + b"[" * 5000 + b"]" * 5000 + b"]}}"),
    "invalid_utf8": http_response(200, b'{"hits": {"hits": [{"_id": "\xff\xfe"}]}}'),
    "error_500": http_response(500, b'{"error": "boom", "status": 500}'),
    "status_999": http_response(599, b"{}"),
    "msearch_wrong_count": http_response(200, b'{"responses": [{"hits": {"hits": []}}, {}, {}]}'),
    "msearch_not_list": http_response(200, b'{"responses": 3}'),
}
BROKEN = {
    "short_body": http_response(200, b'{"hits": {"hits": []}}', declared_length=500, close=True),
    "unfinished_chunks": chunked_response(200, [b'{"hits": ', b'{"hits": []'], finish=False),
}


@pytest.fixture(scope="module")
def liar() -> Iterator[FaultProxy]:
    with FaultProxy(fault=Fault("respond")) as upstream:
        yield upstream


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_unexpected_upstream_responses_reach_the_client_unchanged_or_as_502(liar: FaultProxy, shape: str) -> None:
    raw = SHAPES[shape]
    liar.fault = Fault("respond", response=raw, close_after=True)
    status, _, upstream_body = parse_raw_response(raw)
    with LogCapture() as logs, ProxyThread(make_config(liar.url)) as proxy:
        for method, path, body, headers in (("POST", "/i/_search", b"{}", JSON),
                                            ("POST", "/i/_msearch", b"{}\n{}\n{}\n{}\n", NDJSON),
                                            ("GET", "/i/_doc/1", None, {})):
            out = fetch(proxy.url, method, path, body, headers)
            assert_clean(out, logs)
            if out.status == 502:
                assert es_error_type(out) == "neardup_upstream_exception"
            elif (out.status, out.body) == (status, upstream_body):
                pass    # unchanged: passed through or failed open
            else:   # collapsed: only what the upstream said, nothing invented, nothing lost
                assert not path.endswith("_doc/1")
                assert out.status == 200 == status, (path, out)
                answer, said = out.json(), json.loads(upstream_body)
                if path.endswith("_msearch"):
                    for one, upstream_one in zip(answer["responses"], said["responses"], strict=True):
                        assert_faithful_collapse(one, upstream_one)
                else:
                    assert_faithful_collapse(answer, said)


@pytest.mark.parametrize("shape", sorted(BROKEN))
def test_broken_off_upstream_responses_never_look_complete(liar: FaultProxy, shape: str) -> None:
    liar.fault = Fault("respond", response=BROKEN[shape], close_after=True)
    with LogCapture() as logs, ProxyThread(make_config(liar.url)) as proxy:
        for method, path, body, headers in (("POST", "/i/_search", b"{}", JSON),
                                            ("POST", "/i/_msearch", b"{}\n{}\n", NDJSON),
                                            ("GET", "/i/_doc/1", None, {})):
            out = fetch(proxy.url, method, path, body, headers)
            assert not logs.errors()
            if out.complete:
                assert out.status == 502 and es_error_type(out) == "neardup_upstream_exception", (path, out)
            else:
                assert out.got_status_line   # the body broke off: the client sees it did
