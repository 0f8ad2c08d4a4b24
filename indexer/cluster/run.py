"""Entry point of ``neardup cluster``: check, record ``building``, cluster, withdraw, record ``ready``.

The order matters for the seed protocol (:mod:`neardup.indexer.cluster.seeds`) and the backstop
(:mod:`neardup.indexer.cluster.backstop`): ``building`` is recorded (with the missing sub-fields)
before the refresh and the point in time the reading rests on; the backstop's cut is taken just
before that refresh; ``ready`` is recorded only after a final refresh and the backstop.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping

from neardup.config import Config
from neardup.fingerprint import scheme_version
from neardup.indexer.client import display_url, make_client
from neardup.indexer.cluster.aggregate import run_aggregate
from neardup.indexer.cluster.backstop import take_cut, withdraw_unexamined
from neardup.indexer.cluster.documents import CLUSTER_MAPPING
from neardup.indexer.cluster.incremental import run_incremental
from neardup.indexer.cluster.job import Job
from neardup.indexer.cluster.memory import run_memory
from neardup.indexer.cluster.meta import META_KEY, ClusterSettings, put_cluster_meta
from neardup.indexer.cluster.options import ClusterOptions, choose_strategy, cluster_params
from neardup.indexer.cluster.report import write_report
from neardup.indexer.cluster.result import ClusterResult
from neardup.indexer.errors import JobError
from neardup.indexer.mapping import plan_neardup_mapping, put_neardup_mapping
from neardup.indexer.progress import Progress
from neardup.indexer.reader import check_page_order
from neardup.indexer.retry import Retrier


def run_cluster(config: Config, options: ClusterOptions, *, progress: Progress | None = None) -> ClusterResult:
    """Check, put the mapping, cluster, write; :class:`JobError` if the job cannot start."""
    client = make_client(config.upstream)
    retrier = Retrier(display_url(config.upstream), config.indexer.max_retries)
    started = time.perf_counter()
    try:
        check_page_order(client)  # before anything is written: every strategy reads in that order
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
            # (indexer.cluster.seeds); the missing sub-fields go in the same request
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
            write_report(job, report, options.report)
            result.report = options.report
        result.seconds["total"] = time.perf_counter() - started
        return result
    finally:
        client.close()
