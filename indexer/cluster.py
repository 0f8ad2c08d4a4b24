"""``neardup cluster``: collection-wide near-duplicate clusters, stored in every document.

Every document of the index gets ``neardup.cluster``, a keyword naming its cluster: the
single-link clusters of the documents' fingerprints at a resemblance threshold, found with
LSH (:mod:`fingerprint.clustering`), with ids that stay stable across runs
(:func:`fingerprint.clustering.assign_ids`). Documents with a usable fingerprint also get
``neardup.bands``, their LSH keys (:mod:`fingerprint.lsh`), so that later runs can find
candidates through Elasticsearch itself. Documents without a usable fingerprint are clusters
of their own (every document needs a value: native ``collapse`` would put all documents
without one into a single group).

Strategies (``--mode``):

* ``memory``: read ``v``, ``sig``, ``n`` and the stored cluster values of every document
  (point in time, one slice per worker thread, ``_source`` filtered to ``neardup.*``), cluster
  in memory, write what changed. About K·8 + 300 bytes of memory per document. Candidate pairs
  are verified on the exact resemblance of the documents' texts, read back for the candidates
  only (``--verify text``, the default; :mod:`indexer.cluster_verify`), or on the signatures
  (``--verify signature``). The other strategies verify on the signatures.
* ``aggregate`` (:mod:`indexer.cluster_aggregate`): for indices larger than one machine holds.
  The band keys are written first, then a ``composite`` aggregation over ``neardup.bands``
  (computed by the cluster across its shards) lists the keys held by more than one document;
  the job fetches those buckets' members a batch at a time, verifies and merges. Memory: one
  batch of fingerprints plus an id and a link for each document that has a candidate.
* ``auto`` (default): ``memory`` unless the index is larger than ``--memory-limit`` allows.

``--incremental``: only documents without a cluster (new ones, or newly fingerprinted) are
read; their candidates are looked up by their band keys (a ``terms`` query on
``neardup.bands``), and they join the cluster of the documents they link to, merging clusters
they bridge (the id of the larger survives; the other members are rewritten). Clusters not
touched are not read or written. Needs a complete earlier full run with the same threshold
and scheme (recorded in the index mapping's ``_meta``).

Writes are the indexer's conditional partial updates (:mod:`indexer.writer`): only
``neardup.cluster`` and ``neardup.bands`` change, only where they differ from what is stored,
each conditional on the ``_seq_no`` read. A document changed meanwhile is re-read: if its
fingerprint is the same, the update is retried; if not, it is left for the next run.

Seeds: until an index is first clustered, the indexer (``neardup index``, ``neardup load``)
writes with every fingerprint the values a singleton gets here (``cluster`` = the document's
key, ``bands`` = its keys for the default threshold; :mod:`indexer.cluster_seed`). The first
full run (no index had ``_meta.neardup_clusters`` when it started) takes no stored value as a
previous id (:meth:`Job.previous_ids`), so its ids are those of a first run without seeds (the
smallest member key), also when only some documents have a seed; it compares what it computed
with what is stored as always, so it writes only what differs: the members that join another
member's cluster (475 of 19,043 stories on Reuters, instead of all of them), and documents
without a seed (loaded by another program, fingerprinted by ``neardup enrich``, or without a
fingerprint).

The index mapping's ``_meta.neardup_clusters`` records the threshold, mode, scheme version and
LSH parameters the clusters were built for, and ``state``: ``building`` from the start of a full
run (put together with the missing ``neardup`` sub-fields, in one put-mapping request *before*
the run's refresh and point in time: from then on the indexer writes no seeds, and withdraws
the seeds it wrote that this run may not have seen; see :mod:`indexer.cluster_seed`), ``ready``
when every document holds its value (put after the final refresh, so that whoever reads
``ready`` also finds the values searchable; an incremental run skips it when nothing was written).
The proxy collapses natively on ``neardup.cluster`` only when the state is ``ready``, the
threshold and scheme match, and no document lacks a value. Before ``ready``, a full run
withdraws the cluster values of documents changed after its reading that it cannot vouch for
(seeds of an indexer worker that died before its check, say; :mod:`indexer.cluster_backstop`):
they count as new, for the next ``--incremental``.
"""

