"""Small, fast checks of the evaluation's own ground truth, metrics and baselines (bench/quality)."""

from __future__ import annotations

import itertools
import sys
from math import comb
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

from quality.edits import EDIT_KINDS, edited_copies  # noqa: E402
from quality.methods import fess_signatures, fess_token_minhashes, hamming_pairs, simhash64  # noqa: E402
from quality.metrics import adjusted_rand_index, band_probability, score_pairs, two_band_probability, wilson_interval  # noqa: E402
from quality.pairs import connected_components, pair_keys, pairs_sharing_a_value, pairs_within_groups, split_keys  # noqa: E402
from quality.truth import brute_force_truth, exact_truth  # noqa: E402


def _random_sets(n: int, universe: int, seed: int) -> list[np.ndarray]:
    """Sets drawn from a small universe, with planted near-copies, so many pairs overlap."""
    rng = np.random.default_rng(seed)
    sets = []
    for d in range(n):
        if d % 5 == 4:                      # a near-copy of the previous set
            base = sets[-1]
            keep = base[rng.random(len(base)) > 0.1]
            extra = rng.integers(0, universe, size=3).astype(np.uint64)
            sets.append(np.unique(np.concatenate([keep, extra])))
        else:
            size = int(rng.integers(0, 40))
            sets.append(np.unique(rng.integers(0, universe, size=size).astype(np.uint64)))
    return sets


def test_inverted_index_truth_equals_brute_force_on_200_docs():
    sets = _random_sets(200, universe=3000, seed=7)
    expected = brute_force_truth(sets)
    # a tiny work budget forces many row blocks
    truth = exact_truth(sets, floor=0.0, max_work_per_block=500)
    got = {(int(a), int(b)): int(c) for a, b, c in zip(truth.i, truth.j, truth.intersection)}
    assert got == expected
    assert truth.pairs_sharing == len(expected)
    a, b = 3, 4
    inter = len(set(sets[a].tolist()) & set(sets[b].tolist()))
    union = len(set(sets[a].tolist()) | set(sets[b].tolist()))
    key = pair_keys(np.array([a]), np.array([b]), 200)
    assert truth.lookup(key)[0] == pytest.approx(inter / union)
    assert truth.lookup(key, "containment")[0] == pytest.approx(inter / min(len(sets[a]), len(sets[b])))


def test_truth_floor_keeps_exactly_the_pairs_above_it():
    sets = _random_sets(200, universe=3000, seed=11)
    full = exact_truth(sets, floor=0.0)
    kept = exact_truth(sets, floor=0.3)
    assert set(kept.keys.tolist()) == set(full.keys[full.containment >= 0.3].tolist())
    for t in (0.3, 0.5, 0.8):
        for mode in ("resemblance", "containment"):
            assert np.array_equal(kept.pairs_at(t, mode), full.pairs_at(t, mode))
    with pytest.raises(ValueError):
        kept.pairs_at(0.2)


def test_pair_keys_round_trip_and_group_pairs():
    keys = pair_keys(np.array([5, 1, 2, 2]), np.array([1, 5, 2, 7]), 10)
    assert keys.tolist() == [15, 27]
    i, j = split_keys(keys, 10)
    assert i.tolist() == [1, 2] and j.tolist() == [5, 7]
    order = np.array([9, 8, 7, 6, 5, 4])
    first, second = pairs_within_groups(order, np.array([0, 3, 4]), np.array([3, 1, 2]))
    assert set(zip(first.tolist(), second.tolist())) == {(9, 8), (9, 7), (8, 7), (5, 4)}


