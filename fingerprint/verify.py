"""Exact verification of candidate pairs from the documents' shingle sets (pure, NumPy; numba optional).

The LSH clustering (:mod:`fingerprint.clustering`) links two documents when their estimated
resemblance ``Ĵ = m / K`` (m equal slots of K minhashes) is at least the threshold t. The
estimate is binomial: ``m ~ Bin(K, J)``, standard error ``σ(J) = sqrt(J(1 - J) / K)`` (0.044 at
J = 0.8, K = 84), so a pair whose *exact* resemblance J is at or just above t falls below t by
the estimate almost half the time, and a pair just below t is linked as often. Exact single-link
(the reference of bench/cluster.py) links on J itself. This module makes the clustering link on
J too, while still comparing only LSH candidates:

1. **Lowered candidate threshold.** Candidates are the pairs sharing an LSH key of the banding
   chosen for ``t - δ`` (:func:`lowered_banding`) whose estimate passes ``Ĵ ≥ t - δ``, with

       δ = z · σ(t) = z · sqrt(t (1 - t) / K)        (z = 3 by default: :data:`SIGMAS`)

   **Why σ at J = t is enough for every J ≥ t.** ``Bin(K, p)`` is stochastically increasing
   in p, so ``P(Ĵ < t - δ | J)`` is largest at the smallest J that matters, J = t. The chance
   that a pair with J ≥ t fails the estimate filter is therefore at most

       ε_est = P(Bin(K, t) < m_low),   m_low = ⌈K (t - δ)⌉                  (:func:`estimate_miss`)

   computed exactly (not by the normal approximation, which understates the binomial tail):
   for K = 84 and z = 3, ε_est = 0.0029 at t = 0.8 (t - δ = 0.669, m_low = 57) and 0.0015 at
   t = 0.5 (t - δ = 0.336, m_low = 29), and far smaller for J a little above t (the tail falls
   geometrically). Near t = 1 the binomial is skewed and ⌈·⌉ matters more: up to 0.007 for
   0.9 ≤ t ≤ 0.98 and 0.01 at t = 0.99 (a larger z lowers it, at the cost of more candidates). A pair passing the filter is missed by the banding with probability at most
   ``1 - P(candidate | m_low)`` (:func:`fingerprint.lsh.candidate_probability_given_matches`):
   7·10^-4 at t = 0.8 (4 rows × 21 bands), 5·10^-4 at t = 0.5 (2 rows × 42 bands). Single link
   needs only one path between two members, so a cluster is split only when every path is lost.
2. **Exact resemblance** ``J = |A ∩ B| / |A ∪ B|`` of every candidate, from the sorted arrays of
   distinct shingle hashes of the two documents (:func:`exact_resemblances`; the same sets the
   signatures were computed from: :meth:`fingerprint.Fingerprinter.shingles`). A pair is *linked*
   when ``J ≥ t`` (to within :data:`EPS`, as bench/quality/truth.py decides it). Candidates the
   estimate filter rejects are never linked.
3. **Components** of the links (:func:`fingerprint.group_labels`).

So no pair below t is ever linked (exact verification: precision against exact single-link is
1), and a pair at or above t is lost with probability at most ``ε_est + 1 - P(candidate | m_low)``
(recall). The cost is the candidates between ``t - δ`` and t, whose texts must be read and
shingled (on Reuters at t = 0.8: 608 pairs with Ĵ ≥ t - δ against 487 with Ĵ ≥ t).

:func:`verified_single_link` is the whole method in one pure function (all candidate pairs
enumerated at once: the reference for tests). ``neardup cluster`` does the same inside the
iterative rounds of :func:`fingerprint.clustering.cluster_signatures` (its ``verify`` hook,
which skips pairs already joined; the components are the same), reading the texts of only the
documents of pairs that need it (:mod:`indexer.cluster_verify`).

**Intersections** (:func:`pair_intersections`). The sets of D documents are held as one sorted-
per-document ``uint64`` array with offsets (:class:`ShingleSets`). The NumPy reference
concatenates the two sets of each pair of a block, sorts by (pair, value) and counts adjacent
equal values (a value occurs at most once per set, so a repeat within a pair is a shared
shingle): O(L log L) for L elements. The compiled kernel (numba, loaded lazily through
:mod:`fingerprint.jit`, used when compiled kernels are enabled) merges the two sorted arrays of
each pair in one pass: O(|A| + |B|) per pair. Both give the same integers
(tests/test_cluster_verify.py). The kernel is used when numba is loaded already or the work is
large (:data:`COMPILED_MIN_ELEMENTS`): loading numba costs about a second per process, far more
than NumPy needs for the few thousand candidate pairs of a collection like Reuters.

**Is a text still the one that was fingerprinted?** :func:`set_signatures` recomputes the
MinHash signatures of shingle sets with NumPy (the integers of
:func:`fingerprint.hashing.minhash`), so the shell can compare them with the stored ones
without loading the compiled kernels.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from fingerprint.clustering import PairVerifier, equal_slots, unique_pairs
from fingerprint.lsh import Banding, choose_banding, needed_matches
from fingerprint.similarity import group_labels, pairs_within_runs

#: Default z of the margin δ = z·σ(t).
SIGMAS = 3.0
#: Tolerance of the comparison J ≥ t (the one bench/quality/truth.py uses).
EPS = 1e-12  # the same as fingerprint.clustering.VERIFY_EPS
#: Elements (|A| + |B| summed over pairs) handled at once by the NumPy reference.
BLOCK_ELEMENTS = 1 << 22
#: Below this many elements the NumPy reference is used unless the compiled kernels are already
#: loaded: loading numba costs about a second per process, more than NumPy takes for this much.
COMPILED_MIN_ELEMENTS = 1 << 24
#: Shingles per block of :func:`set_signatures` (block × K products at once).
SIGNATURE_BLOCK = 4096


# --- the margin ------------------------------------------------------------------------------------

def estimate_margin(threshold: float, num_perm: int, sigmas: float = SIGMAS) -> float:
    """δ = z · sqrt(t (1 - t) / K): how far below t the estimate of a pair with J = t may fall."""
    if not 0.0 <= threshold <= 1.0:
        raise ValueError(f"threshold = {threshold!r}: must be from 0 to 1")
    if num_perm < 1 or sigmas < 0:
        raise ValueError("num_perm must be positive and sigmas not negative")
    return sigmas * math.sqrt(threshold * (1.0 - threshold) / num_perm)


def lowered_threshold(threshold: float, num_perm: int, sigmas: float = SIGMAS) -> float:
    """``max(t - δ, 0)``: the estimate a candidate needs."""
    return max(threshold - estimate_margin(threshold, num_perm, sigmas), 0.0)


def estimate_miss(threshold: float, num_perm: int, sigmas: float = SIGMAS) -> float:
    """``P(Bin(K, t) < m_low)``: the most a pair with J ≥ t can fail the estimate filter
    (exact binomial sum; see the module docstring)."""
    low = needed_matches(lowered_threshold(threshold, num_perm, sigmas), num_perm)
    t = threshold
    return float(sum(math.comb(num_perm, m) * t ** m * (1 - t) ** (num_perm - m) for m in range(low)))


def lowered_banding(threshold: float, num_perm: int, groups: int = 0, sigmas: float = SIGMAS) -> Banding:
    """The banding chosen (:func:`fingerprint.lsh.choose_banding`) for ``t - δ``."""
    return choose_banding(lowered_threshold(threshold, num_perm, sigmas), num_perm, groups)


# --- shingle sets and exact resemblance -------------------------------------------------------------

@dataclass(frozen=True)
class ShingleSets:
    """D sets of distinct shingle hashes: set d is ``values[offsets[d]:offsets[d + 1]]``, sorted."""

    values: np.ndarray   # uint64
    offsets: np.ndarray  # int64, D + 1

    @classmethod
    def from_arrays(cls, arrays: Sequence[np.ndarray]) -> "ShingleSets":
        """From sorted arrays of distinct values (as :meth:`Fingerprinter.shingles` returns)."""
        offsets = np.zeros(len(arrays) + 1, dtype=np.int64)
        if arrays:
            np.cumsum([len(a) for a in arrays], out=offsets[1:])
            values = np.concatenate([np.asarray(a, dtype=np.uint64) for a in arrays])
        else:
            values = np.empty(0, dtype=np.uint64)
        return cls(values, offsets)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @property
    def sizes(self) -> np.ndarray:
        return np.diff(self.offsets)


def _ramp(counts: np.ndarray) -> np.ndarray:
    """Concatenation of ``arange(c)`` for each count c."""
    starts = np.cumsum(counts) - counts
    return np.arange(int(counts.sum()), dtype=np.int64) - np.repeat(starts, counts)


def pair_intersections_numpy(sets: ShingleSets, a: np.ndarray, b: np.ndarray,
                             block_elements: int = BLOCK_ELEMENTS) -> np.ndarray:
    """``|set a[p] ∩ set b[p]|`` for each pair p (the NumPy reference)."""
    a = np.asarray(a, dtype=np.int64)
    b = np.asarray(b, dtype=np.int64)
    out = np.zeros(len(a), dtype=np.int64)
    if len(a) == 0:
        return out
    sizes = sets.sizes
    weight = sizes[a] + sizes[b]
    total = np.cumsum(weight)
    first = 0
    while first < len(a):
        base = total[first - 1] if first else 0
        last = max(first + 1, int(np.searchsorted(total, base + block_elements, side="right")))
        part = slice(first, min(last, len(a)))
        pa, pb = a[part], b[part]
        la, lb = sizes[pa], sizes[pb]
        pairs = np.arange(len(pa), dtype=np.int64)
        positions = np.concatenate((np.repeat(sets.offsets[pa], la) + _ramp(la),
                                    np.repeat(sets.offsets[pb], lb) + _ramp(lb)))
        owner = np.concatenate((np.repeat(pairs, la), np.repeat(pairs, lb)))
        values = sets.values[positions]
        order = np.lexsort((values, owner))
        values, owner = values[order], owner[order]
        shared = (values[1:] == values[:-1]) & (owner[1:] == owner[:-1])
        out[part] = np.bincount(owner[1:][shared], minlength=len(pa))
        first = last
    return out


def _kernel(elements: int) -> Callable[..., None] | None:
    """The compiled merge kernel if compiled kernels are enabled and numba is importable, and
    either they are loaded already or the work (``elements``) is worth loading them."""
    from fingerprint import jit

    if "fingerprint._kernels" not in sys.modules and elements < COMPILED_MIN_ELEMENTS:
        return None
    if jit.kernels() is None:
        return None
    from fingerprint._verify_kernels import pair_intersections as kernel

    return kernel


def pair_intersections(sets: ShingleSets, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``|set a[p] ∩ set b[p]|`` for each pair p (compiled merge if available and worth it,
    else NumPy: the same integers)."""
    a = np.ascontiguousarray(a, dtype=np.int64)
    b = np.ascontiguousarray(b, dtype=np.int64)
    if a.shape != b.shape:
        raise ValueError("a and b must have the same length")
    if len(a) and (min(a.min(), b.min()) < 0 or max(a.max(), b.max()) >= len(sets)):
        raise IndexError("pair index out of range")
    sizes = sets.sizes
    kernel = _kernel(int(sizes[a].sum() + sizes[b].sum()) if len(a) else 0)
    if kernel is None:
        return pair_intersections_numpy(sets, a, b)
    out = np.empty(len(a), dtype=np.int64)
    kernel(np.ascontiguousarray(sets.values, dtype=np.uint64), np.ascontiguousarray(sets.offsets, dtype=np.int64),
           a, b, out)
    return out


