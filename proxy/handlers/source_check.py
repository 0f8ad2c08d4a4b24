"""``neardup_source=<_id>``: mark the hits of a page that contain a fragment of one document.

The *source* S is a document of the searched index, read with ``GET <index>/_doc/<_id>`` (its
``indexer.fields`` only) before the search is sent: a missing index or document is a 404, a
search of no single index or a source without text a 400, each naming the parameter.
A hit C of the page *contains* the source when the share of S's
shingles found in C reaches σ (``copies.min_share``), and at least F (``copies.min_shared``)
of them::

    containment(S in C) = |S ∩ C| / |S|  ≥  σ,     |S ∩ C| ≥ F

The steps are those of ``neardup copies`` (:mod:`neardup.fingerprint.copies`), on one page: the text
fields of the source and of each hit are joined by newlines and cut into canonical shingles
(``[fingerprint]`` scheme), the hits' shingle sets go into a pseudo-matrix Bloom filter
(``[copies]`` hashes and false-positive rate; rows sized so that one holds about the median hit:
:func:`page_bloom_params`), the filter is queried with the source's shingles (candidates: a
superset, a Bloom filter has no false negatives), and each candidate is verified by exact
containment. Shingles frequent in the index (``copies.max_df``) are not left
out: one page cannot tell them. The source itself, when it is on the page, is not marked.

A hit that contains the source gets ``fields["neardup.contains_source"] = [share]`` (rounded to
4 places); the response's ``neardup`` summary gets ``source``: the ``_id``, its shingle count,
σ, how many hits of the page were checked, the filter's candidates and ``contains``, the number
of hits of the page (representatives and folded members) marked.

The hits' texts come through the plan's channel (:mod:`neardup.proxy.handlers.search_plan`): from ``_source`` when
the client gets it whole, else as ``fields`` added to the request and removed again, so the
client sees exactly what it asked for. Shingling runs on NumPy (the compiled kernels are
switched off around it): the proxy never loads numba.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any
from urllib.parse import quote

import numpy as np
from aiohttp import web

from neardup.fingerprint import Fingerprinter, FingerprintParams, jit
from neardup.fingerprint.bloom import BloomParams
from neardup.fingerprint.copies import build_filter, verify
from neardup.fingerprint.texts import document_texts
from neardup.proxy.grouping import collapse
from neardup.proxy.handlers import search_plan
from neardup.proxy.handlers.context import ProxyState
from neardup.proxy.handlers.exchange import upstream_headers
from neardup.proxy.handlers.params import PARAM_SOURCE, Controls, Settings, SourceDocument
from neardup.proxy.handlers.routes import index_of
from neardup.proxy.transport import errors, framing, jsonio, rawjson

CONTAINS_FIELD = "neardup.contains_source"
SUMMARY_SOURCE_KEY = "source"


async def settings_for(state: ProxyState, request: web.Request, raw_path: str, settings: Settings,
                       controls: Controls) -> Settings:
    """``settings`` with the requested source document read, before the search is sent: a bad
    source is an error whatever the search. 400 when neardup is off for the search (only the
    collapsing path checks hits); see :func:`fetch_source` for the others."""
    if controls.source is None:
        return settings
    if not settings.enabled:
        raise errors.illegal_argument(f"[{PARAM_SOURCE}] needs the proxy's search path, but neardup is "
                                      "off for this search (neardup=off or collapse.enabled = false)")
    fields = tuple(state.config.indexer.fields)
    index, text = await fetch_source(state, request, raw_path, controls.source, fields)
    return dataclasses.replace(settings, source=SourceDocument(controls.source, index, text, fields))


def refuse_in_msearch(controls: Controls) -> None:
    if controls.source is not None:
        raise errors.illegal_argument(f"[{PARAM_SOURCE}] is supported on _search only, not on _msearch")


# -- pure core ------------------------------------------------------------------------------
@lru_cache(maxsize=4)
def _fingerprinter(params: FingerprintParams) -> Fingerprinter:
    return Fingerprinter(params)


def shingle_texts(texts: Sequence[str | None], params: FingerprintParams) -> list[np.ndarray]:
    """Sorted unique shingle hashes of each text (None: no text → empty), on NumPy only."""
    fp = _fingerprinter(params)
    previous = jit.set_enabled(False)   # the proxy must not load numba (fingerprint.jit)
    try:
        return [fp.shingles(fp.canonical_tokens(text)) if text else np.empty(0, dtype=np.uint64)
                for text in texts]
    finally:
        jit.set_enabled(previous)


def page_bloom_params(sizes: Sequence[int], configured: BloomParams) -> BloomParams:
    """Rows sized for a page: the configured k and p*, and m the smallest multiple of 64 bits
    whose designed fill n* holds the median hit (m ≈ median · m_conf / n*_conf), so that a row
    packs about one hit and the screen tells hits apart. (The configured rows, sized for a whole
    index, would put a page of ten hits in one row and make every hit a candidate.)"""
    median = float(np.median([s for s in sizes if s] or [1]))
    bits = 64 * max(1, -(-int(median * configured.row_bits / configured.capacity) // 64))
    while True:
        try:
            params = BloomParams(row_bits=bits, hashes=configured.hashes, target_fp=configured.target_fp)
        except ValueError:  # a row too small to hold one shingle at p*
            params = None
        if params is not None and params.capacity >= median:
            return params
        bits += 64


def contained_shares(source: np.ndarray, hits: Sequence[np.ndarray], bloom: BloomParams,
                     min_share: float, min_shared: int) -> tuple[dict[int, float], int]:
    """({hit position: |S ∩ C| / |S|} for the hits containing the source, candidates screened):
    a Bloom filter of the hits (rows of :func:`page_bloom_params`) queried with S, the
    candidates verified exactly. The sets may come in any order: they are made sorted and unique
    first (``fingerprint.copies.verify`` counts |S ∩ C| on sorted unique arrays; shingle sets from
    :func:`shingle_texts` are already, so this costs little)."""
    if len(source) == 0 or not hits:
        return {}, 0
    source = np.unique(np.asarray(source, dtype=np.uint64))
    hits = [np.unique(np.asarray(h, dtype=np.uint64)) for h in hits]
    rows = page_bloom_params([len(h) for h in hits], bloom)
    found, _ = build_filter(hits, rows).query(source, min_share)
    sets = [*hits, source]
    pairs = verify(sets, len(hits), found, min_share, min_shared)
    return {pair.copier: pair.containment for pair in pairs}, len(found)


def hit_text(hit: Any, channel: collapse.Channel, fields: Sequence[str]) -> str | None:
    """The hit's text fields joined by newlines (as the indexer joins them), None if none."""
    if not isinstance(hit, dict):
        return None
    holder = rawjson.materialize(hit.get("_source")) if channel == "_source" else hit.get("fields")
    if not isinstance(holder, Mapping):
        return None
    texts = document_texts(holder, fields)
    return "\n".join(texts.texts) if texts.outcome == "ok" else None


