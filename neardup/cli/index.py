"""``neardup index``: fingerprint the documents of an index in place (:mod:`neardup.indexer.job`),
once or, with ``--follow``, continuously (:mod:`neardup.indexer.follow`)."""

from __future__ import annotations

import argparse
import json

from neardup.cli.options import (
    Subparsers,
    add_field_option,
    add_index_job_options,
    clear_errors,
    fail,
    port,
    seconds,
    with_cluster,
    with_flags,
    with_options,
)
from neardup.config import Config
from neardup.indexer.errors import EXIT_DOCUMENTS_FAILED, EXIT_OK, EXIT_USAGE
from neardup.indexer.follow import FollowOptions, FollowResult, run_follow
from neardup.indexer.job import IndexOptions, prepare, run_job
from neardup.indexer.query import parse_slice
from neardup.indexer.stats import format_summary
from neardup.upstream import ClusterInfo, check_upstream

#: The follow-mode flags that set a key of the configuration: (section, key).
FOLLOW_KEYS = {"interval": ("indexer", "follow_interval"), "overlap": ("indexer", "follow_overlap")}


@clear_errors
def index_command(args: argparse.Namespace, config: Config) -> int:
    try:
        host_slice, host_slices = parse_slice(args.slice) if args.slice else (0, 1)
    except ValueError as exc:
        return fail(str(exc), EXIT_USAGE)
    problem = follow_usage_problem(args)
    if problem:
        return fail(problem, EXIT_USAGE)
    config = with_options(with_flags(args, config), args, FOLLOW_KEYS)
    job = config.indexer
    options = IndexOptions(
        index=args.index, fields=tuple(job.fields), since=args.since, since_field=args.since_field or "@timestamp",
        force=args.force, host_slice=host_slice, host_slices=host_slices,
        workers=job.workers, batch_size=job.batch_size, refresh=args.refresh,
        window_field=args.since_field if args.follow else None)
    cluster = check_upstream(config)
    if args.follow:
        follow = FollowOptions(interval=job.follow_interval, overlap=job.follow_overlap,
                               metrics_port=args.metrics_port, metrics_host=args.metrics_host)
        return print_follow_result(args, run_follow(config, options, follow, cluster, prepare(config, options, cluster)),
                                   cluster)
    result = run_job(config, options, cluster=cluster)
    if args.json:
        print(json.dumps(with_cluster({"index": args.index, "elapsed": round(result.elapsed, 3), "slices": result.slices,
                                       "stopped": result.stopped, **result.stats.to_dict()}, cluster)))
    else:
        print(format_summary(result.stats, index=args.index, elapsed=result.elapsed, cluster=cluster))
    if result.stopped:
        return fail(result.stopped)
    return EXIT_DOCUMENTS_FAILED if result.stats.failed else EXIT_OK


def follow_usage_problem(args: argparse.Namespace) -> str:
    """Why the options do not go together ("" when they do)."""
    if not args.follow:
        given = [name for name, value in (("--interval", args.interval), ("--overlap", args.overlap),
                                          ("--metrics-port", args.metrics_port)) if value is not None]
        return f"{', '.join(given)} only apply with --follow" if given else ""
    if args.force:
        return "--force rewrites every fingerprint; it does not go with --follow"
    if args.overlap is not None and args.since_field is None:
        return "--overlap is the reach of the --since-field window; give --since-field with it"
    return ""


def print_follow_result(args: argparse.Namespace, result: FollowResult, cluster: ClusterInfo) -> int:
    """The summary of a follower stopped by a signal (exit status 0: stopping is how it ends)."""
    if args.json:
        print(json.dumps(with_cluster({"index": args.index, "follow": True, **result.to_dict()}, cluster)))
    else:
        print(format_summary(result.stats, index=args.index, elapsed=result.elapsed, cluster=cluster))
        print(f"  followed           {result.passes} passes ({result.failed_passes} failed and retried)")
    return EXIT_OK




def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "index", help="fingerprint the documents of an index in place (once, or continuously with --follow)",
        description="Fingerprint the documents of an Elasticsearch index in place: read them with a "
        "point in time, fingerprint the text fields and write the result under 'neardup' with "
        "partial updates conditional on each document's _seq_no (a document changed meanwhile is "
        "re-read, one deleted meanwhile stays deleted). Documents that already carry the current "
        "scheme version are skipped, so a killed run is resumed by running it again. With --follow "
        "the command keeps running and fingerprints new and re-indexed documents as they arrive.")
    add_index_job_options(parser, "enrich", workers="worker processes, one point-in-time slice each",
                          json_help="print the summary as one JSON object instead of text")
    add_field_option(parser)
    parser.add_argument("--since", metavar="EXPR",
                        help="only documents whose --since-field is >= EXPR: date math (now-1d, "
                        "now-1d/d), a date (2024-05-01, 2024-05-01T12:00:00Z) or epoch milliseconds. "
                        "Combine with --force to refresh fingerprints of documents changed since then.")
    parser.add_argument("--since-field", metavar="FIELD",
                        help="date field --since applies to (default: @timestamp); with --follow, the "
                        "documents' update time: documents updated since the last pass are fingerprinted "
                        "again when their text changed (partial updates)")
    parser.add_argument("--force", action="store_true",
                        help="also re-fingerprint documents that already carry the current scheme "
                        "version (identical values are not rewritten: Elasticsearch answers noop)")
    parser.add_argument("--slice", metavar="I/N",
                        help="run only slice I of N (0 <= I < N) so that N hosts share one index; "
                        "run the same command with the same --workers on every host")
    parser.add_argument("--refresh", action=argparse.BooleanOptionalAction, default=True,
                        help="refresh the index at the end (with --follow: after each pass that wrote) so "
                        "the fingerprints are searchable at once (default); --no-refresh leaves it to the "
                        "index's periodic refresh")
    follow = parser.add_argument_group("continuous mode")
    follow.add_argument("--follow", action="store_true",
                        help="keep running: every --interval seconds fingerprint the documents written since, "
                        "in one process, until SIGTERM or Ctrl-C (exit 0 with the summary); a cluster "
                        "outage is logged once and waited out")
    follow.add_argument("--interval", type=seconds, metavar="S",
                        help="seconds between passes (default: indexer.follow_interval, 1.0)")
    follow.add_argument("--overlap", type=float, metavar="S",
                        help="seconds the --since-field window reaches back before the newest update time "
                        "already seen (default: indexer.follow_overlap, 5.0)")
    follow.add_argument("--metrics-port", type=port, metavar="PORT",
                        help="serve Prometheus metrics on GET http://HOST:PORT/metrics")
    follow.add_argument("--metrics-host", default="127.0.0.1", metavar="HOST",
                        help="address the metrics are served on (default: 127.0.0.1; 0.0.0.0 for every interface)")
    parser.set_defaults(handler=index_command)
