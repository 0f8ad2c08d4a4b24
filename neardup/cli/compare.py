"""``neardup compare``: exact and estimated similarity of every pair of text files (:mod:`neardup.compare`)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from typing import Any

from neardup.cli.options import Subparsers
from neardup.compare import (
    InputError,
    check_encoding,
    cosine_matrices,
    format_cosine_table,
    format_table,
    read_text,
    similarity_matrices,
)
from neardup.config import Config
from neardup.fingerprint import FingerprintParams
from neardup.fingerprint.tfidf import SynonymFormatError


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "compare", help="exact and estimated similarity of every pair of text files",
        description="Print resemblance and containment of every pair of FILEs, exact (on the shingle "
        "sets) and estimated (from fingerprints). containment[i][j] is the share of file i's shingles "
        "found in file j. Uses the [fingerprint] settings of the configuration.")
    parser.add_argument("files", nargs="+", metavar="FILE", help="text or HTML files (at least two)")
    parser.add_argument("--encoding", default="utf-8", metavar="NAME",
                        help="encoding of the files and of --synonyms, any Python codec name (default: UTF-8)")
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


def _error(message: str) -> int:
    print(f"neardup compare: {message}", file=sys.stderr)
    return 2


def run(args: argparse.Namespace, config: Config) -> int:
    """Exit status 0, or 2 for bad input."""
    if len(args.files) < 2:
        return _error("give at least two files")
    try:
        check_encoding(args.encoding)
    except ValueError as exc:
        return _error(f"--encoding {exc}")
    changes: dict[str, Any] = {}
    if args.shingle is not None:
        changes["shingle_size"] = args.shingle
    if args.no_lemmas:
        changes["lemmatize"] = False
    if args.language:
        changes["language"] = args.language
    try:
        params = dataclasses.replace(config.fingerprint, **changes)
    except ValueError as exc:
        return _error(f"--shingle: {exc}")
    try:
        texts = [read_text(path, args.encoding) for path in args.files]
    except InputError as exc:
        return _error(str(exc))
    if args.measure == "tfidf":
        return _run_tfidf(args, params, texts)
    result = similarity_matrices(texts, params, raw=args.raw)
    if args.json:
        print(json.dumps({"files": list(args.files), **result}, ensure_ascii=False))
    else:
        print(format_table(list(args.files), result))
    return 0


def _run_tfidf(args: argparse.Namespace, params: FingerprintParams, texts: list[str]) -> int:
    try:
        synonyms = read_text(args.synonyms, args.encoding) if args.synonyms else None
        result = cosine_matrices(texts, params, synonyms, args.top_k)
    except InputError as exc:
        return _error(str(exc))
    except SynonymFormatError as exc:
        return _error(f"{args.synonyms}: {exc}")
    except ValueError as exc:
        return _error(f"--top-k: {exc}")
    if args.json:
        print(json.dumps({"files": list(args.files), "measure": "tfidf", **result}, ensure_ascii=False))
    else:
        print(format_cosine_table(list(args.files), result))
    return 0
