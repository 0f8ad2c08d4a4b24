"""Exact verification of candidate pairs (``neardup cluster --verify text``).

Pure part (:mod:`fingerprint.verify` and the ``verify`` hook of ``cluster_signatures``): exact
resemblance against Python sets, the margin math, candidate recall at ``t - δ`` on planted
pairs whose exact resemblance is just above t while their estimate is below it, and the
clusters against exact single-link. Elasticsearch part (:mod:`indexer.cluster.verification`): such a
pair is clustered with ``--verify text`` and not with ``--verify signature``.
"""

from __future__ import annotations

import itertools
import json
import math
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from neardup.fingerprint import FIELD, Fingerprinter, FingerprintParams, group_labels, jit, similar_pairs
from neardup.fingerprint import verify as verify_module
from neardup.fingerprint.clustering import ClusterParams, cluster_signatures, merge_identical
from neardup.fingerprint.hashing import multipliers
from neardup.fingerprint.lsh import candidate_probability_given_matches, choose_banding, needed_matches
from neardup.fingerprint.similarity import exact_resemblance
from neardup.fingerprint.verify import (
    BAND_MISS,
    EPS,
    ShingleSets,
    banding_miss,
    candidate_pairs,
    estimate_margin,
    estimate_miss,
    exact_resemblances,
    links,
    lowered_banding,
    lowered_threshold,
    pair_intersections,
    pair_intersections_numpy,
    set_signatures,
    set_verifier,
    verified_single_link,
)
from neardup.indexer.cluster.meta import META_KEY
from neardup.indexer.cluster.verification import text_params
from tests.cluster_support import mappings
from tests.engine_support import bulk_load, delete_index
from tests.plugins.corpora import run_neardup

ROOT = Path(__file__).resolve().parents[1]
PARAMS = FingerprintParams()
K = PARAMS.num_perm
U64 = np.iinfo(np.uint64).max


@pytest.fixture(scope="module")
def fp() -> Fingerprinter:
    return Fingerprinter(PARAMS)


def random_set(rng: np.random.Generator, size: int) -> np.ndarray:
    return np.unique(rng.integers(0, U64, size, dtype=np.uint64, endpoint=True))


def python_jaccard(a: np.ndarray, b: np.ndarray) -> float:
    sa, sb = set(a.tolist()), set(b.tolist())
    union = len(sa | sb)
    return len(sa & sb) / union if union else 0.0


def canonical(labels: np.ndarray) -> np.ndarray:
    first: dict[int, int] = {}
    return np.array([first.setdefault(int(v), i) for i, v in enumerate(labels)])


def brute_force_exact(sets: ShingleSets, counts: np.ndarray, threshold: float) -> np.ndarray:
    """Exact single-link over every pair (the reference of bench/cluster.py)."""
    n = len(sets)
    i, j = (np.array(x, dtype=np.int64) for x in zip(*itertools.combinations(range(n), 2)))
    keep = (counts[i] > 0) & (counts[j] > 0)
    i, j = i[keep], j[keep]
    linked = links(exact_resemblances(sets, i, j), threshold)
    return group_labels(n, i[linked], j[linked])


@pytest.fixture(params=[True, False], ids=["compiled", "numpy"])
def kernels(request):
    previous = jit.set_enabled(request.param)
    if request.param:
        jit.kernels()  # loaded: the compiled merge is used whatever the size of the work
        assert verify_module._kernel(0) is not None
    else:
        assert verify_module._kernel(1 << 40) is None
    yield request.param
    jit.set_enabled(previous)


# --- exact resemblance ------------------------------------------------------------------------------

