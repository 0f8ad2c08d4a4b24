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
from proxy.collapse import Algorithms

#: Up to this many rows (a page-sized window), a window without any candidate pair is told
#: before :func:`fingerprint.similar_pairs` is called (:func:`similar_pairs_or_none`).
QUICK_ROWS = 64


def similar_pairs_or_none(signatures: np.ndarray, counts: np.ndarray, threshold: float,
                          mode: str = "resemblance") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`fingerprint.similar_pairs`, answered at once for a small window where no pair can
    be similar: most page-sized windows hold no near-duplicates, and the full search has a
    fixed NumPy cost (~0.1 ms) that the proxy pays on every search.

    A pair with resemblance ≥ t agrees on at least ``need = ⌈tK⌉`` of the K slots, so on at
    least one of any ``K − need + 1`` slots (pigeonhole; ``need`` as ``similar_pairs`` computes
    it); containment needs one equal slot of K. If no two rows agree on any of the first
    ``K − need + 1`` slots (one sort of those columns), no pair is similar.
    """
    n = signatures.shape[0] if signatures.ndim == 2 else 0
    k = signatures.shape[1] if signatures.ndim == 2 else 0
    if 2 <= n <= QUICK_ROWS and k and mode in ("resemblance", "containment") \
            and isinstance(threshold, (int, float)) and not isinstance(threshold, bool) and 0.0 <= threshold <= 1.0:
        need = max(1, math.ceil(threshold * k - 1e-9)) if mode == "resemblance" else 1
        columns = np.sort(signatures[:, :k - need + 1], axis=0)
        if not (columns[1:] == columns[:-1]).any():
            empty = np.empty(0, dtype=np.int64)
            return empty, empty.copy(), np.empty(0, dtype=np.float64)
    return similar_pairs(signatures, counts, threshold, mode)  # type: ignore[arg-type]


def default_algorithms(params: FingerprintParams, tfidf_version: str = "") -> Algorithms:
    """``tfidf_version``: the TF-IDF version (``neardup.tfidf.tfidf_version_of``) whose vectors
    ``neardup_mode=tfidf`` compares; empty: none (no hit is grouped in that mode)."""
    read = partial(read_signatures, version=scheme_version(params), num_perm=params.num_perm)
    return Algorithms(read=read, similar_pairs=similar_pairs_or_none, group_labels=group_labels,
                      tfidf_version=tfidf_version)
