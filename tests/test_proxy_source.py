"""``neardup_source``: the proxy marks the hits of a page that contain a fragment of a source
document, against the real Elasticsearch (Reuters stories with one planted partial copy)."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from neardup.corpora import reuters_documents
from neardup.fingerprint import Fingerprinter, FingerprintParams, exact_containment
from neardup.fingerprint.bloom import BloomParams
from neardup.proxy.handlers.source_check import CONTAINS_FIELD, contained_shares, hit_text, page_bloom_params, page_positions
from tests.test_proxy import assert_es_error, http, post_json, strip_ours
from tests.test_proxy_support import (  # noqa: F401 - fixtures
    ProxyThread,
    bulk,
    create_index,
    delete_index,
    mapping,
    pes,
    proxy,
    request,
    search,
)

MIN_SHARE = 0.05   # copies.min_share (default)


# -- pure core ------------------------------------------------------------------------------
def test_contained_shares_screens_then_verifies_exactly() -> None:
    source = np.arange(1, 101, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    rng = np.random.default_rng(3)
    other = rng.integers(1, 2**63, 400, dtype=np.uint64)
    hits = [np.unique(np.concatenate([other[:200], source[:10]])),   # 10 % of the source
            np.unique(other[200:]),                                    # nothing of it
            np.unique(np.concatenate([other[:50], source[:3]])),      # 3 %: below min_share
            np.empty(0, dtype=np.uint64)]
    shares, candidates = contained_shares(source, hits, BloomParams(row_bits=4096), MIN_SHARE, 5)
    assert shares == {0: pytest.approx(0.10)}
    assert candidates >= 1
    assert contained_shares(np.empty(0, np.uint64), hits, BloomParams(), MIN_SHARE, 5) == ({}, 0)


def test_shingling_the_source_and_hits_does_not_load_numba() -> None:
    """The proxy shingles on NumPy (fingerprint.jit switched off around it), and afterwards the
    switch is back where it was."""
    code = ("import sys\n"
            "import neardup.proxy.app\n"
            "from neardup.fingerprint import FingerprintParams, jit\n"
            "from neardup.proxy.handlers.source_check import shingle_texts\n"
            "sets = shingle_texts(['The company said profits rose sharply in the quarter.', None],"
            " FingerprintParams())\n"
            "assert len(sets[0]) > 3 and len(sets[1]) == 0\n"
            "assert 'numba' not in sys.modules, 'numba imported'\n"
            "assert jit._enabled is True\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_page_rows_hold_about_the_median_hit() -> None:
    configured = BloomParams()
    rows = page_bloom_params([300, 0, 280, 350, 5000], configured)
    assert rows.hashes == configured.hashes and rows.target_fp == configured.target_fp
    assert rows.row_bits % 64 == 0 and 325 <= rows.capacity < 325 + 64
    assert page_bloom_params([], configured).capacity >= 1


def test_hit_text_reads_the_plan_channel_and_page_positions() -> None:
    hit = {"_source": {"title": "T", "body": "B", "rank": 1}, "fields": {"title": ["t1"], "body": ["b1", "b2"]}}
    assert hit_text(hit, "_source", ("title", "body")) == "T\nB"
    assert hit_text(hit, "fields", ("title", "body")) == "t1\nb1\nb2"
    assert hit_text({"_source": {"rank": 1}}, "_source", ("title", "body")) is None
    assert page_positions([[0, 3], [1], [2, 4]], 1, 2) == [1, 2, 4]


# -- against Elasticsearch ------------------------------------------------------------------
def _fragment_copy(fp: Fingerprinter, source: dict[str, str], host: dict[str, str]) -> tuple[str, float]:
    """The host's body with the shortest run of the source's middle words appended that holds
    10 % of the source's shingles; and that exact share."""
    shingles = fp.shingles(fp.canonical_tokens(f"{source['title']}\n{source['body']}"))
    words = source["body"].split()
    middle = len(words) // 3
    for length in itertools.count(len(words) // 20):
        body = host["body"] + "\n" + " ".join(words[middle:middle + length])
        share = exact_containment(shingles, fp.shingles(fp.canonical_tokens(f"{host['title']}\n{body}")))
        if share >= 0.10:
            return body, share
    raise AssertionError("unreachable")


@pytest.fixture(scope="module")
def source_index(es: Any) -> Iterator[dict[str, Any]]:
    fp = Fingerprinter(FingerprintParams())
    stories = [d for d in itertools.islice((d for d in reuters_documents(with_body_only=True)
                                            if len(d["body"].split()) >= 300), 16)]
    docs = {f"r{k}": {"title": s["title"], "body": s["body"]} for k, s in enumerate(stories)}
    body, share = _fragment_copy(fp, docs["r0"], docs["r1"])
    docs["copier"] = {"title": docs["r1"]["title"] + " (update)", "body": body}
    order = ["r0", "r2", "r3", "copier", *[f"r{k}" for k in range(4, 16)], "r1"]
    for rank, doc_id in enumerate(order):
        doc = docs[doc_id]
        doc["rank"] = rank
        doc["neardup"] = fp.fingerprint_fields([doc["title"], doc["body"]]).to_source()
    source = fp.shingles(fp.canonical_tokens(f"{docs['r0']['title']}\n{docs['r0']['body']}"))
    exact = {i: exact_containment(source, fp.shingles(fp.canonical_tokens(f"{d['title']}\n{d['body']}")))
             for i, d in docs.items()}
    name = f"proxy-source-{uuid.uuid4().hex[:10]}"
    create_index(es, name, mapping(), {"number_of_shards": 1, "number_of_replicas": 0})
    bulk(es, ({"_index": name, "_id": i, "_source": d} for i, d in docs.items()), refresh="wait_for")
    yield {"name": name, "share": share, "exact": exact}
    delete_index(es, name)


def marked(response: dict) -> dict[str, float]:
    """{_id: share} of every hit on the page (folded members included) marked as a copier."""
    found = {}
    for top in response["hits"]["hits"]:
        for hit in [top, *top.get("inner_hits", {}).get("neardup", {}).get("hits", {}).get("hits", [])]:
            if CONTAINS_FIELD in hit.get("fields", {}):
                found[hit["_id"]] = hit["fields"][CONTAINS_FIELD][0]
    return found


@pytest.mark.es
def test_the_planted_copy_is_marked_with_its_share(proxy: ProxyThread, source_index: dict) -> None:
    name = source_index["name"]
    assert 0.10 <= source_index["share"] <= 0.13
    # the other stories really hold (almost) nothing of the source: the test can fail
    assert all(v < MIN_SHARE for i, v in source_index["exact"].items() if i not in ("r0", "copier"))
    status, _, response = post_json(f"{proxy.url}/{name}/_search?neardup_source=r0",
                                    {"sort": ["rank"], "size": 10})
    assert status == 200, response   # Elasticsearch refuses unknown parameters: not forwarded
    assert marked(response) == {"copier": round(source_index["share"], 4)}
    shown = [h["_id"] for h in response["hits"]["hits"]]
    assert "r0" in shown and "copier" in shown   # the source itself is on the page, unmarked
    summary = response["neardup"]["source"]
    assert summary["_id"] == "r0" and summary["contains"] == 1 and summary["min_share"] == MIN_SHARE
    # rows sized for the page: the screen leaves most unrelated hits out before the exact check
    assert summary["checked"] == 9 and 1 <= summary["candidates"] <= 4 and summary["shingles"] > 100
    # a page without the copier marks nothing; the header works as the parameter does
    status, _, later = post_json(f"{proxy.url}/{name}/_search", {"sort": ["rank"], "size": 5, "from": 5},
                                 headers={"X-Neardup-Source": "r0"})
    assert status == 200 and marked(later) == {} and later["neardup"]["source"]["contains"] == 0


@pytest.mark.es
@pytest.mark.parametrize("body", [
    {"_source": ["rank"]},
    {"_source": False},
    {"_source": False, "fields": ["title"]},
    {"_source": {"excludes": ["body", "neardup"]}},
])
def test_the_client_gets_exactly_the_fields_it_asked_for(pes: Any, es: Any,
                                                         source_index: dict, body: dict) -> None:
    name = source_index["name"]
    wanted = {"sort": ["rank"], "size": 10, **body}
    proxied = request(pes, "POST", f"/{name}/_search", {"neardup_source": "r0"}, wanted)
    direct = {h["_id"]: h for h in search(es, index=name, **{**wanted, "size": 30})["hits"]["hits"]}
    assert marked(proxied) == {"copier": round(source_index["share"], 4)}
    for top in proxied["hits"]["hits"]:
        for hit in [top, *top["inner_hits"]["neardup"]["hits"]["hits"]]:
            fields = {k: v for k, v in hit.get("fields", {}).items() if k != CONTAINS_FIELD}
            hit = {**hit, "fields": fields} if fields else {k: v for k, v in hit.items() if k != "fields"}
            assert strip_ours(hit) == direct[hit["_id"]]


@pytest.mark.es
def test_a_bad_source_is_an_elasticsearch_style_error_naming_the_parameter(proxy: ProxyThread,
                                                                            source_index: dict) -> None:
    name = source_index["name"]
    status, _, raw = http(f"{proxy.url}/{name}/_search?neardup_source=no-such-doc")
    assert status == 404
    assert_es_error(raw, 404, "resource_not_found_exception", "[neardup_source] document [no-such-doc]")
    status, _, raw = http(f"{proxy.url}/proxy-source-missing-{uuid.uuid4().hex[:6]}/_search",
                          headers={"X-Neardup-Source": "r0"})
    assert_es_error(raw, 404, "index_not_found_exception", "neardup_source")
    status, _, raw = http(f"{proxy.url}/_search?neardup_source=r0")
    assert_es_error(raw, 400, "illegal_argument_exception", "[neardup_source] needs one index")
    status, _, raw = http(f"{proxy.url}/{name}/_search?neardup_source=")
    assert_es_error(raw, 400, "illegal_argument_exception", "neardup_source")
    status, _, raw = http(f"{proxy.url}/{name}/_search?neardup_source=r0&neardup=off")
    assert_es_error(raw, 400, "illegal_argument_exception", "[neardup_source] needs the proxy's search path")
    lines = json.dumps({}) + "\n" + json.dumps({"size": 3}) + "\n"
    status, _, raw = http(f"{proxy.url}/{name}/_msearch?neardup_source=r0", "POST", lines.encode(),
                          {"Content-Type": "application/x-ndjson"})
    assert_es_error(raw, 400, "illegal_argument_exception", "[neardup_source] is supported on _search only")
