"""Compiled (numba) kernels for the hot loops of :mod:`neardup.fingerprint.hashing` and
:mod:`neardup.fingerprint.wordcache`. Imported only through
:func:`neardup.fingerprint.jit.kernels`.

Each kernel computes exactly the integers of its NumPy reference (named in its docstring):
all arithmetic is on ``uint64`` and wraps modulo 2^64, every constant is a ``np.uint64``
(numba, like NumPy, would turn a mix of signed and unsigned 64-bit operands into floats),
and comparisons are unsigned. ``tests/test_fingerprint_jit.py`` checks bit-equality with the
references on random and real inputs.

``cache=True``: the machine code is stored next to this file (or in numba's per-user cache
directory when that is not writable, or in ``NUMBA_CACHE_DIR``) and loaded by later processes
instead of recompiled. Where no cache location is writable at all (a read-only install run
by a user without a home directory), the kernels are compiled in memory by each process.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from numba import njit as _numba_njit

from neardup.fingerprint.constants import FMIX_C1, FMIX_C2, GOLDEN, MASK64, WORD_BASE


def njit(**options: Any) -> Callable[[Callable[..., Any]], Any]:
    """``numba.njit(cache=True, **options)``, or without the cache where numba finds no
    writable cache location (it raises RuntimeError when caching is switched on)."""
    def compile_(function: Callable[..., Any]) -> Any:
        try:
            return _numba_njit(**options)(function)
        except RuntimeError:
            return _numba_njit(**{**options, "cache": False})(function)
    return compile_

_C1 = np.uint64(FMIX_C1)
_C2 = np.uint64(FMIX_C2)
_GOLDEN = np.uint64(GOLDEN)
_BASE = np.uint64(WORD_BASE)
_S33 = np.uint64(33)
_ZERO = np.uint64(0)
_ONE = np.uint64(1)
_MAX = np.uint64(MASK64)
_SPACE = np.uint32(0x20)


@njit(cache=True, inline="always")
def _fmix64(x: np.uint64) -> np.uint64:
    x ^= x >> _S33
    x *= _C1
    x ^= x >> _S33
    x *= _C2
    x ^= x >> _S33
    return x


@njit(cache=True, nogil=True)
def minhash_segments(shingles, offsets, a, out):
    """``out[d, k] = min(out[d, k], min_x a_k x)`` over ``x ∈ shingles[offsets[d]:offsets[d+1]]``.

    Reference: :func:`~neardup.fingerprint.hashing.minhash` /
    :func:`~neardup.fingerprint.hashing.minhash_batch`.
    The K running minima of a document stay in L1; the loop over k is vectorised by LLVM.
    """
    permutations = a.shape[0]
    for d in range(offsets.shape[0] - 1):
        sig = out[d]
        for j in range(offsets[d], offsets[d + 1]):
            x = shingles[j]
            for k in range(permutations):
                v = a[k] * x
                if v < sig[k]:
                    sig[k] = v


@njit(cache=True, nogil=True)
def fold_minhash(token_hashes, offsets, size, initial, a, out):
    """Signatures straight from token hashes: for document d (tokens
    ``token_hashes[offsets[d]:offsets[d+1]]``) every window of ``w = min(size, n)`` tokens is
    folded into its shingle hash (``h = initial[w]``, then ``h = (h ⊕ t) · C1`` per token,
    ``fmix64``, 0 → 1) and ``out[d]`` is the minimum of ``a_k · h``; no tokens: all-max.

    Reference: :func:`~neardup.fingerprint.hashing.shingle_hashes_batch` followed by
    :func:`~neardup.fingerprint.hashing.minhash_batch` (``initial[w]`` is ``seed ⊕ w·φ``).
    """
    permutations = a.shape[0]
    for d in range(offsets.shape[0] - 1):
        low = offsets[d]
        count = offsets[d + 1] - low
        sig = out[d]
        for k in range(permutations):
            sig[k] = _MAX
        if count == 0:
            continue
        width = min(size, count)
        start = initial[width]
        for first in range(low, low + count - width + 1):
            h = start
            for i in range(first, first + width):
                h ^= token_hashes[i]
                h *= _C1
            h = _fmix64(h)
            if h == _ZERO:
                h = _ONE
            for k in range(permutations):
                v = a[k] * h
                if v < sig[k]:
                    sig[k] = v


@njit(cache=True, nogil=True)
def token_ids(codes):
    """(starts, ends, word ids) of the runs of non-space code points.

    Reference: :func:`neardup.fingerprint.canonical.token_spans` and
    :func:`neardup.fingerprint.hashing.word_ids`; the polynomial ``Σ c_q B^{e-1-q}`` is
    evaluated by Horner's rule instead of a prefix sum.
    """
    count = 0
    inside = False
    for q in range(codes.shape[0]):
        word = codes[q] != _SPACE
        if word and not inside:
            count += 1
        inside = word
    starts = np.empty(count, dtype=np.int64)
    ends = np.empty(count, dtype=np.int64)
    ids = np.empty(count, dtype=np.uint64)
    t = -1
    inside = False
    h = _ZERO
    for q in range(codes.shape[0]):
        c = codes[q]
        if c != _SPACE:
            if not inside:
                t += 1
                starts[t] = q
                h = _ZERO
                inside = True
            h = h * _BASE + np.uint64(c)
        elif inside:
            ends[t] = q
            inside = False
            ids[t] = h
    if inside:
        ends[t] = codes.shape[0]
        ids[t] = h
    for t in range(count):
        x = _fmix64(ids[t] ^ (np.uint64(ends[t] - starts[t]) * _GOLDEN))
        ids[t] = x if x != _ZERO else _ONE
    return starts, ends, ids


@njit(cache=True, nogil=True)
def find(keys, values, shift, ids):
    """(values, found) of ``ids`` in an open-addressing table with linear probing.

    Reference: :meth:`neardup.fingerprint.wordcache.WordHashCache._find`.
    """
    mask = keys.shape[0] - 1
    out = np.zeros(ids.shape[0], dtype=np.int64)
    found = np.zeros(ids.shape[0], dtype=np.bool_)
    for t in range(ids.shape[0]):
        key = ids[t]
        slot = np.int64(key >> shift)
        while True:
            seen = keys[slot]
            if seen == key:
                out[t] = values[slot]
                found[t] = True
                break
            if seen == _ZERO:
                break
            slot = (slot + 1) & mask
    return out, found


@njit(cache=True, nogil=True)
def first_occurrences(ids):
    """(first, inverse) of ``ids``: the index of the first occurrence of each distinct id, in
    order of first occurrence, and for each id the position of its value in ``first``.

    Reference: ``np.unique(ids, return_index=True, return_inverse=True)`` (which orders the
    distinct ids by value instead; both give ``ids[first][inverse] == ids``). A scratch
    open-addressing table of at least twice as many slots as ids, no sort.
    """
    slots, bits = 2, 1
    while slots < 2 * ids.shape[0]:
        slots *= 2
        bits += 1
    mask = slots - 1
    shift = np.uint64(64 - bits)
    table = np.full(slots, -1, dtype=np.int64)  # index into `first`
    first = np.empty(ids.shape[0], dtype=np.int64)
    inverse = np.empty(ids.shape[0], dtype=np.int64)
    distinct = 0
    for t in range(ids.shape[0]):
        key = ids[t]
        slot = np.int64(key >> shift) & mask
        while True:
            at = table[slot]
            if at < 0:
                table[slot] = distinct
                first[distinct] = t
                inverse[t] = distinct
                distinct += 1
                break
            if ids[first[at]] == key:
                inverse[t] = at
                break
            slot = (slot + 1) & mask
    return first[:distinct], inverse


@njit(cache=True, nogil=True)
def insert(keys, values, shift, ids, new_values):
    """Insert distinct ``ids`` (never 0, none in the table) with ``new_values`` by linear
    probing; the table must have a free slot for each. Reference:
    :meth:`neardup.fingerprint.wordcache.WordHashCache._place`."""
    mask = keys.shape[0] - 1
    for t in range(ids.shape[0]):
        slot = np.int64(ids[t] >> shift)
        while keys[slot] != _ZERO:
            slot = (slot + 1) & mask
        keys[slot] = ids[t]
        values[slot] = new_values[t]
