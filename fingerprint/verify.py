"""Exact verification of candidate pairs from the documents' shingle sets (pure, NumPy; numba optional).

The LSH clustering (:mod:`neardup.fingerprint.clustering`) links two documents when their
estimated resemblance ``Ĵ = m / K`` (m equal slots of K minhashes) is at least the threshold t.
The estimate is binomial: ``m ~ Bin(K, J)``, standard error ``σ(J) = sqrt(J(1 - J) / K)`` (0.044
at J = 0.8, K = 84), so a pair whose *exact* resemblance J is at or just above t falls below t by
the estimate almost half the time, and a pair just below t is linked as often. Exact single-link
links on J itself. This module makes the clustering link on J too, while still comparing only
LSH candidates:

1. **Lowered estimate floor.** A candidate must have ``Ĵ ≥ t - δ``, with

       δ = z · σ(t) = z · sqrt(t (1 - t) / K)        (z = 5 by default: :data:`SIGMAS`)

   **Why σ at J = t covers every J ≥ t.** ``Bin(K, p)`` is stochastically increasing in p, so
   ``P(Ĵ < t - δ | J)`` is largest at the smallest J that matters, J = t. Under the binomial
   model the chance that a pair with J ≥ t fails the floor is therefore at most

       ε_est = P(Bin(K, t) < m_low),   m_low = ⌈K (t - δ)⌉                  (:func:`estimate_miss`)

   computed exactly (the normal approximation understates the binomial's tails). For K = 84 and
   z = 5: δ = 0.218 at t = 0.8 (t - δ = 0.582, m_low = 49, ε_est = 1.6·10^-6) and δ = 0.273 at
   t = 0.5 (t - δ = 0.227, m_low = 20, ε_est = 2.4·10^-7).

   **Why z = 5.** Real estimates have a heavier lower tail than the binomial model, so a smaller
   margin loses pairs the model says it keeps; z = 5 was chosen by the clustering benchmark
   (docs/benchmarks.md), with which the verified clusters equal exact single-link's at every
   threshold tried. A wider margin does not change the candidates compared (same banding), only
   the pairs and texts to verify. At low thresholds t - δ is small and those become many;
   ``--verify signature`` is the cheap choice there.
2. **Banding** (:func:`lowered_banding`): the most rows per band whose *banding miss*

       ε_band = Σ_{m ≥ m_low} P(Bin(K, t) = m) · (1 - P(candidate | m))     (:func:`banding_miss`)

   is at most :data:`BAND_MISS` (10^-3), with ``P(candidate | m)`` of
   :func:`neardup.fingerprint.lsh.candidate_probability_given_matches`: the chance that a pair
   with J = t passes the floor but shares no band. ``P(candidate | m)`` grows with m and the
   binomial with J, so ε_band bounds every J ≥ t too. This is the criterion that matters: an
   S-curve target at s = t - δ would be far too strict (at low thresholds it forces one row per
   band, so that any shared slot makes a candidate). K = 84: 4 rows × 21 bands at t = 0.8
   (ε_band = 1.6·10^-5), 2 × 42 at t = 0.5 (5.6·10^-6), 7 × 12 at t = 0.9; supershingle groups
   that hold no whole band are extra keys, as in :class:`~neardup.fingerprint.lsh.Banding`.
3. **Exact resemblance** ``J = |A ∩ B| / |A ∪ B|`` of every candidate passing the floor, from
   the sorted arrays of distinct shingle hashes of the two documents (:func:`exact_resemblances`;
   the sets the signatures were computed from: :meth:`neardup.fingerprint.Fingerprinter.shingles`).
   A pair is *linked* when ``J ≥ t`` (to within :data:`EPS`).
4. **Components** of the links (:func:`neardup.fingerprint.group_labels`).

So no pair below t is ever linked (precision against exact single-link is 1), and under the
binomial model a pair at or above t is lost with probability at most ``ε_est + ε_band`` (about
2·10^-5 at t = 0.8); single link needs only one path between two members, so a cluster is split
only when every path is lost. The cost is the pairs between ``t - δ`` and t, and the texts of
the candidates' documents, which must be read and shingled.

:func:`verified_single_link` is the whole method in one pure function (all candidate pairs
enumerated at once: the reference for tests). ``neardup cluster`` does the same inside the
iterative rounds of :func:`neardup.fingerprint.clustering.cluster_signatures` (its ``verify``
hook, which skips pairs already joined; the components are the same), reading the texts of only
the documents of pairs that need it (:mod:`neardup.indexer.cluster.verification`).

**Intersections** (:func:`pair_intersections`). The sets of D documents are held as one sorted-
per-document ``uint64`` array with offsets (:class:`ShingleSets`). The NumPy reference
concatenates the two sets of each pair of a block, sorts by (pair, value) and counts adjacent
equal values (a value occurs at most once per set, so a repeat within a pair is a shared
shingle): O(L log L) for L elements. The compiled kernel (numba, loaded lazily through
:mod:`neardup.fingerprint.jit`, used when compiled kernels are enabled) merges the two sorted
arrays of each pair in one pass: O(|A| + |B|) per pair. Both give the same integers
(tests/test_cluster_verify.py). The kernel is used when numba is loaded already or the work is
large (:data:`COMPILED_MIN_ELEMENTS`): loading numba costs a process more than NumPy needs for
the candidate pairs of a small collection.

**Is a text still the one that was fingerprinted?** :func:`set_signatures` recomputes the
MinHash signatures of shingle sets with NumPy (the integers of
:func:`neardup.fingerprint.hashing.minhash`), so the shell can compare them with the stored ones
without loading the compiled kernels.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from neardup.fingerprint.clustering import VERIFY_EPS, PairVerifier, equal_slots, unique_pairs
from neardup.fingerprint.lsh import Banding, candidate_probability_given_matches, needed_matches
from neardup.fingerprint.similarity import group_labels, pairs_within_runs

#: Default z of the margin δ = z·σ(t).
SIGMAS = 5.0
#: Most the banding may add to the chance of losing a pair with J ≥ t (:func:`lowered_banding`).
BAND_MISS = 1e-3
#: Tolerance of the comparison J ≥ t (the clustering's
#: :data:`~neardup.fingerprint.clustering.VERIFY_EPS`).
EPS = VERIFY_EPS
#: Elements (|A| + |B| summed over pairs) handled at once by the NumPy reference.
BLOCK_ELEMENTS = 1 << 22
#: Below this many elements the NumPy reference is used unless the compiled kernels are already
#: loaded: loading numba costs a process more than NumPy takes for this much.
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


def _binomial(num_perm: int, p: float) -> list[float]:
    """``P(Bin(K, p) = m)`` for m = 0 … K."""
    return [math.comb(num_perm, m) * p ** m * (1 - p) ** (num_perm - m) for m in range(num_perm + 1)]


def banding_miss(threshold: float, num_perm: int, rows: int, sigmas: float = SIGMAS) -> float:
    """``ε_band = Σ_{m ≥ m_low} P(Bin(K, t) = m) · (1 - P(candidate | m))`` for bands of ``rows``
    rows (``⌊K / rows⌋`` bands): the chance that a pair with J = t passes the estimate floor but
    shares no band; the most for any J ≥ t (module docstring)."""
    low = needed_matches(lowered_threshold(threshold, num_perm, sigmas), num_perm)
    weights = _binomial(num_perm, threshold)
    bands = num_perm // rows
    return float(sum(w * (1.0 - candidate_probability_given_matches(m, num_perm, rows, bands))
                     for m, w in enumerate(weights) if m >= low and w > 1e-18))


def lowered_banding(threshold: float, num_perm: int, groups: int = 0, sigmas: float = SIGMAS,
                    budget: float = BAND_MISS) -> Banding:
    """The banding with the most rows whose :func:`banding_miss` is at most ``budget`` (and
    the supershingle groups of a scheme with ``groups`` groups that contain no whole band).
    One row per band always qualifies: any shared slot makes a candidate, so ε_band = 0."""
    best = 1
    for rows in range(2, num_perm + 1):
        if banding_miss(threshold, num_perm, rows, sigmas) <= budget:
            best = rows
        elif rows > 2 * best + 8:  # ε_band grows with the rows: stop well past the last that qualified
            break
    return Banding(num_perm, best, num_perm // best, groups)


# --- shingle sets and exact resemblance -------------------------------------------------------------

@dataclass(frozen=True)
class ShingleSets:
    """D sets of distinct shingle hashes: set d is ``values[offsets[d]:offsets[d + 1]]``, sorted."""

    values: np.ndarray   # uint64
    offsets: np.ndarray  # int64, D + 1

    @classmethod
    def from_arrays(cls, arrays: Sequence[np.ndarray]) -> ShingleSets:
        """From sorted arrays of distinct values (as
        :meth:`~neardup.fingerprint.Fingerprinter.shingles` returns)."""
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
    from neardup.fingerprint import jit

    if "neardup.fingerprint._kernels" not in sys.modules and elements < COMPILED_MIN_ELEMENTS:
        return None
    if jit.kernels() is None:
        return None
    from neardup.fingerprint._verify_kernels import pair_intersections as kernel

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
    empty set): the integers :func:`neardup.fingerprint.hashing.minhash` gives with the multipliers
    ``a`` of the scheme (:func:`neardup.fingerprint.hashing.multipliers`), computed with NumPy over
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
    """A :data:`PairVerifier` for :func:`neardup.fingerprint.clustering.cluster_signatures` when
    every document's set is in memory (document d at position d): the exact resemblance."""
    def verify(i: np.ndarray, j: np.ndarray, equal: np.ndarray) -> np.ndarray:
        return exact_resemblances(sets, i, j)
    return verify
