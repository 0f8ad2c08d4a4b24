"""What the subcommands share: option types and groups, flags over the configuration, errors.

Every handler returns the exit status: 0 all went well; 1 the job ran but some documents
failed (or some input lines were bad); 2 bad options; 3 the job could not start or had to
stop (missing index, wrong field, mapping conflict, bad credentials, Elasticsearch
unreachable, interrupted). Errors are one message on stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Callable
from typing import Any

from neardup.config import Config, ConfigError, Mode, collapse_settings_for, override
from neardup.fingerprint import Fingerprinter
from neardup.indexer.client import display_url
from neardup.indexer.errors import EXIT_OK, EXIT_STOPPED, EXIT_USAGE, ClusterError, JobError, explain
from neardup.indexer.retry import Retrier
from neardup.upstream import ClusterInfo, UpstreamError

Handler = Callable[[argparse.Namespace, Config], int]
#: ``register(subparsers)`` of a subcommand module.
Subparsers = argparse._SubParsersAction

#: The options before the subcommand that set a key of the configuration, for every command.
GLOBAL_KEYS: dict[str, tuple[str, str]] = {"upstream": ("upstream", "urls")}

#: The flags that set a key of the configuration, by argparse ``dest``: (section, key).
FLAG_KEYS: dict[str, tuple[str, str]] = {
    "field": ("indexer", "fields"), "workers": ("indexer", "workers"), "batch_size": ("indexer", "batch_size"),
    "min_share": ("copies", "min_share"), "min_shared": ("copies", "min_shared"), "max_df": ("copies", "max_df"),
}


def fail(message: str, status: int = EXIT_STOPPED) -> int:
    print(f"neardup: {message}", file=sys.stderr)
    return status


def clear_errors(handler: Handler) -> Handler:
    """Turn the errors a user can cause or fix into one message and an exit status."""
    @functools.wraps(handler)
    def wrapped(args: argparse.Namespace, config: Config) -> int:
        try:
            return handler(args, config)
        except ConfigError as exc:   # a flag outside its key's limits (with_flags)
            return fail(str(exc), EXIT_USAGE)
        except JobError as exc:
            return fail(str(exc), exc.exit_status)
        except UpstreamError as exc:
            return fail(str(exc))
        except ClusterError as exc:
            return fail(explain(exc, display_url(config.upstream), getattr(args, "index", None)))
        except BrokenPipeError:
            return EXIT_OK  # the reader of our output went away (e.g. `| head`)
    return wrapped


def with_cluster(summary: dict[str, Any], cluster: ClusterInfo) -> dict[str, Any]:
    """A job's ``--json`` summary with ``"cluster": {"url", "engine", "version"}`` after its ``"index"``."""
    return {"index": summary["index"], "cluster": cluster.to_dict(), **summary}


def with_options(config: Config, args: argparse.Namespace, flags: dict[str, tuple[str, str]]) -> Config:
    """``config`` with the options of ``flags`` (argparse ``dest`` -> (section, key)) that were
    given (not None: 0 is a value, ``--max-df 0``) as one more override layer, after the file
    and the ``NEARDUP_*`` variables. Validated as the file is (:func:`neardup.config.override`):
    ``--workers 65`` is a :class:`ConfigError` naming the key and the flag."""
    values: dict[tuple[str, str], Any] = {}
    given_as: dict[tuple[str, str], str] = {}
    for dest, key in flags.items():
        value = getattr(args, dest, None)
        if value is not None:
            values[key] = value
            given_as[key] = "--" + dest.replace("_", "-")
    return override(config, values, given_as) if values else config


def with_flags(args: argparse.Namespace, config: Config) -> Config:
    """``config`` with the job flags of :data:`FLAG_KEYS` the command has and was given."""
    return with_options(config, args, FLAG_KEYS)


def positive(text: str) -> int:
    """argparse type: a whole number, 1 or more."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text}: must be 1 or more")
    return value


def threshold(text: str) -> float:
    """argparse type: a similarity between 0 and 1."""
    value = float(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"{text}: must be between 0 and 1")
    return value


def add_field_option(parser: argparse.ArgumentParser, help: str | None = None) -> None:
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
        parser.add_argument("--workers", type=positive, metavar="N", help=f"{workers} (default: indexer.workers)")
    parser.add_argument("--batch-size", type=positive, metavar="N", help=f"{pages} (default: indexer.batch_size)")
    parser.add_argument("--json", action="store_true", help=json_help)


def add_similarity_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--threshold", type=threshold, metavar="T",
                        help="estimated similarity at or above which two documents are near-duplicates "
                        "(default: collapse.threshold for the index)")
    parser.add_argument("--mode", choices=["resemblance", "containment"],
                        help="resemblance (Jaccard of the shingle sets) or containment (the larger "
                        "share of one text found in the other); default: collapse.mode for the index")


def similarity_settings(args: argparse.Namespace, config: Config) -> tuple[float, Mode]:
    """``--threshold`` and ``--mode``, else the collapse settings for ``--index``."""
    _, default_threshold, default_mode = collapse_settings_for(config.collapse, args.index)
    mode: Mode = args.mode or default_mode
    return (args.threshold if args.threshold is not None else default_threshold), mode


def retrier(config: Config) -> Retrier:
    return Retrier(display_url(config.upstream), config.indexer.max_retries)


def fingerprinter(config: Config) -> Fingerprinter:
    return Fingerprinter(config.fingerprint)


def seconds(text: str) -> float:
    """argparse type: a number of seconds, more than 0."""
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text}: must be more than 0 seconds")
    return value


def port(text: str) -> int:
    """argparse type: a TCP port, 0 (any free one) to 65535."""
    value = int(text)
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{text}: a port is 0 to 65535")
    return value
