"""``neardup copies``: copied fragments found with the pseudo-matrix Bloom filter.

Pure part (:mod:`fingerprint.copies`): on random shingle sets with planted overlaps the screen
returns exactly the ordered pairs a brute-force comparison of all pairs finds, with the shared
counts, in both directions where both hold; frequent shingles are left out of everything.

Against the real Elasticsearch: Reuters stories chosen to be unrelated (no pair shares 2 % of
either's shingles) plus documents that paste 5 %, 10 % and 50 % of a source into another story,
and five stories carrying the same boilerplate paragraph. ``neardup copies`` must report every
planted pair as (copier, source) with the planted containment, exactly the pairs brute force
finds on the same shingle sets, and none among the unrelated stories; ``--max-df`` must drop the
boilerplate pairs and keep the planted ones. Bad input gets one clear message, no traceback.
"""

from __future__ import annotations

import itertools
import json
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from neardup.corpora import reuters_documents
from neardup.fingerprint import Fingerprinter
from neardup.fingerprint.bloom import BloomParams
from neardup.fingerprint.copies import build_filter, candidates, check_min_share, content_sets, ranked, verify
from tests.engine_support import bulk_load, create_index, index_document
from tests.plugins.corpora import run_neardup

BENCH = Path(__file__).resolve().parent.parent / "bench"
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(BENCH.parent))  # the checkout first: bench/fingerprint.py is a script

from engines import plant_fragment  # noqa: E402

SHARES = (0.05, 0.10, 0.50)
BOILERPLATE = ("This report is distributed by the newswire syndicate for subscribers only. Reproduction, "
               "redistribution or retransmission of its contents in any form is prohibited without the prior "
               "written consent of the syndicate. The syndicate accepts no liability for errors, omissions or "
               "delays in the information, nor for actions taken in reliance on it; readers should verify figures "
               "with the companies and agencies named before trading.")


# ---- brute force ------------------------------------------------------------------------------

def brute_force_pairs(sets: list[set[int]], min_share: float, max_df: int = 0,
                      min_shared: int = 1) -> dict[tuple[int, int], int]:
    """{(copier, source): shared} for every ordered pair with |S∩C| ≥ min_share·|S| and ≥ min_shared,
    all pairs tried, after leaving out the elements found in more than ``max_df`` sets (0: none)."""
    if max_df:
        frequency: dict[int, int] = {}
        for s in sets:
            for x in s:
                frequency[x] = frequency.get(x, 0) + 1
        sets = [{x for x in s if frequency[x] <= max_df} for s in sets]
    found = {}
    for source, copier in itertools.permutations(range(len(sets)), 2):
        s, c = sets[source], sets[copier]
        shared = len(s & c)
        if s and shared >= max(1, min_shared) and shared >= min_share * len(s) - 1e-9:
            found[(copier, source)] = shared
    return found


def screened_pairs(sets: list[np.ndarray], min_share: float, max_df: int, params: BloomParams,
                   min_shared: int = 1) -> dict[tuple[int, int], int]:
    content, _ = content_sets(sets, max_df)
    bloom = build_filter(content, params)
    pairs = []
    for source in range(len(content)):
        pairs += verify(content, source, candidates(bloom, content, source, min_share), min_share, min_shared)
    return {(p.copier, p.source): p.shared for p in ranked(pairs)}


# ---- pure ---------------------------------------------------------------------------------------

def random_corpus(rng: np.random.Generator, n: int) -> list[np.ndarray]:
    """Random sets, some holding a random share of another's elements, some sharing a common block."""
    sets = [rng.integers(0, 2**64 - 1, int(rng.integers(1, 400)), dtype=np.uint64, endpoint=True) for _ in range(n)]
    common = rng.integers(0, 2**64 - 1, 30, dtype=np.uint64, endpoint=True)
    for d in range(n):
        kind = rng.integers(4)
        if kind == 0:
            source = sets[int(rng.integers(n))]
            take = rng.choice(len(source), max(1, int(len(source) * rng.uniform(0.01, 0.8))), replace=False)
            sets[d] = np.concatenate([sets[d], source[take]])
        elif kind == 1:
            sets[d] = np.concatenate([sets[d], common])
    return sets


