"""Similarity: exact measures, estimates on edited real articles, supershingle / megashingle
match rates against theory, similar_pairs against brute force, group_labels."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from neardup.corpora import reuters_documents, ru_news_documents
from neardup.fingerprint import (
    Fingerprinter,
    FingerprintParams,
    estimated_containment,
    estimated_resemblance,
    exact_containment,
    exact_resemblance,
    group_labels,
    similar_pairs,
)
from neardup.fingerprint.hashing import megashingles, minhash, multipliers, supershingles

G, R, K = 6, 14, 84


# ---- helpers ------------------------------------------------------------------------

def edit_text(text: str, rate: float, rng: np.random.Generator, vocabulary: list[str]) -> str:
    """Delete, insert and replace words (each with probability rate/3 per word), and swap two
    paragraphs with probability 1/2."""
    paragraphs = [p for p in text.split("\n") if p.strip()]
    if len(paragraphs) > 2 and rng.random() < 0.5:
        i, j = rng.choice(len(paragraphs), 2, replace=False)
        paragraphs[i], paragraphs[j] = paragraphs[j], paragraphs[i]
    out = []
    for paragraph in paragraphs:
        words = []
        for word in paragraph.split():
            r = rng.random()
            if r < rate / 3:
                continue
            if r < 2 * rate / 3:
                words.append(vocabulary[rng.integers(len(vocabulary))])
            elif r < rate:
                words += [word, vocabulary[rng.integers(len(vocabulary))]]
            else:
                words.append(word)
        out.append(" ".join(words))
    return "\n".join(out)


def articles(kind: str, count: int, min_words: int) -> list[str]:
    if kind == "en":
        docs = (d["body"] for d in reuters_documents(with_body_only=True))
    else:
        docs = (d["body"] for d in ru_news_documents())
    return list(itertools.islice((d for d in docs if len(d.split()) >= min_words), count))


def synthetic_pair(j: float, size: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, float]:
    """Two random shingle-hash sets of ``size`` elements with Jaccard as close to j as sizes allow."""
    common = int(round(2 * size * j / (1 + j)))
    universe = rng.integers(0, 2**64 - 1, 2 * size - common, dtype=np.uint64)
    a, b = universe[:size], universe[size - common:]
    return a, b, common / (2 * size - common)


def p_super(j: np.ndarray | float) -> np.ndarray | float:
    """P(at least one of G supershingles equal) = 1 - (1 - J^R)^G."""
    p = np.asarray(j) ** R
    return 1 - (1 - p) ** G


def p_mega(j: np.ndarray | float) -> np.ndarray | float:
    """P(some megashingle equal) = P(at least 2 of G groups equal)
    = 1 - (1 - p)^G - G p (1 - p)^(G-1), p = J^R."""
    p = np.asarray(j) ** R
    return 1 - (1 - p) ** G - G * p * (1 - p) ** (G - 1)


def assert_rate(observed: np.ndarray, probabilities: np.ndarray, label: str) -> None:
    """Observed count of a Bernoulli sum within 4 standard deviations (+1) of its expectation."""
    expected = float(np.sum(probabilities))
    sd = math.sqrt(float(np.sum(probabilities * (1 - probabilities))))
    assert abs(int(np.sum(observed)) - expected) <= 4 * sd + 1, (label, int(np.sum(observed)), expected, sd)


# ---- exact measures -----------------------------------------------------------------

def test_exact_measures() -> None:
    a = np.array([1, 2, 3, 4], dtype=np.uint64)
    b = np.array([3, 4, 5, 6, 7, 8], dtype=np.uint64)
    assert exact_resemblance(a, b) == 2 / 8
    assert exact_containment(a, b) == 2 / 4 and exact_containment(b, a) == 2 / 6
    assert exact_resemblance(a, a) == 1.0 and exact_containment(a[:2], a) == 1.0
    empty = np.empty(0, dtype=np.uint64)
    assert exact_resemblance(empty, empty) == 0.0 and exact_containment(empty, a) == 0.0
    assert exact_resemblance(np.array([1, 1, 2], dtype=np.uint64), np.array([2, 1], dtype=np.uint64)) == 1.0


def test_estimates_require_the_same_scheme() -> None:
    from neardup.fingerprint import FingerprintParams

    a = Fingerprinter().fingerprint("crude oil prices rose sharply")
    b = Fingerprinter(FingerprintParams(seed=2)).fingerprint("crude oil prices rose sharply")
    with pytest.raises(ValueError, match="different schemes"):
        estimated_resemblance(a, b)


# ---- estimates on edited real articles ----------------------------------------------

@pytest.mark.parametrize("kind", ["en", "ru"])
def test_estimated_resemblance_within_012_of_exact_on_edited_articles(kind: str) -> None:
    rng = np.random.default_rng(20240 + len(kind))
    texts = articles(kind, 120 if kind == "en" else 60, min_words=120)
    vocabulary = " ".join(texts[:20]).split()
    fp = Fingerprinter()
    errors, exact_values = [], []
    for text in texts:
        for rate in rng.uniform(0.0, 0.35, 2):
            other = edit_text(text, float(rate), rng, vocabulary)
            exact = exact_resemblance(fp.shingles(fp.canonical_tokens(text)), fp.shingles(fp.canonical_tokens(other)))
            estimate = estimated_resemblance(fp.fingerprint(text), fp.fingerprint(other))
            errors.append(estimate - exact)
            exact_values.append(exact)
    errors = np.abs(np.array(errors))
    assert np.mean(errors <= 0.12) >= 0.95, np.mean(errors <= 0.12)
    assert np.min(exact_values) < 0.4 and np.max(exact_values) > 0.9  # the pairs span the range
    assert abs(float(np.mean(errors))) < 0.06


def test_estimated_containment_on_truncated_and_extended_articles() -> None:
    """B = A's first part plus other text: the containment of that part is high in both ways
    it is measured, and the estimate follows the exact value."""
    rng = np.random.default_rng(5)
    texts = articles("en", 80, min_words=150)
    fp = Fingerprinter()
    errors = []
    for text, filler in zip(texts, texts[1:] + texts[:1]):
        words = text.split()
        part = " ".join(words[: int(len(words) * rng.uniform(0.3, 0.9))])
        whole = part + " " + filler
        sa, sb = fp.shingles(fp.canonical_tokens(part)), fp.shingles(fp.canonical_tokens(whole))
        fa, fb = fp.fingerprint(part), fp.fingerprint(whole)
        assert exact_containment(sa, sb) >= 0.95
        errors.append(estimated_containment(fa, fb) - exact_containment(sa, sb))
        errors.append(estimated_containment(fb, fa) - exact_containment(sb, sa))
    errors = np.abs(np.array(errors))
    assert np.mean(errors <= 0.15) >= 0.9, np.mean(errors <= 0.15)


# ---- supershingle and megashingle match rates -----------------------------------------

@pytest.mark.parametrize("target", [0.5, 0.7, 0.8, 0.9, 0.95])
def test_slot_super_and_mega_match_rates_follow_theory_on_controlled_sets(target: float) -> None:
    rng = np.random.default_rng(int(target * 1000))
    a_perm = multipliers(1, K)
    slots, supers, megas, js = [], [], [], []
    for _ in range(700):
        a, b, j = synthetic_pair(target, int(rng.integers(40, 600)), rng)
        sa, sb = minhash(np.unique(a), a_perm), minhash(np.unique(b), a_perm)
        pa, pb = supershingles(sa, G), supershingles(sb, G)
        slots.append(np.count_nonzero(sa == sb))
        supers.append(bool(np.any(pa == pb)))
        megas.append(bool(np.any(megashingles(pa) == megashingles(pb))))
        js.append(j)
    js = np.array(js)
    slots = np.array(slots)
    # slot matches: each of K slots equal with probability J (700 binomials of K trials)
    expected, sd = K * js.sum(), math.sqrt(K * np.sum(js * (1 - js)))
    assert abs(slots.sum() - expected) <= 4 * sd, (slots.sum(), expected, sd)
    spread = np.std(slots / K - js)
    assert abs(spread - math.sqrt(np.mean(js * (1 - js)) / K)) < 0.006  # independent slots: binomial spread
    assert_rate(np.array(supers), p_super(js), "supershingle")
    assert_rate(np.array(megas), p_mega(js), "megashingle")


def test_super_and_mega_match_rates_follow_theory_on_edited_real_text() -> None:
    """Real articles, edited at the canonical-token level (deletions, insertions, replacements),
    grouped around 0.5 … 0.95 by their exact resemblance."""
    rng = np.random.default_rng(11)
    fp = Fingerprinter(FingerprintParams(shingle_size=5, num_perm=K, groups=G, rows=R))
    token_lists = [fp.canonical_tokens(t) for t in articles("en", 260, min_words=150)]
    vocabulary = list(itertools.chain.from_iterable(token_lists[:30]))
    js, supers, megas = [], [], []
    for tokens in token_lists:
        base = fp.fingerprint_tokens(tokens)
        shingles = fp.shingles(tokens)
        for rate in np.exp(rng.uniform(np.log(0.002), np.log(0.12), 8)):
            edited = []
            for token in tokens:
                r = rng.random()
                if r < rate / 3:
                    continue
                edited.append(vocabulary[rng.integers(len(vocabulary))] if r < 2 * rate / 3 else token)
                if 2 * rate / 3 <= r < rate:
                    edited.append(vocabulary[rng.integers(len(vocabulary))])
            other = fp.fingerprint_tokens(edited)
            js.append(exact_resemblance(shingles, fp.shingles(edited)))
            supers.append(bool(np.any(base.supershingles == other.supershingles)))
            megas.append(bool(np.any(base.megashingles == other.megashingles)))
    js, supers, megas = np.array(js), np.array(supers), np.array(megas)
    for low, high in [(0.45, 0.6), (0.6, 0.75), (0.75, 0.85), (0.85, 0.93), (0.93, 1.0)]:
        band = (js >= low) & (js < high)
        assert band.sum() >= 60, (low, band.sum())
        assert_rate(supers[band], p_super(js[band]), f"super {low}-{high}")
        assert_rate(megas[band], p_mega(js[band]), f"mega {low}-{high}")


# ---- similar_pairs ------------------------------------------------------------------

def brute_force(signatures: np.ndarray, counts: np.ndarray, threshold: float, mode: str) -> dict:
    found = {}
    n, k = signatures.shape
    for i in range(n):
        for j in range(i + 1, n):
            if counts[i] == 0 or counts[j] == 0:
                continue
            jac = np.count_nonzero(signatures[i] == signatures[j]) / k
            if mode == "resemblance":
                sim = jac
            else:
                a, b = float(counts[i]), float(counts[j])
                sim = max(min(1.0, jac * (a + b) / ((1 + jac) * a)), min(1.0, jac * (a + b) / ((1 + jac) * b)))
            if sim > 0 and sim >= threshold:
                found[(i, j)] = sim
    return found


def clustered_signatures(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Clusters of documents made by editing a base set, some identical, some empty."""
    a_perm = multipliers(1, K)
    rows, counts = [], []
    while len(rows) < n:
        base = rng.integers(0, 2**64 - 1, int(rng.integers(20, 400)), dtype=np.uint64)
        for _ in range(int(rng.integers(1, 8))):
            keep = base[rng.random(len(base)) > rng.uniform(0, 0.5)]
            extra = rng.integers(0, 2**64 - 1, int(rng.integers(0, 200)), dtype=np.uint64)
            shingles = np.unique(np.concatenate((keep, extra)))
            rows.append(minhash(shingles, a_perm))
            counts.append(len(shingles))
            if rng.random() < 0.15:  # the same signature again (a copy, or a count that differs)
                rows.append(rows[-1].copy())
                counts.append(counts[-1] + int(rng.integers(0, 2)) * int(rng.integers(1, 300)))
    signatures, counts = np.array(rows[:n]), np.array(counts[:n])
    empty = rng.choice(n, 5, replace=False)
    signatures[empty] = np.uint64(2**64 - 1)
    counts[empty] = 0
    return signatures, counts


