"""The corpus statistics of TF-IDF, kept per index in a companion *statistics index*.

The statistics index of a concrete index ``I`` is ``tfidf.stats_index`` with ``{index}`` = I
(default ``neardup-tfidf-I``; hidden, so ``*`` patterns do not search it). Per TF-IDF version it
holds ``P = tfidf.stats_parts`` *part* documents (``<version>:part-<p>``: the document frequencies
of the terms whose top log2(P) hash bits are p, as base64 arrays) and one *count* document
(``<version>:count``: N, the number of documents counted), from which idf(t) = log(N / df(t))
(:mod:`neardup.fingerprint.tfidf`). A new version (other synonyms, top_k, token parameters) starts from
zero beside the old one.

**Incremental and concurrent.** A batch adds its documents' distinct terms: read the affected
part documents and the count (real-time ``mget``), add, and write each back conditionally on the
``_seq_no`` / ``_primary_term`` read (``create`` for a part not there yet). A write that lost a
race (409) is re-read and re-applied; so two workers (or hosts) adding at once never lose an
increment, without scripts or ``_update_by_query``. Every writer has a random id and numbers its
batches; a document records the last batch of each of its recent writers (``applied``), so a
batch whose write succeeded but whose answer was lost (a retried request) is not added twice.
"""

from __future__ import annotations

import base64
import logging
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from neardup.fingerprint.tfidf import CorpusStats
from neardup.indexer.client import Client
from neardup.indexer.errors import ClusterApiError, JobError, error_type_and_reason
from neardup.indexer.retry import TRANSIENT_STATUSES, Retrier

log = logging.getLogger(__name__)

#: How many recent writers a statistics document remembers (for idempotent retries).
APPLIED_WRITERS = 64
#: Conditional-write rounds before giving up on a statistics document (others keep winning).
MAX_ROUNDS = 200

STATS_MAPPING = {"dynamic": False, "properties": {
    "version": {"type": "keyword"}, "kind": {"type": "keyword"}, "part": {"type": "integer"},
    "doc_count": {"type": "long"}}}


def stats_index_name(pattern: str, index: str) -> str:
    return pattern.replace("{index}", index)


# --- pure: statistics documents ------------------------------------------------------------------

def _no_terms() -> tuple[np.ndarray, np.ndarray]:
    return np.empty(0, dtype=np.uint64), np.empty(0, dtype=np.int64)


def part_bits(parts: int) -> int:
    return parts.bit_length() - 1


def encode_part(terms: np.ndarray, df: np.ndarray) -> dict[str, str]:
    return {"terms": base64.b64encode(np.asarray(terms, dtype="<u8").tobytes()).decode("ascii"),
            "df": base64.b64encode(np.asarray(df, dtype="<u4").tobytes()).decode("ascii")}


