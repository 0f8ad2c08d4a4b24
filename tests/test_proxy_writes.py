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
from neardup.upstream import ClusterInfo
from tests.engine_support import create_index, delete_index
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


@pytest.fixture
def indices(es: Any) -> Iterator[str]:
    prefix = f"writes-{uuid.uuid4().hex[:8]}"
    mappings = es_mapping()
    mappings["properties"]["neardup"]["properties"]["duplicate_of"] = {"type": "keyword"}
    for suffix in ("reject", "tag", "allow", "plain"):
        create_index(es, f"{prefix}-{suffix}", mappings=mappings if suffix != "plain" else None)
    yield prefix
    for suffix in ("reject", "tag", "allow", "plain"):
        delete_index(es, f"{prefix}-{suffix}")


@pytest.fixture
def proxy(es_url: str, engine: ClusterInfo, indices: str) -> Iterator[str]:
    config = make_config(es_url, enrich={"indices": {
        f"{indices}-reject": {"on_duplicate": "reject"}, f"{indices}-tag": {"on_duplicate": "tag"},
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
    assert tagged["neardup"]["duplicate_of"] == first_id
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


def test_a_gzipped_body_is_enriched_and_a_partial_update_without_every_field_passes_unchanged(
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
    assert json.loads(stored_source(es_url, index, "new"))["neardup"]["duplicate_of"] == "old"
    updated = json.loads(stored_source(es_url, index, "old"))   # the update applied as sent
    assert updated["body"] == "changed" and updated["neardup"] == fingerprint_of("Oil", story(6))


def test_update_items_get_the_fingerprint_of_their_upsert_and_of_a_whole_doc(proxy: str, es_url: str,
                                                                            indices: str) -> None:
    index = f"{indices}-reject"
    status, _ = call(proxy, "PUT", f"/{index}/_doc/u0?refresh=true", doc_bytes("Oil", story(7)))
    assert status == 201
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
        assert stored["neardup"] == {**grain, "cluster": None, "bands": None}
    # the engine writes an upsert again from its parsed value: compared as JSON
    expected = spliced(doc_bytes("Rates", story(9)), fingerprint_of("Rates", story(9)))
    assert json.loads(stored_source(es_url, index, "u2")) == json.loads(expected)
