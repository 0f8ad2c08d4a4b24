"""The pure clustering core: LSH banding math, band keys, single-link clustering against brute
force, stable ids, incremental joining, and the HTML report (no Elasticsearch here)."""

from __future__ import annotations

import html
import itertools
import math

import numpy as np
import pytest

from neardup.fingerprint import Fingerprinter, FingerprintParams
from neardup.fingerprint.clustering import (
    ClusterParams,
    assign_ids,
    cluster_signatures,
    cross_pairs,
    shared_buckets,
    single_link_exact,
)
from neardup.fingerprint.lsh import (
    Banding,
    candidate_probability,
    candidate_probability_given_matches,
    choose_banding,
    needed_matches,
    round_rows,
)
from neardup.indexer.cluster.report import Doc, ReportData, near_pairs, render_report, size_distribution

K = 84
U64 = np.iinfo(np.uint64).max


def random_signatures(rng: np.random.Generator, n: int, k: int = K) -> np.ndarray:
    return rng.integers(0, U64, (n, k), dtype=np.uint64, endpoint=True)


def planted(rng: np.random.Generator, n: int, copy_share: float = 0.5, max_change: float = 0.4) -> np.ndarray:
    """Random signatures where about half the rows are edited copies of an earlier row
    (some slots replaced), so there are chains and clusters at every similarity."""
    sigs = random_signatures(rng, n)
    for d in range(1, n):
        if rng.random() < copy_share:
            row = sigs[rng.integers(0, d)].copy()
            change = rng.random(K) < rng.uniform(0, max_change)
            row[change] = rng.integers(0, U64, int(change.sum()), dtype=np.uint64, endpoint=True)
            sigs[d] = row
    return sigs


def brute_force_labels(sigs: np.ndarray, counts: np.ndarray, threshold: float) -> np.ndarray:
    """Single link by comparing every pair and a plain union-find: the reference."""
    n = len(sigs)
    parent = list(range(n))

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    need = needed_matches(threshold, sigs.shape[1])
    for a, b in itertools.combinations(range(n), 2):
        if counts[a] and counts[b] and np.count_nonzero(sigs[a] == sigs[b]) >= need:
            parent[find(a)] = find(b)
    roots = [find(x) for x in range(n)]
    smallest: dict[int, int] = {}
    for x, root in enumerate(roots):
        smallest.setdefault(root, x)
    return np.array([smallest[r] for r in roots])


# --- banding math ------------------------------------------------------------------------------

