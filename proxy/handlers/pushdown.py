"""The push-down path of collapsed searches: native ``collapse`` on stored cluster ids (I/O).

The imperative shell around :mod:`neardup.proxy.handlers.native_collapse`. For a planned search
(:class:`neardup.proxy.handlers.search_plan.Plan`) of an index expression, the proxy needs two facts
about the indices behind it (:class:`neardup.proxy.handlers.cluster_facts.Facts`):

* the mapping ``_meta`` of every concrete index (``GET /<indices>/_mapping``), for
  :func:`neardup.proxy.handlers.native_collapse.clusters_match` against the request's threshold, mode
  and scheme;
* whether some document has no ``neardup.cluster`` (``_count`` of
  :func:`neardup.proxy.handlers.native_collapse.missing_clusters_query`; it must be 0).

Both are fetched concurrently, with the client's own credentials, and cached per worker and per
(index expression, credentials) (:class:`neardup.proxy.handlers.cluster_facts.FactsCache`), so that in
steady state a search costs no extra round trip. A check that fails (403 without
``view_index_metadata``, 404, a broken connection) means "window path".

When the facts allow it, the search goes upstream once, as native collapse, and the answer is
rewritten into the window-collapsing format: each collapsed member gets its estimated
similarity to the kept hit (:func:`neardup.proxy.grouping.similarity.annotate`) and the fingerprint
fields the proxy added are removed, as on the window path. If that answer is not usable (an
error status, a document without a cluster id written since the check) the cached facts are
dropped and the window path answers the search instead.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any
from urllib.parse import quote

from aiohttp import web

from neardup.fingerprint import scheme_version
from neardup.proxy.grouping import collapse, similarity
from neardup.proxy.handlers import exchange, native_collapse
from neardup.proxy.handlers.cluster_calls import call_json, check_headers, identity
from neardup.proxy.handlers.cluster_facts import Facts
from neardup.proxy.handlers.context import OUTCOME, Incoming, Item, ProxyState
from neardup.proxy.handlers.routes import index_of
from neardup.proxy.handlers.search_plan import Plan, apply_filter, round_request, strip_added_beyond_hits
from neardup.proxy.transport import jsonio

log = logging.getLogger("neardup.proxy")

async def _check(state: ProxyState, request: web.Request, index: str) -> Facts | None:
    target = quote(index or "_all", safe=",*")
    headers = check_headers(request)
    try:
        mappings, count = await asyncio.gather(
            call_json(state.upstream, "GET", f"/{target}/_mapping", headers, None),
            call_json(state.upstream, "POST", f"/{target}/_count", headers,
                      jsonio.dumps({"query": native_collapse.missing_clusters_query()})))
        if not isinstance(mappings, dict) or not mappings or not isinstance(count, dict):
            return None
        metas = {name: (value.get("mappings") or {}).get("_meta") if isinstance(value, dict) else None
                 for name, value in mappings.items()}
        return Facts(metas, count.get("count") == 0)
    except Exception as exc:  # noqa: BLE001 - any failure of the check means "window path"
        log.info("cluster push-down check for %s failed: %s: %s", index or "_all", type(exc).__name__, exc)
        return None


async def allowed(state: ProxyState, request: web.Request, index: str, plan: Plan,
                  params: Sequence[tuple[str, str, str]]) -> bool:
    """Whether this planned search of ``index`` is pushed down (cached facts, see the module)."""
    if native_collapse.refusal(plan.body, params, index) is not None:
        return False
    key = (index, identity(request))
    facts = await state.pushdown_facts.get(key, lambda: _check(state, request, index))
    if facts is None or not facts.complete:   # the usual answer: no clusters; decided at once
        return False
    settings = plan.settings
    return facts.allow(settings.threshold, settings.mode, scheme_version(state.config.fingerprint))


def forget(state: ProxyState, request: web.Request, index: str) -> None:
    state.pushdown_facts.forget((index, identity(request)))


def upstream_request(plan: Plan, max_window: int) -> tuple[str, dict[str, Any], int]:
    """(query string, body, members per group) of the pushed-down search."""
    qs, body = round_request(plan, 0, plan.size)  # the first round: the client's options + fingerprint fields
    inner_size = native_collapse.inner_size_for(plan.size, max_window)
    return qs, native_collapse.pushdown_body(body, plan.start, plan.size, inner_size, plan.params), inner_size


def rewrite(state: ProxyState, plan: Plan, answer: Any, inner_size: int) -> dict[str, Any]:
    """The client's response from Elasticsearch's collapsed answer (raises ``CollapseError``)."""
    response = native_collapse.pushdown_response(answer, plan.body, plan.settings.threshold, plan.settings.mode,
                                          plan.total_as_int, inner_size)
    flat: list[dict[str, Any]] = []
    groups: list[list[int]] = []
    for top in response["hits"]["hits"]:
        members = top["inner_hits"][collapse.INNER_HITS_NAME]["hits"]["hits"]
        groups.append(list(range(len(flat), len(flat) + 1 + len(members))))
        flat += [top, *members]
    similarity.annotate(flat, groups, plan.channel, plan.settings.mode, state.algorithms.read)
    for hit in flat:
        collapse.strip_fields(hit, plan.added_fields)
    return strip_added_beyond_hits(plan, response)


# -- _search ----------------------------------------------------------------------------------
async def search(state: ProxyState, incoming: Incoming, plan: Plan) -> web.StreamResponse | None:
    """Answer a planned search with native collapse, or None: use window collapsing."""
    request = incoming.request
    index = index_of(incoming.raw_path)
    if not await allowed(state, request, index, plan, plan.params):
        return None
    qs, body, inner_size = upstream_request(plan, state.config.collapse.max_window)
    status, upstream_headers, raw = await exchange.fetch(
        state, incoming, incoming.raw_path + ("?" + qs if qs else ""), exchange.json_headers(request),
        jsonio.dumps(body))
    try:
        if status != 200:
            raise collapse.CollapseError(f"upstream answered {status}")
        response = rewrite(state, plan, jsonio.loads(raw), inner_size)
    except ValueError as exc:  # CollapseError, or a body that is not JSON
        log.info("cluster push-down not usable for %s (%s); collapsing the window", index or "_all", exc)
        forget(state, request, index)
        return None
    exchange.record(state, incoming, response[collapse.SUMMARY_KEY]["collapsed"])
    request[OUTCOME] = "collapsed:pushdown"  # metrics and access log tell the paths apart
    return exchange.respond(incoming, 200, upstream_headers, apply_filter(plan.filter, response), plan.pretty)


# -- _msearch ---------------------------------------------------------------------------------
async def mark(state: ProxyState, incoming: Incoming, items: Sequence[Item]) -> None:
    """Set ``item.pushdown`` on the planned items of an msearch that can be pushed down (the
    item's index and header keys as :func:`neardup.proxy.handlers.collapsed_search.msearch` read them)."""
    async def decide(item: Item) -> None:
        assert item.plan is not None
        header_params = [(name, "", "") for name in item.header_names]
        item.pushdown = await allowed(state, incoming.request, item.index, item.plan,
                                      [*item.plan.params, *header_params])

    await asyncio.gather(*(decide(item) for item in items if item.plan is not None))


def item_body(state: ProxyState, item: Item) -> bytes:
    assert item.plan is not None
    _, body, _ = upstream_request(item.plan, state.config.collapse.max_window)
    return jsonio.dumps(body)


def take_answer(state: ProxyState, incoming: Incoming, item: Item, answer: Any) -> None:
    """Set the item's result from its pushed-down answer; when the answer is not usable, the
    item goes back to the window path (its first window round is still pending)."""
    assert item.plan is not None
    item.pushdown = False
    ok = isinstance(answer, dict) and answer.get("status", 200) == 200 and "error" not in answer
    try:
        if not ok:
            raise collapse.CollapseError("the pushed-down search failed")
        item.result = rewrite(state, item.plan, answer,
                              native_collapse.inner_size_for(item.plan.size, state.config.collapse.max_window))
    except collapse.CollapseError as exc:
        log.info("cluster push-down not usable in an msearch (%s); collapsing the window", exc)
        forget(state, incoming.request, item.index)
