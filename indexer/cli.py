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
from collections.abc import Callable
from typing import Any

import elastic_transport
from elasticsearch import ApiError
from pydantic import ValidationError

from neardup.config import Config, ConfigError
from neardup.indexer.errors import EXIT_DOCUMENTS_FAILED, EXIT_OK, EXIT_STOPPED, EXIT_USAGE, JobError, explain

log = logging.getLogger(__name__)

Handler = Callable[[argparse.Namespace, Config], int]


def fail(message: str, status: int = EXIT_STOPPED) -> int:
    print(f"neardup: {message}", file=sys.stderr)
    return status


def clear_errors(handler: Handler) -> Handler:
    """Turn the errors a user can cause or fix into one message and an exit status."""
    @functools.wraps(handler)
    def wrapped(args: argparse.Namespace, config: Config) -> int:
        from neardup.indexer.client import display_url
        from neardup.upstream import UpstreamError

        if logging.getLogger().getEffectiveLevel() > logging.DEBUG:
            # one line per HTTP request is noise in a job of thousands of requests
            logging.getLogger("elastic_transport").setLevel(logging.WARNING)
        try:
            return handler(args, config)
        except ConfigError as exc:   # a flag outside its key's limits (with_flags)
            return fail(str(exc), EXIT_USAGE)
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


#: The flags that set a key of the configuration, by argparse ``dest``: (section, key).
FLAG_KEYS: dict[str, tuple[str, str]] = {
    "field": ("indexer", "fields"), "workers": ("indexer", "workers"), "batch_size": ("indexer", "batch_size"),
    "min_share": ("copies", "min_share"), "min_shared": ("copies", "min_shared"), "max_df": ("copies", "max_df"),
}


def with_flags(args: argparse.Namespace, config: Config) -> Config:
    """``config`` with the flags given on the command line as one more override layer (after the
    file and the ``NEARDUP_*`` variables, :mod:`neardup.config`): each flag of :data:`FLAG_KEYS`
    that the command has and that was given (not None: 0 is a value, ``--max-df 0``) replaces its
    key. Each changed section is validated again, so a flag has the limits its key has in the
    file (``--workers 65``: :class:`ConfigError`, a usage error, naming the flag)."""
    sections: dict[str, dict[str, Any]] = {}
    flags: dict[tuple[str, str], str] = {}
    for dest, (section, key) in FLAG_KEYS.items():
        value = getattr(args, dest, None)
        if value is not None:
            sections.setdefault(section, {})[key] = value
            flags[section, key] = "--" + dest.replace("_", "-")
    updated = {}
    for name, keys in sections.items():
        current = getattr(config, name)
        try:
            updated[name] = type(current).model_validate({**current.model_dump(), **keys})
        except ValidationError as exc:
            problems = [f"{flags[name, str(error['loc'][0])]}: {error['msg']}" for error in exc.errors()]
            raise ConfigError("; ".join(problems)) from None
    return config.model_copy(update=updated)


def _add_field_option(parser: argparse.ArgumentParser, help: str | None = None) -> None:
    parser.add_argument(
        "--field", action="append", metavar="F",
        help=help or "text field to fingerprint; repeat for several, fingerprinted together in the given "
        "order (default: indexer.fields of the configuration, e.g. title and body). A dotted name "
        "reaches into objects; a list of strings counts as text.")


def add_index_job_options(parser: argparse.ArgumentParser, verb: str, *, workers: str | None = None,
                          pages: str = "documents per search page and bulk request",
                          json_help: str = "print the summary as one JSON object") -> None:
    """The options of the commands that work through a whole index (``index``, ``cluster``,
    ``copies``): ``--index`` (required; help: "index, alias or pattern to ``verb``"),
    ``--workers`` (only with ``workers``: what runs in parallel), ``--batch-size`` (``pages``:
    what one batch is) and ``--json``. The defaults come from ``[indexer]`` of the configuration."""
    parser.add_argument("--index", required=True, metavar="NAME", help=f"index, alias or pattern to {verb}")
    if workers is not None:
        parser.add_argument("--workers", type=_positive, metavar="N", help=f"{workers} (default: indexer.workers)")
    parser.add_argument("--batch-size", type=_positive, metavar="N", help=f"{pages} (default: indexer.batch_size)")
    parser.add_argument("--json", action="store_true", help=json_help)


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
    from neardup.indexer.job import IndexOptions, run_job
    from neardup.indexer.query import parse_slice
    from neardup.indexer.stats import format_summary

    try:
        host_slice, host_slices = parse_slice(args.slice) if args.slice else (0, 1)
    except ValueError as exc:
        return fail(str(exc), EXIT_USAGE)
    config = with_flags(args, config)
    job = config.indexer
    options = IndexOptions(
        index=args.index, fields=tuple(job.fields), since=args.since, since_field=args.since_field,
        force=args.force, host_slice=host_slice, host_slices=host_slices,
        workers=job.workers, batch_size=job.batch_size)
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
    add_index_job_options(parser, "enrich", workers="worker processes, one point-in-time slice each",
                          json_help="print the summary as one JSON object instead of text")
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
    parser.set_defaults(handler=index_command)


