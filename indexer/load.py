"""``neardup load``: bulk-load documents with fingerprints added, in one pass.

Documents come as lines (:mod:`neardup.indexer.formats`: JSON lines as they are, or JSON, CSV and
Reuters-21578 turned into lines) and are read in chunks of ``batch_size``; each chunk is fingerprinted, checked for
duplicates (if asked) and sent as one ``_bulk`` request of ``index`` actions whose source is
the input line with ``neardup`` spliced in (so the stored ``_source`` keeps every other byte
of the line). Items rejected with 429 or 5xx are retried with backoff; other rejections are
reported with the line number and Elasticsearch's reason.

Ids: the value of ``--id-field`` (a string or a whole number) becomes ``_id``, so loading the
same file again replaces the same documents; without it Elasticsearch assigns ids (with
``--on-duplicate tag|skip`` the loader assigns a random one instead, since a tag must be able
to name a document of the same chunk).

Uniqueness control (``--on-duplicate``):

* ``allow``: every document is loaded (no checks);
* ``tag``: a near-duplicate is loaded with ``neardup.duplicate_of`` = ``{id, similarity}`` of the
  most similar earlier document (an index mapping it as a keyword, as older versions did, is a
  mapping conflict: nothing is loaded);
* ``skip``: a near-duplicate is not loaded.

"Earlier" means documents already in the index (found by a candidate search per document,
one ``_msearch`` per chunk) and documents loaded before it in this run (kept in memory; the
index does not show them until its next refresh). The same ``_id`` is never its own
duplicate. Verification is by signature at the threshold and mode given (default: the
``collapse`` settings for the index). Bad lines are reported with their number and not loaded.

Cluster seeds (``seed_threshold`` set): while the index has never been clustered and is one
concrete index, a document with a known ``_id`` is loaded with the values ``neardup cluster``
gives a singleton, checked after each acknowledged bulk request (:mod:`neardup.indexer.cluster.seeds`).
Once the index has clusters, documents are loaded without cluster values and wait for the next
``neardup cluster``. The ``neardup.cluster``/``neardup.bands`` a line brings in its own
``neardup`` object name clusters of another index: they are always dropped.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import IO, Any, BinaryIO, Literal

from neardup.fingerprint import CLUSTER_KEYS, FIELD, Fingerprint, Fingerprinter, FingerprintParams
from neardup.fingerprint.matching import (
    DUPLICATE_OF,
    Match,
    RunIndex,
    candidate_search,
    candidates_from_hits,
    duplicate_of,
    find_duplicate,
)
from neardup.indexer.client import Client
from neardup.indexer.cluster.documents import CLUSTER_MAPPING
from neardup.indexer.cluster.seeds import (
    SeededWrite,
    Seeder,
    SeedPlan,
    plan_mapping_with_seeds,
    seed_plan,
    seeded_write,
    uncertain_write,
)
from neardup.indexer.enrich import EnrichedLine, enrich_read_line
from neardup.indexer.errors import ClusterApiError, JobError, error_type_and_reason
from neardup.indexer.jsonlines import Line, LineCounts, read_lines
from neardup.indexer.mapping import plan_neardup_mapping, put_neardup_mapping, wanted_properties
from neardup.indexer.progress import Progress
from neardup.indexer.query import TF_VERSION_PATH
from neardup.indexer.retry import TRANSIENT_STATUSES, Retrier
from neardup.indexer.stats import Failures, JobStats
from neardup.indexer.tfidf_vectors import TfidfEnricher, neardup_of, tf_properties, vectors_of_lines
from neardup.upstream import ClusterInfo

OnDuplicate = Literal["allow", "tag", "skip"]

#: Candidates fetched from the index per new document.
MAX_CANDIDATES = 50


@dataclass(frozen=True)
class LoadOptions:
    index: str
    fields: tuple[str, ...]
    id_field: str = "id"
    on_duplicate: OnDuplicate = "allow"
    threshold: float = 0.8
    mode: Literal["resemblance", "containment"] = "resemblance"
    batch_size: int = 500
    #: write cluster seeds for this clustering threshold (None: no seeds)
    seed_threshold: float | None = None


@dataclass
class LoadResult:
    counts: LineCounts = field(default_factory=LineCounts)
    loaded: int = 0
    #: (line number, id, id of the document it duplicates, estimated similarity)
    tagged: list[tuple[int, str, str, float]] = field(default_factory=list)
    skipped: list[tuple[int, str, str, float]] = field(default_factory=list)
    failures: Failures = field(default_factory=Failures)
    created_index: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "lines": self.counts.lines, "loaded": self.loaded, "created_index": self.created_index,
            "fingerprinted": self.counts.outcomes["ok"],
            "without_text": {k: self.counts.outcomes[k] for k in ("no_field", "non_string", "empty")},
            "bad_lines": [{"line": n, "error": e} for n, e in self.counts.bad],
            "tagged": [{"line": n, "id": i, "duplicate_of": d, "similarity": s} for n, i, d, s in self.tagged],
            "skipped": [{"line": n, "id": i, "duplicate_of": d, "similarity": s} for n, i, d, s in self.skipped],
            "failed": self.failures.total,
            "failures": {"counts": self.failures.counts, "examples": self.failures.examples},
        }


def document_id(doc: dict[str, Any] | None, id_field: str) -> str | None:
    """The ``_id`` for a document: its ``id_field`` value if a string or whole number."""
    if doc is None or not id_field:
        return None
    value = doc.get(id_field)
    if isinstance(value, str) and value:
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return None


def chunks(lines: Iterator[Line], size: int) -> Iterator[list[Line]]:
    chunk: list[Line] = []
    for line in lines:
        chunk.append(line)
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


@dataclass
class _Item:
    """One document of a chunk on its way to the bulk request."""

    number: int
    parsed: EnrichedLine
    id: str | None
    source: str = ""
    attempts: int = 0
    seed: dict[str, Any] | None = None


def prepare_index(client: Client, retrier: Retrier, options: LoadOptions,
                  extra: dict[str, Any] | None = None, fingerprint: FingerprintParams | None = None
                  ) -> tuple[bool, SeedPlan | None]:
    """Create the index with the ``neardup`` mapping (plus the ``extra`` sub-fields), or check
    and extend an existing one.

    Returns whether the index was created, and how documents are seeded (None: no seeds; with
    ``options.seed_threshold`` and ``fingerprint``, the cluster sub-fields are mapped too).
    """
    with_tag = options.on_duplicate == "tag"
    threshold = options.seed_threshold if fingerprint is not None else None
    exists = retrier.call("checking the index", lambda: client.indices.exists(index=options.index))
    if not exists:
        properties = {**wanted_properties(with_tag), **(CLUSTER_MAPPING if threshold is not None else {}),
                      **(extra or {})}
        try:
            retrier.call("creating the index", lambda: client.indices.create(
                index=options.index, mappings={"properties": {FIELD: {"properties": properties}}}))
            if threshold is None or fingerprint is None:
                return True, None
            return True, seed_plan(options.index, threshold, fingerprint, {options.index: {}})
        except ClusterApiError as exc:
            kind, _ = error_type_and_reason(exc.body)
            if kind != "resource_already_exists_exception":
                raise
    if threshold is None or fingerprint is None:
        plan = plan_neardup_mapping(client, retrier, options.index, with_duplicate_of=with_tag, extra=extra)
        put_neardup_mapping(client, retrier, options.index, plan)
        return False, None
    plan, mapped = plan_mapping_with_seeds(client, retrier, options.index, with_duplicate_of=with_tag, extra=extra)
    put_neardup_mapping(client, retrier, options.index, plan)
    if not mapped or len(plan.root_mappings) != 1:  # seeds name documents by _id: one concrete index
        return False, None
    return False, seed_plan(options.index, threshold, fingerprint, plan.root_mappings)


class Loader:
    def __init__(self, client: Client, retrier: Retrier, fingerprinter: Fingerprinter,
                 options: LoadOptions, errors: IO[str], tfidf: TfidfEnricher | None = None,
                 progress: Progress | None = None) -> None:
        self.client = client
        self.progress = progress or Progress()
        self.stats = JobStats()   # what the progress shows: documents read, loaded, failed
        self.tfidf = tfidf
        self.retrier = retrier
        self.fingerprinter = fingerprinter
        self.options = options
        self.errors = errors
        self.result = LoadResult()
        self.run_index = RunIndex()
        self.seeder: Seeder | None = None

    def run(self, stream: BinaryIO) -> LoadResult:
        """Load the JSON lines of ``stream``."""
        return self.run_lines(read_lines(stream))

    def run_lines(self, lines: Iterable[Line]) -> LoadResult:
        """Load the documents of ``lines`` (:mod:`neardup.indexer.formats`)."""
        self.result.created_index, seeds = prepare_index(self.client, self.retrier, self.options,
                                                         tf_properties() if self.tfidf is not None else None,
                                                         self.fingerprinter.params)
        if seeds is not None:
            self.seeder = Seeder(self.client, self.retrier, seeds, self.retrier.max_retries, self.result.failures)
        try:
            for chunk in chunks(iter(lines), self.options.batch_size):
                self._load_chunk(chunk)
                self.stats.read += len(chunk)
                self.stats.updated = self.result.loaded
                self.stats.failures = self.result.failures
                self.progress.tick(self.stats)
        finally:
            self.progress.close()
        return self.result

    # --- one chunk -----------------------------------------------------------------------------

    def _load_chunk(self, chunk: Sequence[Line]) -> None:
        items = self._parse(chunk)
        checking = self.options.on_duplicate != "allow"
        index_candidates = self._index_candidates(items) if checking else {}
        to_send: list[_Item] = []
        extras: list[dict[str, Any]] = []
        for item in items:
            extra: dict[str, Any] = {}
            fingerprint = item.parsed.fingerprint
            if checking and fingerprint is not None and not fingerprint.is_empty:
                match = self._best_match(item, fingerprint, index_candidates.get(item.number, []))
                if match is not None:
                    record = (item.number, item.id or "", match.id, round(match.similarity, 4))
                    if self.options.on_duplicate == "skip":
                        self.result.skipped.append(record)
                        continue
                    self.result.tagged.append(record)
                    extra[DUPLICATE_OF] = duplicate_of(match)
                self.run_index.add(item.id or "", fingerprint)
            to_send.append(item)
            extras.append(extra)
        if self.tfidf is not None:
            self._add_vectors(to_send, extras)
        if self.seeder is not None and self.seeder.seeding:
            self._add_seeds(to_send, extras)
        for item, extra in zip(to_send, extras):
            item.source = item.parsed.render(extra, without=CLUSTER_KEYS)
        self._send(to_send)

    def _add_seeds(self, items: Sequence[_Item], extras: list[dict[str, Any]]) -> None:
        """Put the cluster seed of each fingerprinted item with a known ``_id`` in its ``extra``."""
        assert self.seeder is not None
        known: list[tuple[int, str, Fingerprint]] = []
        for k, item in enumerate(items):
            if item.id is not None and item.parsed.fingerprint is not None:
                known.append((k, item.id, item.parsed.fingerprint))
        rows = [k for k, _, _ in known]
        seeds = self.seeder.values([(self.options.index, doc_id, fingerprint.to_source())
                                    for _, doc_id, fingerprint in known])
        for k, seed in zip(rows, seeds):
            if seed is not None:
                items[k].seed = seed
                extras[k].update(seed)

    def _add_vectors(self, items: Sequence[_Item], extras: list[dict[str, Any]]) -> None:
        """Count the documents of the chunk met for the first time (neither the line nor the
        indexed document with its ``_id`` holds a vector of the current version) in the
        statistics, then put each one's vector in its ``extra``."""
        assert self.tfidf is not None
        counted = self._counted_in_index([item.id for item in items if item.id and item.parsed.fingerprint])
        added = vectors_of_lines(self.tfidf, self.options.index, [item.parsed for item in items],
                                 self.options.fields, [item.id in counted for item in items])
        for extra, vector in zip(extras, added):
            extra.update(vector)

    def _counted_in_index(self, ids: Sequence[str]) -> set[str]:
        """The ids whose indexed document holds a vector of the current TF-IDF version."""
        if not ids:
            return set()
        assert self.tfidf is not None
        response = self.retrier.call("looking up TF-IDF vectors", lambda: self.client.mget(
            index=self.options.index, ids=list(ids), source=[TF_VERSION_PATH], realtime=True))
        return {doc["_id"] for doc in response["docs"]
                if doc.get("found") and self.tfidf.is_current(neardup_of(doc.get("_source")))}

    def _parse(self, chunk: Sequence[Line]) -> list[_Item]:
        counts = self.result.counts
        items = []
        for line in chunk:
            counts.lines += 1
            if line.text is not None and not line.text.strip():
                counts.blank += 1
                continue
            parsed = enrich_read_line(line, self.options.fields, self.fingerprinter)
            if parsed.outcome == "bad":
                counts.add_bad(line.number, parsed.error, self.errors)
                continue
            counts.outcomes[parsed.outcome] += 1
            doc_id = document_id(parsed.doc, self.options.id_field)
            if doc_id is None and self.options.on_duplicate != "allow":
                doc_id = uuid.uuid4().hex
            items.append(_Item(line.number, parsed, doc_id))
        return items

    def _best_match(self, item: _Item, fingerprint: Fingerprint,
                    from_index: list[tuple[str, str, Fingerprint]]) -> Match | None:
        return find_duplicate(fingerprint, from_index, self.run_index, self.options.threshold,
                              self.options.mode, exclude_id=item.id)

    def _index_candidates(self, items: Sequence[_Item]) -> dict[int, list[tuple[str, str, Fingerprint]]]:
        """Candidates from the index for each fingerprinted item of the chunk (one ``_msearch``)."""
        asking: list[tuple[_Item, Fingerprint]] = []
        for item in items:
            fingerprint = item.parsed.fingerprint
            if fingerprint is not None and not fingerprint.is_empty:
                asking.append((item, fingerprint))
        if not asking:
            return {}
        version = self.fingerprinter.version
        searches: list[dict[str, Any]] = []
        for item, fingerprint in asking:
            searches.append({"index": self.options.index})
            searches.append(candidate_search(fingerprint.to_source(), version, MAX_CANDIDATES, exclude_id=item.id))
        response = self.retrier.call("looking up duplicates", lambda: self.client.msearch(searches=searches))
        found: dict[int, list[tuple[str, str, Fingerprint]]] = {}
        for (item, _), answer in zip(asking, response["responses"]):
            if "error" in answer:
                kind, reason = error_type_and_reason(answer)
                raise JobError(f"looking up duplicates in {self.options.index} failed: {kind}: {reason}")
            found[item.number] = candidates_from_hits(answer["hits"]["hits"])
        return found

    def _send(self, items: list[_Item]) -> None:
        """Bulk-index ``items``, retrying 429/5xx items with backoff; then, if they carried
        seeds, check that the index still has no clusters (or withdraw the seeds)."""
        written = []
        uncertain: list[SeededWrite] = []
        while items:
            operations: list[Any] = []
            for item in items:
                meta: dict[str, Any] = {"_index": self.options.index}
                if item.id is not None:
                    meta["_id"] = item.id
                operations.append({"index": meta})
                operations.append(item.source)
            response = self.retrier.call("loading documents", lambda: self.client.bulk(
                operations=operations, filter_path=["items.*.status", "items.*._id", "items.*.error",
                                                    "items.*._index", "items.*._seq_no", "items.*._primary_term"]))
            again = []
            for item, answer in zip(items, response["items"]):
                result = answer.get("index", {})
                status = int(result.get("status", 0))
                if 200 <= status < 300:
                    self.result.loaded += 1
                    if item.seed is not None and item.id is not None:
                        written.append(seeded_write(self.options.index, item.id, None, result, item.seed))
                    continue
                kind, reason = error_type_and_reason(result.get("error", {}))
                item.attempts += 1
                if status in TRANSIENT_STATUSES and item.attempts <= self.retrier.max_retries:
                    again.append(item)
                else:
                    self.result.failures.add(f"{status} {kind}: {reason}"[:300],
                                             f"line {item.number}" + (f" (id {item.id})" if item.id else ""))
                    if item.seed is not None and item.id is not None:  # an earlier attempt may have applied it
                        uncertain.append(uncertain_write(self.options.index, item.id, None, item.seed))
            if again:
                self.retrier.wait(max(i.attempts for i in again) - 1)
            items = again
        if self.seeder is not None:
            self.seeder.confirm([w for w in written if w is not None], uncertain)


def format_load_summary(result: LoadResult, index: str, cluster: ClusterInfo | None = None) -> str:
    lines = [f"index {index}{' (created)' if result.created_index else ''}: {result.counts.describe()}",
             *([f"  upstream {cluster.describe()}"] if cluster else []),
             f"  loaded   {result.loaded}",
             f"  tagged   {len(result.tagged)}  (loaded with neardup.{DUPLICATE_OF})",
             f"  skipped  {len(result.skipped)}  (near-duplicates, not loaded)",
             f"  failed   {result.failures.total}"]
    for label, records in (("tagged", result.tagged), ("skipped", result.skipped)):
        for number, doc_id, original, value in records[:20]:
            lines.append(f"    {label}: line {number} (id {doc_id}) ~ {original} (similarity {value:.2f})")
        if len(records) > 20:
            lines.append(f"    ... and {len(records) - 20} more {label}")
    for reason, count in result.failures.counts.items():
        lines.append(f"    {count} × {reason} (e.g. {', '.join(result.failures.examples[reason])})")
    return "\n".join(lines)
