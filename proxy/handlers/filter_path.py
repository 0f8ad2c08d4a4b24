"""Elasticsearch's ``filter_path`` response filtering, re-done on a parsed response.

The proxy fetches collapsed searches without the client's ``filter_path`` (it needs the hits and
their fingerprints) and applies the client's filter to the collapsed response itself.

Semantics (those of Elasticsearch's ``FilterPath``):

* the value is a comma-separated list of expressions; an expression is a dotted path whose
  segments are field names, ``*``-globs matching within one level (``hits.hits._s*``), or
  ``**`` matching one or more levels (``**._id`` is ``hits.hits._id`` but not a top-level
  ``_id``; ``**.took`` matches nothing, ``hits.**.total`` not ``hits.total``);
* a field whose path matches an expression completely is kept whole, with everything below it;
* arrays are transparent: their elements are filtered with the path of the array;
* objects and arrays left empty by filtering are dropped, by an exclusion too (one that was
  empty already stays there: it is written as it came; OpenSearch drops it too, ``drop_empty``);
  if nothing is left the result is ``{}``;
* an expression starting with ``-`` excludes what it matches; when there are both, exclusions are
  applied first and the inclusions to what remains.

Expressions this module cannot reproduce exactly (a backslash escape, empty segments) raise
:class:`UnsupportedFilterPath`; the proxy then does not collapse that request rather than give a
differently filtered answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from msgspec import Raw

from neardup.proxy.handlers.glob import glob_match
from neardup.proxy.transport.rawjson import materialize

_DROP = object()


class UnsupportedFilterPath(ValueError):
    """A ``filter_path`` expression the proxy cannot apply exactly as Elasticsearch would."""


@dataclass(frozen=True)
class FilterPath:
    includes: tuple[tuple[str, ...], ...]
    excludes: tuple[tuple[str, ...], ...]
    #: An exclusion drops an object or array that came empty (OpenSearch's filtering).
    drop_empty: bool = False

    def apply(self, value: Any) -> Any:
        """The filtered response (a new value; the argument is not changed)."""
        if self.excludes:
            value = _filter(value, [p for p in self.excludes], exclude=True, keep_empty=not self.drop_empty)
            if value is _DROP:
                value = {}
        if self.includes:
            value = _filter(value, [p for p in self.includes], exclude=False, keep_empty=False)
            if value is _DROP:
                value = {}
        return value


def parse(expression: str, drop_empty: bool = False) -> FilterPath | None:
    """Compile a ``filter_path`` value; ``None`` if it filters nothing. ``drop_empty``: filter as
    OpenSearch does (an exclusion drops the empty objects and arrays it reaches)."""
    includes: list[tuple[str, ...]] = []
    excludes: list[tuple[str, ...]] = []
    for raw in expression.split(","):
        item = raw.strip()
        if not item:
            continue
        target = includes
        if item.startswith("-"):
            target, item = excludes, item[1:]
        if "\\" in item or not item:
            raise UnsupportedFilterPath(f"unsupported filter_path expression [{raw}]")
        segments = tuple(item.split("."))
        if any(s == "" for s in segments):
            raise UnsupportedFilterPath(f"unsupported filter_path expression [{raw}]")
        target.append(segments)
    if not includes and not excludes:
        return None
    return FilterPath(tuple(includes), tuple(excludes), drop_empty)


def _advance(paths: list[tuple[str, ...]], key: str) -> tuple[bool, list[tuple[str, ...]]]:
    """Match ``key`` against the first segment of each path.

    Returns (some path matched completely, the remaining paths to apply below ``key``).
    """
    complete = False
    rest: list[tuple[str, ...]] = []
    for path in paths:
        head = path[0]
        if head == "**":
            # ``**`` matches this level and maybe more (it goes on below), or ends with this
            # level (the tail goes on below); never zero levels, as in Elasticsearch.
            if len(path) == 1:
                complete = True
                continue
            rest.append(path)
            rest.append(path[1:])
            continue
        if glob_match(head, key):
            if len(path) == 1:
                complete = True
            else:
                rest.append(path[1:])
    return complete, rest


def _filter(value: Any, paths: list[tuple[str, ...]], exclude: bool, keep_empty: bool) -> Any:
    """``value`` filtered by ``paths``; ``keep_empty``: an empty object or array stays as it came."""
    if type(value) is Raw:   # a hit's _source as the upstream sent it: filtered inside, so parsed
        value = materialize(value)
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, child in value.items():
            complete, rest = _advance(paths, key)
            if complete:
                if not exclude:
                    out[key] = child
                continue
            if not rest:
                if exclude:
                    out[key] = child
                continue
            filtered = _filter(child, rest, exclude, keep_empty)
            if filtered is not _DROP:
                out[key] = filtered
        return out if (out or (keep_empty and not value)) else _DROP
    if isinstance(value, list):
        items = [_filter(item, paths, exclude, keep_empty) for item in value]
        kept = [item for item in items if item is not _DROP]
        return kept if (kept or (keep_empty and not value)) else _DROP
    # A scalar reached while paths still expect more levels below it.
    return value if exclude else _DROP
