"""Pages that ``collapse.max_window`` hits cannot fill: extend the window, or refuse the page.

Pure decisions over a :class:`neardup.proxy.handlers.search_plan.Window` at its limit that holds
``g`` groups, fewer than the ``n = from + size`` the page needs, while more hits exist:

* with ``collapse.deep_pages = "extend"`` the window's limit grows to the result window ``R``
  (the smallest ``index.max_result_window`` of the searched indices: the engine refuses any
  round ending past it) and the rounds go on doubling, so a page of up to ``g(R)`` groups,
  those of the first ``R`` hits, is complete;
* past that, or with ``"refuse"`` past ``max_window``, the page is refused as Elasticsearch
  refuses a ``from + size`` over its result window (400,
  :func:`~neardup.proxy.transport.errors.collapsed_window_too_large`): a short or empty page
  would look like the end of the results.

A page short only because the results run out is complete and never refused
(:meth:`~neardup.proxy.handlers.search_plan.Window.complete`).
"""

from __future__ import annotations

from dataclasses import dataclass

from neardup.config import DeepPages
from neardup.proxy.handlers.search_plan import Window

#: The setting that bounds an extended window, and the proxy's own bound otherwise.
RESULT_WINDOW_SETTING = "index.max_result_window"
MAX_WINDOW_KEY = "collapse.max_window"


@dataclass(frozen=True)
class TooDeep:
    """Why a page is refused: its window holds ``hits`` hits (the limit ``bound`` names) with
    ``groups`` groups, fewer than the ``wanted`` = ``from + size``."""

    wanted: int
    groups: int
    hits: int
    bound: str          # RESULT_WINDOW_SETTING or MAX_WINDOW_KEY


def needs_more(window: Window, groups: int) -> bool:
    """The window is final (no next round) but its page is not complete."""
    return window.next_round(groups) is None and not window.complete(groups)


def deeper(window: Window, groups: int, policy: DeepPages, result_window: int) -> tuple[int, int] | TooDeep:
    """For a window that :func:`needs_more`: the next round after extending its limit to
    ``result_window`` (the window is changed), or why the page is refused."""
    if policy == "extend" and result_window > window.limit:
        window.limit = result_window
        following = window.next_round(groups)
        assert following is not None
        return following
    bound = RESULT_WINDOW_SETTING if policy == "extend" else MAX_WINDOW_KEY
    return TooDeep(window.plan.wanted_groups, groups, window.fetched, bound)
