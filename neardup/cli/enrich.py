"""``neardup enrich``: fingerprint JSON lines from stdin or a file to stdout (:mod:`neardup.indexer.enrich_stream`)."""

from __future__ import annotations

import argparse
import sys
from functools import partial

from neardup.cli.options import Subparsers, add_field_option, clear_errors, fingerprinter, retrier, with_flags
from neardup.config import Config
from neardup.indexer.client import make_client
from neardup.indexer.enrich_stream import Extras, enrich_stream
from neardup.indexer.errors import EXIT_DOCUMENTS_FAILED, EXIT_OK
from neardup.indexer.jsonlines import open_input
from neardup.indexer.tfidf_vectors import make_enricher, vectors_of_lines
from neardup.upstream import check_upstream


@clear_errors
def enrich_command(args: argparse.Namespace, config: Config) -> int:
    config = with_flags(args, config)
    fields, fp = tuple(config.indexer.fields), fingerprinter(config)
    client = None
    extras: Extras | None = None
    statistics = ""
    if config.tfidf.enabled and args.index:
        cluster = check_upstream(config)
        statistics = f"; TF-IDF statistics of {args.index} on {cluster.describe()}"
        client = make_client(config.upstream, cluster)
        tfidf = make_enricher(config, client, retrier(config), fp)
        extras = partial(vectors_of_lines, tfidf, args.index, fields=fields)
    elif config.tfidf.enabled:
        print("neardup enrich: no TF-IDF vectors without --index (the statistics they are weighted "
              "with belong to an index)", file=sys.stderr)
    source = open_input(args.file)
    try:
        counts = enrich_stream(source, sys.stdout.buffer, sys.stderr, fields, fp, extras, config.indexer.batch_size)
    finally:
        if source is not sys.stdin.buffer:
            source.close()
        if client is not None:
            client.close()
    print(f"neardup enrich: {counts.describe()}{statistics}", file=sys.stderr)
    return EXIT_DOCUMENTS_FAILED if counts.bad else EXIT_OK


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "enrich", help="add fingerprints to JSON lines (stdin or a file) and write them to stdout",
        description="Read JSON lines (one document a line) and write each with its fingerprint added "
        "under 'neardup', one output line per input line, in order. Every other byte of a line is "
        "kept. Documents without text and bad lines (not UTF-8, not JSON, not an object) are "
        "written unchanged; bad lines are reported on stderr with their number and make the exit "
        "status 1. No Elasticsearch is needed.")
    parser.add_argument("file", nargs="?", metavar="FILE", help="JSON lines file (default: stdin; - also means stdin)")
    add_field_option(parser)
    parser.add_argument("--index", metavar="NAME",
                        help="with tfidf.enabled: the index the documents are bound for; they are counted "
                        "in its TF-IDF statistics (Elasticsearch needed) and get their vectors neardup.tf")
    parser.set_defaults(handler=enrich_command)
