"""The ``neardup`` command line: one program, one module per subcommand.

Each subcommand module has ``register(subparsers)``, which adds its parser and sets
``handler(args, config) -> int`` as its default. The handler gets the validated
:class:`~neardup.config.Config` and returns the exit status; the jobs' logic lives in
:mod:`neardup.indexer`, :mod:`neardup.compare` and :mod:`neardup.proxy`.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from neardup import __version__
from neardup.cli import cluster, compare, copies, duplicates, enrich, index, load, proxy
from neardup.cli.options import GLOBAL_KEYS, with_options
from neardup.config import ConfigError, load_config
from neardup.logs import JsonFormatter, TextFormatter

#: Subcommand modules, in the order they appear in ``neardup --help``.
COMMANDS = (compare, index, enrich, load, duplicates, cluster, copies, proxy)

#: Libraries whose INFO (and, for the engines' clients, WARNING) lines are noise in a job's
#: output: pymorphy3 announces its dictionaries, elastic_transport and opensearch-py log every
#: request and every node they put on timeout (the jobs report an unreachable cluster
#: themselves). Shown with ``--log-level DEBUG``.
QUIET_LOGGERS = {"pymorphy3": logging.WARNING, "elastic_transport": logging.ERROR, "opensearch": logging.ERROR}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="neardup",
        description="Near-duplicate collapsing for Elasticsearch and OpenSearch: fingerprint documents at "
        "index time, fold near-duplicate hits at search time.",
    )
    parser.add_argument("--version", action="version", version=f"neardup {__version__}")
    parser.add_argument(
        "--config", metavar="FILE",
        help="configuration file (TOML); default: $NEARDUP_CONFIG, else config/neardup.toml "
        "of the checkout, else built-in defaults. Every key can be overridden by "
        "NEARDUP_<SECTION>__<KEY> environment variables.",
    )
    parser.add_argument(
        "--log-level", choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="overrides logging.level of the configuration",
    )
    parser.add_argument(
        "--upstream", metavar="URL", action="append",
        help="an Elasticsearch node of the cluster to work on; repeat for several. Overrides "
        "upstream.urls of the configuration (credentials stay upstream.username/password/api_key).",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for command in COMMANDS:
        command.register(subparsers)
    return parser


def configure_logging(level: str, fmt: str) -> None:
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=level, handlers=[handler], force=True)
    for name, quiet in QUIET_LOGGERS.items():
        logging.getLogger(name).setLevel(logging.NOTSET if level == "DEBUG" else max(quiet, logging.getLevelName(level)))


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        config = with_options(load_config(args.config), args, GLOBAL_KEYS)
    except ConfigError as exc:
        print(f"neardup: {exc}", file=sys.stderr)
        return 2
    configure_logging(args.log_level or config.logging.level, config.logging.format)
    try:
        return int(args.handler(args, config) or 0)
    except KeyboardInterrupt:
        print("neardup: interrupted", file=sys.stderr)
        return 130
