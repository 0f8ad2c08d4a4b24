"""No document is grouped by an outdated cluster id.

When the indexer writes a *changed* fingerprint (``neardup index``, ``neardup enrich``,
``neardup load``) into an index that has clusters, the cluster values derived from the old one
(``neardup.cluster``, ``neardup.bands``) go with it; an unchanged fingerprint keeps them. (Before
an index is first clustered, ``index`` and ``load`` write the new fingerprint's seed instead:
tests/test_cluster_seed.py.) The proxy's push-down then
sees a document without a cluster id and collapses the window instead, until
``neardup cluster --incremental`` places the document again.
"""

from __future__ import annotations

import itertools
import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from neardup.corpora import reuters_documents
from neardup.fingerprint import Fingerprint, Fingerprinter, FingerprintParams, estimated_resemblance
from neardup.indexer.enrich import STORED_PATHS, cleared_keys, enrich_line, merged_neardup
from neardup.proxy.handlers import bulk_body
from neardup.proxy.handlers.native_collapse import missing_clusters_query
from tests.cluster_support import bulk, scan_hits
from tests.engine_support import delete_index
from tests.plugins.corpora import neardup_json
from tests.reliability_support import fetch
from tests.test_proxy_support import ProxyThread, make_config

FP = Fingerprinter(FingerprintParams())
TEXT = "Crude oil prices rose sharply on Monday after the cartel agreed to cut output by a million barrels"
OTHER = "The central bank left interest rates unchanged and said inflation remained close to its target"


def stored(text: str, **extra: Any) -> dict[str, Any]:
    return {**FP.fingerprint_fields([text]).to_source(), **extra}


# --- pure: the merge used by enrich/load, the partial update used by index ---------------------------

def test_a_changed_fingerprint_drops_the_cluster_values():
    old = stored(OTHER, cluster="c7", bands=["00ff"], duplicate_of="d1")
    merged = merged_neardup(old, FP.fingerprint_fields([TEXT]))
    assert "cluster" not in merged and "bands" not in merged
    assert merged["duplicate_of"] == "d1" and merged["sig"] == stored(TEXT)["sig"]
    assert cleared_keys(old, stored(TEXT)) == {"cluster": None, "bands": None}


def test_an_unchanged_fingerprint_keeps_them():
    same = stored(TEXT, cluster="c7", bands=["00ff"])
    assert merged_neardup(same, FP.fingerprint_fields([TEXT])) == same
    assert cleared_keys(same, stored(TEXT)) == {}
    assert cleared_keys(stored(OTHER), stored(TEXT)) == {}  # nothing to clear
    assert cleared_keys(None, stored(TEXT)) == {}


def test_a_retired_mega_is_cleared_whether_or_not_the_fingerprint_changed():
    mega = ["0123456789abcdef"] * 91
    for before in (stored(TEXT, mega=mega, cluster="c7"), stored(OTHER, mega=mega, cluster="c7")):
        changed = before["sig"] != stored(TEXT)["sig"]
        merged = merged_neardup(before, FP.fingerprint_fields([TEXT]))
        assert "mega" not in merged and ("cluster" in merged) is not changed
        cleared = cleared_keys(before, stored(TEXT))
        assert cleared == ({"cluster": None, "mega": None} if changed else {"mega": None})
    line = json.dumps({"id": "1", "body": TEXT, "neardup": stored(TEXT, mega=mega)})
    assert "mega" not in json.loads(enrich_line(line, ["body"], FP).render())["neardup"]
    assert "neardup.mega" in STORED_PATHS   # the job reads it, to clear it


def test_the_proxys_enriched_update_clears_what_the_indexer_voids():
    """A partial update through the proxy (which cannot read the stored object) clears every key
    the indexer voids when a document's fingerprint changes, and nothing else."""
    holding_all = stored(OTHER, cluster="c7", bands=["00ff"], mega=["0123456789abcdef"], duplicate_of="d1")
    assert set(cleared_keys(holding_all, stored(TEXT))) == set(bulk_body.CLEARED_KEYS)


