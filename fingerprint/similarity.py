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

**All pairs** (:func:`similar_pairs`). A pair can only have a non-zero estimate if its
signatures agree in some slot, so candidates come from slot collisions: for each slot the
column is sorted and every pair of rows with equal values is emitted (cost proportional to
the number of (pair, slot) collisions, not to N²). For resemblance at threshold t a pair
needs ``m ≥ ⌈tK⌉`` equal slots, i.e. at most ``K - ⌈tK⌉`` unequal ones, so it must agree in at
least one of any ``K - ⌈tK⌉ + 1`` slots (pigeonhole): only that many slots are scanned, and
the result is still exactly the set an all-pairs comparison of the estimates finds.
Candidates are then verified by comparing their full signatures. For containment every
slot is scanned (any shared slot makes a candidate).

Limit (containment): a pair is found only if its signatures share at least one slot,
which happens with probability ``1 - (1 - J)^K``. A document A wholly contained in a much
larger B has ``J = a / b``; for ``b > K·a`` (84 times larger by default) the pair is likely to
be missed. Pairs with an estimate of 0 are never returned, whatever the threshold.
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np

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


def _pairs_sharing(column: np.ndarray, rows: np.ndarray, n: int) -> np.ndarray:
    """Codes ``i * n + j`` (i < j, row indices from ``rows``) of pairs equal in ``column``.

    Sorts the column; each run of L equal values yields its L(L-1)/2 pairs, generated
    with array arithmetic (no loop over runs).
    """
    order = np.argsort(column, kind="stable")
    values = column[order]
    equal_next = values[1:] == values[:-1]
    if not equal_next.any():
        return np.empty(0, dtype=np.int64)
    # Runs of equal values: start positions and lengths (only runs of length >= 2).
    boundary = np.flatnonzero(np.concatenate(([True], ~equal_next, [True])))
    starts, lengths = boundary[:-1], np.diff(boundary)
    keep = lengths > 1
    starts, lengths = starts[keep], lengths[keep]
    # Every member at local position p pairs with the L-1-p members after it.
    members = _run_members(starts, lengths)
    run_end = np.repeat(starts + lengths, lengths)
    partners = run_end - members - 1
    left = np.repeat(members, partners)
    # right = left + 1, left + 2, …: offset within each left's block of partners.
    block_start = np.cumsum(partners) - partners
    offset = np.arange(left.size) - np.repeat(block_start, partners) + 1
    right = left + offset
    i, j = rows[order[left]], rows[order[right]]
    lo, hi = np.minimum(i, j), np.maximum(i, j)
    return lo.astype(np.int64) * n + hi


def _run_members(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Concatenation of ``arange(s, s + L)`` for all runs, vectorised."""
    total = int(lengths.sum())
    first = np.cumsum(lengths) - lengths
    return np.arange(total) - np.repeat(first, lengths) + np.repeat(starts, lengths)


def similar_pairs(signatures: np.ndarray, counts: np.ndarray, threshold: float,
                  mode: Mode = "resemblance") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """All pairs (i < j) whose estimated similarity is ≥ ``threshold`` (and > 0).

    ``signatures``: (N, K) ``uint64``; ``counts``: (N,) shingle counts (0 = empty document,
    never similar to anything). ``mode="resemblance"``: sim = Ĵ. ``mode="containment"``:
    sim = max(Ĉ(i in j), Ĉ(j in i)). Returns ``(i, j, sim)`` sorted by (i, j). See the module
    docstring for the method, its cost and the containment limit.
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
    if not (isinstance(threshold, (int, float)) and 0.0 <= threshold <= 1.0):
        raise ValueError(f"threshold = {threshold!r}: must be a number from 0 to 1")
    empty = (np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float64))
    rows = np.flatnonzero(counts > 0)
    if rows.size < 2 or k == 0:
        return empty
    sigs = signatures[rows]

    if mode == "resemblance":
        need = max(1, math.ceil(threshold * k - 1e-9))
        scan = k - need + 1
    else:
        need, scan = 1, k
    codes = [_pairs_sharing(sigs[:, slot], rows, n) for slot in range(scan)]
    codes = np.unique(np.concatenate(codes)) if codes else np.empty(0, dtype=np.int64)
    if codes.size == 0:
        return empty
    i, j = codes // n, codes % n
    equal = np.count_nonzero(signatures[i] == signatures[j], axis=1)
    keep = equal >= need
    i, j, equal = i[keep], j[keep], equal[keep]
    sim = equal / k
    if mode == "containment":
        ci = containment_from_resemblance(sim, counts[i], counts[j])
        cj = containment_from_resemblance(sim, counts[j], counts[i])
        sim = np.maximum(ci, cj)
        keep = sim >= threshold
        i, j, sim = i[keep], j[keep], sim[keep]
    return i, j, np.asarray(sim, dtype=np.float64)


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