@pytest.mark.parametrize("seed, min_share, max_df, min_shared, params", [
    (1, 0.05, 0, 1, BloomParams(row_bits=4096, hashes=4, target_fp=0.05)),
    (2, 0.10, 0, 1, BloomParams()),
    (3, 0.05, 10, 1, BloomParams(row_bits=8192, hashes=7, target_fp=0.01)),
    (4, 0.50, 5, 1, BloomParams(row_bits=2048, hashes=3, target_fp=0.1)),
    (5, 0.05, 0, 8, BloomParams()),
])
def test_screen_finds_exactly_the_pairs_brute_force_finds(seed, min_share, max_df, min_shared, params):
    rng = np.random.default_rng(seed)
    sets = random_corpus(rng, 120)
    expected = brute_force_pairs([set(s.tolist()) for s in sets], min_share, max_df, min_shared)
    assert len(expected) > 10  # the corpus has pairs to find
    if min_shared > 1:  # and the floor matters: some pairs hold the share with fewer elements
        assert len(brute_force_pairs([set(s.tolist()) for s in sets], min_share, max_df)) > len(expected)
    assert screened_pairs(sets, min_share, max_df, params, min_shared) == expected


def test_a_pair_holding_each_other_is_reported_both_ways_with_both_shares():
    a = np.arange(100, dtype=np.uint64)
    b = np.arange(60, 260, dtype=np.uint64)      # shares 40 with a: 0.4 of a, 0.2 of b
    sets, _ = content_sets([a, b, np.arange(1000, 1050, dtype=np.uint64)], 0)
    bloom = build_filter(sets, BloomParams())
    pairs = {(p.copier, p.source): p for s in range(3) for p in verify(sets, s, candidates(bloom, sets, s, 0.1), 0.1)}
    assert set(pairs) == {(1, 0), (0, 1)}
    assert (pairs[(1, 0)].containment, pairs[(1, 0)].reverse) == (0.4, 0.2)
    assert (pairs[(0, 1)].containment, pairs[(0, 1)].reverse) == (0.2, 0.4)
    assert {(p.copier, p.source) for s in range(3) for p in verify(sets, s, candidates(bloom, sets, s, 0.3), 0.3)} \
        == {(1, 0)}


def test_content_sets_leave_out_shingles_in_more_than_max_df_sets():
    sets = [np.array([1, 2, 3], dtype=np.uint64), np.array([3, 2, 9], dtype=np.uint64),
            np.array([3, 7], dtype=np.uint64)]
    kept, left_out = content_sets(sets, 2)
    assert [k.tolist() for k in kept] == [[1, 2], [2, 9], [7]] and left_out == 1
    kept, left_out = content_sets(sets, 0)
    assert [k.tolist() for k in kept] == [[1, 2, 3], [2, 3, 9], [3, 7]] and left_out == 0


@pytest.mark.parametrize("bad", [0, 0.0, -0.1, 1.01, float("nan"), True, "0.1"])
def test_min_share_must_be_in_the_unit_interval(bad):
    with pytest.raises(ValueError, match="min_share"):
        check_min_share(bad)


# ---- against Elasticsearch ------------------------------------------------------------------

def story_text(doc: dict[str, Any]) -> str:
    return doc["title"] + "\n" + doc["body"]


def unrelated_stories(fp: Fingerprinter, count: int) -> list[tuple[dict[str, Any], set[int]]]:
    """Reuters stories of 120+ words, taken in order when they share < 2 % of their shingles
    (either way) with every story taken before."""
    chosen: list[tuple[dict[str, Any], set[int]]] = []
    for doc in reuters_documents(with_body_only=True):
        if len(doc["body"].split()) < 120:
            continue
        shingles = set(fp.shingles(fp.canonical_tokens(story_text(doc))).tolist())
        if all(len(shingles & other) < 0.02 * min(len(shingles), len(other)) for _, other in chosen):
            chosen.append((doc, shingles))
            if len(chosen) == count:
                return chosen
    raise AssertionError("not enough unrelated stories")