def set_signatures(sets: ShingleSets, multipliers: np.ndarray) -> np.ndarray:
    """(D, K) MinHash signatures ``min_{x ∈ set d} a_k·x mod 2^64`` of the sets (all-max for an
    empty set): the integers :func:`fingerprint.hashing.minhash` gives with the multipliers
    ``a`` of the scheme (:func:`fingerprint.hashing.multipliers`), computed with NumPy over
    blocks of :data:`SIGNATURE_BLOCK` shingles of all sets at once (no compiled kernel to load)."""
    a = np.asarray(multipliers, dtype=np.uint64)
    out = np.full((len(sets), len(a)), np.iinfo(np.uint64).max, dtype=np.uint64)
    sizes = sets.sizes
    owner = np.repeat(np.arange(len(sets), dtype=np.int64), sizes)
    for start in range(0, len(sets.values), SIGNATURE_BLOCK):
        values = sets.values[start:start + SIGNATURE_BLOCK]
        owners = owner[start:start + SIGNATURE_BLOCK]
        products = np.multiply(values[:, None], a[None, :])   # wraps modulo 2^64
        starts = np.flatnonzero(np.concatenate(([True], owners[1:] != owners[:-1])))
        np.minimum.at(out, owners[starts], np.minimum.reduceat(products, starts, axis=0))
    return out


