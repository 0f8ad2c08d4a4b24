"""Property-based fuzzing of the proxy (hypothesis) over request bodies, query strings, headers
and upstream responses. The number of cases run is printed at the end of the session; the
default budget keeps the suite fast, ``NEARDUP_FUZZ_LONG=1`` runs 20 times as many
(``NEARDUP_FUZZ_EXAMPLES=N`` sets it exactly).

1. **The collapse functions** (pure: :mod:`proxy.handlers.search_plan`, :mod:`proxy.grouping.collapse`,
   :mod:`proxy.grouping.similarity`) over arbitrary JSON-like upstream responses, many of them
   search-shaped with real, damaged and foreign fingerprints: they either refuse with a
   ``ValueError`` (the proxy then fails open) or build a response that holds only what the
   upstream sent, each hit once.
2. **End to end against the real Elasticsearch:** random requests (paths, methods, query strings
   with the proxy's and Elasticsearch's parameters, JSON and non-JSON bodies, headers) sent
   through the proxy and directly: no proxy 500, nothing logged as an unhandled error, no
   fail-open, and the proxy's status is Elasticsearch's whenever the request is not the proxy's
   own business (its parameters) — so a request Elasticsearch refuses is never answered 200.
3. **End to end against an upstream that answers garbage** (:class:`tests.faultproxy.FaultProxy`):
   random status, content type, body and framing: the client gets the upstream's answer
   unchanged, a faithful collapse of it, or a clean 502, and a broken-off body never looks
   complete.
"""

from __future__ import annotations

import copy
import gzip
import json
import urllib.parse
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from neardup.config import load_config
from neardup.fingerprint import Fingerprinter
from neardup.proxy.grouping import collapse
from neardup.proxy.grouping.fingerprints import default_algorithms
from neardup.proxy.handlers.params import Settings
from neardup.proxy.handlers.search_plan import Plan, Window, annotate_page, apply_filter, finish, plan_search
from tests.faultproxy import Fault, FaultProxy, chunked_response, http_response
from tests.reliability_support import (
    LogCapture,
    assert_faithful_collapse,
    es_error_type,
    fetch,
    fuzz_counts,  # noqa: F401 - fixture
    fuzz_examples,
)
from tests.test_proxy_support import FamilyIndex, ProxyThread, family_index, make_config  # noqa: F401

CONFIG = load_config(environ={})
ALGORITHMS = default_algorithms(CONFIG.fingerprint)
_FP = Fingerprinter(CONFIG.fingerprint)
_BASE = ("Oil prices rose sharply on Tuesday after the producers agreed to cut output for the "
         "third quarter in a row, traders in London and New York said, while analysts warned that "
         "demand from Asia was weakening and stocks in the United States kept growing.")
#: Real fingerprints: three near-duplicates of one story and two other stories.
REAL = [_FP.fingerprint(text).to_source() for text in (
    _BASE, _BASE.replace("Tuesday", "Wednesday"), _BASE + " Prices fell later.",
    "The central bank kept interest rates unchanged and said inflation would ease next year.",
    "Wheat harvest estimates were raised after good weather in the plains this summer.")]
FUZZ = dict(deadline=None, database=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                   HealthCheck.filter_too_much])

# -- strategies -----------------------------------------------------------------------------------
scalars = (st.none() | st.booleans() | st.integers(-2**70, 2**70)
           | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=10))
json_values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                           | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=12)
small_json = st.recursive(scalars, lambda inner: st.lists(inner, max_size=2)
                          | st.dictionaries(st.text(max_size=4), inner, max_size=2), max_leaves=3)


def rarely(draw: st.DrawFn, one_in: int) -> bool:
    """True about once in ``one_in`` draws (hypothesis favours small integers, so 0 means no)."""
    return draw(st.integers(0, one_in - 1)) == one_in - 1


@st.composite
def fingerprints(draw: st.DrawFn) -> Any:
    """A stored fingerprint: real, damaged (one key replaced), of another version, or anything."""
    real = dict(draw(st.sampled_from(REAL)))
    kind = draw(st.sampled_from(["real", "real", "real", "damaged", "foreign", "junk"]))
    if kind == "damaged":
        real[draw(st.sampled_from(["v", "sig", "n", "super"]))] = draw(small_json)
    elif kind == "foreign":
        real["v"] = "0-other"
    elif kind == "junk":
        return draw(small_json)
    return real


