"""The methods neardup is compared with, on the same canonical tokens and shingles.

Every method turns documents into what it stores (``build``) and then reports near-duplicate
pairs (``query``); both are timed. Reported pairs are sorted pair keys (see ``quality.pairs``).

* **supershingles / megashingles alone**: a pair is reported when the two documents share at
  least one value (any position), which is what a ``terms`` query on the keyword field does.
* **datasketch.MinHashLSH** (num_perm 84, its defaults: SHA-1 32-bit hashing of the shingle
  strings, affine permutations, bands chosen by ``_optimal_param`` for the threshold): the LSH
  candidates, and the candidates kept when datasketch's own Jaccard estimate is ≥ threshold.
* **simhash** (Charikar; Manku, Jain & Das Sarma 2007): 64-bit fingerprint, bit ``b`` set when
  more of the document's features have bit ``b`` set than not; features are the document's
  canonical shingle hashes (a set: weight 1 each), computed with NumPy here (not the ``simhash``
  package, which hashes its own character 4-grams). Pairs at Hamming distance ≤ 3 are found
  exactly with Manku's block trick: split 64 bits into 4 blocks of 16; two fingerprints within
  distance 3 agree on at least one whole block (pigeonhole), so candidates share a block value.
* **Fess** (codelibs ``minhash`` token filter as configured in Fess's ``fess.json``:
  ``seed 1, bit 2, size 64``): for hash function ``k = 0..63``, Guava ``murmur3_128(seed+k)``
  of each token's UTF-16 code units, first 8 bytes as a signed little-endian long, minimum
  over the document's tokens, the lowest 2 bits kept → a 128-bit value. Fess collapses results
  whose whole value (``content_minhash_bits``) is equal. Tokens are words, as in Fess (its
  analyzer: standard tokenizer, lowercase, English stop words and stemmer); here the same
  canonical tokens as every other method.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import mmh3
import numpy as np

from quality.pairs import pair_keys, pairs_sharing_a_value

U64 = np.uint64


@dataclass
class MethodRun:
    """What one method reported: pairs per threshold (or one set for all thresholds)."""

    name: str
    mode: str                                   # which exact truth it is scored against
    pairs: dict[float, np.ndarray] = field(default_factory=dict)
    fixed: np.ndarray | None = None             # threshold-free methods
    build_seconds: float = 0.0
    query_seconds: float = 0.0                  # per threshold (mean) or for the fixed set
    bytes_per_doc: float = 0.0
    note: str = ""

    def at(self, threshold: float) -> np.ndarray:
        return self.fixed if self.fixed is not None else self.pairs[threshold]


def timed(fn: Callable, *args, **kwargs):
    start = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - start


# ---------------------------------------------------------------- simhash

def simhash64(shingle_sets: Sequence[np.ndarray]) -> np.ndarray:
    """One 64-bit simhash per document from its (unweighted) 64-bit feature hashes."""
    lengths = np.array([len(s) for s in shingle_sets], dtype=np.int64)
    flat = np.concatenate([np.asarray(s, dtype=U64) for s in shingle_sets]) if len(lengths) else np.zeros(0, U64)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]) if len(lengths) else lengths
    nonempty = lengths > 0
    out = np.zeros(len(lengths), dtype=U64)
    for bit in range(64):
        ones = ((flat >> U64(bit)) & U64(1)).astype(np.int64)
        counts = np.zeros(len(lengths), dtype=np.int64)
        if len(flat):
            counts[nonempty] = np.add.reduceat(ones, starts[nonempty])
        set_bit = 2 * counts > lengths                   # more features with the bit than without
        out |= set_bit.astype(U64) << U64(bit)
    return out


def hamming_pairs(fingerprints: np.ndarray, max_distance: int = 3) -> np.ndarray:
    """Keys of all pairs of 64-bit values within ``max_distance`` bits (exact, block trick)."""
    fingerprints = np.asarray(fingerprints, dtype=U64)
    blocks = max_distance + 1
    width = 64 // blocks
    mask = U64((1 << width) - 1)
    columns = []
    for b in range(blocks):
        shift = U64(b * width)
        # tag each block value with its block number so blocks never match each other
        columns.append(((fingerprints >> shift) & mask) | (U64(b) << U64(60)))
    candidates = pairs_sharing_a_value(np.stack(columns, axis=1))
    n = len(fingerprints)
    i, j = candidates // n, candidates % n
    distance = np.bitwise_count(fingerprints[i] ^ fingerprints[j])
    return candidates[distance <= max_distance]


def run_simhash(shingle_sets: Sequence[np.ndarray]) -> MethodRun:
    prints, build = timed(simhash64, shingle_sets)
    pairs, query = timed(hamming_pairs, prints, 3)
    return MethodRun(name="simhash 64-bit, Hamming ≤ 3", mode="resemblance", fixed=pairs,
                     build_seconds=build, query_seconds=query, bytes_per_doc=8.0,
                     note="NumPy simhash over the canonical shingle hashes (unweighted)")


# ---------------------------------------------------------------- Fess b-bit minhash

FESS_SEED, FESS_BITS, FESS_SIZE = 1, 2, 64


def fess_token_minhashes(vocabulary: Sequence[str], seed: int = FESS_SEED,
                         size: int = FESS_SIZE) -> np.ndarray:
    """(len(vocabulary), size) int64: Guava murmur3_128(seed+k).hashUnencodedChars(word).asLong()."""
    table = np.empty((len(vocabulary), size), dtype=np.int64)
    for w, word in enumerate(vocabulary):
        data = word.encode("utf-16-le")
        table[w] = [mmh3.hash64(data, seed + k, True, True)[0] for k in range(size)]
    return table


def fess_signatures(token_ids: Sequence[np.ndarray], table: np.ndarray,
                    bits: int = FESS_BITS) -> np.ndarray:
    """(N, 2) uint64: the ``size × bits``-bit value of every document, packed low bit first."""
    size = table.shape[1]
    if size * bits > 128:
        raise ValueError("at most 128 bits")
    out = np.zeros((len(token_ids), 2), dtype=U64)
    lengths = np.array([len(t) for t in token_ids], dtype=np.int64)
    flat = np.concatenate([np.asarray(t, dtype=np.int64) for t in token_ids]) if len(token_ids) else np.zeros(0, np.int64)
    minima = np.full((len(token_ids), size), np.iinfo(np.int64).max, dtype=np.int64)
    nonempty = lengths > 0
    if len(flat):
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
        minima[nonempty] = np.minimum.reduceat(table[flat], starts[nonempty], axis=0)
    low = minima.view(U64) & U64((1 << bits) - 1)
    position = 0
    for k in range(size):
        for b in range(bits):
            bit = (low[:, k] >> U64(b)) & U64(1)
            out[:, position // 64] |= bit << U64(position % 64)
            position += 1
    return out


def run_fess(token_ids: Sequence[np.ndarray], vocabulary: Sequence[str]) -> MethodRun:
    def build():
        table = fess_token_minhashes(vocabulary)
        return fess_signatures(token_ids, table)

    sigs, build_s = timed(build)
    n = len(sigs)

    def query():
        # equal whole value: group by both words (a pair is reported only if both agree)
        _, group = np.unique(sigs, axis=0, return_inverse=True)
        return pairs_sharing_a_value(group.reshape(-1).astype(U64), n)

    pairs, query_s = timed(query)
    return MethodRun(name=f"Fess b-bit minhash ({FESS_SIZE}×{FESS_BITS} bits, equal)",
                     mode="resemblance", fixed=pairs, build_seconds=build_s, query_seconds=query_s,
                     bytes_per_doc=FESS_SIZE * FESS_BITS / 8,
                     note="seed 1, bit 2, size 64 as in fess.json; words as features")


# ---------------------------------------------------------------- bands of a fingerprint

def run_shared_values(name: str, values: np.ndarray, build_seconds: float, note: str = "") -> MethodRun:
    pairs, query_s = timed(pairs_sharing_a_value, values)
    return MethodRun(name=name, mode="resemblance", fixed=pairs, build_seconds=build_seconds,
                     query_seconds=query_s, bytes_per_doc=values.shape[1] * 8.0, note=note)


# ---------------------------------------------------------------- datasketch

def run_datasketch(shingle_strings: Sequence[Sequence[str]], thresholds: Sequence[float],
                   num_perm: int = 84) -> tuple[MethodRun, MethodRun]:
    """MinHashLSH candidates, and candidates verified by datasketch's Jaccard estimate."""
    from datasketch import MinHash, MinHashLSH

    encoded = [[s.encode("utf-8") for s in doc] for doc in shingle_strings]
    minhashes, build = timed(MinHash.bulk, encoded, num_perm=num_perm)
    values = np.stack([m.hashvalues for m in minhashes])
    n = len(minhashes)
    raw = MethodRun(name="datasketch MinHashLSH (candidates)", mode="resemblance",
                    build_seconds=build, bytes_per_doc=float(values[0].nbytes))
    verified = MethodRun(name="datasketch MinHashLSH + estimate ≥ t", mode="resemblance",
                         build_seconds=build, bytes_per_doc=float(values[0].nbytes))
    raw_total = verified_total = 0.0
    for t in thresholds:
        start = time.perf_counter()
        lsh = MinHashLSH(threshold=t, num_perm=num_perm)
        with lsh.insertion_session() as session:
            for d, m in enumerate(minhashes):
                session.insert(d, m, check_duplication=False)
        first, second = [], []
        for d, m in enumerate(minhashes):
            found = lsh.query(m)
            first.extend([d] * len(found))
            second.extend(found)
        keys = pair_keys(np.array(first, dtype=np.int64), np.array(second, dtype=np.int64), n)
        lap = time.perf_counter() - start
        raw.pairs[t] = keys
        raw_total += lap
        start = time.perf_counter()
        i, j = keys // n, keys % n
        estimate = (values[i] == values[j]).mean(axis=1) if len(keys) else np.zeros(0)
        verified.pairs[t] = keys[estimate >= t - 1e-12]
        verified_total += lap + time.perf_counter() - start
        bands = lsh.b * lsh.r
    raw.query_seconds = raw_total / len(thresholds)
    verified.query_seconds = verified_total / len(thresholds)
    # what the LSH index keeps besides the MinHash: one band key of r values per band
    raw.bytes_per_doc += bands * 8
    verified.bytes_per_doc += bands * 8
    raw.note = verified.note = "SHA-1 32-bit hashing of the shingle strings (datasketch defaults)"
    return raw, verified
