"""``neardup index``: fingerprint the documents of an index in place (:mod:`neardup.indexer.job`)."""

from __future__ import annotations

import argparse
import json

from neardup.cli.options import (
    Subparsers,
    add_field_option,
    add_index_job_options,
    clear_errors,
    fail,
    with_cluster,
    with_flags,
)
from neardup.config import Config
from neardup.indexer.errors import EXIT_DOCUMENTS_FAILED, EXIT_OK, EXIT_USAGE
from neardup.indexer.job import IndexOptions, run_job
from neardup.indexer.query import parse_slice
from neardup.indexer.stats import format_summary
from neardup.upstream import check_upstream


@clear_errors
def index_command(args: argparse.Namespace, config: Config) -> int:
    try:
        host_slice, host_slices = parse_slice(args.slice) if args.slice else (0, 1)
    except ValueError as exc:
        return fail(str(exc), EXIT_USAGE)
    config = with_flags(args, config)
    job = config.indexer
    options = IndexOptions(
        index=args.index, fields=tuple(job.fields), since=args.since, since_field=args.since_field,
        force=args.force, host_slice=host_slice, host_slices=host_slices,
        workers=job.workers, batch_size=job.batch_size, refresh=args.refresh)
    cluster = check_upstream(config)
    result = run_job(config, options, cluster=cluster)
    if args.json:
        print(json.dumps(with_cluster({"index": args.index, "elapsed": round(result.elapsed, 3), "slices": result.slices,
                                       "stopped": result.stopped, **result.stats.to_dict()}, cluster)))
    else:
        print(format_summary(result.stats, index=args.index, elapsed=result.elapsed, cluster=cluster))
    if result.stopped:
        return fail(result.stopped)
    return EXIT_DOCUMENTS_FAILED if result.stats.failed else EXIT_OK


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "index", help="fingerprint the documents of an index in place",
        description="Fingerprint the documents of an Elasticsearch index in place: read them with a "
        "point in time, fingerprint the text fields and write the result under 'neardup' with "
        "partial updates conditional on each document's _seq_no (a document changed meanwhile is "
        "re-read, one deleted meanwhile stays deleted). Documents that already carry the current "
        "scheme version are skipped, so a killed run is resumed by running it again.")
    add_index_job_options(parser, "enrich", workers="worker processes, one point-in-time slice each",
                          json_help="print the summary as one JSON object instead of text")
    add_field_option(parser)
    parser.add_argument("--since", metavar="EXPR",
                        help="only documents whose --since-field is >= EXPR: date math (now-1d, "
                        "now-1d/d), a date (2024-05-01, 2024-05-01T12:00:00Z) or epoch milliseconds. "
                        "Combine with --force to refresh fingerprints of documents changed since then.")
    parser.add_argument("--since-field", default="@timestamp", metavar="FIELD",
                        help="date field --since applies to (default: @timestamp)")
    parser.add_argument("--force", action="store_true",
                        help="also re-fingerprint documents that already carry the current scheme "
                        "version (identical values are not rewritten: Elasticsearch answers noop)")
    parser.add_argument("--slice", metavar="I/N",
                        help="run only slice I of N (0 <= I < N) so that N hosts share one index; "
                        "run the same command with the same --workers on every host")
    parser.add_argument("--refresh", action=argparse.BooleanOptionalAction, default=True,
                        help="refresh the index at the end so the fingerprints are searchable when the "
                        "command returns (default); --no-refresh leaves it to the index's periodic refresh")
    parser.set_defaults(handler=index_command)