@st.composite
def hits(draw: st.DrawFn, ids: st.SearchStrategy[Any] = st.text(max_size=4) | small_json) -> Any:  # noqa: B008 (a strategy, built once)
    if rarely(draw, 12):
        return draw(small_json)
    hit: dict[str, Any] = {}
    for key, value in (("_index", st.sampled_from(["i", "j"]) | small_json), ("_id", ids),
                       ("_score", st.floats(allow_nan=False, allow_infinity=False) | small_json),
                       ("_routing", st.text(max_size=3) | small_json), ("sort", small_json)):
        if draw(st.booleans()):
            hit[key] = draw(value)
    source = draw(st.sampled_from(["fingerprint", "fingerprint", "plain", "junk", "none"]))
    if source == "fingerprint":
        hit["_source"] = {"title": draw(st.text(max_size=8)), "neardup": draw(fingerprints())}
    elif source == "plain":
        hit["_source"] = draw(st.dictionaries(st.text(max_size=6), small_json, max_size=3))
    elif source == "junk":
        hit["_source"] = draw(small_json)
    if draw(st.booleans()):
        stored = draw(fingerprints())
        if isinstance(stored, dict) and not rarely(draw, 4):
            hit["fields"] = {f"neardup.{k}": [stored.get(k)] for k in ("v", "sig", "n")}
        else:
            hit["fields"] = draw(small_json)
    if rarely(draw, 8):
        hit["inner_hits"] = draw(small_json)
    return hit


@st.composite
def search_responses(draw: st.DrawFn, max_hits: int = 15, unique_ids: bool = False) -> Any:
    """Search-shaped values most of the time, anything JSON-like otherwise."""
    if rarely(draw, 10):
        return draw(json_values)
    ids = st.just(None) if unique_ids else st.text(max_size=4) | small_json
    page = draw(st.lists(hits(ids), max_size=max_hits))
    if unique_ids:
        for position, hit in enumerate(page):
            if isinstance(hit, dict):
                hit["_id"] = f"d{position}"
    inner: Any = {"hits": page}
    for key, value in (("total", json_values), ("max_score", json_values)):
        if draw(st.booleans()):
            inner[key] = draw(value)
    if rarely(draw, 10):
        inner = draw(json_values)
    response: dict[str, Any] = {"hits": inner}
    for key, value in (("took", st.integers(0, 100) | small_json), ("timed_out", st.booleans()),
                       ("_shards", small_json), ("aggregations", small_json), ("pit_id", st.text(max_size=5))):
        if draw(st.booleans()):
            response[key] = draw(value)
    return response


PLAN_BODIES = [{}, {"_source": False}, {"_source": ["title"]}, {"_source": False, "fields": ["neardup.*"]},
               {"size": 3}, {"size": 2, "from": 1}, {"stored_fields": ["title"]}, {"size": 1, "from": 4}]
PLAN_PARAMS = [[], [("rest_total_hits_as_int", "true", "rest_total_hits_as_int=true")],
               [("filter_path", "hits.hits._id,neardup", "filter_path=hits.hits._id,neardup")]]


# -- 1. the pure collapse functions ------------------------------------------------------------------
@settings(max_examples=fuzz_examples(300), **FUZZ)
@given(response=search_responses(), body=st.sampled_from(PLAN_BODIES), params=st.sampled_from(PLAN_PARAMS),
       threshold=st.sampled_from([0.0, 0.5, 0.8, 1.0]), mode=st.sampled_from(["resemblance", "containment"]))
