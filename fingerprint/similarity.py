"""Similarity of shingle sets, exact and estimated, and all similar pairs among N fingerprints.

**Exact.** For shingle sets A, B: resemblance ``J(A, B) = |A∩B| / |A∪B|`` (Jaccard) and
containment ``C(A, B) = |A∩B| / |A|`` (the share of A found in B). Both are 0 when A is
empty (an empty document resembles and is contained in nothing).

**Estimated resemblance.** With K minhash slots, each slot matches with probability J
(see :mod:`neardup.fingerprint.hashing`), so the share of equal slots ``Ĵ = m / K`` is an unbiased
estimate with standard deviation ``sqrt(J(1-J)/K)`` (≤ 0.055 for K = 84).

**Estimated containment.** From Ĵ and the exact shingle counts a = |A|, b = |B|:
``|A∩B| = J (a + b) / (1 + J)`` (because |A∪B| = a + b - |A∩B|), so
``Ĉ(A, B) = Ĵ (a + b) / ((1 + Ĵ) a)``, clipped to [0, 1]. The error of Ĵ is amplified by
``(a + b) / a``: containment of a small document in a much larger one is estimated coarsely.

**All pairs** (:func:`similar_pairs`). Candidates come from band collisions: for resemblance at
threshold t a pair needs ``m ≥ ⌈tK⌉`` equal slots, i.e. at most ``u = K - ⌈tK⌉`` unequal ones;
an unequal slot spoils at most one band, so among ``B = u + 1`` disjoint bands at least one is
wholly equal (pigeonhole): at t = 0.8, 17 bands. For containment every slot is its own band
(any shared slot makes a candidate). Each band's values are combined into one 64-bit key, the
keys of each band are sorted, and every pair of rows with equal keys in a band is a candidate
(cost proportional to the number of (pair, band) collisions, not to N²). Candidates are
verified on the full signatures, so the result is exactly the set an all-pairs comparison of
the estimates finds (a key collision only adds a candidate), while unrelated pairs that happen
to share a single slot, common among search hits on one topic, do not become candidates.

Two implementations give the same result. Up to :data:`SORT_LIMIT` rows (search windows),
:func:`_pairs_by_sorting` does it in a bounded number of NumPy calls whatever the window holds
(on a window of search hits the fixed cost of a call outweighs its arithmetic): bands of
⌊K/B⌋ slots, the row number stored in each key's low bits so that one plain sort replaces an
argsort, runs of equal keys followed step by step, no per-copy work.
Above it, and when runs of equal keys are very long (many copies of one document),
:func:`_pairs_sharing_bands` collapses rows with identical signatures first and expands them
again at the end, so N copies cost N, not N².

Limit (containment): a pair is found only if its signatures share at least one slot,
which happens with probability ``1 - (1 - J)^K``. A document A wholly contained in a much
larger B has ``J = a / b``; for ``b > K·a`` (84 times larger by default) the pair is likely to
be missed. Pairs with an estimate of 0 are never returned, whatever the threshold.
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np

from neardup.fingerprint.constants import GOLDEN
from neardup.fingerprint.model import Fingerprint

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


def identical_rows(signatures: np.ndarray) -> np.ndarray:
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
    rows = np.flatnonzero(counts > 0)
    if rows.size < 2 or k == 0:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float64)
    if mode == "resemblance":
        need = max(1, math.ceil(threshold * k - 1e-9))
        bands = k - need + 1
    else:
        need, bands = 1, k

    found: tuple[np.ndarray, np.ndarray, np.ndarray] | None
    if rows.size <= BROADCAST_LIMIT and bands == k:
        found = _pairs_by_broadcast(signatures, rows, need)
    else:
        found = _pairs_by_sorting(signatures, rows, need, bands) if rows.size <= SORT_LIMIT else None
    if found is None:  # many rows, or runs of very many equal keys (copies): collapse copies first
        lo, hi, sim = _pairs_sharing_bands(signatures, rows, need, bands)
        order = np.lexsort((hi, lo))
        lo, hi, sim = lo[order], hi[order], sim[order]
    else:
        lo, hi, sim = found
    if mode == "containment":
        sim = np.asarray(max_containment(sim, counts[lo], counts[hi]))
        keep = sim >= threshold
        lo, hi, sim = lo[keep], hi[keep], sim[keep]
    return lo, hi, np.asarray(sim, dtype=np.float64)


def max_containment(j: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``max(Ĉ(A, B), Ĉ(B, A))`` for resemblances ``j`` and shingle counts a, b > 0, elementwise:
    the containment of the smaller set, ``Ĉ`` with ``min(a, b)`` as denominator. Bit for bit the
    maximum of the two :func:`containment_from_resemblance` values (the numerators are equal and
    rounding is monotone, so the smaller denominator gives the larger quotient), in one call."""
    return np.asarray(containment_from_resemblance(j, np.minimum(a, b), np.maximum(a, b)))


#: Up to this many fingerprinted rows, when every slot is its own band (containment), all pairs
#: are compared in one broadcast (:func:`_pairs_by_broadcast`: m²K slot comparisons in one NumPy
#: call), which for a handful of rows costs less than enumerating the runs of shared slots.
BROADCAST_LIMIT = 24
#: Above this many fingerprinted rows, :func:`_pairs_sharing_bands` (which collapses copies
#: first and needs no (bands × rows) sort with row numbers) is used.
SORT_LIMIT = 4096
#: :func:`_pairs_by_sorting` follows runs of equal keys one distance at a time while they are
#: at most this long (resemblance bands of search hits: runs of 2), else enumerates them at once.
STEP_RUNS = 4
#: :func:`_pairs_by_sorting` gives up (returns None) above this many (pair, band) collisions
#: per row and band: long runs of copies, which :func:`_pairs_sharing_bands` collapses first.
COLLISIONS_PER_KEY = 8


