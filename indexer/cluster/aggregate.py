"""The ``aggregate`` strategy of ``neardup cluster``: candidate buckets from Elasticsearch.

For indices whose fingerprints do not fit in one machine's memory. Four passes:

1. **Keys.** Every document is read a page at a time (point in time); the LSH keys of its
   signature are written to ``neardup.bands`` where they differ from what it holds.
2. **Buckets.** A ``composite`` aggregation over ``neardup.bands`` pages through every key in
   key order; Elasticsearch computes the buckets across its shards. Keys held by two or more
   documents are taken in batches (about :data:`FETCH_DOCS` members a batch); the members of a
   batch are fetched (``terms`` query on the keys, ``_source`` = ``neardup.*``), the pairs of
   each bucket are verified on their signatures exactly as the memory strategy does
   (:func:`neardup.fingerprint.clustering.shared_buckets`, skipping pairs already joined), and the
   links are merged into a union-find forest over the documents that had a candidate.
3. **Ids.** :func:`neardup.fingerprint.clustering.assign_ids` over those documents; every other document
   is a cluster of its own, whose id is its own key.
4. **Clusters.** Every document is read again and ``neardup.cluster`` written where it differs.

Memory: one page or one batch of fingerprints, plus, for each document that shares a key with
another, its key, its previous cluster id and one forest link (the forest is compressed with
:func:`neardup.fingerprint.group_labels` whenever the links outnumber the documents).

Equal to the memory strategy: the candidate keys are the same (bands and extra supershingle
keys), every pair of a bucket is compared unless already joined, and the ids follow the same
rule, so the clusters and ids are the same, except where a bucket is so large that it is
compared by windows (both strategies count those buckets; the windows depend on the clusters
found before, which differ between the strategies).
"""

from __future__ import annotations

import time
from array import array
from collections.abc import Iterator
from typing import Any

import numpy as np

from neardup.fingerprint import BANDS_KEY, FIELD
from neardup.fingerprint.clustering import (
    NEAR_MARGIN,
    assign_ids,
    cross_pairs,
    equal_slots,
    shared_buckets,
    unique_pairs,
    window_pairs,
)
from neardup.fingerprint.lsh import needed_matches
from neardup.fingerprint.similarity import group_labels
from neardup.indexer.cluster.documents import DocTable, Planned, band_strings
from neardup.indexer.cluster.job import Job
from neardup.indexer.cluster.queries import keys_query
from neardup.indexer.cluster.report import ReportInput
from neardup.indexer.cluster.result import count_fingerprints
from neardup.indexer.cluster.updates import pending_for

#: Buckets per page of the composite aggregation.
COMPOSITE_PAGE = 5000
#: Members fetched per batch of buckets (the memory bound of pass 2), and keys per batch.
FETCH_DOCS = 5000
MAX_KEYS = 1000
SAMPLE = 2000


class Forest:
    """Union-find over the documents that had a candidate, as links compressed to a forest."""

    def __init__(self) -> None:
        self.keys: list[str] = []
        self.previous: list[str | None] = []
        self.position: dict[str, int] = {}
        self.labels = np.empty(0, dtype=np.int64)
        self._links: list[tuple[np.ndarray, np.ndarray]] = []
        self._pending = 0

    def node(self, key: str, previous: str | None) -> int:
        found = self.position.get(key)
        if found is None:
            found = self.position[key] = len(self.keys)
            self.keys.append(key)
            self.previous.append(previous)
        return found

    def label_of(self, nodes: np.ndarray) -> np.ndarray:
        """Current labels (nodes added since the last compression are their own)."""
        out = nodes.copy()
        known = nodes < len(self.labels)
        out[known] = self.labels[nodes[known]]
        return out

    def link(self, i: np.ndarray, j: np.ndarray) -> None:
        if len(i):
            self._links.append((i, j))
            self._pending += len(i)
            if self._pending > max(100_000, len(self.keys)):
                self.compress()

    def compress(self) -> np.ndarray:
        n = len(self.keys)
        grown = np.arange(n, dtype=np.int64)
        grown[:len(self.labels)] = self.labels
        parts_i = [np.flatnonzero(grown != np.arange(n))]
        parts_j = [grown[parts_i[0]]]
        for i, j in self._links:
            parts_i.append(i)
            parts_j.append(j)
        self.labels = group_labels(n, np.concatenate(parts_i), np.concatenate(parts_j))
        self._links, self._pending = [], 0
        return self.labels


def run_aggregate(job: Job) -> ReportInput:
    started = time.perf_counter()
    job.key_writes = array("q")   # the key pass's writes: seen by the aggregation whatever the cut
    _write_keys(job)
    job.key_writes = np.unique(np.frombuffer(job.key_writes, dtype=np.int64))
    job.cut_and_refresh()  # the aggregation below sees every write up to the cut (cluster_backstop)
    job.result.seconds["keys"] = time.perf_counter() - started
    started = time.perf_counter()
    forest = Forest()
    report = ReportInput([], [], [], [])
    for keys in _shared_keys(job):
        _link_batch(job, keys, forest, report)
    labels = forest.compress()
    ids = assign_ids(forest.keys, labels, forest.previous)
    job.result.seconds["buckets"] = time.perf_counter() - started
    _, sizes = np.unique(labels, return_counts=True)
    grouped = sizes[sizes > 1]
    job.result.clusters = len(grouped)
    job.result.in_clusters = int(grouped.sum())
    job.result.largest = int(grouped.max()) if len(grouped) else (1 if job.result.documents else 0)
    renamed = {key: cluster for key, cluster in zip(forest.keys, ids) if cluster != key}
    job.own_writes = {}  # the backstop vouches for this pass's writes of versions the aggregation saw
    _write_clusters(job, renamed)
    report.keys, report.ids = forest.keys, ids
    report.singletons_outside = job.result.documents - len(forest.keys)
    return report


