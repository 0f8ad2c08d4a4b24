"""Search requests: which ones are collapsed, how they are rewritten, how the rounds are merged.

Pure functions over parsed requests and responses (no I/O).

A collapsible search is fetched from the upstream as a *window* of hits ``[0, W)`` in rounds:
the first round asks for ``W₀`` hits with everything the client asked for (aggregations,
suggestions, ``track_total_hits``…); when the window's grouping holds fewer than ``from+size``
groups and more hits exist, a *tail* round fetches the next hits ``[W, 2W)`` without
aggregations, suggestions or total counting, until the page is full, the results run out or
the window's limit is reached: ``collapse.max_window``, or the result window for a page it
cannot fill (:mod:`neardup.proxy.handlers.deep_pages`). The first window is ``from+size`` plus
12% (at least 3) spare hits, enough for the duplicates of a typical page, so most searches take
one round and fetch few more hits than the client asked for.

The response keeps the first round's metadata (``hits.total``, ``aggregations``, ``suggest``,
``_shards``, …) with ``took`` summed over the rounds; only ``hits.hits`` is replaced by the page.

The fingerprints come back through one of two *channels*:

* ``_source`` when the client gets the whole ``_source`` anyway (``neardup`` is part of it);
* ``fields`` otherwise: ``neardup.v``, ``neardup.sig`` and ``neardup.n`` are added to the
  request's ``fields`` and removed from each hit afterwards, unless the client's own ``fields``
  patterns ask for them.

With ``neardup_source`` the configured text fields (``indexer.fields``) come the same way: in
``_source``, or added to ``fields`` and removed again (:mod:`neardup.proxy.handlers.source_check`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from neardup.proxy.grouping import collapse, similarity, tfidf_groups
from neardup.proxy.handlers import filter_path
from neardup.proxy.handlers.glob import glob_match
from neardup.proxy.handlers.params import Settings, has_invalid_escape

#: Query-string parameters the proxy takes over on a collapsed search.
_TAKEN_PARAMS = frozenset({"from", "size", "filter_path", "source", "source_content_type"})
#: Parameters also dropped on tail rounds (the first round already counted and aggregated).
_TAIL_DROPPED_PARAMS = frozenset({"track_total_hits", "suggest_field", "suggest_text",
                                  "suggest_mode", "suggest_size", "request_cache"})
#: Body keys dropped on tail rounds.
_TAIL_DROPPED_KEYS = ("aggs", "aggregations", "suggest", "profile", "track_total_hits")
FINGERPRINT_FIELDS = tuple(f"{collapse.FINGERPRINT_FIELD}.{k}" for k in collapse.FINGERPRINT_KEYS)
#: Spare hits of the first round beyond ``from+size``: 12%, at least 3.
SPARE_PERCENT, SPARE_MIN = 12, 3


@dataclass(frozen=True)
class Skip:
    """Why a search is passed through uncollapsed (a short machine-readable reason)."""

    reason: str


@dataclass(frozen=True)
class Plan:
    """How to collapse one search."""

    body: dict[str, Any]                  # the client's body (from the request or ``source=``)
    params: list[tuple[str, str, str]]    # the client's query parameters minus the taken ones
    start: int                            # ``from``, in groups
    size: int                             # in groups
    settings: Settings
    max_window: int
    channel: collapse.Channel
    added_fields: tuple[str, ...]         # fields entries to remove from the hits afterwards
    filter: filter_path.FilterPath | None
    total_as_int: bool
    pretty: bool

    @property
    def wanted_groups(self) -> int:
        return self.start + self.size

    def first_window(self) -> int:
        """``W₀ = n + max(3, ⌈0.12·n⌉)`` for ``n = from+size`` groups, capped by ``max_window``."""
        need = self.wanted_groups
        return min(need + max(SPARE_MIN, -(-need * SPARE_PERCENT // 100)), self.max_window)

    @property
    def needs_probe(self) -> bool:
        """The first window is capped below the client's ``from + size``: Elasticsearch may
        refuse the client's window (over ``index.max_result_window``) though it serves the
        proxy's, so the client's window is checked first (:func:`probe_request`)."""
        return self.first_window() < self.wanted_groups


_JAVA_INT = range(-2**31, 2**31)
#: Java's ``Integer.parseInt``: an optional sign and ASCII digits.
_QUERY_INT = re.compile(r"[-+]?[0-9]+")
#: A decimal number as Java's ``Double.parseDouble`` reads it (no hex, no NaN or Infinity here).
#: Written so that each digit has one place to go: a client's string is matched in linear time.
_DECIMAL = re.compile(r"[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?")


def _query_int(value: str) -> int | None:
    """A query string's ``from``/``size`` as Elasticsearch reads it (``Integer.parseInt``);
    None for anything it refuses, so that Elasticsearch answers the request itself."""
    if not _QUERY_INT.fullmatch(value):
        return None
    number = int(value)
    return number if number in _JAVA_INT else None


def _body_int(value: Any) -> int | None:
    """A body's ``from``/``size`` as Elasticsearch reads it (XContent ``intValue``: a number, or a
    string holding one, truncated toward zero; ``5.7`` is 5, ``"1e1"`` is 10, ``-0.5`` is 0);
    None for anything it refuses (not a number, beyond an int)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        text = value.strip()
        if not _DECIMAL.fullmatch(text):
            return None
        value = float(text)
    if isinstance(value, int):
        return value if value in _JAVA_INT else None
    if isinstance(value, float) and -2**31 <= value <= 2**31 - 1:   # also rules out NaN
        return int(value)
    return None