from __future__ import annotations

import bisect
import datetime
import logging
import sys
import time
from array import array
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from elasticsearch import ApiError, Elasticsearch

from neardup.config import Config
from neardup.fingerprint import FIELD, FingerprintParams, scheme_version
from neardup.fingerprint.clustering import Clustering, ClusterParams, PairSample, RoundStats, assign_ids, cluster_signatures
from neardup.fingerprint.lsh import Banding, choose_banding, key_strings
from neardup.indexer.client import display_url, make_client
from neardup.indexer.cluster_backstop import Changed, Cut, take_cut, withdraw_unexamined
from neardup.indexer.cluster_docs import (
    BANDS,
    CLUSTER,
    CLUSTER_MAPPING,
    SOURCE_FIELDS,
    DocTable,
    Planned,
    Stored,
    doc_key,
    split_key,
    stored_values,
)
from neardup.indexer.cluster_verify import cluster_table
from neardup.indexer.errors import JobError, error_type_and_reason
from neardup.indexer.mapping import plan_neardup_mapping, put_neardup_mapping
from neardup.indexer.progress import Progress
from neardup.indexer.query import SliceSpec
from neardup.indexer.reader import SliceReader
from neardup.indexer.retry import Retrier
from neardup.indexer.stats import JobStats
from neardup.indexer.writer import BulkUpdater, Pending

log = logging.getLogger(__name__)

META_KEY = "neardup_clusters"
Strategy = Literal["auto", "memory", "aggregate"]
#: Estimated bytes of memory per document in the memory strategy, besides the signature.
BYTES_PER_DOC = 400
#: New documents handled per incremental batch (their keys go into one terms query).
INCREMENTAL_BATCH = 1000


@dataclass(frozen=True)
class ClusterOptions:
    index: str
    threshold: float
    mode: Strategy = "auto"
    incremental: bool = False
    report: str | None = None
    title_fields: tuple[str, ...] = ("title", "body")
    workers: int = 2
    batch_size: int = 1000
    memory_limit_mb: int = 2048
    supershingles: bool = True
    rounds: bool = True
    verify: str = "text"             # memory strategy: "text" (exact) or "signature"; see indexer.cluster_verify


@dataclass(frozen=True)
class ClusterSettings:
    """What the clusters are built for; stored in ``_meta`` and checked by later runs."""

    version: str
    threshold: float
    banding: Banding
    with_index: bool
    verification: str = "signature"  # how links were verified (indexer.cluster_verify); not checked

    def meta(self, state: str, **figures: Any) -> dict[str, Any]:
        return {"state": state, "threshold": self.threshold, "mode": "resemblance", "version": self.version,
                "lsh": self.banding.describe(), "keys": "index/id" if self.with_index else "id",
                "verification": self.verification,
                "updated": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
                **figures}

    def mismatch(self, meta: Mapping[str, Any] | None) -> str | None:
        """Why clusters recorded in ``meta`` cannot be extended by this run, or None."""
        if not isinstance(meta, Mapping):
            return "the index has no clusters yet"
        if meta.get("state") != "ready":
            return f"the last run did not finish (state {meta.get('state')!r})"
        wanted = self.meta("ready")
        for name in ("threshold", "mode", "version", "lsh", "keys"):
            if meta.get(name) != wanted[name]:
                return f"the clusters were built with {name} {meta.get(name)!r}, this run uses {wanted[name]!r}"
        return None


def cluster_params(options: ClusterOptions, fingerprint: FingerprintParams) -> ClusterParams:
    banding = choose_banding(options.threshold, fingerprint.num_perm,
                             fingerprint.groups if options.supershingles else 0)
    return ClusterParams(options.threshold, banding, rounds=options.rounds)