@pytest.fixture(scope="module")
def planted(es) -> Iterator[dict[str, Any]]:
    """An index of 40 unrelated stories, 3 plants (a fragment of a source pasted into another
    story) and 5 stories carrying the same boilerplate paragraph."""
    fp = Fingerprinter()
    stories = unrelated_stories(fp, 48)
    corpus = [{"id": f"r{d['id']}", "title": d["title"], "body": d["body"]} for d, _ in stories[:40]]
    # sources of middling length, pasted into the longest of the other stories: a 5 % fragment is
    # then less than 5 % of its copier, so only one direction of that pair holds
    sources = sorted(range(40), key=lambda k: len(stories[k][1]))[20:23]
    others = sorted(stories[40:], key=lambda item: -len(item[1]))
    rng = np.random.default_rng(7)
    plants = []
    for share, source, (host, _) in zip(SHARES, sources, others[:3]):
        body, words = plant_fragment(fp, story_text(corpus[source]), host["body"], share, rng)
        plant_id = f"copy{int(share * 100)}-of-{corpus[source]['id']}"
        corpus.append({"id": plant_id, "title": host["title"], "body": body})
        plants.append({"copier": plant_id, "source": corpus[source]["id"], "share": share, "words": words})
    for host, _ in others[3:]:
        corpus.append({"id": f"boiler-{host['id']}", "title": host["title"], "body": host["body"] + "\n" + BOILERPLATE})
    name = f"copies-test-{uuid.uuid4().hex[:10]}"
    create_index(es, name, settings={"number_of_shards": 2, "number_of_replicas": 0})
    try:
        bulk_load(es, name, corpus)
        yield {"index": name, "corpus": corpus, "plants": plants,
               "sets": [set(fp.shingles(fp.canonical_tokens(story_text(d))).tolist()) for d in corpus]}
    finally:
        es.indices.delete(index=name, ignore_unavailable=True)


def expected_pairs(planted: dict[str, Any], min_share: float, max_df: int,
                   min_shared: int = 5) -> dict[tuple[str, str], int]:
    ids = [d["id"] for d in planted["corpus"]]
    return {(ids[c], ids[s]): shared
            for (c, s), shared in brute_force_pairs(planted["sets"], min_share, max_df, min_shared).items()}


def run_copies(es_url: str, *args: str, **env: str) -> tuple[int, str, str]:
    result = run_neardup(["copies", *args], es_url, timeout=300, **env)
    stderr = result.stderr.decode()
    assert "Traceback" not in stderr
    return result.returncode, result.stdout.decode(), stderr


@pytest.mark.es
def test_copies_finds_every_planted_fragment_with_its_direction_and_nothing_among_unrelated_stories(es_url, planted):
    status, out, err = run_copies(es_url, "--index", planted["index"], "--json")
    assert status == 0, err
    lines = [json.loads(line) for line in out.splitlines()]
    summary = lines[-1]["summary"]
    found = {(p["copier"], p["source"]): p for p in lines[:-1]}
    # exactly the pairs an all-pairs comparison of the same shingle sets finds (max_df 100 > corpus)
    expected = expected_pairs(planted, 0.05, 0)
    assert {k: p["shared"] for k, p in found.items()} == expected
    for plant in planted["plants"]:
        pair = found[(plant["copier"], plant["source"])]
        assert plant["share"] <= pair["containment"] <= plant["share"] + 0.03, plant
        assert pair["containment"] == pytest.approx(pair["shared"] / pair["source_shingles"], abs=1e-4)
        assert pair["reverse"] == pytest.approx(pair["shared"] / pair["copier_shingles"], abs=1e-4)
    # the 5 % fragment is a smaller share of its (longer) copier: only the right direction is reported
    assert (planted["plants"][0]["source"], planted["plants"][0]["copier"]) not in found
    # no pair among the unrelated stories; the boilerplate stories pair with each other
    unrelated = {d["id"] for d in planted["corpus"][:40]} | {p["copier"] for p in planted["plants"]}
    plant_pairs = {(p["copier"], p["source"]) for p in planted["plants"]} | \
                  {(p["source"], p["copier"]) for p in planted["plants"]}
    assert not [k for k in found if set(k) <= unrelated and k not in plant_pairs]
    boiler = [k for k in found if k[0].startswith("boiler-")]
    assert len(boiler) == 20 and all(k[1].startswith("boiler-") for k in boiler)
    # listed highest containment first; the summary counts what was done
    shares = [p["containment"] for p in lines[:-1]]
    assert shares == sorted(shares, reverse=True)
    assert summary["documents"] == summary["screened"] == len(planted["corpus"]) == 48
    assert summary["pairs"] == summary["listed"] == len(expected)
    assert summary["candidates"] >= summary["pairs"] and summary["rows"] >= 1
    assert summary["rows_one_filter_per_document"] == 48 and summary["frequent_shingles_left_out"] == 0