def _names(spec: Any) -> list[str] | None:
    """Field names/patterns of ``fields``/``docvalue_fields``/``stored_fields``; None if malformed."""
    if spec is None:
        return []
    if isinstance(spec, str):
        return [s.strip() for s in spec.split(",") if s.strip()]
    if not isinstance(spec, list):
        return None
    names = []
    for entry in spec:
        if isinstance(entry, str):
            names.append(entry)
        elif isinstance(entry, dict) and isinstance(entry.get("field"), str):
            names.append(entry["field"])
        else:
            return None
    return names


def _suggest_only(body: dict[str, Any], query: dict[str, str]) -> bool:
    """Elasticsearch's "suggest only" search (``SearchSourceBuilder.isSuggestOnly``: suggestions,
    no query, no aggregations) has no hits; the proxy's tail rounds drop the suggestions and
    would turn it into a match_all, so it is passed through."""
    suggests = "suggest" in body or "suggest_field" in query
    searches = "query" in body or "q" in query or "knn" in body or "aggs" in body or "aggregations" in body
    return suggests and not searches


def fingerprint_fields_for(mode: str) -> tuple[str, ...]:
    """The stored fields grouping reads in ``mode``: the TF-IDF vector in ``tfidf`` mode."""
    return tfidf_groups.TFIDF_FIELDS if mode == tfidf_groups.MODE else FINGERPRINT_FIELDS


def _matches_fingerprint(patterns: Sequence[str], names: Sequence[str] = FINGERPRINT_FIELDS) -> list[str]:
    if not patterns:   # the usual search names no fields
        return []
    return [name for name in names if any(glob_match(p, name) for p in patterns)]


def _is_true(value: str) -> bool:
    return value == "" or value.lower() == "true"


