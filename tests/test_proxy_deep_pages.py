"""Deep pages of collapsed searches on the real engine: never empty or short while more groups exist.

A page that ``collapse.max_window`` hits cannot fill is complete, its window extended up to the
index's ``index.max_result_window`` or grouped by the engine itself on a clustered index
(push-down), or refused with a 400 in the engine's error format; a page short because the results
run out is complete. Expected pages are computed here from the whole ranked list of the index,
grouped by the proxy's pure grouping function, never taken from the proxy.

The index: :data:`ORIGINALS` documents of random words (no two alike) and :data:`COPIES` exact
copies of some of them (one group with their original), each ranked after its original;
``rank`` gives a fixed order, and ``index.max_result_window`` is :data:`RESULT_WINDOW`, so the
first 1000 hits hold fewer than 1000 groups and the first :data:`RESULT_WINDOW` hold fewer than
1200.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from neardup.fingerprint import Fingerprinter, FingerprintParams
from neardup.proxy.grouping import collapse
from neardup.proxy.grouping.fingerprints import default_algorithms
from neardup.upstream import ClusterInfo
from tests.engine_support import bulk_load, delete_index
from tests.test_cluster_es import cluster
from tests.test_proxy import http
from tests.test_proxy_support import ProxyThread, make_config, mapping

pytestmark = pytest.mark.es

ORIGINALS, COPIES, RESULT_WINDOW = 1300, 300, 1300
ALGORITHMS = default_algorithms(FingerprintParams())
MATCH_ALL: dict[str, Any] = {"match_all": {}}


@dataclass
class DeepIndex:
    name: str
    ranked: list[dict[str, Any]]     # every document as a hit (``_id``, ``_source``), in rank order

    def groups(self, hits: int | None = None, query_ranks: int | None = None) -> list[list[str]]:
        """The ids of each group among the first ``hits`` hits of the search of the first
        ``query_ranks`` ranks (None: all), representative first, groups in rank order."""
        ranked = self.ranked[:query_ranks][:hits]
        found, _ = collapse.group(ranked, "_source", 0.8, "resemblance", ALGORITHMS)
        return [[ranked[position]["_id"] for position in members] for members in found]


def _documents() -> list[dict[str, Any]]:
    """The documents in rank order: originals of 40 random words, copies a few ranks after theirs."""
    rng = np.random.default_rng(11)
    vocabulary = ["".join(rng.choice(list("abcdefghijklmnopqrstuvwxyz"), 7)) for _ in range(4000)]
    fingerprinter = Fingerprinter(FingerprintParams())
    originals = []
    for k in range(ORIGINALS):
        title, body = f"story {k}", " ".join(rng.choice(vocabulary, 40))
        originals.append({"id": f"s{k}", "title": title, "body": body,
                          "neardup": fingerprinter.fingerprint_fields([title, body]).to_source()})
    ranked = list(originals)
    for k in sorted(rng.choice(ORIGINALS, COPIES, replace=False).tolist(), reverse=True):
        # the copy goes 1 to 30 places after its original (later copies first: positions hold)
        ranked.insert(ranked.index(originals[k]) + int(rng.integers(1, 31)), {**originals[k], "id": f"s{k}-copy"})
    return [{**doc, "rank": rank} for rank, doc in enumerate(ranked)]


def _load(es: Any, documents: list[dict[str, Any]]) -> str:
    name = f"deep-pages-{uuid.uuid4().hex[:8]}"
    es.indices.create(index=name, body={"mappings": mapping(), "settings": {
        "number_of_shards": 2, "number_of_replicas": 0, "index.max_result_window": RESULT_WINDOW}})
    bulk_load(es, name, documents)
    return name


@pytest.fixture(scope="module")
def documents() -> list[dict[str, Any]]:
    return _documents()


@pytest.fixture(scope="module")
def deep(es: Any, documents: list[dict[str, Any]]) -> Iterator[DeepIndex]:
    name = _load(es, documents)
    try:
        yield DeepIndex(name, [{"_index": name, "_id": doc["id"], "_source": doc} for doc in documents])
    finally:
        delete_index(es, name)


def _proxy(es_url: str, engine: ClusterInfo, **collapse_config: Any) -> Iterator[ProxyThread]:
    with ProxyThread(make_config(es_url, collapse=collapse_config), engine=engine) as running:
        yield running


@pytest.fixture(scope="module")
def extending(es_url: str, engine: ClusterInfo) -> Iterator[ProxyThread]:
    """The default configuration: ``max_window`` 1000, ``deep_pages = "extend"``."""
    yield from _proxy(es_url, engine)


@pytest.fixture(scope="module")
def refusing(es_url: str, engine: ClusterInfo) -> Iterator[ProxyThread]:
    yield from _proxy(es_url, engine, deep_pages="refuse")


@pytest.fixture(scope="module")
def narrow(es_url: str, engine: ClusterInfo) -> Iterator[ProxyThread]:
    """A window of at most 50 hits before it is extended."""
    yield from _proxy(es_url, engine, max_window=50)


def post(url: str, body: Any, path: str = "_search") -> tuple[int, dict[str, Any]]:
    ndjson = path == "_msearch"
    data = "".join(json.dumps(line) + "\n" for line in body) if ndjson else json.dumps(body)
    status, _, raw = http(f"{url}/{path}", "POST", data.encode(),
                          {"Content-Type": "application/x-ndjson" if ndjson else "application/json"})
    return status, json.loads(raw)


def page_body(start: int, size: int, ranks: int | None = None) -> dict[str, Any]:
    query = MATCH_ALL if ranks is None else {"range": {"rank": {"lt": ranks}}}
    return {"query": query, "sort": ["rank"], "from": start, "size": size, "_source": ["rank"]}


def assert_page(answer: dict[str, Any], deep: DeepIndex, start: int, size: int, ranks: int | None = None) -> None:
    """``answer`` is the complete page ``[start, start + size)`` of the groups of every matching
    hit: its representatives, and as members those of the group within the window fetched."""
    window = answer["neardup"]["window"]
    expected = deep.groups(query_ranks=ranks)[start:start + size]
    ranks_of = {hit["_id"]: hit["_source"]["rank"] for hit in deep.ranked}
    members_in_window = {group[0]: [m for m in group[1:] if ranks_of[m] < window] for group in expected}
    tops = answer["hits"]["hits"]
    assert [hit["_id"] for hit in tops] == [group[0] for group in expected]
    for hit in tops:
        inner = [m["_id"] for m in hit["inner_hits"]["neardup"]["hits"]["hits"]]
        assert inner == members_in_window[hit["_id"]], hit["_id"]
    assert answer["neardup"]["complete"] is True and answer["neardup"]["groups"] == len(expected)


def assert_refused(status: int, answer: dict[str, Any], groups: int, wanted: int, bound: str) -> None:
    """The proxy's 400 for a page past its window, in the engine's error format."""
    assert status == 400 and answer["status"] == 400 and set(answer) == {"error", "status"}, answer
    error = answer["error"]
    assert error["type"] == "illegal_argument_exception" and error["root_cause"] == [
        {"type": error["type"], "reason": error["reason"]}]
    assert error["reason"].startswith(f"Result window is too large for collapsed near-duplicates, from + size "
                                      f"must be less than or equal to: [{groups}] but was [{wanted}]"), error
    assert f"[{bound}]" in error["reason"] and "search_after" in error["reason"]
    assert "neardup cluster" in error["reason"]


# -- extended windows -------------------------------------------------------------------------
def test_deep_pages_past_max_window_are_complete(extending: ProxyThread, deep: DeepIndex) -> None:
    """``from=990&size=20`` used to come back empty and ``size=1200`` short (979 groups, from
    1000 hits): the window now grows past ``max_window`` while the result window allows."""
    assert len(deep.groups(1000)) < 1000 < len(deep.groups(RESULT_WINDOW))
    within = len(deep.groups(RESULT_WINDOW))
    for start, size in ((990, 20), (1000, 10), (0, 1010), (within - 10, 10)):
        status, answer = post(extending.url + "/" + deep.name, page_body(start, size))
        assert status == 200, answer
        assert_page(answer, deep, start, size)
        assert 1000 < answer["neardup"]["window"] <= RESULT_WINDOW
        assert answer["hits"]["total"] == {"value": len(deep.ranked), "relation": "eq"}


def test_pages_max_window_fills_are_not_extended(extending: ProxyThread, deep: DeepIndex) -> None:
    status, answer = post(extending.url + "/" + deep.name, page_body(700, 20))
    assert status == 200
    assert_page(answer, deep, 700, 20)
    assert answer["neardup"]["window"] <= 1000


def test_past_the_result_window_the_page_is_refused(extending: ProxyThread, deep: DeepIndex, es_url: str,
                                                    engine: ClusterInfo) -> None:
    within = len(deep.groups(RESULT_WINDOW))
    assert within < 1200
    for start, size in ((0, 1200), (within - 5, 10)):
        status, answer = post(extending.url + "/" + deep.name, page_body(start, size))
        assert_refused(status, answer, within, start + size, "index.max_result_window")
        assert answer["error"]["reason"].count(f"[{RESULT_WINDOW}] hits") == 1
    # from + size past the index's own result window: the engine's own refusal, as it gave it
    status, answer = post(extending.url + "/" + deep.name, page_body(1295, 10))
    direct = post(es_url + "/" + deep.name, page_body(1295, 10))
    assert status == direct[0] == 400 and answer["error"]["root_cause"] == direct[1]["error"]["root_cause"]
    assert answer["error"]["root_cause"][0]["reason"].startswith(
        f"Result window is too large, from + size must be less than or equal to: [{RESULT_WINDOW}] but was [1305]")


def test_refuse_policy_refuses_what_max_window_cannot_fill(refusing: ProxyThread, deep: DeepIndex) -> None:
    first = len(deep.groups(1000))
    status, answer = post(refusing.url + "/" + deep.name, page_body(990, 20))
    assert_refused(status, answer, first, 1010, "collapse.max_window")
    assert 'set [collapse.deep_pages] to "extend"' in answer["error"]["reason"]
    status, answer = post(refusing.url + "/" + deep.name, page_body(first - 20, 20))
    assert status == 200
    assert_page(answer, deep, first - 20, 20)


def test_the_result_window_is_read_once_per_index_and_only_for_deep_pages(
        es_url: str, engine: ClusterInfo, deep: DeepIndex, monkeypatch: pytest.MonkeyPatch) -> None:
    """Pages ``max_window`` fills never ask for the index's settings; deep pages of one index ask
    once (cached), and a refusal is counted as its own outcome."""
    from neardup.proxy.handlers import result_window

    check, asked = result_window._check, []

    async def counted(state: Any, request: Any, index: str) -> int | None:
        asked.append(index)
        return await check(state, request, index)

    monkeypatch.setattr(result_window, "_check", counted)
    with ProxyThread(make_config(es_url), engine=engine) as running:
        for start in (0, 500):
            assert post(running.url + "/" + deep.name, page_body(start, 20))[0] == 200
        assert asked == []
        for start in (990, 1000):
            assert post(running.url + "/" + deep.name, page_body(start, 20))[0] == 200
        assert post(running.url + "/" + deep.name, page_body(0, 1200))[0] == 400
        assert asked == [deep.name]
        searches = running.metrics.counters["neardup_proxy_searches_total"]
        assert searches[(("outcome", "refused"), ("reason", "window_too_large"))] == 1


# -- the end of the results -------------------------------------------------------------------
@pytest.mark.parametrize(("start", "size"), [(100, 50), (125, 10), (300, 10)])
def test_a_page_short_because_the_results_run_out_is_complete(narrow: ProxyThread, deep: DeepIndex,
                                                              start: int, size: int) -> None:
    """150 matching hits hold fewer than ``start + size`` groups: the page holds what exists
    (possibly nothing), complete, through a window extended past ``max_window`` (50)."""
    groups = len(deep.groups(query_ranks=150))
    assert groups < start + size
    status, answer = post(narrow.url + "/" + deep.name, page_body(start, size, ranks=150))
    assert status == 200, answer
    assert_page(answer, deep, start, size, ranks=150)
    assert len(answer["hits"]["hits"]) == max(0, groups - start) < size


def test_a_window_ending_at_the_last_counted_hit_is_complete(extending: ProxyThread, deep: DeepIndex) -> None:
    """Exactly ``RESULT_WINDOW`` hits match: the window at its limit holds all of them
    (``hits.total`` is exact), so the short last page is complete and not refused."""
    groups = len(deep.groups(query_ranks=RESULT_WINDOW))
    status, answer = post(extending.url + "/" + deep.name, page_body(groups - 5, 10, ranks=RESULT_WINDOW))
    assert status == 200, answer
    assert_page(answer, deep, groups - 5, 10, ranks=RESULT_WINDOW)
    assert answer["neardup"]["window"] == RESULT_WINDOW and len(answer["hits"]["hits"]) == 5


def test_the_refuse_policy_keeps_short_last_pages(refusing: ProxyThread, deep: DeepIndex) -> None:
    groups = len(deep.groups(query_ranks=40))
    status, answer = post(refusing.url + "/" + deep.name, page_body(groups - 3, 10, ranks=40))
    assert status == 200
    assert_page(answer, deep, groups - 3, 10, ranks=40)


# -- _msearch ---------------------------------------------------------------------------------
def test_msearch_items_are_extended_or_refused_one_by_one(extending: ProxyThread, deep: DeepIndex) -> None:
    """Each item as the same search alone: extended, refused (the item's own 400, as the engine
    answers an item past its result window), ordinary, and past the end of its results."""
    bodies = [page_body(990, 20), page_body(0, 1200), page_body(0, 10), page_body(300, 10, ranks=150)]
    status, answer = post(extending.url, [line for body in bodies for line in ({"index": deep.name}, body)],
                          "_msearch")
    assert status == 200
    extended, refused, ordinary, ended = answer["responses"]
    alone = [post(extending.url + "/" + deep.name, body) for body in bodies]
    assert_page(extended, deep, 990, 20)
    assert refused == alone[1][1]
    assert_refused(refused["status"], refused, len(deep.groups(RESULT_WINDOW)), 1200, "index.max_result_window")
    assert_page(ordinary, deep, 0, 10)
    assert_page(ended, deep, 300, 10, ranks=150)
    for item, (_, single) in zip((extended, ordinary, ended), (alone[0], alone[2], alone[3])):
        assert item["hits"]["hits"] == single["hits"]["hits"] and item["status"] == 200


# -- push-down --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def clustered(es: Any, es_url: str, documents: list[dict[str, Any]]) -> Iterator[DeepIndex]:
    """The same documents in an index clustered by ``neardup cluster``."""
    name = _load(es, documents)
    try:
        summary = cluster(es_url, name)
        assert summary["failed"] == 0 and summary["clusters"] == COPIES   # groups of more than one
        es.indices.refresh(index=name)
        yield DeepIndex(name, [{"_index": name, "_id": doc["id"], "_source": doc} for doc in documents])
    finally:
        delete_index(es, name)


def test_pushed_down_pages_are_complete_at_any_depth(extending: ProxyThread, clustered: DeepIndex) -> None:
    """The engine collapses a clustered index itself, in groups, up to its result window: pages
    past what any window of hits holds are full."""
    expected = clustered.groups()
    for start, size in ((990, 20), (0, 1200), (1280, 20)):
        status, answer = post(extending.url + "/" + clustered.name, page_body(start, size))
        assert status == 200, answer
        assert answer["neardup"]["pushdown"] is True and answer["neardup"]["complete"] is True
        assert [hit["_id"] for hit in answer["hits"]["hits"]] == [group[0] for group in expected[start:start + size]]
