"""The push-down path of collapsed searches: native ``collapse`` on stored cluster ids (I/O).

The imperative shell around :mod:`proxy.pushdown`. For a planned search (:class:`proxy.search.Plan`)
of an index expression, the proxy needs two facts about the indices behind it:

* the mapping ``_meta`` of every concrete index (``GET /<indices>/_mapping``), for
  :func:`proxy.pushdown.clusters_match` against the request's threshold, mode and scheme;
* whether some document has no ``neardup.cluster`` (``_count`` of
  :func:`proxy.pushdown.missing_clusters_query`; it must be 0).

Both are fetched concurrently, with the client's own credentials, and cached per worker for
:data:`CHECK_SECONDS` per (index expression, credentials): in steady state a search costs no
extra round trip. Concurrent searches on a cold entry share one check. A check that fails
(403 without ``view_index_metadata``, 404, a broken connection) means "window path".

When the facts allow it, the search goes upstream once, as native collapse
(:func:`proxy.pushdown.pushdown_body`), and the answer is rewritten into the window-collapsing
format (:func:`proxy.pushdown.pushdown_response`): each collapsed member gets its estimated
similarity to the kept hit (:func:`proxy.similarity.annotate`) and the fingerprint fields the
proxy added are removed, as on the window path. If that answer is not usable (an error status, a
document without a cluster id written since the check) the cached facts are dropped and the
window path answers the search instead.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from aiohttp import web

from neardup.fingerprint import scheme_version
from neardup.proxy import collapse, jsonio, pushdown, similarity
from neardup.proxy import http as httpx
from neardup.proxy.search import Plan, apply_filter, round_request, strip_added_beyond_hits

if TYPE_CHECKING:
    from neardup.proxy.app import ProxyState
    from neardup.proxy.searching import Incoming, Item

log = logging.getLogger("neardup.proxy")

#: How long the facts about an index expression are reused.
CHECK_SECONDS = 5.0
#: At most this many index expressions are remembered per worker (the oldest go first).
MAX_ENTRIES = 1024
#: Headers of the client's that identify who asks (the facts are remembered per identity).
_IDENTITY_HEADERS = ("authorization", "es-security-runas-user")
_DROPPED_HEADERS = ("content-length", "content-encoding", "accept-encoding", "content-type", "accept")


@dataclass(frozen=True)
class Facts:
    """What the push-down decision needs to know about the indices of an index expression."""

    metas: dict[str, Any]     # concrete index -> its mapping's ``_meta`` (None when it has none)
    complete: bool            # every document holds a cluster id

    def allow(self, threshold: float, mode: str, version: str) -> bool:
        return self.complete and pushdown.clusters_match(self.metas, threshold, mode, version)


class FactsCache:
    """Facts per key for :data:`CHECK_SECONDS`; concurrent askers of a cold key share one check."""

    def __init__(self, seconds: float = CHECK_SECONDS) -> None:
        self.seconds = seconds
        self._entries: dict[tuple[str, str], tuple[float, asyncio.Future[Facts | None]]] = {}

    async def get(self, key: tuple[str, str], check: Callable[[], Awaitable[Facts | None]]) -> Facts | None:
        now = time.monotonic()
        entry = self._entries.get(key)
        if entry is None or now - entry[0] >= self.seconds:
            if len(self._entries) >= MAX_ENTRIES:
                for old in sorted(self._entries, key=lambda k: self._entries[k][0])[:MAX_ENTRIES // 4]:
                    del self._entries[old]
            entry = (now, asyncio.ensure_future(check()))
            self._entries[key] = entry
        return await asyncio.shield(entry[1])

    def forget(self, key: tuple[str, str]) -> None:
        self._entries.pop(key, None)


def _identity(request: web.Request) -> str:
    values = "\n".join(f"{name}={value}" for name in _IDENTITY_HEADERS
                       for value in request.headers.getall(name, []))
    return hashlib.sha256(values.encode()).hexdigest()[:16] if values else ""


def _check_headers(request: web.Request) -> list[tuple[str, str]]:
    headers = httpx.request_headers(request.headers, drop=_DROPPED_HEADERS)
    return headers + [("Content-Type", "application/json"), ("Accept", "application/json")]


async def _call(state: ProxyState, method: str, path_qs: str, headers: list[tuple[str, str]],
                body: bytes | None) -> Any:
    """The parsed JSON answer of one upstream call, or None when it is not a 200."""
    reply = await state.upstream.exchange(method, path_qs, headers, body)
    if reply.status != 200:
        return None
    return jsonio.loads(httpx.gunzip_response(reply.body, reply.headers.get("Content-Encoding")))


async def _check(state: ProxyState, request: web.Request, index: str) -> Facts | None:
    target = quote(index or "_all", safe=",*")
    headers = _check_headers(request)
    try:
        mappings, count = await asyncio.gather(
            _call(state, "GET", f"/{target}/_mapping", headers, None),
            _call(state, "POST", f"/{target}/_count", headers,
                  jsonio.dumps({"query": pushdown.missing_clusters_query()})))
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
    if pushdown.refusal(plan.body, params, index) is not None:
        return False
    key = (index, _identity(request))
    facts = await state.pushdown_facts.get(key, lambda: _check(state, request, index))
    if facts is None or not facts.complete:   # the usual answer: no clusters; decided at once
        return False
    settings = plan.settings
    return facts.allow(settings.threshold, settings.mode, scheme_version(state.config.fingerprint))


def forget(state: ProxyState, request: web.Request, index: str) -> None:
    state.pushdown_facts.forget((index, _identity(request)))


def upstream_request(plan: Plan, max_window: int) -> tuple[str, dict[str, Any], int]:
    """(query string, body, members per group) of the pushed-down search."""
    qs, body = round_request(plan, 0, plan.size)  # the first round: the client's options + fingerprint fields
    inner_size = pushdown.inner_size_for(plan.size, max_window)
    return qs, pushdown.pushdown_body(body, plan.start, plan.size, inner_size, plan.params), inner_size


def rewrite(state: ProxyState, plan: Plan, answer: Any, inner_size: int) -> dict[str, Any]:
    """The client's response from Elasticsearch's collapsed answer (raises ``CollapseError``)."""
    response = pushdown.pushdown_response(answer, plan.body, plan.settings.threshold, plan.settings.mode,
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
    from neardup.proxy import searching
    from neardup.proxy.routes import index_of

    request = incoming.request
    index = index_of(incoming.raw_path)
    if not await allowed(state, request, index, plan, plan.params):
        return None
    qs, body, inner_size = upstream_request(plan, state.config.collapse.max_window)
    content_type = request.headers.get("Content-Type")
    headers = searching._upstream_headers(request, content_type if httpx.is_json(content_type)
                                          else httpx.json_content_type_for(request.headers.get("Accept")))
    status, upstream_headers, raw = await searching._fetch(
        state, incoming, incoming.raw_path + ("?" + qs if qs else ""), headers, jsonio.dumps(body))
    try:
        if status != 200:
            raise collapse.CollapseError(f"upstream answered {status}")
        response = rewrite(state, plan, jsonio.loads(raw), inner_size)
    except ValueError as exc:  # CollapseError, or a body that is not JSON
        log.info("cluster push-down not usable for %s (%s); collapsing the window", index or "_all", exc)
        forget(state, request, index)
        return None
    searching._record(state, incoming, response[collapse.SUMMARY_KEY]["collapsed"])
    request[searching.OUTCOME] = "collapsed:pushdown"  # metrics and access log tell the paths apart
    return searching._respond(incoming, 200, upstream_headers, apply_filter(plan.filter, response), plan.pretty)


# -- _msearch ---------------------------------------------------------------------------------
async def mark(state: ProxyState, incoming: Incoming, items: Sequence[Item]) -> None:
    """Set ``item.pushdown`` on the planned items of an msearch that can be pushed down (the
    item's index and header keys as :func:`proxy.searching._parse_msearch` read them)."""
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
                              pushdown.inner_size_for(item.plan.size, state.config.collapse.max_window))
    except collapse.CollapseError as exc:
        log.info("cluster push-down not usable in an msearch (%s); collapsing the window", exc)
        forget(state, incoming.request, item.index)