@dataclass
class ClusterResult:
    index: str
    strategy: str
    incremental: bool
    threshold: float
    banding: Banding
    documents: int = 0
    fingerprinted: int = 0           # usable fingerprint with at least one shingle
    without_fingerprint: int = 0     # none, another scheme, malformed, or no words
    clusters: int = 0                # clusters of two or more documents
    in_clusters: int = 0             # documents in those clusters
    largest: int = 0
    candidates: int = 0
    linked: int = 0
    capped_buckets: int = 0
    rounds: list[RoundStats] = field(default_factory=list)
    stats: JobStats = field(default_factory=JobStats)
    changed_meanwhile: int = 0       # fingerprint changed while clustering: left for the next run
    withdrawn_unexamined: int = 0    # values written after the run read the document, withdrawn (cluster_backstop)
    new_documents: int = 0           # incremental: documents without a cluster
    joined: int = 0                  # incremental: of those, joined an existing cluster
    merged: int = 0                  # incremental: existing clusters merged into another
    seconds: dict[str, float] = field(default_factory=dict)
    report: str | None = None
    verification: Any = None         # indexer.cluster_verify.VerifyStats (memory strategy)

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index, "strategy": self.strategy, "incremental": self.incremental,
            "threshold": self.threshold, "lsh": self.banding.describe(), "documents": self.documents,
            "fingerprinted": self.fingerprinted, "without_fingerprint": self.without_fingerprint,
            "clusters": self.clusters, "in_clusters": self.in_clusters, "largest": self.largest,
            "candidates": self.candidates, "linked": self.linked, "capped_buckets": self.capped_buckets,
            "rounds": [vars(r) for r in self.rounds], "updated": self.stats.updated,
            "unchanged": self.stats.unchanged, "conflicts_retried": self.stats.conflicts_retried,
            "deleted_meanwhile": self.stats.deleted_meanwhile, "changed_meanwhile": self.changed_meanwhile,
            "withdrawn_unexamined": self.withdrawn_unexamined,
            "failed": self.stats.failed, "failures": self.stats.failures.counts,
            "new_documents": self.new_documents, "joined": self.joined, "merged": self.merged,
            "seconds": {k: round(v, 3) for k, v in self.seconds.items()}, "report": self.report,
            "verification": self.verification.to_dict() if self.verification is not None else {"method": "signature"},
        }


def format_result(result: ClusterResult) -> str:
    b = result.banding
    lines = [
        f"index {result.index}: {result.documents} documents, {result.strategy} strategy"
        + (", incremental" if result.incremental else ""),
        f"  threshold          {result.threshold:g} (resemblance; LSH {b.bands} bands × {b.rows} rows"
        + (f" + {len(b.extra_groups)} supershingle keys" if b.extra_groups else "") + ")",
        f"  fingerprinted      {result.fingerprinted}",
        f"  no fingerprint     {result.without_fingerprint}  (own cluster each: none, another scheme, "
        "malformed or no words)",
        f"  clusters (2+)      {result.clusters}  holding {result.in_clusters} documents, largest {result.largest}",
        f"  candidates         {result.candidates} compared, {result.linked} at or above the threshold",
        "  verification       " + (result.verification.describe() if result.verification is not None
                                    else "signature estimates (Ĵ ≥ t)"),
    ]
    if result.incremental:
        lines.append(f"  new documents      {result.new_documents}: {result.joined} joined existing clusters, "
                     f"{result.merged} clusters merged into others")
    if result.capped_buckets:
        lines.append(f"  note: {result.capped_buckets} very large buckets were compared by windows only")
    stats = result.stats
    lines += [
        f"  written            {stats.updated}  (cluster id or keys changed)",
        f"  unchanged          {stats.unchanged}",
        f"  conflicts retried  {stats.conflicts_retried}",
        f"  changed meanwhile  {result.changed_meanwhile}  (fingerprint changed: placed by the next run)",
        f"  deleted meanwhile  {stats.deleted_meanwhile}",
        f"  withdrawn          {result.withdrawn_unexamined}  (values written after the run read the document: "
        "placed by the next --incremental)",
        f"  failed             {stats.failed}",
    ]
    for reason, count in sorted(stats.failures.counts.items(), key=lambda kv: -kv[1]):
        lines.append(f"    {count} × {reason} (e.g. {', '.join(stats.failures.examples.get(reason, []))})")
    lines.append("  time: " + ", ".join(f"{name} {seconds:.1f}s" for name, seconds in result.seconds.items()))
    if result.report:
        lines.append(f"  report: {result.report}")
    return "\n".join(lines)


