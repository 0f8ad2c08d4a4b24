#!/usr/bin/env python
"""What query-time fingerprints add to a search: never-enriched hits beside enriched ones.

    .venv/bin/python bench/proxy_fresh.py --es URL [--requests N] [--results docs/benchmarks.md]

1. **Corpus.** Reuters-21578 loaded twice, into an index enriched by ``neardup index``
   (``bench/proxy.py``'s loader) and into one never enriched (no ``neardup`` object at all).
2. **Proxies.** Two ``neardup proxy`` subprocesses (one worker each, default bounds): *cold*,
   whose cache is off (``collapse.fingerprint_cache_entries = 0``: every hit is fingerprinted
   as if seen the first time), and *cached*, whose cache was filled by sending every query once
   before the measurement.
3. **Load.** One client; ``bench/proxy.py``'s queries (``match`` on ``title``), each sent in
   turn to: Elasticsearch directly, the cached proxy on the enriched index, the cold and the
   cached proxy on the never-enriched index: ``size`` 10 and 100, with the whole ``_source``
   (texts read from the hits) and with ``_source: false`` (texts read with one ``_mget``).
   p50 and p90 latency; the *added* latency of a never-enriched page is its p50 minus the
   enriched index's through the same proxy. The summaries' ``fingerprinted_at_query_time`` and
   ``fingerprint_skipped`` are averaged.
4. **Event loop.** While one client sends cold ``size`` 100 searches of the never-enriched index,
   a second one asks ``GET /_neardup/health`` of the same proxy every 5 ms: its p50 and p99
   latency against the same probe of an idle proxy, i.e. what fingerprinting on the worker's
   thread costs the other requests of that worker. And in this process, the lag of an event
   loop (a 1 ms sleep, timed) while 2,000 Reuters stories are fingerprinted in pages of 100 on
   the proxy's fingerprinting thread, and on a one-process pool for comparison (no shared GIL,
   but every text and result pickled across).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
import uuid
from concurrent.futures import Executor, ProcessPoolExecutor
from pathlib import Path
from typing import Any

import aiohttp
from elasticsearch import Elasticsearch, helpers

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import proxy as bench  # noqa: E402 - the loader, the queries, the proxy subprocess
from neardup.corpora import reuters_documents  # noqa: E402
from neardup.fingerprint import FingerprintParams  # noqa: E402
from neardup.proxy.grouping import query_fingerprints  # noqa: E402

SECTION = "## Query-time fingerprints"
SIZES = (10, 100)
#: How to read the section (kept with it when it is written again).
READING = (
    'A hit is fingerprinted once per text and proxy worker: the *cold* columns are what a page '
    "of never-seen hits costs (the fingerprints, within the request's bounds), the *cached* one"
    "s what every later search of them costs: reading the texts (the hits' `_source` parsed, or"
    ' the `_mget` round trip when the client does not get the whole `_source`), their digests, '
    'and a second grouping. That is why `collapse.fingerprint_missing` is on by default: a page'
    ' of 10 fresh hits costs a few milliseconds once, then about one, and `collapse.fingerprint'
    "_cpu_ms` caps the worst case of a request. Fingerprinting runs on a thread of the worker's"
    " own rather than in a process pool: the event loop waits at most about the interpreter's 5"
    ' ms switch interval for it, and no text or result is pickled across processes.')
SOURCES = {"whole _source": {}, "_source: false (_mget)": {"_source": False}}


def load_fresh(es: Elasticsearch) -> str:
    """Reuters in a new index, never enriched."""
    name = f"bench-fresh-reuters-{uuid.uuid4().hex[:8]}"
    es.indices.create(index=name, settings={"number_of_shards": 1, "number_of_replicas": 0})
    helpers.bulk(es.options(request_timeout=120),
                 ({"_index": name, "_id": d["id"], "_source": d} for d in reuters_documents()), chunk_size=2000)
    es.indices.refresh(index=name)
    es.indices.forcemerge(index=name, max_num_segments=1)
    return name


async def timed_search(session: aiohttp.ClientSession, url: str, index: str, body: dict[str, Any]
                       ) -> tuple[float, dict[str, Any]]:
    data = json.dumps(body).encode()
    started = time.perf_counter()
    async with session.post(f"{url}/{index}/_search", data=data, headers={"Content-Type": "application/json"}) as reply:
        raw = await reply.read()
        assert reply.status == 200, raw[:300]
    elapsed = time.perf_counter() - started
    return elapsed, json.loads(raw).get("neardup", {})


async def measure(settings: dict[str, tuple[str, str]], texts: list[str], size: int,
                  extra: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Latencies (ms) and summary means of each setting (name: (url, index)), interleaved per query."""
    latencies: dict[str, list[float]] = {name: [] for name in settings}
    fingerprinted: dict[str, list[int]] = {name: [] for name in settings}
    skipped: dict[str, list[int]] = {name: [] for name in settings}
    async with aiohttp.ClientSession(skip_auto_headers=("Accept-Encoding",)) as session:
        for text in texts:
            body = {"query": {"match": {"title": text}}, "size": size, **extra}
            for name, (url, index) in settings.items():
                elapsed, summary = await timed_search(session, url, index, body)
                latencies[name].append(elapsed * 1000)
                fingerprinted[name].append(summary.get("fingerprinted_at_query_time", 0))
                skipped[name].append(summary.get("fingerprint_skipped", 0))
    out = {}
    for name, values in latencies.items():
        ordered = sorted(values)
        out[name] = {"p50": statistics.median(ordered), "p90": ordered[int(0.9 * (len(ordered) - 1))],
                     "fingerprinted": statistics.mean(fingerprinted[name]), "skipped": statistics.mean(skipped[name])}
    return out


