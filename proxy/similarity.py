"""Each collapsed hit's estimated similarity to the hit it is folded under (pure).

Groups are transitive (``a ~ b`` and ``b ~ c`` fold ``c`` under ``a`` even if ``a ≁ c``), so the
similarity a reader wants to see, that of a collapsed hit to its group's *kept* hit, is not
necessarily one of the pairs grouping found. It is computed here for the groups of the page
only, with the estimators grouping uses (:mod:`fingerprint.similarity`), for kept hit ``r`` and
collapsed hit ``m`` with ``K`` minhash slots and shingle counts ``a = |R|``, ``b = |M|``:

* resemblance: ``Ĵ(r, m) = (equal slots) / K``;
* containment: ``max(Ĉ(r in m), Ĉ(m in r))`` with ``Ĉ(A, B) = Ĵ (a + b) / ((1 + Ĵ) a)``.

The value goes into the collapsed hit's ``fields["neardup.similarity"]`` (a one-element list,
as Elasticsearch's ``fields`` values are), rounded to 4 decimals. A mode without an estimator
here (one added to the proxy later) leaves the hits unannotated rather than showing a number
that means something else.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from fingerprint.similarity import containment_from_resemblance
from proxy.collapse import Channel, Reader, stored_fingerprint

if TYPE_CHECKING:
    from proxy.search import Window

SIMILARITY_FIELD = "neardup.similarity"

#: ``estimator(kept signature (K,), collapsed signatures (M, K), kept count, collapsed counts (M,))``
#: → similarities (M,).
Estimator = Callable[[np.ndarray, np.ndarray, int, np.ndarray], np.ndarray]


def _resemblance(kept: np.ndarray, others: np.ndarray, kept_count: int, counts: np.ndarray) -> np.ndarray:
    equal = np.count_nonzero(others == kept[None, :], axis=1) / max(kept.shape[0], 1)
    return np.where((counts > 0) & (kept_count > 0), equal, 0.0)


def _containment(kept: np.ndarray, others: np.ndarray, kept_count: int, counts: np.ndarray) -> np.ndarray:
    j = _resemblance(kept, others, kept_count, counts)
    kept_in_other = containment_from_resemblance(j, kept_count, counts)
    other_in_kept = containment_from_resemblance(j, counts, kept_count)
    return np.maximum(kept_in_other, other_in_kept)


ESTIMATORS: dict[str, Estimator] = {"resemblance": _resemblance, "containment": _containment}


def similarities_to_kept(stored: Sequence[Any], mode: str, read: Reader) -> list[float | None]:
    """Similarity of ``stored[1:]`` to ``stored[0]`` (stored fingerprint objects of one group,
    kept hit first); ``None`` where either has no usable fingerprint or the mode has no estimator."""
    estimator = ESTIMATORS.get(mode)
    result: list[float | None] = [None] * (len(stored) - 1)
    if estimator is None or len(stored) < 2:
        return result
    positions, signatures, counts = read(stored)
    if len(positions) < 2 or positions[0] != 0:
        return result
    values = estimator(signatures[0], signatures[1:], int(counts[0]), counts[1:])
    for position, value in zip(positions[1:].tolist(), np.asarray(values, dtype=np.float64).tolist()):
        result[position - 1] = round(value, 4)
    return result


def annotate(hits: Sequence[dict[str, Any]], groups: Sequence[Sequence[int]], channel: Channel,
             mode: str, read: Reader) -> None:
    """Put ``fields["neardup.similarity"]`` on every collapsed member of ``groups`` (in place).

    Call it before the fingerprint fields the proxy added are stripped from the hits.
    """
    for members in groups:
        if len(members) < 2:
            continue
        values = similarities_to_kept([stored_fingerprint(hits[m], channel) for m in members], mode, read)
        for position, value in zip(members[1:], values):
            if value is None:
                continue
            hit = hits[position]
            fields = hit.get("fields")
            hit["fields"] = {**(fields if isinstance(fields, dict) else {}), SIMILARITY_FIELD: [value]}


def annotate_page(window: "Window", groups: Sequence[Sequence[int]], read: Reader) -> None:
    """:func:`annotate` the groups of the page a :class:`proxy.search.Window` will show."""
    plan = window.plan
    annotate(window.hits, groups[plan.start:plan.start + plan.size], plan.channel,
             plan.settings.mode, read)