def plan_search(body: dict[str, Any], params: list[tuple[str, str, str]], settings: Settings,
                max_window: int, opensearch: bool = False) -> Plan | Skip:
    """Decide whether and how a search (its body and query parameters) is collapsed;
    ``opensearch``: the upstream is OpenSearch (whose ``filter_path`` drops empty values)."""
    if any(has_invalid_escape(raw) for _, _, raw in params):
        return Skip("invalid_parameter")  # Elasticsearch refuses it (and may hang up on a rewrite)
    query = {name: value for name, value, _ in params}
    if "scroll" in query:
        return Skip("scroll")
    if "search_after" in body:
        return Skip("search_after")
    if "collapse" in body:
        return Skip("native_collapse")
    # Elasticsearch checks the body's from/size even when the query string's replace them.
    body_start, body_size = _body_int(body.get("from", 0)), _body_int(body.get("size", 10))
    start = _query_int(query["from"]) if "from" in query else body_start
    size = _query_int(query["size"]) if "size" in query else body_size
    if body_start is None or body_size is None or start is None or size is None \
            or min(body_start, body_size, start, size) < 0:
        return Skip("invalid_from_size")  # Elasticsearch answers it
    if size == 0:
        return Skip("size_0")
    if _suggest_only(body, query):
        return Skip("suggest_only")
    if query.get("terminate_after", body.get("terminate_after", 0)) not in (0, "0"):
        # Which hits a terminated search finds, and its terminated_early, depend on how many are
        # asked for: a window of another size is not the client's search.
        return Skip("terminate_after")
    try:
        client_filter = filter_path.parse(query.get("filter_path", ""), drop_empty=opensearch)
    except filter_path.UnsupportedFilterPath:
        return Skip("unsupported_filter_path")
    stored = _names(query.get("stored_fields", body.get("stored_fields")))
    # Elasticsearch adds the query string's docvalue_fields to the body's (stored_fields replace).
    body_docvalues, query_docvalues = _names(body.get("docvalue_fields")), _names(query.get("docvalue_fields"))
    docvalues = None if body_docvalues is None or query_docvalues is None else body_docvalues + query_docvalues
    # The proxy appends to a body's ``fields``: only an array is one (Elasticsearch refuses a string).
    fields = _names(body.get("fields")) if isinstance(body.get("fields", []), list) else None
    script_fields = body.get("script_fields", {})
    if stored is None or docvalues is None or fields is None or not isinstance(script_fields, dict):
        return Skip("unexpected_field_options")
    if "_none_" in stored:
        return Skip("stored_fields_none")
    needed = fingerprint_fields_for(settings.mode)
    if _matches_fingerprint(stored, needed) or _matches_fingerprint(docvalues, needed) or \
            _matches_fingerprint(list(script_fields), needed):
        return Skip("fingerprint_field_requested")
    source_params = {"_source", "_source_includes", "_source_excludes"} & query.keys()
    # Any stored_fields, even an empty list, turns Elasticsearch's _source fetching off, unless
    # the request asks for _source: true itself (then the whole source comes back as well).
    stored_given = "stored_fields" in body or "stored_fields" in query
    # Elasticsearch reads ``_source=true``/``false`` as booleans only so spelled (FetchSourceContext);
    # ``TRUE`` is an include pattern, like any other text.
    source_forced = body.get("_source") is True or query.get("_source") == "true"
    whole_source = (body.get("_source", True) is True and (source_forced or not stored_given)
                    and (not source_params or (source_params == {"_source"}
                                               and query["_source"] == "true")))
    channel: collapse.Channel = "_source" if whole_source else "fields"
    added: tuple[str, ...] = ()
    if channel == "fields":
        fetched = needed + settings.text_fields   # text fields: only to check ``neardup_source``
        wanted = set(_matches_fingerprint(fields, fetched))
        added = tuple(name for name in fetched if name not in wanted)
    return Plan(
        body=body,
        params=[p for p in params if p[0] not in _TAKEN_PARAMS],
        start=start, size=size, settings=settings, max_window=max_window,
        channel=channel, added_fields=added, filter=client_filter,
        total_as_int=_is_true(query["rest_total_hits_as_int"]) if "rest_total_hits_as_int" in query else False,
        pretty=_is_true(query["pretty"]) if "pretty" in query else False,
    )


def round_request(plan: Plan, offset: int, count: int) -> tuple[str, dict[str, Any]]:
    """(query string, body) of the upstream request for hits ``[offset, offset+count)``."""
    body = dict(plan.body)
    params = plan.params
    if offset > 0:
        for key in _TAIL_DROPPED_KEYS:
            body.pop(key, None)
        params = [p for p in params if p[0] not in _TAIL_DROPPED_PARAMS]
        if not plan.total_as_int:  # rest_total_hits_as_int needs accurate totals
            body["track_total_hits"] = False
    body["from"], body["size"] = offset, count
    if plan.added_fields:
        body["fields"] = list(body.get("fields") or []) + list(plan.added_fields)
    return "&".join(raw for _, _, raw in params), body