def test_collapse_functions_take_any_upstream_response(fuzz_counts, response: Any, body: dict, params: list,
                                                       threshold: float, mode: str) -> None:
    fuzz_counts["collapse functions (pure)"] += 1
    plan = plan_search(dict(body), list(params), Settings(True, threshold, mode), max_window=50)
    assert isinstance(plan, Plan)
    original = copy.deepcopy(response)
    window = Window(plan)
    try:
        window.add_round(response, plan.first_window())
        groups, fingerprinted = collapse.group(window.hits, plan.channel, threshold, mode, ALGORITHMS)
        annotate_page(window, groups, ALGORITHMS.read)
        result = finish(window, groups, fingerprinted)
    except ValueError:
        return  # refused: the proxy fails open and the client gets the upstream's bytes
    filtered = apply_filter(plan.filter, copy.deepcopy(result))
    json.dumps(filtered)
    assert len(result["hits"]["hits"]) <= plan.size
    if plan.added_fields:   # the proxy's fingerprint fields are gone again
        for hit in result["hits"]["hits"]:
            assert not set(plan.added_fields) & set(hit.get("fields", {}))
    else:
        assert_faithful_collapse(result, original)


# -- 2. end to end against the real Elasticsearch ----------------------------------------------------
PARAM_NAMES = ["neardup", "neardup_threshold", "neardup_mode", "neardup_other", "size", "from", "q",
               "filter_path", "_source", "_source_includes", "pretty", "rest_total_hits_as_int",
               "track_total_hits", "sort", "stored_fields", "docvalue_fields", "request_cache", "typed_keys",
               "source", "source_content_type", "allow_no_indices", "timeout", "df", "analyzer"]
PARAM_VALUES = ["", "on", "off", "true", "false", "0", "1", "5", "-1", "0.5", "2", "nan", "containment",
                "hits.hits._id", "-hits.hits._source", "title", "rank:asc", "body:said", "{}", '{"size":1}',
                "application/json", "%FF", "%zz", "1m", "neardup.*"]
HEADER_VALUES = {
    "Content-Type": ["application/json", "application/x-ndjson", "text/plain", "application/yaml",
                     "application/vnd.elasticsearch+json; compatible-with=8", "application/json; charset=x"],
    "Accept": ["application/json", "application/vnd.elasticsearch+json; compatible-with=8", "application/cbor",
               "*/*", "text/html"],
    "Accept-Encoding": ["gzip", "identity", "gzip;q=0", "br, *"],
    "X-Neardup": ["on", "off", "x"], "X-Neardup-Threshold": ["0.7", "7"], "X-Neardup-Mode": ["containment", "?"],
    "X-Opaque-Id": ["fuzz"],
}
SEARCH_KEYS = {
    "query": st.sampled_from([{"match_all": {}}, {"match": {"body": "said"}}, {"term": {"family": "f1"}},
                              {"bool": {"must": []}}]) | json_values,
    "size": st.integers(-2, 40) | json_values, "from": st.integers(-2, 30) | json_values,
    "_source": st.sampled_from([True, False, ["title"], {"excludes": ["body"]}, "title"]) | json_values,
    "fields": st.sampled_from([["title"], ["neardup.*"], [{"field": "rank"}], "title"]) | json_values,
    "stored_fields": st.sampled_from([["title"], "_none_", []]) | json_values,
    "docvalue_fields": st.sampled_from([["rank"], ["neardup.v"]]) | json_values,
    "sort": st.sampled_from([["rank"], [{"rank": "desc"}], "_score"]) | json_values,
    "collapse": st.sampled_from([{"field": "family"}]) | json_values,
    "search_after": st.sampled_from([[5]]) | json_values,
    "track_total_hits": st.booleans() | st.integers(-1, 100) | json_values,
    "aggs": st.sampled_from([{"t": {"terms": {"field": "family"}}}]) | json_values,
    "highlight": st.sampled_from([{"fields": {"body": {}}}]) | json_values,
}


@st.composite
def search_bodies(draw: st.DrawFn) -> bytes:
    kind = draw(st.sampled_from(["object", "object", "object", "json", "bytes", "deep"]))
    if kind == "object":
        keys = draw(st.lists(st.sampled_from(sorted(SEARCH_KEYS)), max_size=4, unique=True))
        return json.dumps({k: draw(SEARCH_KEYS[k]) for k in keys}).encode()
    if kind == "json":
        return json.dumps(draw(json_values)).encode()
    if kind == "deep":
        depth = draw(st.integers(100, 3000))
        return b'{"query":' * depth + b"{}" + b"}" * depth
    return draw(st.binary(max_size=60))


