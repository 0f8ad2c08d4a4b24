"""Query-time fingerprints end to end: hits without a stored fingerprint grouped by the proxy.

A brand-new index, never enriched, is searched through the proxy: its hits are fingerprinted
from their text fields (from ``_source``, or read with ``_mget`` when the client filters it)
and grouped as they are once ``neardup index`` has run; the client's answer keeps what it
asked for; a changed document is fingerprinted again; the bounds leave hits ungrouped and
count them; ``collapse.fingerprint_missing = false`` keeps hits without fingerprints apart.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import msgspec
import pytest

from neardup.corpora import reuters_documents
from neardup.fingerprint import Fingerprinter, FingerprintParams, estimated_resemblance
from neardup.fingerprint.texts import document_text
from neardup.proxy.grouping.query_fingerprints import fingerprint_texts
from neardup.upstream import ClusterInfo
from tests.engine_support import bulk_load, create_index, delete_index, index_document, msearch, search
from tests.plugins.corpora import neardup_json
from tests.test_proxy import http
from tests.test_proxy_support import ProxyThread, make_config, pes, proxy  # noqa: F401 - fixtures

pytestmark = pytest.mark.es

FIELDS = ("title", "body")
METRIC = "neardup_proxy_query_fingerprints_total"
MAPPINGS = {"properties": {"title": {"type": "text"}, "body": {"type": "text"},
                           "rank": {"type": "integer"}, "kind": {"type": "keyword"}}}


def _edit(body: str, where: int, word: str) -> str:
    words = body.split()
    words[min(where, len(words) - 1)] = word
    return " ".join(words)


def stories(count: int) -> list[dict[str, Any]]:
    """``count`` Reuters stories of 150 words or more, none a near-duplicate of another (the
    collection holds some: estimated resemblance under 0.3 to every earlier one)."""
    fp = Fingerprinter(FingerprintParams())
    kept: list[dict[str, Any]] = []
    signatures: list[Any] = []
    for doc in reuters_documents(with_body_only=True):
        if len(doc["body"].split()) < 150:
            continue
        signature = fp.fingerprint_fields([doc["title"], doc["body"]])
        if all(estimated_resemblance(signature, other) < 0.3 for other in signatures):
            kept.append({"title": doc["title"], "body": doc["body"]})
            signatures.append(signature)
            if len(kept) == count:
                break
    return kept


def family_docs(count: int = 16, families: int = 6) -> list[dict[str, Any]]:
    """``count`` stories, ``families`` of them with two edited copies each (near-duplicates),
    ranked so that the copies fall among other stories; no ``neardup`` object."""
    docs = []
    for k, story in enumerate(stories(count)):
        docs.append({"id": f"s{k}", **story, "kind": "story"})
        if k < families:
            n = len(story["body"].split())
            docs.append({"id": f"s{k}-a", **story, "body": _edit(story["body"], n - 10, "zyxwv"), "kind": "copy"})
            docs.append({"id": f"s{k}-b", **story, "body": _edit(story["body"], n - 40, "qqqqq"), "kind": "copy"})
    order = sorted(range(len(docs)), key=lambda i: (i * 7919) % len(docs))
    for rank, position in enumerate(order):
        docs[position]["rank"] = rank
    return docs


def fresh_index(es: Any, docs: list[dict[str, Any]]) -> str:
    name = f"proxy-fresh-{uuid.uuid4().hex[:10]}"
    create_index(es, name, settings={"number_of_shards": 2, "number_of_replicas": 0}, mappings=MAPPINGS)
    bulk_load(es, name, docs)
    return name


@pytest.fixture(scope="module")
def fresh(es: Any) -> Iterator[str]:
    name = fresh_index(es, family_docs())
    yield name
    delete_index(es, name)


def groups_of(response: dict[str, Any]) -> dict[str, list[str]]:
    """{kept hit's _id: folded members' _ids} of a collapsed page."""
    return {hit["_id"]: [m["_id"] for m in hit["inner_hits"]["neardup"]["hits"]["hits"]]
            for hit in response["hits"]["hits"]}


def post(url: str, body: Any) -> tuple[int, bytes]:
    status, _, raw = http(url, "POST", json.dumps(body).encode(), {"Content-Type": "application/json"})
    return status, raw


class _Hit(msgspec.Struct):
    id: str = msgspec.field(name="_id")
    source: msgspec.Raw = msgspec.field(name="_source", default=msgspec.Raw(b"null"))


class _Hits(msgspec.Struct):
    hits: list[_Hit]


class _Response(msgspec.Struct):
    hits: _Hits


def raw_sources(raw: bytes) -> dict[str, bytes]:
    """{_id: the bytes of its ``_source``} of a search answer's hits."""
    return {hit.id: bytes(hit.source) for hit in msgspec.json.decode(raw, type=_Response).hits.hits}


