"""The grammar of the proxy's access rules (pure): read-only requests and path allow-list rules.

Shared by the configuration, which refuses a rule it cannot parse, and the proxy, which applies
the rules (:mod:`neardup.proxy.transport.access`).

A *rule* is ``"[METHOD[,METHOD...] ]/path/pattern"``: the methods it admits (any when none are
given) and a pattern over the path's ``/``-separated segments:

* a literal segment (``_search``) matches that exact segment of the raw path, byte for byte
  (no percent-decoding: Elasticsearch routes ``/%5Fsearch`` differently from ``/_search``);
* a segment with ``*`` or ``?`` (``logs-*``, ``*``) is a shell pattern over an *index
  expression*: the segment is percent-decoded and split on ``,``, and every part must match
  (``logs-a,secret`` does not match ``logs-*``); an empty part never matches;
* ``**`` matches any number of segments, none included.

A path with a ``.`` or ``..`` segment (raw or percent-encoded) never matches: the proxy sends
paths upstream unnormalised, and a rule must not be dodged by ``/logs-a/../_bulk``.

A request *only reads* when it is ``GET`` or ``HEAD`` (Elasticsearch's REST API never writes on
those), a ``POST`` to a read API of :data:`READ_POST` (searches, counts, multi-get, point in
time, ...) or a ``DELETE`` of a read context of :data:`READ_DELETE` (scrolls, points in time,
async searches).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from urllib.parse import unquote

METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"})

#: Paths of the read APIs that take POST (and GET); ``*`` is one index-expression segment.
READ_POST = (
    "/_search", "/*/_search", "/_search/scroll", "/_search/scroll/*",
    "/_search/template", "/*/_search/template", "/_msearch", "/*/_msearch",
    "/_msearch/template", "/*/_msearch/template", "/_render/template", "/_render/template/*",
    "/_count", "/*/_count", "/_field_caps", "/*/_field_caps", "/_validate/query",
    "/*/_validate/query", "/_mget", "/*/_mget", "/_mtermvectors", "/*/_mtermvectors",
    "/*/_termvectors", "/*/_termvectors/*", "/*/_explain/*", "/*/_terms_enum", "/*/_pit",
    "/_async_search", "/*/_async_search", "/_sql", "/_sql/translate", "/_query",
    "/*/_eql/search", "/*/_knn_search", "/_rank_eval", "/*/_rank_eval",
)
#: Read contexts a client may release in read-only mode.
READ_DELETE = ("/_search/scroll", "/_search/scroll/*", "/_pit", "/_async_search/*")


class RuleError(ValueError):
    """A rule of ``proxy.allowed_paths`` that cannot be parsed."""


@dataclass(frozen=True)
class Rule:
    methods: frozenset[str]        # empty: any method
    segments: tuple[str, ...]
    text: str

    def matches(self, method: str, raw_segments: Sequence[str]) -> bool:
        return (not self.methods or method in self.methods) and \
            _match(self.segments, tuple(raw_segments))


def parse_rule(text: str) -> Rule:
    """``"GET,POST /logs-*/_search"`` → :class:`Rule`; raises :class:`RuleError`."""
    spec = text.strip()
    methods_text, _, path = spec.rpartition(" ")
    methods = frozenset(m.strip().upper() for m in methods_text.split(",") if m.strip())
    unknown = sorted(methods - METHODS)
    if unknown:
        raise RuleError(f"unknown HTTP method {unknown[0]!r} in {text!r}; "
                        f"allowed: {', '.join(sorted(METHODS))}")
    if not path.startswith("/"):
        raise RuleError(f"{text!r}: the path pattern must start with '/', e.g. 'GET /logs-*/_search'")
    segments = tuple(path.strip("/").split("/")) if path.strip("/") else ()
    if any(s == "" for s in segments):
        raise RuleError(f"{text!r}: empty path segment ('//')")
    if any(s in (".", "..") for s in segments):
        raise RuleError(f"{text!r}: '.' and '..' segments are not allowed")
    return Rule(methods, segments, spec)


def _is_glob(segment: str) -> bool:
    return "*" in segment or "?" in segment or "[" in segment


def _segment_matches(pattern: str, raw: str) -> bool:
    if not _is_glob(pattern):
        return raw == pattern
    parts = unquote(raw).split(",")
    return all(part and fnmatchcase(part, pattern) for part in parts)


def _match(pattern: tuple[str, ...], raw: tuple[str, ...]) -> bool:
    if not pattern:
        return not raw
    head, rest = pattern[0], pattern[1:]
    if head == "**":
        return any(_match(rest, raw[k:]) for k in range(len(raw) + 1))
    return bool(raw) and _segment_matches(head, raw[0]) and _match(rest, raw[1:])


def path_segments(raw_path: str) -> tuple[str, ...] | None:
    """The raw segments of ``/a/b`` (``()`` for ``/``); None when a segment is ``.`` or ``..``."""
    stripped = raw_path.strip("/")
    segments = tuple(stripped.split("/")) if stripped else ()
    for segment in segments:
        if unquote(segment) in (".", ".."):
            return None
    return segments


_READ_POST_RULES = tuple(parse_rule(p) for p in READ_POST)
_READ_DELETE_RULES = tuple(parse_rule(p) for p in READ_DELETE)


def is_read(method: str, raw_path: str) -> bool:
    """Whether the request only reads: GET/HEAD, POST to a read API, DELETE of a read context.

    Such a request can be sent again (to another node) when a connection broke before the answer.
    """
    if method in ("GET", "HEAD"):
        return True
    segments = path_segments(raw_path)
    if segments is None:
        return False
    rules = _READ_POST_RULES if method == "POST" else _READ_DELETE_RULES if method == "DELETE" else ()
    return any(rule.matches(method, segments) for rule in rules)