@pytest.mark.es
def test_max_df_drops_boilerplate_pairs_and_min_share_raises_the_bar(es_url, engine, planted):
    status, out, err = run_copies(es_url, "--index", planted["index"], "--max-df", "4", "--min-share", "0.08",
                                  "--min-shared", "1")
    assert status == 0, err
    table, summary = out.split("\nneardup copies ", 1)
    rows = [line.split() for line in table.splitlines()[1:]]
    found = {(r[0], r[1]): (float(r[2]), int(r[3].replace(",", ""))) for r in rows}
    expected = expected_pairs(planted, 0.08, 4, min_shared=1)
    assert {k: shared for k, (_, shared) in found.items()} == expected
    assert not any(k[0].startswith("boiler-") for k in found)
    plants = {(p["copier"], p["source"]): p["share"] for p in planted["plants"]}
    assert [plants[k] for k in found if k in plants] == [0.5, 0.1]   # the 5 % plant is below 0.08
    assert "found in more than 4 documents left out" in summary and "verified pairs: " in summary
    assert f"\n  upstream: {engine.engine} {engine.version} at {es_url.rstrip('/')}\n" in summary
    # --limit lists the top pairs only: the 50 % plant holds the highest share of its source
    status, out, _ = run_copies(es_url, "--index", planted["index"], "--limit", "1", "--fields", "title,body")
    sizes = {d["id"]: len(s) for d, s in zip(planted["corpus"], planted["sets"])}
    everything = expected_pairs(planted, 0.05, 0)
    top = max(everything, key=lambda k: (everything[k] / sizes[k[1]], everything[k]))
    assert status == 0 and tuple(out.splitlines()[1].split()[:2]) == top
    assert "more pairs (--limit 1)" in out


@pytest.mark.es
def test_bad_input_gets_one_clear_message(es, es_url, planted):
    missing = f"copies-missing-{uuid.uuid4().hex[:8]}"
    assert run_copies(es_url, "--index", missing)[0::2] == (3, f"neardup: no such index: {missing} (at {es_url})\n")
    status, _, err = run_copies(es_url, "--index", planted["index"], "--field", "headline")
    assert status == 3 and f"none of the 48 documents of {planted['index']} holds text in the fields headline" in err
    for bad in ("0", "1.5", "abc", "-0.1"):
        status, _, err = run_copies(es_url, "--index", planted["index"], "--min-share", bad)
        assert status == 2 and "--min-share" in err and "must be a number greater than 0 and at most 1" in err
    status, _, err = run_copies(es_url, "--index", planted["index"], "--max-df", "-1")
    assert status == 2 and "--max-df" in err
    status, _, err = run_copies(es_url, "--index", planted["index"], "--min-shared", "0")
    assert status == 2 and "--min-shared" in err and "must be 1 or more" in err
    status, _, err = run_copies(es_url, "--index", planted["index"], NEARDUP_COPIES__ROW_BITS="100")
    assert status == 2 and "copies.row_bits = 100" in err
    empty = f"copies-empty-{uuid.uuid4().hex[:8]}"
    create_index(es, empty)
    try:
        assert run_copies(es_url, "--index", empty)[0::2] == (3, f"neardup: {empty} holds no documents\n")
        index_document(es, empty, "1", {"title": 42, "body": {"x": 1}}, refresh=True)
        status, _, err = run_copies(es_url, "--index", empty)
        assert status == 3 and "holds text in the fields title, body (non_string: 1)" in err
    finally:
        es.indices.delete(index=empty, ignore_unavailable=True)


@pytest.mark.es
def test_a_pattern_over_several_indices_names_documents_by_index_and_id(es, es_url, planted):
    prefix = f"copies-multi-{uuid.uuid4().hex[:8]}"
    source, host = planted["corpus"][0], planted["corpus"][1]
    try:
        bulk_load(es, f"{prefix}-a", [source])
        bulk_load(es, f"{prefix}-b", [{"id": source["id"], "title": host["title"],
                                       "body": host["body"] + "\n" + story_text(source)}])
        status, out, err = run_copies(es_url, "--index", f"{prefix}-*", "--json")
        assert status == 0, err
        pairs = [json.loads(line) for line in out.splitlines()[:-1]]
        assert (pairs[0]["copier"], pairs[0]["source"]) == (f"{prefix}-b/{source['id']}", f"{prefix}-a/{source['id']}")
        assert pairs[0]["containment"] == 1.0
    finally:
        es.indices.delete(index=f"{prefix}-a,{prefix}-b", ignore_unavailable=True)
