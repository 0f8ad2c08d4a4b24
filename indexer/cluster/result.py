"""What a ``neardup cluster`` run found and did: counts, rounds, writes, timings, and their text form."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from neardup.fingerprint.clustering import Clustering, RoundStats
from neardup.fingerprint.lsh import Banding
from neardup.indexer.cluster.documents import DocTable
from neardup.indexer.stats import JobStats
from neardup.upstream import ClusterInfo


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
    verification: Any = None         # indexer.cluster.verification.VerifyStats (memory strategy)

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


def format_result(result: ClusterResult, cluster: ClusterInfo | None = None) -> str:
    """The human-readable final report; ``cluster``: where the index is."""
    b = result.banding
    lines = [
        f"index {result.index}: {result.documents} documents, {result.strategy} strategy"
        + (", incremental" if result.incremental else ""),
        *([f"  upstream           {cluster.describe()}"] if cluster else []),
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
