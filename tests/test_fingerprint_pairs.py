"""``similar_pairs`` against an all-pairs reference: the same pairs, order, dtypes and bit-identical
similarities, on random and search-like windows of 2..1000 rows, both modes, thresholds 0..1,
through every path (sorted band keys stepped or enumerated at once, the copy-collapsing path,
the high-bit collision check)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from neardup.fingerprint import similar_pairs, similarity
from neardup.fingerprint.similarity import containment_from_resemblance

K = 84
THRESHOLDS = [0.0, 0.01, 0.3, 0.5, 0.51, 0.7, 0.8, 0.85, 0.9, 0.95, 0.99, 1.0]


def equal_slots(signatures: np.ndarray) -> np.ndarray:
    """(N, N) number of equal slots of every pair (blocks of rows against all rows)."""
    n = len(signatures)
    out = np.empty((n, n), dtype=np.int64)
    for start in range(0, n, 64):
        block = signatures[start:start + 64]
        out[start:start + 64] = np.count_nonzero(block[:, None, :] == signatures[None, :, :], axis=2)
    return out


def reference(signatures: np.ndarray, counts: np.ndarray, threshold: float, mode: str,
              equal: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every pair of non-empty rows compared on all slots."""
    k = signatures.shape[1]
    equal = equal_slots(signatures) if equal is None else equal
    need = max(1, math.ceil(threshold * k - 1e-9)) if mode == "resemblance" else 1
    i, j = np.nonzero(np.triu(equal >= need, 1) & (counts > 0)[:, None] & (counts > 0)[None, :])
    i, j = i.astype(np.int64), j.astype(np.int64)
    sim = equal[i, j] / k
    if mode == "containment":
        sim = np.maximum(containment_from_resemblance(sim, counts[i], counts[j]),
                         containment_from_resemblance(sim, counts[j], counts[i]))
        keep = sim >= threshold
        i, j, sim = i[keep], j[keep], sim[keep]
    return i, j, np.asarray(sim, dtype=np.float64)   # np.nonzero: sorted by (i, j)


def assert_same(got: tuple[np.ndarray, ...], expected: tuple[np.ndarray, ...]) -> None:
    for g, e in zip(got, expected):
        assert g.dtype == e.dtype and g.shape == e.shape
        assert np.array_equal(g, e)


