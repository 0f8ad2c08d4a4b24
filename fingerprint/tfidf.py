"""TF-IDF cosine over canonical lemmas: corpus statistics, compact vectors, all similar pairs.

Shingles break when a rewriter reorders words or swaps synonyms; a bag of weighted lemmas
does not. This module is pure (no I/O) and deterministic.

**Terms.** A document's terms are its canonical tokens
(:meth:`~neardup.fingerprint.Fingerprinter.canonical_tokens`: HTML stripped, NFKC, casefolded,
``ё`` → ``е``, stop-words dropped, Russian words lemmatised, English words stemmed), optionally
mapped by a :class:`~neardup.fingerprint.synonyms.SynonymMap` so that every member of a synonym
group becomes one term. A term is identified by its 64-bit token hash
(``mmh3.hash64(utf8(term), seed)[0]``, the same hash the shingles are built from;
:func:`~neardup.fingerprint.hashing.token_hash`), so statistics and vectors never hold strings.

**Corpus statistics** (:class:`~neardup.fingerprint.corpus_stats.CorpusStats`): the number of
documents N and, for every term hash t, its document frequency df(t) = the number of documents
containing t. Adding or removing documents only adds or subtracts their distinct terms, so
statistics built batch by batch (or merged from parts of the corpus) are exactly the statistics
of the whole corpus.

**Weights.** For a term t occurring tf(t) times in a document::

    w(t) = (1 + ln tf(t)) · idf(t)          (sublinear tf; tf(t) itself if ``sublinear_tf`` is off)
    idf(t) = ln((1 + N) / (1 + df(t))) + 1  (smoothed: finite for a term the statistics never saw,
                                             and ≥ 1, so no term weighs zero)

The vector keeps the ``top_k`` terms of largest weight (ties: smaller term hash first), is
L2-normalised over them, and every weight is rounded to 16 bits, q = round(65535 · w / ‖w‖), the
form it is stored in (:meth:`TfidfVector.to_source`); so a vector read back from Elasticsearch
is bit-identical to the one computed in memory. Rounding moves each normalised weight by at most
0.5/65535, so a cosine by at most about k/65535 (0.001 for k = 64).

**Cosine.** ``cos(a, b) = Σ_t a_t b_t / (‖a‖ ‖b‖)`` over the common terms, with the norms of the
quantised weights (so cos(a, a) = 1 exactly up to rounding). It is symmetric, in [0, 1] (weights
are non-negative) and, depending only on term counts, unchanged by any reordering of words or
sentences. Truncation to the top k terms makes it an approximation of the full-vector cosine; the
default k was chosen by the TF-IDF benchmark (docs/benchmarks.md), which measures that error and
how well the stored vectors separate rewrites from other articles on the same topic.

**IDF drift.** IDF changes as the corpus grows. A stored vector carries the IDF of the moment
it was made (the statistics of the index including the batch being indexed); vectors made at
different times are compared as they are, and re-indexing re-weights. Applying the current IDF
at comparison time would instead need the document frequency of every term of every hit at
search time. The benchmark measures how much the drift moves cosines.

**Why top-k terms.** The stored form is the top-k vector rather than a sketch of the full vector
(simhash, weighted MinHash): its similarity is an exact cosine rather than an estimate, and it is
cheap to compute; the benchmark compares the alternatives.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from neardup.fingerprint.corpus_stats import CorpusStats, StatsFormatError
from neardup.fingerprint.fingerprinter import Fingerprinter
from neardup.fingerprint.hashing import token_hash
from neardup.fingerprint.params import FingerprintParams
from neardup.fingerprint.similarity import pairs_within_runs
from neardup.fingerprint.synonyms import SynonymFormatError, SynonymMap, parse_synonyms
from neardup.fingerprint.values import ArrayValue

__all__ = [
    "CorpusStats", "QUANT", "StatsFormatError", "SynonymFormatError", "SynonymMap", "TF_FIELD", "TFIDF_ALGORITHM",
    "TermCounts", "TfidfFormatError", "TfidfParams", "TfidfVector", "TfidfWeigher", "cosine", "cosine_pairs",
    "parse_synonyms", "term_counts", "tf_mapping", "tfidf_version", "weigh",
]

#: Bump when the weighting, quantisation or term hashing changes (changes every stored vector).
TFIDF_ALGORITHM = 1
#: Weights are stored as unsigned 16-bit fractions of the vector's norm.
QUANT = 65535
#: Key of the TF-IDF vector inside the ``neardup`` object.
TF_FIELD = "tf"


class TfidfFormatError(ValueError):
    """A stored TF-IDF vector (``doc["neardup"]["tf"]``) is malformed."""


# ---------------------------------------------------------------- parameters and version

@dataclass(frozen=True)
class TfidfParams:
    """Everything that determines a stored TF-IDF vector besides the corpus statistics."""

    top_k: int = 64
    sublinear_tf: bool = True

    def __post_init__(self) -> None:
        if not (isinstance(self.top_k, int) and not isinstance(self.top_k, bool) and 1 <= self.top_k <= 4096):
            raise ValueError(f"top_k = {self.top_k!r}: must be a whole number from 1 to 4096")
        if not isinstance(self.sublinear_tf, bool):
            raise ValueError(f"sublinear_tf = {self.sublinear_tf!r}: must be true or false")


#: The fingerprint parameters that change canonical tokens or term hashes (shingle length,
#: permutations and grouping do not touch TF-IDF vectors).
_TOKEN_PARAMS = ("seed", "language", "strip_html", "drop_stopwords", "lemmatize")


def tfidf_version(fingerprint_params: FingerprintParams, params: TfidfParams,
                  synonyms: SynonymMap | None = None) -> str:
    """``"t<algorithm>-<digest>"`` over everything that changes stored vectors for the same
    statistics: the token parameters of the fingerprint scheme, ``params`` and the synonym
    mapping (its canonical content, not the file's layout or comments)."""
    payload = {
        "tokens": {key: getattr(fingerprint_params, key) for key in _TOKEN_PARAMS},
        "tfidf": {"top_k": params.top_k, "sublinear_tf": params.sublinear_tf},
        "synonyms": synonyms.digest() if synonyms is not None and len(synonyms) else "",
    }
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"))
    return f"t{TFIDF_ALGORITHM}-{hashlib.sha256(text.encode('utf-8')).hexdigest()[:10]}"


# ---------------------------------------------------------------- terms of a document

@dataclass(frozen=True, eq=False)
class TermCounts(ArrayValue):
    """A document's distinct term hashes (sorted ``uint64``) and how often each occurs."""

    terms: np.ndarray
    counts: np.ndarray

    def __len__(self) -> int:
        return len(self.terms)


def term_counts(tokens: Sequence[str], seed: int, synonyms: SynonymMap | None = None) -> TermCounts:
    """Term frequencies of a canonical token list (after the synonym mapping, if any).

    ``seed`` is the fingerprint scheme's seed (term hash =
    :func:`~neardup.fingerprint.hashing.token_hash`).
    Each distinct term is hashed once.
    """
    if synonyms is not None and len(synonyms):
        tokens = synonyms.apply(tokens)
    if not tokens:
        return TermCounts(np.empty(0, dtype=np.uint64), np.empty(0, dtype=np.int64))
    words, counts = np.unique(np.array(tokens, dtype=object), return_counts=True)
    hashes = np.array([token_hash(w, seed) for w in words], dtype=np.int64).view(np.uint64)
    order = np.argsort(hashes, kind="stable")
    hashes, counts = hashes[order], counts[order].astype(np.int64)
    # two distinct terms with one hash (p ≈ V²/2^65) count as one term
    if len(hashes) > 1 and np.any(hashes[1:] == hashes[:-1]):
        hashes, inverse = np.unique(hashes, return_inverse=True)
        counts = np.bincount(inverse, weights=counts).astype(np.int64)
    return TermCounts(hashes, counts)


# ---------------------------------------------------------------- vectors

@dataclass(frozen=True, eq=False)
class TfidfVector(ArrayValue):
    """The top-k weighted terms of one document: ``terms`` sorted ``uint64``, ``weights`` the
    16-bit quantised weights (``uint16``, the largest is about 65535 · its share of the norm)."""

    version: str
    terms: np.ndarray
    weights: np.ndarray

    @property
    def is_empty(self) -> bool:
        return len(self.terms) == 0

    def __len__(self) -> int:
        return len(self.terms)

    def __repr__(self) -> str:
        return f"TfidfVector(version={self.version!r}, terms={len(self.terms)})"

    def norm(self) -> float:
        return float(np.sqrt(np.dot(self.weights.astype(np.float64), self.weights.astype(np.float64))))

    def to_source(self) -> dict[str, Any]:
        """The JSON value stored at ``doc["neardup"]["tf"]``::

            {"v": "t1-…", "t": "<base64: k little-endian uint64 term hashes>",
             "w": "<base64: k little-endian uint16 weights>"}
        """
        return {"v": self.version,
                "t": base64.b64encode(self.terms.astype("<u8").tobytes()).decode("ascii"),
                "w": base64.b64encode(self.weights.astype("<u2").tobytes()).decode("ascii")}

    @classmethod
    def from_source(cls, obj: Any) -> TfidfVector:
        """Parse and validate a stored vector; :class:`TfidfFormatError` if malformed."""
        def fail(message: str) -> TfidfFormatError:
            return TfidfFormatError(f"invalid {TF_FIELD} vector: {message}")

        if not isinstance(obj, Mapping):
            raise fail(f"expected an object, got {type(obj).__name__}")
        if sorted(obj) != ["t", "v", "w"]:
            raise fail(f"needs exactly the fields t, v, w, got {', '.join(sorted(map(str, obj))) or 'none'}")
        version = obj["v"]
        if not isinstance(version, str) or not re.fullmatch(r"t[0-9]+-[0-9a-f]{10}", version):
            raise fail(f"v = {version!r}: must be a TF-IDF version like 't1-3fa9c2d10b'")
        raw = []
        for key in ("t", "w"):
            if not isinstance(obj[key], str):
                raise fail(f"{key}: must be a base64 string")
            try:
                raw.append(base64.b64decode(obj[key].encode("ascii"), validate=True))
            except (binascii.Error, UnicodeEncodeError, ValueError):
                raise fail(f"{key}: not valid base64") from None
        if len(raw[0]) % 8 or len(raw[1]) % 2 or len(raw[0]) // 8 != len(raw[1]) // 2:
            raise fail(f"t has {len(raw[0])} bytes and w {len(raw[1])}: need 8 and 2 bytes per term")
        terms = np.frombuffer(raw[0], dtype="<u8").astype(np.uint64)
        weights = np.frombuffer(raw[1], dtype="<u2").astype(np.uint16)
        if len(terms) > 1 and np.any(terms[1:] <= terms[:-1]):
            raise fail("t: term hashes must be strictly increasing")
        return cls(version, terms, weights)


def tf_mapping() -> dict[str, Any]:
    """Mapping fragment of ``neardup.tf`` (merge under ``neardup``'s properties): ``v`` a keyword
    (to find stale vectors), ``t`` and ``w`` binary without doc values (binary fields are never
    indexed; they are only read back from ``_source``), like the signature."""
    stored_only = {"type": "binary", "doc_values": False}
    return {TF_FIELD: {"properties": {"v": {"type": "keyword"}, "t": dict(stored_only), "w": dict(stored_only)}}}


def weigh(counts: TermCounts, stats: CorpusStats, params: TfidfParams, version: str) -> TfidfVector:
    """The document's top-k TF-IDF vector under ``stats`` (see the module docstring)."""
    if len(counts) == 0:
        return TfidfVector(version, np.empty(0, dtype=np.uint64), np.empty(0, dtype=np.uint16))
    tf = counts.counts.astype(np.float64)
    tf = 1.0 + np.log(tf) if params.sublinear_tf else tf
    weights = tf * stats.idf(counts.terms)
    if len(weights) > params.top_k:
        # largest weights first, ties by smaller hash (terms are sorted, so a stable sort keeps it)
        keep = np.sort(np.argsort(-weights, kind="stable")[:params.top_k])
    else:
        keep = np.arange(len(weights))
    kept = weights[keep]
    quantised = np.rint(QUANT * kept / np.sqrt(np.dot(kept, kept))).astype(np.uint16)
    nonzero = quantised > 0
    return TfidfVector(version, counts.terms[keep][nonzero], quantised[nonzero])


def cosine(a: TfidfVector, b: TfidfVector) -> float:
    """cos(a, b) = Σ a_t b_t / (‖a‖ ‖b‖) over common terms; 0 if either is empty."""
    if a.version != b.version:
        raise ValueError(f"TF-IDF vectors of different versions are not comparable: {a.version} vs {b.version}")
    if a.is_empty or b.is_empty:
        return 0.0
    _, ia, ib = np.intersect1d(a.terms, b.terms, assume_unique=True, return_indices=True)
    dot = float(np.dot(a.weights[ia].astype(np.float64), b.weights[ib].astype(np.float64)))
    return min(1.0, dot / (a.norm() * b.norm()))


# ---------------------------------------------------------------- all pairs

def cosine_pairs(vectors: Sequence[TfidfVector], threshold: float,
                 max_products: int = 50_000_000) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """All pairs (i < j) with cos ≥ ``threshold`` and > 0, sorted by (i, j); sim float64.

    Exactly the set an all-pairs comparison with :func:`cosine` gives, computed as a sparse
    X·Xᵀ: the (document, term, weight) entries of all vectors are sorted by term; every pair of
    entries with the same term contributes a_t·b_t to its document pair; contributions are summed
    with ``np.bincount`` into a dense N×N accumulator (N ≤ 1024: 8 MB) or per distinct pair. Cost ∝
    Σ_t df_t² over the vectors' terms (top-k weighting keeps very common terms rare in vectors).
    ValueError if that exceeds ``max_products`` (bounded memory) or vectors mix versions.
    """
    if not (isinstance(threshold, (int, float)) and 0.0 <= threshold <= 1.0):
        raise ValueError(f"threshold = {threshold!r}: must be a number from 0 to 1")
    n = len(vectors)
    empty = (np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float64))
    present = [v for v in vectors if not v.is_empty]
    if len({v.version for v in present}) > 1:
        raise ValueError("TF-IDF vectors of different versions are not comparable")
    if len(present) < 2:
        return empty
    lengths = np.array([len(v) for v in vectors], dtype=np.int64)
    doc = np.repeat(np.arange(n, dtype=np.int64), lengths)
    terms = np.concatenate([v.terms for v in vectors])
    norms = np.array([v.norm() for v in vectors])
    weights = np.concatenate([v.weights for v in vectors]).astype(np.float64) / np.repeat(
        np.where(norms > 0, norms, 1.0), lengths)
    order = np.argsort(terms, kind="stable")
    terms, doc, weights = terms[order], doc[order], weights[order]
    boundary = np.flatnonzero(np.concatenate(([True], terms[1:] != terms[:-1], [True])))
    starts, run = boundary[:-1], np.diff(boundary)
    products = int(np.sum(run * (run - 1) // 2))
    if products > max_products:
        raise ValueError(f"{products:,} term co-occurrences exceed the limit of {max_products:,}")
    keep = run > 1  # most terms are in one document: no pairs, skip them before expanding
    p, q = pairs_within_runs(starts[keep], run[keep])
    if len(p) == 0:
        return empty
    i, j = doc[p], doc[q]  # within a run entries are in document order, so i < j
    contribution = weights[p] * weights[q]
    codes = i * n + j
    if n <= 1024:
        dot = np.bincount(codes, weights=contribution, minlength=n * n)
        codes = np.flatnonzero(dot > 0)
        dot = dot[codes]
    else:
        codes, inverse = np.unique(codes, return_inverse=True)
        dot = np.bincount(inverse, weights=contribution)
    dot = np.minimum(dot, 1.0)
    keep = (dot >= threshold - 1e-12) & (dot > 0)
    codes, dot = codes[keep], dot[keep]
    return codes // n, codes % n, dot


# ---------------------------------------------------------------- one object for a scheme

class TfidfWeigher:
    """Terms and vectors of texts under one scheme: a
    :class:`~neardup.fingerprint.Fingerprinter` for the canonical tokens, a synonym mapping and
    :class:`TfidfParams`. Not thread-safe (it shares the fingerprinter's word caches)."""

    def __init__(self, fingerprinter: Fingerprinter, params: TfidfParams | None = None,
                 synonyms: SynonymMap | None = None) -> None:
        self.fingerprinter = fingerprinter
        self.params = params or TfidfParams()
        self.synonyms = synonyms if synonyms is not None and len(synonyms) else None
        self.version = tfidf_version(fingerprinter.params, self.params, self.synonyms)

    @classmethod
    def with_synonym_text(cls, fingerprinter: Fingerprinter, params: TfidfParams | None, text: str) -> TfidfWeigher:
        """Parse a synonym list (the shell reads the file) with the fingerprinter's canonicalisation."""
        return cls(fingerprinter, params, SynonymMap.from_text(text, fingerprinter.canonical_tokens))

    def counts_of_tokens(self, tokens: Sequence[str]) -> TermCounts:
        return term_counts(tokens, self.fingerprinter.params.seed, self.synonyms)

    def counts(self, text: str, language: str | None = None) -> TermCounts:
        return self.counts_of_tokens(self.fingerprinter.canonical_tokens(text, language))

    def vector(self, counts: TermCounts, stats: CorpusStats) -> TfidfVector:
        return weigh(counts, stats, self.params, self.version)

    def vectors(self, texts: Sequence[str], stats: CorpusStats | None = None) -> list[TfidfVector]:
        """Vectors of several texts; without ``stats``, under the statistics of these texts alone."""
        counts = [self.counts(t) for t in texts]
        if stats is None:
            stats = CorpusStats.of(c.terms for c in counts)
        return [self.vector(c, stats) for c in counts]