# --- neardup enrich ----------------------------------------------------------------------------

def _fingerprinter(config: Config):
    from neardup.fingerprint import Fingerprinter

    return Fingerprinter(config.fingerprint)


@clear_errors
def enrich_command(args: argparse.Namespace, config: Config) -> int:
    from neardup.indexer.lines import enrich_stream, open_input

    config = with_flags(args, config)
    fields, fingerprinter = tuple(config.indexer.fields), _fingerprinter(config)
    client, extras = None, None
    if config.tfidf.enabled and args.index:
        from functools import partial

        from neardup.indexer.client import make_client
        from neardup.indexer.tfidf import make_enricher, vectors_of_lines

        check_upstream(config)
        client = make_client(config.upstream)
        tfidf = make_enricher(config, client, _retrier(config), fingerprinter)
        extras = partial(vectors_of_lines, tfidf, args.index, fields=fields)
    elif config.tfidf.enabled:
        print("neardup enrich: no TF-IDF vectors without --index (the statistics they are weighted "
              "with belong to an index)", file=sys.stderr)
    source = open_input(args.file)
    try:
        counts = enrich_stream(source, sys.stdout.buffer, sys.stderr, fields, fingerprinter, extras,
                               config.indexer.batch_size)
    finally:
        if source is not sys.stdin.buffer:
            source.close()
        if client is not None:
            client.close()
    print(f"neardup enrich: {counts.describe()}", file=sys.stderr)
    return EXIT_DOCUMENTS_FAILED if counts.bad else EXIT_OK


def _register_enrich(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "enrich", help="add fingerprints to JSON lines (stdin or a file) and write them to stdout",
        description="Read JSON lines (one document a line) and write each with its fingerprint added "
        "under 'neardup', one output line per input line, in order. Every other byte of a line is "
        "kept. Documents without text and bad lines (not UTF-8, not JSON, not an object) are "
        "written unchanged; bad lines are reported on stderr with their number and make the exit "
        "status 1. No Elasticsearch is needed.")
    parser.add_argument("file", nargs="?", metavar="FILE", help="JSON lines file (default: stdin; - also means stdin)")
    _add_field_option(parser)
    parser.add_argument("--index", metavar="NAME",
                        help="with tfidf.enabled: the index the documents are bound for; they are counted "
                        "in its TF-IDF statistics (Elasticsearch needed) and get their vectors neardup.tf")
    parser.set_defaults(handler=enrich_command)


# --- neardup load ------------------------------------------------------------------------------

def _similarity_settings(args: argparse.Namespace, config: Config) -> tuple[float, str]:
    from neardup.config import collapse_settings_for

    _, threshold, mode = collapse_settings_for(config.collapse, args.index)
    return (args.threshold if args.threshold is not None else threshold), (args.mode or mode)


def _add_similarity_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--threshold", type=_threshold, metavar="T",
                        help="estimated similarity at or above which two documents are near-duplicates "
                        "(default: collapse.threshold for the index)")
    parser.add_argument("--mode", choices=["resemblance", "containment"],
                        help="resemblance (Jaccard of the shingle sets) or containment (the larger "
                        "share of one text found in the other); default: collapse.mode for the index")


def _retrier(config: Config):
    from neardup.indexer.client import display_url
    from neardup.indexer.retry import Retrier

    return Retrier(display_url(config.upstream), config.indexer.max_retries)


