"""64-bit hashing: tokens, shingles, the MinHash permutation family, supershingles.

All arithmetic is on unsigned 64-bit integers and wraps modulo 2^64 (NumPy ``uint64``
arrays wrap silently; Python ints are masked with :data:`MASK64`), so results are the same
on every platform.

**Word id.** The fast path never builds a Python string per token: it identifies each token
``c_s … c_{e-1}`` (code points) by a polynomial hash over Z/2^64 with a fixed odd base B,
finalised with its length::

    P(c) = Σ_{q=s}^{e-1} c_q · B^{e-1-q}  (mod 2^64)      id = max(1, fmix64(P ⊕ (e - s) · φ))

computed for all tokens at once from one prefix sum: with ``S_p = Σ_{q<p} c_q B^{-q}``
(B^{-1} exists mod 2^64 because B is odd), ``P = B^{e-1} (S_e - S_s)``. The id is only a cache
key for "the canonical form of this word" (looked up, never stored in fingerprints); two
distinct words of a corpus share an id with probability about (distinct words)² / 2^65
(≈ 10^-9 for a million distinct words), in which case the later one would reuse the
earlier one's canonical form.

**Token hash.** ``t(w) = mmh3.hash64(utf8(w), seed)[0]``: MurmurHash3 x64-128, low 64 bits,
seeded with ``params.seed``. Computed once per distinct canonical word (cached upstream).

**Shingle hash.** A shingle of tokens ``w_1 … w_m`` (``m = n``, or fewer for a document shorter
than ``n`` tokens) hashes to::

    h_0 = seed ⊕ (m · φ)                 φ = 0x9E3779B97F4A7C15 (golden ratio)
    h_i = (h_{i-1} ⊕ t(w_i)) · C         i = 1 … m,  C = 0xFF51AFD7ED558CCD (odd)
    shingle = fmix64(h_m)    (0 becomes 1, see below)

where ``fmix64`` is the MurmurHash3 64-bit finaliser (the last step of mmh3 itself), a
bijection of 2^64 with full avalanche. Each step is a bijection of h_{i-1} and of t(w_i)
(xor, then multiplication by an odd constant), so two sequences that differ in one token
never collide, and otherwise collide with probability ≈ 2^-64 for random token hashes; the
multiplication between the xors makes the hash order-sensitive ("a b" ≠ "b a"), and the
length in ``h_0`` separates a short document's single shingle from ordinary n-shingles.
The chain is vectorised over all windows at once: 2m + 6 NumPy passes instead of one mmh3
call per shingle.

**Permutations.** MinHash needs K random permutations π_k of the shingle-hash space; we use
the multiplicative bijections of Z/2^64::

    π_k(x) = a_k · x  (mod 2^64),   a_k odd

Each π_k is a bijection (an odd number is invertible mod 2^64), so for shingle hashes that
behave as independent uniform 64-bit values, ``min_{x∈A} π_k(x)`` picks each element of A
with equal probability: ``P[min π_k(A) = min π_k(B)] = |A∩B| / |A∪B| = J(A, B)`` (up to the
≈2^-64 chance of a hash collision). 0 is the one value every π_k fixes, so the shingle hash
0 is replaced by 1. The a_k are drawn from SplitMix64 seeded with ``params.seed`` (a fixed,
published generator implemented here in pure Python, so the permutations can never change
with a NumPy release). Slots are independent in practice: the values of two slots are
related by multiplication by a random odd number, which scrambles all 64 bits; the tests
check that the spread of the estimate and the observed slot, supershingle and megashingle
match rates follow the independent-slot formulas, also for documents of a few shingles.
(An affine family ``a_k x + b_k`` would cost one more pass over the K × |A| matrix.)

**Supershingle.** Group g (0-based) of R consecutive minhashes ``s_{gR} … s_{gR+R-1}``::

    super_g = mmh3.hash64(le64(s_{gR}) ‖ … ‖ le64(s_{gR+R-1}), seed = SUPER_SEED + g)[0]

(seedless with respect to ``params.seed``, so a stored fingerprint can be checked for internal
consistency without knowing its parameters; the group index in the seed keeps equal values in
different groups apart.) **Megashingle** for supershingles i < j, in the order
(0,1), (0,2), …, (0,G-1), (1,2), …, (G-2,G-1)::

    mega_ij = mmh3.hash64(le64(super_i) ‖ le64(super_j), seed = MEGA_SEED)[0]
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from functools import lru_cache

import mmh3
import numpy as np

from neardup.fingerprint.canonical import token_spans
from neardup.fingerprint.constants import FMIX_C1, FMIX_C2, GOLDEN, MASK64, WORD_BASE
from neardup.fingerprint.jit import kernels

SUPER_SEED = 0x5C0FFEE0
MEGA_SEED = 0x3E6A5EED
#: Used where a token was dropped, before filtering; a real token hash equal to it is
#: moved to ``DROPPED + 1`` (so the sentinel never needs to be disambiguated).
DROPPED = -(1 << 63)

_C1 = np.uint64(FMIX_C1)
_C2 = np.uint64(FMIX_C2)
U64_MAX = np.uint64(MASK64)


def fmix64_int(x: int) -> int:
    """MurmurHash3's 64-bit finaliser on a Python int (reference for :func:`fmix64`)."""
    x &= MASK64
    x ^= x >> 33
    x = (x * FMIX_C1) & MASK64
    x ^= x >> 33
    x = (x * FMIX_C2) & MASK64
    x ^= x >> 33
    return x