@pytest.mark.parametrize("mode", ["resemblance", "containment"])
@pytest.mark.parametrize("threshold", [0.0, 0.3, 0.5, 0.8, 0.95, 1.0])
def test_similar_pairs_equals_brute_force_on_clustered_data(mode: str, threshold: float) -> None:
    signatures, counts = clustered_signatures(160, np.random.default_rng(int(threshold * 100) + len(mode)))
    i, j, sim = similar_pairs(signatures, counts, threshold, mode)
    expected = brute_force(signatures, counts, threshold, mode)
    assert np.all(i < j)
    assert list(zip(i.tolist(), j.tolist())) == sorted(expected)
    assert np.allclose(sim, [expected[p] for p in sorted(expected)])
    if threshold > 0:
        assert len(expected) > 0


@pytest.mark.parametrize("mode", ["resemblance", "containment"])
@pytest.mark.parametrize("size", [8, 30, 64, 65, 300])
def test_both_pair_searches_give_the_same_pairs(mode: str, size: int) -> None:
    """Both strategies (sorted band keys with row numbers for windows, copies collapsed first
    for large inputs and long runs) agree; tests/test_fingerprint_pairs.py compares them with an
    all-pairs reference in depth."""
    from neardup.fingerprint import similarity

    signatures, counts = clustered_signatures(size, np.random.default_rng(size))
    rows = np.flatnonzero(counts > 0)
    for need, bands in ((1, K), (42, K - 42 + 1), (68, K - 68 + 1), (K, 1)):
        sorted_ = similarity._pairs_by_sorting(signatures, rows, need, bands)
        collapsed = similarity._pairs_sharing_bands(signatures, rows, need, bands)
        as_dict = lambda r: {(int(a), int(b)): float(s) for a, b, s in zip(*r)}  # noqa: E731
        assert sorted_ is not None and as_dict(sorted_) == as_dict(collapsed)
        assert list(zip(sorted_[0].tolist(), sorted_[1].tolist())) == sorted(as_dict(collapsed))
    i, j, sim = similar_pairs(signatures, counts, 0.5, mode)
    assert list(zip(i.tolist(), j.tolist())) == sorted(brute_force(signatures, counts, 0.5, mode))


