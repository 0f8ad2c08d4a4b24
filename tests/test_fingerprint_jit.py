"""The compiled kernels (fingerprint/_kernels.py, numba) compute exactly the integers of their
NumPy references, so fingerprints never depend on whether numba is present."""

from __future__ import annotations

import itertools
import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import TypeVar

import numpy as np
import pytest

from neardup.corpora import reuters_documents, ru_news_documents
from neardup.fingerprint import Fingerprinter, FingerprintParams, jit
from neardup.fingerprint.canonical import canonical_codes, token_spans
from neardup.fingerprint.hashing import (
    BATCH_BLOCK,
    minhash,
    minhash_batch,
    multipliers,
    shingle_hashes_batch,
    signatures_from_token_hashes,
    spans_and_ids,
    word_ids,
)
from neardup.fingerprint.wordcache import WordHashCache, _first_occurrences

T = TypeVar("T")
EXTREMES = np.array([0, 1, 2, 2**63 - 1, 2**63, 2**64 - 2, 2**64 - 1], dtype=np.uint64)


@pytest.fixture(autouse=True)
def kernels_on() -> Iterator[None]:
    previous = jit.set_enabled(True)
    assert jit.kernels() is not None, "numba is a dependency: the kernels must load"
    yield
    jit.set_enabled(previous)


def both(function: Callable[[], T]) -> tuple[T, T]:
    """(compiled result, NumPy result) of the same call."""
    compiled = function()
    jit.set_enabled(False)
    try:
        reference = function()
    finally:
        jit.set_enabled(True)
    return compiled, reference


def random_u64(rng: np.random.Generator, n: int) -> np.ndarray:
    values = rng.integers(0, 2**64 - 1, n, dtype=np.uint64, endpoint=True)
    values[rng.integers(0, n, min(n, 5))] = rng.choice(EXTREMES, min(n, 5)) if n else values[:0]
    return values


@pytest.mark.parametrize("count", [1, 2, 7, 180, BATCH_BLOCK + 3, 20_000])
def test_minhash_kernel_equals_numpy(count: int) -> None:
    rng = np.random.default_rng(count)
    shingles = np.concatenate((random_u64(rng, count), EXTREMES))
    for a in (multipliers(1, 84), multipliers(7, 12), random_u64(rng, 84) | np.uint64(1)):
        compiled, reference = both(lambda: minhash(shingles, a))
        assert compiled.dtype == np.uint64 and np.array_equal(compiled, reference)
        assert np.array_equal(reference, np.min(shingles[:, None] * a[None, :], axis=0))


def test_minhash_batch_kernel_equals_numpy() -> None:
    rng = np.random.default_rng(5)
    lengths = rng.choice([0, 1, 2, 50, 300, 3 * BATCH_BLOCK], 200, p=[0.1, 0.1, 0.1, 0.4, 0.28, 0.02])
    owner = np.repeat(np.arange(len(lengths)), lengths)
    shingles = random_u64(rng, len(owner))
    a = multipliers(3, 84)
    compiled, reference = both(lambda: minhash_batch(shingles, owner, len(lengths), a))
    assert np.array_equal(compiled, reference)
    one_by_one = [minhash(shingles[owner == d], a) for d in range(len(lengths))]
    assert np.array_equal(reference, np.stack(one_by_one))


@pytest.mark.parametrize("size", [1, 2, 3, 5])
def test_fused_fold_and_minhash_equal_numpy(size: int) -> None:
    rng = np.random.default_rng(size)
    lengths = rng.choice([0, 1, size - 1 or 1, size, size + 1, 40, 700], 300)
    offsets = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
    token_hashes = random_u64(rng, int(offsets[-1]))
    for seed in (0, 1, 2**32 - 1):
        a = multipliers(seed, 84)
        compiled, reference = both(lambda: signatures_from_token_hashes(token_hashes, offsets, size, seed, a))
        assert np.array_equal(compiled, reference)
        shingles, owner = shingle_hashes_batch(token_hashes, offsets, size, seed)
        jit.set_enabled(False)
        assert np.array_equal(reference, minhash_batch(shingles, owner, len(lengths), a))