def fmix64(x: np.ndarray) -> np.ndarray:
    """MurmurHash3's 64-bit finaliser, in place on a ``uint64`` array; returns it."""
    x ^= x >> np.uint64(33)
    x *= _C1
    x ^= x >> np.uint64(33)
    x *= _C2
    x ^= x >> np.uint64(33)
    return x


def splitmix64(seed: int, count: int) -> list[int]:
    """``count`` outputs of SplitMix64 (Steele, Lea, Flood 2014) started from ``seed``."""
    out = []
    state = seed & MASK64
    for _ in range(count):
        state = (state + GOLDEN) & MASK64
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
        out.append(z ^ (z >> 31))
    return out


@lru_cache(maxsize=64)
def multipliers(seed: int, num_perm: int) -> np.ndarray:
    """The odd multipliers a_1 … a_K of the K permutations for ``seed``. Read-only."""
    a = np.array([v | 1 for v in splitmix64(seed ^ 0x6A09E667F3BCC909, num_perm)], dtype=np.uint64)
    a.setflags(write=False)
    return a


_WORD_BASE_INV = pow(WORD_BASE, -1, 1 << 64)
_powers: dict[str, np.ndarray] = {}


def _power_table(base: int, length: int, name: str) -> np.ndarray:
    """base^0 … base^(length-1) mod 2^64, cached and grown by doubling."""
    table = _powers.get(name)
    if table is None or len(table) < length:
        size = max(1 << 16, 1 << (length - 1).bit_length())
        table = np.empty(size, dtype=np.uint64)
        table[0] = 1
        table[1:] = base
        np.multiply.accumulate(table, out=table)
        table.setflags(write=False)
        _powers[name] = table
    return table