def probe_request(plan: Plan) -> tuple[str, dict[str, Any]]:
    """(query string, body) that Elasticsearch refuses exactly when it refuses the client's
    window: ``from`` = the client's ``from + size``, ``size`` 0 (its result-window check is on
    ``from + size``), as a tail round (no aggregations, no counting), so it costs no fetch."""
    return round_request(plan, plan.wanted_groups, 0)


@dataclass
class Window:
    """The hits fetched so far for one plan, and the first round's response.

    A document the index moved between two rounds (a write and a refresh in between shift the
    ranks) can come back in both; it is kept once, where it came first (same ``_index``, ``_id``
    and ``_routing``), so a page never shows one document twice. A round that brings nothing new
    ends the window.
    """

    plan: Plan
    first: dict[str, Any] | None = None
    hits: list[Any] = field(default_factory=collapse.WindowHits)
    took: int = 0
    exhausted: bool = False
    fetched: int = 0        # hits received from the upstream so far: the next round's offset
    limit: int = 0          # most hits the window may hold: ``max_window`` until extended
    _seen: set[tuple[Any, ...]] = field(default_factory=set, repr=False)

    def __post_init__(self) -> None:
        self.limit = self.limit or self.plan.max_window

    def add_round(self, response: Any, requested: int) -> None:
        """Append one round's hits; raises :class:`collapse.CollapseError` on a strange shape."""
        if not isinstance(response, dict):
            raise collapse.CollapseError("search response is not an object")
        hits = response.get("hits")
        page = hits.get("hits") if isinstance(hits, dict) else None
        if not isinstance(page, list):
            raise collapse.CollapseError("search response has no hits.hits array")
        if self.first is None:
            self.first = response
        took = response.get("took")
        self.took += took if isinstance(took, int) else 0
        self.fetched += len(page)
        seen, kept = self._seen, self.hits
        before = len(kept)
        for hit in page:
            key = _identity(hit)
            if key is not None:
                if key in seen:
                    continue
                seen.add(key)
            kept.append(hit)
        self.exhausted = len(page) < requested or len(kept) == before

    def next_round(self, groups: int) -> tuple[int, int] | None:
        """(offset, count) of the next round, or None when the window is final (at its
        :attr:`limit`, or :meth:`complete`)."""
        fetched = self.fetched
        if groups >= self.plan.wanted_groups or self.exhausted or fetched >= self.limit:
            return None
        return fetched, min(fetched, self.limit - fetched)

    def complete(self, groups: int) -> bool:
        """Whether the page of a window holding ``groups`` groups is the client's whole page:
        it is full, or no hit lies beyond the window (a short last page)."""
        return groups >= self.plan.wanted_groups or self.exhausted or self._all_fetched()

    def _all_fetched(self) -> bool:
        """The window holds every hit the first round counted exactly (``hits.total``; -1 with
        ``rest_total_hits_as_int`` when nothing was counted)."""
        hits = self.first.get("hits") if self.first is not None else None
        total = hits.get("total") if isinstance(hits, dict) else None
        if isinstance(total, dict):
            total = total.get("value") if total.get("relation") == "eq" else None
        return type(total) is int and 0 <= total <= self.fetched


def _identity(hit: Any) -> tuple[Any, ...] | None:
    """(``_index``, ``_id``, ``_routing``) of a hit that has an id, else None."""
    if not isinstance(hit, dict):
        return None
    index, doc_id, routing = key = (hit.get("_index"), hit.get("_id"), hit.get("_routing"))
    if isinstance(doc_id, str) and (index is None or isinstance(index, str)) \
            and (routing is None or isinstance(routing, str)):
        return key
    return None


