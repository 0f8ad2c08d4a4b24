"""Locality-sensitive hashing of MinHash signatures by banding: candidate pairs for clustering.

**Banding.** The K minhash slots of a signature are cut into ``b`` bands of ``r`` consecutive
slots (slots ``[k·r, (k+1)·r)`` for band k; the last ``K - b·r`` slots are not used). Each band
is hashed to one 64-bit *band key*; two documents are a *candidate pair* when they have an
equal key in at least one band. A slot matches with probability s (the resemblance of the
shingle sets, see :mod:`neardup.fingerprint.hashing`) and slots are independent, so a band matches
with probability ``s^r`` and::

    P(candidate | s) = 1 - (1 - s^r)^b                                     (the S-curve)

**Choosing b and r** (:func:`choose_banding`). For a threshold t we take the *largest* r
(fewest false candidates: the curve is steepest) with ``b = ⌊K / r⌋`` such that
``P(candidate | s = t) ≥ target`` (0.99 by default). For K = 84: t = 0.8 gives r = 5, b = 16
(P = 0.9983; r = 6, b = 14 would give 0.986); t = 0.9 gives r = 8, b = 10; t = 0.7 gives r = 4,
b = 21; t = 0.5 gives r = 2, b = 42. Unrelated pairs rarely collide: at s = 0.3 with r = 5,
b = 16 the probability is 0.038. If no r reaches the target (t very low), r = 1: a candidate
is any pair sharing a minhash.

**Given the estimate.** Candidates are verified by the signature estimate ``Ĵ = m / K`` (m =
equal slots), so what matters in the end is the chance that a pair *with m equal slots* is a
candidate. Given m, the K - m unequal slots are a uniformly random subset of the K positions
(exchangeability of independent slots), and by inclusion–exclusion over the sets of bands
that match completely::

    P(candidate | m) = Σ_{j=1..b} (-1)^{j+1} C(b, j) · C(K - j·r, m - j·r) / C(K, m)

(:func:`candidate_probability_given_matches`). For K = 84, t = 0.8 (m ≥ 68) this is
0.999998 with r = 5, b = 16: the banding misses about 2 pairs in a million of those an
all-pairs comparison of the estimates accepts.

**Band keys** (:meth:`Banding.keys`). Band k of r slots ``x_1 … x_r`` is folded like a
shingle (see :mod:`neardup.fingerprint.hashing`): ``h_0 = seed_k``,
``h_i = (h_{i-1} ⊕ x_i) · C``, key = ``fmix64(h_r)``, with ``seed_k = BAND_SEED ⊕ (k + 1)·φ``
so equal slot values in different bands give different keys. Each step is a bijection of
``h_{i-1}`` and of ``x_i``, so two different slot tuples collide with probability about 2^-64.
Vectorised over all documents and bands at once.

**Supershingles as keys.** A supershingle of the fingerprint scheme is a band of ``R = K / G``
slots. If group g contains a whole aligned band (``k·r ≥ g·R`` and ``(k+1)·r ≤ (g+1)·R`` for
some k < b), sharing supershingle g implies sharing that band: the supershingle adds no
candidate. Otherwise the group is added as an extra key (:attr:`Banding.extra_groups`), so
the candidates are always a superset of "shares a band" ∪ "shares a supershingle". A pair
sharing a *megashingle* shares the two supershingles it is made of, so megashingles never
add a candidate either.

**Rounds** (:func:`round_rows`). Bands of ``r·2^j`` rows are unions of ``2^j`` aligned bands
of r rows, so a pair colliding at ``r·2^j`` rows also collides at r rows: rounds that go from
many rows to r rows (the iterative scheme of LSH clustering, lowering r step by step) find
subsets of the final candidates first, cheaply, and let the later rounds skip pairs already
joined.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from neardup.fingerprint.constants import FMIX_C1, GOLDEN, MASK64
from neardup.fingerprint.hashing import fmix64

#: Seeds of the band and group key families (arbitrary fixed constants).
BAND_SEED = 0xBA9D5EED0C1A5732
GROUP_SEED = 0x6209D5EEDC0FFEE1
#: Version of the band-key algorithm: stored with clusters, so keys stored by another
#: version are never compared with these.
LSH_VERSION = 1
DEFAULT_TARGET = 0.99

_C1 = np.uint64(FMIX_C1)


def candidate_probability(s: float | np.ndarray, rows: int, bands: int) -> float | np.ndarray:
    """The S-curve ``1 - (1 - s^r)^b``: chance that a pair of resemblance s is a candidate."""
    value = 1.0 - (1.0 - np.asarray(s, dtype=np.float64) ** rows) ** bands
    return float(value) if np.ndim(value) == 0 else value


def candidate_probability_given_matches(matches: int, num_perm: int, rows: int, bands: int) -> float:
    """Chance that a pair with ``matches`` equal slots (of ``num_perm``) shares a band.

    Inclusion–exclusion over the bands that match completely (see the module docstring).
    Exact rational arithmetic, so no cancellation error.
    """
    if not 0 <= matches <= num_perm:
        raise ValueError(f"matches = {matches}: must be from 0 to {num_perm}")
    if bands * rows > num_perm:
        raise ValueError(f"{bands} bands of {rows} rows need more than {num_perm} slots")
    total = math.comb(num_perm, matches)
    hits = 0
    for j in range(1, bands + 1):
        if matches - j * rows < 0:
            break
        hits += (-1) ** (j + 1) * math.comb(bands, j) * math.comb(num_perm - j * rows, matches - j * rows)
    return hits / total


def needed_matches(threshold: float, num_perm: int) -> int:
    """Equal slots a pair needs for ``Ĵ = m / K ≥ threshold`` (at least 1, as in
    :func:`neardup.fingerprint.similar_pairs`: an estimate of 0 is never similar)."""
    return max(1, math.ceil(threshold * num_perm - 1e-9))


@dataclass(frozen=True)
class Banding:
    """``bands`` bands of ``rows`` slots of a ``num_perm``-slot signature, plus the
    supershingle groups (of a scheme with ``groups`` groups) not implied by a band."""

    num_perm: int
    rows: int
    bands: int
    groups: int = 0

    def __post_init__(self) -> None:
        if not (1 <= self.rows <= self.num_perm and 1 <= self.bands and self.bands * self.rows <= self.num_perm):
            raise ValueError(f"{self.bands} bands × {self.rows} rows do not fit {self.num_perm} minhashes")
        if self.groups and self.num_perm % self.groups:
            raise ValueError(f"{self.groups} groups do not divide {self.num_perm} minhashes")

    @property
    def extra_groups(self) -> tuple[int, ...]:
        """Supershingle groups that contain no whole aligned band (added as extra keys)."""
        if not self.groups:
            return ()
        size = self.num_perm // self.groups
        extra = []
        for g in range(self.groups):
            first_band = -(-g * size // self.rows)  # ceil(g·R / r)
            if not (first_band < self.bands and (first_band + 1) * self.rows <= (g + 1) * size):
                extra.append(g)
        return tuple(extra)

    @property
    def key_count(self) -> int:
        return self.bands + len(self.extra_groups)

    def probability(self, s: float | np.ndarray) -> float | np.ndarray:
        """The S-curve of the bands alone (extra group keys only add candidates)."""
        return candidate_probability(s, self.rows, self.bands)

    def probability_given_estimate(self, threshold: float) -> float:
        """``P(candidate | m = needed_matches(threshold))``: the recall floor against an
        all-pairs comparison of the estimates at the threshold (bands alone)."""
        return candidate_probability_given_matches(needed_matches(threshold, self.num_perm),
                                                   self.num_perm, self.rows, self.bands)

    def keys(self, signatures: np.ndarray) -> np.ndarray:
        """(N, key_count) uint64 keys: the b band keys, then one per extra group."""
        signatures = _check_signatures(signatures, self.num_perm)
        parts = [fold_keys(signatures[:, : self.bands * self.rows], self.rows,
                           family_seeds(BAND_SEED, range(self.bands)))]
        extra = self.extra_groups
        if extra:
            size = self.num_perm // self.groups
            columns = np.concatenate([np.arange(g * size, (g + 1) * size) for g in extra])
            parts.append(fold_keys(signatures[:, columns], size, family_seeds(GROUP_SEED, extra)))
        return np.concatenate(parts, axis=1) if len(parts) > 1 else parts[0]

    def with_rows(self, rows: int) -> Banding:
        """The banding with ``rows`` rows per band and as many bands as fit (no extra groups)."""
        return Banding(self.num_perm, rows, self.num_perm // rows)

    def describe(self) -> dict[str, Any]:
        return {"lsh": LSH_VERSION, "num_perm": self.num_perm, "rows": self.rows, "bands": self.bands,
                "groups": self.groups, "extra_groups": list(self.extra_groups)}


def _check_signatures(signatures: np.ndarray, num_perm: int) -> np.ndarray:
    signatures = np.asarray(signatures)
    if signatures.ndim != 2 or signatures.dtype != np.uint64 or signatures.shape[1] != num_perm:
        raise ValueError(f"signatures must be an (N, {num_perm}) uint64 array, "
                         f"got {signatures.dtype} {signatures.shape}")
    return signatures


def family_seeds(seed: int, numbers: Any) -> np.ndarray:
    """``seed ⊕ (k + 1)·φ`` for each band (or group) number k."""
    return np.array([(seed ^ ((k + 1) * GOLDEN)) & MASK64 for k in numbers], dtype=np.uint64)


def fold_keys(slots: np.ndarray, rows: int, seeds: np.ndarray) -> np.ndarray:
    """Keys of consecutive groups of ``rows`` columns of ``slots``: (N, B·rows) → (N, B),
    group k folded from ``seeds[k]``."""
    n, width = slots.shape
    count = width // rows
    if len(seeds) != count:
        raise ValueError(f"{len(seeds)} seeds for {count} groups of columns")
    h = np.broadcast_to(seeds, (n, count)).copy()
    cube = slots.reshape(n, count, rows)
    for i in range(rows):
        h ^= cube[:, :, i]
        h *= _C1
    return fmix64(h)


def choose_banding(threshold: float, num_perm: int, groups: int = 0,
                   target: float = DEFAULT_TARGET) -> Banding:
    """The banding with the most rows whose S-curve at ``threshold`` is ≥ ``target``."""
    if not (isinstance(threshold, (int, float)) and 0.0 <= threshold <= 1.0):
        raise ValueError(f"threshold = {threshold!r}: must be a number from 0 to 1")
    if not 0.0 < target < 1.0:
        raise ValueError(f"target = {target!r}: must be between 0 and 1")
    best = 1
    for rows in range(1, num_perm + 1):
        if candidate_probability(threshold, rows, num_perm // rows) >= target:
            best = rows
    return Banding(num_perm, best, num_perm // best, groups)


def round_rows(rows: int, num_perm: int) -> list[int]:
    """Rows per band of each round, from most to fewest: ``r·2^j`` while at least two bands
    fit, ending with ``r`` itself (see the module docstring)."""
    found = [rows]
    while num_perm // (found[-1] * 2) >= 2:
        found.append(found[-1] * 2)
    return found[::-1]


def key_strings(keys: np.ndarray) -> list[list[str]]:
    """Keys as 16-digit lowercase hex strings, one list per document (the stored form)."""
    return [[f"{int(v):016x}" for v in row] for row in keys]