def _all_pages(job: Job) -> Iterator[DocTable]:
    for hits in job.search_pages({"match_all": {}}):
        table = DocTable(job.num_perm)
        for hit in hits:
            table.add_hit(hit, job.settings.version)
        job.result.stats.read += len(hits)
        yield table


def _write_keys(job: Job) -> None:
    for table in _all_pages(job):
        count_fingerprints(job.result, table)
        planned = []
        for row, keys in enumerate(band_strings(job.params.banding, table)):
            want = Planned(None, keys, table.stored[row].token)
            if want.differs(table.stored[row]):
                planned.append(pending_for(table, row, want))
        job.write(planned)


def _write_clusters(job: Job, renamed: dict[str, str]) -> None:
    """Pass 4: every document's cluster id (its own key unless ``renamed``)."""
    for table in _all_pages(job):
        planned = []
        for row, key in enumerate(table.keys(job.settings.with_index)):
            want = Planned(renamed.get(key, key), None, table.stored[row].token)
            if want.differs(table.stored[row]):
                planned.append(pending_for(table, row, want))
        job.write(planned)


def _shared_keys(job: Job) -> Iterator[list[str]]:
    """Batches of keys held by two or more documents, from a composite aggregation."""
    after: dict[str, Any] | None = None
    batch: list[str] = []
    members = 0
    version = job.settings.version
    while True:
        composite: dict[str, Any] = {"size": COMPOSITE_PAGE,
                                     "sources": [{"key": {"terms": {"field": f"{FIELD}.{BANDS_KEY}"}}}]}
        if after is not None:
            composite["after"] = after
        response = job.retrier.call("aggregating the band keys", lambda: job.client.search(
            index=job.options.index, size=0, track_total_hits=False,
            query={"term": {f"{FIELD}.v": version}}, aggs={"keys": {"composite": composite}}))
        aggregation = response["aggregations"]["keys"]
        for bucket in aggregation["buckets"]:
            if bucket["doc_count"] < 2:
                continue
            batch.append(bucket["key"]["key"])
            members += int(bucket["doc_count"])
            if members >= FETCH_DOCS or len(batch) >= MAX_KEYS:
                yield batch
                batch, members = [], 0
        after = aggregation.get("after_key")
        if not aggregation["buckets"] or after is None:
            break
    if batch:
        yield batch


def _link_batch(job: Job, keys: list[str], forest: Forest, report: ReportInput) -> None:
    """Fetch the members of the buckets ``keys``, verify their pairs, link what is similar."""
    wanted = {key: position for position, key in enumerate(keys)}
    table = DocTable(job.num_perm)
    seen: set[str] = set()
    for hits in job.search_pages(keys_query(job.settings.version, keys)):
        for hit in hits:
            key = job.key(hit["_index"], hit["_id"])
            if key not in seen:
                seen.add(key)
                table.add_hit(hit, job.settings.version)
    doc_keys = table.keys(job.settings.with_index)
    order = sorted(range(len(doc_keys)), key=doc_keys.__getitem__)  # row order = key order
    table = table.take(order)
    doc_keys = [doc_keys[p] for p in order]
    nodes = np.array([forest.node(k, p) for k, p in zip(doc_keys, job.previous_ids(table.stored))], dtype=np.int64)
    bucket_of, row_of = [], []
    counts = table.count_array()
    for row, stored in enumerate(table.stored):
        if counts[row] == 0:
            continue
        for key in stored.bands or ():
            position = wanted.get(key)
            if position is not None:
                bucket_of.append(position)
                row_of.append(row)
    labels = forest.label_of(nodes)
    buckets = shared_buckets(np.asarray(bucket_of, dtype=np.int64), np.asarray(row_of, dtype=np.int64), labels)
    params = job.params
    pair_counts = buckets.cross_pairs
    capped = np.flatnonzero(pair_counts > params.max_pairs_per_bucket)
    plain = np.flatnonzero(pair_counts <= params.max_pairs_per_bucket)
    i1, j1 = cross_pairs(buckets, plain)
    i2, j2 = window_pairs(buckets, capped, params.window)
    i, j = unique_pairs(np.concatenate((i1, i2)), np.concatenate((j1, j2)), max(len(table), 1))
    k = job.num_perm
    equal = equal_slots(table.signatures(), i, j)
    need = needed_matches(params.threshold, k)
    linked = equal >= need
    result = job.result
    result.candidates += len(i)
    result.linked += int(np.count_nonzero(linked))
    result.capped_buckets += len(capped)
    forest.link(nodes[i[linked]], nodes[j[linked]])
    near_top = needed_matches(min(params.threshold + NEAR_MARGIN, 1.0), k)
    near_floor = needed_matches(max(params.threshold - NEAR_MARGIN, 0.0), k)
    for mask, sample in ((linked & (equal < near_top), report.near_linked),
                         (~linked & (equal >= near_floor), report.near_rejected)):
        for a, b, e in zip(i[mask][:SAMPLE].tolist(), j[mask][:SAMPLE].tolist(), equal[mask][:SAMPLE].tolist()):
            if len(sample) < SAMPLE:
                sample.append((doc_keys[a], doc_keys[b], e / k))