async def warm(url: str, index: str, texts: list[str]) -> None:
    async with aiohttp.ClientSession(skip_auto_headers=("Accept-Encoding",)) as session:
        for size in SIZES:
            for text in texts:
                await timed_search(session, url, index, {"query": {"match": {"title": text}}, "size": size})


async def probe(url: str, stop: asyncio.Event) -> list[float]:
    """``GET /_neardup/health`` every 5 ms until ``stop``; latencies in ms."""
    out = []
    async with aiohttp.ClientSession() as session:
        while not stop.is_set():
            started = time.perf_counter()
            async with session.get(f"{url}/_neardup/health") as reply:
                await reply.read()
            out.append((time.perf_counter() - started) * 1000)
            await asyncio.sleep(0.005)
    return out


async def loop_blocking(url: str, index: str, texts: list[str]) -> dict[str, float]:
    """Health-probe latency of an idle proxy, then while it fingerprints cold size-100 pages."""
    stop = asyncio.Event()
    idle_task = asyncio.create_task(probe(url, stop))
    await asyncio.sleep(2.0)
    stop.set()
    idle = await idle_task
    stop = asyncio.Event()
    busy_task = asyncio.create_task(probe(url, stop))
    async with aiohttp.ClientSession(skip_auto_headers=("Accept-Encoding",)) as session:
        for text in texts:
            await timed_search(session, url, index, {"query": {"match": {"title": text}}, "size": 100})
    stop.set()
    busy = await busy_task

    def quantile(values: list[float], q: float) -> float:
        ordered = sorted(values)
        return ordered[int(q * (len(ordered) - 1))]

    return {"idle_p50": quantile(idle, 0.5), "idle_p99": quantile(idle, 0.99),
            "busy_p50": quantile(busy, 0.5), "busy_p99": quantile(busy, 0.99), "probes": len(busy)}


