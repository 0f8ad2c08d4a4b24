"""The cluster values' writes: conditional partial updates of ``neardup.cluster`` and ``neardup.bands``.

A document re-read after a version conflict gets the planned values again only if its
fingerprint (``v``, ``sig``, ``n``) is the one the run clustered; otherwise it is left for the
next run (counted as changed meanwhile).
"""

from __future__ import annotations

from array import array
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from neardup.indexer.cluster.documents import DocTable, Planned, stored_values
from neardup.indexer.writer import BulkUpdater, Pending


def version_hash(index: str, doc_id: str, seq_no: int, primary_term: int) -> int:
    """A signed 64-bit hash of a document version (within this process; a collision, ~N/2^64,
    could only keep a value the backstop would otherwise withdraw)."""
    return hash((index, doc_id, seq_no, primary_term))


def unused_fingerprint_source(source: Mapping[str, Any]):  # pragma: no cover - ClusterUpdater overrides its use
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
