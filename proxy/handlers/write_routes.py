"""Which requests are writes the proxy may fingerprint (pure)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal
from urllib.parse import unquote


@dataclass(frozen=True)
class Write:
    """A write request: a ``_bulk`` body (``index``: the path's default index, if any), one
    document (``_doc``, ``_create``) to ``index`` with ``id`` (None: the engine assigns one), or
    the update of document ``id`` of ``index`` (``_update``)."""

    kind: Literal["bulk", "doc", "update"]
    index: str | None
    id: str | None = None


def classify_write(method: str, raw_path: str) -> Write | None:
    """``POST|PUT [/<index>]/_bulk``, ``POST /<index>/_doc``, ``PUT|POST /<index>/_doc/<id>``,
    ``PUT|POST /<index>/_create/<id>`` and ``POST|PUT /<index>/_update/<id>``; None for anything else."""
    if method not in ("POST", "PUT"):
        return None
    segments = raw_path.strip("/").split("/")
    if any(not segment for segment in segments):
        return None
    if segments[-1] == "_bulk" and len(segments) <= 2:
        return Write("bulk", unquote(segments[0]) if len(segments) == 2 else None)
    if len(segments) == 2 and segments[1] == "_doc" and method == "POST":
        return Write("doc", unquote(segments[0]))
    if len(segments) == 3 and segments[1] in ("_doc", "_create"):
        return Write("doc", unquote(segments[0]), unquote(segments[2]))
    if len(segments) == 3 and segments[1] == "_update":
        return Write("update", unquote(segments[0]), unquote(segments[2]))
    return None
