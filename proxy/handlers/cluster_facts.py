"""What the push-down needs to know about an index expression, cached per worker.

Two facts decide whether a search can be grouped by Elasticsearch's native ``collapse`` on
stored cluster ids (:mod:`neardup.proxy.handlers.native_collapse`): the mapping ``_meta`` of each
concrete index behind the expression, and whether every document holds a cluster id. They are
checked with upstream calls (:mod:`neardup.proxy.handlers.pushdown`) and remembered here for
:data:`CHECK_SECONDS` per key; concurrent askers of a cold key share one check.

The same cache remembers an expression's result window for pages deeper than
``collapse.max_window`` (:mod:`neardup.proxy.handlers.result_window`), for
:data:`RESULT_WINDOW_SECONDS`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from neardup.proxy.handlers.native_collapse import clusters_match

#: How long the facts about an index expression are reused.
CHECK_SECONDS = 5.0
#: How long an index expression's result window (``index.max_result_window``) is reused: a
#: setting changed by hand, rarely, and asked only for pages past ``collapse.max_window``.
RESULT_WINDOW_SECONDS = 60.0
#: At most this many index expressions are remembered per worker (the oldest go first).
MAX_ENTRIES = 1024

T = TypeVar("T")


@dataclass(frozen=True)
class Facts:
    """What the push-down decision needs to know about the indices of an index expression."""

    metas: dict[str, Any]     # concrete index -> its mapping's ``_meta`` (None when it has none)
    complete: bool            # every document holds a cluster id

    def allow(self, threshold: float, mode: str, version: str) -> bool:
        return self.complete and clusters_match(self.metas, threshold, mode, version)


class FactsCache(Generic[T]):
    """Facts (a :class:`Facts`, or another answer of a check) per key for ``seconds``
    (:data:`CHECK_SECONDS`); concurrent askers of a cold key share one check."""

    def __init__(self, seconds: float = CHECK_SECONDS) -> None:
        self.seconds = seconds
        self._entries: dict[tuple[str, str], tuple[float, asyncio.Future[T]]] = {}

    def get(self, key: tuple[str, str], check: Callable[[], Awaitable[T]]) -> asyncio.Future[T]:
        """The facts of ``key`` to await: a check started now, or the one under way, shielded from
        a cancelled asker; fresh facts already checked are their own settled future, which a
        search awaits without a coroutine or a shield of its own."""
        now = time.monotonic()
        entry = self._entries.get(key)
        if entry is None or now - entry[0] >= self.seconds:
            if len(self._entries) >= MAX_ENTRIES:
                for old in sorted(self._entries, key=lambda k: self._entries[k][0])[:MAX_ENTRIES // 4]:
                    del self._entries[old]
            entry = (now, asyncio.ensure_future(check()))
            self._entries[key] = entry
        return asyncio.shield(entry[1])   # a settled future is returned as it is

    def forget(self, key: tuple[str, str]) -> None:
        self._entries.pop(key, None)
