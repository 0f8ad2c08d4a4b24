"""Similarity of shingle sets, exact and estimated, and all similar pairs among N fingerprints.

**Exact.** For shingle sets A, B: resemblance ``J(A, B) = |A∩B| / |A∪B|`` (Jaccard) and
containment ``C(A, B) = |A∩B| / |A|`` (the share of A found in B). Both are 0 when A is
empty (an empty document resembles and is contained in nothing).

**Estimated resemblance.** With K minhash slots, each slot matches with probability J
(see :mod:`fingerprint.hashing`), so the share of equal slots ``Ĵ = m / K`` is an unbiased
estimate with standard deviation ``sqrt(J(1-J)/K)`` (≤ 0.055 for K = 84).

**Estimated containment.** From Ĵ and the exact shingle counts a = |A|, b = |B|:
``|A∩B| = J (a + b) / (1 + J)`` (because |A∪B| = a + b - |A∩B|), so
``Ĉ(A, B) = Ĵ (a + b) / ((1 + Ĵ) a)``, clipped to [0, 1]. The error of Ĵ is amplified by
``(a + b) / a``: containment of a small document in a much larger one is estimated coarsely.

**All pairs** (:func:`similar_pairs`). Rows with identical signatures (copies of one
document) are collapsed first and expanded again at the end, so N copies cost N, not N².
Candidates come from band collisions: the K slots are cut into B bands, each band's
values are combined into one 64-bit key, the B key columns are sorted (all in one call) and
every pair of rows with equal keys in a column is emitted (cost proportional to the number
of (pair, band) collisions, not to N²). For resemblance at threshold t a pair needs
``m ≥ ⌈tK⌉`` equal slots, i.e. at most ``u = K - ⌈tK⌉`` unequal ones; an unequal slot spoils
at most one band, so with ``B = u + 1`` bands at least one band is wholly equal
(pigeonhole): at t = 0.8, 17 bands of 4–5 slots. The result is still exactly the set an
all-pairs comparison of the estimates finds (a key collision only adds a candidate), while
unrelated pairs that happen to share a single slot, common among search hits on one topic,
no longer become candidates. Candidates are verified by comparing their full signatures.
For containment every slot is its own band (any shared slot makes a candidate).

Limit (containment): a pair is found only if its signatures share at least one slot,
which happens with probability ``1 - (1 - J)^K``. A document A wholly contained in a much
larger B has ``J = a / b``; for ``b > K·a`` (84 times larger by default) the pair is likely to
be missed. Pairs with an estimate of 0 are never returned, whatever the threshold.
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np

from fingerprint.hashing import GOLDEN
from fingerprint.model import Fingerprint

Mode = Literal["resemblance", "containment"]


def _as_sets(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return np.unique(np.asarray(a, dtype=np.uint64)), np.unique(np.asarray(b, dtype=np.uint64))


def intersection_size(a_hashes: np.ndarray, b_hashes: np.ndarray) -> int:
    a, b = _as_sets(a_hashes, b_hashes)
    return int(np.intersect1d(a, b, assume_unique=True).size)


def exact_resemblance(a_hashes: np.ndarray, b_hashes: np.ndarray) -> float:
    """Jaccard similarity |A∩B| / |A∪B| of two shingle-hash sets (0 if both are empty)."""
    a, b = _as_sets(a_hashes, b_hashes)
    inter = np.intersect1d(a, b, assume_unique=True).size
    union = a.size + b.size - inter
    return inter / union if union else 0.0


def exact_containment(a_hashes: np.ndarray, b_hashes: np.ndarray) -> float:
    """|A∩B| / |A|: the share of A's shingles found in B (0 if A is empty)."""
    a, b = _as_sets(a_hashes, b_hashes)
    if a.size == 0:
        return 0.0
    return np.intersect1d(a, b, assume_unique=True).size / a.size