def test_similar_pairs_on_random_signatures_finds_nothing_and_handles_edge_cases() -> None:
    rng = np.random.default_rng(1)
    signatures = rng.integers(0, 2**64 - 1, (1000, K), dtype=np.uint64)
    counts = rng.integers(1, 1000, 1000)
    i, j, sim = similar_pairs(signatures, counts, 0.8, "resemblance")
    assert len(i) == len(j) == len(sim) == 0
    assert all(len(x) == 0 for x in similar_pairs(signatures[:1], counts[:1], 0.5))
    assert all(len(x) == 0 for x in similar_pairs(signatures[:0], counts[:0], 0.5))
    same = np.repeat(signatures[:1], 50, axis=0)
    i, j, sim = similar_pairs(same, np.full(50, 10), 0.9)
    assert len(i) == 50 * 49 // 2 and np.all(sim == 1.0)
    with pytest.raises(ValueError, match="signatures must be an"):
        similar_pairs(signatures.astype(np.int64), counts, 0.5)
    with pytest.raises(ValueError, match="counts must have shape"):
        similar_pairs(signatures, counts[:5], 0.5)
    with pytest.raises(ValueError, match="threshold"):
        similar_pairs(signatures, counts, 1.5)
    with pytest.raises(ValueError, match="mode"):
        similar_pairs(signatures, counts, 0.5, "jaccard")


