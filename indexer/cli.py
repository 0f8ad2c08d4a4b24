"""Subcommands of the indexer: ``index``, ``enrich``, ``load`` and ``duplicates``.

Every handler returns the exit status: 0 all went well; 1 the job ran but some documents
failed (or some input lines were bad); 2 bad options; 3 the job could not start or had to
stop (missing index, wrong field, mapping conflict, bad credentials, Elasticsearch
unreachable, interrupted). Errors are one message on stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import sys
from typing import Any, Callable

import elastic_transport
from elasticsearch import ApiError

from indexer.errors import EXIT_DOCUMENTS_FAILED, EXIT_OK, EXIT_STOPPED, EXIT_USAGE, JobError, explain
from neardup.config import Config

log = logging.getLogger(__name__)

Handler = Callable[[argparse.Namespace, Config], int]


def fail(message: str, status: int = EXIT_STOPPED) -> int:
    print(f"neardup: {message}", file=sys.stderr)
    return status


def clear_errors(handler: Handler) -> Handler:
    """Turn the errors a user can cause or fix into one message and an exit status."""
    @functools.wraps(handler)
    def wrapped(args: argparse.Namespace, config: Config) -> int:
        from indexer.client import display_url
        from neardup.upstream import UpstreamError

        try:
            return handler(args, config)
        except JobError as exc:
            return fail(str(exc), exc.exit_status)
        except UpstreamError as exc:
            return fail(str(exc))
        except (ApiError, elastic_transport.TransportError) as exc:
            return fail(explain(exc, display_url(config.upstream), getattr(args, "index", None)))
        except BrokenPipeError:
            return EXIT_OK  # the reader of our output went away (e.g. `| head`)
    return wrapped


def check_upstream(config: Config) -> None:
    from neardup.upstream import check_upstream as check

    check(config)


def _fields(args: argparse.Namespace, config: Config) -> tuple[str, ...]:
    return tuple(args.field) if args.field else tuple(config.indexer.fields)


def _add_field_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--field", action="append", metavar="F",
        help="text field to fingerprint; repeat for several, fingerprinted together in the given "
        "order (default: indexer.fields of the configuration, e.g. title and body). A dotted name "
        "reaches into objects; a list of strings counts as text.")


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text}: must be 1 or more")
    return value


def _threshold(text: str) -> float:
    value = float(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"{text}: must be between 0 and 1")
    return value


# --- neardup index -----------------------------------------------------------------------------

@clear_errors
def index_command(args: argparse.Namespace, config: Config) -> int:
    from indexer.job import IndexOptions, run_job
    from indexer.query import parse_slice
    from indexer.stats import format_summary

    try:
        host_slice, host_slices = parse_slice(args.slice) if args.slice else (0, 1)
    except ValueError as exc:
        return fail(str(exc), EXIT_USAGE)
    options = IndexOptions(
        index=args.index, fields=_fields(args, config), since=args.since, since_field=args.since_field,
        force=args.force, host_slice=host_slice, host_slices=host_slices,
        workers=args.workers or config.indexer.workers,
        batch_size=args.batch_size or config.indexer.batch_size)
    check_upstream(config)
    result = run_job(config, options)
    if args.json:
        print(json.dumps({"index": args.index, "elapsed": round(result.elapsed, 3),
                          "slices": result.slices, "stopped": result.stopped, **result.stats.to_dict()}))
    else:
        print(format_summary(result.stats, index=args.index, elapsed=result.elapsed))
    if result.stopped:
        return fail(result.stopped)
    return EXIT_DOCUMENTS_FAILED if result.stats.failed else EXIT_OK


def _register_index(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "index", help="fingerprint the documents of an index in place",
        description="Fingerprint the documents of an Elasticsearch index in place: read them with a "
        "point in time, fingerprint the text fields and write the result under 'neardup' with "
        "partial updates conditional on each document's _seq_no (a document changed meanwhile is "
        "re-read, one deleted meanwhile stays deleted). Documents that already carry the current "
        "scheme version are skipped, so a killed run is resumed by running it again.")
    parser.add_argument("--index", required=True, metavar="NAME",
                        help="index, alias or pattern to enrich")
    _add_field_option(parser)
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
    parser.add_argument("--workers", type=_positive, metavar="N",
                        help="worker processes, one point-in-time slice each (default: indexer.workers)")
    parser.add_argument("--batch-size", type=_positive, metavar="N",
                        help="documents per search page and bulk request (default: indexer.batch_size)")
    parser.add_argument("--json", action="store_true",
                        help="print the summary as one JSON object instead of text")
    parser.set_defaults(handler=index_command)


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add this module's subcommands to the ``neardup`` parser."""
    _register_index(subparsers)
