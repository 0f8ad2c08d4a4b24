"""Which requests are searches the proxy collapses (pure)."""

from __future__ import annotations

from typing import Literal
from urllib.parse import unquote

Route = Literal["search", "msearch", "passthrough"]


def classify(method: str, raw_path: str) -> Route:
    """``GET|POST [/<index>]/_search`` → search, ``GET|POST [/<index>]/_msearch`` → msearch.

    Everything else (``_search/scroll``, ``_search/template``, ``_async_search``, writes, …)
    passes through.
    """
    if method not in ("GET", "POST"):
        return "passthrough"
    segments = raw_path.strip("/").split("/")
    if len(segments) > 2 or (len(segments) == 2 and not segments[0]):
        return "passthrough"
    if segments[-1] == "_search":
        return "search"
    if segments[-1] == "_msearch":
        return "msearch"
    return "passthrough"


def index_of(raw_path: str) -> str:
    """The index expression of ``/<index>/_search`` (URL-decoded), ``""`` for ``/_search``."""
    segments = raw_path.strip("/").split("/")
    return unquote(segments[0]) if len(segments) == 2 else ""