def test_token_ids_kernel_equals_numpy() -> None:
    rng = np.random.default_rng(11)
    alphabet = np.array([0x20, 0x20, 0x20, 0x61, 0x7A, 0x30, 0x430, 0x44F, 0xE9, 0x1D400, 0xD800, 0x10FFFF],
                        dtype=np.uint32)
    cases = [np.empty(0, np.uint32), np.array([0x20] * 5, np.uint32), np.array([0x61], np.uint32)]
    cases += [rng.choice(alphabet, n) for n in (1, 2, 3, 10, 1000, 100_000)]
    text = "\n".join(d["title"] + " " + d["body"] for d in itertools.islice(ru_news_documents(), 30))
    cases.append(canonical_codes(text))
    for codes in cases:
        (starts, ends, ids), (ref_starts, ref_ends, ref_ids) = both(lambda: spans_and_ids(codes))
        assert np.array_equal(starts, ref_starts) and np.array_equal(ends, ref_ends)
        assert ids.dtype == np.uint64 and np.array_equal(ids, ref_ids)
        spans = token_spans(codes)
        assert np.array_equal(ref_ids, word_ids(codes, *spans)) if len(spans[0]) else len(ref_ids) == 0


def test_first_occurrences_kernel_matches_unique() -> None:
    rng = np.random.default_rng(2)
    for ids in (np.empty(0, np.uint64), np.array([5], np.uint64), random_u64(rng, 1000),
                rng.choice(random_u64(rng, 300), 5000), np.full(100, 2**64 - 1, np.uint64)):
        (first, inverse), (ref_first, ref_inverse) = both(lambda: _first_occurrences(ids))
        assert np.array_equal(ids[first][inverse], ids)
        assert len(first) == len(ref_first) == len(np.unique(ids))
        assert np.array_equal(np.sort(ids[first]), ids[ref_first])
        assert all(first[k] == np.flatnonzero(ids == ids[first[k]])[0] for k in range(0, len(first), 37))


def test_word_cache_kernels_give_the_same_hashes() -> None:
    """The cache (find, insert) with kernels == without, while growing and after a reset."""
    text = "\n".join(d["body"] for d in itertools.islice(reuters_documents(), 300))
    codes = canonical_codes(text)
    starts, ends = token_spans(codes)
    ids = word_ids(codes, starts, ends)
    pieces = np.array_split(np.arange(len(starts)), 7)

    def run() -> list[np.ndarray]:
        cache = WordHashCache(list, seed=3, capacity=2_000)  # small: resets on the way
        return [cache.token_hashes(codes, starts[p], ends[p], ids[p]) for p in pieces * 2]

    compiled, reference = both(run)
    assert all(np.array_equal(c, r) for c, r in zip(compiled, reference))


def test_fingerprints_do_not_depend_on_the_kernels() -> None:
    texts = [d["title"] + "\n" + d["body"] for d in itertools.islice(reuters_documents(), 150)]
    texts += [d["title"] + "\n" + d["body"] for d in itertools.islice(ru_news_documents(), 50)]
    texts += ["", "one", "и в на", "x " * 3000]
    for params in (FingerprintParams(), FingerprintParams(shingle_size=5, num_perm=12, groups=3, rows=4, seed=9)):
        def run() -> tuple[list, list, np.ndarray]:
            fp = Fingerprinter(params)
            tokens = [fp.canonical_tokens(t) for t in texts]
            return [fp.fingerprint(t) for t in texts], fp.fingerprint_many(texts), fp.signatures(tokens)

        (one, many, sigs), (ref_one, ref_many, ref_sigs) = both(run)
        assert one == ref_one and many == ref_many and np.array_equal(sigs, ref_sigs)


def test_proxy_side_imports_do_not_load_numba() -> None:
    """Reading signatures and comparing them (what the proxy does) never imports numba."""
    code = ("import sys, numpy as np\n"
            "import fingerprint, proxy.grouping.fingerprints\n"
            "from fingerprint import similar_pairs\n"
            "similar_pairs(np.zeros((3, 84), np.uint64), np.ones(3, int), 0.5)\n"
            "assert 'numba' not in sys.modules, 'numba imported'\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
