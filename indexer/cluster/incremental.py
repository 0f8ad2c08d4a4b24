"""``neardup cluster --incremental``: place the documents that have no cluster yet.

Only documents without a cluster (new, or newly fingerprinted) are read, a batch at a time.
Their candidates are looked up by their LSH keys (a ``terms`` query on ``neardup.bands``);
they join the clusters they link to, and clusters they bridge merge (the larger one's id
survives, the other members are rewritten). Clusters not touched are neither read nor written.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np

from neardup.fingerprint import CLUSTER_KEY, FIELD
from neardup.fingerprint.clustering import assign_ids, cluster_signatures
from neardup.indexer.cluster.documents import DocTable, Planned, band_strings, stored_values
from neardup.indexer.cluster.job import Job
from neardup.indexer.cluster.queries import clusters_query, keys_query, new_documents_query
from neardup.indexer.cluster.report import ReportInput, pair_keys
from neardup.indexer.cluster.result import add_rounds, count_fingerprints
from neardup.indexer.cluster.updates import pending_for
from neardup.indexer.writer import Pending

#: New documents handled per incremental batch (their keys go into one terms query).
INCREMENTAL_BATCH = 1000


def cluster_sizes(job: Job, ids: Sequence[str]) -> dict[str, int]:
    """Documents holding each of the cluster ids now."""
    if not ids:
        return {}
    response = job.retrier.call("counting cluster members", lambda: job.client.search(
        index=job.options.index, size=0, query=clusters_query(ids),
        aggs={"ids": {"terms": {"field": f"{FIELD}.{CLUSTER_KEY}", "size": len(ids)}}}))
    return {b["key"]: int(b["doc_count"]) for b in response["aggregations"]["ids"]["buckets"]}


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
