"""Separation of two score samples: ROC AUC and the best-threshold F1.

* AUC = P(score of a random positive > score of a random negative) + ½ P(tie), computed from
  the ranks of the pooled scores (Mann–Whitney U / (n₊ n₋)), ties given their mean rank.
* Best-threshold F1: over every threshold t (each distinct score), pairs with score ≥ t are
  reported; F1 = 2PR/(P+R) of that report; the maximum and its t. It depends on the ratio of
  positives to negatives, which is stated next to it.
"""

from __future__ import annotations

import numpy as np


def auc(positive: np.ndarray, negative: np.ndarray) -> float:
    positive = np.asarray(positive, dtype=np.float64)
    negative = np.asarray(negative, dtype=np.float64)
    if len(positive) == 0 or len(negative) == 0:
        return float("nan")
    pooled = np.concatenate([positive, negative])
    order = np.argsort(pooled, kind="stable")
    ranks = np.empty(len(pooled), dtype=np.float64)
    sorted_values = pooled[order]
    boundary = np.flatnonzero(np.concatenate(([True], sorted_values[1:] != sorted_values[:-1], [True])))
    for start, stop in zip(boundary[:-1], boundary[1:]):
        ranks[order[start:stop]] = (start + stop + 1) / 2.0      # mean of ranks start+1 … stop
    u = ranks[:len(positive)].sum() - len(positive) * (len(positive) + 1) / 2.0
    return float(u / (len(positive) * len(negative)))


def best_f1(positive: np.ndarray, negative: np.ndarray) -> tuple[float, float]:
    """(best F1, its threshold)."""
    scores = np.concatenate([positive, negative]).astype(np.float64)
    truth = np.concatenate([np.ones(len(positive), bool), np.zeros(len(negative), bool)])
    order = np.argsort(-scores, kind="stable")
    scores, truth = scores[order], truth[order]
    hits = np.cumsum(truth)
    reported = np.arange(1, len(scores) + 1)
    last = np.concatenate((scores[1:] != scores[:-1], [True]))  # a threshold takes all ties
    precision = hits / reported
    recall = hits / max(1, len(positive))
    f1 = np.where(precision + recall > 0, 2 * precision * recall / np.maximum(precision + recall, 1e-300), 0.0)
    f1 = np.where(last, f1, -1.0)
    best = int(np.argmax(f1))
    return float(f1[best]), float(scores[best])