# --- the shell ---------------------------------------------------------------------------------

@dataclass
class Job:
    """Everything one run needs: client, settings, counters."""

    config: Config
    options: ClusterOptions
    client: Elasticsearch
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
    #: (:mod:`indexer.cluster_backstop`), taken just before the refresh the reading rests on
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
        """The previous cluster id of each document for :func:`assign_ids` in a full run. On an
        index never clustered, what documents hold are seeds (their own key, see
        :mod:`indexer.cluster_seed`) or values copied from elsewhere: none is an id to keep, so
        the ids are those of a first run, whether or not every document has a seed."""
        return [None] * len(stored) if self.first_run else [s.cluster for s in stored]

    def key(self, index: str, doc_id: str) -> str:
        return doc_key(index, doc_id, self.settings.with_index)

    def vouches(self, doc: Changed, checkpoint: int) -> bool:
        """Whether the cluster values ``doc`` holds (changed after the shard's ``checkpoint``)
        are the run's own, computed from its current fingerprint (:mod:`indexer.cluster_backstop`)."""
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
        refresh, so it sees every write at or below the cut (:mod:`indexer.cluster_backstop`).
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
        """Send the updates (conditional partial updates, in batches, one bulk request at a time:
        two in flight were not faster on Reuters, see bench/RESULTS.md)."""
        started = time.perf_counter()
        updater = ClusterUpdater(self.client, self.retrier, _unused_fingerprint_source, SOURCE_FIELDS,
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


def put_cluster_meta(client: Elasticsearch, retrier: Retrier, indices: Sequence[str], root_mappings: dict[str, Any],
                     value: Mapping[str, Any], properties: Mapping[str, Any] | None = None, *,
                     require_acknowledged: bool = False) -> None:
    """Record ``value`` as ``_meta.neardup_clusters`` of every index (other ``_meta`` keys kept),
    with the missing ``neardup`` sub-fields ``properties`` in the same put-mapping request.

    ``require_acknowledged``: :class:`JobError` if Elasticsearch does not acknowledge the request
    (not every node applied it within the timeout). The ``building`` state needs it: the seed
    protocol (:mod:`indexer.cluster_seed`) relies on ``building`` being visible on every node
    before the run's refresh."""
    for index in indices:
        current = dict(root_mappings.get(index, {}).get("_meta") or {})
        current[META_KEY] = dict(value)
        body: dict[str, Any] = {"meta": current}
        if properties:
            body["properties"] = {FIELD: {"properties": dict(properties)}}
        try:
            response = retrier.call("recording the clusters in _meta",
                                    lambda: client.indices.put_mapping(index=index, **body))
        except ApiError as exc:
            if not properties or exc.meta.status in (401, 403, 404):
                raise
            kind, reason = error_type_and_reason(exc.body)
            raise JobError(f"Elasticsearch refused the neardup mapping for {index} ({kind}: {reason}); "
                           "nothing was changed") from None
        if require_acknowledged and not response.body.get("acknowledged"):
            raise JobError(f"Elasticsearch did not acknowledge recording `{value.get('state')}` in the _meta of "
                           f"{index} (not every node applied it in time): the run is not started, since the "
                           "indexer's cluster seeds rely on it; try again (a slow or unstable cluster?)")
        root_mappings.setdefault(index, {})["_meta"] = current


def version_hash(index: str, doc_id: str, seq_no: int, primary_term: int) -> int:
    """A signed 64-bit hash of a document version (within this process; a collision, ~N/2^64,
    could only keep a value the backstop would otherwise withdraw)."""
    return hash((index, doc_id, seq_no, primary_term))


def _unused_fingerprint_source(source: Mapping[str, Any]):  # pragma: no cover - ClusterUpdater overrides its use
    raise AssertionError("not used")


@dataclass
class ClusterUpdater(BulkUpdater):
    """:class:`BulkUpdater` for cluster values: a document re-read after a conflict gets the
    planned value again if its fingerprint is unchanged; otherwise it is left alone."""

    plan: dict[tuple[str, str], Planned] = field(default_factory=dict)
    with_index: bool = False
    changed_meanwhile: int = 0
    #: when given, each acknowledged write: (index, _id) -> (``_seq_no`` and primary term read, written)
    own_writes: dict[tuple[str, str], tuple[int, int, int, int]] | None = None
    #: when given, the :func:`version_hash` of each acknowledged write is appended
    written_versions: array[int] | None = None

    def _settle(self, item: Pending, answer: Mapping[str, Any], conflicted: list[Pending],
                again: list[Pending]) -> None:
        if ((self.own_writes is not None or self.written_versions is not None)
                and 200 <= int(answer.get("status", 0)) < 300 and "_seq_no" in answer):
            seq_no, primary_term = int(answer["_seq_no"]), int(answer["_primary_term"])
            if self.own_writes is not None:
                self.own_writes[(item.index, item.id)] = (item.seq_no, item.primary_term, seq_no, primary_term)
            if self.written_versions is not None:
                self.written_versions.append(version_hash(item.index, item.id, seq_no, primary_term))
        super()._settle(item, answer, conflicted, again)

    def pending_from_hit(self, hit: Mapping[str, Any], **counters: int) -> Pending | None:
        want = self.plan.get((hit["_index"], hit["_id"]))
        if want is None or stored_values(hit.get("_source")).token != want.token:
            self.changed_meanwhile += 1
            return None
        return Pending.of(hit, want.partial(), **counters)


def pending_for(table: DocTable, row: int, want: Planned) -> tuple[Pending, Planned]:
    return (Pending(table.index[row], table.ids[row], table.routing[row], table.seq_no[row],
                    table.primary_term[row], want.partial()), want)


# --- queries -----------------------------------------------------------------------------------

def new_documents_query(version: str) -> dict[str, Any]:
    """Documents an incremental run places: without a cluster, or with a usable non-empty
    fingerprint but no keys (fingerprinted since the last run)."""
    return {"bool": {"should": [
        {"bool": {"must_not": [{"exists": {"field": f"{FIELD}.{CLUSTER}"}}]}},
        {"bool": {"filter": [{"term": {f"{FIELD}.v": version}}, {"range": {f"{FIELD}.n": {"gte": 1}}}],
                  "must_not": [{"exists": {"field": f"{FIELD}.{BANDS}"}}]}},
    ], "minimum_should_match": 1}}


def keys_query(version: str, keys: Sequence[str]) -> dict[str, Any]:
    """Documents of the current scheme holding any of the band keys."""
    return {"bool": {"filter": [{"term": {f"{FIELD}.v": version}}, {"terms": {f"{FIELD}.{BANDS}": list(keys)}}]}}


def clusters_query(ids: Sequence[str]) -> dict[str, Any]:
    return {"bool": {"filter": [{"terms": {f"{FIELD}.{CLUSTER}": list(ids)}}]}}


def cluster_sizes(job: Job, ids: Sequence[str]) -> dict[str, int]:
    """Documents holding each of the cluster ids now."""
    if not ids:
        return {}
    response = job.retrier.call("counting cluster members", lambda: job.client.search(
        index=job.options.index, size=0, query=clusters_query(ids),
        aggs={"ids": {"terms": {"field": f"{FIELD}.{CLUSTER}", "size": len(ids)}}}))
    return {b["key"]: int(b["doc_count"]) for b in response["aggregations"]["ids"]["buckets"]}


# --- outcomes ----------------------------------------------------------------------------------

def describe_clusters(result: ClusterResult, ids: Sequence[str]) -> None:
    """Cluster counts from the final id of every document."""
    if not ids:
        return
    _, sizes = np.unique(np.asarray(ids, dtype=object), return_counts=True)
    result.clusters = int(np.count_nonzero(sizes > 1))
    result.in_clusters = int(sizes[sizes > 1].sum())
    result.largest = int(sizes.max())


def count_fingerprints(result: ClusterResult, table: DocTable) -> None:
    counts = table.count_array()
    result.documents += len(table)
    result.fingerprinted += int(np.count_nonzero(counts > 0))
    result.without_fingerprint += int(np.count_nonzero(counts == 0))


def add_rounds(result: ClusterResult, clustering: Clustering) -> None:
    result.rounds += clustering.rounds
    result.candidates += clustering.candidates
    result.linked += sum(r.linked for r in clustering.rounds)
    result.capped_buckets += clustering.capped_buckets


def band_strings(banding: Banding, table: DocTable) -> list[tuple[str, ...]]:
    """The stored form of each document's keys (empty for documents that are never linked)."""
    counts = table.count_array()
    out: list[tuple[str, ...]] = [()] * len(table)
    rows = np.flatnonzero(counts > 0)
    if len(rows):
        for row, keys in zip(rows.tolist(), key_strings(banding.keys(table.signatures()[rows]))):
            out[row] = tuple(keys)
    return out


# --- memory strategy ---------------------------------------------------------------------------

@dataclass
class ReportInput:
    """What the HTML report needs besides titles (see :mod:`indexer.cluster_report`)."""

    ids: list[str]                   # cluster id per document key below
    keys: list[str]
    near_linked: list[tuple[str, str, float]]
    near_rejected: list[tuple[str, str, float]]
    singletons_outside: int = 0      # documents not listed in ``keys`` (aggregate: no candidate)


def pair_keys(sample: PairSample, keys: Sequence[str]) -> list[tuple[str, str, float]]:
    return [(keys[i], keys[j], float(s)) for i, j, s in zip(sample.i.tolist(), sample.j.tolist(), sample.sim.tolist())]


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


def run_memory(job: Job) -> ReportInput:
    table = job.read_table({"match_all": {}})
    keys = table.keys(job.settings.with_index)
    order = sorted(range(len(keys)), key=keys.__getitem__)  # document index order = key order
    table = table.take(order)
    keys = [keys[p] for p in order]
    count_fingerprints(job.result, table)
    started = time.perf_counter()
    # verification step (clustering-quality): links verified on the texts or on the signatures
    clustering = cluster_table(job, table)
    job.result.seconds["verify"] = sum(job.result.verification.seconds.values())
    ids = assign_ids(keys, clustering.labels, job.previous_ids(table.stored))
    bands = band_strings(job.params.banding, table)
    job.result.seconds["cluster"] = time.perf_counter() - started - job.result.seconds["verify"]
    add_rounds(job.result, clustering)
    describe_clusters(job.result, ids)
    planned = []
    job.computed = Computed(keys, table.stored, ids, bands)
    for row, (cluster, keys_of_row) in enumerate(zip(ids, bands)):
        want = Planned(cluster, keys_of_row, table.stored[row].token)
        if want.differs(table.stored[row]):
            planned.append(pending_for(table, row, want))
    job.write(planned)  # (`building` was recorded before the refresh, in run_cluster)
    return ReportInput(ids, keys, pair_keys(clustering.near_linked, keys), pair_keys(clustering.near_rejected, keys))


# --- incremental -------------------------------------------------------------------------------

def run_incremental(job: Job) -> ReportInput:
    """Place the documents without a cluster, a batch at a time (see the module docstring)."""
    report = ReportInput([], [], [], [])
    batch = DocTable(job.num_perm)
    started = time.perf_counter()
    for hits in job.search_pages(new_documents_query(job.settings.version)):
        for hit in hits:
            batch.add_hit(hit, job.settings.version)
        job.result.stats.read += len(hits)
        if len(batch) >= INCREMENTAL_BATCH:
            _incremental_batch(job, batch, report)
            batch = DocTable(job.num_perm)
    if len(batch):
        _incremental_batch(job, batch, report)
    job.result.seconds["total incremental"] = time.perf_counter() - started
    return report


def _incremental_batch(job: Job, new: DocTable, report: ReportInput) -> None:
    result = job.result
    result.new_documents += len(new)
    count_fingerprints(result, new)
    new_keys = new.keys(job.settings.with_index)
    new_bands = band_strings(job.params.banding, new)
    wanted = sorted({k for keys in new_bands for k in keys})
    existing = DocTable(job.num_perm)
    seen = set(new_keys)
    for start in range(0, len(wanted), 60_000):  # a terms query takes at most 65,536 values
        for hits in job.search_pages(keys_query(job.settings.version, wanted[start:start + 60_000])):
            for hit in hits:
                key = job.key(hit["_index"], hit["_id"])
                if key not in seen:
                    seen.add(key)
                    existing.add_hit(hit, job.settings.version)
    local = DocTable(job.num_perm)
    local.extend(new)
    local.extend(existing)
    keys = new_keys + existing.keys(job.settings.with_index)
    previous = [s.cluster for s in local.stored]
    # members of one previous cluster start together (their cluster is whole in the index)
    first_of: dict[str, int] = {}
    labels = np.array([first_of.setdefault(p, d) if p is not None else d for d, p in enumerate(previous)],
                      dtype=np.int64)
    clustering = cluster_signatures(local.signatures(), local.count_array(), job.params, labels=labels)
    add_rounds(result, clustering)
    sizes = cluster_sizes(job, sorted({p for p in previous if p is not None}))
    taken = set(cluster_sizes(job, new_keys))
    ids = assign_ids(keys, clustering.labels, previous, sizes=sizes, taken=taken)
    bands = new_bands + [None] * len(existing)
    planned = []
    retired: dict[str, str] = {}
    for row in range(len(local)):
        old = previous[row]
        if old is not None and old != ids[row]:
            retired[old] = ids[row]
        want = Planned(ids[row], bands[row], local.stored[row].token)
        if want.differs(local.stored[row]):
            planned.append(pending_for(local, row, want))
    existing_ids = {p for p in previous[len(new):] if p is not None}
    result.joined += sum(1 for row in range(len(new)) if ids[row] in existing_ids)
    result.merged += len(retired.keys() & existing_ids)
    # members of merged-away clusters that were not among the candidates
    local_keys = set(keys)
    if retired:
        for hits in job.search_pages(clusters_query(sorted(retired))):
            for hit in hits:
                if job.key(hit["_index"], hit["_id"]) in local_keys:
                    continue
                stored = stored_values(hit.get("_source"))
                if stored.cluster in retired:
                    want = Planned(retired[stored.cluster], None, stored.token)
                    planned.append((Pending.of(hit, want.partial()), want))
    job.write(planned)
    job.refresh()  # the next batch's candidate lookups must see this one
    report.keys += keys
    report.ids += ids
    report.near_linked += pair_keys(clustering.near_linked, keys)
    report.near_rejected += pair_keys(clustering.near_rejected, keys)


# --- entry point -------------------------------------------------------------------------------

def choose_strategy(options: ClusterOptions, documents: int, num_perm: int) -> str:
    if options.mode != "auto":
        return options.mode
    needed = documents * (num_perm * 8 + BYTES_PER_DOC)
    return "memory" if needed <= options.memory_limit_mb * 2**20 else "aggregate"


def run_cluster(config: Config, options: ClusterOptions, *, progress: Progress | None = None) -> ClusterResult:
    """Check, put the mapping, cluster, write; :class:`JobError` if the job cannot start."""
    client = make_client(config.upstream)
    retrier = Retrier(display_url(config.upstream), config.indexer.max_retries)
    started = time.perf_counter()
    try:
        plan = plan_neardup_mapping(client, retrier, options.index, extra=CLUSTER_MAPPING)
        indices = sorted(plan.root_mappings)
        params = cluster_params(options, config.fingerprint)
        settings = ClusterSettings(scheme_version(config.fingerprint), options.threshold, params.banding,
                                   with_index=len(indices) > 1)
        if options.incremental:
            for index in indices:
                reason = settings.mismatch((plan.root_mappings[index].get("_meta") or {}).get(META_KEY))
                if reason:
                    raise JobError(f"cannot add to the clusters of {index}: {reason}; run `neardup cluster "
                                   f"--index {options.index}` without --incremental first")
        first_run = not any(isinstance((m.get("_meta") or {}).get(META_KEY), Mapping)
                            for m in plan.root_mappings.values())
        mapping_started = time.perf_counter()
        if options.incremental:
            put_neardup_mapping(client, retrier, options.index, plan)
        else:
            # `building` before the refresh and the point in time: from here on the indexer writes
            # no cluster seeds, and withdraws those it wrote that this run may not see
            # (indexer.cluster_seed); the missing sub-fields go in the same request
            put_cluster_meta(client, retrier, indices, plan.root_mappings, settings.meta("building"), plan.missing,
                             require_acknowledged=True)
        mapping_seconds = time.perf_counter() - mapping_started
        # Searches see only refreshed writes: without this, fingerprints written just before (by a
        # `neardup index` that has finished) could be read as missing, and their documents left
        # without a cluster id as "changed meanwhile".
        # The backstop's cut (cluster_backstop) comes just before the refresh the strategy's
        # reading rests on: this one for memory; for aggregate, the one after its key pass
        # (Job.cut_and_refresh). `auto` chooses from the count, which needs this refresh, so it
        # takes the cut here for memory, its usual choice, and aggregate then takes it again.
        cut = take_cut(client, retrier, options.index) if options.mode != "aggregate" and not options.incremental \
            else None
        refresh_started = time.perf_counter()
        retrier.call("refreshing", lambda: client.indices.refresh(index=options.index))
        refresh_seconds = time.perf_counter() - refresh_started
        documents = retrier.call("counting documents", lambda: client.count(index=options.index))["count"]
        strategy = "incremental" if options.incremental else choose_strategy(options, documents, config.fingerprint.num_perm)
        result = ClusterResult(options.index, strategy, options.incremental, options.threshold, params.banding)
        progress = progress or Progress.for_stream(sys.stderr, f"cluster {options.index}")
        progress.add_total(documents)
        job = Job(config, options, client, retrier, settings, params, indices, plan.root_mappings, result, progress,
                  first_run=first_run, cut=cut)
        result.seconds["mapping"] = mapping_seconds
        result.seconds["first refresh"] = refresh_seconds
        if options.incremental:
            report = run_incremental(job)
        elif strategy == "memory":
            report = run_memory(job)
        else:
            from neardup.indexer.cluster_aggregate import run_aggregate

            report = run_aggregate(job)
        result.stats.transient_retries = retrier.retries
        if not options.incremental:
            figures = {"documents": result.documents, "clusters": result.clusters,
                       "in_clusters": result.in_clusters, "largest": result.largest}
        else:
            figures = {k: v for k, v in ((job.root_mappings[indices[0]].get("_meta") or {}).get(META_KEY) or {}).items()
                       if k in ("documents", "clusters", "in_clusters", "largest")}
        if options.incremental:
            if result.stats.updated:
                job.refresh()  # before `ready`: the proxy relies on the values once it reads `ready`
        elif result.stats.failed == 0:
            # always refreshed: also what others wrote meanwhile must be searchable for the backstop
            job.refresh()
            assert job.cut is not None
            started_backstop = time.perf_counter()
            result.withdrawn_unexamined = withdraw_unexamined(job, job.cut)
            job.timed("backstop", started_backstop)
        if result.stats.failed == 0:
            job.put_meta("ready", **figures)
        progress.close()
        if options.report:
            from neardup.indexer.cluster_report import write_report

            write_report(job, report, options.report)
            result.report = options.report
        result.seconds["total"] = time.perf_counter() - started
        return result
    finally:
        client.close()
