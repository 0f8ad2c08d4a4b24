"""The collapse path's per-search shortcuts give exactly what the plain way gives.

* :class:`proxy.grouping.collapse.WindowHits`: a window's fingerprints are read once (a tail round reads
  only its new hits) and :func:`proxy.grouping.similarity.annotate` reuses grouping's signatures;
* :func:`proxy.grouping.collapse.group`'s member lists, :func:`proxy.grouping.collapse.build_page`'s inlined
  ``fields`` and :meth:`proxy.handlers.search_plan.Window.add_round`'s inlined identity check;
* :func:`proxy.transport.jsonio.dumps` splicing raw ``_source`` values into orjson's output.
"""

from __future__ import annotations

import copy
import json
import random
from typing import Any

import msgspec
import numpy as np
import orjson
import pytest

from neardup.fingerprint import Fingerprinter, FingerprintParams
from neardup.proxy.grouping import collapse, similarity
from neardup.proxy.grouping.fingerprints import default_algorithms
from neardup.proxy.handlers.params import Settings
from neardup.proxy.handlers.search_plan import Window, _identity, annotate_page, finish, plan_search
from neardup.proxy.transport import jsonio, rawjson

ALGORITHMS = default_algorithms(FingerprintParams())
FP = Fingerprinter(FingerprintParams())
WORDS = ("oil price rise opec output quota crude barrel market trade bank rate cut "
         "wheat export grain tonnes shares company profit loss quarter dividend").split()


def _texts(count: int, seed: int) -> list[str]:
    """Stories with near-duplicates among them (some edited copies of earlier ones)."""
    rng = random.Random(seed)
    texts: list[str] = []
    for _ in range(count):
        if texts and rng.random() < 0.4:
            words = rng.choice(texts).split()
            words[rng.randrange(len(words))] = rng.choice(WORDS)
            texts.append(" ".join(words))
        else:
            texts.append(" ".join(rng.choice(WORDS) for _ in range(60)))
    return texts


def _response(count: int, seed: int, start: int = 0) -> bytes:
    """A compact search response with ``count`` hits (ids from ``start``), as Elasticsearch
    writes it; some hits have no or an unusable fingerprint."""
    rng = random.Random(seed)
    hits = []
    for k, text in enumerate(_texts(count, seed)):
        source: dict[str, Any] = {"title": f"story {start + k}", "body": text}
        roll = rng.random()
        if roll < 0.85:
            source["neardup"] = FP.fingerprint(text).to_source()
        elif roll < 0.9:
            source["neardup"] = {**FP.fingerprint(text).to_source(), "v": "0-stale"}
        hits.append({"_index": "i", "_id": str(start + k), "_score": round(10 - k / 7, 3), "_source": source})
    body = {"took": 2, "timed_out": False, "hits": {"total": {"value": 1000, "relation": "eq"},
                                                    "max_score": 10.0, "hits": hits}}
    return json.dumps(body, separators=(",", ":")).encode()


def _rounds(seed: int, sizes: list[int]) -> list[bytes]:
    out, start = [], 0
    for k, size in enumerate(sizes):
        out.append(_response(size, seed * 10 + k, start))
        start += size
    return out


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("mode", ["resemblance", "containment"])
def test_window_reads_once_and_agrees_with_a_plain_list(seed: int, mode: str) -> None:
    """Grouping a WindowHits over several rounds, then annotating the page, gives the groups,
    counts and similarities of a plain list read from scratch every time."""
    threshold = 0.5
    fast, plain = collapse.WindowHits(), []
    for raw in _rounds(seed, [13, 13, 26]):
        fast += rawjson.loads_search(raw)["hits"]["hits"]
        plain += rawjson.loads_search(raw)["hits"]["hits"]
        got = collapse.group(fast, "_source", threshold, mode, ALGORITHMS)   # type: ignore[arg-type]
        expected = collapse.group(plain, "_source", threshold, mode, ALGORITHMS)  # type: ignore[arg-type]
        assert got == expected
        assert collapse.window_signatures(fast, "_source", ALGORITHMS.read) is not None
        assert collapse.window_signatures(plain, "_source", ALGORITHMS.read) is None
    groups = got[0]
    assert any(len(g) > 1 for g in groups)
    similarity.annotate(fast, groups[:20], "_source", mode, ALGORITHMS.read)
    similarity.annotate(plain, groups[:20], "_source", mode, ALGORITHMS.read)
    assert jsonio.dumps(list(fast)) == jsonio.dumps(plain)
    assert any(similarity.SIMILARITY_FIELD in hit.get("fields", {}) for hit in plain)


