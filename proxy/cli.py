"""``neardup proxy``: start the collapsing proxy."""

from __future__ import annotations

import argparse

from neardup.config import Config, ConfigError, UpstreamConfig


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``neardup proxy`` to the ``neardup`` parser."""
    parser = subparsers.add_parser(
        "proxy", help="serve Elasticsearch through the near-duplicate collapsing proxy",
        description="A transparent Elasticsearch proxy that folds near-duplicate hits of "
        "_search and _msearch into groups. Point clients at the URL it prints.")
    parser.add_argument("--host", help="address to listen on (proxy.host)")
    parser.add_argument("--port", type=int, help="port to listen on, 0 for any free one (proxy.port)")
    parser.add_argument("--workers", type=int, help="processes sharing the port (proxy.workers)")
    parser.add_argument("--upstream", metavar="URL", action="append",
                        help="an Elasticsearch node; repeat for several (upstream.urls)")
    parser.add_argument("--playground", action="store_const", const=True, default=None,
                        help="serve the search playground page at /_neardup/ (proxy.playground)")
    parser.set_defaults(handler=run)


def with_overrides(config: Config, args: argparse.Namespace) -> Config:
    """The configuration with the command-line options applied (validated like the file)."""
    proxy = {key: getattr(args, key) for key in ("host", "port", "workers", "playground")
             if getattr(args, key, None) is not None}
    update: dict[str, object] = {}
    try:
        if proxy:
            update["proxy"] = type(config.proxy).model_validate({**config.proxy.model_dump(), **proxy})
        if args.upstream:
            update["upstream"] = UpstreamConfig.model_validate(
                {**config.upstream.model_dump(), "urls": args.upstream})
    except ValueError as exc:
        raise ConfigError(f"invalid option: {exc}") from None
    return config.model_copy(update=update)


def run(args: argparse.Namespace, config: Config) -> int:
    import sys

    from neardup.proxy.server import ListenError, serve
    from neardup.tfidf import tfidf_version_of

    try:
        config = with_overrides(config, args)
        tfidf_version_of(config)  # a bad synonym list stops here, not in each worker
    except ConfigError as exc:
        print(f"neardup proxy: {exc}", file=sys.stderr)
        return 2
    try:
        return serve(config)
    except ListenError as exc:  # names the address: proxy.port's or proxy.ops_address's
        print(f"neardup proxy: {exc}", file=sys.stderr)
        return 1
