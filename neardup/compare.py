"""``neardup compare``: exact and estimated similarity of every pair of text files.

For each pair it prints resemblance (Jaccard of the shingle sets) and containment (share
of one file's shingles found in the other), computed exactly on the shingle sets and
estimated from the fingerprints, the way the proxy will see them. This is how a user
picks a collapse threshold.

``--raw`` skips canonicalisation beyond case-folding and tokenising, and compares the
unhashed shingle strings (estimates still come from fingerprints of the raw tokens).

``--measure tfidf`` prints TF-IDF cosine over lemmas instead (:mod:`fingerprint.tfidf`):
exact, with the full vectors, and as stored, with the top-k quantised vectors the index keeps.
The corpus statistics are those of the compared files themselves; ``--synonyms FILE`` maps
synonym groups to one term first.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import sys
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

#: ``--raw`` tokens: runs of letters and digits of the case-folded text, nothing else done.
_RAW_TOKEN = re.compile(r"[^\W_]+")


class InputError(Exception):
    """A file cannot be compared (unreadable, not text)."""


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``neardup compare`` to the ``neardup`` parser."""
    parser = subparsers.add_parser(
        "compare", help="exact and estimated similarity of every pair of text files",
        description="Print resemblance and containment of every pair of FILEs, exact (on the shingle "
        "sets) and estimated (from fingerprints). containment[i][j] is the share of file i's shingles "
        "found in file j. Uses the [fingerprint] settings of the configuration.")
    parser.add_argument("files", nargs="+", metavar="FILE", help="UTF-8 text or HTML files (at least two)")
    parser.add_argument("--shingle", type=int, metavar="N", help="words per shingle (default: fingerprint.shingle_size)")
    parser.add_argument("--raw", action="store_true",
                        help="no canonicalisation beyond tokenising and case-folding; compare unhashed shingles")
    parser.add_argument("--no-lemmas", action="store_true", help="do not lemmatise / stem words")
    parser.add_argument("--language", choices=["auto", "ru", "en", "none"],
                        help="language of the files (default: fingerprint.language)")
    parser.add_argument("--json", action="store_true", help="print one JSON object with the four matrices")
    parser.add_argument("--measure", choices=["shingles", "tfidf"], default="shingles",
                        help="shingles: resemblance and containment (default); tfidf: TF-IDF cosine over lemmas, "
                        "exact and as stored (statistics of the given files)")
    parser.add_argument("--synonyms", metavar="FILE", help="with --measure tfidf: a synonym list (one group a line)")
    parser.add_argument("--top-k", type=int, metavar="K", help="with --measure tfidf: terms kept in a stored vector "
                        "(default 64)")
    parser.set_defaults(handler=run)


def read_text(path: str) -> str:
    """The file's text; :class:`InputError` if unreadable, binary (NUL bytes) or not UTF-8."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if b"\x00" in data:
        raise InputError(f"{path}: not a text file (contains NUL bytes)")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: not UTF-8 text (invalid byte at offset {exc.start})") from None


def similarity_matrices(texts: list[str], params: FingerprintParams, raw: bool = False) -> dict[str, list[list[float]]]:
    """The four N×N matrices of the ``--json`` output (without ``files``)."""
    fp = Fingerprinter(params)
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
    from neardup.fingerprint.tfidf import CorpusStats, TfidfParams, TfidfWeigher, cosine, weigh

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


def run(args: argparse.Namespace, config: Any) -> int:
    """Handler of ``neardup compare``; exit status 0, or 2 for bad input."""
    if len(args.files) < 2:
        print("neardup compare: give at least two files", file=sys.stderr)
        return 2
    changes: dict[str, Any] = {}
    if args.shingle is not None:
        changes["shingle_size"] = args.shingle
    if args.no_lemmas:
        changes["lemmatize"] = False
    if args.language:
        changes["language"] = args.language
    try:
        params = dataclasses.replace(config.fingerprint, **changes)
        texts = [read_text(path) for path in args.files]
    except (ValueError, InputError) as exc:
        option = "--shingle: " if isinstance(exc, ValueError) else ""
        print(f"neardup compare: {option}{exc}", file=sys.stderr)
        return 2
    if args.measure == "tfidf":
        return _run_tfidf(args, params, texts)
    result = similarity_matrices(texts, params, raw=args.raw)
    if args.json:
        print(json.dumps({"files": list(args.files), **result}, ensure_ascii=False))
    else:
        print(_table(list(args.files), result))
    return 0


def _run_tfidf(args: argparse.Namespace, params: FingerprintParams, texts: list[str]) -> int:
    from neardup.fingerprint.tfidf import SynonymFormatError

    try:
        synonyms = read_text(args.synonyms) if args.synonyms else None
        result = cosine_matrices(texts, params, synonyms, args.top_k)
    except (InputError, SynonymFormatError) as exc:
        print(f"neardup compare: {args.synonyms}: {exc}" if isinstance(exc, SynonymFormatError)
              else f"neardup compare: {exc}", file=sys.stderr)
        return 2
    except ValueError as exc:
        print(f"neardup compare: --top-k: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({"files": list(args.files), "measure": "tfidf", **result}, ensure_ascii=False))
        return 0
    files = list(args.files)
    width = max(len(f) for f in files)
    lines = [f"{'file A':<{width}}  {'file B':<{width}}  {'TF-IDF cosine':>17}",
             f"{'':<{width}}  {'':<{width}}  {'exact (stored)':>17}"]
    for i in range(len(files)):
        for j in range(i + 1, len(files)):
            cell = f"{result['cosine'][i][j]:.3f} ({result['stored_cosine'][i][j]:.3f})"
            lines.append(f"{files[i]:<{width}}  {files[j]:<{width}}  {cell:>17}")
    print("\n".join(lines))
    return 0


def _table(files: list[str], result: dict[str, list[list[float]]]) -> str:
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
