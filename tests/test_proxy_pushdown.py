"""Cluster push-down end to end: Reuters-21578 enriched by ``neardup index`` and clustered by
``neardup cluster``, the official Python client pointed at the proxy.

The proxy sends a search as native ``collapse`` on ``neardup.cluster`` when the index's clusters
were built for the request's threshold and mode and every document has a cluster id; otherwise
it collapses the result window. Expected values come from Elasticsearch directly (terms and
cardinality aggregations on the stored cluster ids, the uncollapsed hits), never from the proxy.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.test_cluster_es import THRESHOLD, cluster, copy_index, documents
from tests.test_proxy_support import (  # noqa: F401 - fixtures
    ProxyThread,
    delete_index,
    family_index,
    make_config,
    msearch,
    pes,
    proxy,
    search,
)

pytestmark = [pytest.mark.es, pytest.mark.slow]

QUERY = {"match": {"body": "oil prices"}}


@pytest.fixture(scope="module")
def clustered(es: Any, es_url: str, reuters_index: str) -> Iterator[tuple[str, dict[str, str]]]:
    """A clustered copy of the enriched Reuters index, and each document's stored cluster id."""
    name = copy_index(es, reuters_index, f"cluster-pushdown-{uuid.uuid4().hex[:8]}")
    try:
        summary = cluster(es_url, name)
        assert summary["failed"] == 0 and summary["clusters"] > 300
        # the cluster ids were written as updates: merge the deleted versions away now, so that
        # scores (document counts) do not change between the requests of a test
        es.indices.forcemerge(index=name, max_num_segments=1)
        es.indices.refresh(index=name)
        yield name, {key: doc["cluster"] for key, doc in documents(es, name).items()}
    finally:
        delete_index(es, name)


def group_sizes(es: Any, index: str, query: dict[str, Any]) -> dict[str, int]:
    """Cluster id -> how many documents matching ``query`` hold it (Elasticsearch's count)."""
    buckets = search(es, index=index, size=0, query=query, aggs={"g": {"terms": {
        "field": "neardup.cluster", "size": 20000}}})["aggregations"]["g"]["buckets"]
    return {b["key"]: b["doc_count"] for b in buckets}


def cardinality(es: Any, index: str, query: dict[str, Any]) -> int:
    return search(es, index=index, size=0, query=query, aggs={"g": {"cardinality": {
        "field": "neardup.cluster", "precision_threshold": 40000}}})["aggregations"]["g"]["value"]


def best_scores(es: Any, index: str, query: dict[str, Any], clusters: dict[str, str]) -> list[float]:
    """The best score of each group among the matching documents, best first."""
    hits = search(es, index=index, query=query, size=10000, source=False)["hits"]["hits"]
    best: dict[str, float] = {}
    for hit in hits:
        group = clusters[hit["_id"]]
        best[group] = max(best.get(group, 0.0), hit["_score"])
    return sorted(best.values(), reverse=True)


def test_twenty_pages_are_the_groups_the_stored_cluster_ids_say(es, pes, clustered):
    index, clusters = clustered
    sizes = group_sizes(es, index, QUERY)
    total_groups = cardinality(es, index, QUERY)
    assert total_groups == len(sizes) > 200
    scores = best_scores(es, index, QUERY, clusters)
    seen_groups: set[str] = set()
    seen_docs: set[str] = set()
    kept_scores: list[float] = []
    folded = 0
    for page in range(20):
        response = search(pes, index=index, query=QUERY, from_=page * 10, size=10, source=["title"])
        summary = response["neardup"]
        assert summary["pushdown"] is True and summary["groups_total"] == total_groups
        assert summary["threshold"] == THRESHOLD and summary["groups"] == 10
        assert "aggregations" not in response  # the proxy's cardinality aggregation is not shown
        for hit in response["hits"]["hits"]:
            group = hit["fields"]["neardup.group"][0]
            assert set(hit["fields"]) == {"neardup.group"}  # nothing the client did not ask for
            assert set(hit["_source"]) <= {"title"}
            assert clusters[hit["_id"]] == group and group not in seen_groups
            seen_groups.add(group)
            inner = hit["inner_hits"]["neardup"]["hits"]
            assert inner["total"] == {"value": sizes[group] - 1, "relation": "eq"}  # whole-index size
            assert len(inner["hits"]) == min(sizes[group] - 1, 99)  # members shown: up to 99 a group
            for member in inner["hits"]:
                assert clusters[member["_id"]] == group and member["_id"] != hit["_id"]
                assert set(member["_source"]) <= {"title"}
                assert set(member["fields"]) == {"neardup.similarity"}
                assert 0.0 <= member["fields"]["neardup.similarity"][0] <= 1.0
                assert member["_score"] <= hit["_score"]
            ids = {hit["_id"], *(m["_id"] for m in inner["hits"])}
            assert not ids & seen_docs
            seen_docs |= ids
            kept_scores.append(hit["_score"])
            folded += inner["total"]["value"]
    assert len(seen_groups) == 200
    assert kept_scores == pytest.approx(scores[:200])  # the 200 best groups, in rank order
    assert folded > 0  # Reuters has resends among the best "oil prices" stories