def counted(running: ProxyThread, outcome: str) -> float:
    return running.metrics.counters.get(METRIC, {}).get((("outcome", outcome),), 0.0)


# -- pure parts -----------------------------------------------------------------------------
def test_query_time_fingerprint_is_what_the_indexer_stores() -> None:
    from neardup.fingerprint.texts import compute_fingerprint

    fp = Fingerprinter(FingerprintParams())
    for doc in family_docs(4, 2):
        text = document_text(doc, FIELDS)[1]
        assert text is not None
        [value], _ = fingerprint_texts(fp, [text], 10.0)
        stored = compute_fingerprint(doc, FIELDS, fp)[1]
        assert stored is not None
        assert value == {key: stored.to_source()[key] for key in ("v", "sig", "n")}


# -- on the engine --------------------------------------------------------------------------
def test_never_enriched_index_groups_as_after_neardup_index(es: Any, es_url: str, pes: Any,  # noqa: F811
                                                            proxy: ProxyThread) -> None:  # noqa: F811
    name = fresh_index(es, family_docs())
    try:
        body = {"sort": ["rank"], "size": 30}
        before = search(pes, name, **body)
        assert before["neardup"]["fingerprinted_at_query_time"] == before["neardup"]["window"]
        assert before["neardup"]["collapsed"] == 12   # six families of three
        filtered = search(pes, name, **body, _source=["rank"])   # texts read with _mget
        many = msearch(pes, [{"index": name}, body, {"index": name}, {**body, "_source": False}])
        neardup_json(es, es_url, "index", "--index", name)
        after = search(pes, name, **body)
        assert after["neardup"]["fingerprinted_at_query_time"] == 0
        assert after["neardup"]["fingerprinted"] == after["neardup"]["window"]
        assert groups_of(before) == groups_of(after) == groups_of(filtered)
        assert [groups_of(r) for r in many["responses"]] == [groups_of(after)] * 2
        # every stored fingerprint is the one the proxy computed from the text
        fp = Fingerprinter(FingerprintParams())
        for hit in search(es, name, size=100)["hits"]["hits"]:
            [value], _ = fingerprint_texts(fp, [document_text(hit["_source"], FIELDS)[1]], 10.0)
            assert value == {key: hit["_source"]["neardup"][key] for key in ("v", "sig", "n")}
    finally:
        delete_index(es, name)


@pytest.mark.parametrize("request_", [
    {"_source": ["title"]},
    {"_source": False},
    {"_source": {"excludes": ["body"]}},
    {"_source": ["kind", "rank"], "fields": ["title"]},
    {"stored_fields": []},
], ids=["includes", "no_source", "excludes", "fields", "stored_fields"])
def test_source_filtering_is_respected(es: Any, es_url: str, fresh: str, proxy: ProxyThread,  # noqa: F811
                                       request_: dict[str, Any]) -> None:
    body = {"sort": ["rank"], "size": 12, **request_}
    status, raw = post(proxy.url + f"/{fresh}/_search", body)
    assert status == 200
    direct_status, direct_raw = post(es_url + f"/{fresh}/_search", {**body, "size": 100})
    assert direct_status == 200
    mine, theirs = json.loads(raw), json.loads(direct_raw)
    assert mine["neardup"]["collapsed"] > 0 and mine["neardup"]["fingerprinted_at_query_time"] > 0
    expected = {hit["_id"]: hit for hit in theirs["hits"]["hits"]}
    shown = [hit for top in mine["hits"]["hits"] for hit in [top, *top["inner_hits"]["neardup"]["hits"]["hits"]]]
    for hit in shown:
        fields = {k: v for k, v in hit.get("fields", {}).items() if k not in ("neardup.group", "neardup.similarity")}
        plain = {k: v for k, v in hit.items() if k not in ("fields", "inner_hits")}
        if fields:
            plain["fields"] = fields
        assert plain == expected[hit["_id"]], hit["_id"]
    # the kept hits' _source, byte for byte
    sources, direct_sources = raw_sources(raw), raw_sources(direct_raw)
    for doc_id, source in sources.items():
        assert source == direct_sources[doc_id]