def _check_comparable(f1: Fingerprint, f2: Fingerprint) -> None:
    if f1.version != f2.version:
        raise ValueError(f"fingerprints of different schemes are not comparable: {f1.version} vs {f2.version}")


def estimated_resemblance(f1: Fingerprint, f2: Fingerprint) -> float:
    """Ĵ = share of equal minhash slots (0 if either document is empty)."""
    _check_comparable(f1, f2)
    if f1.shingle_count == 0 or f2.shingle_count == 0:
        return 0.0
    return float(np.count_nonzero(f1.signature == f2.signature)) / len(f1.signature)


def containment_from_resemblance(j: np.ndarray | float, a: np.ndarray | float,
                                 b: np.ndarray | float) -> np.ndarray | float:
    """Ĉ(A, B) = J (a + b) / ((1 + J) a), clipped to [0, 1]; 0 where a = 0."""
    j = np.asarray(j, dtype=np.float64)
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        c = j * (a + b) / ((1.0 + j) * a)
    c = np.where(a > 0, np.clip(c, 0.0, 1.0), 0.0)
    return float(c) if c.ndim == 0 else c


def estimated_containment(f1: Fingerprint, f2: Fingerprint) -> float:
    """Ĉ(A, B): estimated share of f1's shingles found in f2's document."""
    j = estimated_resemblance(f1, f2)
    return float(containment_from_resemblance(j, f1.shingle_count, f2.shingle_count))


