"""The ``neardup`` command line: one program, one subcommand per job.

Each job's module contributes its subcommands through a ``register(subparsers)`` function
that adds a parser and sets ``handler(args, config) -> int`` as its default. The handler
gets the validated :class:`~neardup.config.Config`; it returns the exit status.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence

from neardup import __version__
from neardup.config import ConfigError, load_config

#: Modules that add subcommands, in the order they appear in ``neardup --help``.
COMMAND_MODULES = (
    "neardup.compare",
    "neardup.indexer.cli",
    "neardup.indexer.cluster_cli",
    "neardup.indexer.copies",
    "neardup.proxy.cli",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="neardup",
        description="Near-duplicate collapsing for Elasticsearch: fingerprint documents at "
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
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


def configure_logging(level: str, fmt: str) -> None:
    if fmt == "json":
        from neardup.logs import JsonFormatter

        handler = logging.StreamHandler()
        handler.setFormatter(JsonFormatter())
        logging.basicConfig(level=level, handlers=[handler], force=True)
    else:
        logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", force=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        config = load_config(args.config)
    except ConfigError as exc:
        print(f"neardup: {exc}", file=sys.stderr)
        return 2
    configure_logging(args.log_level or config.logging.level, config.logging.format)
    try:
        return int(args.handler(args, config) or 0)
    except KeyboardInterrupt:
        print("neardup: interrupted", file=sys.stderr)
        return 130
