"""Each collapsed hit's estimated similarity to the hit it is folded under (pure).

Groups are transitive (``a ~ b`` and ``b ~ c`` fold ``c`` under ``a`` even if ``a ≁ c``), so the
similarity a reader wants to see, that of a collapsed hit to its group's *kept* hit, is not
necessarily one of the pairs grouping found. It is computed here for the groups of the page
only, with the estimators grouping uses (:mod:`neardup.fingerprint.similarity`), for kept hit ``r`` and
collapsed hit ``m`` with ``K`` minhash slots and shingle counts ``a = |R|``, ``b = |M|``:

* resemblance: ``Ĵ(r, m) = (equal slots) / K``;
* containment: ``max(Ĉ(r in m), Ĉ(m in r))`` with ``Ĉ(A, B) = Ĵ (a + b) / ((1 + Ĵ) a)``;
* tfidf: the cosine of their stored TF-IDF vectors (:mod:`neardup.proxy.grouping.tfidf_groups`).

The value goes into the collapsed hit's ``fields["neardup.similarity"]`` (a one-element list,
as Elasticsearch's ``fields`` values are), rounded to 4 decimals. A mode without an estimator
here (one added to the proxy later) leaves the hits unannotated rather than showing a number
that means something else.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from neardup.fingerprint.similarity import containment_from_resemblance
from neardup.fingerprint.tfidf import cosine
from neardup.proxy.grouping import tfidf_groups
from neardup.proxy.grouping.collapse import Channel, Reader, set_field, stored_fingerprint, window_signatures

SIMILARITY_FIELD = "neardup.similarity"

#: ``estimator(signatures A (M, K), signatures B (M, K), counts A (M,), counts B (M,))`` →
#: the similarity of each row pair (M,).
Estimator = Callable[[np.ndarray, np.ndarray, np.ndarray, np.ndarray], np.ndarray]


def _resemblance(a: np.ndarray, b: np.ndarray, count_a: np.ndarray, count_b: np.ndarray) -> np.ndarray:
    equal = np.count_nonzero(a == b, axis=1) / max(a.shape[1], 1)
    return np.where((count_a > 0) & (count_b > 0), equal, 0.0)


def _containment(a: np.ndarray, b: np.ndarray, count_a: np.ndarray, count_b: np.ndarray) -> np.ndarray:
    j = _resemblance(a, b, count_a, count_b)
    return np.maximum(containment_from_resemblance(j, count_a, count_b),
                      containment_from_resemblance(j, count_b, count_a))


ESTIMATORS: dict[str, Estimator] = {"resemblance": _resemblance, "containment": _containment}


def annotate(hits: Sequence[dict[str, Any]], groups: Sequence[Sequence[int]], channel: Channel,
             mode: str, read: Reader) -> None:
    """Put ``fields["neardup.similarity"]`` on every collapsed member of ``groups`` (in place):
    its similarity to the group's first (kept) hit. The signatures are those grouping read
    (:func:`~neardup.proxy.grouping.collapse.window_signatures`, for a window's
    :class:`~neardup.proxy.grouping.collapse.WindowHits`),
    else the page's fingerprints are read in one call; all pairs are compared in one vectorised
    step. Call it before the fingerprint fields the proxy added are stripped from the hits.
    """
    estimator = ESTIMATORS.get(mode)
    folded = [members for members in groups if len(members) > 1]
    if mode == tfidf_groups.MODE and folded:
        _annotate_cosines(hits, folded, channel)
        return
    if estimator is None or not folded:
        return
    window = window_signatures(hits, channel, read)   # what grouping read: not read again
    if window is not None:
        usable, signatures, counts = window
        row_of = dict(zip(usable.tolist(), range(len(usable))))
    else:
        positions = [position for members in folded for position in members]
        usable, signatures, counts = read([stored_fingerprint(hits[p], channel) for p in positions])
        row_of = dict(zip([positions[k] for k in usable.tolist()], range(len(usable))))
    # (row of the kept hit, row of the member, member position) for every member whose group's
    # kept hit and itself have a usable fingerprint, in page order.
    kept_rows: list[int] = []
    member_rows: list[int] = []
    targets: list[int] = []
    for members in folded:
        kept_row = row_of.get(members[0])
        if kept_row is None:
            continue
        for member in members[1:]:
            member_row = row_of.get(member)
            if member_row is not None:
                kept_rows.append(kept_row)
                member_rows.append(member_row)
                targets.append(member)
    if not targets:
        return
    a, b = np.asarray(kept_rows, dtype=np.int64), np.asarray(member_rows, dtype=np.int64)
    values = np.asarray(estimator(signatures[a], signatures[b], counts[a], counts[b]), dtype=np.float64)
    for position, value in zip(targets, values.tolist()):
        set_field(hits[position], SIMILARITY_FIELD, [round(value, 4)])


def _annotate_cosines(hits: Sequence[dict[str, Any]], folded: Sequence[Sequence[int]], channel: Channel) -> None:
    """``tfidf`` mode: the TF-IDF cosine of each collapsed hit's vector to its kept hit's (grouping
    admitted only vectors of one version, so the kept hit's version is the one to compare)."""
    for members in folded:
        kept = tfidf_groups.stored_vector(hits[members[0]], channel)
        version = kept.get("v") if isinstance(kept, dict) else None
        if not isinstance(version, str):
            continue
        kept_vector = tfidf_groups.parse_vector(kept, version)
        if kept_vector is None:
            continue
        for member in members[1:]:
            vector = tfidf_groups.parse_vector(tfidf_groups.stored_vector(hits[member], channel), version)
            if vector is not None:
                set_field(hits[member], SIMILARITY_FIELD, [round(cosine(kept_vector, vector), 4)])