def _run_members(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Concatenation of ``arange(s, s + L)`` for all runs, vectorised."""
    first = np.cumsum(lengths) - lengths
    return np.arange(int(lengths.sum())) - np.repeat(first - starts, lengths)


def pairs_within_runs(starts: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Positions (p, q), p < q, of every pair inside each run ``[s, s + L)``: Σ L(L-1)/2 pairs,
    generated with array arithmetic (no loop over runs)."""
    members = _run_members(starts, lengths)
    partners = np.repeat(starts + lengths, lengths) - members - 1  # members after each one
    left = np.repeat(members, partners)
    block_start = np.cumsum(partners) - partners
    right = left + 1 + np.arange(left.size) - np.repeat(block_start, partners)
    return left, right


def _runs(equal_next: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Starts and lengths of the runs (length ≥ 2) of a sequence, from "equals the next one"."""
    boundary = np.flatnonzero(np.concatenate(([True], ~equal_next, [True])))
    starts, lengths = boundary[:-1], np.diff(boundary)
    keep = lengths > 1
    return starts[keep], lengths[keep]


def _slot_weights(k: int) -> np.ndarray:
    """K distinct odd 64-bit multipliers: a sum of slot values times these keys a row (or a
    band) so that different values collide with probability about 2^-64."""
    return (np.arange(1, 2 * k, 2, dtype=np.uint64) * np.uint64(GOLDEN)) | np.uint64(1)


def _identical_rows(signatures: np.ndarray) -> np.ndarray:
    """Group number of each row; rows with equal signatures share it (numbered 0 … G-1 in the
    order of their first row). Rows are keyed by a 64-bit combination of their values; the
    grouping is checked against the rows themselves and, in the (2^-64) event of a collision,
    every row gets its own group."""
    keys = (signatures * _slot_weights(signatures.shape[1])).sum(axis=1, dtype=np.uint64)
    _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    inverse = inverse.reshape(-1)
    if not np.array_equal(signatures, signatures[first[inverse]]):
        return np.arange(len(signatures))
    renumber = np.empty(len(first), dtype=np.int64)  # groups in the order of their first row
    renumber[np.argsort(first, kind="stable")] = np.arange(len(first))
    return renumber[inverse]


def band_keys(signatures: np.ndarray, bands: int) -> np.ndarray:
    """(N, bands) ``uint64``: the K slots cut into ``bands`` contiguous bands of ⌊K/bands⌋ or
    ⌈K/bands⌉ slots, each band's values combined into one key (a sum with distinct odd
    multipliers, mod 2^64). Rows equal in a whole band have equal keys; unequal bands collide
    with probability about 2^-64."""
    n, k = signatures.shape
    if bands >= k:
        return signatures
    edges = (np.arange(bands + 1) * k) // bands
    with np.errstate(over="ignore"):
        weighted = signatures * _slot_weights(k)
    return np.add.reduceat(weighted, edges[:-1], axis=1, dtype=np.uint64)


def _candidate_pairs(signatures: np.ndarray, bands: int) -> np.ndarray:
    """Codes ``i * n + j`` (i < j) of the pairs of rows equal in at least one whole band
    (:func:`band_keys`), each once: all key columns are sorted at once, and each run of L equal
    keys in a column yields its L(L-1)/2 pairs."""
    n = len(signatures)
    columns = np.ascontiguousarray(band_keys(signatures, bands).T)  # (bands, n)
    order = np.argsort(columns, axis=1)
    values = np.take_along_axis(columns, order, axis=1).reshape(-1)
    equal_next = values[1:] == values[:-1]
    equal_next[n - 1::n] = False  # the last row of a column and the first of the next
    if not equal_next.any():
        return np.empty(0, dtype=np.int64)
    left, right = pairs_within_runs(*_runs(equal_next))
    rows = order.reshape(-1)
    i, j = rows[left], rows[right]
    return np.unique(np.minimum(i, j).astype(np.int64) * n + np.maximum(i, j))


def similar_pairs(signatures: np.ndarray, counts: np.ndarray, threshold: float,
                  mode: Mode = "resemblance") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """All pairs (i < j) whose estimated similarity is ≥ ``threshold`` (and > 0).

    ``signatures``: (N, K) ``uint64``; ``counts``: (N,) shingle counts (0 = empty document,
    never similar to anything). ``mode="resemblance"``: sim = Ĵ. ``mode="containment"``:
    sim = max(Ĉ(i in j), Ĉ(j in i)). Returns ``(i, j, sim)`` sorted by (i, j). See the module
    docstring for the method, its cost and the containment limit.

    Identical signatures (copies of one document are common in search results) are
    collapsed first: candidates are generated among distinct signatures only, then
    expanded to every member pair, so N copies cost N, not N² per slot.
    """
    signatures = np.asarray(signatures)
    counts = np.asarray(counts)
    if signatures.ndim != 2 or signatures.dtype != np.uint64:
        raise ValueError(f"signatures must be an (N, K) uint64 array, got {signatures.dtype} {signatures.shape}")
    n, k = signatures.shape
    if counts.shape != (n,):
        raise ValueError(f"counts must have shape ({n},), got {counts.shape}")
    if mode not in ("resemblance", "containment"):
        raise ValueError(f"mode = {mode!r}: must be 'resemblance' or 'containment'")
    if not (isinstance(threshold, (int, float)) and not isinstance(threshold, bool) and 0.0 <= threshold <= 1.0):
        raise ValueError(f"threshold = {threshold!r}: must be a number from 0 to 1")
    empty = (np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float64))
    rows = np.flatnonzero(counts > 0)
    if rows.size < 2 or k == 0:
        return empty
    if mode == "resemblance":
        need = max(1, math.ceil(threshold * k - 1e-9))
        bands = k - need + 1
    else:
        need, bands = 1, k

    if rows.size <= DIRECT_LIMIT:
        lo, hi, sim = _all_pairs(signatures, rows, need)
    else:
        lo, hi, sim = _pairs_sharing_bands(signatures, rows, need, bands)
    if mode == "containment":
        ci = containment_from_resemblance(sim, counts[lo], counts[hi])
        cj = containment_from_resemblance(sim, counts[hi], counts[lo])
        sim = np.maximum(ci, cj)
        keep = sim >= threshold
        lo, hi, sim = lo[keep], hi[keep], sim[keep]
    order = np.lexsort((hi, lo))
    return lo[order], hi[order], np.asarray(sim[order], dtype=np.float64)


#: Up to this many fingerprinted rows, comparing every pair directly is cheaper than the
#: per-slot sorts (m(m-1)/2 × K comparisons: 170k for m = 64), and gives the same pairs.
DIRECT_LIMIT = 64


def _all_pairs(signatures: np.ndarray, rows: np.ndarray, need: int
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every pair of ``rows`` with at least ``need`` equal slots: ``(lo, hi, Ĵ)``, lo < hi."""
    k = signatures.shape[1]
    a, b = np.triu_indices(rows.size, 1)
    sig = signatures[rows]
    equal = np.count_nonzero(sig[a] == sig[b], axis=1)
    keep = equal >= need
    return rows[a[keep]].astype(np.int64), rows[b[keep]].astype(np.int64), equal[keep] / k


def _pairs_sharing_bands(signatures: np.ndarray, rows: np.ndarray, need: int, bands: int
                         ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Like :func:`_all_pairs`, at a cost proportional to the pairs that share one of
    ``bands`` bands (see :func:`band_keys`)."""
    k = signatures.shape[1]
    # Distinct signatures among the non-empty rows; members of each, grouped.
    group = _identical_rows(signatures[rows])
    groups = int(group.max()) + 1
    members = rows[np.argsort(group, kind="stable")]
    sizes = np.bincount(group, minlength=groups)
    first = np.cumsum(sizes) - sizes
    distinct = signatures[members[first]]

    # Pairs of distinct signatures sharing a band, verified on all K slots.
    codes = _candidate_pairs(distinct, bands) if groups > 1 else np.empty(0, dtype=np.int64)
    g1, g2 = codes // groups, codes % groups
    equal = np.count_nonzero(distinct[g1] == distinct[g2], axis=1)
    keep = equal >= need
    g1, g2, equal = g1[keep], g2[keep], equal[keep]
    # Every member of g1 with every member of g2 …
    combos = sizes[g1] * sizes[g2]
    pair = np.repeat(np.arange(len(g1)), combos)
    offset = np.arange(int(combos.sum())) - np.repeat(np.cumsum(combos) - combos, combos)
    width = sizes[g2][pair]
    a = members[first[g1][pair] + offset // width]
    b = members[first[g2][pair] + offset % width]
    # … and every pair inside a group (identical signatures: all K slots equal).
    inside_left, inside_right = pairs_within_runs(first[sizes > 1], sizes[sizes > 1])
    i = np.concatenate((np.minimum(a, b), members[inside_left])).astype(np.int64)
    j = np.concatenate((np.maximum(a, b), members[inside_right])).astype(np.int64)
    sim = np.concatenate((equal[pair], np.full(inside_left.size, k))) / k
    return i, j, sim  # a < b above; inside a group, members are in ascending row order


def group_labels(n: int, i: np.ndarray, j: np.ndarray) -> np.ndarray:
    """Connected components of the graph on ``n`` nodes with edges (i, j).

    Each node's label is the smallest node index in its component (so labels are
    transitive groups, and a node without edges is its own group). Min-label propagation
    with pointer jumping: every label is always a node of the same component and never
    increases, and at the fixed point all nodes of a component carry its smallest index.
    """
    labels = np.arange(n, dtype=np.int64)
    i = np.asarray(i, dtype=np.int64)
    j = np.asarray(j, dtype=np.int64)
    if i.shape != j.shape:
        raise ValueError("i and j must have the same length")
    if i.size == 0:
        return labels
    if i.min() < 0 or j.min() < 0 or max(i.max(), j.max()) >= n:
        raise ValueError(f"pair indices must be in [0, {n})")
    while True:
        low = np.minimum(labels[i], labels[j])
        updated = labels.copy()
        np.minimum.at(updated, i, low)
        np.minimum.at(updated, j, low)
        while True:  # pointer jumping: follow labels until they point at a root
            jumped = updated[updated]
            if np.array_equal(jumped, updated):
                break
            updated = jumped
        if np.array_equal(updated, labels):
            return labels
        labels = updated
