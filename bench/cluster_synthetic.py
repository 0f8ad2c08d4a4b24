"""Synthetic but realistic collections for the clustering benchmark (fixed seed).

Material: the paragraphs of the real articles (Reuters-21578 bodies and the Russian news),
as canonical token hashes (the fingerprinter's own canonicalisation). Nothing is sent to
Elasticsearch: signatures are computed directly from the edited token sequences with the
fingerprint package's batch hashing, exactly as the fingerprinter would from the same tokens.

A collection is a sequence of *stories*:

* the **original** of a story is 3–8 paragraphs drawn at random from the pool, each word
  then replaced with probability 0.2 by a random word of the pool, so that two originals
  sharing a paragraph are only loosely similar (as news quoting the same paragraph are);
* the story has no further copies with probability 0.6; otherwise 1 + Zipf(2.2) copies,
  capped at 300 (a heavy tail of widely syndicated stories);
* each **copy** is made from the original (70 %) or from an earlier copy (30 %, so chains
  form), by editing a share e of its words (deleted, inserted or replaced, in equal parts):
  light edits, e ~ U(0, 0.03), with probability 0.7 (corrections, re-sends), heavier ones,
  e ~ U(0.03, 0.12), otherwise; swapping two parts of the text (probability 0.15) and appending a random
  pool paragraph, like boilerplate (probability 0.15).

The story of each document is the generating truth (edits may take a copy below a given
resemblance threshold, so it is not the single-link truth at that threshold).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from neardup.fingerprint import Fingerprinter, FingerprintParams
from neardup.fingerprint.hashing import minhash_batch, multipliers, shingle_hashes_batch

PARAGRAPH = re.compile(r"\n\s*\n|\n(?=\s{2,})")
MIN_WORDS = 8
CHUNK_DOCS = 20_000


def paragraphs(texts: Sequence[str]) -> list[str]:
    return [p for text in texts for p in PARAGRAPH.split(text) if len(p.split()) >= MIN_WORDS]


def paragraph_pool(params: FingerprintParams, cache: Path | None = None,
                   log: Callable[[str], None] = print) -> list[np.ndarray]:
    """Token hashes of every paragraph of Reuters bodies and Russian news bodies (cached)."""
    from neardup.corpora import reuters_documents, ru_news_documents
    from neardup.fingerprint import scheme_version

    cached = cache / f"pool-{scheme_version(params)}.npz" if cache else None
    if cached is not None and cached.is_file():
        data = np.load(cached)
        return np.split(data["tokens"], data["offsets"][1:-1])
    started = time.perf_counter()
    fp = Fingerprinter(params)
    texts = [d["body"] for d in reuters_documents() if d["body"]]
    texts += [d["body"] for d in ru_news_documents() if d["body"]]
    pool = [fp.token_hashes(fp.canonical_tokens(p)) for p in paragraphs(texts)]
    pool = [p for p in pool if len(p) >= params.shingle_size]
    log(f"paragraph pool: {len(pool):,} paragraphs from {len(texts):,} articles "
        f"in {time.perf_counter() - started:.0f}s")
    if cached is not None:
        cached.parent.mkdir(parents=True, exist_ok=True)
        offsets = np.concatenate(([0], np.cumsum([len(p) for p in pool])))
        np.savez(cached, tokens=np.concatenate(pool), offsets=offsets)
    return pool


@dataclass
class Collection:
    signatures: np.ndarray   # (N, K) uint64
    counts: np.ndarray       # (N,) distinct shingles
    story: np.ndarray        # (N,) generating story of each document
    seconds: float


def _edit(tokens: np.ndarray, vocabulary: np.ndarray, pool: Sequence[np.ndarray],
          rng: np.random.Generator) -> np.ndarray:
    n = len(tokens)
    rate = rng.uniform(0.0, 0.03) if rng.random() < 0.7 else rng.uniform(0.03, 0.12)
    edits = rng.binomial(n, rate)
    out = tokens.copy()
    if edits:
        kinds = rng.integers(0, 3, edits)
        where = rng.integers(0, n, edits)
        replace = where[kinds == 0]
        out[replace] = vocabulary[rng.integers(0, len(vocabulary), len(replace))]
        keep = np.ones(n, dtype=bool)
        keep[where[kinds == 1]] = False
        inserts = np.sort(where[kinds == 2])
        out = np.insert(out, inserts, vocabulary[rng.integers(0, len(vocabulary), len(inserts))])
        keep = np.insert(keep, inserts, True)
        out = out[keep]
    if rng.random() < 0.15 and len(out) > 10:
        a, b = np.sort(rng.integers(1, len(out), 2))
        out = np.concatenate((out[b:], out[a:b], out[:a]))
    if rng.random() < 0.15:
        out = np.concatenate((out, pool[rng.integers(0, len(pool))]))
    return out


def stories(pool: Sequence[np.ndarray], documents: int, seed: int) -> Iterator[tuple[int, np.ndarray]]:
    """(story, token hashes) of ``documents`` documents, in story order."""
    rng = np.random.default_rng(seed)
    vocabulary = np.concatenate(pool[: min(len(pool), 20_000)])
    made = 0
    story = 0
    while made < documents:
        parts = rng.integers(0, len(pool), rng.integers(3, 9))
        original = np.concatenate([pool[p] for p in parts])
        swap = rng.random(len(original)) < 0.2
        original[swap] = vocabulary[rng.integers(0, len(vocabulary), int(swap.sum()))]
        copies = 0 if rng.random() < 0.6 else min(1 + int(rng.zipf(2.2)), 300)
        members = [original]
        yield story, original
        made += 1
        for _ in range(copies):
            if made >= documents:
                break
            parent = members[0] if rng.random() < 0.7 or len(members) == 1 else members[rng.integers(1, len(members))]
            copy = _edit(parent, vocabulary, pool, rng)
            members.append(copy)
            yield story, copy
            made += 1
        story += 1


def signatures_of(token_lists: Sequence[np.ndarray], params: FingerprintParams) -> tuple[np.ndarray, np.ndarray]:
    """(N, K) signatures and distinct shingle counts, as the fingerprinter computes them."""
    lengths = np.array([len(t) for t in token_lists], dtype=np.int64)
    offsets = np.concatenate(([0], np.cumsum(lengths)))
    tokens = np.concatenate(token_lists) if len(token_lists) else np.empty(0, np.uint64)
    shingles, owner = shingle_hashes_batch(tokens, offsets, params.shingle_size, params.seed)
    order = np.argsort(shingles, kind="stable")  # equal hashes keep their document order
    values, owners = shingles[order], owner[order]
    repeats = owners[1:][(values[1:] == values[:-1]) & (owners[1:] == owners[:-1])]
    counts = np.bincount(owner, minlength=len(lengths)) - np.bincount(repeats, minlength=len(lengths))
    return minhash_batch(shingles, owner, len(lengths), multipliers(params.seed, params.num_perm)), counts


def collection(pool: Sequence[np.ndarray], documents: int, params: FingerprintParams, seed: int,
               log: Callable[[str], None] = print) -> Collection:
    started = time.perf_counter()
    signatures = np.empty((documents, params.num_perm), dtype=np.uint64)
    counts = np.empty(documents, dtype=np.int64)
    story = np.empty(documents, dtype=np.int64)
    batch: list[np.ndarray] = []
    done = 0
    for position, (s, tokens) in enumerate(stories(pool, documents, seed)):
        story[position] = s
        batch.append(tokens)
        if len(batch) == CHUNK_DOCS or position == documents - 1:
            sig, cnt = signatures_of(batch, params)
            signatures[done:done + len(batch)] = sig
            counts[done:done + len(batch)] = cnt
            done += len(batch)
            batch = []
            if done % 200_000 == 0:
                log(f"  {done:,} documents generated ({time.perf_counter() - started:.0f}s)")
    return Collection(signatures, counts, story, time.perf_counter() - started)
