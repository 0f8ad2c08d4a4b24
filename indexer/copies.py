"""Pairs of documents of an index where one holds a fragment of the other (``neardup copies``).

The documents are read with a point in time (:class:`~neardup.indexer.reader.SliceReader`, text fields
only, chosen as the indexer chooses them: :func:`~neardup.fingerprint.texts.document_texts`), their texts
joined by newlines and cut into canonical shingles (``[fingerprint]`` settings). Then, in
memory (:mod:`neardup.fingerprint.copies`): shingles found in more than ``max_df`` documents are left
out, the rest go into a pseudo-matrix Bloom filter, every document is queried against it as a
source, and each candidate is verified by exact containment on the same shingle sets. A pair
(copier, source) is reported when the copier holds at least ``min_share`` of the source's
shingles, and at least ``min_shared`` of them.

Memory: the shingle sets (8 bytes a distinct shingle) plus the filter (about
``-log2(p) / ln 2`` bits a shingle for a false-positive rate p: 9.6 bits at 1 %).
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from neardup.fingerprint import Fingerprinter
from neardup.fingerprint.bloom import BloomParams
from neardup.fingerprint.copies import CopiedPair, build_filter, candidates, content_sets, ranked, verify
from neardup.fingerprint.texts import document_texts
from neardup.indexer.client import Client
from neardup.indexer.cluster.documents import doc_key
from neardup.indexer.errors import JobError
from neardup.indexer.query import SliceSpec
from neardup.indexer.reader import SliceReader
from neardup.indexer.retry import Retrier
from neardup.upstream import ClusterInfo

log = logging.getLogger(__name__)

#: Documents between two progress messages while reading.
PROGRESS_EVERY = 2000


@dataclass(frozen=True)
class CopiesOptions:
    index: str
    fields: tuple[str, ...]
    min_share: float = 0.05
    min_shared: int = 5
    max_df: int = 100
    bloom: BloomParams = field(default_factory=BloomParams)
    batch_size: int = 500
    keep_alive: str = "5m"


@dataclass
class ShingledDocuments:
    """The documents read: keys and shingle sets of those with text, counts of the others."""

    keys: list[str] = field(default_factory=list)
    sets: list[np.ndarray] = field(default_factory=list)
    read: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    shingle_seconds: float = 0.0


@dataclass
class CopiesResult:
    options: CopiesOptions
    documents: ShingledDocuments
    left_out: int                 # distinct shingles found in more than max_df documents
    screened: int                 # documents with content shingles (in the filter, queried)
    shingles: int                 # content shingles in the filter (distinct within a document)
    shingle_bytes: int
    figures: dict[str, float]
    candidates: int
    pairs: list[CopiedPair]
    seconds: dict[str, float]

    def key(self, doc: int) -> str:
        return self.documents.keys[doc]

    def pair_dict(self, pair: CopiedPair) -> dict[str, Any]:
        return {"copier": self.key(pair.copier), "source": self.key(pair.source),
                "containment": round(pair.containment, 4), "shared": pair.shared,
                "source_shingles": pair.source_size, "copier_shingles": pair.copier_size,
                "reverse": round(pair.reverse, 4)}

    def summary(self) -> dict[str, Any]:
        docs = self.documents
        return {
            "index": self.options.index, "fields": list(self.options.fields),
            "min_share": self.options.min_share, "min_shared": self.options.min_shared,
            "max_df": self.options.max_df,
            "documents": docs.read, "with_text": docs.outcomes["ok"],
            "without_text": {k: docs.outcomes[k] for k in ("no_field", "non_string", "empty")},
            "screened": self.screened, "shingles": self.shingles, "frequent_shingles_left_out": self.left_out,
            "rows": int(self.figures["rows"]),
            "rows_one_filter_per_document": int(self.figures["rows_one_filter_per_document"]),
            "row_bits": self.options.bloom.row_bits, "hashes": self.options.bloom.hashes,
            "target_fp": self.options.bloom.target_fp, "filter_bytes": int(self.figures["bytes"]),
            "shingle_bytes": self.shingle_bytes, "fp_at_mean_fill": round(self.figures["fp_at_mean_fill"], 5),
            "candidates": self.candidates, "pairs": len(self.pairs),
            "seconds": {k: round(v, 3) for k, v in self.seconds.items()},
        }


def shingle_documents(client: Client, retrier: Retrier, fp: Fingerprinter,
                      options: CopiesOptions) -> ShingledDocuments:
    """Read every document of the index (one point in time, pages in ``_shard_doc`` order) and
    shingle the text of its fields. Keys are ``_id``, or ``<index>/<_id>`` when the name matched
    several indices."""
    reader = SliceReader(client, retrier, options.index, {"match_all": {}}, SliceSpec(), options.batch_size,
                         options.keep_alive, options.fields)
    out = ShingledDocuments()
    where: list[tuple[str, str]] = []
    reader.open()
    try:
        for page in reader.pages():
            for hit in page:
                out.read += 1
                texts = document_texts(hit.get("_source") or {}, options.fields)
                out.outcomes[texts.outcome] += 1
                if texts.outcome == "ok":
                    start = time.perf_counter()
                    out.sets.append(fp.shingles(fp.canonical_tokens("\n".join(texts.texts))))
                    out.shingle_seconds += time.perf_counter() - start
                    where.append((hit["_index"], hit["_id"]))
            if out.read // PROGRESS_EVERY != (out.read - len(page)) // PROGRESS_EVERY:
                log.info("read %d documents of %s", out.read, options.index)
    finally:
        reader.close()
    several = len({index for index, _ in where}) > 1
    out.keys = [doc_key(index, doc_id, several) for index, doc_id in where]
    return out


def no_text_message(options: CopiesOptions, docs: ShingledDocuments) -> str:
    counts = ", ".join(f"{k}: {n}" for k, n in sorted(docs.outcomes.items()))
    return (f"none of the {docs.read:,} documents of {options.index} holds text in the fields "
            f"{', '.join(options.fields)} ({counts}); name the text fields with --field")


def screen(docs: ShingledDocuments, options: CopiesOptions, read_seconds: float) -> CopiesResult:
    """Steps 1–4 of :mod:`neardup.fingerprint.copies` over the documents read, each timed."""
    seconds = {"read": read_seconds - docs.shingle_seconds, "shingle": docs.shingle_seconds}
    start = time.perf_counter()
    sets, left_out = content_sets(docs.sets, options.max_df, assume_unique=True)
    docs.sets = []  # the content sets replace them (memory)
    seconds["frequent"] = time.perf_counter() - start
    start = time.perf_counter()
    bloom = build_filter(sets, options.bloom)
    seconds["insert"] = time.perf_counter() - start
    seconds["query"] = seconds["verify"] = 0.0
    pairs: list[CopiedPair] = []
    checked = 0
    for source in range(len(sets)):
        start = time.perf_counter()
        found = candidates(bloom, sets, source, options.min_share)
        middle = time.perf_counter()
        pairs += verify(sets, source, found, options.min_share, options.min_shared)
        seconds["query"] += middle - start
        seconds["verify"] += time.perf_counter() - middle
        checked += len(found)
    seconds["total"] = sum(seconds.values())
    return CopiesResult(options=options, documents=docs, left_out=left_out, screened=bloom.documents,
                        shingles=int(sum(len(s) for s in sets)), shingle_bytes=int(sum(s.nbytes for s in sets)),
                        figures=bloom.figures(), candidates=checked, pairs=ranked(pairs), seconds=seconds)


def run_copies(client: Client, retrier: Retrier, fp: Fingerprinter, options: CopiesOptions) -> CopiesResult:
    """Read, shingle and screen; :class:`JobError` when there is nothing to screen."""
    start = time.perf_counter()
    docs = shingle_documents(client, retrier, fp, options)
    read_seconds = time.perf_counter() - start
    if docs.read == 0:
        raise JobError(f"{options.index} holds no documents")
    if not docs.sets:
        raise JobError(no_text_message(options, docs))
    return screen(docs, options, read_seconds)


# --- output ------------------------------------------------------------------------------------

def _mib(n: float) -> str:
    return f"{n / (1 << 20):.1f} MiB"


def format_summary(result: CopiesResult, cluster: ClusterInfo | None = None) -> str:
    """The human-readable final report; ``cluster``: where the index is."""
    s = result.summary()
    without = sum(s["without_text"].values())
    ratio = s["rows_one_filter_per_document"] / s["rows"] if s["rows"] else 0.0
    t = s["seconds"]
    return "\n".join([
        f"neardup copies {s['index']}: {s['documents']:,} documents read, {s['screened']:,} screened "
        f"({without:,} without text in {', '.join(s['fields'])}; "
        f"{s['with_text'] - s['screened']:,} with only frequent shingles)",
        *([f"  upstream: {cluster.describe()}"] if cluster else []),
        f"  shingles: {s['shingles']:,} in the filter; {s['frequent_shingles_left_out']:,} found in more than "
        f"{s['max_df']} documents left out" if s["max_df"] else
        f"  shingles: {s['shingles']:,} in the filter (none left out: max_df 0)",
        f"  filter: {s['rows']:,} rows of {s['row_bits']:,} bits, k = {s['hashes']} ({_mib(s['filter_bytes'])}); "
        f"one filter per document would take {s['rows_one_filter_per_document']:,} rows (1 : {ratio:.1f}); "
        f"false-positive rate at the mean fill {s['fp_at_mean_fill']:.4f}; shingle sets {_mib(s['shingle_bytes'])}",
        f"  candidates: {s['candidates']:,} ({s['candidates'] / max(1, s['screened']):.1f} a document); "
        f"verified pairs: {s['pairs']:,} (copier holds ≥ {s['min_share']:g} of the source's shingles, "
        f"≥ {s['min_shared']})",
        f"  time: {t['total']:.1f} s (read {t['read']:.1f}, shingle {t['shingle']:.1f}, frequent shingles "
        f"{t['frequent']:.1f}, insert {t['insert']:.1f}, query {t['query']:.1f}, verify {t['verify']:.1f})",
    ])


def format_table(result: CopiesResult, pairs: Sequence[CopiedPair]) -> str:
    """One line a pair: containment = share of the source's shingles found in the copier;
    reverse = share of the copier's shingles that are shared."""
    if not pairs:
        return "no document holds a fragment of another"
    copiers = [result.key(p.copier) for p in pairs]
    sources = [result.key(p.source) for p in pairs]
    cw, sw = max(6, *map(len, copiers)), max(6, *map(len, sources))
    lines = [f"{'copier':<{cw}}  {'source':<{sw}}  containment   shared  of source  reverse"]
    for pair, copier, source in zip(pairs, copiers, sources):
        lines.append(f"{copier:<{cw}}  {source:<{sw}}  {pair.containment:>11.3f}  {pair.shared:>7,}  "
                     f"{pair.source_size:>9,}  {pair.reverse:>7.3f}")
    return "\n".join(lines)
