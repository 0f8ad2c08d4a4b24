"""Folding near-duplicate hits into groups: pure functions from hits and fingerprints to a page.

Given the hits of a result window ``h_0 … h_{W-1}`` in rank order and their fingerprints,

* two hits are *similar* when their estimated similarity (MinHash resemblance, or containment,
  of their shingle sets) is at least the threshold ``t``: ``fingerprint.similar_pairs``;
* groups are the connected components of the similarity graph over the window (transitive:
  ``a ~ b`` and ``b ~ c`` put ``a``, ``b``, ``c`` together): ``fingerprint.group_labels``, whose
  label is the smallest member index, i.e. the best-ranked hit of the group, its *representative*;
* groups are ordered by the rank of their representative, and the page ``[from, from+size)`` is
  counted in groups;
* a hit without a fingerprint of the current scheme version is a group of its own, unless one
  computed at query time is :func:`supply`-ed for it
  (:mod:`neardup.proxy.handlers.missing_fingerprints`).

Each representative stays where it is; the other members go, in rank order, under its
``inner_hits.neardup`` in Elasticsearch's collapse format, and it gets its group key in
``fields["neardup.group"]`` as native ``collapse`` puts the collapse field there.

Anything of unexpected shape raises :class:`CollapseError`; the caller then fails open.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from msgspec import Raw

from neardup.fingerprint.similarity import Mode as SignatureMode
from neardup.proxy.grouping import tfidf_groups
from neardup.proxy.transport.rawjson import source_fingerprint

GROUP_FIELD = "neardup.group"
INNER_HITS_NAME = "neardup"
SUMMARY_KEY = "neardup"
FINGERPRINT_FIELD = "neardup"
#: The fingerprint keys grouping needs (fetched as ``neardup.<key>`` through ``fields`` when
#: the client does not get the whole ``_source``): scheme version, signature, shingle count.
FINGERPRINT_KEYS = ("v", "sig", "n")

Mode = Literal["resemblance", "containment", "tfidf"]
Channel = Literal["_source", "fields"]


class CollapseError(ValueError):
    """The upstream response does not have the shape collapsing expects."""


#: Stands in for an absent ``fields`` / ``inner_hits`` in shape checks (never mutated).
_OBJECT: dict[str, Any] = {}


#: (positions of the objects that hold a usable fingerprint, their signatures (M, K) uint64,
#: their shingle counts (M,)).
Signatures = tuple[np.ndarray, np.ndarray, np.ndarray]
#: ``read(stored fingerprint objects or None) -> Signatures`` (:mod:`neardup.proxy.grouping.fingerprints`).
Reader = Callable[[Sequence[Any]], Signatures]
#: ``similar_pairs(signatures, counts, threshold, mode) -> (i, j, sim)`` (fingerprint package).
PairFinder = Callable[[np.ndarray, np.ndarray, float, SignatureMode], tuple[np.ndarray, np.ndarray, np.ndarray]]
#: ``group_labels(n, i, j) -> labels`` (fingerprint package).
Labeller = Callable[[int, np.ndarray, np.ndarray], np.ndarray]


@dataclass(frozen=True)
class Algorithms:
    read: Reader
    similar_pairs: PairFinder
    group_labels: Labeller
    #: the TF-IDF version whose stored vectors ``tfidf`` mode compares (:mod:`neardup.proxy.grouping.tfidf_groups`)
    tfidf_version: str = ""
    #: the scheme version and minhash count ``read`` accepts, when it is
    #: :func:`neardup.fingerprint.read_signatures`' (so that stored texts may be checked and decoded
    #: without it: :mod:`neardup.proxy.grouping.spliced_page`); empty: only ``read`` knows
    version: str = ""
    num_perm: int = 0


def stored_fingerprint(hit: dict[str, Any], channel: Channel) -> Any:
    """The stored fingerprint object of a hit, from ``_source`` or rebuilt from ``fields``."""
    if channel == "_source":
        source = hit.get("_source")
        if type(source) is Raw:   # as the upstream sent it (proxy.rawjson): read three fields
            return source_fingerprint(source)
        return source.get(FINGERPRINT_FIELD) if isinstance(source, dict) else None
    fields = hit.get("fields")
    if not isinstance(fields, dict):
        return None
    values: dict[str, Any] = {key: fields.get(f"{FINGERPRINT_FIELD}.{key}") for key in FINGERPRINT_KEYS}
    if not all(isinstance(values[k], list) and len(values[k]) == 1 for k in ("v", "sig", "n")):
        return None
    return {"v": values["v"][0], "sig": values["sig"][0], "n": values["n"][0]}


class WindowHits(list):
    """The hits of a result window (:attr:`neardup.proxy.handlers.search_plan.Window.hits`), with what :func:`group`
    read from them, so that a tail round reads only the hits it appended and
    :func:`neardup.proxy.grouping.similarity.annotate` reuses the signatures instead of reading the page's
    fingerprints a second time. A plain list works too (everything is read on every call)."""

    __slots__ = ("read_state", "computed", "looked_up", "skipped")

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.read_state: _ReadState | None = None
        #: fingerprint objects computed at query time, by position, read instead of the stored
        #: ones (:func:`supply`)
        self.computed: dict[int, Any] = {}
        self.looked_up = 0    # the hits before this position had a fingerprint looked for
        self.skipped = 0      # hits left without one: a bound of the request was reached


@dataclass
class _ReadState:
    channel: Channel
    read: Reader
    hits: list[Any]            # the hits read (the same objects, in order)
    stored: list[Any]          # their stored fingerprint objects
    signatures: Signatures | None = None   # ``read(stored)``, once grouping needed it


def _check_and_read(hits: Sequence[Any], start: int, channel: Channel, stored: list[Any] | None) -> None:
    """Shape-check ``hits[start:]`` and append their stored fingerprints to ``stored`` (None:
    only check); a fingerprint computed at query time stands in for the stored one."""
    by_source = channel == "_source"
    read_raw = source_fingerprint
    computed = hits.computed if type(hits) is WindowHits else None
    for position in range(start, len(hits)):
        hit = hits[position]
        if not isinstance(hit, dict):
            raise CollapseError(f"hit {position} is not an object")
        get = hit.get
        # The proxy adds to these: they must be objects.
        fields, inner = get("fields", _OBJECT), get("inner_hits", _OBJECT)
        if not isinstance(fields, dict) or not isinstance(inner, dict):
            key = "fields" if not isinstance(fields, dict) else "inner_hits"
            raise CollapseError(f"hit {position} has a {key} that is not an object")
        if stored is None:
            continue
        if computed and position in computed:
            stored.append(computed[position])
            continue
        if by_source:
            source = get("_source")
            if type(source) is Raw:   # as the upstream sent it (proxy.rawjson): read three fields
                stored.append(read_raw(source))
                continue
        stored.append(stored_fingerprint(hit, channel))


def _window_read(hits: Sequence[Any], channel: Channel, read: Reader) -> tuple[_ReadState | None, list[Any]]:
    """The reusable read state of ``hits`` (None for a plain list) and the stored fingerprints
    of every hit, reading (and shape-checking) only the hits not read before."""
    state = hits.read_state if type(hits) is WindowHits else None
    if state is not None and state.channel == channel and state.read is read \
            and len(state.hits) <= len(hits) and hits[:len(state.hits)] == state.hits:
        if len(state.hits) < len(hits):
            added: list[Any] = []
            _check_and_read(hits, len(state.hits), channel, added)
            state.stored += added
            state.hits = list(hits)
            state.signatures = None
        return state, state.stored
    stored: list[Any] = []
    _check_and_read(hits, 0, channel, stored)
    if type(hits) is WindowHits:
        state = hits.read_state = _ReadState(channel, read, list(hits), stored)
    return state, stored


def supply(hits: WindowHits, fingerprints: dict[int, Any]) -> None:
    """Read ``fingerprints`` (position → fingerprint object, as stored under ``neardup``) for
    those hits from now on, instead of what the hits hold; the next :func:`group` reads them."""
    hits.computed.update(fingerprints)
    state = hits.read_state
    if state is not None and fingerprints:
        for position, value in fingerprints.items():
            if position < len(state.stored):
                state.stored[position] = value
        state.signatures = None


def window_signatures(hits: Sequence[Any], channel: Channel, read: Reader) -> Signatures | None:
    """What the last :func:`group` of ``hits`` read (``read`` of every hit's stored fingerprint),
    if it still holds for these hits, channel and reader; else None."""
    state = hits.read_state if type(hits) is WindowHits else None
    if state is None or state.signatures is None or state.channel != channel or state.read is not read \
            or len(state.hits) != len(hits) or hits[:] != state.hits:
        return None
    return state.signatures


def group(hits: Sequence[Any], channel: Channel, threshold: float, mode: Mode,
          algorithms: Algorithms) -> tuple[list[list[int]], int]:
    """Groups of hit positions, each in rank order, the groups ordered by their first member;
    and how many hits had a usable fingerprint. Hits without one are groups of one.
    """
    n = len(hits)
    if mode == tfidf_groups.MODE:  # TF-IDF cosine of the stored vectors instead of signatures
        _check_and_read(hits, 0, channel, None)
        fingerprinted, i, j = tfidf_groups.vector_pairs([tfidf_groups.stored_vector(hit, channel) for hit in hits],
                                                 threshold, algorithms.tfidf_version)
    else:
        state, stored = _window_read(hits, channel, algorithms.read)
        read = state.signatures if state is not None else None
        if read is None:
            read = algorithms.read(stored)
            if state is not None:
                state.signatures = read
        return group_signatures(n, read, threshold, mode, algorithms)
    return _groups_of(n, fingerprinted, i, j, algorithms)


def group_signatures(n: int, read: Signatures, threshold: float, mode: SignatureMode,
                     algorithms: Algorithms) -> tuple[list[list[int]], int]:
    """:func:`group` of ``n`` hits whose fingerprints were read already (``read``: what
    ``algorithms.read`` gave for them)."""
    fingerprinted, signatures, counts = read
    if len(fingerprinted) < 2:
        return [[position] for position in range(n)], len(fingerprinted)
    i, j, _ = algorithms.similar_pairs(signatures, counts, threshold, mode)
    return _groups_of(n, fingerprinted, i, j, algorithms)


def _groups_of(n: int, fingerprinted: Any, i: Any, j: Any, algorithms: Algorithms) -> tuple[list[list[int]], int]:
    """The groups of ``n`` hits given the similar pairs ``(i, j)`` among the rows
    ``fingerprinted`` (their positions)."""
    if len(fingerprinted) < 2 or not len(i):   # nothing to fold: every hit is its own group
        return [[position] for position in range(n)], len(fingerprinted)
    local = np.asarray(algorithms.group_labels(len(fingerprinted), np.asarray(i), np.asarray(j))).tolist()
    # A label (local label: the smallest local member index, mapped back to a position) is its
    # group's smallest position, so each group starts as [label] and the other members (few:
    # the folded hits) are appended in rank order, ``fingerprinted`` being ascending. On lists:
    # for a window of tens of hits, NumPy's cost per call would be most of the work.
    members = [[position] for position in range(n)]
    first = [True] * n
    rows = np.asarray(fingerprinted).tolist()
    for row, position in enumerate(rows):
        label = rows[local[row]]
        if label != position:
            members[label].append(position)
            first[position] = False
    return [group for group, is_first in zip(members, first) if is_first], len(rows)


def group_key(hit: dict[str, Any]) -> str:
    """A group's key: ``<_index>/<_id>`` of its representative (index names cannot hold ``/``)."""
    return f"{hit.get('_index', '')}/{hit.get('_id', '')}"


def _max_score(hits: Sequence[dict[str, Any]]) -> float | None:
    scores = [score for h in hits if isinstance(score := h.get("_score"), (int, float))]
    return max(scores) if scores else None


def strip_fields(hit: dict[str, Any], added: Sequence[str]) -> None:
    """Remove the ``fields`` entries the proxy asked for and the client did not (in place);
    a ``fields`` object left empty goes too, as Elasticsearch leaves it out when empty."""
    if not added:
        return
    fields = hit.get("fields")
    if isinstance(fields, dict):
        for name in added:
            fields.pop(name, None)
        if not fields:
            del hit["fields"]


def suggestion_options(response: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every option of every suggestion of ``response`` (any name, ``typed_keys`` included). A
    completion suggester's options are hits: Elasticsearch fetches them with the search's
    ``fields`` (and native collapse's field), so what the proxy adds there comes back there."""
    suggest = response.get("suggest")
    for entries in suggest.values() if isinstance(suggest, dict) else ():
        for entry in entries if isinstance(entries, list) else ():
            options = entry.get("options") if isinstance(entry, dict) else None
            for option in options if isinstance(options, list) else ():
                if isinstance(option, dict):
                    yield option


@dataclass(frozen=True)
class Page:
    hits: list[dict[str, Any]]
    groups: int            # groups on the page
    collapsed: int         # hits folded under inner_hits on the page
    window_groups: int     # groups in the whole window


def build_page(hits: Sequence[dict[str, Any]], groups: list[list[int]], start: int, size: int,
               total_as_int: bool = False) -> Page:
    """The page ``groups[start:start+size]`` with members folded under their representative.

    Mutates the representative hit dicts (adds ``inner_hits`` and ``fields``); the caller owns them.
    """
    page: list[dict[str, Any]] = []
    collapsed = 0
    for members in groups[start:start + size]:
        top = hits[members[0]]
        others = [hits[m] for m in members[1:]] if len(members) > 1 else []
        collapsed += len(others)
        total: Any = len(others) if total_as_int else {"value": len(others), "relation": "eq"}
        set_field(top, GROUP_FIELD, [group_key(top)])
        inner = top.get("inner_hits")
        inner = dict(inner) if isinstance(inner, dict) else {}
        inner[INNER_HITS_NAME] = {"hits": {"total": total, "max_score": _max_score(others) if others else None,
                                           "hits": others}}
        top["inner_hits"] = inner
        page.append(top)
    return Page(page, len(page), collapsed, len(groups))


def summary(page: Page, threshold: float, mode: Mode, window: int, fingerprinted: int,
            complete: bool) -> dict[str, Any]:
    """The top-level ``neardup`` object of a collapsed response."""
    return {
        "threshold": threshold,
        "mode": mode,
        "groups": page.groups,
        "collapsed": page.collapsed,
        "window": window,
        "window_groups": page.window_groups,
        "fingerprinted": fingerprinted,
        "complete": complete,
        "pushdown": False,   # window collapsing (proxy.pushdown: native collapse on cluster ids)
    }


def set_field(hit: dict[str, Any], name: str, value: list[Any]) -> None:
    """``hit["fields"][name] = value`` in a new ``fields`` object (the hit's own may be shared
    with another response part), creating ``fields`` if the hit has none."""
    fields = hit.get("fields")
    hit["fields"] = {**(fields if isinstance(fields, dict) else {}), name: value}
