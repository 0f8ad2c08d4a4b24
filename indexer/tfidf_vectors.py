"""TF-IDF vectors written by the indexer: ``neardup.tf``, the top-k vector of each document.

Each fingerprinted document gets its top-k TF-IDF vector (:class:`neardup.fingerprint.tfidf.TfidfVector`,
version ``t1-…`` separate from the fingerprint's ``v``; weight ``tf · log(N / df)``, kept to the
k largest, compared by cosine), weighted with the statistics of its index
(:mod:`neardup.indexer.tfidf_stats`) *at the time it is enriched*, this batch included. Vectors are
weighted once, here, and the proxy compares them as they are; ``neardup index --force``
re-weights with the current statistics (without counting documents again).

**Counting each document once.** A document is counted when a vector of the current TF-IDF
version is first made for it: ``neardup index`` counts the documents it reads that do not carry
``neardup.tf.v`` = the current version (``--force`` re-weights, it does not re-count);
``neardup load`` counts the lines that do not carry it and whose ``_id`` is not yet in the index
with it. Limits, by design: a document whose text changes after it was counted keeps contributing
its old terms (the stored vector holds only its top-k terms, so the old term set is not known);
deleted documents are not subtracted; a job killed between counting a page and writing its
vectors counts that page again when resumed (at most one page per worker). All of these shift
idf slightly; none affects the document's own vector beyond that.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from neardup.config import Config, ConfigError
from neardup.fingerprint import FIELD, Fingerprinter
from neardup.fingerprint.texts import document_texts
from neardup.fingerprint.tfidf import TF_FIELD, CorpusStats, TermCounts, TfidfWeigher, tf_mapping
from neardup.indexer.client import Client
from neardup.indexer.errors import JobError
from neardup.indexer.retry import Retrier
from neardup.indexer.tfidf_stats import StatsStore, stats_index_name
from neardup.tfidf_config import weigher_from_config


def tf_properties() -> dict[str, dict[str, Any]]:
    """``neardup`` sub-field definitions of the vector, as dotted leaf names (``tf.v`` ...), the
    form the mapping check compares with the field-mapping API's answer."""
    inner = tf_mapping()[TF_FIELD]["properties"]
    return {f"{TF_FIELD}.{name}": dict(definition) for name, definition in inner.items()}


def text_key(texts: Sequence[str]) -> str:
    return "\n".join(texts)


@dataclass
class TfidfEnricher:
    """Vectors for the documents of one worker, with statistics kept in ``StatsStore``s (one per
    concrete index). Per page: :meth:`count` the documents met for the first time, then
    :meth:`vector` of each document's texts under the statistics after that."""

    weigher: TfidfWeigher
    stores: dict[str, StatsStore]
    make_store: Any  # (concrete index) -> StatsStore
    _counts: dict[str, TermCounts] = field(default_factory=dict)
    _stats: dict[str, CorpusStats] = field(default_factory=dict)
    #: text key → concrete index of the page's documents; the last index met otherwise
    _index_of: dict[str, str] = field(default_factory=dict)
    _last_index: str = ""

    @property
    def version(self) -> str:
        return self.weigher.version

    def store(self, index: str) -> StatsStore:
        if index not in self.stores:
            self.stores[index] = self.make_store(index)
        return self.stores[index]

    def counts(self, texts: Sequence[str]) -> TermCounts:
        key = text_key(texts)
        counts = self._counts.get(key)
        if counts is None:
            counts = self._counts[key] = self.weigher.counts(key)
        return counts

    def is_current(self, neardup: Any) -> bool:
        """Whether a stored ``neardup`` object already holds a vector of this version (its
        document was counted)."""
        tf = neardup.get(TF_FIELD) if isinstance(neardup, Mapping) else None
        return isinstance(tf, Mapping) and tf.get("v") == self.version

    def count(self, documents: Iterable[tuple[str, Sequence[str] | None, bool]]) -> int:
        """Start a page: ``documents`` are (concrete index, texts or None without text, counted
        already). Counts the new ones in their index's statistics; returns how many."""
        self._counts.clear()
        self._index_of.clear()
        new: dict[str, list[np.ndarray]] = {}
        indices = set()
        for index, texts, counted in documents:
            indices.add(index)
            self._last_index = index
            if texts is None:
                continue
            counts = self.counts(texts)
            self._index_of[text_key(texts)] = index
            if not counted:
                new.setdefault(index, []).append(counts.terms)
        for index in indices:
            store = self.store(index)
            self._stats[index] = store.add(new.get(index, []))  # reads the stored statistics once
        return sum(len(v) for v in new.values())

    def vector_of(self, texts: Sequence[str]) -> dict[str, Any]:
        """:meth:`vector` for a document of the page, by its texts (a document re-read with other
        texts after a conflicting write: under the statistics of the page's last index)."""
        return self.vector(self._index_of.get(text_key(texts), self._last_index), texts)

    def vector(self, index: str, texts: Sequence[str]) -> dict[str, Any]:
        """The ``neardup.tf`` value of a document of ``index`` (statistics of the last :meth:`count`
        that met the index; read now if none did). A page without new documents is weighed with
        the statistics as this writer last read or wrote them (exact when nothing else is adding,
        as in a ``--force`` run; otherwise behind by what other writers added since)."""
        stats = self._stats.get(index)
        if stats is None:
            stats = self._stats[index] = self.store(index).read()
        return self.weigher.vector(self.counts(texts), stats).to_source()


def make_enricher(config: Config, client: Client, retrier: Retrier,
                  fingerprinter: Fingerprinter | None = None) -> TfidfEnricher:
    """The enricher of a configuration (``config.tfidf.enabled`` is the caller's to check)."""
    try:
        weigher = weigher_from_config(config, fingerprinter)
    except ConfigError as exc:
        raise JobError(str(exc)) from None

    def make_store(index: str) -> StatsStore:
        return StatsStore(client, retrier, stats_index_name(config.tfidf.stats_index, index), weigher.version,
                          config.tfidf.stats_parts, config.indexer.max_retries)

    return TfidfEnricher(weigher, {}, make_store)


def vectors_of_lines(tfidf: TfidfEnricher, index: str, lines: Sequence[Any], fields: Sequence[str],
                     counted_elsewhere: Sequence[bool] | None = None) -> list[dict[str, Any]]:
    """``{"tf": vector}`` (or ``{}`` without text) for each parsed JSON line
    (:class:`neardup.indexer.enrich.EnrichedLine`) of a chunk bound for ``index``, having counted the lines
    that carry no vector of the current version (and are not ``counted_elsewhere``)."""
    texts = [source_texts(line.doc, fields) if line.fingerprint is not None and line.doc is not None else None
             for line in lines]
    elsewhere = counted_elsewhere if counted_elsewhere is not None else [False] * len(lines)
    tfidf.count((index, t, tfidf.is_current(neardup_of(line.doc)) or known)
                for line, t, known in zip(lines, texts, elsewhere))
    return [{TF_FIELD: tfidf.vector(index, t)} if t is not None else {} for t in texts]


def source_texts(source: Mapping[str, Any], fields: Sequence[str]) -> tuple[str, ...] | None:
    texts = document_texts(source, fields)
    return texts.texts if texts.outcome == "ok" else None


def neardup_of(source: Any) -> Any:
    return source.get(FIELD) if isinstance(source, Mapping) else None