@st.composite
def requests(draw: st.DrawFn, index: str) -> tuple[str, str, bytes | None, dict[str, str]]:
    path = draw(st.sampled_from([f"/{index}/_search", "/_search", f"/{index}/_msearch", "/_msearch",
                                 f"/{index}/_count", f"/{index}/_doc/s1", f"/{index},{index}/_search"]))
    params = draw(st.lists(st.tuples(st.sampled_from(PARAM_NAMES), st.sampled_from(PARAM_VALUES) | st.text(max_size=6)),
                           max_size=4))
    raw_values = ("%FF", "%zz")   # sent as they are: an invalid byte, an invalid escape
    query = "&".join(name + ("=" + (value if value in raw_values else urllib.parse.quote(value, safe=""))
                             if value or draw(st.booleans()) else "") for name, value in params)
    headers = {name: draw(st.sampled_from(values))
               for name, values in HEADER_VALUES.items() if draw(st.integers(0, 3)) == 0}
    if "_msearch" in path:
        header_lines = (st.sampled_from([b"{}", f'{{"index":"{index}"}}'.encode(), b""])
                        | json_values.map(lambda value: json.dumps(value).encode()))
        lines = draw(st.lists(st.tuples(header_lines, search_bodies()), min_size=1, max_size=3))
        body: bytes | None = b"".join(h + b"\n" + b.replace(b"\n", b" ") + b"\n" for h, b in lines)
        headers.setdefault("Content-Type", "application/x-ndjson")
    elif path.endswith("_doc/s1"):
        body = None
    else:
        body = draw(search_bodies() | st.just(b""))
        headers.setdefault("Content-Type", "application/json")
    if body and draw(st.integers(0, 5)) == 0:
        body = gzip.compress(body)
        headers["Content-Encoding"] = "gzip"
    method = draw(st.sampled_from(["GET", "POST"])) if body is not None else "GET"
    return method, path + ("?" + query if query else ""), body, headers


def _without_proxy_params(path: str) -> str:
    base, _, query = path.partition("?")
    kept = [p for p in query.split("&") if p and not urllib.parse.unquote_plus(p.split("=")[0]).startswith("neardup")]
    return base + ("?" + "&".join(kept) if kept else "")


@pytest.fixture(scope="module")
def fuzz_proxy(es_url: str) -> Iterator[tuple[ProxyThread, LogCapture]]:
    with LogCapture() as logs, ProxyThread(make_config(es_url, proxy={"max_body_bytes": 256 * 1024})) as proxy:
        yield proxy, logs


@pytest.mark.es
@settings(max_examples=fuzz_examples(150), **FUZZ)
@given(data=st.data())
def test_requests_through_the_proxy_are_answered_like_elasticsearch(
        fuzz_counts, fuzz_proxy, es_url: str, family_index: FamilyIndex, data: st.DataObject) -> None:
    proxy, logs = fuzz_proxy
    method, path, body, headers = data.draw(requests(family_index.name))
    fuzz_counts["requests against Elasticsearch (end to end)"] += 1
    fail_open = proxy.metrics.counters["neardup_proxy_fail_open_total"][()]
    logs.clear()
    via = fetch(proxy.url, method, path, body, headers)
    assert via.complete, via
    assert es_error_type(via) != "neardup_proxy_exception" and b"Traceback" not in via.content
    assert not logs.errors(), [r.getMessage() for r in logs.errors()]
    assert proxy.metrics.counters["neardup_proxy_fail_open_total"][()] == fail_open, "failed open on a real answer"
    error = es_error_type(via) or ""
    reason = via.json()["error"]["reason"] if error else ""
    if error == "illegal_argument_exception" and "neardup" in reason.lower() and via.status == 400:
        return   # the proxy's own parameters: Elasticsearch never sees them
    direct = fetch(es_url, method, _without_proxy_params(path), body, headers)
    if not direct.complete:   # Elasticsearch hung up on it: the proxy says so cleanly
        assert via.status == 502 and error == "neardup_upstream_exception", (direct, via)
        return
    assert via.status == direct.status, (method, path, body and body[:200], headers, via.content[:300], direct.content[:300])