def test_source_params_sort_and_filter_path_give_exactly_what_was_asked(es, pes, clustered):
    index, clusters = clustered
    response = search(pes, index=index, query=QUERY, size=5, from_=3, sort=[{"id.keyword": "desc"}],
                          source_includes=["title"], filter_path=["hits.hits._id", "hits.hits._source",
                                                                  "hits.hits.inner_hits.neardup.hits.hits._id",
                                                                  "hits.hits.inner_hits.neardup.hits.hits._source",
                                                                  "neardup"])
    assert set(response) == {"hits", "neardup"} and response["neardup"]["pushdown"] is True
    hits = response["hits"]["hits"]
    assert len(hits) == 5
    # the same groups native collapse gives, in the client's sort order
    direct = search(es, index=index, query=QUERY, size=5, from_=3, sort=[{"id.keyword": "desc"}],
                       collapse={"field": "neardup.cluster"}, source=False)["hits"]["hits"]
    assert [h["_id"] for h in hits] == [h["_id"] for h in direct]
    for hit in hits:
        assert set(hit) <= {"_id", "_source", "inner_hits"} and set(hit["_source"]) == {"title"}
        members = hit.get("inner_hits", {}).get("neardup", {}).get("hits", {}).get("hits", [])
        member_ids = [m["_id"] for m in members]
        assert member_ids == sorted(member_ids, reverse=True)  # members in the client's order too
        for member in members:
            assert set(member) == {"_id", "_source"} and set(member["_source"]) == {"title"}
            assert clusters[member["_id"]] == clusters[hit["_id"]]


def test_msearch_pushes_down_item_by_item(es, pes, clustered, family_index):
    index, _ = clustered
    single = search(pes, index=index, query=QUERY, size=10, source=["title"])
    answer = msearch(pes, [{"index": index}, {"query": QUERY, "size": 10, "_source": ["title"]},
                                   {"index": family_index.name}, {"query": {"match_all": {}}, "size": 10}])
    pushed, windowed = answer["responses"]
    assert pushed["neardup"]["pushdown"] is True and windowed["neardup"]["pushdown"] is False
    assert [h["_id"] for h in pushed["hits"]["hits"]] == [h["_id"] for h in single["hits"]["hits"]]
    assert [h["inner_hits"] for h in pushed["hits"]["hits"]] == [h["inner_hits"] for h in single["hits"]["hits"]]
    assert pushed["neardup"]["groups_total"] == single["neardup"]["groups_total"]


def test_another_threshold_or_mode_collapses_the_window(es, pes, clustered):
    index, clusters = clustered
    for headers in ({"X-Neardup-Threshold": "0.85"}, {"X-Neardup-Mode": "containment"}):
        response = search(pes, index=index, headers=headers, query=QUERY, size=10)
        summary = response["neardup"]
        assert summary["pushdown"] is False and "groups_total" not in summary
        assert summary["window"] >= 10 and len(response["hits"]["hits"]) == 10
        for hit in response["hits"]["hits"]:
            assert hit["fields"]["neardup.group"] == [f"{index}/{hit['_id']}"]  # the window path's key
    off = search(pes, index=index, headers={"X-Neardup": "off"}, query=QUERY, size=10)
    assert "neardup" not in off and all("inner_hits" not in h for h in off["hits"]["hits"])


def test_a_document_without_a_cluster_id_turns_push_down_off(es, es_url, engine, clustered):
    """Checked on a fresh proxy (the facts are cached for 5 s): one document without a cluster id
    sends searches back to window collapsing, until `neardup cluster --incremental` places it."""
    index, clusters = clustered
    doc_id = next(iter(clusters))
    source = es.get(index=index, id=doc_id)["_source"]
    try:
        es.update(index=index, id=doc_id, body={"doc": {"neardup": {"cluster": None, "bands": None}}}, refresh=True)
        with ProxyThread(make_config(es_url), engine=engine) as running, running.client() as client:
            assert search(client, index=index, query=QUERY, size=5)["neardup"]["pushdown"] is False
        summary = cluster(es_url, index, "--incremental")
        assert summary["new_documents"] == 1 and summary["failed"] == 0
        assert es.get(index=index, id=doc_id)["_source"]["neardup"]["cluster"] == clusters[doc_id]
        with ProxyThread(make_config(es_url), engine=engine) as running, running.client() as client:
            assert search(client, index=index, query=QUERY, size=5)["neardup"]["pushdown"] is True
    finally:
        es.index(index=index, id=doc_id, body=source, refresh=True)
