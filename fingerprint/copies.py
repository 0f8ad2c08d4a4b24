"""Copied fragments among N documents: screen with the pseudo-matrix Bloom filter, verify exactly.

For shingle sets S (a *source*) and C (a *copier*), C holds a fragment of S when the share of
S's shingles found in C reaches σ (``min_share``)::

    containment(S in C) = |S ∩ C| / |S|  ≥  σ

The steps, each a function here so the caller can time them:

1. :func:`content_sets` — shingles found in more than D (``max_df``) documents are left out of
   every set: embedded scripts, site furniture and stock phrases would make every page "contain"
   every other. All later steps, verification included, use these *content* sets, so the
   reported share is a share of the source's content shingles.
2. :func:`build_filter` — every non-empty content set is inserted into a
   :class:`~neardup.fingerprint.bloom.PseudoMatrixBloom`.
3. :meth:`PseudoMatrixBloom.query <neardup.fingerprint.bloom.PseudoMatrixBloom.query>` with each
   document as the source (its own rows left out) gives the candidate copiers: a superset of
   every C with |S ∩ C| ≥ σ|S| (a Bloom filter has no false negatives).
4. :func:`verify` — exact |S ∩ C| of each candidate by one sorted lookup
   (:func:`~neardup.fingerprint.bloom.shared_counts`); pairs with
   ``|S ∩ C| ≥ max(⌈σ|S|⌉, F)`` are kept, F (``min_shared``) being the fewest shingles that
   make a fragment: in a source of 20 shingles (a title and an embedded video) 5 % is one
   shingle, a shared phrase, not a copy.

A pair is ordered: (copier, source). When each of two documents holds σ of the other (the
same story twice, or a short text mostly quoted by a longer one) both orders are reported;
``reverse`` = |S ∩ C| / |C| says how much of the copier is the shared text. Which document
was written first is not something shingles can tell.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from neardup.fingerprint.bloom import BloomParams, PseudoMatrixBloom, frequent_shingles, shared_counts


@dataclass(frozen=True)
class CopiedPair:
    """``copier`` holds ``shared`` of the ``source_size`` content shingles of ``source``."""

    copier: int
    source: int
    shared: int
    source_size: int
    copier_size: int

    @property
    def containment(self) -> float:
        """|S ∩ C| / |S|: the share of the source found in the copier."""
        return self.shared / self.source_size

    @property
    def reverse(self) -> float:
        """|S ∩ C| / |C|: the share of the copier that is shared with the source."""
        return self.shared / self.copier_size


def check_min_share(min_share: float) -> float:
    """``min_share`` if it is a number in (0, 1]; ValueError naming the rule otherwise."""
    if isinstance(min_share, bool) or not isinstance(min_share, (int, float)) or not 0.0 < min_share <= 1.0:
        raise ValueError(f"min_share = {min_share!r}: must be a number greater than 0 and at most 1")
    return float(min_share)


def content_sets(shingle_sets: Sequence[np.ndarray], max_df: int | None,
                 assume_unique: bool = False) -> tuple[list[np.ndarray], int]:
    """The sets without the shingles found in more than ``max_df`` of them (None or 0: keep all),
    and how many distinct shingles were left out. The sets returned are sorted and unique;
    ``assume_unique``: the given ones already are (as ``Fingerprinter.shingles`` gives them)."""
    sets = [np.asarray(s, dtype=np.uint64) if assume_unique else np.unique(np.asarray(s, dtype=np.uint64))
            for s in shingle_sets]
    if not max_df:
        return sets, 0
    frequent = frequent_shingles(sets, max_df, assume_unique=True)
    if len(frequent) == 0:
        return sets, 0
    return [s[~np.isin(s, frequent, assume_unique=True)] for s in sets], len(frequent)


def build_filter(sets: Sequence[np.ndarray], params: BloomParams) -> PseudoMatrixBloom:
    """A filter holding every non-empty set, document number = position in ``sets``."""
    bloom = PseudoMatrixBloom(params)
    for doc, shingles in enumerate(sets):
        if len(shingles):
            bloom.insert(doc, shingles)
    return bloom


def candidates(bloom: PseudoMatrixBloom, sets: Sequence[np.ndarray], source: int, min_share: float) -> np.ndarray:
    """Documents that may hold ``min_share`` of ``sets[source]`` (never the source itself)."""
    if len(sets[source]) == 0:
        return np.empty(0, dtype=np.int64)
    found, _ = bloom.query(sets[source], min_share, exclude=source, assume_unique=True)
    return found


def verify(sets: Sequence[np.ndarray], source: int, found: np.ndarray, min_share: float,
           min_shared: int = 1) -> list[CopiedPair]:
    """The candidates that really hold ``min_share`` of the source, and at least ``min_shared``
    shingles of it, by exact containment."""
    s = sets[source]
    if len(s) == 0 or len(found) == 0:
        return []
    shared = shared_counts(s, [sets[c] for c in found.tolist()], assume_unique=True)
    need = max(1, min_shared, math.ceil(min_share * len(s) - 1e-9))
    return [CopiedPair(copier=int(c), source=source, shared=int(n), source_size=len(s), copier_size=len(sets[c]))
            for c, n in zip(found.tolist(), shared.tolist()) if n >= need]


def ranked(pairs: Sequence[CopiedPair]) -> list[CopiedPair]:
    """Highest containment first, then most shared shingles, then by document numbers."""
    return sorted(pairs, key=lambda p: (-p.containment, -p.shared, p.copier, p.source))
