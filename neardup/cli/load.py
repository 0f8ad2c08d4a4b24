"""``neardup load``: bulk-load documents into an index with fingerprints added (:mod:`neardup.indexer.load`)."""

from __future__ import annotations

import argparse
import json
import sys

from neardup.cli.options import (
    Subparsers,
    add_field_option,
    add_similarity_options,
    clear_errors,
    fingerprinter,
    positive,
    retrier,
    similarity_settings,
    with_cluster,
    with_flags,
)
from neardup.config import Config, collapse_settings_for
from neardup.indexer.client import make_client
from neardup.indexer.errors import EXIT_DOCUMENTS_FAILED, EXIT_OK
from neardup.indexer.formats import FORMATS, format_of, read_documents
from neardup.indexer.jsonlines import open_input
from neardup.indexer.load import Loader, LoadOptions, OnDuplicate, format_load_summary
from neardup.indexer.progress import Progress
from neardup.indexer.tfidf_vectors import make_enricher
from neardup.indexer.writer import refresh_written
from neardup.upstream import check_upstream


@clear_errors
def load_command(args: argparse.Namespace, config: Config) -> int:
    config = with_flags(args, config)
    threshold, mode = similarity_settings(args, config)
    on_duplicate: OnDuplicate = args.on_duplicate
    options = LoadOptions(index=args.index, fields=tuple(config.indexer.fields), id_field=args.id_field,
                          on_duplicate=on_duplicate, threshold=threshold, mode=mode,
                          batch_size=config.indexer.batch_size,
                          seed_threshold=collapse_settings_for(config.collapse, args.index)[1])
    source = open_input(args.file)
    cluster = check_upstream(config)
    client = make_client(config.upstream, cluster)
    try:
        documents = read_documents(source, args.format or format_of(args.file), args.file)
        job_retrier, fp = retrier(config), fingerprinter(config)
        tfidf = make_enricher(config, client, job_retrier, fp) if config.tfidf.enabled else None
        progress = Progress.for_stream(sys.stderr, f"load {args.index}")
        result = Loader(client, job_retrier, fp, options, sys.stderr, tfidf, progress).run_lines(documents)
        if args.refresh:
            refresh_written(client, args.index)
    finally:
        client.close()
        if source is not sys.stdin.buffer:
            source.close()
    if args.json:
        print(json.dumps(with_cluster({"index": args.index, **result.to_dict()}, cluster)))
    else:
        print(format_load_summary(result, args.index, cluster))
    return EXIT_DOCUMENTS_FAILED if (result.failures.total or result.counts.bad) else EXIT_OK


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "load", help="bulk-load documents (JSON lines, JSON, CSV, Reuters-21578) into an index with fingerprints added",
        description="Bulk-load documents into an index, adding each document's fingerprint in the same "
        "pass. The index is created with the neardup mapping if it does not exist. With --on-duplicate "
        "tag|skip, each document is checked against the index and against the documents loaded before "
        "it in this run.")
    parser.add_argument("--index", required=True, metavar="NAME", help="index to load into")
    parser.add_argument("file", metavar="FILE", help="file of documents (- for stdin, read as --format)")
    parser.add_argument("--format", choices=FORMATS,
                        help="jsonl: one JSON object a line, loaded byte for byte; json: an array of objects; "
                        "csv: a header row of field names, then a document a row; reuters: Reuters-21578 .sgm "
                        "files or their .tar.gz archive, a document a story (id, title, body, date, topics, "
                        "places). Default: from the file name (.jsonl/.ndjson, .json, .csv, .sgm/.tar.gz), "
                        "else jsonl")
    add_field_option(parser)
    parser.add_argument("--id-field", default="id", metavar="NAME",
                        help="field whose value (a string or whole number) becomes the document _id, so "
                        "loading again replaces instead of duplicating (default: id; '' for ids "
                        "assigned by Elasticsearch)")
    parser.add_argument("--on-duplicate", choices=["allow", "tag", "skip"], default="allow",
                        help="allow: load every document (default); tag: load near-duplicates with "
                        "neardup.duplicate_of = {id, similarity} of the document they duplicate; skip: do not load "
                        "near-duplicates")
    add_similarity_options(parser)
    parser.add_argument("--batch-size", type=positive, metavar="N",
                        help="documents per bulk request (default: indexer.batch_size)")
    parser.add_argument("--refresh", action=argparse.BooleanOptionalAction, default=True,
                        help="refresh the index at the end so the documents are searchable when the command "
                        "returns (default); --no-refresh leaves it to the index's periodic refresh")
    parser.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    parser.set_defaults(handler=load_command)
