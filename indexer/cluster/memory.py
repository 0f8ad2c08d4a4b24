"""The ``memory`` strategy of ``neardup cluster``: read every fingerprint, cluster in memory.

Every document's ``v``, ``sig``, ``n`` and stored values are read (one point-in-time slice per
worker thread), sorted by key, clustered by LSH rounds with verified links
(:mod:`neardup.indexer.cluster.verification`), given stable ids (:func:`neardup.fingerprint.clustering.assign_ids`),
and only the values that differ are written. Memory: about K·8 + 300 bytes a document.
"""

from __future__ import annotations

import time

from neardup.fingerprint.clustering import assign_ids
from neardup.indexer.cluster.documents import Planned, band_strings
from neardup.indexer.cluster.job import Computed, Job
from neardup.indexer.cluster.report import ReportInput, pair_keys
from neardup.indexer.cluster.result import add_rounds, count_fingerprints, describe_clusters
from neardup.indexer.cluster.updates import pending_for
from neardup.indexer.cluster.verification import cluster_table


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
