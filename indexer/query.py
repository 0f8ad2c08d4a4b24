"""What the enrichment job reads, and how the work is split (pure).

Selection. The job reads the documents that do not carry the current scheme version
(``must_not: term neardup.v``), so a resumed or nightly run reads only new, re-indexed or
stale documents. ``--force`` drops that filter. ``--since EXPR`` narrows the selection to
documents whose ``--since-field`` (default ``@timestamp``) is ``>= EXPR``, where EXPR is
anything a range query takes: ``now-1d``, ``now-1d/d``, ``2024-05-01``,
``2024-05-01T12:00:00Z`` or epoch milliseconds. ``--since`` does not imply ``--force``;
``--since now-1d --force`` re-fingerprints everything modified in the last day, including
documents whose text was changed by a partial update that kept an old ``neardup``.

Splitting. ``--slice I/N`` (0 ≤ I < N) with ``W`` workers per host cuts the index into
``N·W`` Elasticsearch slices; worker ``w`` of host ``I`` reads slice ``I·W + w``. Every
worker opens its own point in time, so the slices are cut on ``_seq_no`` (a value stored
with each document) rather than on Lucene document ids, which mean something only within
one point in time: the partition is the same for every host and worker as long as all run
with the same N and W.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from neardup.fingerprint import FIELD
from neardup.fingerprint.tfidf import TF_FIELD

#: Slicing field valid across points in time (``_id`` is refused under a PIT).
SLICE_FIELD = "_seq_no"
#: Where a document's TF-IDF vector keeps its version (``_source`` path and field name).
TF_VERSION_PATH = f"{FIELD}.{TF_FIELD}.v"

_SLICE = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s*$")


@dataclass(frozen=True)
class SliceSpec:
    """One Elasticsearch slice (``id`` of ``max``), or the whole index when ``max == 1``."""

    id: int = 0
    max: int = 1

    def body(self) -> dict[str, Any] | None:
        if self.max == 1:
            return None
        return {"field": SLICE_FIELD, "id": self.id, "max": self.max}

    def __str__(self) -> str:
        return "all" if self.max == 1 else f"{self.id}/{self.max}"


def parse_slice(text: str) -> tuple[int, int]:
    """``"I/N"`` → ``(I, N)`` with ``0 <= I < N``; raises ValueError with the rule."""
    match = _SLICE.match(text)
    if not match:
        raise ValueError(f"--slice {text!r}: expected I/N, e.g. 0/4 (slices count from 0)")
    index, count = int(match.group(1)), int(match.group(2))
    if count < 1 or index >= count:
        raise ValueError(f"--slice {text!r}: need 0 <= I < N (slices count from 0)")
    return index, count


def plan_slices(host_slice: int, host_count: int, workers: int) -> list[SliceSpec]:
    """The Elasticsearch slices the ``workers`` of host slice ``host_slice`` of ``host_count`` read."""
    total = host_count * workers
    return [SliceSpec(host_slice * workers + w, total) for w in range(workers)]


def _current(version: str, tf_version: str | None) -> list[dict[str, Any]]:
    """Filters of a current document: the scheme version, and the TF-IDF version when it is on."""
    filters: list[dict[str, Any]] = [{"term": {f"{FIELD}.v": version}}]
    if tf_version is not None:
        filters.append({"term": {TF_VERSION_PATH: tf_version}})
    return filters


def selection(*, version: str, force: bool, since: str | None, since_field: str,
              tf_version: str | None = None) -> dict[str, Any]:
    """The query of documents to (re-)fingerprint (with ``tf_version``: also those without a
    TF-IDF vector of that version)."""
    clauses: dict[str, Any] = {}
    if since is not None:
        clauses["filter"] = [{"range": {since_field: {"gte": since}}}]
    if not force:
        current = _current(version, tf_version)
        clauses["must_not"] = current if len(current) == 1 else [{"bool": {"filter": current}}]
    return {"bool": clauses} if clauses else {"match_all": {}}


def already_current(*, version: str, since: str | None, since_field: str,
                    tf_version: str | None = None) -> dict[str, Any]:
    """The query of documents the selection leaves out because they are current (for the summary)."""
    filters = _current(version, tf_version)
    if since is not None:
        filters.append({"range": {since_field: {"gte": since}}})
    return {"bool": {"filter": filters}}


def with_any_field(query: dict[str, Any], fields: Sequence[str]) -> dict[str, Any]:
    """``query`` narrowed to documents holding at least one of ``fields`` (a follower leaves out
    documents that can have no fingerprint, which it would otherwise read on every pass)."""
    present = [{"exists": {"field": name}} for name in fields]
    return {"bool": {"filter": [query, {"bool": {"should": present, "minimum_should_match": 1}}]}}
