"""Deep pages of the window path: the result window of an index expression, looked up (I/O).

When a window at ``collapse.max_window`` hits cannot fill its page and more hits exist
(:func:`neardup.proxy.handlers.deep_pages.needs_more`), the page is extended or refused
(:func:`neardup.proxy.handlers.deep_pages.deeper`). Extending needs the searched indices' result
window, the smallest ``index.max_result_window`` among them (past it the engine refuses a round,
or answers without that index's shards), asked with the client's credentials::

    GET /<indices>/_settings/index.max_result_window?include_defaults=true&flat_settings=true

and remembered per worker and per (index expression, credentials)
(:class:`neardup.proxy.handlers.cluster_facts.FactsCache`), so that only the first deep page of
an index in a while pays the call; pages that ``collapse.max_window`` fills never ask. A lookup
that fails (403 without the ``monitor`` or ``view_index_metadata`` privilege, an index of a remote
cluster, a broken connection) gives the engines' default, :data:`DEFAULT`: a round past a lower
real limit is then refused upstream and the search fails open.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any
from urllib.parse import quote

from aiohttp import web

from neardup.proxy.handlers import deep_pages
from neardup.proxy.handlers.cluster_calls import call_json, check_headers, identity
from neardup.proxy.handlers.context import OUTCOME, Item, ProxyState
from neardup.proxy.handlers.search_plan import Window
from neardup.proxy.transport import errors

log = logging.getLogger("neardup.proxy")

#: ``index.max_result_window`` when it is not set (Elasticsearch's and OpenSearch's default).
DEFAULT = 10_000
_SETTING = deep_pages.RESULT_WINDOW_SETTING


def smallest(answer: Any) -> int | None:
    """The smallest ``index.max_result_window`` in an answer to the ``_settings`` call (set,
    else default, per index); None when it holds no index or an unreadable value."""
    if not isinstance(answer, dict) or not answer:
        return None
    values = []
    for entry in answer.values():
        if not isinstance(entry, dict):
            return None
        found = next((part[_SETTING] for part in (entry.get("settings"), entry.get("defaults"))
                      if isinstance(part, dict) and _SETTING in part), DEFAULT)
        try:
            values.append(int(found))
        except (TypeError, ValueError):
            return None
    return min(values)


async def _check(state: ProxyState, request: web.Request, index: str) -> int | None:
    target = quote(index or "_all", safe=",*")
    path = f"/{target}/_settings/{_SETTING}?include_defaults=true&flat_settings=true"
    try:
        return smallest(await call_json(state.upstream, "GET", path, check_headers(request), None))
    except Exception as exc:  # noqa: BLE001 - any failure of the lookup means "the default"
        log.info("result window lookup for %s failed: %s: %s", index or "_all", type(exc).__name__, exc)
        return None


async def lookup(state: ProxyState, request: web.Request, index: str) -> int:
    """The result window of ``index`` (an index expression; "" for all), cached."""
    found = await state.result_windows.get((index, identity(request)), lambda: _check(state, request, index))
    return DEFAULT if found is None else found


async def _deeper(state: ProxyState, request: web.Request, index: str, window: Window,
                  groups: int) -> tuple[int, int] | deep_pages.TooDeep:
    policy = state.config.collapse.deep_pages
    result_window = await lookup(state, request, index) if policy == "extend" else 0
    return deep_pages.deeper(window, groups, policy, result_window)


def _refusal(refused: deep_pages.TooDeep) -> errors.ProxyError:
    return errors.collapsed_window_too_large(refused.wanted, refused.groups, refused.hits, refused.bound)


async def extend(state: ProxyState, request: web.Request, index: str, window: Window,
                 groups: int) -> tuple[int, int]:
    """The next round of a ``_search`` window that :func:`~neardup.proxy.handlers.deep_pages.needs_more`;
    raises the 400 when its page is refused."""
    following = await _deeper(state, request, index, window, groups)
    if isinstance(following, deep_pages.TooDeep):
        request[OUTCOME] = "refused:window_too_large"
        raise _refusal(following)
    return following


async def extend_items(state: ProxyState, request: web.Request, items: Sequence[Item]) -> None:
    """For each ``_msearch`` item on the window path whose window
    :func:`~neardup.proxy.handlers.deep_pages.needs_more`: its next round, or its result the 400
    error, as the engine answers an item past its result window."""
    async def advance(item: Item) -> None:
        assert item.window is not None
        following = await _deeper(state, request, item.index, item.window, len(item.groups))
        if isinstance(following, deep_pages.TooDeep):
            item.result = _refusal(following).body()
        else:
            item.pending = following

    stuck = [item for item in items if item.window is not None and item.result is None and item.pending is None
             and not item.original and deep_pages.needs_more(item.window, len(item.groups))]
    if stuck:
        await asyncio.gather(*(advance(item) for item in stuck))
