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
documents without a value into one group).

The response has the window-collapsing format (:mod:`proxy.collapse`): each kept hit carries its
group key in ``fields["neardup.group"]`` (here the cluster id) and its other members under
``inner_hits.neardup`` (``hits.total`` = how many other hits of the query are in its group), and
the top-level ``neardup`` summary, with ``"pushdown": true`` and ``groups_total`` (the
cardinality, exact below 40,000 groups and approximate above). The added aggregation and the
``neardup.cluster`` entry of ``fields`` are removed unless the client asked for them.
"""

from __future__ import annotations

from typing import Any, Mapping

from proxy.collapse import GROUP_FIELD, INNER_HITS_NAME, SUMMARY_KEY, CollapseError

CLUSTER_FIELD = "neardup.cluster"
META_KEY = "neardup_clusters"
GROUPS_AGG = "neardup_groups"
#: Cardinality is exact below this many groups (Elasticsearch's maximum precision threshold).
PRECISION_THRESHOLD = 40_000
#: Keys of the client's body copied into ``inner_hits`` so members look like kept hits.
_INNER_KEYS = ("_source", "fields", "docvalue_fields", "stored_fields", "highlight", "version",
               "seq_no_primary_term", "explain", "script_fields")


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


def missing_clusters_query() -> dict[str, Any]:
    """Count this: push-down needs it to be 0."""
    return {"bool": {"must_not": [{"exists": {"field": CLUSTER_FIELD}}]}}


def pushdown_body(body: Mapping[str, Any], start: int, size: int, inner_size: int) -> dict[str, Any]:
    """The client's search body with native collapse, inner hits and the group count added."""
    out = dict(body)
    out["from"], out["size"] = start, size
    inner: dict[str, Any] = {"name": INNER_HITS_NAME, "size": inner_size + 1}  # the kept hit is one of them
    for key in _INNER_KEYS:
        if key in body:
            inner[key] = body[key]
    out["collapse"] = {"field": CLUSTER_FIELD, "inner_hits": inner}
    aggs_key = "aggregations" if "aggregations" in body else "aggs"
    aggs = dict(body.get(aggs_key) or {})
    aggs[GROUPS_AGG] = {"cardinality": {"field": CLUSTER_FIELD, "precision_threshold": PRECISION_THRESHOLD}}
    out[aggs_key] = aggs
    return out


def _asked_for_cluster(body: Mapping[str, Any]) -> bool:
    fields = body.get("fields") or []
    names = [f if isinstance(f, str) else f.get("field") for f in fields if isinstance(f, (str, dict))]
    return any(name in (CLUSTER_FIELD, "neardup.*", "*") for name in names)


def pushdown_response(response: Any, body: Mapping[str, Any], threshold: float, mode: str,
                      total_as_int: bool = False) -> dict[str, Any]:
    """Elasticsearch's collapsed response in the window-collapsing format (see the module)."""
    if not isinstance(response, dict) or not isinstance(response.get("hits"), dict):
        raise CollapseError("search response has no hits object")
    hits = response["hits"].get("hits")
    if not isinstance(hits, list):
        raise CollapseError("search response has no hits.hits array")
    keep_cluster_field = _asked_for_cluster(body)
    collapsed = 0
    for hit in hits:
        fields = hit.get("fields") if isinstance(hit, dict) else None
        group = fields.get(CLUSTER_FIELD) if isinstance(fields, dict) else None
        inner = ((hit.get("inner_hits") or {}).get(INNER_HITS_NAME) or {}).get("hits")
        if not isinstance(group, list) or not isinstance(inner, dict) or not isinstance(inner.get("hits"), list):
            raise CollapseError("collapsed hit without its group or inner hits")
        members = [h for h in inner["hits"]
                   if not (h.get("_id") == hit.get("_id") and h.get("_index") == hit.get("_index"))]
        total = inner.get("total")
        count = (total.get("value") if isinstance(total, dict) else total)
        others = max(int(count) - 1, len(members)) if isinstance(count, int) else len(members)
        collapsed += others
        scores = [h.get("_score") for h in members if isinstance(h.get("_score"), (int, float))]
        hit["inner_hits"][INNER_HITS_NAME] = {"hits": {
            "total": others if total_as_int else {"value": others, "relation": "eq"},
            "max_score": max(scores) if scores else None, "hits": members}}
        new_fields = dict(fields)
        if not keep_cluster_field:
            new_fields.pop(CLUSTER_FIELD, None)
        new_fields[GROUP_FIELD] = [group[0]]
        hit["fields"] = new_fields
    out = dict(response)
    aggregations = dict(out.get("aggregations") or {})
    groups_total = (aggregations.pop(GROUPS_AGG, None) or {}).get("value")
    if aggregations:
        out["aggregations"] = aggregations
    else:
        out.pop("aggregations", None)
    out[SUMMARY_KEY] = {"threshold": threshold, "mode": mode, "groups": len(hits), "collapsed": collapsed,
                        "window": len(hits), "window_groups": len(hits), "fingerprinted": len(hits),
                        "complete": True, "pushdown": True, "groups_total": groups_total}
    return out
