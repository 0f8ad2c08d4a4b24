"""The fingerprint algorithms the proxy groups hits with.

Stored fingerprints are read with :func:`neardup.fingerprint.read_signatures` (only ``sig`` and ``n``,
one base64 decode per window); an object of another scheme version or of the wrong shape
counts as "no fingerprint": the hit gets one computed from its text at query time
(:mod:`neardup.proxy.grouping.query_fingerprints`, ``collapse.fingerprint_missing``), else it is
never collapsed.

Similar pairs of a small window (:func:`window_pairs`): a pair at resemblance threshold t has
at least ``need = ⌈tK⌉`` equal slots of K, so at most ``u = K - need`` unequal ones, and of
``B = u + 1`` disjoint bands of ``⌊K/B⌋`` slots one is wholly equal (pigeonhole). Each band of each
signature is combined into one 64-bit key (a weighted sum, the band's number mixed in); when no
key occurs twice in the window (one sort), no pair can reach t and there is nothing to find, the
usual case of a page's window. Otherwise :func:`neardup.fingerprint.similar_pairs` finds the
pairs: the result is always exactly its own.
"""

from __future__ import annotations

import math
from functools import lru_cache, partial

import numpy as np

from neardup.fingerprint import FingerprintParams, group_labels, read_signatures, scheme_version, similar_pairs
from neardup.fingerprint.similarity import Mode
from neardup.proxy.grouping.collapse import Algorithms

#: Largest window (rows) and most bands for which :func:`window_pairs` checks the band keys first:
#: larger windows, or lower thresholds, hold a colliding key too often for the check to pay.
WINDOW_ROWS, WINDOW_BANDS = 64, 24
_GOLDEN = 0x9E3779B97F4A7C15


@lru_cache(maxsize=8)
def _band_mixing(bands: int, width: int) -> tuple[np.ndarray, np.ndarray]:
    """Odd weights of a band's slots, and each band's number spread over 64 bits."""
    weights = (np.arange(1, 2 * width, 2, dtype=np.uint64) * np.uint64(_GOLDEN)) | np.uint64(1)
    return weights, np.arange(bands, dtype=np.uint64) * np.uint64(_GOLDEN)


def window_pairs(signatures: np.ndarray, counts: np.ndarray, threshold: float,
                 mode: Mode = "resemblance") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`neardup.fingerprint.similar_pairs`, the same result; a small window whose band keys
    are all distinct is answered at once (see the module)."""
    if mode == "resemblance" and type(threshold) is float and 0.0 < threshold <= 1.0 \
            and type(signatures) is np.ndarray and signatures.ndim == 2 and signatures.dtype == np.uint64 \
            and type(counts) is np.ndarray and counts.shape == signatures.shape[:1] \
            and 2 <= signatures.shape[0] <= WINDOW_ROWS and signatures.shape[1]:
        k = signatures.shape[1]
        bands = k - max(1, math.ceil(threshold * k - 1e-9)) + 1
        if bands <= WINDOW_BANDS:
            width = k // bands
            rows = signatures if counts.all() else signatures[counts > 0]
            weights, numbers = _band_mixing(bands, width)
            keys = rows[:, :bands * width].reshape(len(rows), bands, width) @ weights   # wraps mod 2^64
            keys = np.sort(keys ^ numbers, axis=None)
            if not (keys[1:] == keys[:-1]).any():
                return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float64)
    return similar_pairs(signatures, counts, threshold, mode)


def default_algorithms(params: FingerprintParams, tfidf_version: str = "") -> Algorithms:
    """``tfidf_version``: the TF-IDF version (``neardup.tfidf_config.tfidf_version_of``) whose vectors
    ``neardup_mode=tfidf`` compares; empty: none (no hit is grouped in that mode)."""
    read = partial(read_signatures, version=scheme_version(params), num_perm=params.num_perm)
    return Algorithms(read=read, similar_pairs=window_pairs, group_labels=group_labels,
                      tfidf_version=tfidf_version)
