"""Corpus statistics for TF-IDF: the document count N and the document frequency of each term.

A term is a 64-bit term hash (see :mod:`neardup.fingerprint.tfidf`). df(t) is a sum over
documents of "the document holds t", so adding documents batch by batch, removing them again,
or merging the statistics of disjoint parts all give exactly the statistics of the whole set at
once.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from neardup.fingerprint.values import ArrayValue


class StatsFormatError(ValueError):
    """A stored statistics blob is malformed."""


def _merge_counts(terms: Sequence[np.ndarray], counts: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Sorted union of several (terms, counts) lists with the counts of equal terms added."""
    all_terms = np.concatenate([np.asarray(t, dtype=np.uint64) for t in terms]) if terms else np.empty(0, np.uint64)
    all_counts = np.concatenate([np.asarray(c, dtype=np.int64) for c in counts]) if counts else np.empty(0, np.int64)
    if all_terms.size == 0:
        return np.empty(0, dtype=np.uint64), np.empty(0, dtype=np.int64)
    unique, inverse = np.unique(all_terms, return_inverse=True)
    summed = np.bincount(inverse, weights=all_counts, minlength=len(unique))
    return unique, np.rint(summed).astype(np.int64)


@dataclass(frozen=True, eq=False)
class CorpusStats(ArrayValue):
    """Document count N and document frequency df per term hash (``terms`` sorted, ``df`` ≥ 1).

    Immutable: :meth:`add`, :meth:`remove` and :meth:`merge` return new statistics. Adding
    documents in batches, or merging the statistics of disjoint parts, gives exactly the
    statistics of all of them at once (df is a sum over documents).
    """

    doc_count: int
    terms: np.ndarray
    df: np.ndarray

    @classmethod
    def empty(cls) -> CorpusStats:
        return cls(0, np.empty(0, dtype=np.uint64), np.empty(0, dtype=np.int64))

    @classmethod
    def of(cls, documents: Iterable[np.ndarray]) -> CorpusStats:
        """Statistics of documents given as arrays of their term hashes."""
        return cls.empty().add(documents)

    def __len__(self) -> int:
        return len(self.terms)

    def __repr__(self) -> str:
        return f"CorpusStats(doc_count={self.doc_count}, terms={len(self.terms)})"

    def _combined(self, documents: Iterable[np.ndarray], sign: int) -> CorpusStats:
        docs = [np.unique(np.asarray(d, dtype=np.uint64)) for d in documents]
        if not docs:
            return self
        terms, df = _merge_counts([self.terms] + docs,
                                  [self.df] + [np.full(len(d), sign, dtype=np.int64) for d in docs])
        if sign < 0:
            if np.any(df < 0) or self.doc_count < len(docs):
                raise ValueError("removing documents that were never added to these statistics")
            keep = df > 0
            terms, df = terms[keep], df[keep]
        return CorpusStats(self.doc_count + sign * len(docs), terms, df)

    def add(self, documents: Iterable[np.ndarray]) -> CorpusStats:
        """Statistics with ``documents`` (each an array of its term hashes; repeats ignored) added."""
        return self._combined(documents, +1)

    def remove(self, documents: Iterable[np.ndarray]) -> CorpusStats:
        """Statistics with ``documents`` taken out again (ValueError if they were not in)."""
        return self._combined(documents, -1)

    def merge(self, other: CorpusStats) -> CorpusStats:
        """Statistics of two disjoint sets of documents together."""
        terms, df = _merge_counts([self.terms, other.terms], [self.df, other.df])
        return CorpusStats(self.doc_count + other.doc_count, terms, df)

    def df_of(self, terms: np.ndarray) -> np.ndarray:
        """df of each term hash (0 for terms not in the statistics)."""
        terms = np.asarray(terms, dtype=np.uint64)
        if len(self.terms) == 0:
            return np.zeros(len(terms), dtype=np.int64)
        at = np.minimum(np.searchsorted(self.terms, terms), len(self.terms) - 1)
        return np.where(self.terms[at] == terms, self.df[at], 0)

    def idf(self, terms: np.ndarray) -> np.ndarray:
        """idf(t) = ln((1 + N) / (1 + df(t))) + 1 for each term hash."""
        df = self.df_of(terms).astype(np.float64)
        return np.log((1.0 + self.doc_count) / (1.0 + df)) + 1.0

    # -- partitions by the top bits of the term hash (for storage in several small documents)

    def partition(self, bits: int) -> list[CorpusStats]:
        """2^bits statistics, part p holding the terms whose top ``bits`` bits are p (each with
        the full document count). :meth:`join` of the parts gives these statistics back."""
        if not (isinstance(bits, int) and 0 <= bits <= 16):
            raise ValueError(f"bits = {bits!r}: must be a whole number from 0 to 16")
        top = (self.terms >> np.uint64(64 - bits)).astype(np.int64) if bits else np.zeros(len(self.terms), np.int64)
        edges = np.searchsorted(top, np.arange((1 << bits) + 1))  # terms are sorted, so parts are runs
        return [CorpusStats(self.doc_count, self.terms[a:b].copy(), self.df[a:b].copy())
                for a, b in zip(edges[:-1], edges[1:])]

    @classmethod
    def join(cls, parts: Sequence[CorpusStats]) -> CorpusStats:
        """Inverse of :meth:`partition` (parts of one statistics, any order; ValueError if their
        document counts differ or a term appears in two parts)."""
        if not parts:
            return cls.empty()
        counts = {p.doc_count for p in parts}
        if len(counts) != 1:
            raise ValueError(f"parts of different statistics: document counts {sorted(counts)}")
        terms = np.concatenate([p.terms for p in parts])
        df = np.concatenate([p.df for p in parts])
        order = np.argsort(terms, kind="stable")
        terms, df = terms[order], df[order]
        if len(terms) > 1 and np.any(terms[1:] == terms[:-1]):
            raise ValueError("parts overlap: a term is in two parts")
        return cls(counts.pop(), terms, df)

    # -- a compact, lossless binary form (the shell stores it, e.g. base64 in a companion index)

    _MAGIC = b"NDS1"

    def to_bytes(self) -> bytes:
        """``NDS1`` ‖ N (u64) ‖ V (u64) ‖ V term hashes (u64) ‖ V df (u32), little-endian."""
        if len(self.df) and int(self.df.max()) >= 2**32:
            raise ValueError("document frequency does not fit 32 bits")
        head = self._MAGIC + np.array([self.doc_count, len(self.terms)], dtype="<u8").tobytes()
        return head + self.terms.astype("<u8").tobytes() + self.df.astype("<u4").tobytes()

    @classmethod
    def from_bytes(cls, data: bytes) -> CorpusStats:
        """Inverse of :meth:`to_bytes`; :class:`StatsFormatError` if malformed."""
        if not isinstance(data, (bytes, bytearray, memoryview)) or bytes(data[:4]) != cls._MAGIC or len(data) < 20:
            raise StatsFormatError("corpus statistics: not an NDS1 blob")
        count, size = (int(v) for v in np.frombuffer(bytes(data[4:20]), dtype="<u8"))
        if len(data) != 20 + 12 * size:
            raise StatsFormatError(f"corpus statistics: {len(data)} bytes, {size} terms need {20 + 12 * size}")
        terms = np.frombuffer(bytes(data[20:20 + 8 * size]), dtype="<u8").astype(np.uint64)
        df = np.frombuffer(bytes(data[20 + 8 * size:]), dtype="<u4").astype(np.int64)
        if size and (np.any(terms[1:] <= terms[:-1]) or df.min() < 1 or df.max() > count):
            raise StatsFormatError("corpus statistics: terms not strictly increasing or df outside 1..N")
        return cls(count, terms, df)