def test_similar_pairs_containment_finds_a_small_document_inside_a_large_one() -> None:
    fp = Fingerprinter()
    stories = articles("en", 12, min_words=150)
    small = stories[0]
    large = " ".join(stories[1:6]) + " " + small
    prints = [fp.fingerprint(small), fp.fingerprint(large), fp.fingerprint(stories[7])]
    signatures = np.stack([f.signature for f in prints])
    counts = np.array([f.shingle_count for f in prints])
    assert len(similar_pairs(signatures, counts, 0.8, "resemblance")[0]) == 0
    i, j, sim = similar_pairs(signatures, counts, 0.8, "containment")
    assert (i.tolist(), j.tolist()) == ([0], [1]) and sim[0] >= 0.8


# ---- group_labels -------------------------------------------------------------------

def union_find_labels(n: int, pairs: list[tuple[int, int]]) -> list[int]:
    parent = list(range(n))

    def root(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for a, b in pairs:
        ra, rb = root(a), root(b)
        parent[max(ra, rb)] = min(ra, rb)
    return [root(x) for x in range(n)]


@pytest.mark.parametrize("seed", range(6))
def test_group_labels_are_connected_components_labelled_by_smallest_member(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 400))
    m = int(rng.integers(0, 2 * n))
    i, j = rng.integers(0, n, m), rng.integers(0, n, m)
    labels = group_labels(n, i, j)
    assert labels.tolist() == union_find_labels(n, list(zip(i.tolist(), j.tolist())))
    for a, b in zip(i, j):  # transitive closure: every edge inside one group
        assert labels[a] == labels[b]
    for node in range(n):  # the label is the smallest member, which labels itself
        assert labels[node] <= node and labels[labels[node]] == labels[node]


