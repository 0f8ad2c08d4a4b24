"""Counters of an enrichment job and its final summary (pure).

Every document the job reads ends in exactly one of: ``updated``, ``unchanged`` (the stored
fingerprint was already identical, Elasticsearch answered ``noop``), ``skipped_no_field``,
``skipped_non_string``, ``skipped_empty``, ``deleted_meanwhile`` or ``failed``. Documents
excluded by the query because they already carry the current scheme version are not read;
they are counted in ``skipped_current`` from a count over the same point in time.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from neardup.upstream import ClusterInfo

#: How many example ids are kept per failure reason.
EXAMPLE_IDS = 5


@dataclass
class Failures:
    """Failed documents grouped by reason, with the first few ids of each."""

    counts: dict[str, int] = field(default_factory=dict)
    examples: dict[str, list[str]] = field(default_factory=dict)

    def add(self, reason: str, doc_id: str, count: int = 1) -> None:
        self.counts[reason] = self.counts.get(reason, 0) + count
        ids = self.examples.setdefault(reason, [])
        if len(ids) < EXAMPLE_IDS:
            ids.append(doc_id)

    def merge(self, other: Failures) -> None:
        for reason, count in other.counts.items():
            self.counts[reason] = self.counts.get(reason, 0) + count
            ids = self.examples.setdefault(reason, [])
            ids.extend(other.examples.get(reason, [])[: EXAMPLE_IDS - len(ids)])

    @property
    def total(self) -> int:
        return sum(self.counts.values())


@dataclass
class JobStats:
    read: int = 0
    updated: int = 0
    unchanged: int = 0
    skipped_current: int = 0
    skipped_no_field: int = 0
    skipped_non_string: int = 0
    skipped_empty: int = 0
    ignored_values: int = 0
    conflicts_retried: int = 0
    deleted_meanwhile: int = 0
    transient_retries: int = 0
    pit_restarts: int = 0
    #: seconds spent (summed over workers) fingerprinting, reading from and writing to Elasticsearch
    fingerprint_seconds: float = 0.0
    read_seconds: float = 0.0
    write_seconds: float = 0.0
    #: with TF-IDF on: seconds counting the terms of each page and updating the statistics index
    #: (weighing the vectors is part of fingerprinting); documents counted in the statistics
    tfidf_seconds: float = 0.0
    tfidf_counted: int = 0
    failures: Failures = field(default_factory=Failures)

    @property
    def failed(self) -> int:
        return self.failures.total

    @property
    def done(self) -> int:
        """Documents read whose outcome is settled (for progress)."""
        return (self.updated + self.unchanged + self.skipped_no_field + self.skipped_non_string
                + self.skipped_empty + self.deleted_meanwhile + self.failed)

    def merge(self, other: JobStats) -> None:
        for name in self.counter_names():
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.failures.merge(other.failures)

    @staticmethod
    def counter_names() -> list[str]:
        return [name for name in JobStats.__dataclass_fields__ if name != "failures"]

    def to_dict(self) -> dict[str, Any]:
        data = {name: getattr(self, name) for name in self.counter_names()}
        data["failed"] = self.failed
        data["failures"] = asdict(self.failures)
        return data


def format_summary(stats: JobStats, *, index: str, elapsed: float, cluster: ClusterInfo | None = None) -> str:
    """The human-readable final report; ``cluster``: where the index is."""
    rate = stats.read / elapsed if elapsed > 0 else 0.0
    skipped = stats.skipped_no_field + stats.skipped_non_string + stats.skipped_empty
    lines = [
        f"index {index}: read {stats.read} documents in {elapsed:.1f}s ({rate:.0f} docs/s)",
        *([f"  upstream           {cluster.describe()}"] if cluster else []),
        f"  updated            {stats.updated}",
        f"  unchanged          {stats.unchanged}  (fingerprint already identical)",
        f"  skipped            {stats.skipped_current + skipped}",
        f"    already current  {stats.skipped_current}  (not read: neardup.v is the current scheme)",
        f"    no text field    {stats.skipped_no_field}",
        f"    non-string value {stats.skipped_non_string}",
        f"    empty text       {stats.skipped_empty}",
        f"  conflicts retried  {stats.conflicts_retried}  (changed meanwhile: re-read and re-fingerprinted)",
        f"  deleted meanwhile  {stats.deleted_meanwhile}  (not recreated)",
        f"  failed             {stats.failed}",
    ]
    for reason, count in sorted(stats.failures.counts.items(), key=lambda kv: -kv[1]):
        ids = ", ".join(stats.failures.examples.get(reason, []))
        lines.append(f"    {count} × {reason} (e.g. {ids})")
    if stats.ignored_values:
        lines.append(f"  note: {stats.ignored_values} non-text field values were left out of "
                     "otherwise fingerprinted documents")
    if stats.transient_retries:
        lines.append(f"  note: {stats.transient_retries} requests were retried after transient errors")
    busy = stats.fingerprint_seconds + stats.read_seconds + stats.write_seconds
    if busy > 0:
        lines.append(f"  time (all workers): fingerprinting {stats.fingerprint_seconds:.1f}s "
                     f"({100 * stats.fingerprint_seconds / busy:.0f}%), cluster reads "
                     f"{stats.read_seconds:.1f}s, writes {stats.write_seconds:.1f}s")
    if stats.tfidf_seconds:
        lines.append(f"  TF-IDF: {stats.tfidf_counted} documents counted in the statistics; "
                     f"{stats.tfidf_seconds:.1f}s counting terms and updating the statistics index")
    if stats.pit_restarts:
        lines.append(f"  note: the point in time expired {stats.pit_restarts} times and was reopened")
    return "\n".join(lines)
