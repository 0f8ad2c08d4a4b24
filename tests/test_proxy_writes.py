"""Writes through the proxy that get their fingerprint in the same request (``[enrich]``), on the
real engine: bytes kept, near-duplicates tagged or refused, other indices untouched."""

from __future__ import annotations

import gzip
import json
import random
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from neardup.fingerprint import Fingerprinter, FingerprintParams, es_mapping
from neardup.fingerprint.matching import DUPLICATE_OF_MAPPING
from neardup.upstream import ClusterInfo
from tests.engine_support import create_index, delete_index
from tests.test_index_follow import FollowProcess, eventually
from tests.test_proxy_support import ProxyThread, make_config

WORDS = ("oil grain wheat price market trade bank rate dollar yen export import tonnes crude output "
         "cartel quota shares profit loss quarter company board merger bid offer stake tender minister "
         "government budget deficit surplus growth inflation rise fall week month year record").split()


def story(seed: int, words: int = 120) -> str:
    rng = random.Random(seed)
    return " ".join(rng.choice(WORDS) for _ in range(words))


FINGERPRINTER = Fingerprinter(FingerprintParams())


def fingerprint_of(title: str, body: str) -> dict[str, Any]:
    return FINGERPRINTER.fingerprint(f"{title}\n{body}").to_source()