async def _lag_while(executor: Executor, texts: list[str]) -> dict[str, float]:
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(executor, query_fingerprints.in_thread, texts[:10], 60.0)   # started
    stop = asyncio.Event()
    lags: list[float] = []

    async def tick() -> None:
        while not stop.is_set():
            started = time.perf_counter()
            await asyncio.sleep(0.001)
            lags.append((time.perf_counter() - started - 0.001) * 1000)

    ticker = asyncio.create_task(tick())
    started = time.perf_counter()
    for first in range(0, len(texts), 100):
        await loop.run_in_executor(executor, query_fingerprints.in_thread, texts[first:first + 100], 60.0)
    wall = time.perf_counter() - started
    stop.set()
    await ticker
    lags.sort()
    return {"wall_ms_per_text": wall * 1000 / len(texts), "p50": lags[len(lags) // 2],
            "p99": lags[int(0.99 * (len(lags) - 1))], "max": lags[-1]}


def loop_lag() -> dict[str, dict[str, float]]:
    """Event-loop lag while texts are fingerprinted on the proxy's thread and on a process pool."""
    texts = ["\n".join([d["title"], d["body"]]) for d in reuters_documents(with_body_only=True)][:2000]
    params = FingerprintParams()
    worker = query_fingerprints.QueryFingerprints(params, ["title", "body"], 0)
    try:
        thread = asyncio.run(_lag_while(worker.executor(), texts))
    finally:
        worker.close()
    with ProcessPoolExecutor(1, initializer=query_fingerprints.start_thread, initargs=(params,)) as pool:
        process = asyncio.run(_lag_while(pool, texts))
    return {"thread": thread, "process": process}


def report(rows: list[dict[str, Any]], blocking: dict[str, float], lag: dict[str, dict[str, float]],
           command: str, docs: int, load: tuple[str, str]) -> str:
    lines = [SECTION, "", f"Command: `{command}`", "",
             f"Reuters-21578 ({docs} stories) in two indices, one enriched by `neardup index`, one never "
             "enriched; one client; each query sent in turn directly, through the *cached* proxy to the "
             "enriched index, and through the *cold* (cache off: every hit fingerprinted as the first time) "
             "and the *cached* proxy to the never-enriched index; default bounds (200 hits, 50 ms CPU per "
             "request). *added* = p50 on the never-enriched index minus p50 on the enriched one through "
             f"the same proxy. Load average at the start: {load[0]}, at the end: {load[1]}.", "",
             "| size | texts from | direct p50 ms | enriched p50 ms | cold p50 ms | cold p90 ms | cached p50 ms "
             "| cached p90 ms | added cold ms | added cached ms | hits fingerprinted (cold) | hits skipped (cold) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        r = row["result"]
        lines.append(
            f"| {row['size']} | {row['source']} | {r['direct']['p50']:.2f} | {r['enriched']['p50']:.2f} "
            f"| {r['cold']['p50']:.2f} | {r['cold']['p90']:.2f} | {r['cached']['p50']:.2f} | {r['cached']['p90']:.2f} "
            f"| +{r['cold']['p50'] - r['enriched']['p50']:.2f} | +{r['cached']['p50'] - r['enriched']['p50']:.2f} "
            f"| {r['cold']['fingerprinted']:.1f} | {r['cold']['skipped']:.1f} |")
    lines += ["", f"Event loop: `GET /_neardup/health` every 5 ms answered in {blocking['idle_p50']:.2f} ms p50 / "
              f"{blocking['idle_p99']:.2f} ms p99 by an idle proxy, and in {blocking['busy_p50']:.2f} ms p50 / "
              f"{blocking['busy_p99']:.2f} ms p99 ({blocking['probes']:.0f} probes) while the same worker "
              "fingerprinted cold `size` 100 pages on its fingerprinting thread.", "",
              "Event-loop lag (a 1 ms sleep, timed) while 2,000 Reuters stories are fingerprinted in pages of 100:",
              "", "| where | ms per text (wall) | lag p50 ms | lag p99 ms | lag max ms |", "|---|---|---|---|---|"]
    for name, label in (("thread", "the proxy's fingerprinting thread"), ("process", "a one-process pool")):
        values = lag[name]
        lines.append(f"| {label} | {values['wall_ms_per_text']:.3f} | {values['p50']:.2f} | {values['p99']:.2f} "
                     f"| {values['max']:.2f} |")
    lines += ["", READING, ""]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--es", default=os.environ.get("NEARDUP_TEST_ES_URL", "http://127.0.0.1:9200"))
    parser.add_argument("--requests", type=int, default=100, help="queries per size and source setting")
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("--results", type=Path, help="replace the section in this file (docs/benchmarks.md)")
    args = parser.parse_args()
    es = Elasticsearch(args.es, request_timeout=300)
    load_before = f"{os.getloadavg()[0]:.1f}"
    enriched = bench.load_reuters(es, args.es)
    fresh = load_fresh(es)
    cold, cold_url, _ = bench.start_proxy(args.es, settings={"NEARDUP_COLLAPSE__FINGERPRINT_CACHE_ENTRIES": "0"})
    cached, cached_url, _ = bench.start_proxy(args.es)
    try:
        texts = bench.queries(args.requests, args.seed)
        asyncio.run(warm(cached_url, fresh, texts))
        asyncio.run(warm(cached_url, enriched, texts))
        settings = {"direct": (args.es, enriched), "enriched": (cached_url, enriched),
                    "cold": (cold_url, fresh), "cached": (cached_url, fresh)}
        rows = []
        for size in SIZES:
            for source, extra in SOURCES.items():
                result = asyncio.run(measure(settings, texts, size, extra))
                print(f"size={size} {source}: {result}", file=sys.stderr)
                rows.append({"size": size, "source": source, "result": result})
        blocking = asyncio.run(loop_blocking(cold_url, fresh, bench.queries(40, args.seed + 1)))
        lag = loop_lag()
        docs = es.count(index=fresh)["count"]
    finally:
        for child in (cold, cached):
            child.terminate()
            child.wait(30)
        for index in (enriched, fresh):
            es.options(ignore_status=404).indices.delete(index=index)
    command = "python bench/proxy_fresh.py --es URL" + (f" --requests {args.requests}" if args.requests != 100 else "")
    text = report(rows, blocking, lag, command, docs, (load_before, f"{os.getloadavg()[0]:.1f}"))
    print(text)
    if args.results:
        bench.write_section(args.results, text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