def finish(window: Window, groups: list[list[int]], fingerprinted: int) -> dict[str, Any]:
    """The client's response: the first round's metadata, the collapsed page, the summary."""
    plan = window.plan
    assert window.first is not None
    if plan.added_fields:
        for hit in window.hits:
            collapse.strip_fields(hit, plan.added_fields)
    page = collapse.build_page(window.hits, groups, plan.start, plan.size, plan.total_as_int)
    response = strip_added_beyond_hits(plan, dict(window.first))
    response["took"] = window.took
    response["hits"] = {**window.first["hits"], "hits": page.hits}
    complete = window.complete(len(groups))
    response[collapse.SUMMARY_KEY] = collapse.summary(
        page, plan.settings.threshold, plan.settings.mode, len(window.hits), fingerprinted, complete)
    return response


def strip_added_beyond_hits(plan: Plan, response: dict[str, Any]) -> dict[str, Any]:
    """``response`` without the fingerprint fields the proxy added where Elasticsearch fetches a
    search's top-level ``fields`` besides ``hits.hits``: the hits of ``top_hits`` aggregations
    and the options of completion suggesters. Strips in place (the first round's own objects)."""
    _strip_added_from_aggregations(plan, response)
    _strip_added_from_suggestions(plan, response)
    return response


def _strip_added_from_suggestions(plan: Plan, response: dict[str, Any]) -> None:
    """Remove the added fingerprint fields from ``response``'s suggestion options
    (:func:`neardup.proxy.grouping.collapse.suggestion_options`): a suggester has no ``fields`` of its own, so
    every added one goes; term and phrase options hold none."""
    for option in collapse.suggestion_options(response):
        collapse.strip_fields(option, plan.added_fields)


def _strip_added_from_aggregations(plan: Plan, response: dict[str, Any]) -> None:
    """Remove the fingerprint fields the proxy added from the hits of ``response``'s
    ``top_hits`` aggregations: Elasticsearch fetches a search's top-level ``fields`` for the
    hits of every ``top_hits`` too, so the added ones come back there (a field the aggregation
    asks for itself stays). Strips in place; the aggregation hits are the first round's own."""
    aggs = plan.body.get("aggs", plan.body.get("aggregations"))
    results = response.get("aggregations")
    if plan.added_fields and isinstance(aggs, dict) and isinstance(results, dict):
        for spec, result in _aggregation_results(aggs, results):
            top_hits = spec.get("top_hits")
            hits = result.get("hits")
            if not isinstance(top_hits, dict) or not isinstance(hits, dict) or not isinstance(hits.get("hits"), list):
                continue
            own = (_names(top_hits.get("fields")) or []) + (_names(top_hits.get("docvalue_fields")) or [])
            asked = _matches_fingerprint(own, plan.added_fields)
            added = [name for name in plan.added_fields if name not in asked]
            for hit in hits["hits"]:
                if isinstance(hit, dict):
                    collapse.strip_fields(hit, added)


def _aggregation_results(aggs: dict[str, Any], results: dict[str, Any]
                         ) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    """(request spec, response object) of every aggregation of ``aggs`` found in ``results``,
    sub-aggregations in each bucket included. A result is keyed by its name, or by
    ``<type>#<name>`` with ``typed_keys``."""
    by_name = {key.partition("#")[2] if "#" in key and key not in aggs else key: value
               for key, value in results.items()}
    for name, spec in aggs.items():
        result = by_name.get(name)
        if not isinstance(spec, dict) or not isinstance(result, dict):
            continue
        yield spec, result
        subs = spec.get("aggs", spec.get("aggregations"))
        if not isinstance(subs, dict):
            continue
        buckets = result.get("buckets", [result])   # single-bucket aggregations hold them directly
        for bucket in buckets.values() if isinstance(buckets, dict) else buckets:
            if isinstance(bucket, dict):
                yield from _aggregation_results(subs, bucket)


def apply_filter(plan_filter: filter_path.FilterPath | None, response: Any) -> Any:
    return plan_filter.apply(response) if plan_filter is not None else response


def annotate_page(window: Window, groups: Sequence[Sequence[int]], read: collapse.Reader) -> None:
    """:func:`neardup.proxy.grouping.similarity.annotate` the groups of the page ``window`` will show."""
    plan = window.plan
    similarity.annotate(window.hits, groups[plan.start:plan.start + plan.size], plan.channel,
                        plan.settings.mode, read)
