"""End to end on Reuters-21578 enriched by the real indexer, the official client on the proxy.

Known near-duplicates are found from the stored fingerprints and confirmed with the exact
resemblance of the shingle sets (the same text the indexer fingerprinted: title and body).
Assertions use pairs well inside (exact ≥ 0.9) or well outside (exact < 0.7) the 0.8 threshold,
leaving room for the MinHash estimate.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from neardup.fingerprint import Fingerprint, Fingerprinter, FingerprintParams, exact_resemblance, similar_pairs
from neardup.upstream import ClusterInfo
from tests.test_proxy_support import msearch, pes, proxy, scan, search  # noqa: F401 - fixtures

pytestmark = [pytest.mark.es, pytest.mark.slow]

INSIDE, OUTSIDE = 0.9, 0.7


class Reuters:
    def __init__(self, es: Any, index: str, docs: list[dict[str, Any]]) -> None:
        self.index = index
        self.docs = {d["id"]: d for d in docs}
        self.fp = Fingerprinter(FingerprintParams())
        self._shingles: dict[str, np.ndarray] = {}
        ids, sigs, counts = [], [], []
        for hit in scan(es, index=index, _source=["neardup"], size=2000):
            stored = hit["_source"].get("neardup")
            if stored:
                f = Fingerprint.from_source(stored)
                if f.shingle_count:
                    ids.append(hit["_id"]), sigs.append(f.signature), counts.append(f.shingle_count)
        self.ids = ids
        i, j, _ = similar_pairs(np.vstack(sigs), np.asarray(counts), INSIDE, "resemblance")
        self.candidates = [(ids[a], ids[b]) for a, b in zip(i.tolist(), j.tolist())]

    def shingles(self, doc_id: str) -> np.ndarray:
        if doc_id not in self._shingles:
            doc = self.docs[doc_id]
            text = "\n".join(t for t in (doc.get("title"), doc.get("body")) if isinstance(t, str))
            self._shingles[doc_id] = self.fp.shingles(self.fp.canonical_tokens(text))
        return self._shingles[doc_id]

    def exact(self, a: str, b: str) -> float:
        return exact_resemblance(self.shingles(a), self.shingles(b))


@pytest.fixture(scope="module")
def reuters(es: Any, reuters_index: str, reuters_docs: list[dict[str, Any]]) -> Iterator[Reuters]:
    yield Reuters(es, reuters_index, reuters_docs)


def members_of(top: dict) -> list[str]:
    return [top["_id"], *(h["_id"] for h in top["inner_hits"]["neardup"]["hits"]["hits"])]


def queries_with_known_duplicates(reuters: Reuters, count: int) -> list[tuple[str, str, str]]:
    """(query text, doc a, doc b): a's title as the query, b a confirmed near-duplicate of a."""
    chosen, titles = [], set()
    for a, b in reuters.candidates:
        title = reuters.docs[a]["title"]
        if len(title.split()) < 4 or title in titles or not reuters.docs[a]["body"]:
            continue
        if reuters.exact(a, b) >= INSIDE:
            chosen.append((title, a, b))
            titles.add(title)
        if len(chosen) == count:
            break
    return chosen


def test_reuters_holds_known_near_duplicates(reuters: Reuters) -> None:
    confirmed = [p for p in itertools.islice(reuters.candidates, 200) if reuters.exact(*p) >= INSIDE]
    assert len(confirmed) >= 50


def test_pages_of_real_queries_are_collapsed_as_exact_similarity_says(pes: Any, reuters: Reuters) -> None:
    checked_pairs = 0
    for text, a, b in queries_with_known_duplicates(reuters, 6):
        query = {"match": {"title": text}}
        first = search(pes, index=reuters.index, query=query, size=10)
        total = first["hits"]["total"]["value"]
        window = first["neardup"]["window"]
        tops = [h["_id"] for h in first["hits"]["hits"]]
        assert len(tops) == min(10, first["neardup"]["window_groups"])
        if first["neardup"]["complete"] and total >= 60:
            assert len(tops) == 10, "the page holds size distinct groups"
        groups = [members_of(h) for h in first["hits"]["hits"]]
        group_of = {doc: k for k, g in enumerate(groups) for doc in g}
        if a in group_of and b in group_of:
            assert group_of[a] == group_of[b], f"{a} and {b} (exact {reuters.exact(a, b):.2f}) not grouped"
            checked_pairs += 1
        for x, y in itertools.combinations(tops, 2):   # kept hits are not near-duplicates
            assert reuters.exact(x, y) < INSIDE, (x, y)
        for group in groups:    # each member is close to some other member (transitive groups)
            for doc in group[1:] if len(group) > 1 else []:
                assert max(reuters.exact(doc, other) for other in group if other != doc) >= OUTSIDE
        assert window >= len(sum(groups, []))
    assert checked_pairs >= 3


