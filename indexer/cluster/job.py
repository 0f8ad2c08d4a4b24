"""One ``neardup cluster`` run: its client, settings and counters, and the reading and writing
every strategy shares (point-in-time reads, conditional writes, refreshes, the ``_meta`` record)."""

from __future__ import annotations

import bisect
import time
from array import array
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from neardup.config import Config
from neardup.fingerprint.clustering import ClusterParams
from neardup.indexer.client import Client
from neardup.indexer.cluster.backstop import Changed, Cut, take_cut
from neardup.indexer.cluster.documents import SOURCE_FIELDS, DocTable, Planned, Stored, doc_key, split_key
from neardup.indexer.cluster.meta import ClusterSettings, put_cluster_meta
from neardup.indexer.cluster.options import ClusterOptions
from neardup.indexer.cluster.result import ClusterResult
from neardup.indexer.cluster.updates import ClusterUpdater, unused_fingerprint_source, version_hash
from neardup.indexer.progress import Progress
from neardup.indexer.query import SliceSpec
from neardup.indexer.reader import SliceReader
from neardup.indexer.retry import Retrier
from neardup.indexer.writer import Pending


@dataclass
class Job:
    """Everything one run needs: client, settings, counters."""

    config: Config
    options: ClusterOptions
    client: Client
    retrier: Retrier
    settings: ClusterSettings
    params: ClusterParams
    indices: list[str]
    root_mappings: dict[str, Any]
    result: ClusterResult
    progress: Progress
    #: no index had clusters in its ``_meta`` when the run started: stored values are seeds
    first_run: bool = False
    #: full runs: per shard, the ``_seq_no`` up to which the run's reading saw every write
    #: (:mod:`neardup.indexer.cluster.backstop`), taken just before the refresh the reading rests on
    cut: Cut | None = None
    #: memory strategy: what the run read and computed for every document
    computed: Computed | None = None
    #: aggregate strategy, last pass: (index, _id) -> (``_seq_no`` and primary term read, written)
    own_writes: dict[tuple[str, str], tuple[int, int, int, int]] | None = None
    #: aggregate strategy, key pass: :func:`version_hash` of each version it wrote (while it
    #: runs: an ``array('q')``; then sorted, unique). Acknowledged before the refresh the
    #: aggregation rests on, so seen by it even when the cut lies below them (a replica's global
    #: checkpoint lags the primary's; another writer's request in flight holds back the local one).
    key_writes: Any = None

    @property
    def num_perm(self) -> int:
        return self.config.fingerprint.num_perm

    def previous_ids(self, stored: Sequence[Stored]) -> list[str | None]:
        """The previous cluster id of each document for :func:`~neardup.fingerprint.clustering.assign_ids` in a full run. On an
        index never clustered, what documents hold are seeds (their own key, see
        :mod:`neardup.indexer.cluster.seeds`) or values copied from elsewhere: none is an id to keep, so
        the ids are those of a first run, whether or not every document has a seed."""
        return [None] * len(stored) if self.first_run else [s.cluster for s in stored]

    def key(self, index: str, doc_id: str) -> str:
        return doc_key(index, doc_id, self.settings.with_index)

    def vouches(self, doc: Changed, checkpoint: int) -> bool:
        """Whether the cluster values ``doc`` holds (changed after the shard's ``checkpoint``)
        are the run's own, computed from its current fingerprint (:mod:`neardup.indexer.cluster.backstop`)."""
        if self.computed is not None:
            return self.computed.holds(self.key(doc.index, doc.id), doc.stored)
        if self.own_writes is not None:
            if self.wrote_in_key_pass(doc.index, doc.id, doc.seq_no, doc.primary_term):
                return True   # the aggregation saw this version; the last pass found its value right
            written = self.own_writes.get((doc.index, doc.id))
            return (written is not None and (written[2], written[3]) == (doc.seq_no, doc.primary_term)
                    and (written[0] <= checkpoint
                         or self.wrote_in_key_pass(doc.index, doc.id, written[0], written[1])))
        return False

    def wrote_in_key_pass(self, index: str, doc_id: str, seq_no: int, primary_term: int) -> bool:
        keys = self.key_writes
        if not isinstance(keys, np.ndarray) or not len(keys):
            return False
        wanted = version_hash(index, doc_id, seq_no, primary_term)
        position = int(np.searchsorted(keys, wanted))
        return position < len(keys) and int(keys[position]) == wanted

    def cut_and_refresh(self) -> None:
        """Record the shards' checkpoints, then refresh: the reading that follows rests on this
        refresh, so it sees every write at or below the cut (:mod:`neardup.indexer.cluster.backstop`).
        The aggregate strategy's cut; it replaces the one ``auto`` took before its count."""
        started = time.perf_counter()
        self.cut = take_cut(self.client, self.retrier, self.options.index)
        self.timed("backstop", started)
        self.refresh()

    def split(self, key: str) -> tuple[str, str]:
        return split_key(key, None if self.settings.with_index else self.indices[0])

    # ---- reading ----

    def read_table(self, query: Mapping[str, Any], label: str = "reading") -> DocTable:
        """Every document matching ``query`` (sliced point in time, one thread a slice)."""
        slices = [SliceSpec(i, self.options.workers) for i in range(self.options.workers)] \
            if self.options.workers > 1 else [SliceSpec()]
        started = time.perf_counter()
        with ThreadPoolExecutor(max_workers=len(slices)) as pool:
            tables = list(pool.map(lambda spec: self._read_slice(query, spec), slices))
        table = DocTable(self.num_perm)
        for part in tables:
            table.extend(part)
        self.timed(label, started)
        return table

    def _read_slice(self, query: Mapping[str, Any], spec: SliceSpec) -> DocTable:
        reader = SliceReader(self.client, self.retrier, self.options.index, dict(query), spec,
                             self.options.batch_size, self.config.indexer.keep_alive, SOURCE_FIELDS)
        table = DocTable(self.num_perm)
        reader.open()
        try:
            for hits in reader.pages():
                for hit in hits:
                    table.add_hit(hit, self.settings.version)
                self.result.stats.read += len(hits)
                self.progress.tick(self.result.stats)
        finally:
            self.result.stats.pit_restarts += reader.pit_restarts
            reader.close()
        return table

    def search_pages(self, query: Mapping[str, Any], fields: Sequence[str] = SOURCE_FIELDS):
        """Pages of hits matching ``query`` (one point in time, not sliced)."""
        reader = SliceReader(self.client, self.retrier, self.options.index, dict(query), SliceSpec(),
                             self.options.batch_size, self.config.indexer.keep_alive, list(fields))
        reader.open()
        try:
            yield from reader.pages()
        finally:
            reader.close()

    # ---- writing ----

    def write(self, planned: Sequence[tuple[Pending, Planned]]) -> None:
        """Send the updates: conditional partial updates, in batches, one bulk request at a time."""
        started = time.perf_counter()
        updater = ClusterUpdater(self.client, self.retrier, unused_fingerprint_source, SOURCE_FIELDS,
                                 self.config.indexer.max_retries, self.result.stats,
                                 plan={(p.index, p.id): want for p, want in planned},
                                 with_index=self.settings.with_index, own_writes=self.own_writes,
                                 written_versions=self.key_writes if isinstance(self.key_writes, array) else None)
        for start in range(0, len(planned), self.options.batch_size):
            updater.write([p for p, _ in planned[start:start + self.options.batch_size]])
            self.progress.tick(self.result.stats)
        self.result.changed_meanwhile += updater.changed_meanwhile
        self.timed("write", started)

    def timed(self, label: str, started: float) -> None:
        self.result.seconds[label] = self.result.seconds.get(label, 0.0) + time.perf_counter() - started

    def refresh(self) -> None:
        started = time.perf_counter()
        self.retrier.call("refreshing", lambda: self.client.indices.refresh(index=self.options.index))
        self.timed("refresh", started)

    # ---- _meta ----

    def put_meta(self, state: str, **figures: Any) -> None:
        started = time.perf_counter()
        put_cluster_meta(self.client, self.retrier, self.indices, self.root_mappings, self.settings.meta(state, **figures))
        self.timed("meta", started)


@dataclass
class Computed:
    """What the memory strategy read (``stored``) and computed (``ids``, ``bands``) for each
    document, by key: ``keys`` are sorted, so a key is looked up by bisection (no index built:
    these lists exist anyway)."""

    keys: Sequence[str]
    stored: Sequence[Stored]
    ids: Sequence[str]
    bands: Sequence[tuple[str, ...]]

    def holds(self, key: str, stored: Stored) -> bool:
        """Whether ``stored`` is the fingerprint the run read for ``key`` with the values it computed."""
        row = bisect.bisect_left(self.keys, key)
        if row == len(self.keys) or self.keys[row] != key:
            return False
        return (self.stored[row].token == stored.token and self.ids[row] == stored.cluster
                and self.bands[row] == (stored.bands or ()))