def test_window_read_state_is_not_reused_for_other_hits_channel_or_reader() -> None:
    hits = collapse.WindowHits(rawjson.loads_search(_response(20, 3))["hits"]["hits"])
    collapse.group(hits, "_source", 0.5, "resemblance", ALGORITHMS)
    state = hits.read_state
    assert state is not None and collapse.window_signatures(hits, "_source", ALGORITHMS.read) is not None
    # Another reader or channel: not what grouping read.
    other = default_algorithms(FingerprintParams())
    assert collapse.window_signatures(hits, "_source", other.read) is None
    assert collapse.window_signatures(hits, "fields", ALGORITHMS.read) is None
    # A hit replaced (not appended): read from scratch, and the annotations see the new hit.
    replacement = copy.deepcopy(rawjson.loads_search(_response(20, 4))["hits"]["hits"][5])
    hits[5] = replacement
    assert collapse.window_signatures(hits, "_source", ALGORITHMS.read) is None
    plain = list(hits)
    assert collapse.group(hits, "_source", 0.5, "resemblance", ALGORITHMS) == \
        collapse.group(plain, "_source", 0.5, "resemblance", ALGORITHMS)
    assert hits.read_state is not state and hits.read_state.hits[5] is replacement  # type: ignore[union-attr]


def test_a_bad_hit_in_a_later_round_raises_and_leaves_the_state_as_it_was() -> None:
    hits = collapse.WindowHits(rawjson.loads_search(_response(10, 5))["hits"]["hits"])
    collapse.group(hits, "_source", 0.5, "resemblance", ALGORITHMS)
    before = list(hits.read_state.stored)  # type: ignore[union-attr]
    hits.append({"_id": "x", "fields": ["not an object"]})
    with pytest.raises(collapse.CollapseError, match="hit 10 has a fields"):
        collapse.group(hits, "_source", 0.5, "resemblance", ALGORITHMS)
    assert hits.read_state.stored == before  # type: ignore[union-attr]
    hits.append("not a hit")
    with pytest.raises(collapse.CollapseError, match="hit 10"):
        collapse.group(hits, "_source", 0.5, "resemblance", ALGORITHMS)


def _reference_groups(n: int, fingerprinted: np.ndarray, local: np.ndarray) -> list[list[int]]:
    """The member lists as grouping built them before (a dict in order of first members)."""
    labels = np.arange(n, dtype=np.int64)
    labels[fingerprinted] = fingerprinted[local]
    members: dict[int, list[int]] = {}
    for position, label in enumerate(labels.tolist()):
        members.setdefault(label, []).append(position)
    return list(members.values())


