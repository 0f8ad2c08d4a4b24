"""Reading one slice of an index with a point in time and ``search_after``.

Pages are sorted on ``_shard_doc`` (the cheapest total order under a PIT; OpenSearch before 3
has none, and sorts on ``_id`` instead: :func:`page_order`) and carry ``_seq_no``/``_primary_term``
for the conditional writes. Only the text fields are fetched, or the whole ``_source`` with its
bytes (``whole_sources``) for whole-document writes (:mod:`neardup.indexer.writer`).

If the point in time expires (a page took longer than ``keep_alive``, e.g. during an outage)
a new one is opened and the slice is read again from its start; the selection leaves out
what was already enriched, so little is read twice (with ``--force``, the second reading
rewrites documents with identical values, which Elasticsearch turns into no-ops).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from neardup.indexer.client import Client, cluster_setting
from neardup.indexer.errors import ClusterApiError, JobError, error_type_and_reason
from neardup.indexer.query import SliceSpec
from neardup.indexer.rawsource import attach_raw_sources
from neardup.indexer.retry import Retrier
from neardup.upstream import ClusterInfo

log = logging.getLogger(__name__)

#: Consecutive point-in-time expiries without a single page read in between before giving up.
MAX_PIT_RESTARTS = 3


class PitExpired(Exception):
    """The point in time is gone (``search_context_missing_exception``)."""


def is_pit_expired(exc: BaseException) -> bool:
    if not isinstance(exc, ClusterApiError) or exc.status != 404:
        return False
    return "search_context_missing_exception" in str(exc.body)


def page_order(engine: ClusterInfo) -> Any:
    """The sort that orders the pages of a point in time totally: ``_shard_doc``, which
    OpenSearch knows from 3.0 on; before, ``_id`` (its field data is on by default there; an
    index without a mapping yet has no ``_id`` to sort on unless told its type)."""
    if engine.is_opensearch and engine.major is not None and engine.major < 3:
        return {"_id": {"order": "asc", "unmapped_type": "keyword"}}
    return "_shard_doc"


def check_page_order(client: Client) -> None:
    """:class:`JobError` if the cluster cannot sort a point in time as :func:`page_order` asks:
    OpenSearch 2 sorts on ``_id`` only with ``indices.id_field_data.enabled``."""
    engine = client.engine
    if page_order(engine) == "_shard_doc":
        return
    if cluster_setting(client, "indices.id_field_data.enabled") == "false":
        raise JobError(f"{engine.engine} {engine.version} has no _shard_doc to read a point in time in order, "
                       "and sorting on _id instead needs indices.id_field_data.enabled, which is false on "
                       f"the cluster at {engine.url}; set it to true (or use OpenSearch 3)")


def shard_failure_types(response: dict[str, Any]) -> list[str]:
    failures = response.get("_shards", {}).get("failures", []) or []
    return [error_type_and_reason(f.get("reason", {}))[0] for f in failures]


@dataclass
class SliceReader:
    client: Client
    retrier: Retrier
    index: str
    query: dict[str, Any]
    slice: SliceSpec
    batch_size: int
    keep_alive: str
    source_fields: Sequence[str]
    pit_id: str | None = None
    pit_restarts: int = 0
    #: read the whole ``_source`` and keep its bytes (:mod:`neardup.indexer.rawsource`) instead
    #: of ``source_fields``
    whole_sources: bool = False
    _search_after: list[Any] | None = field(default=None, repr=False)

    def open(self) -> None:
        self.pit_id = self.retrier.call("opening a point in time", lambda: self.client.open_point_in_time(
            index=self.index, keep_alive=self.keep_alive))
        self._search_after = None

    def close(self) -> None:
        if self.pit_id is None:
            return
        pit_id, self.pit_id = self.pit_id, None
        try:
            self.client.close_point_in_time(id=pit_id)
        except Exception as exc:  # noqa: BLE001 - an unclosed PIT expires by itself
            log.debug("closing the point in time failed: %s", exc)

    def _search(self, **body: Any) -> dict[str, Any]:
        request: dict[str, Any] = {"pit": {"id": self.pit_id, "keep_alive": self.keep_alive}, **body}
        sliced = self.slice.body()
        if sliced is not None:
            request["slice"] = sliced
        try:
            response = self.retrier.call("searching", lambda: self.client.search(**request))
        except ClusterApiError as exc:
            if is_pit_expired(exc):
                raise PitExpired() from None
            raise
        failed = shard_failure_types(response)
        if failed:
            if "search_context_missing_exception" in failed:
                raise PitExpired()
            raise JobError(f"searching {self.index} failed on {len(failed)} shard(s) "
                           f"({', '.join(sorted(set(failed)))}); run the command again when the "
                           "cluster is healthy (already-enriched documents are skipped)")
        self.pit_id = response.get("pit_id", self.pit_id)
        return response

    def count(self, query: dict[str, Any]) -> int:
        """Documents of this slice matching ``query`` in the point in time."""
        response = self._search(size=0, query=query, track_total_hits=True)
        return int(response["hits"]["total"]["value"])

    def aggregate(self, query: dict[str, Any], aggs: dict[str, Any]) -> dict[str, Any]:
        """The ``aggregations`` of ``aggs`` over this slice's documents matching ``query``."""
        response = self._search(size=0, query=query, aggs=aggs, track_total_hits=False)
        return dict(response.get("aggregations", {}))

    def pages(self) -> Iterator[list[dict[str, Any]]]:
        """Pages of hits (each with ``_id``, ``_index``, ``_seq_no``, ``_primary_term``, ``_source``)."""
        failures_in_a_row = 0
        while True:
            try:
                response = self._search(
                    size=self.batch_size, query=self.query, sort=[page_order(self.client.engine)],
                    search_after=self._search_after, seq_no_primary_term=True,
                    track_total_hits=False,
                    source=True if self.whole_sources else list(self.source_fields) or False)
            except PitExpired:
                failures_in_a_row += 1
                self.pit_restarts += 1
                if failures_in_a_row > MAX_PIT_RESTARTS:
                    raise JobError(f"the point in time on {self.index} expired {failures_in_a_row} times "
                                   "in a row; raise indexer.keep_alive and run the command again") from None
                log.warning("point in time on %s expired; reopening it and reading slice %s again",
                            self.index, self.slice)
                self.close()
                self.open()
                continue
            failures_in_a_row = 0
            hits = response["hits"]["hits"]
            if not hits:
                return
            self._search_after = hits[-1]["sort"]
            if self.whole_sources:
                attach_raw_sources(response, hits)
            yield hits
            if len(hits) < self.batch_size:
                return
