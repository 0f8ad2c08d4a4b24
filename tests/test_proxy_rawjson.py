"""The raw ``_source`` path (proxy.rawjson): hits' sources pass through as Elasticsearch's bytes."""

from __future__ import annotations

import json
import time
from typing import Any

import msgspec
import pytest
from elasticsearch import Elasticsearch

from neardup.fingerprint import Fingerprinter, FingerprintParams
from neardup.proxy.grouping import collapse, tfidf_groups
from neardup.proxy.grouping.fingerprints import default_algorithms
from neardup.proxy.handlers import filter_path, search_plan
from neardup.proxy.handlers.params import Settings
from neardup.proxy.transport import jsonio, rawjson
from tests.test_proxy_support import ProxyThread, make_config, mapping

FP = Fingerprinter(FingerprintParams()).fingerprint("one two three four five six seven eight").to_source()
FP_TEXT = json.dumps(FP, separators=(",", ":"))


def response(sources: list[str], envelope_after: str = "", hits_key_order: bool = True) -> bytes:
    """A compact search response whose hits have the given ``_source`` texts (verbatim)."""
    hits = ",".join(f'{{"_index":"i","_id":"{k}","_score":1.5,"_source":{s},"sort":[{k}]}}'
                    for k, s in enumerate(sources))
    inner = f'{{"total":{{"value":{len(sources)},"relation":"eq"}},"max_score":1.5,"hits":[{hits}]}}' \
        if hits_key_order else f'{{"hits":[{hits}],"max_score":1.5,"total":{{"value":{len(sources)},"relation":"eq"}}}}'
    return (f'{{"took":3,"timed_out":false,"_shards":{{"total":1,"successful":1,"skipped":0,"failed":0}},'
            f'"hits":{inner}{envelope_after}}}').encode()


TRICKY_SOURCES = [
    '{"big":123456789012345678901234567890,"neg":-9999999999999999999,"f":1.0,"e":1E+2,"neardup":' + FP_TEXT + "}",
    '{"text":"caf\\u00e9 \\ud83d\\ude00 \\"quoted\\" \\\\ back","neardup":' + FP_TEXT + "}",
    '{"meta":{"neardup":{"v":"x","sig":"y","n":1}},"neardup":' + FP_TEXT + ',"after":[{"neardup":1}]}',
    '{"title":"no fingerprint"}',
    '{"neardup":"not an object"}',
    '{"a" : [1, 2,\n 3], "neardup" :' + FP_TEXT + " }",
]


def test_sources_stay_raw_and_come_back_byte_for_byte() -> None:
    raw = response(TRICKY_SOURCES)
    value = rawjson.loads_search(raw)
    hits = value["hits"]["hits"]
    assert all(type(hit["_source"]) is msgspec.Raw for hit in hits)
    assert [bytes(hit["_source"]).decode() for hit in hits] == TRICKY_SOURCES
    assert jsonio.dumps(value) == raw   # the envelope is compact already: everything identical
    # The rest is what the general parser reads.
    parsed = jsonio.loads(raw)
    assert {k: v for k, v in value.items() if k != "hits"} == {k: v for k, v in parsed.items() if k != "hits"}
    for ours, theirs in zip(hits, parsed["hits"]["hits"]):
        assert {k: v for k, v in ours.items() if k != "_source"} == {k: v for k, v in theirs.items() if k != "_source"}
        assert list(ours) == list(theirs)   # key order kept
        assert rawjson.materialize(ours["_source"]) == theirs["_source"]


def test_fingerprint_is_read_from_the_top_level_neardup_only() -> None:
    value = rawjson.loads_search(response(TRICKY_SOURCES))
    found = [rawjson.source_fingerprint(hit["_source"]) for hit in value["hits"]["hits"]]
    expected = {"v": FP["v"], "sig": FP["sig"], "n": FP["n"]}
    assert found == [expected, expected, expected, None, None, expected]
    parsed = jsonio.loads(response(TRICKY_SOURCES))["hits"]["hits"]
    assert [collapse.stored_fingerprint(hit, "_source") for hit in value["hits"]["hits"]][:3] == \
        [{k: parsed[0]["_source"]["neardup"][k] for k in ("v", "sig", "n")}] * 3


