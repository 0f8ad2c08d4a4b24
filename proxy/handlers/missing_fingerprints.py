"""Grouping a window whose hits lack fingerprints: their texts read, fingerprinted, grouped (I/O).

The shell around :mod:`neardup.proxy.grouping.query_fingerprints`. With
``collapse.fingerprint_missing`` on, after a round is grouped, the hits of the window that
grouping found no usable fingerprint for (and that were not looked at in an earlier round) get
one, within the request's :class:`~neardup.proxy.grouping.query_fingerprints.Budget`:

1. their texts: from the hit's ``_source`` when the client gets it whole (the plan's
   ``_source`` channel); otherwise in one ``POST /_mget?realtime=false`` for those hits only,
   asking for the ``indexer.fields`` of their ``_source``, with the client's own headers
   (credentials included), so the client's search goes upstream unchanged and its answer keeps
   its bytes. ``realtime=false`` reads what the search saw (the last refresh), not a later write;
2. the cached fingerprints of those texts, the others computed on the worker's fingerprinting
   thread (never on the event loop), within the CPU budget;
3. the window grouped again with them.

A hit without text, or one the lookup cannot read (its ``_mget`` entry missing or refused), stays
a group of its own, as before. ``neardup_proxy_query_fingerprints_total`` counts the hits by
outcome (``computed``, ``cached``, ``skipped``: beyond a bound), and the response's ``neardup``
summary says how many hits of the window were fingerprinted at query time.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from neardup.fingerprint.texts import document_text
from neardup.proxy.grouping import collapse, tfidf_groups
from neardup.proxy.grouping.query_fingerprints import Budget, QueryFingerprints, in_thread, source_text, text_digest
from neardup.proxy.handlers import exchange
from neardup.proxy.handlers.context import Incoming, ProxyState
from neardup.proxy.handlers.search_plan import Plan
from neardup.proxy.transport import errors, framing, jsonio

#: Keys of the ``neardup`` summary: hits of the window fingerprinted at query time, and hits
#: left without a fingerprint because a bound of the request was reached.
SUMMARY_FINGERPRINTED = "fingerprinted_at_query_time"
SUMMARY_SKIPPED = "fingerprint_skipped"
METRIC = "neardup_proxy_query_fingerprints_total"


def budget(state: ProxyState) -> Budget:
    """A fresh budget for one request (its searches share it)."""
    config = state.config.collapse
    return Budget(hits=config.fingerprint_max_hits, cpu_seconds=config.fingerprint_cpu_ms / 1000)


def start(state: ProxyState) -> None:
    """Start the worker's fingerprinting thread when ``collapse.fingerprint_missing`` is on."""
    if state.config.collapse.fingerprint_missing:
        _worker(state).start()


def fingerprinting(state: ProxyState) -> QueryFingerprints:
    """The worker's fingerprinting thread and its settings, made at first use (shared with
    :mod:`neardup.proxy.handlers.enriched_writes`)."""
    return _worker(state)


def _worker(state: ProxyState) -> QueryFingerprints:
    if state.query_fingerprints is None:
        config = state.config
        state.query_fingerprints = QueryFingerprints(config.fingerprint, config.indexer.fields,
                                                     config.collapse.fingerprint_cache_entries)
    return state.query_fingerprints


async def group(state: ProxyState, incoming: Incoming, plan: Plan, hits: Sequence[Any],
                budget: Budget) -> tuple[list[list[int]], int]:
    """:func:`neardup.proxy.grouping.collapse.group` of the window, with the fingerprints of
    the hits that lack one computed first when the search's settings ask for it."""
    settings = plan.settings
    groups, fingerprinted = collapse.group(hits, plan.channel, settings.threshold, settings.mode,
                                           state.algorithms)
    if not settings.fingerprint_missing or settings.mode == tfidf_groups.MODE \
            or not isinstance(hits, collapse.WindowHits):
        return groups, fingerprinted
    if await _fill(state, incoming, plan, hits, budget):
        groups, fingerprinted = collapse.group(hits, plan.channel, settings.threshold, settings.mode,
                                               state.algorithms)
    return groups, fingerprinted


def summarize(summary: dict[str, Any], plan: Plan, hits: Sequence[Any]) -> None:
    """Add the query-time counts of a window to its response's ``neardup`` summary (feature on)."""
    if plan.settings.fingerprint_missing:
        summary[SUMMARY_FINGERPRINTED] = len(hits.computed) if isinstance(hits, collapse.WindowHits) else 0
        summary[SUMMARY_SKIPPED] = hits.skipped if isinstance(hits, collapse.WindowHits) else 0


