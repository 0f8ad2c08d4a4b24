"""The cluster run's backstop: before ``ready``, withdraw the cluster values it did not examine.

A seed whose check never ran (its indexer worker died between the acknowledgement and the
check, :mod:`neardup.indexer.cluster.seeds`), or a value the ``aggregate`` strategy's last pass wrote
on a document added after the aggregation read the keys, would leave a document holding a
value no run examined. So, just before ``ready``, the run searches, per shard, the documents
whose ``_seq_no`` lies above a *cut* (the shard's checkpoint taken just before the refresh its
reading rests on: every operation at or below it was seen) and withdraws (sets ``cluster`` and
``bands`` to null, so they wait for ``--incremental``) every value it cannot vouch for
(:func:`withdraw_unexamined` gives the details and why they are sound).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from neardup.config import Config
from neardup.fingerprint import CLUSTER_KEY, FIELD
from neardup.indexer.client import Client
from neardup.indexer.cluster.documents import SOURCE_FIELDS, Stored, stored_values
from neardup.indexer.cluster.options import ClusterOptions
from neardup.indexer.cluster.result import ClusterResult
from neardup.indexer.cluster.seeds import withdraw_values
from neardup.indexer.docversion import DocVersion
from neardup.indexer.errors import JobError, error_type_and_reason
from neardup.indexer.retry import Retrier

log = logging.getLogger(__name__)

#: index -> shard number -> the highest ``_seq_no`` every copy had processed
Cut = dict[str, dict[int, int]]


def take_cut(client: Client, retrier: Retrier, index: str) -> Cut:
    """Per concrete index and shard, the smallest local checkpoint over the shard's copies, and
    not above the primary's global checkpoint (which covers an in-sync copy the statistics
    missed). A replica's own ``global_checkpoint`` is not used: it is the last one the primary
    told it, which lags once writes stop (until the next global checkpoint sync, up to
    ``index.global_checkpoint_sync.interval``), and a cut below the writes acknowledged before
    the run would withdraw values the run saw. Without a primary in the answer, every copy's
    global checkpoint counts (lower: only more is read)."""
    body = retrier.call("reading the shards' checkpoints", lambda: client.indices.stats(
        index=index, level="shards", metric="docs",
        filter_path=["indices.*.shards.*.seq_no", "indices.*.shards.*.routing.primary"]))
    cut: Cut = {}
    for name, data in (body.get("indices") or {}).items():
        shards = cut.setdefault(name, {})
        for shard, copies in (data.get("shards") or {}).items():
            copies = [c for c in copies if isinstance(c.get("seq_no"), Mapping)]
            points = [int(c["seq_no"]["local_checkpoint"]) for c in copies]
            primary = [c for c in copies if (c.get("routing") or {}).get("primary") is True]
            points += [int(c["seq_no"]["global_checkpoint"]) for c in (primary or copies)]
            shards[int(shard)] = min(points) if points else -1
    return cut


@dataclass
class Changed(DocVersion):
    """A document changed after the cut that holds a cluster value, at the version found."""

    shard: int
    stored: Stored
    attempts: int = 0


class Run(Protocol):
    """What the backstop needs of a cluster run (:class:`neardup.indexer.cluster.job.Job` is one)."""

    config: Config
    options: ClusterOptions
    client: Client
    retrier: Retrier
    result: ClusterResult

    def vouches(self, doc: Changed, checkpoint: int) -> bool:
        """Whether the values ``doc`` holds (changed after the shard's ``checkpoint``) are the run's own."""


def changed_since(job: Run, cut: Cut) -> Iterator[Changed]:
    """Documents with a ``_seq_no`` above their shard's cut holding ``neardup.cluster`` (refreshed)."""
    for index, shards in sorted(cut.items()):
        for shard, checkpoint in sorted(shards.items()):
            query = {"bool": {"filter": [{"range": {"_seq_no": {"gt": checkpoint}}},
                                         {"exists": {"field": f"{FIELD}.{CLUSTER_KEY}"}}]}}
            after: list[Any] | None = None
            while True:
                response = job.retrier.call("searching documents changed during the run", lambda: job.client.search(
                    index=index, preference=f"_shards:{shard}", query=query, sort=[{"_seq_no": "asc"}],
                    search_after=after, size=job.options.batch_size, seq_no_primary_term=True,
                    track_total_hits=False, source={"includes": SOURCE_FIELDS}))
                failed = (response.get("_shards") or {}).get("failed", 0)
                if failed:
                    raise JobError(f"searching the documents of {index} changed during the run failed on shard "
                                   f"{shard}: the clusters are not marked ready; run `neardup cluster` again")
                hits = response["hits"]["hits"]
                for hit in hits:
                    yield Changed.of(hit, shard, stored_values(hit.get("_source")))
                if len(hits) < job.options.batch_size:
                    break
                after = hits[-1]["sort"]


def withdraw_unexamined(job: Run, cut: Cut) -> int:
    """Withdraw the cluster values changed after ``cut`` that the run cannot vouch for; the
    number withdrawn (failures go to the run's stats).

    **Which documents: per shard, ``_seq_no`` above a cut.** Just before the refresh
    that its reading rests on, the run takes, for each shard, the smallest processed local
    checkpoint over its copies (and the primary's global checkpoint; :func:`take_cut`, one
    ``_stats?level=shards`` request). Every operation at or below it was in Lucene on every copy
    before that refresh, so the run's reading saw it; an operation above it may or may not have
    been seen. Where that refresh is depends on the strategy
    (:meth:`neardup.indexer.cluster.job.Job.cut_and_refresh`):

    * ``memory`` reads every document with a point in time opened after the run's first refresh,
      so the cut must come before that refresh. A cut taken after it would be unsound: an
      operation applied between the two would lie at or below it unseen, and the search below
      would not find it. ``auto`` chooses its strategy from the document count, which needs that
      refresh, so it takes the cut before it too, for memory, its usual choice.
    * ``aggregate`` rests on the refresh after its key pass (the aggregation reads the keys, and
      the last pass judges versions by whether the aggregation saw them). Its cut comes just
      before that refresh, not before the first one: an earlier cut would still be sound (a lower
      cut only reads more) but would withdraw the values of the documents another program wrote
      during the key pass (their versions lie above it), which the aggregation did see. When
      ``auto`` chose aggregate, this cut replaces the one it took before the count (one
      ``_stats`` request more, rather than one refresh more on every ``auto`` run that chooses
      memory).

    ``_seq_no`` counts per shard, so the search after the run is per shard
    (``preference=_shards:N``): documents with ``_seq_no`` above the shard's cut that hold a
    ``neardup.cluster`` (a range on the indexed ``_seq_no``; after a refresh, outside any point in
    time). That is exact (no document written
    after the cut is missed, whatever its key or value) and cheap: it reads only what changed
    while the run ran, about as much as was written meanwhile. The alternatives were worse: a
    search for seed-shaped values cannot be expressed without scripts (``cluster == _id``), and a
    full second read of the index costs as much as the run's own reading.

    **Which values stay** (:meth:`neardup.indexer.cluster.job.Job.vouches`):

    * ``memory``: the run holds, for every document it read, its fingerprint (``v``, ``sig``,
      ``n``) and the values it computed. A document whose fingerprint is the one the run read and
      that holds exactly the computed values stays (its other fields may have changed: the cluster
      values do not depend on them). Anything else (a key the run never read, a fingerprint changed
      since, values the run did not compute) is withdrawn.
    * ``aggregate`` (no per-document memory): the run records the writes of its last pass (the
      ``_seq_no`` read and the one written; one entry per document written, only the members that
      join another's cluster on a seeded index), and the versions its key pass wrote (a hash each:
      acknowledged before the refresh the aggregation rests on, they were seen even when the cut
      lies below them, another writer's request in flight holding the checkpoints back). A
      document stays if its current version is the key pass's write, or the last pass's write of
      a version the aggregation saw (at or below the cut, or the key pass's). Anything else
      above the cut is withdrawn, including a document some program touched after the cut without
      changing its fingerprint: safe, it waits for the next ``--incremental``.

    A withdrawal is conditional on the version the search found; on a conflict the document is
    read again (real time) and judged again. One that cannot be withdrawn is a failure of the run,
    which then does not mark ``ready``. Withdrawals are sent with ``refresh=true``.

    **Left uncovered:** a seeded request that Elasticsearch applies only after the backstop's
    refresh (sent before the worker died, still queued on the node while the whole run went by).

    **An index that lost its ``_meta``** (restored from a snapshot taken before the first run,
    reindexed, or ``_meta`` overwritten) but kept its cluster values: the proxy does not collapse
    natively on it (no ``ready``); ``neardup index``/``load`` write seeds again (for new or
    changed documents, which is correct: they are new to the next run); ``--incremental`` refuses
    (no clusters recorded); the next full run is a *first* run (:meth:`neardup.indexer.cluster.job.Job.previous_ids`),
    so its ids are those of a first run (the smallest member key) rather than the previous ids,
    and it rewrites the members whose id changes. The values are correct after it; only the
    stability of the ids across that run is lost. Stored values cannot be told apart from seeds
    (a seed is a valid singleton id), so they are not reused.
    """
    unvouched = [c for c in changed_since(job, cut) if not job.vouches(c, cut[c.index][c.shard])]
    failures = job.result.stats.failures

    def fail(reason: str, item: Changed) -> None:
        failures.add(f"cluster value not withdrawn ({reason}); run `neardup cluster` again", item.id)

    withdrawn = 0
    size = job.options.batch_size
    for start in range(0, len(unvouched), size):
        withdrawn += withdraw_values(job.client, job.retrier, unvouched[start:start + size],
                                     job.config.indexer.max_retries,
                                     what="withdrawing cluster values the run did not examine",
                                     judge_again=lambda items: _judge_again(job, cut, items, fail), fail=fail)
    if withdrawn:
        log.warning("withdrew the cluster values of %d documents of %s written after the run read them "
                    "(e.g. seeds of an indexer worker that died): they wait for `neardup cluster --incremental`",
                    withdrawn, job.options.index)
    return withdrawn


def _judge_again(job: Run, cut: Cut, items: list[Changed], fail: Callable[[str, Changed], None]) -> list[Changed]:
    """Read documents again (real time): those still holding a value the run cannot vouch for."""
    response = job.retrier.call("re-reading documents changed during the run", lambda: job.client.mget(
        docs=[c.get_ref() for c in items], source=SOURCE_FIELDS, realtime=True))
    out = []
    for item, doc in zip(items, response["docs"]):
        if "error" in doc:
            kind, reason = error_type_and_reason(doc)
            fail(f"re-reading failed: {kind}: {reason}"[:200], item)
        elif doc.get("found"):
            fresh = Changed.of(doc, item.shard, stored_values(doc.get("_source")), item.attempts)
            if fresh.stored.cluster is not None and not job.vouches(fresh, cut[item.index][item.shard]):
                out.append(fresh)
    return out