def test_pairs_sharing_a_value_matches_brute_force():
    rng = np.random.default_rng(3)
    values = rng.integers(0, 30, size=(60, 4)).astype(np.uint64)
    expected = {a * 60 + b for a, b in itertools.combinations(range(60), 2)
                if set(values[a].tolist()) & set(values[b].tolist())}
    assert set(pairs_sharing_a_value(values).tolist()) == expected
    valid = np.arange(60) % 2 == 0
    expected_valid = {k for k in expected if valid[k // 60] and valid[k % 60]}
    assert set(pairs_sharing_a_value(values, valid=valid).tolist()) == expected_valid


def test_connected_components_label_is_smallest_member():
    labels = connected_components(8, np.array([6, 1, 3, 5]), np.array([7, 3, 5, 2]))
    assert labels.tolist() == [0, 1, 1, 1, 4, 1, 6, 6]
    rng = np.random.default_rng(5)
    i, j = rng.integers(0, 300, 250), rng.integers(0, 300, 250)
    labels = connected_components(300, i, j)
    parent = list(range(300))

    def find(x):
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x
    for a, b in zip(i.tolist(), j.tolist()):
        ra, rb = find(a), find(b)
        parent[max(ra, rb)] = min(ra, rb)
    assert labels.tolist() == [min(x for x in range(300) if find(x) == find(y)) for y in range(300)]


def test_precision_recall_f1():
    score = score_pairs(np.array([1, 2, 3, 4]), np.array([2, 4, 6]))
    assert (score.precision, score.recall) == (0.5, pytest.approx(2 / 3))
    assert score.f1 == pytest.approx(2 * 0.5 * (2 / 3) / (0.5 + 2 / 3))
    empty = score_pairs(np.array([], dtype=np.int64), np.array([2]))
    assert np.isnan(empty.precision) and empty.recall == 0.0


def test_adjusted_rand_index_known_values():
    # values worked out by hand from the contingency tables
    assert adjusted_rand_index([0, 0, 1, 1], [0, 0, 1, 1]) == 1.0
    assert adjusted_rand_index([0, 0, 1, 1], [5, 5, 2, 2]) == 1.0
    assert adjusted_rand_index([0, 0, 1, 2], [0, 0, 1, 1]) == pytest.approx(4 / 7)
    assert adjusted_rand_index([0, 0, 0, 0], [0, 1, 2, 3]) == 0.0
    assert adjusted_rand_index([0, 1, 2, 3], [0, 1, 2, 3]) == 1.0
    assert adjusted_rand_index([0, 0, 1, 1], [0, 1, 0, 1]) == pytest.approx(-0.5)


def test_wilson_interval_and_curves():
    low, high = wilson_interval(np.array([5]), np.array([10]))
    assert low[0] == pytest.approx(0.2366, abs=1e-4) and high[0] == pytest.approx(0.7634, abs=1e-4)
    low, high = wilson_interval(np.array([0]), np.array([20]))
    assert low[0] == pytest.approx(0.0, abs=1e-12) and high[0] == pytest.approx(0.1611, abs=1e-4)
    assert band_probability(np.array([1.0, 0.0]), 14, 6).tolist() == [1.0, 0.0]
    s = 0.9
    p = s ** 14
    assert band_probability(s, 14, 6) == pytest.approx(1 - (1 - p) ** 6)
    direct = sum(comb(6, k) * p ** k * (1 - p) ** (6 - k) for k in range(2, 7))
    assert two_band_probability(s, 14, 6) == pytest.approx(direct)


def test_simhash_majority_bits_and_hamming_pairs_exact():
    sets = [np.array([0b1011, 0b0011, 0b0001], dtype=np.uint64), np.array([], dtype=np.uint64)]
    prints = simhash64(sets)
    assert int(prints[0]) == 0b0011 and int(prints[1]) == 0
    assert simhash64([sets[0][::-1].copy()])[0] == prints[0]
    rng = np.random.default_rng(1)
    base = rng.integers(0, 2**63, size=150, dtype=np.int64).astype(np.uint64)
    flips = [np.uint64(0)] + [np.uint64(1) << np.uint64(int(b)) for b in rng.integers(0, 64, 4)]
    near = base[:40].copy()
    for d in range(40):
        for f in rng.choice(len(flips), size=int(rng.integers(1, 5)), replace=False):
            near[d] ^= flips[f]
    values = np.concatenate([base, near])
    n = len(values)
    expected = {a * n + b for a, b in itertools.combinations(range(n), 2)
                if bin(int(values[a]) ^ int(values[b])).count("1") <= 3}
    assert set(hamming_pairs(values, 3).tolist()) == expected
    assert len(expected) >= 20


def test_fess_signature_is_a_function_of_the_token_set():
    vocabulary = ["oil", "price", "rise", "opec", "нефть"]
    table = fess_token_minhashes(vocabulary)
    assert table.shape == (5, 64)
    # seed + k gives a different function per k
    assert len(set(table[0].tolist())) == 64
    sigs = fess_signatures([np.array([0, 1, 2]), np.array([2, 1, 0, 0]), np.array([0, 1, 3]),
                            np.array([], dtype=np.int64)], table)
    assert np.array_equal(sigs[0], sigs[1])
    assert not np.array_equal(sigs[0], sigs[2])
    # the low 2 bits of hash k's minimum land at bits 2k, 2k+1
    minimum = table[[0, 1, 2]].min(axis=0)
    for k in (0, 31, 32, 63):
        word, at = divmod(2 * k, 64)
        assert (int(sigs[0][word]) >> at) & 3 == int(minimum[k]) & 3
    # empty: every minimum stays Long.MAX_VALUE, whose low bits are all ones
    assert sigs[3].tolist() == [2**64 - 1, 2**64 - 1]


def test_edited_copies_are_reproducible_and_cover_every_kind():
    rng = np.random.default_rng(0)
    words = [f"слово{k}" for k in range(500)]
    texts = ["\n".join(" ".join(rng.choice(words, size=30)) for _ in range(int(rng.integers(2, 8))))
             for _ in range(40)]
    copies, edits = edited_copies(texts, 21, seed=42)
    again, edits_again = edited_copies(texts, 21, seed=42)
    assert copies == again and edits == edits_again
    assert {e.kind for e in edits} == set(EDIT_KINDS)
    for copy, edit in zip(copies, edits):
        original = texts[edit.original]
        if edit.kind == "swap":
            assert sorted(copy.split()) == sorted(original.split())
        if edit.kind == "delete":
            assert len(copy.split()) <= len(original.split())
        if edit.kind == "quoted":
            assert original.strip() in copy.replace("«", "").replace("»", "")
            assert len(copy.split()) > 2 * len(original.split())


def test_minhash_model_probabilities():
    from quality.metrics import expected_minhash_scores, minhash_report_probability

    p = minhash_report_probability(np.array([0.0, 1.0, 0.8]), 0.8, 84)
    assert p[0] == 0.0 and p[1] == pytest.approx(1.0)
    need = 68                                    # ⌈0.8 · 84⌉ = 67.2 → 68
    direct = sum(comb(84, m) * 0.8 ** m * 0.2 ** (84 - m) for m in range(need, 85))
    assert p[2] == pytest.approx(direct)
    precision, recall, _ = expected_minhash_scores(np.array([1.0, 1.0, 0.0]), 0.8, 84)
    assert precision == pytest.approx(1.0) and recall == pytest.approx(1.0)


def test_truth_on_real_reuters_shingles_equals_brute_force():
    """The first 200 Reuters stories, canonicalised and shingled by the product."""
    from neardup.corpora import reuters_documents
    from neardup.fingerprint import Fingerprinter

    fp = Fingerprinter()
    docs = []
    for doc in reuters_documents():
        docs.append(fp.shingles(fp.canonical_tokens(doc["title"] + "\n" + doc["body"])))
        if len(docs) == 200:
            break
    truth = exact_truth(docs, floor=0.0, max_work_per_block=2000)
    got = {(int(a), int(b)): int(c) for a, b, c in zip(truth.i, truth.j, truth.intersection)}
    assert got == brute_force_truth(docs)
    assert len(got) > 0


def test_disjoint_pairs_use_every_document_at_most_once():
    from quality.pairs import disjoint_pairs

    rng = np.random.default_rng(2)
    i, j = rng.integers(0, 50, 400), rng.integers(50, 100, 400)
    chosen = disjoint_pairs(i, j, seed=1)
    docs = np.concatenate([i[chosen], j[chosen]])
    assert len(np.unique(docs)) == len(docs)
    used = set(docs.tolist())
    assert all(a in used or b in used for a, b in zip(i.tolist(), j.tolist()))   # maximal
    assert np.array_equal(chosen, disjoint_pairs(i, j, seed=1))
