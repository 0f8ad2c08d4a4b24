"""``neardup_mode=tfidf``: hits grouped by the TF-IDF cosine of their stored vectors (pure).

Two hits are similar when ``cos(a, b) = Σ_t a_t b_t / (‖a‖ ‖b‖) ≥ t`` over their stored top-k
vectors ``neardup.tf`` (:mod:`neardup.fingerprint.tfidf`; written by the indexer, weighted with the
statistics of their index when they were enriched, so nothing is looked up at search time). All
pairs of a window come from one sparse product (:func:`neardup.fingerprint.tfidf.cosine_pairs`). A hit
whose vector is missing, malformed, of another TF-IDF version than the proxy's configuration
makes, or empty (no terms) is never grouped.

The vector comes through the same channels as the fingerprint
(:mod:`neardup.proxy.handlers.search_plan`): from ``_source`` when the client gets it whole, else as the
``fields`` ``neardup.tf.v``, ``neardup.tf.t`` and ``neardup.tf.w``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import numpy as np
from msgspec import Raw

from neardup.fingerprint import FIELD
from neardup.fingerprint.tfidf import TF_FIELD, TfidfFormatError, TfidfVector, cosine_pairs
from neardup.proxy.transport.rawjson import source_vector

MODE: Final = "tfidf"
TF_KEYS = ("v", "t", "w")
#: The ``fields`` the proxy asks for in tfidf mode when the client does not get ``_source``.
TFIDF_FIELDS = tuple(f"{FIELD}.{TF_FIELD}.{key}" for key in TF_KEYS)


def stored_vector(hit: Any, channel: str) -> Any:
    """The stored vector object of a hit (``{"v", "t", "w"}``), from ``_source`` or rebuilt from
    ``fields``; None if absent."""
    if not isinstance(hit, dict):
        return None
    if channel == "_source":
        source = hit.get("_source")
        if type(source) is Raw:   # as the upstream sent it (proxy.rawjson)
            return source_vector(source)
        neardup = source.get(FIELD) if isinstance(source, dict) else None
        return neardup.get(TF_FIELD) if isinstance(neardup, dict) else None
    fields = hit.get("fields")
    if not isinstance(fields, dict):
        return None
    values: list[Any] = [fields.get(name) for name in TFIDF_FIELDS]
    if not all(isinstance(v, list) and len(v) == 1 for v in values):
        return None
    return {key: value[0] for key, value in zip(TF_KEYS, values)}


def parse_vector(obj: Any, version: str) -> TfidfVector | None:
    """The vector if ``obj`` is a well-formed, non-empty vector of ``version``, else None."""
    if obj is None:
        return None
    try:
        vector = TfidfVector.from_source(obj)
    except TfidfFormatError:
        return None
    return vector if vector.version == version and not vector.is_empty else None


def vector_pairs(stored: Sequence[Any], threshold: float, version: str
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(positions of the usable vectors, i, j): the pairs, as indices into those positions
    (i < j), whose cosine is at least ``threshold`` (and above 0)."""
    parsed = [parse_vector(obj, version) for obj in stored]
    positions = np.array([k for k, v in enumerate(parsed) if v is not None], dtype=np.int64)
    empty = np.empty(0, dtype=np.int64)
    if len(positions) < 2:
        return positions, empty, empty
    i, j, _ = cosine_pairs([parsed[k] for k in positions.tolist()], threshold)
    return positions, np.asarray(i, dtype=np.int64), np.asarray(j, dtype=np.int64)


