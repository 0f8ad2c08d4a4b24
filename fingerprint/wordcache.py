"""A bounded cache word id → token hash of the word's canonical form, queried with arrays.

Word frequencies are Zipfian: a few thousand documents in, nearly every token of a new
document has been seen before. The cache answers a whole document at once: the document's
word ids are looked up with one :func:`numpy.searchsorted` in a sorted array of
known ids, plus a small dict of recently learned ones (merged into the sorted arrays when
it exceeds 1/64 of them); only words never seen before are turned
into strings and sent through the word step (stop list, pymorphy3, stemmer) and mmh3.

Memory is bounded by ``capacity`` entries (16 bytes each in the sorted arrays): when the
cache would grow past it, it is emptied and refills with the words in use.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from fingerprint.hashing import DROPPED, token_hash


class WordHashCache:
    """word id → signed 64-bit token hash (or :data:`~fingerprint.hashing.DROPPED`)."""

    def __init__(self, canonical: Callable[[list[str]], list[str | None]], seed: int,
                 capacity: int = 300_000) -> None:
        self.canonical = canonical
        self.seed = seed
        self.capacity = capacity
        self.keys = np.empty(0, dtype=np.uint64)
        self.values = np.empty(0, dtype=np.int64)
        self.recent: dict[int, int] = {}

    def __len__(self) -> int:
        return len(self.keys) + len(self.recent)

    def token_hashes(self, codes: np.ndarray, starts: np.ndarray, ends: np.ndarray,
                     ids: np.ndarray) -> np.ndarray:
        """Token hash for each token ``codes[starts[i]:ends[i]]`` with word id ``ids[i]``."""
        values, found = self._find(ids)
        if not found.all():
            missing = np.flatnonzero(~found)
            distinct, first, inverse = np.unique(ids[missing], return_index=True, return_inverse=True)
            text = codes.tobytes().decode("utf-32-le", "surrogatepass")
            at = missing[first]
            words = [text[s:e] for s, e in zip(starts[at].tolist(), ends[at].tolist())]
            seed = self.seed
            learned = np.array([DROPPED if c is None else token_hash(c, seed) for c in self.canonical(words)],
                               dtype=np.int64)
            values[missing] = learned[inverse]
            self._add(distinct, learned.tolist())
        return values

    def _find(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        values = np.zeros(len(ids), dtype=np.int64)
        found = np.zeros(len(ids), dtype=bool)
        if self.keys.size:
            at = np.searchsorted(self.keys, ids)
            at[at == self.keys.size] = 0
            found = self.keys[at] == ids
            values[found] = self.values[at[found]]
        if self.recent and not found.all():
            rest = np.flatnonzero(~found)
            got = list(map(self.recent.get, ids[rest].tolist()))
            hit = np.array([g is not None for g in got], dtype=bool)
            if hit.any():
                values[rest[hit]] = [g for g in got if g is not None]
                found[rest[hit]] = True
        return values, found

    def _add(self, ids: np.ndarray, values: list[int]) -> None:
        if len(self) + len(values) > self.capacity:
            self.keys = np.empty(0, dtype=np.uint64)
            self.values = np.empty(0, dtype=np.int64)
            self.recent.clear()
        room = self.capacity - len(self)
        self.recent.update(zip(ids[:room].tolist(), values[:room]))
        if len(self.recent) > max(256, len(self.keys) // 64):
            # Merging is cheap: a stable sort of two sorted runs is one linear merge.
            keys = np.concatenate((self.keys, np.fromiter(self.recent.keys(), dtype=np.uint64, count=len(self.recent))))
            values_ = np.concatenate((self.values, np.fromiter(self.recent.values(), dtype=np.int64,
                                                               count=len(self.recent))))
            order = np.argsort(keys, kind="stable")
            self.keys, self.values = keys[order], values_[order]
            self.recent.clear()