def test_grouping_and_page_agree_with_the_parsed_path() -> None:
    algorithms = default_algorithms(FingerprintParams())
    raw = response(TRICKY_SOURCES)
    settings = Settings(True, 0.8, "resemblance")
    pages = []
    for loads in (rawjson.loads_search, jsonio.loads):
        plan = search_plan.plan_search({"size": 4}, [], settings, 100)
        assert isinstance(plan, search_plan.Plan)
        window = search_plan.Window(plan)
        window.add_round(loads(raw), plan.first_window())
        groups, fingerprinted = collapse.group(window.hits, "_source", 0.8, "resemblance", algorithms)
        assert fingerprinted == 4 and groups == [[0, 1, 2, 5], [3], [4]]
        pages.append(json.loads(jsonio.dumps(search_plan.finish(window, groups, fingerprinted))))
    assert pages[0] == pages[1]


def test_tfidf_vector_is_read_from_a_raw_source() -> None:
    vector = {"v": "t1", "t": ["a", "b"], "w": [0.5, 0.5]}
    text = json.dumps({"title": "x", "neardup": {"v": "1", "tf": vector}})
    value = rawjson.loads_search(response([text, '{"neardup":{"v":"1"}}', '{"x":1}']))
    assert [tfidf_groups.stored_vector(hit, "_source") for hit in value["hits"]["hits"]] == [vector, None, None]


@pytest.mark.parametrize("expression", ["hits.hits._source.text", "hits.hits._source", "-hits.hits._source.big",
                                        "**.neardup.v", "hits.hits._id"])
def test_filter_path_into_a_raw_source(expression: str) -> None:
    raw = response(TRICKY_SOURCES)
    compiled = filter_path.parse(expression)
    assert compiled is not None
    ours = json.loads(jsonio.dumps(compiled.apply(rawjson.loads_search(raw))))
    assert ours == compiled.apply(json.loads(raw))


def test_pretty_output_indents_the_sources_too() -> None:
    raw = response(TRICKY_SOURCES)
    assert jsonio.dumps(rawjson.loads_search(raw), pretty=True) == jsonio.dumps(jsonio.loads(raw), pretty=True)


def test_big_integers_in_the_envelope_still_come_out_exact() -> None:
    raw = response(TRICKY_SOURCES[:2], envelope_after=',"aggregations":{"m":{"value":123456789012345678901}}')
    value = rawjson.loads_search(raw)
    assert value["aggregations"]["m"]["value"] == 123456789012345678901
    assert json.loads(jsonio.dumps(value)) == json.loads(raw)   # the standard library's fallback


@pytest.mark.parametrize("raw", [
    response(TRICKY_SOURCES, hits_key_order=False),                       # other key order
    response(TRICKY_SOURCES).replace(b'"hits":{', b'"hits" : {', 1),      # not compact
    b'{"hits":{"hits":[]},"took":1}',                                    # no hits
    b'{"took":1,"hits":{"total":{"value":0,"relation":"eq"},"max_score":null,"hits":[]}}',
    b'{"took":1,"hits":{"max_score":null,"hits":[{"_id":"1","_source":{"a":1}}]}}',   # no total
    b'{"took":1,"hits":{"hits":[{"_id":"1","_source":{"a":1}}]}}',
    b'{"took":1,"hits":{"total":1,"hits":[{"_id":"1","_source":{"a":1}}],"extra":1}}',
    b'{"acknowledged":true}',
    b'{"took":1,"hits":{"total":1,"hits":[{"_id":"1","_source":{"s":"\\ud800 lone"}}]}}',  # lone surrogate
    b'[1,2]',
])
def test_other_shapes_read_the_same_values(raw: bytes) -> None:
    value = rawjson.loads_search(raw)
    assert json.loads(jsonio.dumps(value)) == json.loads(raw)


@pytest.mark.parametrize("raw", [
    b'{"took":1,"hits":{"total":1,"hits":[{"_id":"1","_source":{"a":}}]}}',
    b'{"took":1,"hits":{"total":1,"hits":[{"_id":"1","_source":{"a":NaN}}]}}',
    b'{"took":1,"hits":{"total":1,"hits":[{"_id":"1","_source":{"a":1}}]}} trailing',
    b'{"took":1e999,"hits":{"total":1,"hits":[{"_id":"1","_source":{"a":1}}]}}',
    b'{"took":1,"hits":{"total":1,"hits":[{"_id":"1","_source":{"a":1}}]}',
])
def test_malformed_json_is_still_refused(raw: bytes) -> None:
    with pytest.raises(ValueError):
        rawjson.loads_search(raw)
    with pytest.raises(ValueError):
        rawjson.loads_msearch(b'{"took":1,"responses":[' + raw + b"]}")


