"""A bounded cache word id → token hash of the word's canonical form, queried with arrays.

Word frequencies are Zipfian: once the frequent words are in, nearly every token of a new
document has been seen before. The cache answers a whole document at once, with no Python
work per token: it is an open-addressing hash table with linear probing in two NumPy arrays
(keys, values). A word id (already a well-mixed 64-bit hash, never 0, which marks an empty
slot) starts at slot ``id >> (64 - log2 size)``; a lookup gathers the slots of all queries at
once, and the few that found another key move on to the next slot, round by round. The table
doubles whenever it is a quarter full, which keeps the probe sequences, and so the rounds,
short. Only words never seen before are turned into strings and sent through the word step
(stop list, pymorphy3, stemmer) and mmh3, then inserted the same way.

Memory is bounded by ``capacity`` entries (at most 128 bytes each, with the table at its
emptiest just after doubling): when the cache would grow past it, it is emptied and refills
with the words in use. Results never depend on what is cached: a value is a pure function of
the word.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from neardup.fingerprint.hashing import token_hash_array
from neardup.fingerprint.jit import kernels

_EMPTY = np.uint64(0)
INITIAL_SLOTS = 1 << 12
#: The table doubles when more than 1/MAX_LOAD of its slots are taken.
MAX_LOAD = 4


class WordHashCache:
    """word id → signed 64-bit token hash (or :data:`~neardup.fingerprint.hashing.DROPPED`)."""

    def __init__(self, canonical: Callable[[list[str]], list[str | None]], seed: int,
                 capacity: int = 300_000) -> None:
        self.canonical = canonical
        self.seed = seed
        self.capacity = capacity
        self._reset(INITIAL_SLOTS)

    def _reset(self, slots: int) -> None:
        self.keys = np.zeros(slots, dtype=np.uint64)
        self.values = np.zeros(slots, dtype=np.int64)
        self.shift = np.uint64(64 - (slots.bit_length() - 1))
        self.count = 0

    def __len__(self) -> int:
        return self.count

    def token_hashes(self, codes: np.ndarray, starts: np.ndarray, ends: np.ndarray, ids: np.ndarray,
                     words: Callable[[np.ndarray], list[str]] | None = None) -> np.ndarray:
        """Token hash for each token ``codes[starts[i]:ends[i]]`` with word id ``ids[i]``.

        ``words(indices)``, if given, returns those tokens as strings (a caller that has
        them saves decoding the code points).
        """
        values, found = self._find(ids)
        if not found.all():
            missing = np.flatnonzero(~found)
            first, inverse = _first_occurrences(ids[missing])
            at = missing[first]
            if words is None:
                text = codes.tobytes().decode("utf-32-le", "surrogatepass")
                strings = [text[s:e] for s, e in zip(starts[at].tolist(), ends[at].tolist())]
            else:
                strings = words(at)
            learned = token_hash_array(self.canonical(strings), self.seed)
            values[missing] = learned[inverse]
            self._add(ids[at], learned)
        return values

    def _find(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(values, found) for each id; values are 0 where not found (compiled kernel if
        available: one probe loop per id instead of NumPy rounds)."""
        if self.count and len(ids):
            compiled = kernels()
            if compiled is not None:
                return compiled.find(self.keys, self.values, self.shift, np.ascontiguousarray(ids, dtype=np.uint64))
        values = np.zeros(len(ids), dtype=np.int64)
        found = np.zeros(len(ids), dtype=bool)
        if self.count == 0 or len(ids) == 0:
            return values, found
        mask = len(self.keys) - 1
        pending = np.arange(len(ids))
        slots = (ids >> self.shift).astype(np.int64)
        while pending.size:
            seen = self.keys[slots]
            hit = seen == ids[pending]
            if hit.any():
                values[pending[hit]] = self.values[slots[hit]]
                found[pending[hit]] = True
            onward = ~hit & (seen != _EMPTY)
            pending, slots = pending[onward], (slots[onward] + 1) & mask
        return values, found

    def _add(self, ids: np.ndarray, values: np.ndarray) -> None:
        """Insert distinct ids that are not in the table."""
        if self.count + len(ids) > self.capacity:
            self._reset(INITIAL_SLOTS)
            ids, values = ids[:self.capacity], values[:self.capacity]
        slots = len(self.keys)
        if MAX_LOAD * (self.count + len(ids)) > slots:
            while MAX_LOAD * (self.count + len(ids)) > slots:
                slots *= 2
            old = self.keys != _EMPTY
            old_keys, old_values = self.keys[old], self.values[old]
            self._reset(slots)
            self._place(old_keys, old_values)
        self._place(ids, values)

    def _place(self, ids: np.ndarray, values: np.ndarray) -> None:
        compiled = kernels()
        if compiled is not None:
            compiled.insert(self.keys, self.values, self.shift, ids, values)
            self.count += len(ids)
            return
        mask = len(self.keys) - 1
        slots = (ids >> self.shift).astype(np.int64)
        while ids.size:
            free = self.keys[slots] == _EMPTY
            # among the ids aiming at the same free slot, the first one takes it
            _, first = np.unique(slots[free], return_index=True)
            taken = np.flatnonzero(free)[first]
            self.keys[slots[taken]] = ids[taken]
            self.values[slots[taken]] = values[taken]
            self.count += len(taken)
            rest = np.ones(len(ids), dtype=bool)
            rest[taken] = False
            ids, values, slots = ids[rest], values[rest], slots[rest]
            slots = np.where(self.keys[slots] != _EMPTY, (slots + 1) & mask, slots)


def _first_occurrences(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(first, inverse): index of one occurrence of each distinct id, and for each id the
    position of its value in ``first`` (so ``ids[first][inverse] == ids``)."""
    compiled = kernels()
    if compiled is not None:
        return compiled.first_occurrences(ids)
    _, first, inverse = np.unique(ids, return_index=True, return_inverse=True)
    return first, inverse