def test_exact_resemblance_equals_python_sets_on_random_sets(kernels):
    rng = np.random.default_rng(7)
    pool = random_set(rng, 3000)
    arrays = [np.unique(rng.choice(pool, rng.integers(0, 400))) for _ in range(120)]
    arrays.append(np.empty(0, np.uint64))
    arrays.append(np.array([0, U64], dtype=np.uint64))  # extremes of the unsigned order
    arrays.append(np.array([U64], dtype=np.uint64))
    sets = ShingleSets.from_arrays(arrays)
    a = rng.integers(0, len(arrays), 3000)
    b = rng.integers(0, len(arrays), 3000)
    a[:len(arrays)] = b[:len(arrays)] = np.arange(len(arrays))  # every set with itself
    got = exact_resemblances(sets, a, b)
    want = np.array([python_jaccard(arrays[x], arrays[y]) for x, y in zip(a.tolist(), b.tolist())])
    assert np.array_equal(got, want)
    inter = pair_intersections(sets, a, b)
    assert np.array_equal(inter, [len(set(arrays[x].tolist()) & set(arrays[y].tolist())) for x, y in zip(a, b)])


def test_compiled_and_numpy_intersections_are_equal():
    rng = np.random.default_rng(8)
    pool = random_set(rng, 500)
    sets = ShingleSets.from_arrays([np.unique(rng.choice(pool, rng.integers(0, 300))) for _ in range(60)])
    a, b = rng.integers(0, 60, 2000), rng.integers(0, 60, 2000)
    previous = jit.set_enabled(True)
    try:
        jit.kernels()
        assert verify_module._kernel(0) is not None
        compiled = pair_intersections(sets, a, b)
    finally:
        jit.set_enabled(previous)
    assert np.array_equal(compiled, pair_intersections_numpy(sets, a, b))
    assert np.array_equal(compiled, pair_intersections_numpy(sets, a, b, block_elements=50))  # many blocks


def test_exact_resemblance_equals_python_sets_on_real_shingle_sets(reuters_docs, fp, kernels):
    docs = [d for d in reuters_docs if d["body"]][:400]
    arrays = [fp.shingles(fp.canonical_tokens(f"{d['title']}\n{d['body']}")) for d in docs]
    signatures = np.stack([fp.fingerprint_shingles(s).signature for s in arrays])
    counts = np.array([len(s) for s in arrays])
    sets = ShingleSets.from_arrays(arrays)
    ci, cj, _ = candidate_pairs(signatures, counts, lowered_banding(0.5, K), lowered_threshold(0.5, K))
    rng = np.random.default_rng(9)
    i = np.concatenate((ci, rng.integers(0, len(docs), 500)))
    j = np.concatenate((cj, rng.integers(0, len(docs), 500)))
    got = exact_resemblances(sets, i, j)
    assert np.array_equal(got, [python_jaccard(arrays[x], arrays[y]) for x, y in zip(i.tolist(), j.tolist())])
    assert np.allclose(got, [exact_resemblance(arrays[x], arrays[y]) for x, y in zip(i.tolist(), j.tolist())])
    assert len(ci) > 10 and got[:len(ci)].max() == 1.0  # Reuters has re-sent stories among the first 400


def test_set_signatures_are_the_fingerprint_signatures(reuters_docs, fp):
    docs = [d for d in reuters_docs if d["body"]][:150]
    arrays = [fp.shingles(fp.canonical_tokens(f"{d['title']}\n{d['body']}")) for d in docs]
    rng = np.random.default_rng(10)
    arrays += [random_set(rng, 9000), np.array([U64], dtype=np.uint64)]  # several blocks; the largest value
    got = set_signatures(ShingleSets.from_arrays(arrays), multipliers(PARAMS.seed, K))
    assert np.array_equal(got, np.stack([fp.fingerprint_shingles(s).signature for s in arrays]))
    assert np.array_equal(got[:150], np.stack([fp.fingerprint_fields([d["title"], d["body"]]).signature
                                               for d in docs]))
    assert np.all(set_signatures(ShingleSets.from_arrays([np.empty(0, np.uint64)]), multipliers(PARAMS.seed, K)) == U64)


