"""Through a real proxy: pages written from the upstream's bytes answer as decoded pages do.

Two proxies in front of the same cluster, one writing the usual pages from the upstream's
bytes (``proxy.splice_pages``, the default) and one decoding every page: the same searches get
the same answers (keys in the same order, the same values; ``took`` aside), compressed or not,
and the first proxy did write most of them from the bytes.
"""

from __future__ import annotations

import gzip
import json
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from neardup.proxy.handlers import collapsed_search
from tests.test_proxy_hitscan_compiled import compiled
from tests.test_proxy_support import FamilyIndex, ProxyThread, family_index, make_config  # noqa: F401 - fixtures

pytestmark = pytest.mark.es

SEARCHES: list[tuple[str, dict[str, Any]]] = [
    ("", {"sort": ["rank"], "size": 5}),
    ("", {"query": {"match": {"body": "cocoa"}}, "size": 10}),
    ("neardup_threshold=0.5", {"query": {"match": {"body": "the"}}, "size": 7, "from": 2}),
    ("neardup_mode=containment", {"sort": ["rank"], "size": 6}),
    ("rest_total_hits_as_int=true", {"sort": ["rank"], "size": 4}),
    ("", {"query": {"match": {"body": "said"}}, "size": 3, "_source": True, "version": True,
          "seq_no_primary_term": True, "explain": True}),
    ("", {"query": {"match": {"body": "said"}}, "size": 5, "highlight": {"fields": {"body": {}}},
          "aggs": {"ranks": {"max": {"field": "rank"}}}}),
    ("track_scores=true", {"sort": [{"rank": "desc"}], "size": 5, "track_total_hits": 7}),
    ("size=3&from=1", {}),
    ("", {"sort": ["rank"], "size": 40}),   # more groups than the index holds: a short last page
]


@pytest.fixture(scope="module")
def proxies(es_url: str) -> Iterator[tuple[ProxyThread, ProxyThread]]:
    with ProxyThread(make_config(es_url)) as spliced, \
            ProxyThread(make_config(es_url, proxy={"splice_pages": False})) as decoded:
        yield spliced, decoded


def _post(url: str, body: dict[str, Any], compressed: bool) -> tuple[dict[str, str], bytes]:
    headers = {"Content-Type": "application/json", "Accept-Encoding": "gzip" if compressed else "identity"}
    request = urllib.request.Request(url, json.dumps(body).encode(), headers, method="POST")
    with urllib.request.urlopen(request, timeout=60) as answer:
        raw = answer.read()
        head = {name.lower(): value for name, value in answer.headers.items()}
    if head.get("content-encoding") == "gzip":
        raw = gzip.decompress(raw)
    return head, raw


def _ordered(raw: bytes) -> Any:
    value = json.loads(raw, object_pairs_hook=list)
    return [(key, item) for key, item in value if key != "took"]


def test_spliced_and_decoded_pages_answer_alike(proxies: tuple[ProxyThread, ProxyThread], family_index: FamilyIndex,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    compiled()
    written: list[bool] = []
    answer = collapsed_search._spliced_answer

    def counted(*args: Any) -> Any:
        response = answer(*args)
        written.append(response is not None)
        return response

    monkeypatch.setattr(collapsed_search, "_spliced_answer", counted)
    spliced, decoded = proxies
    for query, body in SEARCHES:
        for compressed in (False, True):
            path = f"/{family_index.name}/_search" + (f"?{query}" if query else "")
            head, mine = _post(spliced.url + path, body, compressed)
            _, theirs = _post(decoded.url + path, body, compressed)
            assert "neardup" in json.loads(mine), (query, body)
            assert _ordered(mine) == _ordered(theirs), (query, body)
            assert head.get("content-encoding", "identity") == ("gzip" if compressed else "identity")
            assert head.get("content-type", "").startswith("application/json")
    assert sum(written) >= len(SEARCHES), written   # most were written from the bytes


def test_a_page_the_first_window_does_not_fill_is_decoded(proxies: tuple[ProxyThread, ProxyThread],
                                                          family_index: FamilyIndex) -> None:
    spliced, decoded = proxies
    body = {"sort": ["rank"], "size": 10}
    path = f"/{family_index.name}/_search?neardup_threshold=0.2"   # families fold: another round is needed
    _, mine = _post(spliced.url + path, body, False)
    _, theirs = _post(decoded.url + path, body, False)
    assert _ordered(mine) == _ordered(theirs)
    assert json.loads(mine)["neardup"]["window"] > 11