def word_ids(codes: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Word ids (see the module docstring) of the tokens ``codes[s:e]``, as ``uint64``."""
    n = len(codes)
    inverse = _power_table(_WORD_BASE_INV, n, "inv")[:n]
    prefix = np.empty(n + 1, dtype=np.uint64)
    prefix[0] = 0
    np.multiply(codes, inverse, out=prefix[1:], dtype=np.uint64, casting="unsafe")
    np.cumsum(prefix, out=prefix)
    ids = prefix[ends] - prefix[starts]
    ids *= _power_table(WORD_BASE, n, "pow")[ends - 1]
    ids ^= (ends - starts).astype(np.uint64) * np.uint64(GOLDEN)
    return np.maximum(fmix64(ids), np.uint64(1), out=ids)  # 0 marks an empty cache slot


def token_hash(token: str, seed: int) -> int:
    """Signed 64-bit mmh3 hash of a canonical token (never equal to :data:`DROPPED`)."""
    value = mmh3.hash64(token.encode("utf-8", "surrogatepass"), seed)[0]
    return DROPPED + 1 if value == DROPPED else value


def token_hash_array(tokens: Sequence[str | None], seed: int) -> np.ndarray:
    """``int64`` array of :func:`token_hash` of each token, :data:`DROPPED` for ``None``."""
    hash64 = mmh3.hash64
    # token_hash inlined: a function call per word would cost as much as the hash itself
    return np.array([DROPPED if t is None else
                     h if (h := hash64(t.encode("utf-8", "surrogatepass"), seed)[0]) != DROPPED else DROPPED + 1
                     for t in tokens], dtype=np.int64)


def shingle_hashes(token_hashes: np.ndarray, size: int, seed: int) -> np.ndarray:
    """Hashes of all windows of ``size`` consecutive tokens (not deduplicated, in order).

    ``token_hashes``: ``uint64`` array of the document's token hashes. Fewer than ``size``
    tokens but at least one: one shingle of all of them. None: an empty array.
    """
    count = len(token_hashes)
    if count == 0:
        return np.empty(0, dtype=np.uint64)
    width = min(size, count)
    return _fold(token_hashes, width, count - width + 1, seed)


def _fold(token_hashes: np.ndarray, width: int, windows: int, seed: int) -> np.ndarray:
    """The shingle hash of the ``width`` tokens starting at each of positions 0 … windows-1."""
    h = np.full(windows, (seed ^ (width * GOLDEN)) & MASK64, dtype=np.uint64)
    for i in range(width):
        h ^= token_hashes[i:i + windows]
        h *= _C1
    return np.maximum(fmix64(h), np.uint64(1), out=h)  # 0 is fixed by every permutation


def shingle_hashes_batch(token_hashes: np.ndarray, offsets: np.ndarray, size: int,
                         seed: int) -> tuple[np.ndarray, np.ndarray]:
    """:func:`shingle_hashes` of many documents at once.

    ``token_hashes`` holds the documents' token hashes one after another; document d is
    ``token_hashes[offsets[d]:offsets[d + 1]]``. Returns the shingle hashes in document order
    and the document of each. Windows are folded over the whole array and those crossing a
    document boundary dropped; documents shorter than ``size`` get their one shingle apart.
    """
    lengths = np.diff(offsets)
    docs = np.repeat(np.arange(len(lengths)), lengths)
    parts, owners = [], []
    if len(token_hashes) >= size:
        windows = len(token_hashes) - size + 1
        folded = _fold(token_hashes, size, windows, seed)
        keep = np.flatnonzero(np.arange(windows) + size <= offsets[docs[:windows] + 1])
        parts.append(folded[keep])
        owners.append(docs[keep])
    for doc in np.flatnonzero((lengths > 0) & (lengths < size)).tolist():
        parts.append(shingle_hashes(token_hashes[offsets[doc]:offsets[doc + 1]], size, seed))
        owners.append(np.full(1, doc))
    if not parts:
        return np.empty(0, dtype=np.uint64), np.empty(0, dtype=np.int64)
    hashes, owner = np.concatenate(parts), np.concatenate(owners).astype(np.int64)
    order = np.argsort(owner, kind="stable")
    return hashes[order], owner[order]


#: Shingles processed per MinHash block (NumPy path): (block × K) uint64 stays in L2 cache.
BLOCK = 512
#: Shingles per (K × block) matrix in :func:`minhash_batch` (NumPy path), a size chosen by the
#: fingerprint benchmark (docs/benchmarks.md).
BATCH_BLOCK = 4096


def minhash(shingles: np.ndarray, a: np.ndarray) -> np.ndarray:
    """``sig[k] = min_x a_k x mod 2^64`` over the shingle hashes (all-max if none).

    Compiled kernel if available (:mod:`neardup.fingerprint.jit`); NumPy: vectorised over a
    (block × K) matrix per block of :data:`BLOCK` shingles, so memory stays bounded.
    """
    sig = np.full(len(a), U64_MAX, dtype=np.uint64)
    if len(shingles) == 0:
        return sig
    compiled = kernels()
    if compiled is not None:
        offsets = np.array([0, len(shingles)], dtype=np.int64)
        compiled.minhash_segments(np.ascontiguousarray(shingles, dtype=np.uint64), offsets, a, sig[None, :])
        return sig
    buffer = np.empty((min(BLOCK, len(shingles)), len(a)), dtype=np.uint64)
    for start in range(0, len(shingles), BLOCK):
        block = shingles[start:start + BLOCK]
        work = buffer[:len(block)]
        np.multiply(block[:, None], a, out=work)
        np.minimum(sig, work.min(axis=0), out=sig)
    return sig


def minhash_batch(shingles: np.ndarray, owner: np.ndarray, documents: int, a: np.ndarray) -> np.ndarray:
    """(documents × K) signatures of many documents at once.

    ``shingles`` grouped by document (``owner`` non-decreasing); documents without shingles
    get the all-max signature. Compiled kernel if available. NumPy: consecutive documents
    are taken together until a block holds about :data:`BATCH_BLOCK` shingles; the
    transposed (K × block) matrix ``a_k · x`` (row k is one contiguous SIMD multiply by a
    scalar) is reduced per document with ``np.minimum.reduceat`` along the rows, which is
    faster than the (block × K) broadcast of :func:`minhash`.
    """
    out = np.full((documents, len(a)), U64_MAX, dtype=np.uint64)
    if len(shingles) == 0:
        return out
    compiled = kernels()
    if compiled is not None:
        offsets = np.zeros(documents + 1, dtype=np.int64)
        np.cumsum(np.bincount(owner, minlength=documents), out=offsets[1:])
        compiled.minhash_segments(np.ascontiguousarray(shingles, dtype=np.uint64), offsets, a, out)
        return out
    starts = np.flatnonzero(np.concatenate(([True], owner[1:] != owner[:-1])))
    ends = np.append(starts[1:], len(shingles))
    buffer = np.empty((len(a), BATCH_BLOCK), dtype=np.uint64)
    first = 0
    while first < len(starts):
        # documents first … last-1 end within BATCH_BLOCK shingles of document `first`'s start
        low = int(starts[first])
        last = max(first + 1, int(np.searchsorted(ends, low + BATCH_BLOCK, side="right")))
        high = int(ends[last - 1])
        if high - low > buffer.shape[1]:  # one large document: in blocks
            row = out[int(owner[low])]
            for start in range(low, high, BATCH_BLOCK):
                stop = min(high, start + BATCH_BLOCK)
                work = buffer[:, :stop - start]
                np.multiply(a[:, None], shingles[None, start:stop], out=work)
                np.minimum(row, work.min(axis=1), out=row)
        else:
            work = buffer[:, :high - low]
            np.multiply(a[:, None], shingles[None, low:high], out=work)
            out[owner[starts[first:last]]] = np.minimum.reduceat(work, starts[first:last] - low, axis=1).T
        first = last
    return out


def signatures_from_token_hashes(token_hashes: np.ndarray, offsets: np.ndarray, size: int, seed: int,
                                 a: np.ndarray) -> np.ndarray:
    """(documents × K) signatures of documents given by their concatenated token hashes
    (document d is ``token_hashes[offsets[d]:offsets[d + 1]]``).

    Equal to :func:`shingle_hashes_batch` then :func:`minhash_batch` (the NumPy path); the
    compiled kernel folds each window and takes the minima in one pass, without the shingle
    array.
    """
    documents = len(offsets) - 1
    compiled = kernels()
    if compiled is None:
        shingles, owner = shingle_hashes_batch(token_hashes, offsets, size, seed)
        return minhash_batch(shingles, owner, documents, a)
    initial = np.array([(seed ^ (width * GOLDEN)) & MASK64 for width in range(size + 1)], dtype=np.uint64)
    out = np.empty((documents, len(a)), dtype=np.uint64)
    compiled.fold_minhash(np.ascontiguousarray(token_hashes, dtype=np.uint64), np.asarray(offsets, dtype=np.int64),
                          size, initial, a, out)
    return out


def spans_and_ids(codes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(starts, ends, word ids) of the tokens of canonical code points: the spans of
    :func:`neardup.fingerprint.canonical.token_spans` and their :func:`word_ids`, in one compiled
    pass if available."""
    compiled = kernels()
    if compiled is not None:
        return compiled.token_ids(np.ascontiguousarray(codes, dtype=np.uint32))
    starts, ends = token_spans(codes)
    return starts, ends, word_ids(codes, starts, ends)


def supershingles(signature: np.ndarray, groups: int) -> np.ndarray:
    """One mmh3 hash per group of ``len(signature) // groups`` consecutive minhashes."""
    rows = len(signature) // groups
    raw = signature.astype("<u8", copy=False).tobytes()
    step = rows * 8
    return np.array(
        [mmh3.mmh3_x64_128_utupledigest(raw[g * step:(g + 1) * step], SUPER_SEED + g)[0] for g in range(groups)],
        dtype=np.uint64)


@lru_cache(maxsize=16)
def mega_pairs(groups: int) -> tuple[tuple[int, int], ...]:
    """The (i, j), i < j, supershingle index pairs in megashingle order."""
    return tuple(itertools.combinations(range(groups), 2))


def megashingles(supers: np.ndarray) -> np.ndarray:
    """One mmh3 hash per pair of supershingles, in :func:`mega_pairs` order."""
    raw = [int(v).to_bytes(8, "little") for v in supers]
    return np.array(
        [mmh3.mmh3_x64_128_utupledigest(raw[i] + raw[j], MEGA_SEED)[0] for i, j in mega_pairs(len(supers))],
        dtype=np.uint64)