def test_five_pages_never_repeat_a_document_or_a_near_duplicate(pes: Any, reuters: Reuters) -> None:
    text, _, _ = queries_with_known_duplicates(reuters, 1)[0]
    query = {"bool": {"should": [{"match": {"title": text}}, {"match": {"body": text}}]}}
    seen: list[str] = []
    collapsed = 0
    for page in range(5):
        response = search(pes, index=reuters.index, query=query, from_=page * 10, size=10)
        assert len(response["hits"]["hits"]) == 10 and response["neardup"]["complete"]
        collapsed += response["neardup"]["collapsed"]
        shown = [doc for top in response["hits"]["hits"] for doc in members_of(top)]
        assert not set(shown) & set(seen), "a document appears on two pages"
        for top in response["hits"]["hits"]:
            for earlier in seen:
                assert reuters.exact(top["_id"], earlier) < INSIDE, (top["_id"], earlier)
        seen += shown
    assert collapsed > 0, "the query was chosen for its near-duplicates"


def test_msearch_on_reuters_equals_single_searches(pes: Any, reuters: Reuters) -> None:
    searches = [{"query": {"match": {"title": t}}, "size": 10, "_source": ["title"]}
                for t, _, _ in queries_with_known_duplicates(reuters, 3)]
    multi = msearch(pes, list(itertools.chain.from_iterable(
        ({"index": reuters.index}, s) for s in searches)))
    for single, item in zip(searches, multi["responses"]):
        alone = search(pes, index=reuters.index, **single)
        assert [members_of(h) for h in item["hits"]["hits"]] == [members_of(h) for h in alone["hits"]["hits"]]


# -- an idle worker fetches a large first window as two concurrent halves -----------------------
def _fetches(es: Any, index: str) -> int:
    """Fetch phases run on the index (a ``_count`` the proxy may send has none)."""
    return es.indices.stats(index=index, metric="search")["_all"]["primaries"]["search"]["fetch_total"]


def _without_took(response: dict) -> dict:
    return {k: v for k, v in response.items() if k != "took"}


def test_a_split_first_window_gives_the_same_pages_as_one_request(
        es: Any, es_url: str, engine: ClusterInfo, pes: Any, reuters: Reuters) -> None:
    """``proxy.split_fetch_min_hits`` (default 40): the halves are two upstream searches (more
    fetch phases in Elasticsearch's own search statistics), and the page, groups, totals and aggregations are
    exactly those of the same search fetched in one request."""
    from tests.test_proxy_support import ProxyThread, make_config

    texts = [t for t, _, _ in queries_with_known_duplicates(reuters, 3)]
    searches = [dict(query={"match": {"body": t}}, size=100, aggs={"longest": {"max": {"field": "neardup.n"}}})
                for t in texts] + [dict(query={"match": {"body": texts[0]}}, from_=30, size=30),
                                   dict(query={"match": {"title": texts[1]}}, size=40, source=["title"])]
    with ProxyThread(make_config(es_url, proxy={"split_fetch_min_hits": 0}), engine=engine) as whole:
        one = whole.client()
        try:
            for request in searches:
                before = _fetches(es, reuters.index)
                split = search(pes, index=reuters.index, **request)
                split_fetches = _fetches(es, reuters.index) - before
                before = _fetches(es, reuters.index)
                single = search(one, index=reuters.index, **request)
                single_fetches = _fetches(es, reuters.index) - before
                # Fetch phases count per shard that holds page hits: the halves add at least one.
                assert split_fetches > single_fetches, "the first window came as two halves"
                assert _without_took(split) == _without_took(single)
                assert split["neardup"]["groups"] == len(split["hits"]["hits"]) > 0
        finally:
            one.close()


def test_small_windows_are_never_split(es: Any, es_url: str, engine: ClusterInfo, pes: Any,
                                      reuters: Reuters) -> None:
    text = queries_with_known_duplicates(reuters, 1)[0][0]
    from tests.test_proxy_support import ProxyThread, make_config

    query = {"match": {"body": text}}
    with ProxyThread(make_config(es_url, proxy={"split_fetch_min_hits": 0}), engine=engine) as whole:
        one = whole.client()
        try:
            for size in (10, 30):   # windows of 13 and 36 hits: below 40
                before = _fetches(es, reuters.index)
                page = search(pes, index=reuters.index, query=query, size=size)
                split_fetches = _fetches(es, reuters.index) - before
                before = _fetches(es, reuters.index)
                search(one, index=reuters.index, query=query, size=size)
                assert split_fetches == _fetches(es, reuters.index) - before and page["neardup"]["complete"]
        finally:
            one.close()