def test_msearch_responses_are_read_the_same_way() -> None:
    one = response(TRICKY_SOURCES)
    raw = b'{"took":4,"responses":[' + one + b',{"error":{"type":"x","reason":"y"},"status":400},' + one + b"]}"
    value = rawjson.loads_msearch(raw)
    assert type(value["responses"][0]["hits"]["hits"][0]["_source"]) is msgspec.Raw
    assert value["responses"][1] == {"error": {"type": "x", "reason": "y"}, "status": 400}
    assert jsonio.dumps(value) == raw


# -- through the proxy, against Elasticsearch ------------------------------------------------
@pytest.mark.es
def test_collapsed_sources_are_elasticsearch_bytes(es: Elasticsearch, es_url: str) -> None:
    import urllib.request

    name = f"proxy-raw-{time.time_ns()}"
    es.indices.create(index=name, mappings={**mapping(), "dynamic": False},   # "big": kept in _source only
                      settings={"number_of_shards": 1, "number_of_replicas": 0})
    try:
        docs = [
            '{"title":"alpha","rank":1,"big":123456789012345678901234567890,"neardup":' + FP_TEXT + "}",
            '{"title":"alpha caf\\u00e9 \\ud83d\\ude00","rank":2,"x":1.10,"neardup":' + FP_TEXT + "}",
            '{"title":"alpha none","rank":3}',
            '{"title" : "alpha spaced" ,\n "rank": 4, "neardup": ' + FP_TEXT + "}",
        ]
        for k, doc in enumerate(docs):
            request = urllib.request.Request(f"{es_url}/{name}/_doc/{k}?refresh=true", data=doc.encode(),
                                             method="PUT", headers={"Content-Type": "application/json"})
            urllib.request.urlopen(request, timeout=30).read()
        body = json.dumps({"query": {"match": {"title": "alpha"}}, "sort": ["rank"], "size": 4}).encode()
        headers = {"Content-Type": "application/json"}
        with ProxyThread(make_config(es_url)) as running:
            def post(url: str, query: str = "") -> dict[str, Any]:
                request = urllib.request.Request(f"{url}/{name}/_search{query}", data=body, method="POST",
                                                 headers=headers)
                return urllib.request.urlopen(request, timeout=30).read()
            proxied, direct = post(running.url), post(es_url)
            page = json.loads(proxied)
            assert page["neardup"]["collapsed"] == 2 and page["neardup"]["groups"] == 2
            kept = page["hits"]["hits"][0]
            members = kept["inner_hits"]["neardup"]["hits"]["hits"]
            assert [kept["_id"]] + [m["_id"] for m in members] == ["0", "1", "3"]
            for doc in docs:   # each _source exactly as Elasticsearch sent it (and stored it)
                assert doc.encode() in direct
                assert (b'"_source":' + doc.encode()) in proxied
            filtered = json.loads(post(running.url, "?filter_path=hits.hits._source.big,hits.hits._id"))
            assert filtered == {"hits": {"hits": [{"_id": "0", "_source": {"big": 123456789012345678901234567890}},
                                                  {"_id": "2"}]}}
    finally:
        es.options(ignore_status=404).indices.delete(index=name)


def test_raw_values_point_into_the_response() -> None:
    # The one-pass decode cuts "hits" out of the response by where its raw values point.
    raw = response(TRICKY_SOURCES[:1])
    hits = rawjson._TOP.decode(raw).hits
    assert hits is not None and hits.hits is not None
    source = hits.hits[0]["_source"]
    at = rawjson._address(source) - rawjson._address(raw)
    assert raw[at:at + len(source)] == bytes(source)


def test_a_number_no_double_holds_passes_through_in_its_source() -> None:
    raw = (b'{"took":1,"hits":{"total":1,"hits":[{"_id":"1","_source":{"a":1e999,"neardup":'
           + FP_TEXT.encode() + b'}},{"_id":"2","_source":{"neardup":{"v":"x","sig":"y","n":1e999}}}]}}')
    value = rawjson.loads_search(raw)
    assert jsonio.dumps(value) == raw
    hits = value["hits"]["hits"]
    assert rawjson.source_fingerprint(hits[0]["_source"]) == {k: FP[k] for k in ("v", "sig", "n")}
    assert rawjson.source_fingerprint(hits[1]["_source"]) is None
