"""The fingerprint algorithms the proxy groups hits with.

Stored fingerprints are read with :func:`fingerprint.read_signatures` (only ``sig`` and ``n``,
one base64 decode per window); an object of another scheme version or of the wrong shape
counts as "no fingerprint" and its hit is never collapsed.
"""

from __future__ import annotations

import math
from functools import partial

import numpy as np

from fingerprint import FingerprintParams, group_labels, read_signatures, scheme_version, similar_pairs
from fingerprint.similarity import containment_from_resemblance
from proxy.collapse import Algorithms

#: Up to this many rows (a page-sized window) the proxy compares every pair itself
#: (:func:`similar_pairs_small`); larger windows go to :func:`fingerprint.similar_pairs`.
QUICK_ROWS = 64
_UPPER: dict[int, np.ndarray] = {}   # m -> (m, m) mask of the pairs i < j


def _upper(m: int) -> np.ndarray:
    mask = _UPPER.get(m)
    if mask is None:
        mask = _UPPER[m] = np.triu(np.ones((m, m), dtype=bool), 1)
    return mask


def similar_pairs_small(signatures: np.ndarray, counts: np.ndarray, threshold: float,
                        mode: str = "resemblance") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`fingerprint.similar_pairs` with fewer NumPy calls for a page-sized window.

    The same pairs, similarities, order and dtypes as ``similar_pairs``' direct path (it
    compares every pair of up to 64 non-empty rows too): ``Ĵ = (equal slots) / K``, a pair kept
    when it has at least ``need = ⌈tK⌉`` equal slots (resemblance) or when
    ``max(Ĉ(i in j), Ĉ(j in i)) ≥ t`` (containment, from one equal slot on), rows with a
    shingle count of 0 never paired; sorted by (i, j). The whole (M, M) equality count is one
    broadcast comparison (M²K: 14,000 slot comparisons for the 13 hits of a ``size`` 10
    window), which costs less than ``similar_pairs``' general set-up (~0.05 ms). Anything else
    (more rows, an invalid argument) goes to ``similar_pairs``, which also checks arguments.
    """
    if signatures.ndim == 2 and signatures.dtype == np.uint64 and counts.shape == (signatures.shape[0],) \
            and signatures.shape[0] <= QUICK_ROWS and signatures.shape[1] > 0 \
            and mode in ("resemblance", "containment") and isinstance(threshold, (int, float)) \
            and not isinstance(threshold, bool) and 0.0 <= threshold <= 1.0:
        k = signatures.shape[1]
        rows = np.flatnonzero(counts > 0)
        if rows.size < 2:
            empty = np.empty(0, dtype=np.int64)
            return empty, empty.copy(), np.empty(0, dtype=np.float64)
        need = max(1, math.ceil(threshold * k - 1e-9)) if mode == "resemblance" else 1
        sig = signatures[rows]
        equal = np.count_nonzero(sig[:, None, :] == sig[None, :, :], axis=2)
        similar = (equal >= need) & _upper(rows.size)
        if not similar.any():   # the usual case: no near-duplicates in the window
            empty = np.empty(0, dtype=np.int64)
            return empty, empty.copy(), np.empty(0, dtype=np.float64)
        a, b = np.nonzero(similar)   # row-major: sorted by (a, b)
        lo, hi = rows[a].astype(np.int64), rows[b].astype(np.int64)
        sim = equal[a, b] / k
        if mode == "containment":
            sim = np.maximum(containment_from_resemblance(sim, counts[lo], counts[hi]),
                             containment_from_resemblance(sim, counts[hi], counts[lo]))
            keep = sim >= threshold
            lo, hi, sim = lo[keep], hi[keep], sim[keep]
        return lo, hi, np.asarray(sim, dtype=np.float64)
    return similar_pairs(signatures, counts, threshold, mode)  # type: ignore[arg-type]


def default_algorithms(params: FingerprintParams, tfidf_version: str = "") -> Algorithms:
    """``tfidf_version``: the TF-IDF version (``neardup.tfidf.tfidf_version_of``) whose vectors
    ``neardup_mode=tfidf`` compares; empty: none (no hit is grouped in that mode)."""
    read = partial(read_signatures, version=scheme_version(params), num_perm=params.num_perm)
    return Algorithms(read=read, similar_pairs=similar_pairs_small, group_labels=group_labels,
                      tfidf_version=tfidf_version)
