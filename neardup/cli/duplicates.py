"""``neardup duplicates``: the near-duplicates of one document of an index (:mod:`neardup.indexer.duplicates`)."""

from __future__ import annotations

import argparse
import json

from neardup.cli.options import (
    Subparsers,
    add_field_option,
    add_similarity_options,
    clear_errors,
    positive,
    retrier,
    similarity_settings,
    with_cluster,
    with_flags,
)
from neardup.config import Config
from neardup.fingerprint import scheme_version
from neardup.indexer.client import make_client
from neardup.indexer.duplicates import duplicates_json, find_duplicates, format_duplicates
from neardup.indexer.errors import EXIT_OK
from neardup.upstream import check_upstream


@clear_errors
def duplicates_command(args: argparse.Namespace, config: Config) -> int:
    config = with_flags(args, config)
    threshold, mode = similarity_settings(args, config)
    cluster = check_upstream(config)
    client = make_client(config.upstream, cluster)
    try:
        result = find_duplicates(client, retrier(config), index=args.index, doc_id=args.id,
                                 version=scheme_version(config.fingerprint), threshold=threshold,
                                 mode=mode, max_candidates=args.max_candidates,
                                 fields=tuple(config.indexer.fields), routing=args.routing)
    finally:
        client.close()
    print(json.dumps(with_cluster(duplicates_json(result), cluster)) if args.json
          else format_duplicates(result, cluster))
    return EXIT_OK


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "duplicates", help="list the near-duplicates of one document of an index",
        description="List the documents of an index that are near-duplicates of one document: "
        "candidates share a supershingle or megashingle with it (a terms lookup on the indexed "
        "neardup fields) and are verified by signature, most similar first.")
    parser.add_argument("--index", required=True, metavar="NAME", help="index, alias or pattern")
    parser.add_argument("--id", required=True, metavar="ID", help="_id of the document")
    parser.add_argument("--routing", metavar="VALUE", help="routing of the document, if it was indexed with one")
    add_similarity_options(parser)
    parser.add_argument("--max-candidates", type=positive, default=1000, metavar="N",
                        help="most candidates verified, those sharing the most keys first (default: 1000)")
    add_field_option(parser)
    parser.add_argument("--json", action="store_true", help="print the result as one JSON object")
    parser.set_defaults(handler=duplicates_command)