def exact_resemblances(sets: ShingleSets, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Jaccard ``|A∩B| / |A∪B|`` of each pair (0 when both sets are empty), float64."""
    inter = pair_intersections(sets, a, b)
    sizes = sets.sizes
    union = sizes[np.asarray(a, dtype=np.int64)] + sizes[np.asarray(b, dtype=np.int64)] - inter
    out = np.zeros(len(inter), dtype=np.float64)
    np.divide(inter, union, out=out, where=union > 0)
    return out


def links(similarity: np.ndarray, threshold: float) -> np.ndarray:
    """Which pairs are linked: ``similarity ≥ t`` (to within :data:`EPS`)."""
    return np.asarray(similarity, dtype=np.float64) >= threshold - EPS


# --- candidates and the reference clustering -----------------------------------------------------------

def candidate_pairs(signatures: np.ndarray, counts: np.ndarray, banding: Banding, floor: float
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every distinct pair (i < j) of non-empty documents sharing a key of ``banding`` whose
    estimate is at least ``floor``: ``(i, j, equal slots)``. All pairs of every bucket are
    enumerated (quadratic in bucket size: for tests and moderate collections)."""
    signatures = np.asarray(signatures)
    counts = np.asarray(counts)
    n = len(signatures)
    rows = np.flatnonzero(counts > 0)
    empty = np.empty(0, np.int64)
    if len(rows) < 2:
        return empty, empty, empty
    keys = banding.keys(signatures[rows])
    flat = keys.ravel()
    owners = np.repeat(rows, keys.shape[1])
    order = np.argsort(flat, kind="stable")
    flat, owners = flat[order], owners[order]
    change = np.flatnonzero(np.concatenate(([True], flat[1:] != flat[:-1], [True])))
    starts, lengths = change[:-1], np.diff(change)
    multi = lengths > 1
    left, right = pairs_within_runs(starts[multi], lengths[multi])
    i, j = unique_pairs(owners[left], owners[right], n)
    keep = i != j
    i, j = i[keep], j[keep]
    equal = equal_slots(signatures, i, j)
    passed = equal >= needed_matches(floor, signatures.shape[1])
    return i[passed], j[passed], equal[passed]


def verified_single_link(signatures: np.ndarray, counts: np.ndarray, sets: ShingleSets, threshold: float,
                         groups: int = 0, sigmas: float = SIGMAS) -> np.ndarray:
    """Labels of single-link clusters at exact resemblance ≥ ``threshold`` over the LSH
    candidates at ``t - δ`` (steps 1–3 of the module docstring). ``sets`` holds document d's
    shingle set at position d."""
    num_perm = np.asarray(signatures).shape[1]
    banding = lowered_banding(threshold, num_perm, groups, sigmas)
    i, j, _ = candidate_pairs(signatures, counts, banding, lowered_threshold(threshold, num_perm, sigmas))
    linked = links(exact_resemblances(sets, i, j), threshold)
    return group_labels(len(signatures), i[linked], j[linked])


def set_verifier(sets: ShingleSets) -> PairVerifier:
    """A :data:`PairVerifier` for :func:`fingerprint.clustering.cluster_signatures` when every
    document's set is in memory (document d at position d): the exact resemblance."""
    def verify(i: np.ndarray, j: np.ndarray, equal: np.ndarray) -> np.ndarray:
        return exact_resemblances(sets, i, j)
    return verify
