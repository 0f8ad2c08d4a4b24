"""The pseudo-matrix Bloom filter: many documents' shingles packed into fixed-size Bloom rows.

A document that copies a few paragraphs of another is invisible to resemblance; to find it we
ask, for a source S, which documents hold at least a share σ of S's shingles. One Bloom filter
per document wastes space (each is sized for the largest document), so the filter packs the
shingles of *several* documents into each fixed-size row until the row reaches its designed
fill, and keeps an index row → documents. A query counts, per row, how many of the query's
shingles the row holds; documents in rows holding enough of them are *candidates*, which the
caller verifies by exact containment.

**One row** is a Bloom filter of m bits with k hash functions. A shingle hash x (uniform 64
bits) sets the bits given by double hashing (Kirsch & Mitzenmacher 2006)::

    g_i(x) = (h1 + i · h2) mod m,   i = 0 … k-1,   h1 = x mod 2^32,   h2 = (x div 2^32) | 1

After n distinct insertions a bit is still 0 with probability (1 - 1/m)^{kn} ≈ e^{-kn/m}, so a
key never inserted finds all its k bits set — a false positive — with probability::

    p(n) ≈ (1 - e^{-kn/m})^k

**Designed fill.** A row is filled up to the capacity n* at which p reaches the target p*::

    n* = ⌊ -(m / k) · ln(1 - p*^{1/k}) ⌋

(for the optimal k = (m/n) ln 2 this is n* = -m (ln 2)² / ln p*, i.e. 9.6 bits per shingle at
p* = 1 %). **Rows needed** for documents of s_1 … s_N distinct shingles: packed, a document
continuing into the next row when the current one is full, ⌈Σ s_d / n*⌉ rows (plus partly
filled rows left by deletions); one filter (of the same size) per document,
Σ_d max(1, ⌈s_d / n*⌉). :func:`rows_needed` gives both.

**Layout.** The bits are stored bit-sliced: ``bits[b]`` is a bit vector over rows (one uint64
per 64 rows) holding bit b of every row. Inserting sets one bit in k words per shingle;
a query gathers the k words of each of its shingles, ANDs them (rows holding the shingle)
and counts set bits per row: O(|Q| · k · rows/64) word operations, vectorised.

**Query.** For a query set Q, c_r = #{q ∈ Q : row r holds q} (true members plus false
positives, expected |Q \\ row| · p(n_r) of them). A document's score is the sum of c_r over the
rows holding a part of it, an upper bound on |Q ∩ d| (a Bloom filter has no false negatives),
so every document with |Q ∩ d| ≥ σ|Q| is returned. When the query is a document already in
the filter (``exclude``), its own rows say nothing about the others in them: those rows are left
out of every score and their other documents are returned as candidates unconditionally.

**Delete** clears the rows that held the document and re-inserts the other documents' parts of
those rows (the caller supplies their shingles: the filter keeps only bits, not shingles); all
other rows are untouched. Freed space is not reused: new documents go to the open last row.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

_LOW32 = np.uint64(0xFFFFFFFF)


@dataclass(frozen=True)
class BloomParams:
    """Row size m (bits), k hash functions and the designed false-positive rate p*."""

    row_bits: int = 1 << 16
    hashes: int = 7
    target_fp: float = 0.01

    def __post_init__(self) -> None:
        if not (isinstance(self.row_bits, int) and 64 <= self.row_bits <= 1 << 32 and self.row_bits % 64 == 0):
            raise ValueError(f"row_bits = {self.row_bits!r}: must be a multiple of 64 from 64 to 2^32")
        if not (isinstance(self.hashes, int) and 1 <= self.hashes <= 64):
            raise ValueError(f"hashes = {self.hashes!r}: must be a whole number from 1 to 64")
        if not (isinstance(self.target_fp, float) and 0.0 < self.target_fp < 1.0):
            raise ValueError(f"target_fp = {self.target_fp!r}: must be a number between 0 and 1")
        if self.capacity < 1:
            raise ValueError(f"a row of {self.row_bits} bits with {self.hashes} hashes cannot hold one shingle "
                             f"at a false-positive rate of {self.target_fp}")

    @property
    def capacity(self) -> int:
        """n* = ⌊-(m/k) ln(1 - p*^{1/k})⌋: shingles per row at the designed fill."""
        m, k = self.row_bits, self.hashes
        return int(math.floor(-(m / k) * math.log1p(-self.target_fp ** (1.0 / k))))

    def false_positive_rate(self, n: int | float | np.ndarray) -> float | np.ndarray:
        """p(n) = (1 - e^{-kn/m})^k for a row holding n distinct shingles."""
        return (1.0 - np.exp(-self.hashes * np.asarray(n, dtype=np.float64) / self.row_bits)) ** self.hashes


def bit_positions(shingles: np.ndarray, params: BloomParams) -> np.ndarray:
    """(len(shingles), k) bit indices g_i(x) = (h1 + i·h2) mod m (see the module docstring)."""
    x = np.asarray(shingles, dtype=np.uint64)
    h1 = x & _LOW32
    h2 = (x >> np.uint64(32)) | np.uint64(1)
    steps = np.arange(params.hashes, dtype=np.uint64)
    return ((h1[:, None] + steps[None, :] * h2[:, None]) % np.uint64(params.row_bits)).astype(np.int64)


def rows_needed(sizes: np.ndarray, capacity: int) -> tuple[int, int]:
    """(packed rows ⌈Σs/n*⌉, rows for one filter per document Σ max(1, ⌈s/n*⌉))."""
    sizes = np.asarray(sizes, dtype=np.int64)
    packed = int(-(-int(sizes.sum()) // capacity))
    separate = int(np.maximum(1, -(-sizes // capacity)).sum()) if len(sizes) else 0
    return packed, separate


@dataclass
class _Part:
    """Shingles ``[start, end)`` of a document's sorted unique shingle array live in one row."""

    doc: int
    start: int
    end: int


