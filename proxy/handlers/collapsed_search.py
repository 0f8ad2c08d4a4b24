"""The window path of collapsed searches (``_search``, ``_msearch``): read, plan, fetch in rounds, answer.

The imperative shell around :mod:`neardup.proxy.handlers.search_plan` (planning, merging) and
:mod:`neardup.proxy.grouping.collapse` (grouping). The hits of a window ``[0, W)`` are fetched in
rounds until the page of ``from + size`` groups is full, the hits run out or
``collapse.max_window`` is reached, where a page still short is extended or refused
(:mod:`neardup.proxy.handlers.result_window`); a search the cluster can group itself goes the
push-down path instead (:mod:`neardup.proxy.handlers.pushdown`). Anything unexpected in an upstream answer makes
the proxy fail open (:func:`neardup.proxy.handlers.exchange.fail_open`). A 4xx answer to a rewritten
search is replaced by Elasticsearch's answer to the original request, so the client sees
Elasticsearch's own error.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from typing import Any

from aiohttp import web

from neardup.fingerprint.similarity import Mode as SignatureMode
from neardup.proxy.grouping import collapse, spliced_page
from neardup.proxy.grouping.similarity import ESTIMATORS
from neardup.proxy.handlers import exchange, filter_path, missing_fingerprints, pushdown, result_window, source_check
from neardup.proxy.handlers.context import OUTCOME, Incoming, Item, ProxyState, receive
from neardup.proxy.handlers.params import Controls, Settings, has_invalid_escape, resolve, split_query, wants_pretty
from neardup.proxy.handlers.routes import index_of
from neardup.proxy.handlers.search_plan import (
    Plan,
    Skip,
    Window,
    annotate_page,
    apply_filter,
    finish,
    plan_search,
    probe_request,
    round_request,
)
from neardup.proxy.transport import errors, framing, hitscan, jsonio, rawjson

log = logging.getLogger("neardup.proxy")

#: Reasons to refuse ``neardup=on`` with 400, as Elasticsearch refuses ``collapse`` there.
_REFUSED_WHEN_FORCED = {
    "scroll": "cannot collapse near-duplicates in a scroll context",
    "search_after": "cannot collapse near-duplicates of a search_after page "
                    "(use from/size, or neardup=off)",
    "native_collapse": "cannot combine neardup collapsing with [collapse]",
}
#: Per-item parameters of ``_msearch``'s query string that change each search's response.
_MSEARCH_ITEM_PARAMS = ("rest_total_hits_as_int",)
_NON_JSON_ACCEPT = ("yaml", "cbor", "smile")


def _accepts_json(request: web.Request, params: list[tuple[str, str, str]]) -> bool:
    """The answer will be JSON: neither the ``Accept`` header nor the ``format`` parameter
    (which Elasticsearch honours on every API, ``?format=yaml``) asks for another format."""
    accept = request.headers.get("Accept", "").lower()
    formats = [value.lower() for name, value, _ in params if name == "format"]
    return not any(kind in accept or kind in formats for kind in _NON_JSON_ACCEPT)


# -- _search --------------------------------------------------------------------------------
async def search(state: ProxyState, request: web.Request, raw_path: str, query: str,
                 settings: Settings) -> web.StreamResponse:
    incoming = await receive(request, raw_path, query, state.config.proxy.max_body_bytes)
    content_type = request.headers.get("Content-Type")
    if incoming.raw_body and not content_type:
        return await exchange.pass_through(incoming, "no_content_type")   # Elasticsearch answers 406
    if incoming.body.strip() and content_type and not framing.is_json(content_type):
        return await exchange.pass_through(incoming, "non_json_body")
    params = split_query(query)
    if not _accepts_json(request, params):
        return await exchange.pass_through(incoming, "non_json_accept")
    try:
        body = _parse_search_body(incoming.body, params)
    except ValueError:
        return await exchange.pass_through(incoming, "unparsable_body")  # Elasticsearch explains
    plan = plan_search(body, params, settings, state.config.collapse.max_window, state.upstream.engine.is_opensearch)
    if isinstance(plan, Skip):
        if settings.forced and plan.reason in _REFUSED_WHEN_FORCED:
            raise errors.illegal_argument(_REFUSED_WHEN_FORCED[plan.reason] + " [neardup=on]")
        return await exchange.pass_through(incoming, plan.reason)
    try:
        pushed = None if plan.settings.source else await pushdown.search(state, incoming, plan)
        return pushed if pushed is not None else await _collapse_one(state, incoming, plan)
    except exchange.FailOpen as exc:
        return await exchange.fail_open(state, incoming, exc)
    except errors.ProxyError:
        raise
    except Exception as exc:  # noqa: BLE001 - any collapse bug must fail open, never 500
        return await exchange.fail_open(state, incoming, exc)


def _parse_search_body(body: bytes, params: list[tuple[str, str, str]]) -> dict[str, Any]:
    given = {name: value for name, value, _ in params}
    text = body
    if "source" in given or "source_content_type" in given:
        # Elasticsearch reads them only together, JSON, and without a body; else it says why.
        if body.strip() or "source" not in given or not framing.is_json(given.get("source_content_type")):
            raise ValueError("source parameters Elasticsearch refuses")
        text = given["source"].encode()
    if not text.strip():
        return {}
    value = jsonio.loads_request(text)
    if not isinstance(value, dict):
        raise ValueError("search body is not an object")
    return value


async def _collapse_one(state: ProxyState, incoming: Incoming, plan: Plan) -> web.StreamResponse:
    request = incoming.request
    headers = exchange.json_headers(request)
    if plan.needs_probe:   # would Elasticsearch take the client's window? Else its own answer
        qs, body = probe_request(plan)
        status, upstream_headers, raw = await exchange.fetch(state, incoming, incoming.raw_path + ("?" + qs if qs else ""),
                                                     headers, jsonio.dumps(body))
        if status != 200:
            return await _refused(incoming, status, upstream_headers, raw)
    window = Window(plan)
    budget: missing_fingerprints.Budget | None = None   # made once a window is not answered from its bytes
    offset, count = 0, plan.first_window()
    first_headers = None
    splice = _splices(state, plan)
    while True:
        halves = _halves(state, offset, count)
        fetches = [_read_round(exchange.fetch(state, incoming, incoming.raw_path + ("?" + qs if qs else ""), headers,
                                              jsonio.dumps(body)), decode=not splice)
                   for qs, body in (round_request(plan, start, size) for start, size in halves)]
        rounds = [await fetches[0]] if len(fetches) == 1 else await _together(fetches)
        if splice:   # the first window: answered from its bytes if it is the usual one
            splice = False
            answer = _spliced_answer(state, incoming, plan, halves, rounds)
            if answer is not None:
                return answer
            rounds = [(status, upstream_headers, raw, _decoded(raw) if status == 200 else None)
                      for status, upstream_headers, raw, _ in rounds]
        took_before, took = window.took, 0
        for (start, size), (status, upstream_headers, raw, read) in zip(halves, rounds):
            if status != 200:
                if start == 0:
                    return await _refused(incoming, status, upstream_headers, raw)
                raise exchange.FailOpen(f"upstream answered {status} to a tail round")
            first_headers = first_headers or upstream_headers
            before = window.took
            try:
                if isinstance(read, ValueError):
                    raise read
                window.add_round(read, size)
            except ValueError as exc:
                raise exchange.FailOpen(str(exc)) from None
            took = max(took, window.took - before)
        window.took = took_before + took   # halves run at the same time: the longer one's took
        budget = budget or missing_fingerprints.budget(state)
        groups, fingerprinted = await missing_fingerprints.group(state, incoming, plan, window.hits, budget)
        following = window.next_round(len(groups))
        if following is None and not window.complete(len(groups)):   # a deep page: extend or 400
            following = await result_window.extend(state, request, index_of(incoming.raw_path), window, len(groups))
        if following is None:
            break
        offset, count = following
    annotate_page(window, groups, state.algorithms.read)
    response = source_check.finish(state, window, groups, fingerprinted)
    missing_fingerprints.summarize(response[collapse.SUMMARY_KEY], plan, window.hits)
    exchange.record(state, incoming, response[collapse.SUMMARY_KEY]["collapsed"])
    return exchange.respond(incoming, 200, first_headers, apply_filter(plan.filter, response), plan.pretty)


def _halves(state: ProxyState, offset: int, count: int) -> list[tuple[int, int]]:
    """The round ``[offset, offset + count)`` as one request, or as two concurrent halves when it
    is a first window of at least ``proxy.split_fetch_min_hits`` hits and this worker has no other
    request in flight: Elasticsearch then fetches the halves' documents on two threads, which
    shortens the wait for a large page on an idle proxy, for one more query phase.
    Under load the extra query phase would only cost throughput, so it is never split then."""
    least = state.config.proxy.split_fetch_min_hits
    if offset or not least or count < least or state.metrics.in_flight > 1:
        return [(offset, count)]
    first = (count + 1) // 2
    return [(0, first), (first, count - first)]


async def _read_round(fetch: Awaitable[tuple[int, Any, bytes]], decode: bool = True) -> tuple[int, Any, bytes, Any]:
    """A round's (status, headers, body) and, when ``decode`` and the status is 200 (else None),
    its body read by :func:`_decoded`: the halves of a split round are each read as soon as
    they come, one while the other is still on its way."""
    status, headers, raw = await fetch
    return status, headers, raw, _decoded(raw) if decode and status == 200 else None


def _decoded(raw: bytes) -> Any:
    """:func:`rawjson.loads_search` of ``raw``, or the ``ValueError`` it raised."""
    try:
        return rawjson.loads_search(raw)
    except ValueError as exc:
        return exc


def _splices(state: ProxyState, plan: Plan) -> bool:
    """Whether the answer to ``plan`` may be written from the upstream's bytes
    (:mod:`neardup.proxy.grouping.spliced_page`): the client gets the whole ``_source`` as it
    is, in compact JSON, and the grouping is on signatures."""
    settings = plan.settings
    return hitscan.COMPILED and state.config.proxy.splice_pages and plan.channel == "_source" \
        and plan.filter is None and not plan.pretty and settings.source is None and settings.mode in ESTIMATORS


def _spliced_answer(state: ProxyState, incoming: Incoming, plan: Plan, halves: list[tuple[int, int]],
                    rounds: list[tuple[int, Any, bytes, Any]]) -> web.Response | None:
    """The answer written from the first window's bytes, or None when it is not the usual one."""
    window: list[spliced_page.Round] = []
    for (_, size), (status, _, raw, _) in zip(halves, rounds):
        scan = hitscan.scan(raw) if status == 200 else None
        if scan is None:
            return None
        window.append(spliced_page.Round(raw, scan, size))
    settings = plan.settings
    mode: SignatureMode = "containment" if settings.mode == "containment" else "resemblance"

    def summarize(page: collapse.Page, hits: int, fingerprinted: int) -> dict[str, Any]:
        summary = collapse.summary(page, settings.threshold, settings.mode, hits, fingerprinted, True)
        missing_fingerprints.summarize(summary, plan, [])
        return summary

    written = spliced_page.spliced_page(window, plan.start, plan.size, settings.threshold, mode, plan.total_as_int,
                                        state.algorithms, summarize)
    if written is None:
        return None
    body, page = written
    exchange.record(state, incoming, page.collapsed)
    return exchange.upstream_response(incoming, 200, rounds[0][1], body)


