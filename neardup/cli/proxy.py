"""``neardup proxy``: serve Elasticsearch or OpenSearch through the collapsing proxy (:func:`neardup.proxy.server.serve`)."""

from __future__ import annotations

import argparse
import sys

from neardup.cli.options import Subparsers, with_options
from neardup.config import Config, ConfigError
from neardup.proxy.server import ListenError, serve
from neardup.tfidf_config import tfidf_version_of

#: The options that set a key of the configuration, by argparse ``dest``: (section, key).
PROXY_KEYS: dict[str, tuple[str, str]] = {
    "host": ("proxy", "host"), "port": ("proxy", "port"), "workers": ("proxy", "workers"),
    "playground": ("proxy", "playground"),
}


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "proxy", help="serve Elasticsearch or OpenSearch through the near-duplicate collapsing proxy",
        description="A transparent Elasticsearch proxy that folds near-duplicate hits of "
        "_search and _msearch into groups. Point clients at the URL it prints.")
    parser.add_argument("--host", help="address to listen on (proxy.host)")
    parser.add_argument("--port", type=int, help="port to listen on, 0 for any free one (proxy.port)")
    parser.add_argument("--workers", type=int, help="processes sharing the port (proxy.workers)")
    # The same key as `neardup --upstream URL proxy`; given here, these URLs replace those.
    parser.add_argument("--upstream", metavar="URL", action="append", default=argparse.SUPPRESS,
                        help="an Elasticsearch node; repeat for several (upstream.urls; the same as "
                        "neardup --upstream URL before the command)")
    parser.add_argument("--playground", action="store_const", const=True, default=None,
                        help="serve the search playground page at /_neardup/ (proxy.playground)")
    parser.set_defaults(handler=run)


def with_overrides(config: Config, args: argparse.Namespace) -> Config:
    """The configuration with the command-line options applied, validated like the file
    (:class:`ConfigError`: ``proxy.port = 99999: … (given as --port)``)."""
    return with_options(config, args, PROXY_KEYS)


def run(args: argparse.Namespace, config: Config) -> int:
    try:
        config = with_overrides(config, args)
        tfidf_version_of(config)  # a bad synonym list stops here, not in each worker
    except ConfigError as exc:
        print(f"neardup: {exc}", file=sys.stderr)
        return 2
    try:
        return serve(config)
    except ListenError as exc:  # names the address: proxy.port's or proxy.ops_address's
        print(f"neardup proxy: {exc}", file=sys.stderr)
        return 1