def random_window(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    signatures = rng.integers(0, 2**64 - 1, size=(n, K), dtype=np.uint64)
    return signatures, rng.integers(1, 500, size=n)


def search_like_window(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Clusters of near-copies (a signature copied, a few slots perturbed), exact copies (some
    with another shingle count), topic-wide shared slot values, empty rows."""
    signatures = rng.integers(0, 2**64 - 1, size=(n, K), dtype=np.uint64)
    counts = rng.integers(1, 2000, size=n)
    common = rng.integers(0, 2**64 - 1, size=K, dtype=np.uint64)  # one topic's frequent shingles
    for _ in range(int(rng.integers(0, max(2, n // 6)))):
        source = int(rng.integers(n))
        for target in rng.integers(0, n, size=int(rng.integers(1, 7))):
            signatures[target] = signatures[source]
            perturbed = rng.random(K) < rng.choice([0.0, 0.02, 0.1, 0.2, 0.3, 0.6])
            signatures[target, perturbed] = rng.integers(0, 2**64 - 1, size=int(perturbed.sum()), dtype=np.uint64)
            if rng.random() < 0.5:
                counts[target] = counts[source]
    shared = rng.random((n, K)) < 0.03
    signatures[shared] = np.broadcast_to(common, (n, K))[shared]
    empty = rng.random(n) < 0.05
    counts[empty] = 0
    return signatures, counts


def few_values_window(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Slot values from a tiny alphabet: long runs of equal keys, many chance agreements."""
    return rng.integers(0, 3, size=(n, K), dtype=np.uint64), rng.integers(0, 40, size=n)


WINDOWS = {"random": random_window, "search": search_like_window, "few": few_values_window}


@pytest.mark.parametrize("kind", sorted(WINDOWS))
@pytest.mark.parametrize("mode", ["resemblance", "containment"])
def test_similar_pairs_equals_all_pairs_on_windows_of_2_to_300_rows(kind: str, mode: str) -> None:
    rng = np.random.default_rng(sum(map(ord, kind + mode)))
    for trial in range(40):
        n = int(rng.integers(2, 301)) if trial % 4 else int(rng.integers(2, 20))
        signatures, counts = WINDOWS[kind](rng, n)
        equal = equal_slots(signatures)
        for threshold in rng.choice(THRESHOLDS, size=3, replace=False).tolist() + [float(rng.random())]:
            assert_same(similar_pairs(signatures, counts, threshold, mode),
                        reference(signatures, counts, threshold, mode, equal))


@pytest.mark.parametrize("mode", ["resemblance", "containment"])
def test_similar_pairs_equals_all_pairs_on_windows_of_1000_rows(mode: str) -> None:
    rng = np.random.default_rng(1000)
    for kind in ("search", "search", "random"):
        signatures, counts = WINDOWS[kind](rng, 1000)
        equal = equal_slots(signatures)
        for threshold in (0.0, 0.5, 0.8, 1.0):
            assert_same(similar_pairs(signatures, counts, threshold, mode),
                        reference(signatures, counts, threshold, mode, equal))


@pytest.mark.parametrize("path", ["collapse copies", "step 2", "enumerate runs"])
@pytest.mark.parametrize("mode", ["resemblance", "containment"])
def test_every_path_gives_the_same_pairs(monkeypatch: pytest.MonkeyPatch, path: str, mode: str) -> None:
    """Forced: the copy-collapsing path for every size; runs followed only up to distance 1;
    runs always enumerated at once."""
    if path == "collapse copies":
        monkeypatch.setattr(similarity, "SORT_LIMIT", 1)
    elif path == "step 2":
        monkeypatch.setattr(similarity, "STEP_RUNS", 2)
    else:
        monkeypatch.setattr(similarity, "STEP_RUNS", 1)
    rng = np.random.default_rng(len(path))
    for trial in range(30):
        signatures, counts = WINDOWS[["search", "few", "random"][trial % 3]](rng, int(rng.integers(2, 200)))
        equal = equal_slots(signatures)
        for threshold in (0.0, 0.5, 0.8, 0.9, 1.0):
            assert_same(similar_pairs(signatures, counts, threshold, mode),
                        reference(signatures, counts, threshold, mode, equal))


@pytest.mark.parametrize("mode", ["resemblance", "containment"])
def test_many_copies_fall_back_to_collapsing_them(monkeypatch: pytest.MonkeyPatch, mode: str) -> None:
    calls = []
    original = similarity._pairs_sharing_bands
    monkeypatch.setattr(similarity, "_pairs_sharing_bands", lambda *a: calls.append(1) or original(*a))
    rng = np.random.default_rng(5)
    signatures, counts = search_like_window(rng, 400)
    signatures[100:300] = signatures[7]          # 201 copies of one document
    i, j, sim = similar_pairs(signatures, counts, 0.8, mode)
    assert calls                                  # runs of 201 equal keys in every band
    assert_same((i, j, sim), reference(signatures, counts, 0.8, mode))
    copies = np.count_nonzero(counts[np.r_[7, 100:300]])
    assert len(i) >= copies * (copies - 1) // 2


@pytest.mark.parametrize("mode", ["resemblance", "containment"])
def test_slot_values_equal_in_their_high_bits_only_are_not_counted_as_equal(mode: str) -> None:
    """The sort key keeps a slot value's high bits (the row number replaces the low ones): values
    that differ only in low bits meet in one run and must still not count as equal slots."""
    rng = np.random.default_rng(9)
    signatures, counts = search_like_window(rng, 120)
    counts[:] = np.maximum(counts, 1)
    signatures[1] = signatures[0] ^ np.uint64(1)          # every slot differs in bit 0 only
    signatures[2] = signatures[0]
    signatures[2, :40] ^= np.uint64(2)                    # 40 slots differ in bit 1 only
    i, j, sim = similar_pairs(signatures, counts, 0.3 if mode == "resemblance" else 0.0, mode)
    assert_same((i, j, sim), reference(signatures, counts, 0.3 if mode == "resemblance" else 0.0, mode))
    pairs = set(zip(i.tolist(), j.tolist()))
    assert (0, 1) not in pairs and (1, 2) not in pairs
    assert (0, 2) in pairs


def test_edge_windows() -> None:
    sig = np.arange(2 * K, dtype=np.uint64).reshape(2, K)
    for counts in ([0, 0], [5, 0], [0, 5]):              # fewer than two non-empty rows
        assert_same(similar_pairs(sig, np.array(counts), 0.5), reference(sig, np.array(counts), 0.5, "resemblance"))
    same = np.repeat(sig[:1], 2, axis=0)
    for mode in ("resemblance", "containment"):
        for counts in ([1, 1], [1, 10**6], [3, 0]):
            for threshold in (0.0, 1.0, 1):
                got = similar_pairs(same, np.array(counts), threshold, mode)
                assert_same(got, reference(same, np.array(counts), threshold, mode))
    one_slot, three = np.array([[5], [5], [6]], dtype=np.uint64), np.array([1, 2, 3])   # K = 1
    assert_same(similar_pairs(one_slot, three, 1.0), reference(one_slot, three, 1.0, "resemblance"))
    no_slots = np.zeros((3, 0), dtype=np.uint64)
    assert all(len(x) == 0 for x in similar_pairs(no_slots, np.array([1, 2, 3]), 0.5))


def test_max_containment_is_bit_identical_to_the_maximum_of_both_directions() -> None:
    rng = np.random.default_rng(3)
    j = rng.integers(1, K + 1, size=20000) / K
    a = rng.integers(1, 10**6, size=20000)
    b = np.where(rng.random(20000) < 0.2, a, rng.integers(1, 10**6, size=20000))
    b[:50] = 1
    expected = np.maximum(containment_from_resemblance(j, a, b), containment_from_resemblance(j, b, a))
    assert np.array_equal(similarity.max_containment(j, a, b), expected)