def test_group_labels_chain_and_errors() -> None:
    n = 1000
    chain = np.arange(n - 1)
    assert np.all(group_labels(n, chain[::-1] + 1, chain[::-1]) == 0)  # long chain: one group
    assert group_labels(3, [], []).tolist() == [0, 1, 2]
    with pytest.raises(ValueError, match="pair indices"):
        group_labels(3, [0], [3])


@pytest.mark.parametrize("threshold", [0.5, 0.7, 0.8, 0.9, 1.0])
def test_banded_candidates_miss_no_pair_at_the_threshold(threshold: float) -> None:
    """Pigeonhole: a pair with exactly the fewest equal slots the threshold allows, its unequal
    slots spread one per band (the worst case for banding), is still found; one more unequal
    slot and it is not."""
    import math

    from neardup.fingerprint import similarity

    rng = np.random.default_rng(int(threshold * 100))
    need = max(1, math.ceil(threshold * K - 1e-9))
    bands = K - need + 1
    width = K // bands                                  # windows: bands of ⌊K/B⌋ slots from slot 0
    edges = (np.arange(bands + 1) * K) // bands         # copies collapsed: bands cover all K slots
    base = rng.integers(0, 2**63, size=(40, K), dtype=np.uint64)
    at_limit, beyond, at_limit_wide = base.copy(), base.copy(), base.copy()
    at_limit[:, np.arange(K - need) * width] ^= np.uint64(1)   # one unequal slot in each of u bands
    at_limit_wide[:, edges[:-1][: K - need]] ^= np.uint64(1)
    beyond[:, : K - need + 1] ^= np.uint64(1)          # one unequal slot too many
    noise = rng.integers(0, 2**63, size=(40, K), dtype=np.uint64)
    for at_the_limit in (at_limit, at_limit_wide):
        signatures = np.concatenate((base, at_the_limit, beyond, noise))
        counts = np.full(len(signatures), 100)
        rows = np.arange(len(signatures))
        for found_by in (similar_pairs(signatures, counts, threshold),
                         similarity._pairs_sharing_bands(signatures, rows, need, bands)):
            i, j, sim = found_by
            found = dict(zip(zip(i.tolist(), j.tolist()), sim.tolist()))
            assert {(r, r + 40) for r in range(40)} <= set(found)
            assert not any((r, r + 80) in found for r in range(40))
            assert found == pytest.approx(brute_force(signatures, counts, threshold, "resemblance"))
