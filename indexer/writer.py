"""Writing fingerprints back with ``_bulk``, conditional on what was read.

Two write shapes, both conditional on the version read (``if_seq_no``, ``if_primary_term``):

* a **whole-document write**, on indices whose ``_source`` is stored as sent
  (:mod:`neardup.indexer.wholedoc`) when the document was read whole: ``{"index": {"_index",
  "_id", "routing", "if_seq_no", "if_primary_term", "pipeline": "_none"}}`` followed by the
  ``_source`` bytes as read (:mod:`neardup.indexer.rawsource`) with the new ``neardup`` object
  spliced in (:func:`neardup.fingerprint.splice.with_field`): every other byte of the object stays (a source
  holding a line break, which no bulk body can carry on one line, gets a partial update). The
  ``neardup`` object is the one a partial update would store (:func:`merged_object`). The
  engine indexes it without reading and merging the stored document first.
* a **partial update** otherwise, and for a write that would change nothing (the engine answers
  it ``noop`` without indexing): ``{"update": {...}}`` followed by ``{"doc": {"neardup": {...}}}``.

A partial update merges objects, so only the fingerprint keys of ``neardup`` are
(over)written, and a retired key the document holds is set to null
(:data:`neardup.fingerprint.RETIRED_KEYS`); other keys of ``neardup`` and every other field
stay as they are, except the cluster values: while the index has never been clustered, ``neardup.cluster`` and
``neardup.bands`` get the document's *seed* (the values a singleton gets from ``neardup
cluster``, :mod:`neardup.indexer.cluster.seeds`) in the same write; once it has been, a changed
fingerprint sets them to null (:func:`neardup.indexer.enrich.cleared_keys`).
Neither shape creates a document: an update of a deleted document fails with
``document_missing_exception``, an ``index`` action conditional on a ``_seq_no`` with a
version conflict; either way it stays deleted.

Seeds (with a :class:`~neardup.indexer.cluster.seeds.Seeder`): each request carries them while the last
check found no clusters in the index's ``_meta``; after the request is acknowledged the
``_meta`` is read again and, if clusters appeared, the seeds of that request are withdrawn
(the protocol and why it is correct: :mod:`neardup.indexer.cluster.seeds`).

Per item of the bulk answer:

* 200 ``updated`` / ``noop`` (same values already stored): done.
* 409 version conflict (changed or deleted since read): the document is read again (real-time
  ``mget``), fingerprinted again and written on the new ``_seq_no``; if it is gone by then it
  counts as deleted meanwhile. After ``max_retries`` conflicts for one document it fails.
* 404 ``document_missing_exception``: deleted meanwhile.
* 429 and 5xx: retried with backoff (the same conditional write), up to ``max_retries``.
* anything else: failed, with Elasticsearch's error type and reason.

A bulk request holds at most :data:`MAX_BULK_BYTES` of documents (a page of large documents
is sent in several). The batch job gathers the writes of :data:`WRITE_PAGES` pages into one
request (:meth:`BulkUpdater.queue`, up to :data:`MAX_BULK_BYTES`): the index's periodic
refresh then finds new documents less often and cuts fewer, larger segments, which the
cluster writes and merges again with less CPU per document.

If the whole bulk request is retried after a timeout although it was applied, its items
come back as conflicts, are re-read and end as ``noop``: still correct. An item sent with a
seed that ends in a conflict or a failure may hold that seed (from the applied attempt): it is
covered by the check after the acknowledgement like the seeds written
(:meth:`~neardup.indexer.cluster.seeds.Seeder.confirm`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from neardup.fingerprint import FIELD
from neardup.fingerprint.splice import with_field
from neardup.fingerprint.texts import Outcome
from neardup.indexer.client import Client
from neardup.indexer.cluster.seeds import SeededWrite, Seeder, seeded_write, uncertain_write
from neardup.indexer.docversion import DocVersion
from neardup.indexer.errors import ClusterError, error_type_and_reason
from neardup.indexer.rawsource import RAW_SOURCE, attach_raw_sources
from neardup.indexer.retry import TRANSIENT_STATUSES, Retrier
from neardup.indexer.stats import JobStats

log = logging.getLogger(__name__)

#: ``(outcome, neardup value or None)`` for a document's ``_source``.
FingerprintSource = Callable[[Mapping[str, Any]], tuple[Outcome, dict[str, Any] | None]]

#: Most bytes of documents in one bulk request (a larger page is sent in several).
MAX_BULK_BYTES = 8 << 20
#: Pages of documents the batch job gathers into one bulk request (:meth:`BulkUpdater.queue`).
WRITE_PAGES = 4
#: What a partial update's lines count towards :data:`MAX_BULK_BYTES`.
_UPDATE_BYTES = 512

_BULK_FILTER = ["items.*.status", "items.*.result", "items.*.error.type", "items.*.error.reason",
                "items.*.error.caused_by.reason", "items.*._seq_no", "items.*._primary_term"]


@dataclass
class Pending(DocVersion):
    """One conditional update waiting to be sent (on the version read)."""

    neardup: dict[str, Any]
    conflicts: int = 0
    transient_failures: int = 0
    #: cluster seed written with the fingerprint (``cluster``, ``bands``), or None
    seed: dict[str, Any] | None = None
    #: the seed this update was last sent with (kept when a resend carries none)
    sent_seed: dict[str, Any] | None = None
    #: the whole ``_source`` as read, its bytes and decoded (None: written as a partial update)
    raw: bytes | None = None
    source: Mapping[str, Any] | None = None

    def value(self) -> dict[str, Any]:
        """What is written under ``neardup`` (merged into the stored object)."""
        return {**self.neardup, **self.seed} if self.seed else self.neardup

    def document(self) -> dict[str, Any]:
        return {"doc": {FIELD: self.value()}}

    def whole_document(self) -> bytes | None:
        """The ``_source`` as read with the ``neardup`` object a partial update would leave;
        None without the source, when that changes nothing (a partial update is a ``noop``), or
        when the source holds a line break (it cannot be one line of a bulk body)."""
        if self.raw is None or self.source is None or b"\n" in self.raw:
            return None
        stored = self.source.get(FIELD)
        value = merged_object(stored, self.value()) if isinstance(stored, Mapping) else self.value()
        if FIELD in self.source and value == stored:
            return None
        return with_field(self.raw, self.source, FIELD, value)

    def size(self) -> int:
        return len(self.raw) if self.raw is not None else _UPDATE_BYTES


def merged_object(stored: Mapping[str, Any], changes: Mapping[str, Any]) -> dict[str, Any]:
    """``stored`` with ``changes`` merged in as a partial update merges them: objects key by
    key, recursively; any other value replaced."""
    merged = dict(stored)
    for key, value in changes.items():
        before = merged.get(key)
        merged[key] = (merged_object(before, value) if isinstance(before, Mapping) and isinstance(value, Mapping)
                       else value)
    return merged


def bulk_operations(pending: Sequence[Pending]) -> list[dict[str, Any] | bytes]:
    """The bulk lines: a whole-document write where the item has its source, else an update."""
    operations: list[dict[str, Any] | bytes] = []
    for item in pending:
        whole = item.whole_document()
        if whole is None:
            operations.append(item.update_meta())
            operations.append(item.document())
        else:
            operations.append({"index": {**item.update_meta()["update"], "pipeline": "_none"}})
            operations.append(whole)
    return operations


def by_size(pending: Sequence[Pending], limit: int = MAX_BULK_BYTES) -> Iterator[list[Pending]]:
    """``pending`` in runs of at most ``limit`` document bytes (a larger document alone)."""
    run: list[Pending] = []
    size = 0
    for item in pending:
        if run and size + item.size() > limit:
            yield run
            run, size = [], 0
        run.append(item)
        size += item.size()
    if run:
        yield run


def item_result(answer: Mapping[str, Any]) -> Mapping[str, Any]:
    """The result in a bulk answer item (``{"update": {...}}`` or ``{"index": {...}}``)."""
    return next(iter(answer.values()), {}) if answer else {}


def count_outcome(stats: JobStats, outcome: Outcome) -> None:
    """Count a document that gets no fingerprint."""
    if outcome == "no_field":
        stats.skipped_no_field += 1
    elif outcome == "non_string":
        stats.skipped_non_string += 1
    elif outcome == "empty":
        stats.skipped_empty += 1


@dataclass
class BulkUpdater:
    client: Client
    retrier: Retrier
    fingerprint_source: FingerprintSource
    source_fields: Sequence[str]
    max_retries: int
    stats: JobStats
    #: writes cluster seeds while the index has never been clustered (None: never)
    seeder: Seeder | None = None
    #: called with each update acknowledged (updated or noop) and its bulk answer item
    #: (``_seq_no``, ``_primary_term``: the version written)
    on_settled: Callable[[Pending, Mapping[str, Any]], None] | None = None
    #: the indices written with whole-document writes (:mod:`neardup.indexer.wholedoc`): their
    #: documents are read whole (``_source`` unfiltered, with its bytes)
    whole_indices: frozenset[str] = frozenset()
    #: documents :meth:`queue` gathers before it writes them
    write_batch: int = 1
    _queued: list[Pending] = field(default_factory=list)
    _queued_bytes: int = 0

    def pending_from_hit(self, hit: Mapping[str, Any], **counters: int) -> Pending | None:
        """Fingerprint a search hit (or a real-time get); ``None`` if it gets no fingerprint."""
        started = time.perf_counter()
        source = hit.get("_source") or {}
        outcome, neardup = self.fingerprint_source(source)
        self.stats.fingerprint_seconds += time.perf_counter() - started
        if neardup is None:
            count_outcome(self.stats, outcome)
            return None
        raw = hit.get(RAW_SOURCE) if hit["_index"] in self.whole_indices else None
        if raw is not None:
            return Pending.of(hit, neardup, raw=raw, source=source, **counters)
        return Pending.of(hit, neardup, **counters)

    def queue(self, pending: Sequence[Pending]) -> None:
        """Gather ``pending`` with the writes queued before; write them all once they hold
        ``write_batch`` documents or :data:`MAX_BULK_BYTES` (:meth:`flush` writes the rest)."""
        self._queued.extend(pending)
        self._queued_bytes += sum(item.size() for item in pending)
        if len(self._queued) >= self.write_batch or self._queued_bytes >= MAX_BULK_BYTES:
            self.flush()

    def flush(self) -> None:
        """Write what :meth:`queue` gathered."""
        queued, self._queued, self._queued_bytes = self._queued, [], 0
        self.write(queued)

    def write(self, pending: list[Pending]) -> None:
        """Send the writes until each one is settled (updated, unchanged, deleted or failed)."""
        for run in by_size(pending, MAX_BULK_BYTES):
            self._write(run)

    def _write(self, pending: list[Pending]) -> None:
        while pending:
            self._seed(pending)
            items = self._bulk(pending)
            conflicted: list[Pending] = []
            again: list[Pending] = []
            for item, answer in zip(pending, items):
                self._settle(item, item_result(answer), conflicted, again)
            if self.seeder is not None:
                self._confirm(pending, items, again)
            if again:
                self.retrier.wait(max(p.transient_failures for p in again) - 1)
            pending = again + self._reread(conflicted)

    def _confirm(self, pending: Sequence[Pending], items: Sequence[Mapping[str, Any]], again: Sequence[Pending]) -> None:
        """The check after the acknowledgement (:meth:`Seeder.confirm`): the seeds written, and
        the items ever sent with a seed that did not succeed and are not sent again (a 409 or a
        failure may follow an attempt that was applied, timed out on the client and was retried)."""
        assert self.seeder is not None
        resent = {id(p) for p in again}
        written: list[SeededWrite] = []
        uncertain: list[SeededWrite] = []
        for item, answer in zip(pending, items):
            if item.sent_seed is None:
                continue
            result = item_result(answer)
            write = seeded_write(item.index, item.id, item.routing, result, item.seed) if item.seed else None
            if write is not None:
                written.append(write)
            elif not 200 <= int(result.get("status", 0)) < 300 and id(item) not in resent:
                uncertain.append(uncertain_write(item.index, item.id, item.routing, item.sent_seed))
        self.seeder.confirm(written, uncertain)

    def _seed(self, pending: Sequence[Pending]) -> bool:
        """Give each update its seed while seeding (the last check found no clusters), else none."""
        if self.seeder is None or not self.seeder.seeding:
            for item in pending:
                item.seed = None
            return False
        missing = [p for p in pending if p.seed is None]
        for item, seed in zip(missing, self.seeder.values([(p.index, p.id, p.neardup) for p in missing])):
            item.seed = seed
        for item in pending:
            if item.seed is not None:
                item.sent_seed = item.seed
        return True

    def _bulk(self, pending: Sequence[Pending]) -> list[dict[str, Any]]:
        operations = bulk_operations(pending)
        started = time.perf_counter()
        response = self.retrier.call("writing fingerprints", lambda: self.client.bulk(
            operations=operations, filter_path=_BULK_FILTER))
        self.stats.write_seconds += time.perf_counter() - started
        items = response.get("items", [])
        if len(items) != len(pending):
            raise RuntimeError(f"bulk answered {len(items)} items for {len(pending)} actions")
        return items

    def _settle(self, item: Pending, answer: Mapping[str, Any], conflicted: list[Pending],
                again: list[Pending]) -> None:
        status = int(answer.get("status", 0))
        if 200 <= status < 300:
            if answer.get("result") == "noop":
                self.stats.unchanged += 1
            else:
                self.stats.updated += 1
            if self.on_settled is not None:
                self.on_settled(item, answer)
            return
        kind, reason = error_type_and_reason(answer.get("error", {}))
        if status == 409:
            item.conflicts += 1
            if item.conflicts > self.max_retries:
                self.stats.failures.add(f"changed {item.conflicts} times while being fingerprinted", item.id)
            else:
                self.stats.conflicts_retried += 1
                conflicted.append(item)
        elif status == 404 and kind == "document_missing_exception":
            self.stats.deleted_meanwhile += 1
        elif status in TRANSIENT_STATUSES:
            item.transient_failures += 1
            if item.transient_failures > self.max_retries:
                self.stats.failures.add(f"{status} {kind} (after {self.max_retries} retries)", item.id)
            else:
                again.append(item)
        else:
            self.stats.failures.add(f"{status} {kind}: {reason}"[:300], item.id)

    def _reread(self, conflicted: Sequence[Pending]) -> list[Pending]:
        """Read changed documents again (real time) and fingerprint what they hold now."""
        if not conflicted:
            return []
        started = time.perf_counter()
        whole = bool(self.whole_indices)
        response = self.retrier.call("re-reading changed documents", lambda: self.client.mget(
            docs=[p.get_ref() for p in conflicted], source=True if whole else list(self.source_fields) or False,
            realtime=True))
        if whole:
            attach_raw_sources(response, response["docs"])
        self.stats.read_seconds += time.perf_counter() - started
        fresh: list[Pending] = []
        for previous, doc in zip(conflicted, response["docs"]):
            if "error" in doc:
                kind, reason = error_type_and_reason(doc)
                self.stats.failures.add(f"re-reading failed: {kind}: {reason}"[:300], previous.id)
            elif not doc.get("found"):
                self.stats.deleted_meanwhile += 1
            else:
                item = self.pending_from_hit(doc, conflicts=previous.conflicts)
                if item is not None:
                    fresh.append(item)
        return fresh


def refresh_written(client: Client, index: str) -> None:
    """Refresh the indices a job wrote, so that a search right after it returns finds the writes
    (one attempt: a failure is a warning, the periodic refresh makes them searchable soon after)."""
    try:
        client.indices.refresh(index=index)
    except ClusterError as exc:
        log.warning("could not refresh %s after writing (%s): the writes become searchable "
                    "with the next periodic refresh", index, exc)