def decode_part(source: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """(terms, df) of a part document; JobError if it is malformed (someone wrote into the index)."""
    try:
        terms = np.frombuffer(base64.b64decode(source["terms"]), dtype="<u8").astype(np.uint64)
        df = np.frombuffer(base64.b64decode(source["df"]), dtype="<u4").astype(np.int64)
    except (KeyError, TypeError, ValueError) as exc:
        raise JobError(f"malformed TF-IDF statistics document ({type(exc).__name__}: {exc})") from None
    if len(terms) != len(df) or (len(terms) > 1 and np.any(terms[1:] <= terms[:-1])):
        raise JobError("malformed TF-IDF statistics document (terms and df do not match)")
    return terms, df


def add_counts(terms: np.ndarray, df: np.ndarray, delta: CorpusStats) -> tuple[np.ndarray, np.ndarray]:
    """(terms, df) with ``delta``'s document frequencies added."""
    merged = CorpusStats(0, terms, df).merge(delta)
    return merged.terms, merged.df


def already_applied(source: Mapping[str, Any] | None, writer: str, batch: int) -> bool:
    applied = (source or {}).get("applied")
    return isinstance(applied, list) and any(
        isinstance(e, list) and len(e) == 2 and e[0] == writer and isinstance(e[1], int) and e[1] >= batch
        for e in applied)


def record_applied(source: Mapping[str, Any] | None, writer: str, batch: int) -> list[list[Any]]:
    """The ``applied`` list with (writer, batch) as its newest entry, at most APPLIED_WRITERS long."""
    applied = (source or {}).get("applied")
    kept = [e for e in applied if isinstance(e, list) and len(e) == 2 and e[0] != writer] \
        if isinstance(applied, list) else []
    return (kept + [[writer, batch]])[-APPLIED_WRITERS:]


# --- I/O: the statistics store -------------------------------------------------------------------

@dataclass
class StatsStore:
    """The statistics of one concrete index under one TF-IDF version (see the module docstring).

    Keeps the parts it has read or written (``_known``) so that weighing a page needs no read of
    the parts this writer has just written.
    """

    client: Client
    retrier: Retrier
    name: str            # the statistics index
    version: str
    parts: int
    max_retries: int = 8
    writer: str = field(default_factory=lambda: uuid.uuid4().hex[:16])
    batches: int = 0
    _ready: bool = False
    _count: int = 0
    _known: dict[int, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)

    def part_id(self, part: int) -> str:
        return f"{self.version}:part-{part:04d}"

    @property
    def count_id(self) -> str:
        return f"{self.version}:count"

    def ensure_index(self) -> None:
        if self._ready:
            return
        exists = self.retrier.call("checking the TF-IDF statistics index",
                                   lambda: self.client.indices.exists(index=self.name))
        if not exists:
            try:
                self.retrier.call("creating the TF-IDF statistics index", lambda: self.client.indices.create(
                    index=self.name, mappings=STATS_MAPPING,
                    settings={"index": {"hidden": True, "number_of_shards": 1, "auto_expand_replicas": "0-1"}}))
            except ClusterApiError as exc:
                if error_type_and_reason(exc.body)[0] != "resource_already_exists_exception":
                    raise JobError(f"cannot create the TF-IDF statistics index {self.name}: "
                                   f"{': '.join(error_type_and_reason(exc.body))}") from None
        # another writer may have just created it: its shard must be started before we read
        health = self.retrier.call("waiting for the TF-IDF statistics index", lambda: self.client.cluster.health(
            index=self.name, wait_for_active_shards="1", timeout="60s", expand_wildcards="all"))
        if health.get("timed_out"):
            raise JobError(f"the TF-IDF statistics index {self.name} did not become available within 60s")
        self._ready = True

    # -- reading

    def _mget(self, ids: Sequence[str]) -> list[dict[str, Any]]:
        response = self.retrier.call("reading TF-IDF statistics", lambda: self.client.mget(
            index=self.name, ids=list(ids), realtime=True))
        docs = response["docs"]
        for doc in docs:
            if "error" in doc:
                raise JobError(f"reading TF-IDF statistics from {self.name} failed: "
                               f"{': '.join(error_type_and_reason(doc))}")
        return docs

    def read(self) -> CorpusStats:
        """The whole statistics as stored now."""
        self.ensure_index()
        ids = [self.count_id] + [self.part_id(p) for p in range(self.parts)]
        docs = self._mget(ids)
        self._count = int(docs[0]["_source"].get("doc_count", 0)) if docs[0].get("found") else 0
        for part, doc in enumerate(docs[1:]):
            if doc.get("found"):
                self._known[part] = decode_part(doc["_source"])
            else:
                self._known.pop(part, None)
        return self.current()

    def current(self) -> CorpusStats:
        """The statistics as this store last read or wrote them."""
        parts = [CorpusStats(self._count, *self._known[p]) for p in sorted(self._known)]
        return CorpusStats.join(parts) if parts else CorpusStats(self._count, *_no_terms())

    # -- adding

    def add(self, documents: Sequence[np.ndarray]) -> CorpusStats:
        """Count ``documents`` (each the array of its distinct term hashes); return the statistics
        after the addition (the parts it touched as written, the others as last known)."""
        self.ensure_index()
        if not self._known and not self._count:
            self.read()
        if not documents:
            return self.current()
        self.batches += 1
        delta = CorpusStats.of(documents)
        targets: dict[str, tuple[str, int, CorpusStats]] = {
            self.count_id: ("count", -1, CorpusStats(delta.doc_count, *_no_terms()))}
        for part, piece in enumerate(delta.partition(part_bits(self.parts))):
            if len(piece):
                targets[self.part_id(part)] = ("part", part, piece)
        pending = list(targets)
        rounds = 0
        while pending:
            rounds += 1
            if rounds > MAX_ROUNDS:
                raise JobError(f"TF-IDF statistics in {self.name}: gave up after {MAX_ROUNDS} conflicting "
                               "writes (too many writers at once?)")
            docs = self._mget(pending)
            operations: list[dict[str, Any]] = []
            sending: list[str] = []
            for doc_id, doc in zip(pending, docs):
                kind, part, piece = targets[doc_id]
                source = doc.get("_source") if doc.get("found") else None
                if already_applied(source, self.writer, self.batches):
                    self._remember(kind, part, source)
                    continue
                new_source = self._updated(kind, part, piece, source)
                meta: dict[str, Any] = {"_index": self.name, "_id": doc_id}
                if source is None:
                    operations.append({"create": meta})
                else:
                    operations.append({"index": {**meta, "if_seq_no": doc["_seq_no"],
                                                 "if_primary_term": doc["_primary_term"]}})
                operations.append(new_source)
                sending.append(doc_id)
            pending = self._write(operations, sending, rounds)
        return self.current()

    def _updated(self, kind: str, part: int, piece: CorpusStats, source: Mapping[str, Any] | None) -> dict[str, Any]:
        applied = record_applied(source, self.writer, self.batches)
        if kind == "count":
            before = int(source.get("doc_count", 0)) if source else 0
            return {"version": self.version, "kind": "count", "doc_count": before + piece.doc_count,
                    "applied": applied}
        terms, df = decode_part(source) if source else _no_terms()
        terms, df = add_counts(terms, df, piece)
        return {"version": self.version, "kind": "part", "part": part, "parts": self.parts,
                **encode_part(terms, df), "applied": applied}

    def _remember(self, kind: str, part: int, source: Mapping[str, Any] | None) -> None:
        if source is None:
            return
        if kind == "count":
            self._count = int(source.get("doc_count", 0))
        else:
            self._known[part] = decode_part(source)

    def _write(self, operations: list[dict[str, Any]], sending: list[str], rounds: int) -> list[str]:
        """Send the conditional writes; the ids to try again (lost a race, or transient)."""
        if not sending:
            return []
        response = self.retrier.call("writing TF-IDF statistics", lambda: self.client.bulk(
            operations=operations, refresh=False,
            filter_path=["items.*.status", "items.*.error.type", "items.*.error.reason"]))
        again: list[str] = []
        transient = False
        for doc_id, (_action, source), answer in zip(sending, zip(operations[::2], operations[1::2]),
                                                    response["items"]):
            result = next(iter(answer.values()))
            status = int(result.get("status", 0))
            if 200 <= status < 300:
                self._remember(source["kind"], source.get("part", -1), source)
            elif status == 409:
                again.append(doc_id)
            elif status in TRANSIENT_STATUSES:
                again.append(doc_id)
                transient = True
            else:
                kind, reason = error_type_and_reason(result.get("error", {}))
                raise JobError(f"writing TF-IDF statistics to {self.name} failed: {status} {kind}: {reason}")
        if transient:
            self.retrier.wait(min(rounds, self.max_retries))
        return again