@clear_errors
def load_command(args: argparse.Namespace, config: Config) -> int:
    from neardup.config import collapse_settings_for
    from neardup.indexer.client import make_client
    from neardup.indexer.lines import open_input
    from neardup.indexer.load import Loader, LoadOptions, format_load_summary
    from neardup.indexer.tfidf import make_enricher

    config = with_flags(args, config)
    threshold, mode = _similarity_settings(args, config)
    options = LoadOptions(index=args.index, fields=tuple(config.indexer.fields), id_field=args.id_field,
                          on_duplicate=args.on_duplicate, threshold=threshold, mode=mode,  # type: ignore[arg-type]
                          batch_size=config.indexer.batch_size,
                          seed_threshold=collapse_settings_for(config.collapse, args.index)[1])
    source = open_input(args.file)
    check_upstream(config)
    client = make_client(config.upstream)
    try:
        retrier, fingerprinter = _retrier(config), _fingerprinter(config)
        tfidf = make_enricher(config, client, retrier, fingerprinter) if config.tfidf.enabled else None
        result = Loader(client, retrier, fingerprinter, options, sys.stderr, tfidf).run(source)
        if args.refresh:
            client.indices.refresh(index=args.index)
    finally:
        client.close()
        if source is not sys.stdin.buffer:
            source.close()
    if args.json:
        print(json.dumps({"index": args.index, **result.to_dict()}))
    else:
        print(format_load_summary(result, args.index))
    return EXIT_DOCUMENTS_FAILED if (result.failures.total or result.counts.bad) else EXIT_OK


def _register_load(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "load", help="bulk-load JSON lines into an index with fingerprints added",
        description="Bulk-load JSON lines (one document a line) into an index, adding each "
        "document's fingerprint in the same pass. The index is created with the neardup mapping "
        "if it does not exist. With --on-duplicate tag|skip, each document is checked against the "
        "index and against the documents loaded before it in this run.")
    parser.add_argument("--index", required=True, metavar="NAME", help="index to load into")
    parser.add_argument("file", metavar="FILE", help="JSON lines file (- for stdin)")
    _add_field_option(parser)
    parser.add_argument("--id-field", default="id", metavar="NAME",
                        help="field whose value (a string or whole number) becomes the document _id, so "
                        "loading again replaces instead of duplicating (default: id; '' for ids "
                        "assigned by Elasticsearch)")
    parser.add_argument("--on-duplicate", choices=["allow", "tag", "skip"], default="allow",
                        help="allow: load every document (default); tag: load near-duplicates with "
                        "neardup.duplicate_of = id of the document they duplicate; skip: do not load "
                        "near-duplicates")
    _add_similarity_options(parser)
    parser.add_argument("--batch-size", type=_positive, metavar="N",
                        help="documents per bulk request (default: indexer.batch_size)")
    parser.add_argument("--refresh", action="store_true",
                        help="refresh the index at the end so the documents are searchable at once")
    parser.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    parser.set_defaults(handler=load_command)


# --- neardup duplicates --------------------------------------------------------------------------

@clear_errors
def duplicates_command(args: argparse.Namespace, config: Config) -> int:
    from neardup.fingerprint import scheme_version
    from neardup.indexer.client import make_client
    from neardup.indexer.duplicates import duplicates_json, find_duplicates, format_duplicates

    config = with_flags(args, config)
    threshold, mode = _similarity_settings(args, config)
    check_upstream(config)
    client = make_client(config.upstream)
    try:
        result = find_duplicates(client, _retrier(config), index=args.index, doc_id=args.id,
                                 version=scheme_version(config.fingerprint), threshold=threshold,
                                 mode=mode, max_candidates=args.max_candidates,  # type: ignore[arg-type]
                                 fields=tuple(config.indexer.fields), routing=args.routing)
    finally:
        client.close()
    print(json.dumps(duplicates_json(result)) if args.json else format_duplicates(result))
    return EXIT_OK


def _register_duplicates(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "duplicates", help="list the near-duplicates of one document of an index",
        description="List the documents of an index that are near-duplicates of one document: "
        "candidates share a supershingle or megashingle with it (a terms lookup on the indexed "
        "neardup fields) and are verified by signature, most similar first.")
    parser.add_argument("--index", required=True, metavar="NAME", help="index, alias or pattern")
    parser.add_argument("--id", required=True, metavar="ID", help="_id of the document")
    parser.add_argument("--routing", metavar="VALUE", help="routing of the document, if it was indexed with one")
    _add_similarity_options(parser)
    parser.add_argument("--max-candidates", type=_positive, default=1000, metavar="N",
                        help="most candidates verified, those sharing the most keys first (default: 1000)")
    _add_field_option(parser)
    parser.add_argument("--json", action="store_true", help="print the result as one JSON object")
    parser.set_defaults(handler=duplicates_command)


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add this module's subcommands to the ``neardup`` parser."""
    _register_index(subparsers)
    _register_enrich(subparsers)
    _register_load(subparsers)
    _register_duplicates(subparsers)