@pytest.mark.parametrize("seed", range(30))
def test_member_lists_match_the_reference(seed: int) -> None:
    """Random windows, random fingerprinted subsets, random components (labels = smallest member)."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 120))
    fingerprinted = np.sort(rng.choice(n, size=int(rng.integers(2, n + 1)), replace=False)).astype(np.int64)
    m = len(fingerprinted)
    pairs = rng.integers(0, m, size=(int(rng.integers(1, 2 * m)), 2))
    pairs = pairs[pairs[:, 0] != pairs[:, 1]]
    if not len(pairs):
        pairs = np.array([[0, 1]])
    i, j = np.minimum(pairs[:, 0], pairs[:, 1]), np.maximum(pairs[:, 0], pairs[:, 1])
    from neardup.fingerprint import group_labels

    local = group_labels(m, i, j)
    signatures = np.zeros((m, 4), dtype=np.uint64)
    algorithms = collapse.Algorithms(
        read=lambda stored: (fingerprinted, signatures, np.ones(m, dtype=np.int64)),
        similar_pairs=lambda s, c, t, mode: (i, j, np.ones(len(i))),
        group_labels=group_labels)
    hits = [{"_id": str(k)} for k in range(n)]
    groups, count = collapse.group(hits, "_source", 0.8, "resemblance", algorithms)
    assert count == m
    assert groups == _reference_groups(n, fingerprinted, np.asarray(local))


def _reference_page(hits: list[dict], groups: list[list[int]], start: int, size: int, as_int: bool) -> list[dict]:
    page = []
    for members in groups[start:start + size]:
        top = hits[members[0]]
        others = [hits[m] for m in members[1:]]
        total: Any = len(others) if as_int else {"value": len(others), "relation": "eq"}
        collapse.set_field(top, collapse.GROUP_FIELD, [collapse.group_key(top)])
        inner = top.get("inner_hits")
        inner = dict(inner) if isinstance(inner, dict) else {}
        scores = [h.get("_score") for h in others if isinstance(h.get("_score"), (int, float))]
        inner["neardup"] = {"hits": {"total": total, "max_score": max(scores) if scores else None, "hits": others}}
        top["inner_hits"] = inner
        page.append(top)
    return page


@pytest.mark.parametrize("as_int", [False, True])
def test_page_matches_the_reference(as_int: bool) -> None:
    hits: list[dict] = [
        {"_index": "i", "_id": "a", "_score": 3.0, "fields": {"x": [1]}},
        {"_index": "i", "_id": "b", "_score": None},
        {"_id": "c", "_score": 2, "inner_hits": {"other": {"hits": {}}}},
        {"_index": "j", "_score": 1.5, "fields": "odd"},
        {"_index": "i", "_id": "e", "_score": 1.0, "inner_hits": [1]},
        {"_index": "i", "_id": "f"},
    ]
    groups = [[0, 1, 3], [2], [4, 5]]
    for start, size in ((0, 3), (1, 1), (0, 10), (3, 2)):
        ours, theirs = copy.deepcopy(hits), copy.deepcopy(hits)
        page = collapse.build_page(ours, groups, start, size, as_int)
        assert jsonio.dumps(page.hits) == jsonio.dumps(_reference_page(theirs, groups, start, size, as_int))
        assert ours == theirs


def test_add_round_drops_repeats_as_the_identity_says() -> None:
    """Hits of every odd shape: kept or dropped exactly as by ``_identity``."""
    odd: list[Any] = [
        {"_index": "i", "_id": "1"}, {"_index": "i", "_id": "1"}, {"_index": "i", "_id": "1", "_routing": "r"},
        {"_id": "1"}, {"_id": "1"}, {"_index": 5, "_id": "1"}, {"_index": 5, "_id": "1"},
        {"_index": "i", "_id": 1}, {"_index": "i", "_id": 1}, {"_index": "i", "_id": "2", "_routing": 3},
        {"_index": "i", "_id": "2", "_routing": 3}, {"_index": None, "_id": "3"}, {"_id": "3"},
        {"_index": "i", "_id": "1", "_routing": None}, "text", 7, ["list"],
    ]
    settings = Settings(True, 0.8, "resemblance")
    plan = plan_search({"size": 5}, [], settings, 100)
    window = Window(plan)  # type: ignore[arg-type]
    window.add_round({"hits": {"hits": odd}}, 50)
    # Dropped: 1 (same as 0), 4 (as 3), 12 (as 11: no _index is None), 13 (as 0: no _routing is None);
    # the hits without a usable identity (5-10: a non-string _index, _id or _routing) all stay.
    expected = [odd[k] for k in (0, 2, 3, 5, 6, 7, 8, 9, 10, 11, 14, 15, 16)]
    assert all(_identity(odd[k]) is None for k in range(5, 11))
    assert window.hits == expected and all(a is b for a, b in zip(window.hits, expected))


def test_window_path_end_to_end_is_unchanged_by_the_read_state() -> None:
    """finish() of a WindowHits window and of the same window as a plain list: same bytes."""
    settings = Settings(True, 0.5, "resemblance")
    outputs = []
    for plain in (False, True):
        plan = plan_search({"size": 8}, [], settings, 100)
        window = Window(plan)  # type: ignore[arg-type]
        if plain:
            window.hits = []
        for raw in _rounds(7, [9, 9]):
            window.add_round(rawjson.loads_search(raw), 9)
            groups, fingerprinted = collapse.group(window.hits, "_source", 0.5, "resemblance", ALGORITHMS)
        annotate_page(window, groups, ALGORITHMS.read)
        outputs.append(jsonio.dumps(finish(window, groups, fingerprinted)))
    assert outputs[0] == outputs[1]


# -- jsonio.dumps: raw values spliced into orjson's output ------------------------------------
def _raw(text: str) -> msgspec.Raw:
    return msgspec.json.Decoder(dict[str, msgspec.Raw]).decode(('{"x":' + text + "}").encode())["x"]


SOURCES = ['{"a":1.10,"b":1E+2,"c":"caf\\u00e9 \\u0000 nul","big":123456789012345678901234567890}',
           '{ "spaced" : [ 1 , 2 ] }', "[]", '"a string"', "null", '{"neardup":{"v":"x"}}']


def test_spliced_output_is_byte_for_byte_the_fragment_output() -> None:
    for raw in _rounds(2, [30]):
        value = rawjson.loads_search(raw)
        assert jsonio.dumps(value) == orjson.dumps(value, default=jsonio._raw_fragment) == raw
    value = {"s": "nul \x00 and \u2028", "k\x00": [_raw(s) for s in SOURCES], "top": _raw(SOURCES[0]),
             "nested": {"deep": [[_raw(SOURCES[1])]]}, "n": None, "f": 1.5}
    assert jsonio.dumps(value) == orjson.dumps(value, default=jsonio._raw_fragment)
    assert json.loads(jsonio.dumps(value))["k\x00"][2] == []
    assert jsonio.dumps(_raw(SOURCES[1])) == SOURCES[1].encode()
    assert jsonio.dumps({"no": "raw"}) == b'{"no":"raw"}'


def test_spliced_output_falls_back_like_before() -> None:
    """What orjson refuses (an integer beyond 64 bits outside a raw value, an unknown type)
    still goes to the standard library or raises TypeError, as before."""
    value = {"big": 2**70, "src": _raw(SOURCES[0])}
    assert json.loads(jsonio.dumps(value)) == {"big": 2**70, "src": json.loads(SOURCES[0])}
    with pytest.raises(TypeError):
        jsonio.dumps({"x": object(), "src": _raw("1")})
    assert jsonio.dumps({"src": _raw(SOURCES[1])}, pretty=True) == \
        b'{\n  "src" : {\n    "spaced" : [\n      1,\n      2\n    ]\n  }\n}\n'