async def _together(fetches: list[Any]) -> list[Any]:
    """Run the fetches at once; every one finishes (no request left running unobserved), and
    the first failure, in the order given, is raised."""
    results = await asyncio.gather(*fetches, return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return results


async def _refused(incoming: Incoming, status: int, upstream_headers: Any,
                   raw: bytes) -> web.StreamResponse:
    """The answer when the first request of a collapsed search (or a later ``_msearch`` batch
    refused for a client's own search in it) is not answered 200: to a client error (4xx but
    429) Elasticsearch's answer to the original request, so the client sees its own error, not
    one about the rewrite; anything else (429, 5xx) as the upstream sent it."""
    if _client_error(status):
        return await exchange.pass_through(incoming, f"upstream_{status}")
    return _raw_response(incoming, status, upstream_headers, raw)


def _client_error(status: int) -> bool:
    """A refusal for what the request holds (4xx), not a passing condition (429: too busy)."""
    return 400 <= status < 500 and status != 429


def _raw_response(incoming: Incoming, status: int, upstream_headers: Any, raw: bytes) -> web.Response:
    incoming.request[OUTCOME] = f"upstream_{status}"
    return exchange.upstream_response(incoming, status, upstream_headers, raw)


# -- _msearch -------------------------------------------------------------------------------
async def msearch(state: ProxyState, request: web.Request, raw_path: str, query: str,
                  controls: Controls) -> web.StreamResponse:
    incoming = await receive(request, raw_path, query, state.config.proxy.max_body_bytes)
    content_type = request.headers.get("Content-Type")
    if incoming.raw_body and not content_type:
        return await exchange.pass_through(incoming, "no_content_type")   # Elasticsearch answers 406
    if content_type and not framing.is_ndjson(content_type):
        return await exchange.pass_through(incoming, "non_json_body")
    params = split_query(query)
    if not _accepts_json(request, params):
        return await exchange.pass_through(incoming, "non_json_accept")
    if any(has_invalid_escape(raw) for _, _, raw in params):
        return await exchange.pass_through(incoming, "invalid_parameter")
    try:
        client_filter = filter_path.parse(next((v for n, v, _ in params if n == "filter_path"), ""),
                                          drop_empty=state.upstream.engine.is_opensearch)
    except filter_path.UnsupportedFilterPath:
        return await exchange.pass_through(incoming, "unsupported_filter_path")
    try:
        items = _parse_msearch(incoming.body, params, controls, state, index_of(raw_path))
    except ValueError:
        return await exchange.pass_through(incoming, "unparsable_body")
    if not any(item.plan for item in items):
        return await exchange.pass_through(incoming, "nothing_to_collapse")
    try:
        await pushdown.mark(state, incoming, items)
        return await _collapse_many(state, incoming, items, params, client_filter)
    except errors.ProxyError:
        raise
    except Exception as exc:  # noqa: BLE001 - fail open on anything unexpected
        return await exchange.fail_open(state, incoming, exc)


def _parse_msearch(body: bytes, params: list[tuple[str, str, str]], controls: Controls,
                   state: ProxyState, path_index: str) -> list[Item]:
    if not body.endswith(b"\n"):
        raise ValueError("not terminated by a newline")  # Elasticsearch refuses it
    lines = body.split(b"\n")
    lines.pop()
    if len(lines) % 2:
        raise ValueError("odd number of lines")
    item_params = [p for p in params if p[0] in _MSEARCH_ITEM_PARAMS]
    items = []
    for k in range(0, len(lines), 2):
        header = jsonio.loads_request(lines[k]) if lines[k].strip() else {}
        search_body = jsonio.loads_request(lines[k + 1])   # an empty line is refused upstream
        if not isinstance(header, dict) or not isinstance(search_body, dict):
            raise ValueError("msearch line is not an object")
        index = header.get("index", path_index)
        index = ",".join(map(str, index)) if isinstance(index, list) else str(index)
        settings = resolve(controls, state.config.collapse, index, state.config.tfidf.threshold)
        plan = None
        if settings.enabled:
            planned = plan_search(search_body, item_params, settings, state.config.collapse.max_window,
                                  state.upstream.engine.is_opensearch)
            if isinstance(planned, Plan) and planned.filter is None:
                plan = planned
        item = Item(lines[k].rstrip(b"\r") or b"{}", lines[k + 1], plan, index=index, header_names=tuple(header))
        if plan is not None:
            item.window = Window(plan)
            item.pending = (0, plan.first_window())
            item.probe = plan.needs_probe
        else:
            item.original = True
        items.append(item)
    return items


async def _collapse_many(state: ProxyState, incoming: Incoming, items: list[Item],
                         params: list[tuple[str, str, str]],
                         client_filter: filter_path.FilterPath | None) -> web.StreamResponse:
    request = incoming.request
    content_type = request.headers.get("Content-Type") or \
        framing.ndjson_content_type_for(request.headers.get("Accept"), state.upstream.engine.reads_compatible_with)
    headers = exchange.upstream_headers(request, content_type)
    upstream_query = "&".join(raw for name, _, raw in params if name != "filter_path")
    path_qs = incoming.raw_path + ("?" + upstream_query if upstream_query else "")
    first: dict[str, Any] | None = None
    first_headers = None
    took = 0
    pretty = wants_pretty(params)
    budget = missing_fingerprints.budget(state)
    while True:
        batch = [item for item in items if item.result is None and (item.original or item.pending)]
        if not batch:
            break
        lines = []
        for item in batch:
            if item.original:
                lines += [item.header, item.body]
            elif item.pushdown:
                lines += [item.header, pushdown.item_body(state, item)]
            else:
                assert item.plan is not None and item.pending is not None
                _, body = probe_request(item.plan) if item.probe else round_request(item.plan, *item.pending)
                lines += [item.header, jsonio.dumps(body)]
        status, upstream_headers, raw = await exchange.fetch(state, incoming, path_qs, headers,
                                                     b"\n".join(lines) + b"\n")
        if status != 200:
            # A batch that carries a client's own search (its first round, pushed down or as the
            # fallback: the client's body, resized) may be refused for what that body holds, e.g.
            # a check Elasticsearch makes across the whole request: its answer to the client's
            # request is the answer, as for a refused first batch. Only the proxy's own tail
            # rounds refused means collapsing failed.
            # A 429 or 5xx of a later batch is no word on the client's request: fail open (it
            # is sent again as it came).
            own = _client_error(status) and any(_carries_own_search(item) for item in batch)
            if first is None or own:
                return await _refused(incoming, status, upstream_headers, raw)
            raise exchange.FailOpen(f"upstream answered {status} to a tail round")
        reply = rawjson.loads_msearch(raw)
        responses = reply.get("responses") if isinstance(reply, dict) else None
        if not isinstance(responses, list) or len(responses) != len(batch):
            raise exchange.FailOpen("msearch response does not hold one response per search")
        if first is None:
            first, first_headers = reply, upstream_headers
        took += reply.get("took", 0) if isinstance(reply.get("took"), int) else 0
        for item, answer in zip(batch, responses):
            if item.pushdown:  # answered, or back to the window path for the next round
                pushdown.take_answer(state, incoming, item, answer)
            else:
                await _advance_item(state, incoming, item, answer, budget)
        await result_window.extend_items(state, request, batch)   # deep pages: extend or 400
    collapsed = 0
    results = []
    for item in items:
        if item.window is not None and item.result is None:
            annotate_page(item.window, item.groups, state.algorithms.read)
            item.result = finish(item.window, item.groups, item.fingerprinted)
            missing_fingerprints.summarize(item.result[collapse.SUMMARY_KEY], item.window.plan, item.window.hits)
            collapsed += item.result[collapse.SUMMARY_KEY]["collapsed"]
        results.append(item.result)
    assert first is not None
    exchange.record(state, incoming, collapsed)
    response = {**first, "took": took, "responses": results}
    return exchange.respond(incoming, 200, first_headers, apply_filter(client_filter, response), pretty)


def _carries_own_search(item: Item) -> bool:
    return item.original or item.pushdown or (not item.probe and item.pending is not None and item.pending[0] == 0)


async def _advance_item(state: ProxyState, incoming: Incoming, item: Item, answer: Any,
                        budget: missing_fingerprints.Budget) -> None:
    """Take one search's answer of a round: final, or schedule its next round or its fallback."""
    if item.original:
        item.result = answer
        return
    assert item.window is not None and item.plan is not None and item.pending is not None
    ok = isinstance(answer, dict) and answer.get("status", 200) == 200 and "error" not in answer
    if not ok:
        # Let Elasticsearch answer the client's own search (its error, or its success).
        item.original, item.window, item.pending = True, None, None
        return
    if item.probe:   # Elasticsearch takes the client's window: now the first round
        item.probe = False
        return
    window, plan = item.window, item.plan
    window.add_round(answer, item.pending[1])
    item.groups, item.fingerprinted = await missing_fingerprints.group(state, incoming, plan, window.hits, budget)
    item.pending = window.next_round(len(item.groups))
