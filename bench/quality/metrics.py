"""Scores of reported pairs and groups against the exact truth, and binomial intervals.

* precision ``|R ∩ T| / |R|``, recall ``|R ∩ T| / |T|``, ``F1 = 2PR / (P + R)`` for a reported
  pair set ``R`` and true pair set ``T`` (NaN where the denominator is 0).
* adjusted Rand index (Hubert & Arabie 1985) of two partitions of the same ``n`` items, from the
  contingency table ``n_ij``: with ``a_i``, ``b_j`` its row and column sums,
  ``ARI = (Σ C(n_ij,2) - E) / (½(Σ C(a_i,2) + Σ C(b_j,2)) - E)``,
  ``E = Σ C(a_i,2) Σ C(b_j,2) / C(n,2)``; 1 for identical partitions (also when both are all
  singletons), about 0 for independent ones.
* Wilson score interval for a binomial proportion ``k / n`` at confidence ``1 - alpha``.
"""

from __future__ import annotations

from dataclasses import dataclass
from statistics import NormalDist

import numpy as np


@dataclass(frozen=True)
class PairScore:
    reported: int
    true: int
    hits: int

    @property
    def precision(self) -> float:
        return self.hits / self.reported if self.reported else float("nan")

    @property
    def recall(self) -> float:
        return self.hits / self.true if self.true else float("nan")

    @property
    def f1(self) -> float:
        p, r = self.precision, self.recall
        if np.isnan(p) or np.isnan(r) or p + r == 0:
            return float("nan") if (np.isnan(p) or np.isnan(r)) else 0.0
        return 2 * p * r / (p + r)


def score_pairs(reported: np.ndarray, true: np.ndarray) -> PairScore:
    """Both arguments are sorted unique pair keys."""
    hits = len(np.intersect1d(reported, true, assume_unique=True))
    return PairScore(reported=len(reported), true=len(true), hits=hits)


def _choose2(x: np.ndarray) -> float:
    x = np.asarray(x, dtype=np.float64)
    return float(np.sum(x * (x - 1) / 2))


def adjusted_rand_index(labels_a: np.ndarray, labels_b: np.ndarray) -> float:
    labels_a = np.asarray(labels_a)
    labels_b = np.asarray(labels_b)
    if labels_a.shape != labels_b.shape:
        raise ValueError("partitions of different sizes")
    n = len(labels_a)
    if n < 2:
        return 1.0
    _, a = np.unique(labels_a, return_inverse=True)
    _, b = np.unique(labels_b, return_inverse=True)
    _, cells = np.unique(a.astype(np.int64) * (b.max() + 1) + b, return_counts=True)
    index = _choose2(cells)
    sum_a = _choose2(np.bincount(a))
    sum_b = _choose2(np.bincount(b))
    expected = sum_a * sum_b / (n * (n - 1) / 2)
    maximum = (sum_a + sum_b) / 2
    if maximum == expected:
        return 1.0
    return (index - expected) / (maximum - expected)


def wilson_interval(k: np.ndarray, n: np.ndarray, alpha: float = 0.05) -> tuple[np.ndarray, np.ndarray]:
    """Lower and upper bounds of the Wilson score interval (``nan`` where ``n == 0``)."""
    k = np.asarray(k, dtype=np.float64)
    n = np.asarray(n, dtype=np.float64)
    z = NormalDist().inv_cdf(1 - alpha / 2)
    with np.errstate(invalid="ignore", divide="ignore"):
        p = k / n
        denom = 1 + z * z / n
        centre = (p + z * z / (2 * n)) / denom
        half = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return np.clip(centre - half, 0.0, 1.0), np.clip(centre + half, 0.0, 1.0)


def band_probability(s: np.ndarray, rows: int, groups: int) -> np.ndarray:
    """P(at least one of ``groups`` bands of ``rows`` minhashes all agree) = 1-(1-s^R)^G."""
    return 1 - (1 - np.asarray(s, dtype=np.float64) ** rows) ** groups


def two_band_probability(s: np.ndarray, rows: int, groups: int) -> np.ndarray:
    """P(at least two bands agree) — a shared megashingle: 1-(1-p)^G-G p (1-p)^(G-1), p=s^R."""
    p = np.asarray(s, dtype=np.float64) ** rows
    return 1 - (1 - p) ** groups - groups * p * (1 - p) ** (groups - 1)


def minhash_report_probability(similarity: np.ndarray, threshold: float, num_perm: int) -> np.ndarray:
    """P(estimate ≥ threshold) for pairs of exact resemblance ``s`` under the MinHash model:
    the number of equal slots is Binomial(K, s) and a pair is reported when it reaches
    ``need = max(1, ⌈tK⌉)`` (the rule of ``fingerprint.similar_pairs``)."""
    from math import ceil

    from scipy.stats import binom

    need = max(1, ceil(threshold * num_perm - 1e-9))
    return binom.sf(need - 1, num_perm, np.asarray(similarity, dtype=np.float64))


def expected_minhash_scores(similarity: np.ndarray, threshold: float, num_perm: int) -> tuple[float, float, float]:
    """Expected (precision, recall, F1) of "estimate ≥ t" against "exact ≥ t" over pairs with the
    given exact resemblances (pairs not listed are assumed never reported)."""
    p = minhash_report_probability(similarity, threshold, num_perm)
    true = similarity >= threshold - 1e-12
    tp, fp, positives = float(p[true].sum()), float(p[~true].sum()), float(true.sum())
    precision = tp / (tp + fp) if tp + fp else float("nan")
    recall = tp / positives if positives else float("nan")
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else float("nan")
    return precision, recall, f1