@pytest.mark.parametrize("threshold", [0.3, 0.5, 0.7, 0.8, 0.85, 0.9, 0.95])
@pytest.mark.parametrize("num_perm", [84, 128])
def test_chosen_banding_reaches_the_target_with_the_most_rows(threshold, num_perm):
    banding = choose_banding(threshold, num_perm)
    assert banding.bands == num_perm // banding.rows
    assert candidate_probability(threshold, banding.rows, banding.bands) >= 0.99
    more = banding.rows + 1
    assert candidate_probability(threshold, more, num_perm // more) < 0.99 or more > num_perm
    # every larger number of rows misses the target too (the choice is the largest)
    assert all(candidate_probability(threshold, r, num_perm // r) < 0.99 for r in range(banding.rows + 1, num_perm + 1))


def test_documented_bandings_for_84_minhashes():
    assert (choose_banding(0.8, 84).bands, choose_banding(0.8, 84).rows) == (16, 5)
    assert (choose_banding(0.9, 84).bands, choose_banding(0.9, 84).rows) == (10, 8)
    assert (choose_banding(0.7, 84).bands, choose_banding(0.7, 84).rows) == (21, 4)
    assert candidate_probability(0.8, 6, 14) < 0.99 < candidate_probability(0.8, 5, 16)


def test_candidate_probability_given_matches_matches_simulation():
    """Place K - m unequal slots at random: the share of pairs sharing a band agrees with the
    inclusion–exclusion formula within sampling error."""
    rng = np.random.default_rng(7)
    for m, rows, bands in [(68, 5, 16), (68, 6, 14), (60, 5, 16), (70, 14, 6)]:
        trials = 4000
        hits = 0
        for _ in range(trials):
            equal = np.zeros(K, dtype=bool)
            equal[rng.choice(K, m, replace=False)] = True
            hits += bool(equal[: bands * rows].reshape(bands, rows).all(axis=1).any())
        expected = candidate_probability_given_matches(m, K, rows, bands)
        sd = math.sqrt(max(expected * (1 - expected), 1e-4) / trials)
        assert abs(hits / trials - expected) <= 4 * sd + 1e-3, (m, rows, bands, hits / trials, expected)


def test_candidate_probability_given_matches_edges():
    assert candidate_probability_given_matches(K, K, 5, 16) == 1.0
    assert candidate_probability_given_matches(4, K, 5, 16) == 0.0
    assert choose_banding(0.8, K).probability_given_estimate(0.8) > 0.99999


def test_round_rows_are_nested_and_end_at_the_final_rows():
    assert round_rows(5, 84) == [40, 20, 10, 5]
    assert round_rows(8, 84) == [32, 16, 8]
    for rows in range(1, 43):
        found = round_rows(rows, 84)
        assert found[-1] == rows and all(a == 2 * b for a, b in zip(found, found[1:]))
        assert all(84 // r >= 2 for r in found[:-1])


# --- band keys ------------------------------------------------------------------------------------

def test_band_keys_are_equal_exactly_when_the_band_is():
    rng = np.random.default_rng(1)
    banding = Banding(K, 5, 16)
    a = random_signatures(rng, 1)
    b = a.copy()
    b[0, 7] ^= np.uint64(1)  # slot 7 is in band 1
    keys_a, keys_b = banding.keys(a)[0], banding.keys(b)[0]
    assert keys_a[1] != keys_b[1]
    assert np.array_equal(np.delete(keys_a, 1), np.delete(keys_b, 1))
    # the same slot values in two different bands give different keys
    same = np.tile(a[:, :5], (1, 17))[:, :K]
    keys = banding.keys(same)[0]
    assert len(set(keys.tolist())) == 16


def test_a_collision_at_more_rows_is_a_collision_at_the_final_rows():
    rng = np.random.default_rng(2)
    sigs = planted(rng, 400, max_change=0.3)
    final = Banding(K, 5, 16)
    coarse = final.with_rows(20)
    fine_keys, coarse_keys = final.keys(sigs), coarse.keys(sigs)
    for a, b in itertools.combinations(range(60), 2):
        if np.any(coarse_keys[a] == coarse_keys[b]):
            assert np.any(fine_keys[a] == fine_keys[b])


def test_extra_groups_are_those_not_implied_by_a_band():
    """Signatures equal only inside group g: they share a band iff g is not an extra group."""
    rng = np.random.default_rng(3)
    for groups, rows in [(6, 5), (14, 5), (14, 8), (6, 14), (12, 4)]:
        banding = Banding(K, rows, K // rows, groups)
        size = K // groups
        for g in range(groups):
            a, b = random_signatures(rng, 1), random_signatures(rng, 1)
            b[0, g * size:(g + 1) * size] = a[0, g * size:(g + 1) * size]
            shared = np.asarray(banding.keys(a)[0] == banding.keys(b)[0])
            shares_band = bool(shared[: banding.bands].any())
            assert shares_band == (g not in banding.extra_groups), (groups, rows, g)
            assert shared.any()  # sharing a supershingle always makes a candidate


# --- clustering -------------------------------------------------------------------------------------

@pytest.mark.parametrize("threshold", [0.5, 0.7, 0.8, 0.9])
@pytest.mark.parametrize("rounds", [True, False])
def test_lsh_single_link_equals_brute_force(threshold, rounds):
    rng = np.random.default_rng(int(threshold * 100) + rounds)
    sigs = planted(rng, 300)
    counts = np.ones(len(sigs), dtype=np.int64)
    counts[[3, 50]] = 0  # empty documents are never linked
    params = ClusterParams(threshold, choose_banding(threshold, K, 6), rounds=rounds)
    result = cluster_signatures(sigs, counts, params)
    expected = brute_force_labels(sigs, counts, threshold)
    assert np.array_equal(result.labels, expected)
    assert result.labels[3] == 3 and result.labels[50] == 50
    assert result.clusters == len(np.unique(expected))
    assert np.array_equal(result.labels, single_link_exact(sigs, counts, threshold))


@pytest.mark.parametrize("threshold", [0.5, 0.8])
def test_a_verification_hook_giving_the_estimate_changes_nothing(threshold):
    """The hook (fingerprint.verify) only replaces the similarity of candidates passing the
    estimate floor; a hook returning the estimate itself, with or without a margin and a banding
    for t - margin, gives brute-force single link of the estimates; a margin without a hook is unused."""
    rng = np.random.default_rng(int(threshold * 10))
    sigs = planted(rng, 300)
    counts = np.ones(len(sigs), dtype=np.int64)
    expected = brute_force_labels(sigs, counts, threshold)
    seen: list[np.ndarray] = []

    def estimate(i, j, equal):
        seen.append(equal)
        return equal / K

    for margin in (0.0, 0.15):
        params = ClusterParams(threshold, choose_banding(threshold - margin, K, 6), margin=margin)
        assert np.array_equal(cluster_signatures(sigs, counts, params, verify=estimate).labels, expected)
        assert np.array_equal(cluster_signatures(sigs, counts, params).labels, expected)
    assert min(int(e.min()) for e in seen if len(e)) >= needed_matches(threshold - 0.15, K)


def test_clusters_of_real_fingerprints_equal_exact_single_link_of_the_estimates(reuters_docs):
    fp = Fingerprinter(FingerprintParams())
    docs = [d for d in reuters_docs if d["body"]][:3000]
    prints = fp.fingerprint_many([f"{d['title']}\n{d['body']}" for d in docs])
    sigs = np.stack([p.signature for p in prints])
    counts = np.array([p.shingle_count for p in prints])
    for threshold in (0.5, 0.8, 0.9):
        result = cluster_signatures(sigs, counts, ClusterParams(threshold, choose_banding(threshold, K, 6)))
        assert np.array_equal(result.labels, single_link_exact(sigs, counts, threshold)), threshold
        assert result.clusters < len(docs)  # Reuters has near-duplicates at every one of these


def test_identical_signatures_are_joined_without_comparing_pairs():
    rng = np.random.default_rng(4)
    sigs = np.repeat(random_signatures(rng, 3), 200, axis=0)  # 3 stories, 200 identical copies each
    counts = np.ones(len(sigs), dtype=np.int64)
    result = cluster_signatures(sigs, counts, ClusterParams(0.8, choose_banding(0.8, K)))
    assert len(np.unique(result.labels)) == 3
    assert result.candidates == 0


def test_large_buckets_are_compared_star_wise_then_across_clusters():
    rng = np.random.default_rng(5)
    base = random_signatures(rng, 1)
    sigs = np.repeat(base, 400, axis=0)
    for d in range(400):  # near-identical copies: one slot each outside band 0
        sigs[d, 10 + d % 70] = rng.integers(0, U64, dtype=np.uint64, endpoint=True)
    counts = np.ones(len(sigs), dtype=np.int64)
    result = cluster_signatures(sigs, counts, ClusterParams(0.8, choose_banding(0.8, K), rounds=False))
    assert len(np.unique(result.labels)) == 1
    assert result.candidates < 3 * 400  # not the 79,800 pairs of the bucket


def test_capped_buckets_never_link_dissimilar_documents():
    rng = np.random.default_rng(6)
    sigs = planted(rng, 400, copy_share=0.8, max_change=0.5)
    sigs[:, :5] = sigs[0, :5]  # every document shares band 0: one huge bucket
    counts = np.ones(len(sigs), dtype=np.int64)
    params = ClusterParams(0.8, choose_banding(0.8, K), max_pairs_per_bucket=50, window=3)
    result = cluster_signatures(sigs, counts, params)
    assert result.capped_buckets >= 1
    exact = brute_force_labels(sigs, counts, 0.8)
    # every LSH cluster lies inside one exact cluster (links are always verified)
    for label in np.unique(result.labels):
        assert len(np.unique(exact[result.labels == label])) == 1


def test_known_clusters_are_kept_and_only_merged():
    rng = np.random.default_rng(8)
    sigs = random_signatures(rng, 6)
    sigs[4] = sigs[1]  # 4 links to 1
    counts = np.ones(6, dtype=np.int64)
    known = np.array([0, 1, 2, 0, 4, 5])  # 0 and 3 were put together earlier
    result = cluster_signatures(sigs, counts, ClusterParams(0.8, choose_banding(0.8, K)), labels=known)
    assert result.labels.tolist() == [0, 1, 2, 0, 1, 5]


def test_cross_pairs_skip_pairs_inside_one_cluster():
    keys = np.array([7, 7, 7, 7, 9, 9], dtype=np.uint64)
    docs = np.array([0, 1, 2, 3, 4, 5])
    labels = np.array([0, 0, 2, 2, 4, 4])
    buckets = shared_buckets(keys, docs, labels)
    assert len(buckets.bucket_start) == 1  # the bucket of key 9 holds one cluster only
    i, j = cross_pairs(buckets, np.array([0]))
    assert sorted(zip(i.tolist(), j.tolist())) == [(0, 2), (0, 3), (1, 2), (1, 3)]


# --- stable ids ----------------------------------------------------------------------------------------

KEYS = ["a", "b", "c", "d", "e", "f"]


def test_first_ids_are_the_smallest_member_keys():
    assert assign_ids(KEYS, np.array([0, 0, 2, 2, 2, 5]), [None] * 6) == ["a", "a", "c", "c", "c", "f"]


def test_ids_do_not_change_when_membership_does_not():
    labels = np.array([0, 0, 2, 2, 2, 5])
    first = assign_ids(KEYS, labels, [None] * 6)
    # the same clusters, labelled differently and in another document order
    order = [5, 3, 1, 0, 4, 2]
    again = assign_ids([KEYS[p] for p in order], np.array([0, 1, 2, 2, 1, 1]), [first[p] for p in order])
    assert again == [first[p] for p in order]


def test_a_merge_keeps_the_id_of_the_larger_cluster():
    previous = ["b", "b", "d", "d", "d", None]   # cluster b (a, b) and cluster d (c, d, e), and new f
    ids = assign_ids(KEYS, np.zeros(6, dtype=np.int64), previous)
    assert ids == ["d"] * 6
    tie = assign_ids(KEYS[:4], np.zeros(4, dtype=np.int64), ["b", "b", "d", "d"])
    assert tie == ["b"] * 4  # equal sizes: the smaller id


def test_a_split_keeps_the_id_where_the_founder_is():
    previous = ["a", "a", "a", "a", None, None]
    ids = assign_ids(KEYS, np.array([0, 0, 2, 2, 4, 5]), previous)
    assert ids[:2] == ["a", "a"] and ids[2:4] == ["c", "c"] and ids[4:] == ["e", "f"]


def test_a_cluster_whose_founder_left_gets_a_new_id():
    previous = ["x", "x", "x", None, None, None]  # founder "x" is no longer a document
    assert assign_ids(KEYS, np.array([0, 0, 0, 3, 4, 5]), previous)[:3] == ["a", "a", "a"]


def test_incremental_ids_follow_whole_cluster_sizes_and_avoid_taken_ids():
    # new documents a, b link to clusters "p" (1 member present, 10 in the index) and "q" (2 present, 3 in all)
    keys = ["a", "b", "m1", "m2", "m3", "z"]
    previous = [None, None, "p", "q", "q", None]
    labels = np.array([0, 0, 0, 0, 0, 5])
    ids = assign_ids(keys, labels, previous, sizes={"p": 10, "q": 3}, taken={"z"})
    assert ids[:5] == ["p"] * 5
    assert ids[5] == "z~1"


# --- report ------------------------------------------------------------------------------------------

def test_size_distribution_counts_clusters_and_documents():
    rows = size_distribution([2, 2, 3, 7, 120], singletons_outside=10)
    assert rows == [("1", 10, 10), ("2", 2, 4), ("3", 1, 3), ("6–10", 1, 7), ("101–1,000", 1, 120)]


def test_near_pairs_are_the_closest_to_the_threshold_and_distinct():
    pairs = [("a", "b", 0.9), ("b", "a", 0.9), ("c", "d", 0.81), ("e", "f", 0.85)]
    assert near_pairs(pairs, 0.8, 2) == [("c", "d", 0.81), ("e", "f", 0.85)]


def test_report_escapes_everything_from_the_index():
    evil = '<script>alert("x")</script><img src=x onerror=alert(1)>'
    data = ReportData(
        index="news<1>", threshold=0.8, lsh=Banding(K, 5, 16).describe(), figures={"documents": evil},
        distribution=[("1", 5, 5)], largest=[(evil, 2, [Doc(evil, evil, evil)])],
        near_linked=[(0.81, Doc("a", evil, evil), Doc("b", "t", "s"))], near_rejected=[],
        s_curve=[(0.8, 0.998)])
    page = render_report(data)
    assert "<script" not in page and "<img" not in page
    assert html.escape(evil) in page
    assert "news&lt;1&gt;" in page
    assert "http://" not in page and "https://" not in page  # self-contained
