"""Exact and estimated similarity of every pair of texts: what ``neardup compare`` prints.

Resemblance is the Jaccard index ``|A ∩ B| / |A ∪ B|`` of two shingle sets, containment
``|A ∩ B| / |A|`` the share of one text's shingles found in the other; both are computed
exactly on the sets and estimated from the fingerprints (the share of equal MinHash slots),
the way the proxy sees them, which is how a user picks a collapse threshold. ``raw`` compares
unhashed shingles of the case-folded tokens, with no other canonicalisation.

:func:`cosine_matrices` gives TF-IDF cosine over lemmas instead (:mod:`neardup.fingerprint.tfidf`):
exact, with the full vectors, and as stored, with the top-k quantised vectors the index keeps,
under the statistics of the compared texts themselves.
"""

from __future__ import annotations

import codecs
import re
from pathlib import Path
from typing import Any

from neardup.fingerprint import (
    Fingerprinter,
    FingerprintParams,
    estimated_containment,
    estimated_resemblance,
    exact_containment,
    exact_resemblance,
)
from neardup.fingerprint.tfidf import CorpusStats, TfidfParams, TfidfWeigher, cosine, weigh

#: ``--raw`` tokens: runs of letters and digits of the case-folded text, nothing else done.
_RAW_TOKEN = re.compile(r"[^\W_]+")


class InputError(Exception):
    """A file cannot be compared (unreadable, not text)."""


def check_encoding(name: str) -> str:
    """The codec name of ``name`` (``utf-8`` for every spelling of it); ValueError if unknown."""
    try:
        return codecs.lookup(name).name
    except LookupError:
        raise ValueError(f"{name}: unknown encoding") from None


def read_text(path: str, encoding: str = "utf-8") -> str:
    """The file's text; :class:`InputError` if unreadable, binary (NUL bytes) or not in
    ``encoding`` (UTF-8 files may start with a byte order mark)."""
    codec = check_encoding(encoding)
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if b"\x00" in data and not codec.startswith("utf-16") and not codec.startswith("utf-32"):
        raise InputError(f"{path}: not a text file (contains NUL bytes)")
    try:
        return data.decode("utf-8-sig" if codec == "utf-8" else codec)
    except UnicodeDecodeError as exc:
        label = "UTF-8" if codec == "utf-8" else codec
        raise InputError(f"{path}: not {label} text (invalid byte at offset {exc.start}); "
                         "name the files' encoding with --encoding") from None


def similarity_matrices(texts: list[str], params: FingerprintParams, raw: bool = False) -> dict[str, list[list[float]]]:
    """The four N×N matrices of the ``--json`` output (without ``files``)."""
    fp = Fingerprinter(params)
    exact_sets: list[Any]
    if raw:
        token_lists = [_RAW_TOKEN.findall(text.casefold()) for text in texts]
        size = params.shingle_size
        exact_sets = [_raw_shingles(tokens, size) for tokens in token_lists]
        fingerprints = [fp.fingerprint_tokens(tokens) for tokens in token_lists]
    else:
        token_lists = [fp.canonical_tokens(text) for text in texts]
        exact_sets = [fp.shingles(tokens) for tokens in token_lists]
        fingerprints = [fp.fingerprint_tokens(tokens) for tokens in token_lists]

    def matrix(measure: Any, items: list[Any]) -> list[list[float]]:
        return [[round(float(measure(a, b)), 6) for b in items] for a in items]

    return {
        "resemblance": matrix(_set_resemblance if raw else exact_resemblance, exact_sets),
        "containment": matrix(_set_containment if raw else exact_containment, exact_sets),
        "estimated_resemblance": matrix(estimated_resemblance, fingerprints),
        "estimated_containment": matrix(estimated_containment, fingerprints),
    }


def cosine_matrices(texts: list[str], params: FingerprintParams, synonyms_text: str | None = None,
                    top_k: int | None = None) -> dict[str, list[list[float]]]:
    """``cosine`` (full TF-IDF vectors) and ``stored_cosine`` (top-k, 16-bit weights) N×N matrices,
    under the statistics of these texts. ValueError for a bad synonym list or top-k."""
    fp = Fingerprinter(params)
    tfidf = TfidfParams() if top_k is None else TfidfParams(top_k=top_k)
    weigher = (TfidfWeigher.with_synonym_text(fp, tfidf, synonyms_text) if synonyms_text is not None
               else TfidfWeigher(fp, tfidf))
    counts = [weigher.counts(text) for text in texts]
    stats = CorpusStats.of(c.terms for c in counts)
    full = [weigh(c, stats, TfidfParams(top_k=4096), weigher.version) for c in counts]
    stored = [weigher.vector(c, stats) for c in counts]

    def matrix(vectors: list[Any]) -> list[list[float]]:
        return [[round(cosine(a, b), 6) for b in vectors] for a in vectors]

    return {"cosine": matrix(full), "stored_cosine": matrix(stored)}


def _raw_shingles(tokens: list[str], size: int) -> set[tuple[str, ...]]:
    """Unhashed shingles; a text shorter than ``size`` tokens is one shingle of all of them."""
    if len(tokens) < size:
        return {tuple(tokens)} if tokens else set()
    return {tuple(tokens[i:i + size]) for i in range(len(tokens) - size + 1)}


def _set_resemblance(a: set[Any], b: set[Any]) -> float:
    union = len(a | b)
    return len(a & b) / union if union else 0.0


def _set_containment(a: set[Any], b: set[Any]) -> float:
    return len(a & b) / len(a) if a else 0.0


def format_cosine_table(files: list[str], result: dict[str, list[list[float]]]) -> str:
    """One line per pair: TF-IDF cosine, exact (stored)."""
    width = max(len(f) for f in files)
    lines = [f"{'file A':<{width}}  {'file B':<{width}}  {'TF-IDF cosine':>17}",
             f"{'':<{width}}  {'':<{width}}  {'exact (stored)':>17}"]
    for i in range(len(files)):
        for j in range(i + 1, len(files)):
            cell = f"{result['cosine'][i][j]:.3f} ({result['stored_cosine'][i][j]:.3f})"
            lines.append(f"{files[i]:<{width}}  {files[j]:<{width}}  {cell:>17}")
    return "\n".join(lines)


def format_table(files: list[str], result: dict[str, list[list[float]]]) -> str:
    """One line per pair: resemblance, and containment both ways, each exact (estimated)."""
    width = max(len(f) for f in files)
    lines = [f"{'file A':<{width}}  {'file B':<{width}}  {'resemblance':>17}  {'A in B':>17}  {'B in A':>17}",
             f"{'':<{width}}  {'':<{width}}  {'exact (estimate)':>17}  {'exact (estimate)':>17}  {'exact (estimate)':>17}"]
    res, con = result["resemblance"], result["containment"]
    est_res, est_con = result["estimated_resemblance"], result["estimated_containment"]
    for i in range(len(files)):
        for j in range(i + 1, len(files)):
            cells = [f"{exact:.3f} ({estimate:.3f})" for exact, estimate in
                     ((res[i][j], est_res[i][j]), (con[i][j], est_con[i][j]), (con[j][i], est_con[j][i]))]
            lines.append(f"{files[i]:<{width}}  {files[j]:<{width}}  " + "  ".join(f"{c:>17}" for c in cells))
    return "\n".join(lines)
