"""The fingerprint algorithms the proxy groups hits with.

Stored fingerprints are read with :func:`neardup.fingerprint.read_signatures` (only ``sig`` and ``n``,
one base64 decode per window); an object of another scheme version or of the wrong shape
counts as "no fingerprint": the hit gets one computed from its text at query time
(:mod:`neardup.proxy.grouping.query_fingerprints`, ``collapse.fingerprint_missing``), else it is
never collapsed.

Similar pairs of a small window (:func:`window_pairs`): a pair at resemblance threshold t has
at least ``need = ⌈tK⌉`` equal slots of K, so at most ``u = K - need`` unequal ones, and of
``B = u + 1`` disjoint bands of ``⌊K/B⌋`` slots one is wholly equal (pigeonhole). Each band of each
signature is combined into one 64-bit key (a weighted sum, the band's number mixed in). When no
key occurs twice in the window (one sort), no pair can reach t: the usual case of a page's
window. Otherwise the candidates are the pairs with an equal key in some band (one broadcast
over the window's m² pairs), each verified on all K slots: exactly the pairs, order and
estimates of :func:`neardup.fingerprint.similar_pairs`, which larger windows and lower thresholds
go to. Where the compiled search (``proxy/grouping/compiled_rs``, a Rust extension built at install)
is there, it stands in for that NumPy one (:func:`band_key_pairs`, its reference): every pair
compared slot by slot and given up after ``u + 1`` unequal slots, with no array built on the
way; the same pairs, order and estimates, which the tests compare.

Groups of a window's few pairs (:func:`window_labels`): union-find on Python integers, each root
the smallest index of its component (the smaller root wins a union), the same labels as
:func:`neardup.fingerprint.group_labels`, which many pairs go to.
"""

from __future__ import annotations

import math
from functools import lru_cache, partial

import numpy as np

from neardup.fingerprint import FingerprintParams, group_labels, read_signatures, scheme_version, similar_pairs
from neardup.fingerprint.similarity import Mode
from neardup.proxy.grouping.collapse import Algorithms

#: Largest window (rows) and most bands for which :func:`window_pairs` compares band keys itself:
#: beyond, its m² comparisons, or the key collisions of a low threshold, cost more than
#: :func:`neardup.fingerprint.similar_pairs`' sorted band keys.
WINDOW_ROWS, WINDOW_BANDS = 32, 24
#: Most pairs :func:`window_labels` joins itself: beyond, NumPy's label propagation costs less.
WINDOW_PAIRS = 256

try:
    import neardup.proxy.grouping._compiled as _compiled
except ImportError:   # not built (no cargo at install): the NumPy search
    _compiled = None  # type: ignore[assignment]

#: Whether :func:`window_pairs` uses the compiled search (``proxy/grouping/compiled_rs``).
COMPILED_PAIRS = _compiled is not None

_GOLDEN = 0x9E3779B97F4A7C15


@lru_cache(maxsize=8)
def _band_mixing(bands: int, width: int) -> tuple[np.ndarray, np.ndarray]:
    """Odd weights of a band's slots, and each band's number spread over 64 bits."""
    weights = (np.arange(1, 2 * width, 2, dtype=np.uint64) * np.uint64(_GOLDEN)) | np.uint64(1)
    return weights, np.arange(bands, dtype=np.uint64) * np.uint64(_GOLDEN)


def _no_pairs() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float64)