@dataclass
class PseudoMatrixBloom:
    """Bloom rows packing many documents (see the module docstring). Documents are ints.

    Not a frozen value: insert and delete update it in place. Deterministic: the same
    sequence of operations gives the same bits.
    """

    params: BloomParams = field(default_factory=BloomParams)
    #: (m, words) uint64; bit r of ``bits[b]`` (word r // 64, bit r % 64) is bit b of row r.
    bits: np.ndarray = field(init=False)
    fill: list[int] = field(init=False, default_factory=list)      # distinct shingles per row
    parts: list[list[_Part]] = field(init=False, default_factory=list)  # row → document parts
    doc_rows: dict[int, list[int]] = field(init=False, default_factory=dict)
    doc_sizes: dict[int, int] = field(init=False, default_factory=dict)
    _index: tuple[np.ndarray, np.ndarray, np.ndarray] | None = field(init=False, default=None, repr=False)

    def __post_init__(self) -> None:
        self.bits = np.zeros((self.params.row_bits, 1), dtype=np.uint64)

    # ---- size figures

    @property
    def rows(self) -> int:
        return len(self.fill)

    @property
    def documents(self) -> int:
        return len(self.doc_rows)

    def nbytes(self) -> int:
        """Bytes of the bit matrix in use (m/8 per row)."""
        return self.rows * self.params.row_bits // 8

    def figures(self) -> dict[str, float]:
        """Rows, bytes, mean fill and the formula's false-positive rate at that fill."""
        fill = np.array(self.fill, dtype=np.float64)
        packed, separate = rows_needed(np.array(list(self.doc_sizes.values())), self.params.capacity)
        return {"documents": self.documents, "rows": self.rows, "bytes": self.nbytes(),
                "capacity": self.params.capacity, "mean_fill": float(fill.mean()) if len(fill) else 0.0,
                "fp_at_mean_fill": float(self.params.false_positive_rate(fill.mean())) if len(fill) else 0.0,
                "rows_one_filter_per_document": separate, "rows_packed_minimum": packed}

    # ---- bits

    def _ensure_rows(self, rows: int) -> None:
        words = -(-rows // 64)
        if words > self.bits.shape[1]:
            grown = np.zeros((self.params.row_bits, max(words, 2 * self.bits.shape[1])), dtype=np.uint64)
            grown[:, :self.bits.shape[1]] = self.bits
            self.bits = grown

    def _set(self, row: int, shingles: np.ndarray) -> None:
        if len(shingles) == 0:
            return
        positions = bit_positions(shingles, self.params).ravel()
        self.bits[positions, row >> 6] |= np.uint64(1) << np.uint64(row & 63)

    def _clear(self, row: int) -> None:
        self.bits[:, row >> 6] &= ~(np.uint64(1) << np.uint64(row & 63))

    def row_holds(self, row: int, shingles: np.ndarray) -> np.ndarray:
        """Membership of each shingle in one row (bool array; false positives included)."""
        word = self.bits[bit_positions(shingles, self.params), row >> 6]
        return np.all((word >> np.uint64(row & 63)) & np.uint64(1) == 1, axis=1)

    # ---- insert / delete

    def insert(self, doc: int, shingles: np.ndarray) -> list[int]:
        """Add a document's shingles (made unique and sorted); returns the rows it went to.
        ValueError if ``doc`` is already in the filter. An empty document takes no space."""
        doc = int(doc)
        if doc in self.doc_rows:
            raise ValueError(f"document {doc} is already in the filter")
        unique = np.unique(np.asarray(shingles, dtype=np.uint64))
        capacity = self.params.capacity
        rows: list[int] = []
        start = 0
        while start < len(unique):
            if not self.fill or self.fill[-1] >= capacity:
                self._ensure_rows(self.rows + 1)
                self.fill.append(0)
                self.parts.append([])
            row = self.rows - 1
            end = min(len(unique), start + capacity - self.fill[row])
            self._set(row, unique[start:end])
            self.fill[row] += end - start
            self.parts[row].append(_Part(doc, start, end))
            rows.append(row)
            start = end
        self.doc_rows[doc] = rows
        self.doc_sizes[doc] = len(unique)
        self._index = None
        return rows

    def delete(self, doc: int, shingles_of: Callable[[int], np.ndarray]) -> list[int]:
        """Remove a document: clear each row that held a part of it and re-insert the other
        documents' parts of that row, with their shingles from ``shingles_of(other)`` (the same
        set they were inserted with). Returns the rebuilt rows; KeyError if ``doc`` is absent."""
        doc = int(doc)
        rows = self.doc_rows.pop(doc)
        self.doc_sizes.pop(doc)
        self._index = None
        cache: dict[int, np.ndarray] = {}
        for row in rows:
            self._clear(row)
            kept = [p for p in self.parts[row] if p.doc != doc]
            self.parts[row] = kept
            self.fill[row] = 0
            for part in kept:
                if part.doc not in cache:
                    cache[part.doc] = np.unique(np.asarray(shingles_of(part.doc), dtype=np.uint64))
                values = cache[part.doc]
                if len(values) != self.doc_sizes[part.doc]:
                    raise ValueError(f"shingles_of({part.doc}) gave {len(values)} shingles, "
                                     f"{self.doc_sizes[part.doc]} were inserted")
                self._set(row, values[part.start:part.end])
                self.fill[row] += part.end - part.start
        return rows

    # ---- query

    def row_counts(self, shingles: np.ndarray) -> np.ndarray:
        """c_r for every row: how many of the (unique) query shingles row r holds."""
        return self._row_counts(np.unique(np.asarray(shingles, dtype=np.uint64)))

    def _row_counts(self, unique: np.ndarray) -> np.ndarray:
        if len(unique) == 0 or self.rows == 0:
            return np.zeros(self.rows, dtype=np.int64)
        words = -(-self.rows // 64)
        positions = bit_positions(unique, self.params)                      # (q, k)
        held = np.bitwise_and.reduce(self.bits[positions, :words], axis=1)  # (q, words): rows holding q
        per_row = np.unpackbits(held.astype("<u8").view(np.uint8), axis=1, bitorder="little")
        return per_row.sum(axis=0, dtype=np.int64)[:self.rows]

    def query(self, shingles: np.ndarray, min_share: float,
              exclude: int | None = None, assume_unique: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """Candidate documents holding at least ``min_share`` of the query's distinct shingles,
        by their rows' counts (an upper bound: verify by exact containment).

        Returns (documents, share bound) sorted by document; ``exclude`` (the query document
        itself, if it is in the filter) is never returned, its rows are left out of the scores
        and the other documents in them are returned with share bound 1.0. ``assume_unique``:
        ``shingles`` is already a sorted unique array (not deduplicated again).
        """
        if not (isinstance(min_share, (int, float)) and 0.0 < min_share <= 1.0):
            raise ValueError(f"min_share = {min_share!r}: must be a number in (0, 1]")
        unique = np.asarray(shingles, dtype=np.uint64)
        if not assume_unique:
            unique = np.unique(unique)
        size = len(unique)
        if size == 0 or self.rows == 0:
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float64)
        counts = self._row_counts(unique)
        part_row, docs, slot = self._part_index()
        own = np.array(self.doc_rows.get(exclude, ()) if exclude is not None else (), dtype=np.int64)
        counts[own] = 0
        score = np.bincount(slot, weights=counts[part_row], minlength=len(docs))
        if len(own):
            score[slot[np.isin(part_row, own)]] = size
        keep = score >= math.ceil(min_share * size - 1e-9)
        if exclude is not None:
            keep &= docs != exclude
        return docs[keep], np.minimum(1.0, score[keep] / size)

    def _part_index(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(row of every part, the distinct documents, each part's position among them), as
        arrays (rebuilt after an insert or delete)."""
        if self._index is None:
            rows = np.array([r for r, parts in enumerate(self.parts) for _ in parts], dtype=np.int64)
            docs, slot = np.unique(np.array([p.doc for parts in self.parts for p in parts], dtype=np.int64),
                                   return_inverse=True)
            self._index = (rows, docs, slot.reshape(-1))
        return self._index


def shared_counts(source: np.ndarray, candidates: list[np.ndarray], assume_unique: bool = False) -> np.ndarray:
    """Exact |S ∩ C| for each candidate set C (the verification step), in one pass: the
    candidates' shingles are concatenated, looked up in sorted S with one binary search
    (:func:`numpy.searchsorted`), and the hits counted per candidate (int64).
    ``assume_unique``: S and the candidates are already sorted unique arrays (as
    ``Fingerprinter.shingles`` gives them), so they are not deduplicated again."""
    def unique(values: np.ndarray) -> np.ndarray:
        values = np.asarray(values, dtype=np.uint64)
        return values if assume_unique else np.unique(values)

    s = unique(source)
    if len(s) == 0 or not candidates:
        return np.zeros(len(candidates), dtype=np.int64)
    sets = [unique(c) for c in candidates]
    lengths = np.array([len(c) for c in sets], dtype=np.int64)
    values = np.concatenate(sets)
    at = np.minimum(np.searchsorted(s, values), len(s) - 1)
    owner = np.repeat(np.arange(len(sets)), lengths)
    return np.bincount(owner[s[at] == values], minlength=len(sets)).astype(np.int64)


def containment_shares(source: np.ndarray, candidates: list[np.ndarray], assume_unique: bool = False) -> np.ndarray:
    """Exact |S ∩ C| / |S| for each candidate set C (:func:`shared_counts` over |S|); 0 where S
    is empty."""
    size = len(source) if assume_unique else len(np.unique(np.asarray(source, dtype=np.uint64)))
    if size == 0:
        return np.zeros(len(candidates), dtype=np.float64)
    return shared_counts(source, candidates, assume_unique) / size


def frequent_shingles(shingle_sets: list[np.ndarray], max_documents: int, assume_unique: bool = False) -> np.ndarray:
    """Sorted shingle hashes found in more than ``max_documents`` of the sets: boilerplate
    (site furniture, embedded player code) that would make every page "contain" every other.
    A caller that wants copied *content* drops them before inserting and querying.
    ``assume_unique``: each set is already free of repeats (as ``Fingerprinter.shingles`` gives
    them); then the only copy made is one sorted concatenation of all sets."""
    if not shingle_sets:
        return np.empty(0, dtype=np.uint64)
    values = np.concatenate([np.asarray(s, dtype=np.uint64) if assume_unique
                             else np.unique(np.asarray(s, dtype=np.uint64)) for s in shingle_sets])
    values.sort()
    # sorted, a value occurs more than D times iff it equals the value D places further on
    d = max(0, int(max_documents))
    if d >= len(values):
        return np.empty(0, dtype=np.uint64)
    head = values[:len(values) - d]
    return np.unique(head[head == values[d:]])