# -- 3. end to end against an upstream that answers garbage --------------------------------------------
@st.composite
def upstream_answers(draw: st.DrawFn) -> tuple[bytes, str]:
    """(raw HTTP response, framing): "ok", "short" (declares more than it sends) or "unfinished"."""
    status = draw(st.sampled_from([200, 200, 200, 201, 400, 404, 429, 500, 503]))
    content_type = draw(st.sampled_from(["application/json", "application/json", "text/html",
                                         "application/vnd.elasticsearch+json; compatible-with=8", "text/plain"]))
    kind = draw(st.sampled_from(["search", "search", "msearch", "json", "bytes"]))
    if kind == "search":
        body = json.dumps(draw(search_responses(max_hits=12, unique_ids=True))).encode()
    elif kind == "msearch":
        answers = draw(st.lists(search_responses(max_hits=12, unique_ids=True), max_size=3))
        body = json.dumps({"took": 1, "responses": answers} if draw(st.booleans()) else draw(json_values)).encode()
    elif kind == "json":
        body = json.dumps(draw(json_values)).encode()
    else:
        body = draw(st.binary(max_size=80))
    framing = draw(st.sampled_from(["ok", "ok", "ok", "short", "unfinished"]))
    if framing == "short":
        return http_response(status, body, content_type, declared_length=len(body) + 10, close=True), framing
    if framing == "unfinished":
        return chunked_response(status, [body[: len(body) // 2] or b"{", b"x"], content_type, finish=False), framing
    return http_response(status, body, content_type), framing


@pytest.fixture(scope="module")
def garbage_proxy() -> Iterator[tuple[FaultProxy, ProxyThread, LogCapture]]:
    with FaultProxy(fault=Fault("respond")) as liar, LogCapture() as logs, \
            ProxyThread(make_config(liar.url, upstream={"request_timeout": 5.0})) as proxy:
        yield liar, proxy, logs


CLIENT_REQUESTS = [("POST", "/i/_search", b'{"size": 5}', {"Content-Type": "application/json"}),
                   ("POST", "/i/_search?filter_path=hits.hits._id", b"{}", {"Content-Type": "application/json"}),
                   ("POST", "/_msearch", b'{}\n{"size": 5}\n{"index":"i"}\n{}\n', {"Content-Type": "application/x-ndjson"}),
                   ("GET", "/i/_doc/1", None, {})]


@settings(max_examples=fuzz_examples(150), **FUZZ)
@given(answer=upstream_answers(), request=st.sampled_from(CLIENT_REQUESTS))
def test_garbage_from_the_upstream_never_looks_valid(fuzz_counts, garbage_proxy, answer: tuple[bytes, str],
                                                     request: tuple) -> None:
    liar, proxy, logs = garbage_proxy
    raw, framing = answer
    fuzz_counts["upstream garbage (end to end)"] += 1
    liar.fault = Fault("respond", response=raw, close_after=True)
    logs.clear()
    method, path, body, headers = request
    out = fetch(proxy.url, method, path, body, headers)
    assert not logs.errors(), [r.getMessage() for r in logs.errors()]
    if not out.complete:
        assert framing != "ok" and out.got_status_line, out   # broke off visibly, after a good start
        return
    assert es_error_type(out) != "neardup_proxy_exception" and b"Traceback" not in out.content
    if out.status == 502 and es_error_type(out) == "neardup_upstream_exception":
        return
    assert framing == "ok", f"a broken-off upstream body reached the client as complete: {out}"
    head, _, upstream_body = raw.partition(b"\r\n\r\n")
    status = int(head.split(b" ")[1])
    if (out.status, out.content) == (status, upstream_body):
        return   # unchanged
    assert out.status == 200 == status and method == "POST", out
    answer_value, said = out.json(), json.loads(upstream_body)
    if "filter_path" in path:
        assert set(answer_value) <= {"hits", "neardup"}
    elif path == "/_msearch":
        for one, upstream_one in zip(answer_value["responses"], said["responses"], strict=True):
            if "neardup" in one:
                assert_faithful_collapse(one, upstream_one)
            else:
                assert one == upstream_one
    else:
        assert_faithful_collapse(answer_value, said)