def window_pairs(signatures: np.ndarray, counts: np.ndarray, threshold: float,
                 mode: Mode = "resemblance") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`neardup.fingerprint.similar_pairs`, the same result, found among a small window's
    band keys (see the module)."""
    if mode != "resemblance" or type(threshold) is not float or not 0.0 < threshold <= 1.0 \
            or type(signatures) is not np.ndarray or signatures.ndim != 2 or signatures.dtype != np.uint64 \
            or type(counts) is not np.ndarray or counts.shape != signatures.shape[:1] \
            or not 2 <= signatures.shape[0] <= WINDOW_ROWS or not signatures.shape[1]:
        return similar_pairs(signatures, counts, threshold, mode)
    if _compiled is not None:
        k = signatures.shape[1]
        lo, hi, equal = _compiled.equal_slot_pairs(signatures.astype("<u8", copy=False).tobytes(),
                                                   counts.astype("<i8", copy=False).tobytes(), k,
                                                   equal_slots_needed(threshold, k))
        return (np.frombuffer(lo, dtype="<i8").astype(np.int64), np.frombuffer(hi, dtype="<i8").astype(np.int64),
                np.frombuffer(equal, dtype="<i8") / k)
    return band_key_pairs(signatures, counts, threshold)


def equal_slots_needed(threshold: float, k: int) -> int:
    """Equal slots of K a pair at resemblance ``threshold`` has (as :func:`neardup.fingerprint.similar_pairs`)."""
    return max(1, math.ceil(threshold * k - 1e-9))


def band_key_pairs(signatures: np.ndarray, counts: np.ndarray, threshold: float
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`window_pairs` of a window it takes, with NumPy on band keys (see the module): the
    reference of the compiled search, and the search where it is not built."""
    k = signatures.shape[1]
    need = equal_slots_needed(threshold, k)
    bands = k - need + 1
    if bands > WINDOW_BANDS:
        return similar_pairs(signatures, counts, threshold, "resemblance")
    width = k // bands
    rows = None if counts.all() else np.flatnonzero(counts > 0)
    sig = signatures if rows is None else signatures[rows]
    weights, numbers = _band_mixing(bands, width)
    keys = sig[:, :bands * width].reshape(len(sig), bands, width) @ weights   # wraps mod 2^64
    ordered = np.sort(keys ^ numbers, axis=None)
    if not (ordered[1:] == ordered[:-1]).any():
        return _no_pairs()
    lo, hi = np.nonzero((keys[:, None, :] == keys[None, :, :]).any(axis=2))
    upper = lo < hi                      # row-major: sorted by (lo, hi)
    lo, hi = lo[upper], hi[upper]
    equal = (sig[lo] == sig[hi]).sum(axis=1)   # count_nonzero(axis=) costs more for a few rows
    keep = equal >= need
    lo, hi = lo[keep], hi[keep]
    if rows is not None:
        lo, hi = rows[lo], rows[hi]
    return lo.astype(np.int64, copy=False), hi.astype(np.int64, copy=False), equal[keep] / k


def window_labels(n: int, i: np.ndarray, j: np.ndarray) -> np.ndarray:
    """:func:`neardup.fingerprint.group_labels`, the same labels, by union-find (see the module)."""
    if type(i) is not np.ndarray or type(j) is not np.ndarray or i.dtype != np.int64 or j.dtype != np.int64 \
            or i.shape != j.shape or i.ndim != 1 \
            or len(i) > WINDOW_PAIRS:
        return group_labels(n, i, j)
    lo, hi = i.tolist(), j.tolist()
    if lo and (min(lo) < 0 or min(hi) < 0 or max(max(lo), max(hi)) >= n):
        return group_labels(n, i, j)   # it says what is wrong
    parent = list(range(n))

    def root(node: int) -> int:
        while parent[node] != node:
            parent[node] = node = parent[parent[node]]
        return node

    for a, b in zip(lo, hi):
        a, b = root(a), root(b)
        if a < b:
            parent[b] = a
        elif b < a:
            parent[a] = b
    return np.array([root(node) for node in range(n)], dtype=np.int64)


def default_algorithms(params: FingerprintParams, tfidf_version: str = "") -> Algorithms:
    """``tfidf_version``: the TF-IDF version (``neardup.tfidf_config.tfidf_version_of``) whose vectors
    ``neardup_mode=tfidf`` compares; empty: none (no hit is grouped in that mode)."""
    version = scheme_version(params)
    read = partial(read_signatures, version=version, num_perm=params.num_perm)
    return Algorithms(read=read, similar_pairs=window_pairs, group_labels=window_labels,
                      tfidf_version=tfidf_version, version=version, num_perm=params.num_perm)