def test_verifying_a_few_texts_does_not_load_numba():
    """Loading numba costs about a second per process: small verifications stay on NumPy."""
    code = """
import sys
import numpy as np
from neardup.fingerprint import Fingerprinter, FingerprintParams
from neardup.fingerprint.hashing import multipliers
from neardup.fingerprint.verify import ShingleSets, exact_resemblances, set_signatures
params = FingerprintParams()
fp = Fingerprinter(params)
sets = ShingleSets.from_arrays([fp.shingles(fp.canonical_tokens(t)) for t in
                                ["the cat sat on the mat today", "the cat sat on a mat today", "dogs bark loudly"]])
set_signatures(sets, multipliers(params.seed, params.num_perm))
print(exact_resemblances(sets, np.array([0, 0]), np.array([1, 2])).tolist())
assert "numba" not in sys.modules, "numba was loaded"
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert result.returncode == 0, result.stderr


def test_bad_pairs_are_refused():
    sets = ShingleSets.from_arrays([np.array([1, 2], dtype=np.uint64)])
    with pytest.raises(IndexError):
        pair_intersections(sets, np.array([0]), np.array([1]))
    with pytest.raises(ValueError):
        pair_intersections(sets, np.array([0]), np.array([0, 0]))
    assert len(exact_resemblances(sets, np.empty(0, np.int64), np.empty(0, np.int64))) == 0


# --- the margin -------------------------------------------------------------------------------------

def test_margin_is_five_standard_errors_at_the_threshold():
    assert estimate_margin(0.8, 84) == pytest.approx(5 * math.sqrt(0.8 * 0.2 / 84))
    assert round(estimate_margin(0.8, 84), 4) == 0.2182 and round(estimate_margin(0.5, 84), 4) == 0.2728
    assert estimate_margin(0.8, 84, sigmas=3) == pytest.approx(3 * math.sqrt(0.8 * 0.2 / 84))
    assert estimate_margin(1.0, 84) == 0.0 and lowered_threshold(0.0, 84) == 0.0
    assert lowered_banding(0.8, 84).rows == 4 and lowered_banding(0.5, 84).rows == 2
    assert lowered_banding(0.4, 84).rows == 2  # not 1: the S-curve at t - δ would ask for one row
    with pytest.raises(ValueError):
        estimate_margin(1.2, 84)


@pytest.mark.parametrize("threshold", [0.5, 0.8, 0.9])
def test_estimate_miss_bounds_every_resemblance_at_or_above_the_threshold(threshold):
    """P(Ĵ < t - δ | J) is largest at J = t (the binomial is stochastically increasing)."""
    bound = estimate_miss(threshold, K)
    low = needed_matches(lowered_threshold(threshold, K), K)
    assert 0 < bound < 1e-5 and 0 < estimate_miss(threshold, K, sigmas=3) < 0.004
    for resemblance in np.linspace(threshold, 1.0, 12):
        tail = sum(math.comb(K, m) * resemblance ** m * (1 - resemblance) ** (K - m) for m in range(low))
        assert tail <= bound + 1e-15
    # the banding loses at most BAND_MISS of the pairs at J = t passing the floor, and fewer above
    banding = lowered_banding(threshold, K)
    assert banding_miss(threshold, K, banding.rows) <= BAND_MISS
    assert banding_miss(threshold, K, banding.rows + 1) > BAND_MISS or banding.rows + 1 > K // 2
    for resemblance in np.linspace(threshold, 1.0, 6):
        miss = sum(math.comb(K, m) * resemblance ** m * (1 - resemblance) ** (K - m)
                   * (1 - candidate_probability_given_matches(m, K, banding.rows, banding.bands))
                   for m in range(low, K + 1))
        assert miss <= banding_miss(threshold, K, banding.rows) + 1e-15


# --- planted pairs: exact resemblance just above t, estimate below ---------------------------------------

def planted_pair(fp: Fingerprinter, seed: int, common: int, apart: int) -> tuple[np.ndarray, np.ndarray]:
    """Two sets sharing ``common`` values, ``apart`` values of their own each."""
    rng = np.random.default_rng(seed)
    values = rng.integers(0, U64, common + 2 * apart, dtype=np.uint64, endpoint=True)
    shared = values[:common]
    a = np.unique(np.concatenate((shared, values[common:common + apart])))
    b = np.unique(np.concatenate((shared, values[common + apart:])))
    return a, b


def estimate(fp: Fingerprinter, a: np.ndarray, b: np.ndarray) -> float:
    return float(np.count_nonzero(fp.fingerprint_shingles(a).signature == fp.fingerprint_shingles(b).signature)) / K


def planted_collection(fp: Fingerprinter, threshold: float, pairs: int, common: int, apart: int,
                       below: bool) -> list[tuple[np.ndarray, np.ndarray]]:
    """The first ``pairs`` planted pairs (seeds 0, 1, ...) whose estimate is on the other side of
    t than their exact resemblance (deterministic)."""
    found = []
    for seed in itertools.count():
        a, b = planted_pair(fp, seed, common, apart)
        if (estimate(fp, a, b) < threshold) != below:
            found.append((a, b))
            if len(found) == pairs:
                return found
        assert seed < 5000


@pytest.mark.parametrize("threshold,common,apart", [(0.8, 168, 20), (0.5, 100, 49)])
def test_pairs_just_above_the_threshold_with_a_low_estimate_are_candidates_and_linked(fp, threshold, common, apart):
    jaccard = common / (common + 2 * apart)
    assert threshold <= jaccard < threshold + 0.03
    pairs = planted_collection(fp, threshold, 30, common, apart, below=False)
    rng = np.random.default_rng(11)
    arrays = [s for pair in pairs for s in pair] + [random_set(rng, int(rng.integers(50, 250))) for _ in range(200)]
    sets = ShingleSets.from_arrays(arrays)
    signatures = np.stack([fp.fingerprint_shingles(s).signature for s in arrays])
    counts = sets.sizes
    planted_i = np.arange(0, 60, 2)
    # the estimate misses all of them ...
    ei, ej, _ = similar_pairs(signatures, counts, threshold, "resemblance")
    assert not set(zip(ei.tolist(), ej.tolist())) & set(zip(planted_i.tolist(), (planted_i + 1).tolist()))
    # ... the candidates at t - δ find all of them
    ci, cj, _ = candidate_pairs(signatures, counts, lowered_banding(threshold, K, PARAMS.groups),
                                lowered_threshold(threshold, K))
    found = set(zip(ci.tolist(), cj.tolist()))
    assert all((int(a), int(a) + 1) in found for a in planted_i)
    # ... and exact verification links them: the clusters are exact single-link's
    exact = brute_force_exact(sets, counts, threshold)
    assert all(exact[a] == exact[a + 1] for a in planted_i)
    reference = verified_single_link(signatures, counts, sets, threshold, PARAMS.groups)
    assert np.array_equal(canonical(reference), canonical(exact))
    params = text_params(ClusterParams(threshold, choose_banding(threshold, K, PARAMS.groups)), K, PARAMS.groups)
    hooked = cluster_signatures(signatures, counts, params, verify=set_verifier(sets))
    assert np.array_equal(canonical(hooked.labels), canonical(exact))
    without = cluster_signatures(signatures, counts, ClusterParams(threshold, choose_banding(threshold, K)))
    assert all(without.labels[a] != without.labels[a + 1] for a in planted_i)


def test_pairs_just_below_the_threshold_with_a_high_estimate_are_not_linked(fp):
    threshold = 0.8
    pairs = planted_collection(fp, threshold, 10, 152, 20, below=True)  # J = 0.7917, Ĵ ≥ 0.8
    arrays = [s for pair in pairs for s in pair]
    sets = ShingleSets.from_arrays(arrays)
    signatures = np.stack([fp.fingerprint_shingles(s).signature for s in arrays])
    params = text_params(ClusterParams(threshold, choose_banding(threshold, K)), K, 0)
    hooked = cluster_signatures(signatures, sets.sizes, params, verify=set_verifier(sets))
    assert hooked.clusters == len(arrays)
    rejected = set(zip(hooked.near_rejected.i.tolist(), hooked.near_rejected.j.tolist()))
    assert rejected == {(a, a + 1) for a in range(0, 20, 2)} and np.all(hooked.near_rejected.sim < threshold)
    plain = cluster_signatures(signatures, sets.sizes, ClusterParams(threshold, choose_banding(threshold, K)))
    assert plain.clusters == len(arrays) // 2


# --- the hook against exact single-link on collections with chains --------------------------------------------

def edited_collection(fp: Fingerprinter, seed: int, n: int) -> tuple[ShingleSets, np.ndarray, np.ndarray]:
    """Sets where about half are edited copies of an earlier one (a share of values replaced),
    so resemblances spread over the whole range; a few empty sets."""
    rng = np.random.default_rng(seed)
    arrays: list[np.ndarray] = []
    for d in range(n):
        if d and rng.random() < 0.5:
            base = arrays[int(rng.integers(0, d))]
            keep = rng.random(len(base)) >= rng.uniform(0, 0.35)
            arrays.append(np.unique(np.concatenate((base[keep], random_set(rng, int((~keep).sum()))))))
        elif rng.random() < 0.03:
            arrays.append(np.empty(0, np.uint64))
        else:
            arrays.append(random_set(rng, int(rng.integers(20, 300))))
    sets = ShingleSets.from_arrays(arrays)
    signatures = np.stack([fp.fingerprint_shingles(s).signature for s in arrays])
    return sets, signatures, sets.sizes


@pytest.mark.parametrize("threshold", [0.5, 0.7, 0.8, 0.9])
@pytest.mark.parametrize("rounds", [True, False])
def test_hook_clusters_equal_the_reference_and_exact_single_link(fp, threshold, rounds):
    sets, signatures, counts = edited_collection(fp, 20 + int(threshold * 10), 400)
    params = text_params(ClusterParams(threshold, choose_banding(threshold, K, PARAMS.groups), rounds=rounds),
                         K, PARAMS.groups)
    calls: list[int] = []
    verifier = set_verifier(sets)

    def counted(i, j, equal):
        assert np.all(equal >= needed_matches(threshold - params.margin, K))
        calls.append(len(i))
        return verifier(i, j, equal)

    hooked = cluster_signatures(signatures, counts, params, verify=counted)
    reference = verified_single_link(signatures, counts, sets, threshold, PARAMS.groups)
    assert np.array_equal(canonical(hooked.labels), canonical(reference))
    exact = brute_force_exact(sets, counts, threshold)
    assert np.array_equal(canonical(hooked.labels), canonical(exact))
    assert sum(calls) == sum(r.verified for r in hooked.rounds) > 0
    assert np.all(hooked.near_linked.sim >= threshold - EPS)


def exact_single_link_sparse(arrays: list[np.ndarray], threshold: float) -> np.ndarray:
    """Exact single-link over every pair sharing a shingle (an incidence matrix product)."""
    from scipy import sparse

    sizes = np.array([len(a) for a in arrays])
    _, column = np.unique(np.concatenate(arrays), return_inverse=True)
    rows = np.repeat(np.arange(len(arrays)), sizes)
    incidence = sparse.csr_matrix((np.ones(len(rows), dtype=np.int32), (rows, column.ravel())))
    shared = sparse.triu(incidence @ incidence.T, k=1).tocoo()
    i, j, inter = shared.row.astype(np.int64), shared.col.astype(np.int64), shared.data.astype(np.int64)
    linked = links(inter / (sizes[i] + sizes[j] - inter), threshold)
    return group_labels(len(arrays), i[linked], j[linked])


@pytest.mark.parametrize("threshold", [0.5, 0.8])
def test_on_reuters_the_clusters_are_exact_single_links_and_the_estimates_are_not(reuters_docs, fp, threshold):
    docs = [d for d in reuters_docs if d["body"]][:3000]
    arrays = [fp.shingles(fp.canonical_tokens(f"{d['title']}\n{d['body']}")) for d in docs]
    prints = [fp.fingerprint_fields([d["title"], d["body"]]) for d in docs]
    signatures = np.stack([p.signature for p in prints])
    counts = np.array([p.shingle_count for p in prints])
    assert np.array_equal(counts, [len(a) for a in arrays])  # the sets the signatures were computed from
    exact = exact_single_link_sparse(arrays, threshold)
    params = text_params(ClusterParams(threshold, choose_banding(threshold, K, PARAMS.groups)), K, PARAMS.groups)
    hooked = cluster_signatures(signatures, counts, params, verify=set_verifier(ShingleSets.from_arrays(arrays)))
    assert np.array_equal(canonical(hooked.labels), canonical(exact))
    estimated = cluster_signatures(signatures, counts, ClusterParams(threshold, choose_banding(threshold, K, 14)))
    assert not np.array_equal(canonical(estimated.labels), canonical(exact))  # what --verify text is for


def test_identical_signatures_are_joined_only_if_the_hook_links_them():
    sigs = np.zeros((4, K), dtype=np.uint64)
    sigs[:2] = 5
    sigs[2:] = 7
    rows = np.arange(4)
    labels, joined = merge_identical(sigs, rows, np.arange(4))
    assert joined == 2 and list(labels) == [0, 0, 2, 2]
    labels, joined = merge_identical(sigs, rows, np.arange(4), link=lambda a, b: a < 2)
    assert joined == 1 and list(labels) == [0, 0, 2, 3]
    params = ClusterParams(0.8, choose_banding(0.8, K), margin=0.1)
    result = cluster_signatures(sigs, np.ones(4, dtype=np.int64), params,
                                verify=lambda i, j, equal: np.where(i == 0, 1.0, 0.5))
    assert list(result.labels) == [0, 0, 2, 3]


def test_a_hook_returning_the_wrong_shape_is_an_error():
    sigs = np.zeros((2, K), dtype=np.uint64)
    with pytest.raises(ValueError, match="one value per pair"):
        cluster_signatures(sigs, np.ones(2, dtype=np.int64), ClusterParams(0.8, choose_banding(0.8, K)),
                           verify=lambda i, j, equal: np.ones(3))


# --- Elasticsearch --------------------------------------------------------------------------------------------

def word_texts(fp: Fingerprinter, threshold: float, below: bool) -> tuple[str, str]:
    """Two texts of made-up words (the second with a few words replaced) whose exact
    resemblance, as ``neardup index`` shingles them (title + body), is at or above t while the
    estimate is below it (``below=False``), or the other way round (deterministic search)."""
    letters = "bcdfghjklmnpqrstvwxz"
    for seed in range(5000):
        rng = np.random.default_rng(seed)
        words = ["q" + "".join(rng.choice(list(letters), 7)) for _ in range(int(rng.integers(90, 130)))]
        edited = list(words)
        for position in rng.choice(np.arange(5, len(words) - 5), int(rng.integers(3, 5)), replace=False):
            edited[position] = "z" + "".join(rng.choice(list(letters), 7))
        a, b = " ".join(words), " ".join(edited)
        sa = fp.shingles(fp.canonical_tokens("title\n" + a))
        sb = fp.shingles(fp.canonical_tokens("title\n" + b))
        jaccard = python_jaccard(sa, sb)
        est = float(np.count_nonzero(fp.fingerprint_fields(["title", a]).signature
                                     == fp.fingerprint_fields(["title", b]).signature)) / K
        if below and threshold - 0.05 < jaccard < threshold <= est:
            return a, b
        if not below and threshold <= jaccard < threshold + 0.05 and est < threshold:
            return a, b
    raise AssertionError("no such texts found")


def cluster_json(es_url: str, index: str, *args: str) -> dict[str, Any]:
    result = run_neardup(["cluster", "--index", index, "--threshold", "0.8", "--json", *args], es_url)
    assert result.returncode == 0, result.stderr.decode(errors="replace")
    return json.loads(result.stdout)


@pytest.mark.es
def test_text_verification_clusters_by_exact_resemblance(es, es_url, fp):
    a, b = word_texts(fp, 0.8, below=False)   # J ≥ 0.8 > Ĵ
    c, d = word_texts(fp, 0.8, below=True)    # J < 0.8 ≤ Ĵ
    e = " ".join(f"qe{k:04d}x" for k in range(80))
    docs = [{"id": "a", "title": "title", "body": a}, {"id": "b", "title": "title", "body": b},
            {"id": "c", "title": "title", "body": c}, {"id": "d", "title": "title", "body": d},
            {"id": "e", "title": "title", "body": e}, {"id": "f", "title": "title", "body": e},
            {"id": "g", "title": "nothing", "body": "else at all here"}, {"id": "h", "title": "title", "body": e}]
    name = f"clustering-quality-{uuid.uuid4().hex[:8]}"
    es.indices.create(index=name, body={"settings": {"number_of_shards": 2, "number_of_replicas": 0}})
    try:
        bulk_load(es, name, docs)
        assert run_neardup(["index", "--index", name], es_url).returncode == 0
        # f's text changes after it was fingerprinted: its pairs fall back to the estimate
        es.update(index=name, id="f", body={"doc": {"body": e + " and a changed ending"}}, refresh=True)
        # h's text fields are emptied: no text to verify with either
        es.update(index=name, id="h", body={"doc": {"title": None, "body": None}}, refresh=True)

        def clusters() -> dict[str, str]:
            return {hit["_id"]: hit["_source"][FIELD]["cluster"] for hit in es.search(
                index=name, body={"size": 100, "_source": [f"{FIELD}.cluster"]})["hits"]["hits"]}

        text = cluster_json(es_url, name)  # --verify text is the default
        ids = clusters()
        assert ids["a"] == ids["b"] and ids["c"] != ids["d"] and ids["e"] == ids["f"] == ids["h"]
        assert len(set(ids.values())) == 5
        verification = text["verification"]
        assert verification["method"] == "text" and verification["text_changed"] == 1
        assert verification["no_text"] == 1 and sorted(verification["examples"]) == [f"{name}/f", f"{name}/h"]
        assert verification["documents_exact"] >= 4 and verification["pairs_by_estimate"] >= 1
        assert verification["floor"] == pytest.approx(0.8 - estimate_margin(0.8, K))
        meta = mappings(es, name)["_meta"][META_KEY]
        assert meta["verification"] == "text" and meta["state"] == "ready" and meta["threshold"] == 0.8

        signature = cluster_json(es_url, name, "--verify", "signature")
        ids = clusters()
        assert ids["a"] != ids["b"] and ids["c"] == ids["d"] and ids["e"] == ids["f"]
        assert signature["verification"]["method"] == "signature" and signature["updated"] >= 2
        meta = mappings(es, name)["_meta"][META_KEY]
        assert meta["verification"] == "signature"

        # other fields than the index job's: no text gives its fingerprint; said, and verified by estimate
        result = run_neardup(["cluster", "--index", name, "--threshold", "0.8", "--json", "--field", "body"], es_url)
        assert result.returncode == 0, result.stderr.decode(errors="replace")
        summary = json.loads(result.stdout)["verification"]
        assert summary["documents_exact"] == 0 and summary["pairs_exact"] == 0
        assert "are --field body the fields `neardup index` fingerprinted" in result.stderr.decode()
    finally:
        delete_index(es, name)


@pytest.mark.es
def test_text_verification_across_indices_and_with_routing(es, es_url, fp):
    """Keys are ``<_index>/<_id>`` when a pattern covers several indices; a routed document is
    read back with its routing."""
    a, b = word_texts(fp, 0.8, below=False)   # J ≥ 0.8 > Ĵ
    prefix = f"clustering-quality-multi-{uuid.uuid4().hex[:8]}"
    first, second = f"{prefix}-1", f"{prefix}-2"
    for name in (first, second):
        es.indices.create(index=name, body={"settings": {"number_of_shards": 2, "number_of_replicas": 0}})
    try:
        es.index(index=first, id="a", body={"title": "title", "body": a})
        es.index(index=second, id="b", body={"title": "title", "body": b}, routing="elsewhere")
        es.index(index=second, id="c", body={"title": "other", "body": "quite another story " * 5})
        es.indices.refresh(index=f"{prefix}-*")
        assert run_neardup(["index", "--index", f"{prefix}-*"], es_url).returncode == 0
        summary = cluster_json(es_url, f"{prefix}-*")
        assert summary["verification"]["documents_exact"] == 2 and summary["verification"]["pairs_exact"] == 1
        got = {(hit["_index"], hit["_id"]): hit["_source"][FIELD]["cluster"] for hit in es.search(
            index=f"{prefix}-*", body={"size": 10, "_source": [f"{FIELD}.cluster"]})["hits"]["hits"]}
        assert got[(first, "a")] == got[(second, "b")] == f"{first}/a"
        assert got[(second, "c")] == f"{second}/c"
    finally:
        delete_index(es, f"{first},{second}")