def test_changed_document_gets_a_new_fingerprint(es: Any, pes: Any) -> None:  # noqa: F811
    docs = family_docs(6, 1)   # s0, s0-a, s0-b copies; s1..s5 others
    name = fresh_index(es, docs)
    by_id = {d["id"]: d for d in docs}
    try:
        body = {"sort": ["rank"], "size": 10}
        for request_ in (body, {**body, "_source": ["rank"]}):   # from _source, and through _mget
            first = groups_of(search(pes, name, **request_))
            assert sorted(next(g for k, g in first.items() if k.startswith("s0")) +
                          [k for k in first if k.startswith("s0")]) == ["s0", "s0-a", "s0-b"]
        # s0-b now holds another story's text (lightly edited): it leaves s0's group, joins s1's
        changed = {**by_id["s0-b"], "title": by_id["s1"]["title"],
                   "body": _edit(by_id["s1"]["body"], 5, "zzzzz")}
        index_document(es, name, "s0-b", changed, refresh="true")
        for request_ in (body, {**body, "_source": ["rank"]}):
            groups = groups_of(search(pes, name, **request_))
            holder = next(k for k, g in groups.items() if "s0-b" in [k, *g])
            assert sorted([holder, *groups[holder]]) == ["s0-b", "s1"], groups
        # and back: the earlier text's fingerprint (still cached) is the right one again
        index_document(es, name, "s0-b", by_id["s0-b"], refresh="true")
        groups = groups_of(search(pes, name, **body))
        holder = next(k for k, g in groups.items() if "s0-b" in [k, *g])
        assert sorted([holder, *groups[holder]]) == ["s0", "s0-a", "s0-b"]
    finally:
        delete_index(es, name)


def test_bounds_leave_hits_ungrouped_and_count_them(es_url: str, engine: ClusterInfo, fresh: str) -> None:
    body = {"sort": ["rank"], "size": 10}   # a window of 13 hits
    by_hits = make_config(es_url, collapse={"fingerprint_max_hits": 4, "fingerprint_cache_entries": 0})
    with ProxyThread(by_hits, engine=engine) as running:
        client = running.client()
        summary = search(client, fresh, **body)["neardup"]
        assert summary["window"] == 13
        assert summary["fingerprinted_at_query_time"] == summary["fingerprinted"] == 4
        assert summary["fingerprint_skipped"] == 9
        assert counted(running, "skipped") == 9 and counted(running, "computed") == 4
        # _msearch: the bound holds for the whole request, not for each search in it
        answers = msearch(client, [{"index": fresh}, body, {"index": fresh}, body])["responses"]
        assert [a["neardup"]["fingerprinted_at_query_time"] for a in answers] == [4, 0]
        assert [a["neardup"]["fingerprint_skipped"] for a in answers] == [9, 13]
        client.close()
    by_time = make_config(es_url, collapse={"fingerprint_cpu_ms": 0.001, "fingerprint_cache_entries": 0})
    with ProxyThread(by_time, engine=engine) as running:
        client = running.client()
        summary = search(client, fresh, **body)["neardup"]
        client.close()
        assert summary["fingerprinted_at_query_time"] <= 1
        assert summary["fingerprint_skipped"] == 13 - summary["fingerprinted_at_query_time"]
        assert summary["collapsed"] == 0
        assert counted(running, "skipped") == summary["fingerprint_skipped"]


def test_cached_fingerprints_are_counted(es_url: str, engine: ClusterInfo, fresh: str) -> None:
    with ProxyThread(make_config(es_url), engine=engine) as running:
        client = running.client()
        first = search(client, fresh, sort=["rank"], size=10)
        again = search(client, fresh, sort=["rank"], size=10, _source=False)
        client.close()
        assert groups_of(first) == groups_of(again) and first["neardup"]["window"] == again["neardup"]["window"]
        assert counted(running, "computed") == first["neardup"]["window"] == counted(running, "cached")


def test_off_keeps_hits_without_fingerprint_apart(es_url: str, engine: ClusterInfo, fresh: str) -> None:
    config = make_config(es_url, collapse={"fingerprint_missing": False})
    with ProxyThread(config, engine=engine) as running:
        status, raw = post(running.url + f"/{fresh}/_search", {"sort": ["rank"], "size": 10})
        direct_status, direct_raw = post(es_url + f"/{fresh}/_search", {"sort": ["rank"], "size": 10})
        assert status == direct_status == 200
        mine, theirs = json.loads(raw), json.loads(direct_raw)
        assert [h["_id"] for h in mine["hits"]["hits"]] == [h["_id"] for h in theirs["hits"]["hits"]]
        assert mine["neardup"]["collapsed"] == mine["neardup"]["fingerprinted"] == 0
        assert "fingerprinted_at_query_time" not in mine["neardup"]
        assert METRIC not in running.metrics.counters


def test_the_request_overrides_the_configuration(es_url: str, engine: ClusterInfo, fresh: str,
                                                proxy: ProxyThread) -> None:  # noqa: F811
    body = {"sort": ["rank"], "size": 30}
    config = make_config(es_url, collapse={"fingerprint_missing": False})
    with ProxyThread(config, engine=engine) as running:
        status, raw = post(running.url + f"/{fresh}/_search?neardup_fingerprint_missing=on", body)
    assert status == 200 and json.loads(raw)["neardup"]["collapsed"] == 12
    status, head, raw = http(proxy.url + f"/{fresh}/_search", "POST", json.dumps(body).encode(),
                             {"Content-Type": "application/json", "X-Neardup-Fingerprint-Missing": "off"})
    summary = json.loads(raw)["neardup"]
    assert status == 200 and summary["collapsed"] == 0 and "fingerprinted_at_query_time" not in summary
