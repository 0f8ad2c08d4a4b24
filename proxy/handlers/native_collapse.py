"""Grouping pushed down to Elasticsearch: native ``collapse`` on ``neardup.cluster`` (pure).

When ``neardup cluster`` has stored cluster ids for the threshold and mode a search asks for,
Elasticsearch can group the hits itself: ``collapse`` on the single-valued keyword
``neardup.cluster`` pages through *groups* (``from``/``size`` count groups, exactly and
consistently, as deep as Elasticsearch pages), ``inner_hits`` gives each group's other members
and their exact number among the hits of the query, and a ``cardinality`` aggregation on the same
field gives the number of groups of the whole result.

When it applies (:func:`clusters_match`): every index behind the search has
``_meta.neardup_clusters`` with ``state: ready``, the same threshold, mode and scheme version,
and no document without ``neardup.cluster`` (the caller counts them: native collapse puts all
documents without a value into one group); and the search asks for nothing native collapse
cannot do or that would not reach the inner hits (:func:`refusal`).

What the client asked for reaches the members too: the body's ``_source``, ``fields``,
``docvalue_fields``, ``stored_fields``, ``highlight``, ``sort``… are copied into ``inner_hits``,
and the query-string forms (``_source``, ``_source_includes``, ``_source_excludes``, ``sort``,
``version``, ``seq_no_primary_term``, ``explain``, ``track_scores``), which Elasticsearch applies
to the top-level hits only, are translated into the same ``inner_hits`` options
(:func:`inner_options`). Members are in the client's sort order, at most ``inner_size`` of them.

The response has the window-collapsing format (:mod:`neardup.proxy.grouping.collapse`): each kept hit carries its
group key in ``fields["neardup.group"]`` (here the cluster id) and its other members under
``inner_hits.neardup`` (``hits.total`` = how many other hits of the query are in its group), and
the top-level ``neardup`` summary, with ``"pushdown": true`` and ``groups_total`` (the
cardinality, exact below 40,000 groups and approximate above). The added aggregation and the
``neardup.cluster`` entry of ``fields`` are removed unless the client asked for them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from neardup.fingerprint import CLUSTER_KEY, FIELD
from neardup.proxy.grouping.collapse import (
    GROUP_FIELD,
    INNER_HITS_NAME,
    SUMMARY_KEY,
    CollapseError,
    strip_fields,
    suggestion_options,
)
from neardup.proxy.handlers.glob import glob_match

CLUSTER_FIELD = f"{FIELD}.{CLUSTER_KEY}"
META_KEY = "neardup_clusters"
GROUPS_AGG = "neardup_groups"
#: Cardinality is exact below this many groups (Elasticsearch's maximum precision threshold).
PRECISION_THRESHOLD = 40_000
#: Keys of the client's body copied into ``inner_hits`` so members look like kept hits.
_INNER_KEYS = ("_source", "fields", "docvalue_fields", "stored_fields", "highlight", "version",
               "seq_no_primary_term", "script_fields", "sort", "track_scores")
#: Elasticsearch's default ``index.max_inner_result_window``: inner hits ``from + size`` stay below.
MAX_INNER_WINDOW = 100
#: Body keys with which the search stays on the window path: native collapse refuses ``rescore``
#: (and ``search_after``/``collapse``/scroll, which are never planned); a point in time has no
#: index in the path to check; the members' ``_explanation`` would explain the group query
#: (the search's query and a filter on the cluster), not the search's; the group query of a
#: ``knn`` search has no query to score the members with; inner hits ignore ``min_score``.
_REFUSED_KEYS = ("rescore", "pit", "search_after", "collapse", "explain", "knn", "min_score")
#: Query parameters (or msearch header keys) with which the search stays on the window path:
#: they change which indices the search covers (the clusters are checked with the defaults), or
#: select fields for the top-level hits only in a way not translated here.
_REFUSED_PARAMS = frozenset({"expand_wildcards", "ignore_unavailable", "allow_no_indices", "ignore_throttled",
                             "stored_fields", "docvalue_fields", "scroll", "explain"})
#: Boolean query parameters that Elasticsearch applies to the top-level hits only.
_BOOLEAN_PARAMS = ("version", "seq_no_primary_term", "track_scores")


def clusters_match(metas: Mapping[str, Any], threshold: float, mode: str, version: str) -> bool:
    """Whether every index's recorded clusters were built for this threshold, mode and scheme.

    ``metas``: concrete index name → its mapping's ``_meta`` (``GET <index>/_mapping``).
    """
    if not metas:
        return False
    for meta in metas.values():
        clusters = (meta or {}).get(META_KEY) if isinstance(meta, Mapping) else None
        if not isinstance(clusters, Mapping) or clusters.get("state") != "ready":
            return False
        if clusters.get("mode") != mode or clusters.get("version") != version:
            return False
        recorded = clusters.get("threshold")
        if not isinstance(recorded, (int, float)) or abs(float(recorded) - threshold) > 1e-9:
            return False
    return True


def refusal(body: Mapping[str, Any], params: Sequence[tuple[str, str, str]],
            index: str = "") -> str | None:
    """Why a planned search stays on the window path (a short reason), or None.

    ``params``: the query parameters of the search (or the keys of an msearch item's header);
    ``index``: its index expression (a remote cluster's index cannot be checked).
    """
    for key in _REFUSED_KEYS:
        if key in body:
            return f"body_{key}"
    for name, _, _ in params:
        if name in _REFUSED_PARAMS:
            return f"param_{name}"
    if ":" in index:
        return "remote_index"
    if "highlight" in body and any(name == "q" for name, _, _ in params):
        return "highlight_q"   # the members' highlight_query would have to be the q= query
    return None


def _split(value: str) -> list[str]:
    return [part.strip() for part in value.split(",") if part.strip()]


def _source_param(query: Mapping[str, str]) -> Any:
    """The ``_source`` option the query-string parameters stand for (Elasticsearch's
    ``FetchSourceContext.parseFromRestRequest``), or None when none is given."""
    fetch: bool | None = None
    includes = excludes = None
    if "_source" in query:
        value = query["_source"]
        if value in ("true", "false"):
            fetch = value == "true"
        else:
            includes = _split(value)
    if "_source_includes" in query:
        includes = _split(query["_source_includes"])
    if "_source_excludes" in query:
        excludes = _split(query["_source_excludes"])
    if fetch is None and includes is None and excludes is None:
        return None
    if fetch is False:
        return False
    if includes is None and excludes is None:
        return True
    return {"includes": includes or [], "excludes": excludes or []}


def _sort_param(value: str) -> list[Any]:
    """``sort=a:desc,b`` as a body ``sort`` (the last ``:`` separates the order)."""
    out: list[Any] = []
    for part in _split(value):
        name, colon, order = part.rpartition(":")
        out.append({name: {"order": order}} if colon and name else part)
    return out


def inner_options(body: Mapping[str, Any], params: Sequence[tuple[str, str, str]]) -> dict[str, Any]:
    """``inner_hits`` options that give the members what the top-level hits get.

    ``body``: the upstream body (the client's, with the fields the proxy adds); ``params``: the
    query parameters sent with it, which win over the body as they do in Elasticsearch.
    """
    inner = {key: body[key] for key in _INNER_KEYS if key in body}
    query = {name: value for name, value, _ in params}
    source = _source_param(query)
    if source is not None:
        inner["_source"] = source
    elif "stored_fields" in inner and "_source" not in inner:
        # stored_fields turns the top-level hits' _source off, but not inner hits' (they
        # still return it for stored_fields: []): off explicitly, so members look the same.
        inner["_source"] = False
    if "sort" in query:   # Elasticsearch appends the query string's sort to the body's
        sort = body.get("sort", [])
        inner["sort"] = [*(sort if isinstance(sort, list) else [sort]), *_sort_param(query["sort"])]
    for name in _BOOLEAN_PARAMS:
        if name in query:
            inner[name] = query[name] in ("", "true")
    return inner


def missing_clusters_query() -> dict[str, Any]:
    """Count this: push-down needs it to be 0."""
    return {"bool": {"must_not": [{"exists": {"field": CLUSTER_FIELD}}]}}


def inner_size_for(size: int, max_window: int) -> int:
    """Members shown per group: all the inner hits window allows, but about ``max_window``
    documents per page in all (as the window path fetches at most ``max_window`` hits)."""
    return max(0, min(MAX_INNER_WINDOW - 1, max_window // max(size, 1) - 1))


def pushdown_body(body: Mapping[str, Any], start: int, size: int, inner_size: int,
                  params: Sequence[tuple[str, str, str]] = ()) -> dict[str, Any]:
    """The search body with native collapse, inner hits and the group count added.

    The count is a ``cardinality`` aggregation on the cluster field; with a ``post_filter``
    (which aggregations do not see) it is taken inside a ``filter`` aggregation of it, so it
    counts the groups the pages show.
    """
    out = dict(body)
    out["from"], out["size"] = start, size
    if "query" not in out and not any(name == "q" for name, _, _ in params):
        # The members are fetched with bool(must: the search's query, filter: the group); with
        # no query they would score 0, where the hits of the implicit match_all score 1.
        out["query"] = {"match_all": {}}
    inner: dict[str, Any] = {"name": INNER_HITS_NAME, "size": inner_size + 1,  # the kept hit is one of them
                             **inner_options(body, params)}
    highlight = inner.get("highlight")
    if isinstance(highlight, dict) and "highlight_query" not in highlight and "query" in out:
        # The members' query is the group query: without this their highlight would mark the
        # cluster id (a ``*`` field pattern matches neardup.cluster) instead of the search's terms.
        inner["highlight"] = {**highlight, "highlight_query": out["query"]}
    out["collapse"] = {"field": CLUSTER_FIELD, "inner_hits": inner}
    aggs_key = "aggregations" if "aggregations" in body else "aggs"
    aggs = dict(body.get(aggs_key) or {})
    count = {"cardinality": {"field": CLUSTER_FIELD, "precision_threshold": PRECISION_THRESHOLD}}
    if "post_filter" in body:
        count = {"filter": body["post_filter"], "aggs": {GROUPS_AGG: count}}
    aggs[GROUPS_AGG] = count
    out[aggs_key] = aggs
    return out


def _asked_for_cluster(body: Mapping[str, Any]) -> bool:
    fields = body.get("fields") or []
    names = [f if isinstance(f, str) else f.get("field") for f in fields if isinstance(f, (str, dict))]
    return any(isinstance(name, str) and glob_match(name, CLUSTER_FIELD) for name in names)


def _is_groups_agg(name: str) -> bool:
    """The added aggregation's key, also as ``typed_keys=true`` names it (``cardinality#…``)."""
    return name == GROUPS_AGG or name.endswith("#" + GROUPS_AGG)


def _pop_groups_total(aggregations: dict[str, Any]) -> Any:
    """Remove the added aggregation; its value (inside the post_filter's ``filter`` if any)."""
    value: Any = None
    for name in [n for n in aggregations if _is_groups_agg(n)]:
        value = aggregations.pop(name)
    while isinstance(value, Mapping) and "value" not in value:
        value = next((v for n, v in value.items() if _is_groups_agg(n)), None)
    return value.get("value") if isinstance(value, Mapping) else None


def pushdown_response(response: Any, body: Mapping[str, Any], threshold: float, mode: str,
                      total_as_int: bool = False, inner_size: int | None = None) -> dict[str, Any]:
    """Elasticsearch's collapsed response in the window-collapsing format (see the module).

    ``body``: the client's body (it decides whether ``neardup.cluster`` stays in ``fields``);
    ``inner_size``: members kept per group (the kept hit, when it is not among its group's
    inner hits, e.g. on a score tie, leaves one more).
    """
    if not isinstance(response, dict) or not isinstance(response.get("hits"), dict):
        raise CollapseError("search response has no hits object")
    hits = response["hits"].get("hits")
    if not isinstance(hits, list):
        raise CollapseError("search response has no hits.hits array")
    keep_cluster_field = _asked_for_cluster(body)
    collapsed = 0
    for hit in hits:
        given = hit.get("fields") if isinstance(hit, dict) else None
        fields: dict[str, Any] = given if isinstance(given, dict) else {}
        group = fields.get(CLUSTER_FIELD)
        inner = ((hit.get("inner_hits") or {}).get(INNER_HITS_NAME) or {}).get("hits")
        if not isinstance(group, list) or not group or not isinstance(group[0], str) \
                or not isinstance(inner, dict) or not isinstance(inner.get("hits"), list):
            # also a document without a cluster id (indexed since the check): its group is null
            raise CollapseError("collapsed hit without its cluster id or inner hits")
        members = [h for h in inner["hits"]
                   if not (h.get("_id") == hit.get("_id") and h.get("_index") == hit.get("_index"))]
        if inner_size is not None:
            members = members[:inner_size]
        total = inner.get("total")
        count = (total.get("value") if isinstance(total, dict) else total)
        others = max(int(count) - 1, len(members)) if isinstance(count, int) else len(members)
        collapsed += others
        scores = [score for h in members if isinstance(score := h.get("_score"), (int, float))]
        hit["inner_hits"][INNER_HITS_NAME] = {"hits": {
            "total": others if total_as_int else {"value": others, "relation": "eq"},
            "max_score": max(scores) if scores else None, "hits": members}}
        new_fields = dict(fields)
        if not keep_cluster_field:
            new_fields.pop(CLUSTER_FIELD, None)
        new_fields[GROUP_FIELD] = [group[0]]
        hit["fields"] = new_fields
    if not keep_cluster_field:
        # Native collapse writes the cluster id into the fields of every hit it fetches, a
        # completion suggester's options included, where no grouping replaces it.
        for option in suggestion_options(response):
            strip_fields(option, (CLUSTER_FIELD,))
    out = dict(response)
    aggregations = dict(out.get("aggregations") or {})
    groups_total = _pop_groups_total(aggregations)
    if aggregations:
        out["aggregations"] = aggregations
    else:
        out.pop("aggregations", None)
    out[SUMMARY_KEY] = {"threshold": threshold, "mode": mode, "groups": len(hits), "collapsed": collapsed,
                        "window": len(hits), "window_groups": len(hits), "fingerprinted": len(hits),
                        "complete": True, "pushdown": True, "groups_total": groups_total}
    return out