def page_positions(groups: list[list[int]], start: int, size: int) -> list[int]:
    """Window positions of the hits shown on the page (representatives and folded members)."""
    return [position for members in groups[start:start + size] for position in members]


# -- shell ----------------------------------------------------------------------------------
async def fetch_source(state: ProxyState, request: web.Request, raw_path: str, doc_id: str,
                       fields: tuple[str, ...]) -> tuple[str, str]:
    """(concrete index, joined text) of the source document; ES-style 400/404 naming the
    parameter when there is no single index, no such index or document, or no text."""
    index = index_of(raw_path)
    if not index or any(c in index for c in ",*"):
        raise errors.illegal_argument(f"[{PARAM_SOURCE}] needs one index in the path "
                                      f"(<index>/_search), not [{index or '_all'}]")
    raw_index = raw_path.strip("/").split("/")[0]
    path = (f"/{raw_index}/_doc/{quote(doc_id, safe='')}"
            f"?_source_includes={quote(','.join(fields), safe=',')}")
    headers = upstream_headers(request, "application/json")
    response = await state.upstream.exchange("GET", path, headers)
    try:
        raw = framing.gunzip_response(response.body, response.headers.get("Content-Encoding"))
        answer = jsonio.loads(raw)
    except (OSError, EOFError, ValueError):
        answer = None
    if not isinstance(answer, dict):
        raise errors.upstream_broken(f"unreadable answer ({response.status}) to the [{PARAM_SOURCE}] lookup")
    if response.status == 404 or answer.get("found") is False:
        error = answer.get("error")
        if isinstance(error, dict) and error.get("type") == "index_not_found_exception":
            raise errors.ProxyError(404, "index_not_found_exception",
                                    f"no such index [{index}] for [{PARAM_SOURCE}]")
        raise errors.ProxyError(404, "resource_not_found_exception",
                                f"[{PARAM_SOURCE}] document [{doc_id}] not found in [{index}]")
    if response.status != 200:
        error = answer.get("error")
        reason = error.get("reason") if isinstance(error, dict) else None
        status = response.status if 400 <= response.status < 500 else 502
        kind = "illegal_argument_exception" if status < 500 else "neardup_upstream_exception"
        raise errors.ProxyError(status, kind, f"[{PARAM_SOURCE}] lookup of [{doc_id}] in [{index}] failed: "
                                f"{reason or response.status}")
    source = answer.get("_source")
    texts = document_texts(source if isinstance(source, dict) else {}, fields)
    if texts.outcome != "ok":
        raise errors.illegal_argument(f"[{PARAM_SOURCE}] document [{doc_id}] holds no text in "
                                      f"[{', '.join(fields)}] (indexer.fields)")
    return str(answer.get("_index", index)), "\n".join(texts.texts)


def finish(state: ProxyState, window: search_plan.Window, groups: list[list[int]],
           fingerprinted: int) -> dict[str, Any]:
    """:func:`neardup.proxy.handlers.search_plan.finish`, with the page's hits checked against ``neardup_source`` when
    the request names one (marks, then the added text fields are stripped with the others)."""
    plan = window.plan
    document = plan.settings.source
    if document is None:
        return search_plan.finish(window, groups, fingerprinted)
    copies = state.config.copies
    positions = [p for p in page_positions(groups, plan.start, plan.size)
                 if not _is_source(window.hits[p], document.index, document.id)]
    texts = [hit_text(window.hits[p], plan.channel, document.fields) for p in positions]
    source, *hit_sets = shingle_texts([document.text, *texts], state.config.fingerprint)
    shares, candidates = contained_shares(source, hit_sets, copies.bloom_params(),
                                          copies.min_share, copies.min_shared)
    for local, share in shares.items():
        collapse.set_field(window.hits[positions[local]], CONTAINS_FIELD, [round(share, 4)])
    response = search_plan.finish(window, groups, fingerprinted)
    response[collapse.SUMMARY_KEY][SUMMARY_SOURCE_KEY] = {
        "_id": document.id, "shingles": int(len(source)), "min_share": copies.min_share,
        "checked": sum(1 for text in texts if text), "candidates": candidates, "contains": len(shares)}
    return response


def _is_source(hit: Any, index: str, doc_id: str) -> bool:
    return isinstance(hit, dict) and hit.get("_id") == doc_id and hit.get("_index") == index