def _pairs_by_sorting(signatures: np.ndarray, rows: np.ndarray, need: int, bands: int
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Every pair of ``rows`` with at least ``need`` equal slots: ``(lo, hi, Ĵ)``, lo < hi, sorted
    by (lo, hi), with a small, bounded number of NumPy calls, for up to :data:`SORT_LIMIT` rows.

    **Candidates** are the pairs wholly equal in one of ``bands`` disjoint bands of
    ``w = ⌊K / bands⌋`` slots (the first ``bands × w`` slots; the pigeonhole argument of the
    module docstring needs only disjoint bands, not that they cover every slot), each band's
    values combined into one 64-bit key (a sum with distinct odd multipliers; a single slot is
    its own key). The key's low ``b = bit_length(m - 1)`` bits are replaced by the row number,
    so that one plain sort of the (bands × m) key matrix along its rows puts equal keys
    (equal high bits) next to each other, rows ascending: each run of equal keys yields its
    pairs as (earlier, later), and no argsort is needed. Dropping b bits only adds candidates.

    **Verification.** The candidates (codes ``lo · m + hi``, deduplicated) are compared on all
    K slots. When every slot is its own band (containment, or a threshold of at most 1/K), a
    pair's number of band collisions is its number of equal slots, provided no two unequal
    slot values share their high bits (checked; else the candidates are compared as above).

    Returns None (the caller then uses :func:`_pairs_sharing_bands`) when the runs hold more
    than ``COLLISIONS_PER_KEY × m × bands`` pairs (many copies of one document).
    """
    m, k = rows.size, signatures.shape[1]
    sig = signatures if m == signatures.shape[0] else signatures[rows]
    by_slot = np.ascontiguousarray(sig.T)                         # (K, m)
    width = k // bands
    if width == 1:
        keys = by_slot[:bands]
    else:
        keys = np.einsum("bwm,w->bm", by_slot[:bands * width].reshape(bands, width, m), _slot_weights(width))
    bits = np.uint64(max(1, (m - 1).bit_length()))
    low = np.uint64((1 << int(bits)) - 1)
    ranked = (keys & ~low) | np.arange(m, dtype=np.uint64)
    ranked.sort(axis=1)
    high = ranked >> bits
    equal_next = high[:, 1:] == high[:, :-1]                      # (bands, m - 1)
    if not equal_next.any():
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float64)
    order = (ranked & low).astype(np.int64)                       # rows in key order
    counted = bands == k
    if counted:   # are the runs runs of equal slot values (no two values share high bits)?
        values = keys.reshape(-1)[order + np.arange(0, bands * m, m)[:, None]]
        counted = not (equal_next & (values[:, 1:] != values[:, :-1])).any()
    codes = _step_run_codes(order, equal_next) if 2 * bands <= k else None
    if codes is None:
        flat = np.zeros((bands, m), dtype=bool)
        flat[:, :-1] = equal_next
        starts, lengths = _runs(flat.reshape(-1)[:-1])
        if int((lengths * (lengths - 1)).sum()) > 2 * COLLISIONS_PER_KEY * m * bands:
            return None
        left, right = pairs_within_runs(starts, lengths)
        ranked_rows = order.reshape(-1)
        codes = ranked_rows[left] * m + ranked_rows[right]
    if counted:
        codes, equal = np.unique(codes, return_counts=True)
        lo, hi = np.divmod(codes, m)
    else:
        lo, hi = np.divmod(np.unique(codes), m)
        equal = np.count_nonzero(sig[lo] == sig[hi], axis=1)
    keep = equal >= need
    return rows[lo[keep]], rows[hi[keep]], equal[keep] / k


def _pairs_by_broadcast(signatures: np.ndarray, rows: np.ndarray, need: int
                        ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every pair of ``rows`` with at least ``need`` equal slots, ``(lo, hi, Ĵ)`` sorted by
    (lo, hi), from one (m, m, K) comparison: for a handful of rows."""
    k = signatures.shape[1]
    sig = signatures[rows]
    equal = np.count_nonzero(sig[:, None, :] == sig[None, :, :], axis=2)
    lo, hi = np.nonzero(np.triu(equal >= need, 1))    # row-major: sorted by (lo, hi)
    return rows[lo], rows[hi], equal[lo, hi] / k


def _step_run_codes(order: np.ndarray, equal_next: np.ndarray) -> np.ndarray | None:
    """Codes ``lo · m + hi`` of the pairs inside runs of equal keys (rows ascending in a run),
    one distance at a time: positions p and p + d of a band pair up when its keys p … p + d
    are all equal. None when some run is longer than :data:`STEP_RUNS`."""
    m = order.shape[1]
    parts = []
    run, d = equal_next, 1
    while True:
        parts.append(order[:, :-d][run] * m + order[:, d:][run])
        d += 1
        if d >= m:
            break
        run = run[:, :-1] & equal_next[:, d - 1:]
        if not run.any():
            break
        if d >= STEP_RUNS:
            return None
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def _pairs_sharing_bands(signatures: np.ndarray, rows: np.ndarray, need: int, bands: int
                         ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every pair of ``rows`` with at least ``need`` equal slots: ``(lo, hi, Ĵ)``, lo < hi, in no
    particular order, at a cost proportional to the pairs of distinct signatures that share one
    of ``bands`` bands (see :func:`band_keys`); copies are collapsed first."""
    k = signatures.shape[1]
    # Distinct signatures among the non-empty rows; members of each, grouped.
    group = identical_rows(signatures[rows])
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
