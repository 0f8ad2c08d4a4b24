"""The proxy against the real engine (Elasticsearch or OpenSearch), with the engine's official
client pointed at it."""

from __future__ import annotations

import asyncio
import gzip
import json
import re
import socket
import threading
import time
import urllib.error
import urllib.request
import uuid
from typing import Any

import pytest

from neardup.upstream import ClusterInfo
from tests.test_proxy_support import (  # noqa: F401 - fixtures
    FamilyIndex,
    ProxyThread,
    async_engine_client,
    bulk,
    close_pit,
    create_index,
    delete_index,
    family_index,
    free_port,
    make_config,
    mapping,
    msearch,
    open_pit,
    pes,
    product_header,
    proxy,
    request,
    search,
)

pytestmark = pytest.mark.es


def http(url: str, method: str = "GET", body: bytes | None = None,
         headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, {k.lower(): v for k, v in response.headers.items()}, response.read()
    except urllib.error.HTTPError as error:
        return error.code, {k.lower(): v for k, v in error.headers.items()}, error.read()


def post_json(url: str, body: Any, headers: dict[str, str] | None = None) -> tuple[int, dict, Any]:
    status, head, raw = http(url, "POST", json.dumps(body).encode(),
                             {"Content-Type": "application/json", **(headers or {})})
    return status, head, json.loads(raw)


def without_took(raw: bytes) -> bytes:
    return re.sub(rb'"took":\d+', b'"took":0', raw)


# -- transparent pass-through with the official clients ---------------------------------------
def test_sync_client_works_for_every_kind_of_request(pes: Any, es: Any) -> None:
    name = f"proxy-client-{time.time_ns()}"
    create_index(pes, name, {"properties": {"n": {"type": "integer"}, "t": {"type": "text"}}},
                 {"number_of_shards": 1, "number_of_replicas": 0})
    try:
        assert pes.indices.exists(index=name)
        ok, errors = bulk(pes, ({"_index": name, "_id": str(i), "n": i, "t": f"doc {i}"}
                                for i in range(30)), refresh="wait_for")
        assert ok == 30 and not errors
        assert pes.index(index=name, id="x", body={"n": 100, "t": "extra"}, refresh=True)["result"] == "created"
        assert pes.get(index=name, id="x")["_source"] == {"n": 100, "t": "extra"}
        pes.update(index=name, id="x", body={"doc": {"t": "changed"}}, refresh=True)
        assert es.get(index=name, id="x")["_source"]["t"] == "changed"
        assert pes.delete(index=name, id="x", refresh=True)["result"] == "deleted"
        with pytest.raises(Exception) as caught:
            pes.get(index=name, id="x")
        assert caught.value.status_code == 404 and type(caught.value).__name__ == "NotFoundError"
        assert pes.count(index=name)["count"] == 30
        found = search(pes, name, query={"range": {"n": {"lt": 5}}}, sort=["n"])
        assert [h["_id"] for h in found["hits"]["hits"]] == ["0", "1", "2", "3", "4"]
        multi = msearch(pes, [{"index": name}, {"query": {"term": {"n": 7}}},
                              {"index": name}, {"size": 0}])
        assert multi["responses"][0]["hits"]["hits"][0]["_id"] == "7"
        assert multi["responses"][1]["hits"]["total"]["value"] == 30
        # scroll
        page = search(pes, name, scroll="1m", size=7, sort=["n"])
        ids = [h["_id"] for h in page["hits"]["hits"]]
        while True:
            page = pes.scroll(scroll_id=page["_scroll_id"], scroll="1m")
            if not page["hits"]["hits"]:
                break
            ids += [h["_id"] for h in page["hits"]["hits"]]
        pes.clear_scroll(scroll_id=page["_scroll_id"])
        assert ids == [str(i) for i in range(30)]
        # point in time + search_after
        pit = open_pit(pes, name)
        after, seen = None, []
        while True:
            kwargs = {"search_after": after} if after else {}
            page = search(pes, pit={"id": pit, "keep_alive": "1m"}, size=8, sort=[{"n": "asc"}], **kwargs)
            hits = page["hits"]["hits"]
            if not hits:
                break
            seen += [h["_id"] for h in hits]
            after = hits[-1]["sort"]
        assert close_pit(pes, pit)
        assert seen == [str(i) for i in range(30)]
    finally:
        delete_index(es, name)
    assert not pes.indices.exists(index=name)


def test_async_client_works_through_the_proxy(proxy: ProxyThread, es: Any, engine: ClusterInfo) -> None:
    name = f"proxy-async-{time.time_ns()}"
    # Elasticsearch's PIT tiebreaker is _shard_doc; OpenSearch sorts a PIT on _doc.
    tiebreak = [{"_doc": "asc"}] if engine.is_opensearch else [{"_shard_doc": "asc"}]

    async def run() -> None:
        client = async_engine_client(proxy.url, engine)
        try:
            await client.indices.create(index=name, body={"settings": {"number_of_replicas": 0}})
            await client.bulk(body=[{"index": {"_index": name, "_id": "1"}}, {"t": "a"},
                                    {"index": {"_index": name, "_id": "2"}}, {"t": "b"}],
                              refresh="wait_for")
            await client.index(index=name, id="3", body={"t": "c"}, refresh=True)
            assert (await client.get(index=name, id="3"))["_source"] == {"t": "c"}
            await client.update(index=name, id="3", body={"doc": {"t": "d"}}, refresh=True)
            assert (await client.count(index=name))["count"] == 3
            found = await client.search(index=name, body={"query": {"match": {"t": "d"}}})
            assert [h["_id"] for h in found["hits"]["hits"]] == ["3"]
            multi = await client.msearch(body=[{"index": name}, {"query": {"match_all": {}}}])
            assert multi["responses"][0]["hits"]["total"]["value"] == 3
            page = await client.search(index=name, scroll="1m", body={"size": 2})
            assert len(page["hits"]["hits"]) == 2
            await client.clear_scroll(scroll_id=page["_scroll_id"])
            if engine.is_opensearch:
                pit = (await client.create_pit(index=name, keep_alive="1m"))["pit_id"]
            else:
                pit = (await client.open_point_in_time(index=name, keep_alive="1m"))["id"]
            page = await client.search(body={"pit": {"id": pit}, "size": 2, "sort": tiebreak})
            page = await client.search(body={"pit": {"id": pit}, "size": 2, "sort": tiebreak,
                                             "search_after": page["hits"]["hits"][-1]["sort"]})
            assert len(page["hits"]["hits"]) == 1
            if engine.is_opensearch:
                await client.delete_pit(body={"pit_id": [pit]})
            else:
                await client.close_point_in_time(id=pit)
            await client.delete(index=name, id="3", refresh=True)
            assert (await client.count(index=name))["count"] == 2
        finally:
            await client.close()

    try:
        asyncio.run(run())
    finally:
        delete_index(es, name)


def test_neardup_off_is_byte_identical_to_elasticsearch(proxy: ProxyThread, es_url: str,
                                                       family_index: FamilyIndex) -> None:
    body = json.dumps({"query": {"match": {"body": "shares"}}, "size": 20,
                       "aggs": {"t": {"terms": {"field": "topics"}}}}).encode()
    headers = {"Content-Type": "application/json"}
    path = f"/{family_index.name}/_search"
    direct = http(es_url + path + "?typed_keys=true", "POST", body, headers)
    off = http(proxy.url + path + "?neardup=off&typed_keys=true", "POST", body, headers)
    header_off = http(proxy.url + path + "?typed_keys=true", "POST", body, {**headers, "X-Neardup": "off"})
    assert direct[0] == off[0] == header_off[0] == 200
    assert without_took(off[2]) == without_took(direct[2]) == without_took(header_off[2])
    for name in ("content-type", "x-elastic-product", "x-opensearch-version"):
        assert off[1].get(name) == direct[1].get(name)
    # No "took" at all: exactly the same bytes.
    doc = family_index.ranked[0]
    assert http(proxy.url + f"/{family_index.name}/_doc/{doc}")[2] == \
        http(es_url + f"/{family_index.name}/_doc/{doc}")[2]


def test_headers_compatibility_and_product_pass_through(proxy: ProxyThread, es_url: str, engine: ClusterInfo,
                                                       family_index: FamilyIndex) -> None:
    """Elasticsearch reads ``compatible-with`` media types and answers in them; OpenSearch
    refuses such a Content-Type (406) and ignores such an Accept. Through the proxy, collapsed
    or not, the client gets what the engine answers directly."""
    compat = "application/vnd.elasticsearch+json; compatible-with=8"
    for path in (f"/{family_index.name}/_search", f"/{family_index.name}/_count"):
        status, headers, raw = http(proxy.url + path, "POST", b"{}", {"Content-Type": compat, "Accept": compat})
        direct = http(es_url + path, "POST", b"{}", {"Content-Type": compat, "Accept": compat})
        assert headers.get("x-elastic-product") == direct[1].get("x-elastic-product") == product_header(engine)
        if engine.is_opensearch:
            assert status == direct[0] == 406 and raw == direct[2]
            assert "x-neardup-skipped" in headers or path.endswith("_count")
        else:
            assert status == 200
            assert "compatible-with=8" in headers["content-type"]
    status, _, raw = http(proxy.url + f"/{family_index.name}/_search", "POST", b"{}",
                          {"Content-Type": compat, "Accept": "application/vnd.elasticsearch+json; compatible-with=7"})
    direct = http(es_url + f"/{family_index.name}/_search", "POST", b"{}",
                  {"Content-Type": compat, "Accept": "application/vnd.elasticsearch+json; compatible-with=7"})
    assert status == direct[0] == (406 if engine.is_opensearch else 400)
    assert json.loads(raw)["error"] == json.loads(direct[2])["error"]


@pytest.mark.parametrize("version", [7, 8, 9])
def test_compatible_with_accept_alone_is_answered_as_the_engine_answers_it(
        proxy: ProxyThread, es_url: str, engine: ClusterInfo, family_index: FamilyIndex, version: int) -> None:
    """A search without a body but with a ``compatible-with`` Accept: the proxy writes the body
    of its rounds itself, with a Content-Type the engine reads (OpenSearch: plain JSON, it
    ignores the Accept), so the search is collapsed where the engine answers it at all."""
    accept = {"Accept": f"application/vnd.elasticsearch+json; compatible-with={version}"}
    path = f"/{family_index.name}/_search?sort=rank&size=4"
    status, headers, raw = http(proxy.url + path, headers=accept)
    direct = http(es_url + path, headers=accept)
    assert status == direct[0]
    assert headers.get("x-elastic-product") == product_header(engine)
    assert headers["content-type"] == direct[1]["content-type"]
    if status == 200:
        assert "neardup" in json.loads(raw) and "x-neardup-skipped" not in headers
    else:   # Elasticsearch 9 refuses compatible-with=7, Elasticsearch 8 refuses 9
        assert not engine.is_opensearch and raw == direct[2]
    if engine.is_opensearch or (engine.major or 0) - 1 <= version <= (engine.major or 0):
        assert status == 200


def test_gzip_both_ways(proxy: ProxyThread, es_url: str, family_index: FamilyIndex) -> None:
    body = gzip.compress(json.dumps({"size": 5, "sort": ["rank"]}).encode())
    headers = {"Content-Type": "application/json", "Content-Encoding": "gzip", "Accept-Encoding": "gzip"}
    status, head, raw = http(proxy.url + f"/{family_index.name}/_search", "POST", body, headers)
    assert status == 200 and head["content-encoding"] == "gzip"
    decoded = json.loads(gzip.decompress(raw))
    assert len(decoded["hits"]["hits"]) == 5 and "neardup" in decoded
    # Pass-through: Any's own gzip bytes.
    status, head, raw = http(proxy.url + f"/{family_index.name}/_count", "POST", body, headers)
    direct = http(es_url + f"/{family_index.name}/_count", "POST", body, headers)
    assert head.get("content-encoding") == direct[1].get("content-encoding") == "gzip"
    assert json.loads(gzip.decompress(raw)) == json.loads(gzip.decompress(direct[2]))
    # The official client with compression on.
    client = proxy.client(http_compress=True)
    try:
        assert client.count(index=family_index.name)["count"] == len(family_index.docs)
        assert len(client.search(index=family_index.name, size=3)["hits"]["hits"]) == 3
    finally:
        client.close()


def test_the_proxys_own_errors_are_gzipped_like_elasticsearchs(proxy: ProxyThread, es_url: str,
                                                              family_index: FamilyIndex) -> None:
    """Elasticsearch compresses every answer when the client accepts gzip, errors included;
    so does the proxy for the errors it writes itself (here a bad control parameter)."""
    accept = {"Content-Type": "application/json", "Accept-Encoding": "gzip"}
    status, head, raw = http(proxy.url + f"/{family_index.name}/_search?neardup_threshold=2", "POST", b"{}", accept)
    direct = http(es_url + f"/{family_index.name}/_search?size=x", "POST", b"{}", accept)
    assert status == direct[0] == 400
    assert head.get("content-encoding") == direct[1].get("content-encoding") == "gzip"
    error = json.loads(gzip.decompress(raw))
    assert error["status"] == 400 and "neardup_threshold" in error["error"]["reason"]
    status, head, raw = http(proxy.url + f"/{family_index.name}/_search?neardup_threshold=2", "POST", b"{}",
                             {"Content-Type": "application/json"})
    assert status == 400 and "content-encoding" not in head and json.loads(raw)["status"] == 400


# -- collapsing -----------------------------------------------------------------------------
def shown_ids(response: dict) -> list[str]:
    ids = []
    for top in response["hits"]["hits"]:
        ids.append(top["_id"])
        ids.extend(h["_id"] for h in top["inner_hits"]["neardup"]["hits"]["hits"])
    return ids


def test_collapsed_pages_match_exact_similarity(pes: Any, family_index: FamilyIndex) -> None:
    index = family_index
    seen: set[str] = set()
    for page in range(5):
        response = search(pes, index=index.name, sort=["rank"], from_=page * 8, size=8)
        tops = response["hits"]["hits"]
        assert len(tops) == 8, "a page holds size distinct groups"
        summary = response["neardup"]
        assert summary["groups"] == 8 and summary["threshold"] == 0.8 and summary["mode"] == "resemblance"
        shown = shown_ids(response)
        assert not seen & set(shown), "a document appears on two pages"
        window = index.ranked[:summary["window"]]
        exact = index.exact_groups(window, 0.8)
        for top in tops:
            members = {top["_id"], *(h["_id"] for h in top["inner_hits"]["neardup"]["hits"]["hits"])}
            assert top["fields"]["neardup.group"] == [f"{index.name}/{top['_id']}"]
            # The representative is the best-ranked member.
            assert min(members, key=index.ranked.index) == top["_id"]
            for a in members:
                for b in window:
                    if b in members or b not in index.shingles or a not in index.shingles:
                        continue
                    assert index.exact(a, b) < 0.9, f"{a} ~ {b} should have been grouped"
            for a in members:
                for b in members:
                    if a < b:  # members are connected; within a group the copies are close
                        assert any(index.exact(a, c) >= 0.7 for c in members if c != a)
            for earlier in seen:
                if top["_id"] in index.shingles and earlier in index.shingles:
                    assert index.exact(top["_id"], earlier) < 0.9, "near-duplicate of an earlier page"
        exact_sizes = sorted(len(g) for g in exact if len(g) > 1)
        assert exact_sizes, "the window holds known near-duplicates"
        seen |= set(shown)
    # Every edited copy family seen so far was folded, never shown twice.
    assert any(response["neardup"]["collapsed"] for response in [search(pes, index=index.name, sort=["rank"], size=8)])


def test_hits_without_fingerprint_are_never_collapsed(es_url: str, engine: ClusterInfo,
                                                     family_index: FamilyIndex) -> None:
    # With query-time fingerprints off (collapse.fingerprint_missing = false): the behaviour the
    # option keeps. With it on (the default) the three are fingerprinted and fold (next test).
    config = make_config(es_url, collapse={"fingerprint_missing": False})
    with ProxyThread(config, engine=engine) as running:
        client = running.client()
        response = search(client, index=family_index.name, query={"prefix": {"family": "x"}}, sort=["rank"])
        client.close()
    assert [h["_id"] for h in response["hits"]["hits"]] == ["x-none", "x-old", "x-bad"]
    assert response["neardup"]["collapsed"] == 0 and response["neardup"]["fingerprinted"] == 0
    assert "fingerprinted_at_query_time" not in response["neardup"]


def test_hits_without_fingerprint_are_fingerprinted_at_query_time(pes: Any, family_index: FamilyIndex) -> None:
    # x-none has none, x-old one of another scheme, x-bad a malformed one; the three hold one text
    response = search(pes, index=family_index.name, query={"prefix": {"family": "x"}}, sort=["rank"])
    [top] = response["hits"]["hits"]
    assert top["_id"] == "x-none"
    assert [h["_id"] for h in top["inner_hits"]["neardup"]["hits"]["hits"]] == ["x-old", "x-bad"]
    summary = response["neardup"]
    assert summary["collapsed"] == 2 and summary["fingerprinted"] == 3
    assert summary["fingerprinted_at_query_time"] == 3 and summary["fingerprint_skipped"] == 0


def test_threshold_and_mode_controls(proxy: ProxyThread, family_index: FamilyIndex) -> None:
    url = proxy.url + f"/{family_index.name}/_search"
    body = {"sort": ["rank"], "size": 10}
    loose = post_json(url + "?neardup_threshold=0.5&neardup_mode=containment", body)[2]
    assert loose["neardup"]["threshold"] == 0.5 and loose["neardup"]["mode"] == "containment"
    strict = post_json(url, body, {"X-Neardup-Threshold": "1.0"})[2]
    assert strict["neardup"]["threshold"] == 1.0
    assert strict["neardup"]["collapsed"] <= loose["neardup"]["collapsed"]


# -- client-visible fields are exactly Elasticsearch's ----------------------------------------
def strip_ours(hit: dict) -> dict:
    """The hit without what the proxy adds: fields["neardup.group"] (kept hits),
    fields["neardup.similarity"] (collapsed hits) and inner_hits["neardup"]."""
    hit = dict(hit)
    for key, ours in (("fields", ("neardup.group", "neardup.similarity")), ("inner_hits", ("neardup",))):
        rest = {name: value for name, value in hit.get(key, {}).items() if name not in ours}
        hit.pop(key, None)
        if rest:
            hit[key] = rest
    return hit


@pytest.mark.parametrize("body, query", [
    ({}, ""),
    ({"_source": False}, ""),
    ({"_source": ["title", "rank"]}, ""),
    ({"_source": {"includes": ["ti*", "neardup.n"], "excludes": ["body"]}}, ""),
    ({"_source": {"excludes": ["neardup"]}}, ""),
    ({}, "_source_includes=title&_source_excludes=body"),
    ({}, "_source=false"),
    ({"stored_fields": ["title"]}, ""),
    ({"stored_fields": []}, ""),
    ({"stored_fields": [], "_source": True}, ""),
    ({"docvalue_fields": ["topics", "rank"], "_source": False}, ""),
    ({"fields": ["title", "neardup.v"], "_source": False}, ""),
    ({"fields": ["*"], "_source": ["family"]}, ""),
    ({"version": True, "seq_no_primary_term": True, "highlight": {"fields": {"body": {}}},
      "query": {"match": {"body": "company"}}}, ""),
])
def test_hits_have_exactly_the_fields_elasticsearch_returns(pes: Any, es: Any,
                                                            family_index: FamilyIndex,
                                                            body: dict, query: str) -> None:
    params = dict(p.split("=") for p in query.split("&") if p)
    params = {("source" if k == "_source" else k.lstrip("_")): v for k, v in params.items()}
    request = {"sort": ["rank"] if "query" not in body else ["_score", "rank"], "size": 10, **body}
    proxied = search(pes, index=family_index.name, **request, **params)
    direct = search(es, index=family_index.name, **{**request, "size": 100}, **params)
    by_id = {h["_id"]: h for h in direct["hits"]["hits"]}
    checked = 0
    for top in proxied["hits"]["hits"]:
        for hit in [top, *top["inner_hits"]["neardup"]["hits"]["hits"]]:
            assert strip_ours(hit) == by_id[hit["_id"]]
            checked += 1
    assert checked >= 10 and proxied["hits"]["total"] == direct["hits"]["total"]


@pytest.mark.parametrize("body, query", [
    ({"stored_fields": []}, ""),          # ids only: no _source, no stored fields
    ({}, "stored_fields="),
    ({"_source": False}, ""),
    ({"stored_fields": ["title"], "_source": True}, ""),
    ({"_source": ["title"]}, ""),
])
def test_the_groups_do_not_depend_on_what_the_client_fetches(pes: Any, family_index: FamilyIndex,
                                                             body: dict, query: str) -> None:
    """Whatever the client asks to be fetched (ids only, no source, part of it), the proxy reads
    the fingerprints and folds the same hits as for a plain search."""
    def groups(extra: dict, params: dict) -> list[list[str]]:
        answer = search(pes, index=family_index.name, sort=["rank"], size=20, **extra, **params)
        assert answer["neardup"]["fingerprinted"] >= 20
        return [[hit["_id"]] + [m["_id"] for m in hit["inner_hits"]["neardup"]["hits"]["hits"]]
                for hit in answer["hits"]["hits"]]

    params = {k.lstrip("_"): v for k, v in (p.split("=") for p in query.split("&") if p)}
    plain = groups({}, {})
    assert any(len(group) > 1 for group in plain), "the page should fold near-duplicates"
    assert groups(body, params) == plain


def test_aggregations_suggest_and_totals_are_left_as_elasticsearch_returns_them(
        pes: Any, es: Any, family_index: FamilyIndex) -> None:
    request = {"query": {"match": {"body": "the"}}, "size": 30, "track_total_hits": True,
               "aggs": {"topics": {"terms": {"field": "topics", "size": 50}}},
               "suggest": {"s": {"text": "compny", "term": {"field": "body"}}}}
    proxied = search(pes, index=family_index.name, **request)
    direct = search(es, index=family_index.name, **request)
    for key in ("aggregations", "suggest", "_shards", "timed_out"):
        assert proxied[key] == direct[key]
    assert proxied["hits"]["total"] == direct["hits"]["total"]
    assert proxied["hits"]["max_score"] == direct["hits"]["max_score"]
    ranking = search(es, index=family_index.name, query=request["query"], size=200)
    direct_order = [h["_id"] for h in ranking["hits"]["hits"]]
    tops = [h["_id"] for h in proxied["hits"]["hits"]]
    assert tops == sorted(tops, key=direct_order.index), "ES ranking is kept"


@pytest.mark.parametrize("path", ["window", "pushdown"])
def test_added_fields_stay_out_of_completion_suggestions(pes: Any, es: Any, es_url: str,
                                                         family_index: FamilyIndex, path: str) -> None:
    """Elasticsearch fetches a search's top-level ``fields`` for the options of a completion
    suggester too (they are hits, like those of ``top_hits``): the fingerprint fields the proxy
    adds must not come back there (README "Response format": "Fields are exactly what the client
    asked for"), on the window path, in an msearch, and pushed down."""
    from tests.test_cluster_es import cluster

    name = f"proxy-test-suggest-{uuid.uuid4().hex[:8]}"
    mappings = mapping()
    mappings["properties"]["tag"] = {"type": "completion"}
    create_index(es, name, mappings, {"number_of_shards": 1, "number_of_replicas": 0})
    try:
        bulk(es, ({"_index": name, "_id": i, "_source": {**d, "tag": f"story {i}"}}
                          for i, d in family_index.docs.items()), refresh="wait_for")
        if path == "pushdown":
            assert cluster(es_url, name)["failed"] == 0
        suggest = {"t": {"prefix": "story s1", "completion": {"field": "tag", "size": 4}}}
        for body in ({"_source": False}, {"_source": ["title"], "fields": ["rank"]}):
            request = {**body, "query": {"match": {"body": "the"}}, "size": 5, "suggest": suggest}
            direct = search(es, index=name, **request)
            assert len(direct["suggest"]["t"][0]["options"]) == 4
            proxied = search(pes, index=name, **request)
            assert proxied["neardup"].get("pushdown", False) == (path == "pushdown")
            assert proxied["suggest"] == direct["suggest"]
            item = msearch(pes, [{"index": name}, request])["responses"][0]
            assert "neardup" in item and item["suggest"] == direct["suggest"]
    finally:
        delete_index(es, name)


@pytest.mark.parametrize("filter_expression", [
    "hits.hits._id", "hits.total,hits.hits._source.title", "-hits.hits._source",
    "hits.hits.inner_hits.neardup.hits.hits._id,neardup.groups", "**._id", "took,-hits",
    "hits.hits.fields",
])
def test_filter_path_is_applied_to_the_collapsed_response(proxy: ProxyThread, es_url: str,
                                                         family_index: FamilyIndex,
                                                         filter_expression: str) -> None:
    body = {"sort": ["rank"], "size": 6}
    full = post_json(proxy.url + f"/{family_index.name}/_search", body)[2]
    filtered = post_json(proxy.url + f"/{family_index.name}/_search?filter_path={filter_expression}", body)[2]
    from neardup.proxy.handlers.filter_path import parse

    expected = parse(filter_expression).apply(full)
    expected.pop("took", None), filtered.pop("took", None)
    assert filtered == expected
    if filter_expression == "hits.hits._id":
        assert filtered == {"hits": {"hits": [{"_id": h["_id"]} for h in full["hits"]["hits"]]}}
    # Elasticsearch filters the same way for the parts that do not depend on collapsing.
    if filter_expression in ("hits.total,hits.hits._source.title", "took,-hits"):
        direct = post_json(es_url + f"/{family_index.name}/_search?filter_path={filter_expression}",
                           {**body, "size": 200})[2]
        direct.pop("took", None)
        if "hits" in direct:
            titles = {h["_id"]: h for h in full["hits"]["hits"]}
            assert direct["hits"]["total"] == filtered["hits"]["total"]
            assert len(filtered["hits"]["hits"]) == len(titles)
        else:
            assert direct == filtered


def test_msearch_collapses_each_search(pes: Any, family_index: FamilyIndex) -> None:
    name = family_index.name
    multi = msearch(pes, [
        {"index": name}, {"sort": ["rank"], "size": 5},
        {"index": name}, {"sort": ["rank"], "size": 5, "from": 5, "_source": ["title"]},
        {"index": "proxy-no-such-index"}, {"query": {"match_all": {}}},
        {"index": name}, {"size": 3, "sort": ["rank"], "search_after": [2]},
    ])
    first, second, bad, after = multi["responses"]
    assert first == {**search(pes, index=name, sort=["rank"], size=5), "took": first["took"], "status": 200}
    assert len(second["hits"]["hits"]) == 5 and set(second["hits"]["hits"][0]["_source"]) == {"title"}
    assert not set(shown_ids(first)) & set(shown_ids(second))
    assert bad["status"] == 404 and bad["error"]["type"] == "index_not_found_exception"
    assert "neardup" not in after and [h["sort"] for h in after["hits"]["hits"]] == [[3], [4], [5]]


def test_msearch_filter_path_and_neardup_off(proxy: ProxyThread, es_url: str, family_index: FamilyIndex) -> None:
    lines = f'{{"index":"{family_index.name}"}}\n{{"size":4,"sort":["rank"]}}\n'.encode()
    headers = {"Content-Type": "application/x-ndjson"}
    status, _, raw = http(proxy.url + "/_msearch?filter_path=responses.hits.hits._id", "POST", lines, headers)
    body = json.loads(raw)
    assert status == 200 and list(body) == ["responses"] and len(body["responses"][0]["hits"]["hits"]) == 4
    off = http(proxy.url + "/_msearch?neardup=off", "POST", lines, headers)
    direct = http(es_url + "/_msearch", "POST", lines, headers)
    assert without_took(off[2]) == without_took(direct[2])


def test_msearch_elasticsearch_refuses_as_a_whole_gets_its_answer_without_failing_open(
        proxy: ProxyThread, es_url: str, family_index: FamilyIndex) -> None:
    """Elasticsearch checks some things across the whole _msearch (``rest_total_hits_as_int``
    with an inexact ``track_total_hits``) and refuses it with one 400. When the proxy's first
    batch passes that check (a window past ``max_result_window`` is first probed with a body of
    its own) and the item's own body, sent later, does not, the client gets Elasticsearch's 400
    for its request, and that is no collapse failure."""
    headers = {"Content-Type": "application/x-ndjson"}
    # past the result window (its own body comes as the fallback), and past collapse.max_window
    # only (its own body, sized, comes as the first round after the probe)
    for window in ('"from":10000,"size":10', '"from":995,"size":10'):
        lines = (f'{{"index":"{family_index.name}"}}\n{{"size":4,"sort":["rank"]}}\n'
                 f'{{"index":"{family_index.name}"}}\n{{{window},"track_total_hits":50}}\n').encode()
        fail_open = proxy.metrics.counters["neardup_proxy_fail_open_total"][()]
        status, _, raw = http(proxy.url + "/_msearch?rest_total_hits_as_int=true", "POST", lines, headers)
        direct = http(es_url + "/_msearch?rest_total_hits_as_int=true", "POST", lines, headers)
        assert status == direct[0] == 400 and json.loads(raw) == json.loads(direct[2]), window
        assert proxy.metrics.counters["neardup_proxy_fail_open_total"][()] == fail_open, window


@pytest.mark.parametrize("status", [429, 503])
def test_msearch_fails_open_when_a_later_batch_meets_a_passing_upstream_error(
        proxy: ProxyThread, es_url: str, family_index: FamilyIndex, monkeypatch: pytest.MonkeyPatch,
        status: int) -> None:
    """A 429 or 5xx to a later batch says nothing about the client's request, even when the batch
    carries a client's own search (here the fallback of an item past the result window): the
    proxy fails open, sending the client's request as it came, rather than relaying the error."""
    from neardup.proxy.handlers import exchange

    fetch, calls = exchange.fetch, []

    async def second_call_refused(state: Any, incoming: Any, path_qs: str, headers: Any, body: bytes) -> Any:
        calls.append(path_qs)
        if len(calls) == 2:
            return status, {"Content-Type": "application/json"}, json.dumps(
                {"error": {"type": "circuit_breaking_exception", "reason": "busy"}, "status": status}).encode()
        return await fetch(state, incoming, path_qs, headers, body)

    monkeypatch.setattr(exchange, "fetch", second_call_refused)
    lines = (f'{{"index":"{family_index.name}"}}\n{{"size":4,"sort":["rank"]}}\n'
             f'{{"index":"{family_index.name}"}}\n{{"from":10000,"size":10}}\n').encode()
    headers = {"Content-Type": "application/x-ndjson"}
    fail_open = proxy.metrics.counters["neardup_proxy_fail_open_total"][()]
    got, head, raw = http(proxy.url + "/_msearch", "POST", lines, headers)
    direct = http(es_url + "/_msearch", "POST", lines, headers)
    assert len(calls) == 2 and got == direct[0] == 200 and head["x-neardup-skipped"] == "fail_open"
    assert [r.get("status", 200) for r in json.loads(raw)["responses"]] == \
        [r.get("status", 200) for r in json.loads(direct[2])["responses"]]
    assert proxy.metrics.counters["neardup_proxy_fail_open_total"][()] == fail_open + 1


def test_pit_with_from_size_is_collapsed_and_scroll_search_after_pass(
        pes: Any, proxy: ProxyThread, family_index: FamilyIndex) -> None:
    pit = open_pit(pes, family_index.name)
    try:
        page = search(pes, pit={"id": pit, "keep_alive": "1m"}, sort=["rank"], size=5)
        assert page["neardup"]["groups"] == 5
        status, headers, _ = http(proxy.url + f"/{family_index.name}/_search?scroll=1m&size=2", "POST", b"{}",
                                  {"Content-Type": "application/json"})
        assert status == 200 and headers["x-neardup-skipped"] == "scroll"
        status, _, raw = http(proxy.url + f"/{family_index.name}/_search?scroll=1m&neardup=on", "POST", b"{}",
                              {"Content-Type": "application/json"})
        error = json.loads(raw)
        assert status == 400 and error["error"]["type"] == "illegal_argument_exception"
        assert "scroll" in error["error"]["reason"]
    finally:
        close_pit(pes, pit)


def test_query_string_search(proxy: ProxyThread, family_index: FamilyIndex) -> None:
    status, _, raw = http(proxy.url + f"/{family_index.name}/_search?q=family:f0&sort=rank&size=1&_source=false")
    body = json.loads(raw)
    assert status == 200 and len(body["hits"]["hits"]) == 1
    top = body["hits"]["hits"][0]
    assert "_source" not in top and set(top["fields"]) == {"neardup.group"}
    assert {h["_id"] for h in top["inner_hits"]["neardup"]["hits"]["hits"]} | {top["_id"]} == {"s0", "s0-a", "s0-b"}


# -- failures -------------------------------------------------------------------------------
def assert_es_error(raw: bytes, status: int, error_type: str, text: str) -> dict:
    body = json.loads(raw)
    assert body["status"] == status
    assert body["error"]["type"] == error_type == body["error"]["root_cause"][0]["type"]
    assert text in body["error"]["reason"]
    return body


def test_400_for_invalid_controls(proxy: ProxyThread, family_index: FamilyIndex) -> None:
    status, _, raw = http(proxy.url + f"/{family_index.name}/_search?neardup_threshold=1.7")
    assert status == 400
    assert_es_error(raw, 400, "illegal_argument_exception", "neardup_threshold")
    status, _, raw = http(proxy.url + f"/{family_index.name}/_search", headers={"X-Neardup-Mode": "cosine"})
    assert_es_error(raw, 400, "illegal_argument_exception", "X-Neardup-Mode")
    client = proxy.client()
    try:
        with pytest.raises(Exception) as caught:   # elasticsearch.BadRequestError, opensearchpy.RequestError
            request(client, "GET", f"/{family_index.name}/_search", {"neardup": "sometimes"})
        assert caught.value.status_code == 400 and caught.value.error == "illegal_argument_exception"
    finally:
        client.close()


def test_502_when_the_upstream_is_unreachable(es_url: str) -> None:
    config = make_config(f"http://127.0.0.1:{free_port()}")
    with ProxyThread(config) as running:
        for path in ("/_search", "/idx/_doc/1"):
            status, headers, raw = http(running.url + path)
            assert status == 502 and headers["content-type"].startswith("application/json")
            assert_es_error(raw, 502, "neardup_upstream_unreachable_exception", "could be reached")
        assert 'kind="unreachable"' in running.metrics.render()
        status, _, raw = http(running.url + "/_neardup/health")
        assert status == 503 and json.loads(raw)["upstream"][0]["reachable"] is False


def test_requests_move_to_the_node_that_is_up(es_url: str) -> None:
    config = make_config(es_url)
    config = config.model_copy(update={"upstream": config.upstream.model_copy(
        update={"urls": [f"http://127.0.0.1:{free_port()}", es_url]})})
    with ProxyThread(config) as running:
        assert all(http(running.url + "/_cluster/health")[0] == 200 for _ in range(4))


class SilentServer:
    """A TCP server that accepts connections and never answers (an upstream that hangs)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.connections: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections.append(conn)

    def close(self) -> None:
        self.sock.close()
        for conn in self.connections:
            conn.close()


def test_504_when_the_upstream_does_not_answer_in_time() -> None:
    silent = SilentServer()
    try:
        config = make_config(f"http://127.0.0.1:{silent.port}", upstream={"request_timeout": 1.0})
        with ProxyThread(config) as running:
            started = time.monotonic()
            status, _, raw = http(running.url + "/_search", "POST", b"{}", {"Content-Type": "application/json"})
            assert status == 504 and time.monotonic() - started < 10
            assert_es_error(raw, 504, "neardup_upstream_timeout_exception", "did not answer within 1 s")
            status, _, raw = http(running.url + "/idx/_doc/1")
            assert status == 504
    finally:
        silent.close()


def test_413_for_a_body_over_the_limit(es_url: str) -> None:
    config = make_config(es_url, proxy={"max_body_bytes": 2048})
    with ProxyThread(config) as running:
        big = json.dumps({"query": {"match": {"body": "x" * 5000}}}).encode()
        for path in ("/_search", "/_bulk", "/_msearch"):
            status, _, raw = http(running.url + path, "POST", big, {"Content-Type": "application/json"})
            assert status == 413, path
            assert_es_error(raw, 413, "content_too_long_exception", "2048")
        bomb = gzip.compress(b"{" + b" " * 100_000 + b"}")
        status, _, raw = http(running.url + "/_search", "POST", bomb,
                              {"Content-Type": "application/json", "Content-Encoding": "gzip"})
        assert status == 413


def test_fail_open_returns_the_upstream_response_unchanged(es_url: str, family_index: FamilyIndex) -> None:
    from neardup.fingerprint import FingerprintParams
    from neardup.proxy.grouping.collapse import Algorithms
    from neardup.proxy.grouping.fingerprints import default_algorithms

    real = default_algorithms(FingerprintParams())

    def broken_pairs(*args: Any) -> Any:
        raise RuntimeError("grouping exploded")

    algorithms = Algorithms(read=real.read, similar_pairs=broken_pairs, group_labels=real.group_labels)
    with ProxyThread(make_config(es_url), algorithms=algorithms) as running:
        body = json.dumps({"sort": ["rank"], "size": 5}).encode()
        headers = {"Content-Type": "application/json"}
        status, head, raw = http(running.url + f"/{family_index.name}/_search", "POST", body, headers)
        direct = http(es_url + f"/{family_index.name}/_search", "POST", body, headers)
        assert status == 200 and head["x-neardup-skipped"] == "fail_open"
        assert without_took(raw) == without_took(direct[2])
        lines = f'{{"index":"{family_index.name}"}}\n{{"size":3}}\n'.encode()
        status, _, raw = http(running.url + "/_msearch", "POST", lines, {"Content-Type": "application/x-ndjson"})
        assert status == 200 and "neardup" not in json.loads(raw)["responses"][0]
        assert "neardup_proxy_fail_open_total 2" in running.metrics.render()


def test_elasticsearch_errors_reach_the_client_as_elasticsearch_wrote_them(
        proxy: ProxyThread, es_url: str, family_index: FamilyIndex) -> None:
    for body in (b'{"query": {"nope": {}}}', b'{"query": ', b'[1, 2]'):
        proxied = http(proxy.url + f"/{family_index.name}/_search", "POST", body, {"Content-Type": "application/json"})
        direct = http(es_url + f"/{family_index.name}/_search", "POST", body, {"Content-Type": "application/json"})
        assert proxied[0] == direct[0] == 400 and proxied[2] == direct[2]
    missing = http(proxy.url + "/proxy-no-such-index/_search")
    assert missing[0] == 404 and json.loads(missing[2])["error"]["type"] == "index_not_found_exception"


# -- ops ------------------------------------------------------------------------------------
def test_health_and_metrics(proxy: ProxyThread, family_index: FamilyIndex) -> None:
    status, _, raw = http(proxy.url + "/_neardup/health")
    health = json.loads(raw)
    assert status == 200 and health["status"] == "ok"
    assert health["upstream"][0]["reachable"] and health["upstream"][0]["cluster_status"] in ("green", "yellow")
    http(proxy.url + f"/{family_index.name}/_search?sort=rank&size=8")
    status, headers, raw = http(proxy.url + "/_neardup/metrics")
    text = raw.decode()
    assert status == 200 and headers["content-type"].startswith("text/plain")
    assert re.search(r'neardup_proxy_requests_total\{route="search",status="200"\} \d+', text)
    assert re.search(r'neardup_proxy_request_duration_seconds_bucket\{route="search",le="\+Inf"\} \d+', text)
    assert re.search(r"neardup_proxy_hits_collapsed_total [1-9]", text)
    assert 'neardup_proxy_searches_total{outcome="collapsed",reason=""}' in text
    for name in ("neardup_proxy_upstream_errors_total", "neardup_proxy_fail_open_total",
                 "neardup_proxy_in_flight_requests"):
        assert f"# TYPE {name}" in text


def test_access_log_is_structured_and_has_no_credentials(proxy: ProxyThread, caplog: pytest.LogCaptureFixture) -> None:
    import logging

    def access_records() -> list[logging.LogRecord]:
        return [r for r in caplog.records if r.name == "neardup.proxy.access"]

    with caplog.at_level(logging.INFO, logger="neardup.proxy.access"):
        http(proxy.url + "/_cluster/health?secret_token=hunter2",
             headers={"Authorization": "Basic c2VjcmV0OnBhc3N3b3Jk", "Cookie": "sid=hunter3"})
        # A streamed pass-through reaches the client before the proxy thread logs the request.
        deadline = time.monotonic() + 10
        while not access_records() and time.monotonic() < deadline:
            time.sleep(0.02)
    records = access_records()
    assert records
    fields = records[-1].fields
    assert fields["url.path"] == "/_cluster/health" and fields["http.response.status_code"] == 400
    assert fields["url.query_params"] == ["secret_token"]
    text = " ".join(r.getMessage() + json.dumps(r.fields) for r in records)
    for secret in ("hunter2", "hunter3", "c2VjcmV0", "password"):
        assert secret not in text


def test_access_log_counts_the_bytes_of_every_answer(proxy: ProxyThread, family_index: FamilyIndex,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    """A collapsed answer and the proxy's own error are whole bodies the proxy writes after the
    log line; their length is logged all the same, as a streamed pass-through's is."""
    import logging

    with caplog.at_level(logging.INFO, logger="neardup.proxy.access"):
        answers = [http(proxy.url + f"/{family_index.name}/_search", "POST", b'{"size": 3}',
                        {"Content-Type": "application/json"}),
                   http(proxy.url + f"/{family_index.name}/_search?neardup_threshold=2")]
    logged = [r.fields for r in caplog.records if r.name == "neardup.proxy.access"][-2:]
    assert [f["neardup.route"] for f in logged] == ["search", "search"]
    assert [f["http.response.status_code"] for f in logged] == [200, 400]
    assert [f["http.response.body.bytes"] for f in logged] == [len(raw) for _, _, raw in answers]


def test_large_bodies_stream_both_ways(pes: Any, es: Any, es_url: str, proxy: ProxyThread) -> None:
    name = f"proxy-large-{time.time_ns()}"
    text = "lorem ipsum dolor sit amet " * 400       # ~11 KB a document
    try:
        operations = []
        for i in range(300):                          # a ~3.3 MB _bulk body (streamed upstream)
            operations += [{"index": {"_index": name, "_id": str(i)}}, {"t": text, "i": i}]
        result = pes.bulk(body=operations, refresh="wait_for")
        assert not result["errors"] and len(result["items"]) == 300
        assert es.count(index=name)["count"] == 300
        status, headers, raw = http(proxy.url + f"/{name}/_search?neardup=off&size=300&sort=i")
        direct = http(es_url + f"/{name}/_search?size=300&sort=i")
        assert status == 200 and len(raw) > 3_000_000
        assert without_took(raw) == without_took(direct[2])
    finally:
        delete_index(es, name)


def test_expect_100_continue_is_handled_by_the_proxy(proxy: ProxyThread, es_url: str,
                                                     family_index: FamilyIndex) -> None:
    import subprocess

    # curl sends Expect past 1 KB; one long term (OpenSearch allows 1024 clauses to a query)
    body = json.dumps({"query": {"term": {"family": "x" * 1500}}})
    for path in (f"/{family_index.name}/_search", f"/{family_index.name}/_count"):
        result = subprocess.run(
            ["curl", "-s", "-o", "-", "-w", "\n%{http_code}", "-H", "Expect: 100-continue",
             "-H", "Content-Type: application/json", "--data-binary", "@-", proxy.url + path],
            input=body, capture_output=True, text=True, timeout=60)
        payload, _, code = result.stdout.rpartition("\n")
        assert code == "200", result.stdout[:300]
        assert "hits" in json.loads(payload) or "count" in json.loads(payload)


# -- what differs by engine: the product header, OpenSearch's own features --------------------
def test_the_proxys_own_errors_look_like_the_engines(proxy: ProxyThread, es_url: str, engine: ClusterInfo,
                                                      family_index: FamilyIndex) -> None:
    """An error the proxy writes itself (here an unknown ``neardup_*`` parameter) has the
    engine's error shape and the headers the engine puts on its answers: Elasticsearch's
    product header, none on OpenSearch (3.x: its version header instead)."""
    path = f"/{family_index.name}/_search"
    status, headers, raw = http(proxy.url + path + "?neardup_colour=red")
    direct = http(es_url + path + "?colour=red")
    assert status == direct[0] == 400
    body, theirs = json.loads(raw), json.loads(direct[2])
    assert list(body) == list(theirs) == ["error", "status"]
    assert list(body["error"]) == list(theirs["error"]) == ["root_cause", "type", "reason"]
    assert body["error"]["type"] == theirs["error"]["type"] == "illegal_argument_exception"
    assert "neardup_colour" in body["error"]["reason"]
    for name in ("x-elastic-product", "x-opensearch-version"):
        assert headers.get(name) == direct[1].get(name), name
    assert headers.get("x-elastic-product") == product_header(engine)
    with pytest.raises(Exception) as caught:   # the engine's client reads it as its own error
        request(proxy.client(), "GET", path, {"neardup_colour": "red"})
    assert caught.value.status_code == 400 and caught.value.error == "illegal_argument_exception"


def test_upstream_down_is_answered_in_the_engines_format(es_url: str, engine: ClusterInfo) -> None:
    """The engine learned at start-up decides the format of the 502 when the upstream goes away."""
    from tests.faultproxy import FaultProxy

    with FaultProxy(es_url) as relay:
        with ProxyThread(make_config(relay.url), engine=engine) as running:
            assert http(running.url + "/_cluster/health")[0] == 200
            relay.close()
            status, headers, raw = http(running.url + "/_cluster/health")
    assert status == 502 and headers["content-type"].startswith("application/json")
    assert_es_error(raw, 502, "neardup_upstream_unreachable_exception", f"no {engine.engine} node could be reached")
    assert headers.get("x-elastic-product") == product_header(engine)


def test_pass_through_keeps_the_product_header_of_the_engine(proxy: ProxyThread, engine: ClusterInfo,
                                                             family_index: FamilyIndex) -> None:
    for path in ("/", f"/{family_index.name}/_search?size=2", f"/{family_index.name}/_count", "/no-such-index/_search"):
        status, headers, _ = http(proxy.url + path)
        assert status in (200, 404, 405), path
        assert headers.get("x-elastic-product") == product_header(engine), path


def test_point_in_time_apis_of_the_engine_pass_through(proxy: ProxyThread, es_url: str, engine: ClusterInfo,
                                                       family_index: FamilyIndex) -> None:
    """OpenSearch's point in time (``POST /<index>/_search/point_in_time``, ``GET
    /_search/point_in_time/_all``, ``DELETE /_search/point_in_time``) and Elasticsearch's
    (``POST /<index>/_pit``, ``DELETE /_pit``) through the proxy; a search on it is collapsed.
    The other engine's paths get the engine's own answer."""
    json_type = {"Content-Type": "application/json"}
    opened, key, closed = ((f"/{family_index.name}/_search/point_in_time?keep_alive=1m", "pit_id",
                            "/_search/point_in_time") if engine.is_opensearch else
                           (f"/{family_index.name}/_pit?keep_alive=1m", "id", "/_pit"))
    status, _, raw = http(proxy.url + opened, "POST")
    assert status == 200
    pit = json.loads(raw)[key]
    try:
        if engine.is_opensearch:
            status, _, raw = http(proxy.url + "/_search/point_in_time/_all")
            assert status == 200 and pit in [p["pit_id"] for p in json.loads(raw)["pits"]]
        status, _, page = post_json(proxy.url + "/_search", {"pit": {"id": pit, "keep_alive": "1m"},
                                                             "sort": ["rank"], "size": 5})
        assert status == 200 and page["neardup"]["groups"] == 5 and page["pit_id"]
        assert [h["_id"] for h in page["hits"]["hits"]] == \
            [h["_id"] for h in search(proxy.client(), pit={"id": pit}, sort=["rank"], size=5)["hits"]["hits"]]
    finally:
        body = json.dumps({"pit_id": [pit]} if engine.is_opensearch else {"id": pit}).encode()
        status, _, raw = http(proxy.url + closed, "DELETE", body, json_type)
        assert status == 200, raw
    other = ("/_pit" if engine.is_opensearch else "/_search/point_in_time/_all")
    assert http(proxy.url + other)[:1] == http(es_url + other)[:1]


def test_search_pipeline_and_phase_took_pass_through(proxy: ProxyThread, es_url: str, engine: ClusterInfo,
                                                     family_index: FamilyIndex) -> None:
    """OpenSearch's ``search_pipeline`` and ``phase_took`` parameters reach it on a collapsed
    search; Elasticsearch refuses them, through the proxy with the same bytes as directly."""
    path = f"/{family_index.name}/_search?sort=rank&size=6"
    query = "&search_pipeline=_none&phase_took=true"
    status, headers, raw = http(proxy.url + path + query)
    direct = http(es_url + path + query)
    assert status == direct[0]
    if not engine.is_opensearch:
        assert status == 400 and raw == direct[2]
        assert "phase_took" in json.loads(raw)["error"]["reason"]
        return
    body = json.loads(raw)
    assert status == 200 and "neardup" in body and set(body["phase_took"]) >= {"query", "fetch"}
    pipeline = f"neardup-test-{uuid.uuid4().hex[:8]}"
    status, _, raw = http(es_url + f"/_search/pipeline/{pipeline}", "PUT", json.dumps(
        {"request_processors": [{"filter_query": {"query": {"term": {"family": "f1"}}}}]}).encode(),
        {"Content-Type": "application/json"})
    assert status == 200, raw
    try:
        status, _, raw = http(proxy.url + path + f"&search_pipeline={pipeline}")
        body = json.loads(raw)
        assert status == 200 and body["neardup"]["groups"] == 1
        assert {h["_id"] for h in shown_hits(body)} == {"s1", "s1-a", "s1-b"}
    finally:
        http(es_url + f"/_search/pipeline/{pipeline}", "DELETE")


def shown_hits(response: dict) -> list[dict]:
    return [hit for top in response["hits"]["hits"]
            for hit in (top, *top["inner_hits"]["neardup"]["hits"]["hits"])]


def test_ext_in_the_body_passes_through(proxy: ProxyThread, es_url: str, family_index: FamilyIndex) -> None:
    """``ext`` reaches the engine in every round of a collapsed search; one the engine does not
    know gets its own error, byte for byte."""
    url = f"/{family_index.name}/_search"
    status, _, body = post_json(proxy.url + url, {"ext": {}, "sort": ["rank"], "size": 4})
    assert status == 200 and body["neardup"]["groups"] == 4
    unknown = json.dumps({"ext": {"no_such_extension": {"x": 1}}, "size": 4}).encode()
    proxied = http(proxy.url + url, "POST", unknown, {"Content-Type": "application/json"})
    direct = http(es_url + url, "POST", unknown, {"Content-Type": "application/json"})
    assert proxied[0] == direct[0] == 400 and proxied[2] == direct[2]


def test_unparsable_requests_are_answered_in_the_engines_format(proxy: ProxyThread, engine: ClusterInfo) -> None:
    """Bytes that are not HTTP never reach the application; aiohttp's answer to them has the
    engine's error shape and headers all the same."""
    host, port = proxy.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(b"GET /_search HTTP/1.1\r\nHost: x\r\nNo colon here\r\n\r\n")
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    head = data.split(b"\r\n\r\n", 1)[0].decode("latin-1").lower()
    assert head.split("\r\n", 1)[0].split()[1] == "400" and "application/json" in head
    assert ("x-elastic-product: elasticsearch" in head) == (not engine.is_opensearch)


def test_push_down_to_native_collapse_on_the_engine(proxy: ProxyThread, es: Any, family_index: FamilyIndex) -> None:
    """The engine's native ``collapse`` with ``inner_hits`` on stored cluster ids (README,
    Clusters), here on an index whose ids are written by hand (each planted family one cluster,
    every other document its own), so that it runs without ``neardup cluster``."""
    name = f"proxy-test-native-{uuid.uuid4().hex[:8]}"
    version = next(d["neardup"]["v"] for d in family_index.docs.values() if "sig" in d.get("neardup", {}))
    mappings = mapping()
    mappings["properties"]["neardup"]["properties"]["cluster"] = {"type": "keyword"}
    mappings["_meta"] = {"neardup_clusters": {"state": "ready", "mode": "resemblance", "version": version,
                                              "threshold": 0.8}}
    create_index(es, name, mappings, {"number_of_shards": 2, "number_of_replicas": 0})
    try:
        def clustered(doc_id: str, doc: dict) -> dict:
            family = doc["family"] if doc["family"] != "x" else doc_id
            return {**doc, "neardup": {**doc.get("neardup", {}), "cluster": family}}

        bulk(es, ({"_index": name, "_id": i, "_source": clustered(i, d)} for i, d in family_index.docs.items()),
             refresh="wait_for")
        for page in range(2):
            answer = search(proxy.client(), name, sort=["rank"], from_=page * 6, size=6, source=["family"])
            assert answer["neardup"]["pushdown"] is True and answer["neardup"]["groups"] == 6
            for top in answer["hits"]["hits"]:
                members = [top, *top["inner_hits"]["neardup"]["hits"]["hits"]]
                assert {hit["_source"]["family"] for hit in members} == {top["_source"]["family"]}
                family = [i for i, d in family_index.docs.items() if d["family"] == top["_source"]["family"]]
                if top["_source"]["family"] == "x":   # each its own cluster
                    family = [top["_id"]]
                assert len(members) == len(family)
                assert top["_id"] == min(family, key=lambda i: family_index.docs[i]["rank"])
    finally:
        delete_index(es, name)