def call(url: str, method: str, path: str, body: bytes | None = None,
         content_type: str = "application/json", headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    sent = {"Content-Type": content_type} if body is not None else {}
    request = urllib.request.Request(url + path, data=body, method=method, headers={**sent, **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def stored_source(url: str, index: str, doc_id: str) -> bytes:
    """The ``_source`` bytes of a document as the engine stored them (it returns them raw)."""
    status, raw = call(url, "GET", f"/{index}/_doc/{doc_id}")
    assert status == 200, raw
    start = raw.index(b'"_source":') + len(b'"_source":')
    assert raw.endswith(b"}")
    return raw[start:-1]


def spliced(original: bytes, value: dict[str, Any]) -> bytes:
    field = json.dumps({"neardup": value}, separators=(",", ":")).encode()[1:-1]
    return original[:-1] + b"," + field + b"}"


SUFFIXES = ("reject", "tag", "allow", "plain", "tagold")


@pytest.fixture
def indices(es: Any) -> Iterator[str]:
    prefix = f"writes-{uuid.uuid4().hex[:8]}"
    for suffix in SUFFIXES:
        mappings = es_mapping()
        mappings["properties"]["neardup"]["properties"]["duplicate_of"] = (
            {"type": "keyword"} if suffix == "tagold" else DUPLICATE_OF_MAPPING)   # tagold: the older mapping
        create_index(es, f"{prefix}-{suffix}", mappings=mappings if suffix != "plain" else None)
    yield prefix
    for suffix in SUFFIXES:
        delete_index(es, f"{prefix}-{suffix}")


@pytest.fixture
def proxy(es_url: str, engine: ClusterInfo, indices: str) -> Iterator[str]:
    config = make_config(es_url, enrich={"indices": {
        f"{indices}-reject": {"on_duplicate": "reject"}, f"{indices}-tag*": {"on_duplicate": "tag"},
        f"{indices}-allow*": {}}})
    with ProxyThread(config, engine=engine) as running:
        yield running.url


def doc_bytes(title: str, body: str, extra: str = "") -> bytes:
    # spellings a re-serialisation would change: spaces, an exponent, an escape
    return (f'{{"title" : "{title}", "n": 1.50e1 ,"u":"\\u00e9"{extra}, "body": "{body}"}}').encode()


def bulk(url: str, lines: list[bytes], index: str | None = None) -> tuple[int, dict[str, Any]]:
    status, raw = call(url, "POST", (f"/{index}" if index else "") + "/_bulk?refresh=true",
                       b"\n".join(lines) + b"\n", "application/x-ndjson")
    return status, json.loads(raw)


def test_reject_refuses_duplicates_of_the_index_and_of_the_same_request(proxy: str, es_url: str, indices: str) -> None:
    index = f"{indices}-reject"
    first = doc_bytes("Oil", story(1))
    status, answer = bulk(proxy, [b'{"index":{"_id":"a"}}', first], index)
    assert status == 200 and answer["errors"] is False
    other, copy, inner = doc_bytes("Grain", story(2)), doc_bytes("Oil", story(1)), doc_bytes("Grain", story(2))
    status, answer = bulk(proxy, [b'{"index":{"_id":"b"}}', other, b'{"create":{"_id":"c"}}', copy,
                                  b'{"delete":{"_id":"zz"}}', b'{"index":{"_id":"d"}}', inner,
                                  b'{"index":{"_id":"e"}}', b'{"title": broken'], index)
    assert status == 200 and answer["errors"] is True
    items = answer["items"]
    assert [next(iter(item)) for item in items] == ["index", "create", "delete", "index", "index"]
    results = [next(iter(item.values())) for item in items]
    assert [r["status"] for r in results[:4]] == [201, 409, 404, 409]
    assert results[1]["error"]["type"] == "neardup_duplicate_exception"
    assert "[a]" in results[1]["error"]["reason"] and "similarity 1.0000" in results[1]["error"]["reason"]
    assert "[b]" in results[3]["error"]["reason"] and results[3]["_id"] == "d"
    assert results[4]["status"] == 400 and results[4]["error"]["type"] in ("document_parsing_exception",
                                                                          "mapper_parsing_exception")
    assert call(es_url, "GET", f"/{index}/_doc/c")[0] == 404
    assert call(es_url, "GET", f"/{index}/_doc/d")[0] == 404
    assert stored_source(es_url, index, "a") == spliced(first, fingerprint_of("Oil", story(1)))
    assert stored_source(es_url, index, "b") == spliced(other, fingerprint_of("Grain", story(2)))


def test_reject_of_every_item_sends_nothing(proxy: str, es_url: str, indices: str) -> None:
    index = f"{indices}-reject"
    bulk(proxy, [b'{"index":{"_id":"a"}}', doc_bytes("Oil", story(1))], index)
    status, answer = bulk(proxy, [b'{"index":{"_id":"x"}}', doc_bytes("Oil", story(1))], index)
    assert status == 200 and answer["errors"] is True
    assert [item["index"]["status"] for item in answer["items"]] == [409]
    assert call(es_url, "GET", f"/{index}/_doc/x")[0] == 404


def test_tag_stores_duplicate_of_and_names_unnamed_documents(proxy: str, es_url: str, indices: str) -> None:
    index = f"{indices}-tag"
    original = doc_bytes("Oil", story(3))
    status, answer = bulk(proxy, [b'{"index":{}}', original, b'{"index":{"_id":"t2"}}', doc_bytes("Oil", story(3))],
                          index)
    assert status == 200 and answer["errors"] is False, answer
    first_id = answer["items"][0]["index"]["_id"]
    tagged = json.loads(stored_source(es_url, index, "t2"))
    assert tagged["neardup"]["duplicate_of"] == {"id": first_id, "similarity": 1.0}
    assert stored_source(es_url, index, first_id) == spliced(original, fingerprint_of("Oil", story(3)))


def test_doc_and_create_get_the_fingerprint_and_reject_answers_409(proxy: str, es_url: str, indices: str) -> None:
    index = f"{indices}-reject"
    original = doc_bytes("Wheat", story(4))
    status, raw = call(proxy, "PUT", f"/{index}/_doc/w1?refresh=true", original)
    assert status == 201, raw
    assert stored_source(es_url, index, "w1") == spliced(original, fingerprint_of("Wheat", story(4)))
    status, raw = call(proxy, "PUT", f"/{index}/_create/w2?refresh=true", doc_bytes("Wheat", story(4)))
    assert status == 409
    error = json.loads(raw)["error"]
    assert error["type"] == "neardup_duplicate_exception" and "[w1]" in error["reason"]
    assert call(es_url, "GET", f"/{index}/_doc/w2")[0] == 404
    status, raw = call(proxy, "POST", f"/{index}/_doc?refresh=true", doc_bytes("Rates", story(5)))
    assert status == 201
    new_id = json.loads(raw)["_id"]
    assert json.loads(stored_source(es_url, index, new_id))["neardup"] == fingerprint_of("Rates", story(5))


def test_allow_fingerprints_and_a_document_with_its_own_neardup_is_kept(proxy: str, es_url: str,
                                                                       indices: str) -> None:
    index = f"{indices}-allow"
    own = doc_bytes("Oil", story(1), ', "neardup": {"v": "x"}')
    status, answer = bulk(proxy, [b'{"index":{"_id":"1"}}', doc_bytes("Oil", story(1)),
                                  b'{"index":{"_id":"2"}}', doc_bytes("Oil", story(1)),
                                  b'{"index":{"_id":"3"}}', own], index)
    assert status == 200 and answer["errors"] is False
    assert stored_source(es_url, index, "2") == spliced(doc_bytes("Oil", story(1)), fingerprint_of("Oil", story(1)))
    assert stored_source(es_url, index, "3") == own


def test_an_index_not_listed_is_passed_through_byte_for_byte(proxy: str, es_url: str, indices: str) -> None:
    index = f"{indices}-plain"
    original = doc_bytes("Oil", story(1))
    status, answer = bulk(proxy, [b'{"index":{"_id":"1"}}', original], index)
    assert status == 200 and answer["errors"] is False
    status, _ = call(proxy, "PUT", f"/{index}/_doc/2?refresh=true", original)
    assert status == 201
    assert stored_source(es_url, index, "1") == original
    assert stored_source(es_url, index, "2") == original
    # in an enriched index, a body of another type goes as it came (the engine reads it)
    status, _ = call(proxy, "PUT", f"/{indices}-allow/_doc/y?refresh=true", original, "application/yaml")
    assert status == 201
    assert "neardup" not in json.loads(call(es_url, "GET", f"/{indices}-allow/_doc/y")[1])["_source"]


def test_malformed_bulk_lines_get_the_engines_own_answer(proxy: str, es_url: str, indices: str) -> None:
    index = f"{indices}-reject"
    lines = [b'{"index":{"_id":"1"}}', doc_bytes("Oil", story(1)), b"this is no action", b"{}"]
    through = bulk(proxy, lines, index)
    direct = bulk(es_url, lines, index)
    assert through[0] == direct[0] == 400
    assert through[1]["error"]["type"] == direct[1]["error"]["type"]


def test_a_gzipped_body_is_enriched_and_a_partial_update_of_part_of_the_text_removes_the_fingerprint(
        proxy: str, es_url: str, indices: str) -> None:
    index = f"{indices}-tag"
    original = doc_bytes("Oil", story(6))
    status, _ = call(proxy, "PUT", f"/{index}/_doc/old?refresh=true", original)
    assert status == 201
    partial = b'{"doc":{"body":"changed"}}'
    lines = [b'{"index":{"_id":"new"}}', doc_bytes("Oil", story(6)), b'{"update":{"_id":"old"}}', partial]
    status, raw = call(proxy, "POST", f"/{index}/_bulk?refresh=true", gzip.compress(b"\n".join(lines) + b"\n"),
                       "application/x-ndjson", {"Content-Encoding": "gzip"})
    assert status == 200 and json.loads(raw)["errors"] is False, raw
    assert json.loads(stored_source(es_url, index, "new"))["neardup"]["duplicate_of"]["id"] == "old"
    updated = json.loads(stored_source(es_url, index, "old"))   # neardup index fingerprints it again
    assert updated["body"] == "changed" and updated["neardup"] is None


def test_update_items_get_the_fingerprint_of_their_upsert_and_of_a_whole_doc(proxy: str, es_url: str,
                                                                            indices: str) -> None:
    index = f"{indices}-reject"
    status, _ = call(proxy, "PUT", f"/{index}/_doc/u0?refresh=true", doc_bytes("Oil", story(7)))
    assert status == 201
    # as an earlier version stored it: with the megashingles, which the update must not leave stale
    status, _ = call(es_url, "POST", f"/{index}/_update/u0?refresh=true",
                     b'{"doc":{"neardup":{"mega":["0123456789abcdef"]}}}')
    assert status == 200 and json.loads(stored_source(es_url, index, "u0"))["neardup"]["mega"]
    whole = f'{{"title":"Grain","body":"{story(8)}"}}'.encode()
    lines = [b'{"update":{"_id":"u0"}}', b'{ "doc" : ' + whole + b' }',
             b'{"update":{"_id":"u1"}}', b'{"doc":' + whole + b',"doc_as_upsert":true}',
             b'{"update":{"_id":"u2"}}',
             b'{"script":{"source":"ctx._source.n = 1"},"upsert":' + doc_bytes("Rates", story(9)) + b'}']
    status, answer = bulk(proxy, lines, index)
    assert status == 200 and answer["errors"] is False, answer
    grain = fingerprint_of("Grain", story(8))
    for doc_id in ("u0", "u1"):   # no duplicate check: an update inserts no new document
        stored = json.loads(stored_source(es_url, index, doc_id))
        assert stored["neardup"] == {**grain, "cluster": None, "bands": None, "mega": None}
    # the engine writes an upsert again from its parsed value: compared as JSON
    expected = spliced(doc_bytes("Rates", story(9)), fingerprint_of("Rates", story(9)))
    assert json.loads(stored_source(es_url, index, "u2")) == json.loads(expected)


def neardup_of(url: str, index: str, doc_id: str) -> Any:
    return json.loads(stored_source(url, index, doc_id)).get("neardup", "absent")


def fingerprint_part(stored: Any, title: str, body: str) -> bool:
    """Whether ``stored`` holds the fingerprint of the text (the follower may add cluster seeds)."""
    expected = fingerprint_of(title, body)
    return isinstance(stored, dict) and {key: stored.get(key) for key in expected} == expected


@pytest.mark.parametrize("follow_args", [(), ("--since-field", "updated")])
def test_partial_updates_of_the_text_are_fingerprinted_again_by_the_follower(
        proxy: str, es_url: str, indices: str, follow_args: tuple[str, ...]) -> None:
    index = f"{indices}-allow"
    written = ', "updated": "2024-05-01T12:00:00Z"'    # the updates below leave it as it was
    lines = [line for n in (1, 2, 3) for line in (f'{{"index":{{"_id":"p{n}"}}}}'.encode(),
                                                   doc_bytes("Oil", story(10 + n), written))]
    assert bulk(proxy, lines, index)[1]["errors"] is False
    status, answer = bulk(proxy, [b'{"update":{"_id":"p1"}}', f'{{"doc":{{"body":"{story(21)}"}}}}'.encode(),
                                  b'{"update":{"_id":"p3"}}', b'{"doc":{"n":2}}'], index)
    assert status == 200 and answer["errors"] is False, answer
    status, raw = call(proxy, "POST", f"/{index}/_update/p2?refresh=true", b'{ "doc" : {"title" : "Grain"} }')
    assert status == 200 and json.loads(raw)["result"] == "updated", raw
    assert neardup_of(es_url, index, "p1") is None and neardup_of(es_url, index, "p2") is None
    assert neardup_of(es_url, index, "p3") == fingerprint_of("Oil", story(13))   # no text touched: kept
    with FollowProcess(es_url, index, *follow_args):
        eventually(lambda: fingerprint_part(neardup_of(es_url, index, "p1"), "Oil", story(21))
                   and fingerprint_part(neardup_of(es_url, index, "p2"), "Grain", story(12)),
                   what="the follower fingerprints the updated documents",
                   last=lambda: (neardup_of(es_url, index, "p1"), neardup_of(es_url, index, "p2")))
    assert neardup_of(es_url, index, "p3") == fingerprint_of("Oil", story(13))


def test_the_update_endpoint_fingerprints_an_upsert_and_a_whole_doc(proxy: str, es_url: str, indices: str) -> None:
    index = f"{indices}-reject"
    whole = f'{{"title":"Grain","body":"{story(14)}"}}'.encode()
    status, raw = call(proxy, "POST", f"/{index}/_update/x1?refresh=true&_source=title",
                       b'{"doc":' + whole + b', "doc_as_upsert" : true}')
    assert status == 201, raw
    answer = json.loads(raw)    # the engine's own answer, with what its parameters asked for
    assert answer["result"] == "created" and answer["get"]["_source"] == {"title": "Grain"}
    assert neardup_of(es_url, index, "x1") == {**fingerprint_of("Grain", story(14)),
                                               "cluster": None, "bands": None, "mega": None}
    status, raw = call(proxy, "POST", f"/{index}/_update/x2?refresh=true",
                       b'{"doc":{"title":"Rates"},"upsert":' + doc_bytes("Rates", story(15)) + b'}')
    assert status == 201, raw   # an update is no insertion: no duplicate check
    assert neardup_of(es_url, index, "x2") == fingerprint_of("Rates", story(15))
    status, raw = call(proxy, "POST", f"/{index}/_update/x2?refresh=true", b'{"doc":{"title":"Rates now"}}')
    assert status == 200 and neardup_of(es_url, index, "x2") is None
    status, raw = call(proxy, "POST", f"/{index}/_update/missing", b'{"doc":{"title":"x"}}')
    direct = call(es_url, "POST", f"/{index}/_update/missing", b'{"doc":{"title":"x"}}')
    assert status == direct[0] == 404 and json.loads(raw)["error"]["type"] == json.loads(direct[1])["error"]["type"]


def test_an_inline_script_removes_the_fingerprint_and_a_stored_one_passes_unchanged(
        proxy: str, es_url: str, indices: str, engine: ClusterInfo) -> None:
    index = f"{indices}-allow"
    assert call(proxy, "PUT", f"/{index}/_doc/s1?refresh=true", doc_bytes("Oil", story(16)))[0] == 201
    script = b'{"script":{"source":"ctx._source.body = params.b","params":{"b":"changed"}}}'
    status, raw = call(proxy, "POST", f"/{index}/_update/s1?refresh=true", script)
    bulked = bulk(proxy, [b'{"update":{"_id":"s1"}}', script], index)
    stored_script = b'{"script":{"id":"neardup-no-such-script"}}'
    through = call(proxy, "POST", f"/{index}/_update/s1", stored_script)
    direct = call(es_url, "POST", f"/{index}/_update/s1", stored_script)
    assert through[0] == direct[0] and json.loads(through[1])["error"]["type"] == json.loads(direct[1])["error"]["type"]
    if engine.is_opensearch:
        assert status == 200, raw
        assert bulked[1]["errors"] is False
        stored = json.loads(stored_source(es_url, index, "s1"))
        assert stored["body"] == "changed" and "neardup" not in stored
    else:   # the test distribution of Elasticsearch has no painless: the engine's own refusal
        expected = call(es_url, "POST", f"/{index}/_update/s1", script)
        assert status == expected[0] == 400 and json.loads(raw)["error"]["type"] == json.loads(expected[1])["error"]["type"]
        assert bulked[1]["items"][0]["update"]["status"] == 400
        assert neardup_of(es_url, index, "s1") == fingerprint_of("Oil", story(16))


def test_tag_in_an_index_mapping_duplicate_of_as_a_keyword_refuses_the_tagged_documents(
        proxy: str, es_url: str, indices: str) -> None:
    index = f"{indices}-tagold"
    assert bulk(proxy, [b'{"index":{"_id":"a"}}', doc_bytes("Oil", story(17))], index)[1]["errors"] is False
    status, answer = bulk(proxy, [b'{"index":{"_id":"b"}}', doc_bytes("Oil", story(17)),
                                  b'{"index":{"_id":"c"}}', doc_bytes("Grain", story(18))], index)
    assert status == 200 and answer["errors"] is True
    refused, written = answer["items"][0]["index"], answer["items"][1]["index"]
    assert refused["status"] == 400 and refused["error"]["type"] == "neardup_mapping_exception"
    assert "keyword" in refused["error"]["reason"] and written["status"] == 201
    status, raw = call(proxy, "PUT", f"/{index}/_doc/d", doc_bytes("Oil", story(17)))
    error = json.loads(raw)["error"]
    assert status == 400 and error["type"] == "neardup_mapping_exception" and "duplicate_of" in error["reason"]
    for doc_id in ("b", "d"):
        assert call(es_url, "GET", f"/{index}/_doc/{doc_id}")[0] == 404


def test_the_metrics_count_enriched_documents_by_outcome(proxy: str, indices: str) -> None:
    bulk(proxy, [b'{"index":{"_id":"a"}}', doc_bytes("Oil", story(19)), b'{"index":{"_id":"b"}}',
                 doc_bytes("Oil", story(19)), b'{"index":{"_id":"e"}}', b'{"n":1}'], f"{indices}-reject")
    bulk(proxy, [b'{"update":{"_id":"a"}}', b'{"doc":{"body":"x"}}'], f"{indices}-reject")
    bulk(proxy, [b'{"index":{"_id":"a"}}', doc_bytes("Oil", story(19)), b'{"index":{"_id":"b"}}',
                 doc_bytes("Oil", story(19))], f"{indices}-tag")
    status, raw = call(proxy, "GET", "/_neardup/metrics")
    assert status == 200
    counted = {line.split('outcome="')[1].split('"')[0]: float(line.rsplit(" ", 1)[1])
               for line in raw.decode().splitlines() if line.startswith("neardup_proxy_enriched_documents_total{")}
    assert counted == {"fingerprinted": 2.0, "rejected": 1.0, "tagged": 1.0, "without_text": 1.0,
                       "fingerprint_removed": 1.0}


def test_filter_path_applies_to_the_merged_answer_with_the_rejected_items(proxy: str, es_url: str,
                                                                         indices: str) -> None:
    index = f"{indices}-reject"
    bulk(proxy, [b'{"index":{"_id":"a"}}', doc_bytes("Oil", story(22))], index)
    body = b"\n".join([b'{"index":{"_id":"b"}}', doc_bytes("Grain", story(23)), b'{"create":{"_id":"c"}}',
                       doc_bytes("Oil", story(22)), b'{"delete":{"_id":"zz"}}']) + b"\n"
    status, raw = call(proxy, "POST", f"/{index}/_bulk?filter_path=errors,items.*.status&refresh=true",
                       body, "application/x-ndjson")
    assert status == 200 and json.loads(raw) == {"errors": True, "items": [
        {"index": {"status": 201}}, {"create": {"status": 409}}, {"delete": {"status": 404}}]}, raw
    status, raw = call(proxy, "POST", f"/{index}/_bulk?filter_path=items.*.error.type", body, "application/x-ndjson")
    assert status == 200 and json.loads(raw) == {"items": [{"create": {"error": {
        "type": "neardup_duplicate_exception"}}}]}, raw
    only = b'{"index":{"_id":"d"}}\n' + doc_bytes("Oil", story(22)) + b"\n"   # every item refused: no upstream
    status, raw = call(proxy, "POST", f"/{index}/_bulk?filter_path=-took,-items.*.error", only, "application/x-ndjson")
    assert status == 200 and json.loads(raw) == {"errors": True, "items": [{"index": {
        "_index": index, "_id": "d", "status": 409}}]}, raw