async def _fill(state: ProxyState, incoming: Incoming, plan: Plan, hits: collapse.WindowHits,
                budget: Budget) -> bool:
    """Compute the fingerprints of the hits not looked at yet that grouping could not use;
    whether any was found."""
    read = collapse.window_signatures(hits, plan.channel, state.algorithms.read)
    if read is not None and len(read[0]) == len(hits):   # every hit has one (the usual window)
        missing = []
    else:
        usable = set(read[0].tolist()) if read is not None else set()
        missing = [p for p in range(hits.looked_up, len(hits)) if p not in usable]
    hits.looked_up = len(hits)
    if not missing:
        return False
    taken = missing[:max(budget.hits, 0)]
    budget.hits -= len(taken)
    worker = _worker(state)
    before = (budget.computed, budget.cached, budget.skipped)
    budget.skipped += len(missing) - len(taken)
    if plan.channel == "_source":
        texts = {p: text for p in taken if (text := source_text(hits[p].get("_source"), worker.fields))}
    else:
        texts = await _fetch_texts(state, incoming, hits, taken, worker.fields)
    found, pending = _cached(worker, texts)
    budget.cached += len(found)
    if pending and budget.cpu_seconds > 0:
        loop = asyncio.get_running_loop()
        # one computation per distinct text (exact copies in one window are common in news)
        values, spent = await loop.run_in_executor(worker.executor(), in_thread,
                                                   [texts[positions[0]] for positions in pending.values()],
                                                   budget.cpu_seconds)
        budget.cpu_seconds -= spent
        for (key, positions), value in zip(pending.items(), values):
            if value is None:
                budget.skipped += len(positions)
                continue
            worker.cache.put(key, value)
            found.update((position, value) for position in positions)
            budget.computed += len(positions)
    else:
        budget.skipped += sum(map(len, pending.values()))
    collapse.supply(hits, found)
    hits.skipped += budget.skipped - before[2]
    for outcome, count, earlier in zip(("computed", "cached", "skipped"),
                                       (budget.computed, budget.cached, budget.skipped), before):
        if count > earlier:
            state.metrics.inc(METRIC, count - earlier, outcome=outcome)
    return bool(found)


def _cached(worker: QueryFingerprints, texts: dict[int, str]
            ) -> tuple[dict[int, Any], dict[tuple[str, bytes], list[int]]]:
    """({position: cached fingerprint}, {cache key: positions of the texts not cached})."""
    found: dict[int, Any] = {}
    pending: dict[tuple[str, bytes], list[int]] = {}
    for position, text in texts.items():
        key = (worker.version, text_digest(text))
        cached = worker.cache.get(key)
        if cached is not None:
            found[position] = cached
        else:
            pending.setdefault(key, []).append(position)
    return found, pending


async def _fetch_texts(state: ProxyState, incoming: Incoming, hits: Sequence[Any], positions: Sequence[int],
                       fields: tuple[str, ...]) -> dict[int, str]:
    """{position: text} of the hits at ``positions``, read in one ``_mget`` of their
    ``indexer.fields``; a hit whose document is not found, not readable or without text is left out."""
    wanted: list[tuple[int, dict[str, Any]]] = []
    for position in positions:
        hit = hits[position]
        index, doc_id, routing = hit.get("_index"), hit.get("_id"), hit.get("_routing")
        if isinstance(index, str) and isinstance(doc_id, str):
            doc: dict[str, Any] = {"_index": index, "_id": doc_id, "_source": list(fields)}
            if isinstance(routing, str):
                doc["routing"] = routing
            wanted.append((position, doc))
    if not wanted:
        return {}
    body = jsonio.dumps({"docs": [doc for _, doc in wanted]})
    try:
        reply = await state.upstream.exchange("POST", "/_mget?realtime=false",
                                              exchange.json_headers(incoming.request), body)
        answer = jsonio.loads(framing.gunzip_response(reply.body, reply.headers.get("Content-Encoding")))
    except (errors.ProxyError, OSError, EOFError, ValueError):
        return {}
    docs = answer.get("docs") if reply.status == 200 and isinstance(answer, dict) else None
    if not isinstance(docs, list) or len(docs) != len(wanted):
        return {}
    texts = {}
    for (position, _), doc in zip(wanted, docs):
        source = doc.get("_source") if isinstance(doc, dict) and doc.get("found") is True else None
        text = document_text(source, fields)[1] if isinstance(source, dict) else None
        if text:
            texts[position] = text
    return texts