def test_enrich_lines_drop_outdated_cluster_ids():
    line = json.dumps({"id": "1", "body": TEXT, "neardup": stored(OTHER, cluster="c7", bands=["ab"])})
    out = json.loads(enrich_line(line, ["body"], FP).render())
    assert out["neardup"]["sig"] == stored(TEXT)["sig"] and "cluster" not in out["neardup"]
    line = json.dumps({"id": "1", "body": TEXT, "neardup": stored(TEXT, cluster="c7", bands=["ab"])})
    assert json.loads(enrich_line(line, ["body"], FP).render())["neardup"]["cluster"] == "c7"


# --- real Elasticsearch: neardup index, neardup cluster, the proxy ---------------------------------------

@pytest.fixture
def small_index(es: Any) -> Iterator[tuple[str, dict[str, dict[str, Any]]]]:
    """30 real stories and a copy of the first with one word changed (a near-duplicate)."""
    stories = list(itertools.islice((d for d in reuters_documents(with_body_only=True)
                                     if len(d["body"].split()) >= 200), 30))
    docs = {f"s{k:02d}": {"title": s["title"], "body": s["body"]} for k, s in enumerate(stories)}
    words = stories[0]["body"].split()
    words[-10] = "zyxwv"
    docs["s00-copy"] = {"title": stories[0]["title"], "body": " ".join(words)}
    name = f"cluster-stale-{uuid.uuid4().hex[:8]}"
    es.indices.create(index=name, body={"settings": {"number_of_shards": 1, "number_of_replicas": 0}})
    bulk(es, ({"_index": name, "_id": k, "_source": d} for k, d in docs.items()), refresh=True)
    try:
        yield name, docs
    finally:
        delete_index(es, name)


def values(es: Any, index: str) -> dict[str, dict[str, Any]]:
    return {hit["_id"]: hit["_source"]["neardup"] for hit in scan_hits(es, index, _source=["neardup"])}


def pushed_down(es_url: str, index: str) -> bool:
    """Whether a fresh proxy (no cached facts) pushes a search of ``index`` down."""
    with ProxyThread(make_config(es_url)) as running:
        answer = fetch(running.url, "POST", f"/{index}/_search",
                       json.dumps({"query": {"match": {"body": "the"}}, "size": 5}).encode(),
                       {"Content-Type": "application/json"})
    assert answer.status == 200, answer
    return answer.json()["neardup"]["pushdown"]


@pytest.mark.es
def test_reindexing_a_changed_document_clears_its_cluster_until_the_next_run(es, es_url, small_index):
    index, docs = small_index
    neardup_json(es, es_url, "index", "--index", index)
    neardup_json(es, es_url, "cluster", "--index", index, "--threshold", "0.8")
    before = values(es, index)
    assert before["s00-copy"]["cluster"] == before["s00"]["cluster"] == "s00"
    assert es.count(index=index, body={"query": missing_clusters_query()})["count"] == 0
    assert pushed_down(es_url, index)

    # the application rewrites the copy's text (a partial update: the old neardup values stay)
    es.update(index=index, id="s00-copy", body={"doc": {"body": docs["s05"]["body"] + " Revised."}}, refresh=True)
    summary = neardup_json(es, es_url, "index", "--index", index, "--force")
    assert summary["failed"] == 0
    after = values(es, index)
    changed = after["s00-copy"]
    assert changed["sig"] != before["s00-copy"]["sig"]
    assert changed["cluster"] is None and changed["bands"] is None  # written as null: no value
    for key in docs:  # unchanged fingerprints keep their cluster values
        if key != "s00-copy":
            assert after[key] == before[key]
    assert es.count(index=index, body={"query": missing_clusters_query()})["count"] == 1
    assert not pushed_down(es_url, index)

    placed = neardup_json(es, es_url, "cluster", "--index", index, "--threshold", "0.8", "--incremental")
    assert placed["new_documents"] == 1 and placed["failed"] == 0
    final = values(es, index)
    assert final["s00"]["cluster"] == "s00"
    fingerprints = {k: Fingerprint.from_source({f: final[k][f] for f in ("v", "sig", "n", "super")})
                    for k in ("s00", "s05", "s00-copy")}
    assert estimated_resemblance(fingerprints["s00-copy"], fingerprints["s00"]) < 0.8
    linked = estimated_resemblance(fingerprints["s00-copy"], fingerprints["s05"]) >= 0.8
    assert final["s00-copy"]["cluster"] == ("s05" if linked else "s00-copy")  # placed by its new text
    assert es.count(index=index, body={"query": missing_clusters_query()})["count"] == 0
    assert pushed_down(es_url, index)
