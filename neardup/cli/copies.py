"""``neardup copies``: pairs of documents where one holds a fragment of the other (:mod:`neardup.indexer.copies`).

Output: a table of pairs, highest containment first, then a summary; ``--json`` prints one JSON
object a pair and a last line ``{"summary": {...}}``. Exit status: 0 done (whether or not pairs
were found); 2 bad options; 3 the index is missing, holds no documents, or none holds text in
the fields.
"""

from __future__ import annotations

import argparse
import json

from neardup.cli.options import (
    Subparsers,
    add_index_job_options,
    clear_errors,
    positive,
    retrier,
    with_cluster,
    with_flags,
)
from neardup.config import Config
from neardup.fingerprint import Fingerprinter
from neardup.fingerprint.copies import check_min_share
from neardup.indexer.client import make_client
from neardup.indexer.copies import CopiesOptions, format_summary, format_table, run_copies
from neardup.indexer.errors import EXIT_OK
from neardup.upstream import check_upstream


def _share(text: str) -> float:
    try:
        return check_min_share(float(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: must be a number greater than 0 and at most 1") from None


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: must be a whole number, 0 or more")
    return value


def _field_names(text: str) -> list[str]:
    names = [name.strip() for name in text.split(",") if name.strip()]
    if not names:
        raise argparse.ArgumentTypeError(f"{text!r}: name at least one field")
    return names


@clear_errors
def copies_command(args: argparse.Namespace, config: Config) -> int:
    config = with_flags(args, config)
    settings, job = config.copies, config.indexer
    options = CopiesOptions(
        index=args.index, fields=tuple(job.fields), min_share=settings.min_share, min_shared=settings.min_shared,
        max_df=settings.max_df, bloom=settings.bloom_params(), batch_size=job.batch_size, keep_alive=job.keep_alive)
    cluster = check_upstream(config)
    client = make_client(config.upstream, cluster)
    try:
        result = run_copies(client, retrier(config), Fingerprinter(config.fingerprint), options)
    finally:
        client.close()
    shown = result.pairs[:args.limit] if args.limit else result.pairs
    if args.json:
        for pair in shown:
            print(json.dumps(result.pair_dict(pair), ensure_ascii=False))
        print(json.dumps({"summary": with_cluster({**result.summary(), "listed": len(shown)}, cluster)},
                         ensure_ascii=False))
    else:
        print(format_table(result, shown))
        if len(shown) < len(result.pairs):
            print(f"... {len(result.pairs) - len(shown):,} more pairs (--limit {args.limit})")
        print(format_summary(result, cluster))
    return EXIT_OK


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "copies", help="list pairs of documents where one holds a fragment of the other",
        description="Find documents of an index that copy a fragment of another: every document's text "
        "fields are shingled, the shingles go into a pseudo-matrix Bloom filter, every document is "
        "looked up in it as a source, and each candidate is verified by exact containment. A pair "
        "(copier, source) is listed when the copier holds at least --min-share of the source's "
        "shingles, and --min-shared of them, highest share first. Shingles found in more than --max-df "
        "documents (boilerplate, embedded scripts, stock phrases) are left out of everything. Works in "
        "memory: about 8 bytes a distinct shingle. Settings: [copies] and [fingerprint] of the configuration.")
    add_index_job_options(parser, "screen", pages="documents per search page",
                          json_help='one JSON object a pair, then {"summary": {...}} on the last line')
    parser.add_argument("--min-share", type=_share, metavar="S",
                        help="share of the source's shingles (0 < S <= 1) the copier must hold "
                        "(default: copies.min_share, 0.05)")
    parser.add_argument("--min-shared", type=positive, metavar="N",
                        help="the copier must also hold at least N of the source's shingles: in a tiny "
                        "source, 5 %% is one shared phrase (default: copies.min_shared, 5)")
    parser.add_argument("--max-df", type=_count, metavar="D",
                        help="leave out shingles found in more than D documents; 0 keeps all "
                        "(default: copies.max_df, 100)")
    parser.add_argument("--field", "--fields", dest="field", action="extend", type=_field_names, metavar="F",
                        help="text field(s) to compare, joined in the given order; repeat or separate by "
                        "commas (default: indexer.fields, e.g. title and body)")
    parser.add_argument("--limit", type=positive, metavar="N", help="list only the N pairs of highest containment")
    parser.set_defaults(handler=copies_command)
