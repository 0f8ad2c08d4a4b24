"""The update-timestamp window of ``neardup index --follow --since-field FIELD`` (pure).

A partial update that changes a document's text keeps its ``neardup`` object, whose scheme
version is still current, so the selection of documents without a current fingerprint
(:func:`neardup.indexer.query.selection`) never finds it again. When the document's ``FIELD``
holds its update time, each pass also reads the documents whose ``FIELD`` is newer than the
*high-water mark* ``H`` (the largest ``FIELD`` the previous pass's point in time held) minus an
overlap ``o``::

    selection  OR  FIELD > H - o

and rewrites the fingerprint of those whose text no longer gives the stored one. The overlap
covers documents that become searchable after a newer one (the refresh interval, a client's
bulk buffer, clocks a little apart); a partial update that becomes searchable more than ``o``
later than the newest ``FIELD`` already seen is missed until the next ``--since`` run.

Times are epoch milliseconds, as the cluster gives a ``max`` of a date field and as the
``epoch_millis`` format reads them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from neardup.fingerprint.texts import field_value

#: Field types a follower's ``--since-field`` may have.
WINDOW_TYPES = frozenset({"date", "date_nanos"})


def window_start(high_water: float | None, newest: float | None, overlap: float) -> float | None:
    """Epoch ms after which documents are read again: the previous pass's high-water mark (or,
    on the first pass, the newest ``FIELD`` now) minus ``overlap`` seconds; None without either."""
    mark = high_water if high_water is not None else newest
    return None if mark is None else mark - overlap * 1000.0


def window_query(selection: Mapping[str, Any], since_field: str, start: float | None) -> dict[str, Any]:
    """``selection`` or ``since_field`` after ``start`` (epoch ms); ``selection`` alone without a start."""
    if start is None:
        return dict(selection)
    recent = {"range": {since_field: {"gt": math.floor(start), "format": "epoch_millis"}}}
    return {"bool": {"should": [selection, recent], "minimum_should_match": 1}}


def max_aggregation(since_field: str) -> dict[str, Any]:
    """The aggregation whose answer :func:`aggregated_max` reads."""
    return {"newest": {"max": {"field": since_field}}}


def aggregated_max(aggregations: Mapping[str, Any]) -> float | None:
    value = aggregations.get("newest", {}).get("value")
    return float(value) if isinstance(value, (int, float)) else None


def timestamp_millis(source: Mapping[str, Any], field: str) -> float | None:
    """Epoch ms of ``field`` in a ``_source``: a number (epoch ms, as a date field reads it), a
    string of one, or an ISO 8601 date (without a zone: UTC); the latest of a list; None for
    anything else (a custom date format)."""
    value = field_value(source, field)
    if isinstance(value, list):
        times = [t for t in (_millis(v) for v in value) if t is not None]
        return max(times) if times else None
    return _millis(value)


def _millis(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if not isinstance(value, str):
        return None
    try:
        return float(value)
    except ValueError:
        pass
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.timestamp() * 1000.0
