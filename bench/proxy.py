#!/usr/bin/env python
"""Throughput, latency and CPU of the collapsing proxy against direct Elasticsearch.

    .venv/bin/python bench/proxy.py --es http://127.0.0.1:9200 [--index NAME] [--requests N]
                                    [--workers N] [--pin] [--results docs/benchmarks.md]

1. **Corpus.** Reuters-21578 loaded into a fresh index and enriched by ``neardup index``
   (or an existing enriched index given with ``--index``).
2. **Proxy.** ``neardup proxy`` started as a subprocess on a free port (one worker).
3. **Load.** The same sequence of searches (``match`` on ``title`` with the words of a real
   Reuters title, seeded) sent directly to Elasticsearch and through the proxy, in the same run,
   interleaved in small chunks so a busy shared machine affects both alike: 1 and 32 concurrent
   clients × ``size`` 10 and 100. Requests per second, p50 and p99 latency for both, and the
   ratios.
   Three reference proxies on neardup's own stack are driven the same way in the same chunks
   (:data:`REFERENCES`): the *floor*, which does nothing (what the proxy's hop costs on this
   machine before it does any work); *spares*, the floor asking for the proxy's spare hits (what over-fetching costs
   Elasticsearch); and the *bare* collapse, which does only what any collapsing proxy must
   (what reading and rewriting the window costs before any of the product's rules).
   With ``--pin`` Elasticsearch and the load generator run on CPU 0 and the proxies on CPU 1:
   the proxy on a core of its own, as on a host of its own, so it takes no CPU from
   Elasticsearch (the section ``## Proxy on a core of its own``).
4. **CPU.** utime+stime of the proxy process, the reference processes and the Elasticsearch process
   (``/proc/<pid>/stat``; the node's pid from ``GET _nodes/_local/process``) over each run,
   divided by the number of requests. The load generator, the proxy and Elasticsearch share the
   machine's cores.
5. **Grouping micro-benchmark.** The proxy's grouping (``proxy.grouping.collapse.group``: signature read,
   ``similar_pairs``, ``group_labels``) of the first 1,000 hits of real queries at threshold 0.8:
   CPU milliseconds, and the recall of its pairs against an all-pairs comparison of the same
   signatures.
"""

from __future__ import annotations

import argparse
import asyncio
import binascii
import contextlib
import json
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
import numpy as np
from elasticsearch import Elasticsearch, helpers

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from neardup.corpora import reuters_documents  # noqa: E402
from neardup.fingerprint import FingerprintParams  # noqa: E402
from neardup.proxy.grouping import collapse  # noqa: E402
from neardup.proxy.grouping.fingerprints import default_algorithms  # noqa: E402

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
SECTION = "## Proxy"
PINNED_SECTION = "## Proxy on a core of its own (`--pin`)"


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process, from /proc/<pid>/stat (fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def es_pid(es: Elasticsearch) -> int:
    nodes = es.nodes.info(node_id="_local", metric="process")["nodes"]
    return int(next(iter(nodes.values()))["process"]["id"])


def load_reuters(es: Elasticsearch, es_url: str) -> str:
    name = f"bench-proxy-reuters-{uuid.uuid4().hex[:8]}"
    es.indices.create(index=name, settings={"number_of_shards": 1, "number_of_replicas": 0})
    helpers.bulk(es.options(request_timeout=120),
                 ({"_index": name, "_id": d["id"], "_source": d} for d in reuters_documents()),
                 chunk_size=2000)
    es.indices.refresh(index=name)
    env = {**os.environ, "NEARDUP_UPSTREAM__URLS": es_url, "NEARDUP_LOGGING__LEVEL": "WARNING",
           "PYTHONPATH": str(ROOT)}
    subprocess.run([sys.executable, "-m", "neardup", "index", "--index", name, "--workers", "2"],
                   check=True, env=env, cwd=ROOT, stdout=subprocess.DEVNULL)
    es.indices.refresh(index=name)
    es.indices.forcemerge(index=name, max_num_segments=1)
    return name


def start_proxy(es_url: str, workers: int = 1, settings: dict[str, str] | None = None
                ) -> tuple[subprocess.Popen[str], str, list[int]]:
    """The proxy subprocess, its URL and the pids whose CPU it spends (the workers: with
    ``--workers N`` > 1 the parent only supervises and forks N workers); ``settings``: more
    ``NEARDUP_*`` configuration variables."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEARDUP_")}
    env.update({"PYTHONPATH": str(ROOT), "NEARDUP_LOGGING__LEVEL": "WARNING", **(settings or {})})
    process = subprocess.Popen([sys.executable, "-m", "neardup", "proxy", "--port", "0",
                                "--upstream", es_url, "--workers", str(workers)],
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, cwd=ROOT, text=True)
    assert process.stdout is not None
    line = process.stdout.readline()
    match = re.search(r"listening on (http://\S+)", line)
    if not match:
        process.kill()
        raise SystemExit(f"proxy did not start: {line!r}")
    pids = [process.pid]
    if workers > 1:
        for _ in range(100):
            children = Path(f"/proc/{process.pid}/task/{process.pid}/children").read_text().split()
            if len(children) >= workers:
                break
            time.sleep(0.1)
        pids = [int(pid) for pid in children]
    return process, match.group(1), pids


#: The reference proxies run beside ``neardup proxy`` in every setting, on the same stack as it
#: (aiohttp's server, one pooled upstream exchange over :mod:`proxy.transport.http1_client`, uvloop):
#:
#: * the *floor* does nothing: the body read, sent upstream, the upstream bytes answered. What
#:   the hop alone costs on this machine.
#: * the *spares* reference is the floor plus the spare hits: the body decoded, its ``size``
#:   raised by the same spare hits as the proxy's first window, the upstream bytes answered as
#:   they come. Nothing is read of the answer. What any collapsing proxy that fills its pages in
#:   one round costs here before it reads a byte: the hop, and Elasticsearch fetching hits that
#:   may be folded away (a proxy with no spares pays a second search instead, whenever
#:   folding leaves its page short).
#: * the *bare* collapse does the least any collapsing proxy must do per search: the floor, plus
#:   the body decoded and its ``size`` raised by the same spare hits as the proxy's first window,
#:   the answer decoded once with every hit kept as raw bytes, each hit's ``neardup.sig``/``n``
#:   read, ``fingerprint.similar_pairs`` + ``group_labels`` at 0.8, and the page written (group
#:   heads in place, members under ``inner_hits.neardup``). Nothing of the product's rules: no
#:   validation, parameters, ``_source``/``fields``/``filter_path`` handling, scheme versions,
#:   paging rounds, metrics or fail-open, and it assumes the bench's response shape. A lower
#:   bound for the proxy: what reading and rewriting the window costs before any of them.
#:
#: Run as ``python bench/proxy.py --reference-server floor|spares|bare PORT ES_URL``.
REFERENCES = ("floor", "spares", "bare")
#: Everything driven beside direct Elasticsearch, in the order of the report's columns.
VIA = (*REFERENCES, "proxy")


class _BareFingerprint(msgspec.Struct):
    sig: str = ""
    n: int = 0


class _BareSource(msgspec.Struct):
    neardup: _BareFingerprint | None = None


class _BareHits(msgspec.Struct):
    total: msgspec.Raw
    max_score: msgspec.Raw
    hits: list[dict[str, msgspec.Raw]]


class _BareResponse(msgspec.Struct):
    took: int
    timed_out: bool
    shards: msgspec.Raw = msgspec.field(name="_shards")
    hits: _BareHits | None = None


def bare_collapse(upstream_body: bytes, size: int, threshold: float = 0.8) -> bytes:
    """The bare collapse of one search answer (see :data:`REFERENCES`)."""
    from neardup.fingerprint import group_labels, similar_pairs

    answer = msgspec.json.decode(upstream_body, type=_BareResponse)
    assert answer.hits is not None
    hits = answer.hits.hits
    signatures, counts = [], []
    for hit in hits:
        found = msgspec.json.decode(hit["_source"], type=_BareSource).neardup
        signatures.append(binascii.a2b_base64(found.sig) if found else bytes(8 * 84))
        counts.append(found.n if found else 0)
    matrix = np.frombuffer(b"".join(signatures), dtype="<u8").reshape(len(hits), -1)
    i, j, _ = similar_pairs(matrix, np.asarray(counts), threshold, "resemblance")
    members: dict[int, list[int]] = {}
    for position, label in enumerate(group_labels(len(hits), i, j).tolist()):
        members.setdefault(label, []).append(position)
    page = []
    for head, *folded in list(members.values())[:size]:
        hit: dict[str, Any] = dict(hits[head])
        hit["inner_hits"] = {"neardup": {"hits": {"total": {"value": len(folded), "relation": "eq"},
                                                  "hits": [hits[k] for k in folded]}}}
        page.append(hit)
    return msgspec.json.encode({
        "took": answer.took, "timed_out": answer.timed_out, "_shards": answer.shards,
        "hits": {"total": answer.hits.total, "max_score": answer.hits.max_score, "hits": page},
        "neardup": {"groups": len(page), "collapsed": len(hits) - len(members)}})


def with_spares(search_body: bytes) -> tuple[bytes, int]:
    """The search with its ``size`` raised by the proxy's spare hits, and the ``size`` asked for
    (below ``collapse.max_window``, which caps the proxy's first window: the bench's sizes are)."""
    from neardup.proxy.handlers.search_plan import SPARE_MIN, SPARE_PERCENT

    search = msgspec.json.decode(search_body)
    size = search.get("size", 10)
    search["size"] = size + max(SPARE_MIN, -(-size * SPARE_PERCENT // 100))
    return msgspec.json.encode(search), size


def reference_server(kind: str, port: int, es_url: str) -> None:
    import ssl

    import uvloop
    from aiohttp import web

    from neardup.proxy.transport import http1_client

    async def init() -> web.Application:
        app = web.Application()
        nodes: dict[str, http1_client.Node] = {}

        async def start(app: web.Application) -> None:
            nodes["n"] = http1_client.Node(es_url, asyncio.Semaphore(100), 5.0, 60.0, ssl.create_default_context())

        async def handle(request: web.Request) -> web.Response:
            body = await request.read()
            size = 0
            if kind in ("spares", "bare"):
                body, size = with_spares(body)
            reply = await nodes["n"].exchange(request.method, request.raw_path,
                                              [("Content-Type", "application/json")], body)
            answer = bare_collapse(reply.body, size) if kind == "bare" and reply.status == 200 else reply.body
            return web.Response(body=answer, status=reply.status,
                                headers={"Content-Type": reply.headers["Content-Type"]})

        async def stop(app: web.Application) -> None:
            nodes["n"].close()

        app.on_startup.append(start)
        app.on_cleanup.append(stop)
        app.router.add_route("*", "/{tail:.*}", handle)
        return app

    web.run_app(init(), host="127.0.0.1", port=port, print=None, access_log=None,
                loop=uvloop.new_event_loop())


def start_reference(kind: str, es_url: str) -> tuple[subprocess.Popen[bytes], str]:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    process = subprocess.Popen([sys.executable, __file__, "--reference-server", kind, str(port), es_url])
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.1)
    return process, f"http://127.0.0.1:{port}"


def _set_affinity(pid: int, cpus: set[int]) -> None:
    """Every thread of ``pid`` on ``cpus`` (threads it starts later inherit the mask)."""
    for thread in os.listdir(f"/proc/{pid}/task"):
        try:
            os.sched_setaffinity(int(thread), cpus)
        except ProcessLookupError:   # the thread ended meanwhile
            pass


@contextlib.contextmanager
def pinned(es_pid: int, proxy_pids: list[int]) -> Iterator[None]:
    """``--pin``: Elasticsearch and this load generator on CPU 0, the proxies (neardup's and the
    references) on CPU 1, so that no proxy takes CPU from Elasticsearch: the proxy on cores of
    its own, as on a host of its own. Elasticsearch's affinity is restored afterwards."""
    first, second = sorted(os.sched_getaffinity(0))[:2]
    es_before, own_before = os.sched_getaffinity(es_pid), os.sched_getaffinity(0)
    # SIGTERM would end the run without ``finally`` and leave the node pinned to one CPU
    previous = signal.signal(signal.SIGTERM, lambda signum, _: sys.exit(128 + signum))
    try:
        _set_affinity(es_pid, {first})
        os.sched_setaffinity(0, {first})
        for pid in proxy_pids:
            _set_affinity(pid, {second})
        yield
    finally:
        _set_affinity(es_pid, es_before)
        os.sched_setaffinity(0, own_before)
        signal.signal(signal.SIGTERM, previous)


def queries(count: int, seed: int) -> list[str]:
    titles = [d["title"] for d in reuters_documents() if len(d["title"].split()) >= 3]
    rng = random.Random(seed)
    return [" ".join(rng.sample(t.split(), min(3, len(t.split())))) for t in rng.sample(titles, count)]


async def drive(url: str, index: str, texts: list[str], size: int, clients: int) -> dict[str, Any]:
    """Send every query once with ``clients`` concurrent connections; latencies in seconds."""
    latencies: list[float] = []
    errors = 0
    position = 0
    connector = aiohttp.TCPConnector(limit=clients)
    # Like the official client (http_compress off): no Accept-Encoding, so no gzip either way.
    async with aiohttp.ClientSession(connector=connector, skip_auto_headers=("Accept-Encoding",)) as session:
        async def worker() -> None:
            nonlocal position, errors
            while position < len(texts):
                text = texts[position]
                position += 1
                body = json.dumps({"query": {"match": {"title": text}}, "size": size}).encode()
                started = time.perf_counter()
                async with session.post(f"{url}/{index}/_search", data=body,
                                        headers={"Content-Type": "application/json"}) as response:
                    await response.read()
                    if response.status != 200:
                        errors += 1
                latencies.append(time.perf_counter() - started)

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(clients)))
        elapsed = time.perf_counter() - started
    return {"latencies": latencies, "elapsed": elapsed, "errors": errors}


def compare(urls: dict[str, str], index: str, texts: list[str], size: int, clients: int,
            pids: dict[str, list[int]]) -> dict[str, dict[str, Any]]:
    """Send the queries to every target, interleaved in chunks (20 queries with 1 client, 100
    with 32; the order alternates), so that the machine's changing load hits all targets alike.

    Per target: req/s over its own busy time, p50/p99 latency, and CPU ms per request of every
    process in ``pids`` while that target was being driven.
    """
    for url in urls.values():  # warm up
        asyncio.run(drive(url, index, texts[: max(20, clients * 2)], size, clients))
    chunk = 20 if clients == 1 else 100
    latencies: dict[str, list[float]] = {name: [] for name in urls}
    busy = dict.fromkeys(urls, 0.0)
    cpu = {name: dict.fromkeys(pids, 0.0) for name in urls}
    errors = dict.fromkeys(urls, 0)
    order = list(urls)
    for start in range(0, len(texts), chunk):
        part = texts[start:start + chunk]
        for name in order:
            before = {process: sum(map(cpu_seconds, group)) for process, group in pids.items()}
            result = asyncio.run(drive(urls[name], index, part, size, clients))
            for process, group in pids.items():
                cpu[name][process] += sum(map(cpu_seconds, group)) - before[process]
            latencies[name] += result["latencies"]
            busy[name] += result["elapsed"]
            errors[name] += result["errors"]
        order.reverse()
    out = {}
    for name in urls:
        lat = sorted(latencies[name])
        out[name] = {"rps": len(lat) / busy[name], "p50": lat[len(lat) // 2] * 1000,
                     "p99": lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1000,
                     "errors": errors[name], "n": len(lat),
                     **{f"cpu_{process}_ms": seconds / len(lat) * 1000 for process, seconds in cpu[name].items()}}
    return out


def grouping_benchmark(es: Elasticsearch, index: str, texts: list[str]) -> dict[str, float]:
    """CPU ms of the proxy's grouping of 1,000 real hits at 0.8, and pair recall vs all pairs
    (with the garbage collector set up as in a proxy worker, :func:`proxy.server.tune_gc`)."""
    from neardup.proxy.server import tune_gc

    tune_gc()
    algorithms = default_algorithms(FingerprintParams())
    timings, core, found, expected = [], [], 0, 0
    windows = 0
    for text in ["oil prices", "bank rate", "shares company", "trade deficit", "wheat export"] + texts[:5]:
        hits = es.search(index=index, query={"match": {"body": text}}, size=1000,
                         source=["neardup"])["hits"]["hits"]
        if len(hits) < 1000:
            continue
        windows += 1
        repeats = 30
        started = time.process_time()
        for _ in range(repeats):
            collapse.group(hits, "_source", 0.8, "resemblance", algorithms)
        timings.append((time.process_time() - started) / repeats * 1000)
        positions, sigs, counts = algorithms.read([h["_source"].get("neardup") for h in hits])
        started = time.process_time()
        for _ in range(repeats):
            i, j, _ = algorithms.similar_pairs(sigs, counts, 0.8, "resemblance")
            algorithms.group_labels(len(counts), i, j)
        core.append((time.process_time() - started) / repeats * 1000)
        i, j, _ = algorithms.similar_pairs(sigs, counts, 0.8, "resemblance")
        got = set(zip(i.tolist(), j.tolist()))
        equal = (sigs[:, None, :] == sigs[None, :, :]).mean(axis=2)
        nonempty = counts > 0
        a, b = np.nonzero(np.triu(equal >= 0.8, k=1) & nonempty[:, None] & nonempty[None, :])
        truth = set(zip(a.tolist(), b.tolist()))
        found += len(truth & got)
        expected += len(truth)
    return {"windows": windows, "cpu_ms_mean": statistics.mean(timings), "cpu_ms_max": max(timings),
            "core_ms_mean": statistics.mean(core), "core_ms_max": max(core),
            "pairs_all_pairs": expected, "pairs_found": found,
            "recall": found / expected if expected else 1.0}


def report(rows: list[dict[str, Any]], grouping: dict[str, float], command: str, total_docs: int,
           load_before: str, workers: int = 1, pin: bool = False) -> str:
    lines = [PINNED_SECTION if pin else SECTION, "", f"Command: `{command}`", "",
             f"Reuters-21578 ({total_docs} stories) enriched by `neardup index`, one shard; `match` on "
             "`title` with three words of a real title; every setting sends the same queries "
             f"directly, through `neardup proxy` ({workers} worker{'s' if workers > 1 else ''}) and "
             "through three reference proxies on the same stack (aiohttp's server, one pooled upstream "
             "exchange over `proxy.transport.http1_client`): the *floor*, which does nothing (the upstream bytes "
             "answered); *spares*, the floor asking for the same spare hits as the proxy (13 for 10, "
             "112 for 100) and answering the upstream bytes unread; and the *bare* collapse, which "
             "does only what any collapsing proxy must (the spare hits asked for, the answer decoded "
             "once with raw hits, each hit's signature read, `similar_pairs` + `group_labels`, the "
             "page written; none of the product's rules), "
             "interleaved in chunks of 20 (1 client) or 100 (32 clients) queries. "
             + ("Pinned (`--pin`): Elasticsearch and the load generator on CPU 0, the proxies on CPU 1. "
                if pin else "Load generator, proxies and Elasticsearch share the 2 cores. ")
             + "CPU per request from `/proc/<pid>/stat`. "
             f"Load average at the start: {load_before}, at the end: {os.getloadavg()[0]:.1f} "
             "(other work on the machine shares the cores and the Elasticsearch node).", "",
             "| clients | size | direct req/s | " + " | ".join(f"{name} req/s" for name in VIA)
             + " | " + " | ".join(f"{name} ratio" for name in VIA)
             + " | direct p50 ms | " + " | ".join(f"{name} +p50 ms" for name in VIA)
             + " | direct p99 ms | proxy p99 ms | " + " | ".join(f"{name} CPU ms/req" for name in VIA)
             + " | ES CPU ms/req (direct → spares → proxied) |",
             "|---" * (7 + 4 * len(VIA)) + "|"]
    for row in rows:
        d = row["direct"]
        lines.append(
            f"| {row['clients']} | {row['size']} | {d['rps']:.0f} | "
            + " | ".join(f"{row[name]['rps']:.0f}" for name in VIA) + " | "
            + " | ".join(f"{row[name]['rps'] / d['rps']:.2f}" for name in VIA)
            + f" | {d['p50']:.2f} | " + " | ".join(f"{row[name]['p50'] - d['p50']:+.2f}" for name in VIA)
            + f" | {d['p99']:.2f} | {row['proxy']['p99']:.2f} | "
            + " | ".join(f"{row[name][f'cpu_{name}_ms']:.2f}" for name in VIA)
            + f" | {d['cpu_es_ms']:.2f} → {row['spares']['cpu_es_ms']:.2f} → {row['proxy']['cpu_es_ms']:.2f} |")
    lines += ["", f"Grouping micro-benchmark ({grouping['windows']} windows of 1,000 real hits of `match` "
              "queries on `body`, threshold 0.8, garbage collector as in a proxy worker): "
              "`fingerprint.similar_pairs` + `group_labels` "
              f"{grouping['core_ms_mean']:.2f} ms CPU mean ({grouping['core_ms_max']:.2f} max); the proxy's "
              "whole `proxy.grouping.collapse.group` (reading 1,000 signatures out of the hits, pairs, labels, "
              f"member lists) {grouping['cpu_ms_mean']:.2f} ms mean ({grouping['cpu_ms_max']:.2f} max); "
              f"pairs found {grouping['pairs_found']} of "
              f"{grouping['pairs_all_pairs']} an all-pairs comparison of the same signatures finds "
              f"(recall {grouping['recall']:.4f}).", "",
              "Targets: +≤2 ms p50 at size 10 and +≤5 ms at size 100 with 1 client; ≥70% of "
              "direct throughput with 32 clients; grouping 1,000 hits ≤ 5 ms CPU with ≥ 99% recall. "
              "The floor, spares and bare columns are what a proxy that does nothing, one that only "
              "asks for the spare hits, and one that does only the unavoidable part of collapsing "
              "reach in the same run.", ""]
    lines += ["| target | floor (does nothing) | spares (asks for the spare hits) | bare collapse "
              "| neardup proxy | met |", "|---|---|---|---|---|---|"]
    for row in rows:
        d, f, sp, b, p = row["direct"], row["floor"], row["spares"], row["bare"], row["proxy"]
        if row["clients"] == 1:
            limit = 2.0 if row["size"] == 10 else 5.0
            lines.append(f"| 1 client, size {row['size']}: +p50 ≤ {limit:g} ms | {f['p50'] - d['p50']:+.2f} ms "
                         f"| {sp['p50'] - d['p50']:+.2f} ms "
                         f"| {b['p50'] - d['p50']:+.2f} ms | {p['p50'] - d['p50']:+.2f} ms "
                         # pinned, CPU 0 runs Elasticsearch and the load generator together:
                         # not the set-up of the latency targets
                         f"| {'(pinned)' if pin else 'yes' if p['p50'] - d['p50'] <= limit else 'no'} |")
        else:
            ratio = p["rps"] / d["rps"]
            lines.append(f"| 32 clients, size {row['size']}: ≥ 70% of direct req/s | {f['rps'] / d['rps']:.0%} "
                         f"| {sp['rps'] / d['rps']:.0%} "
                         f"| {b['rps'] / d['rps']:.0%} | {ratio:.0%} | {'yes' if ratio >= 0.7 else 'no'} |")
    lines.append(f"| grouping 1,000 hits ≤ 5 ms CPU (similar_pairs + group_labels) | | | | {grouping['core_ms_mean']:.2f} ms "
                 f"| {'yes' if grouping['core_ms_mean'] <= 5 else 'no'} |")
    lines.append(f"| grouping 1,000 hits ≤ 5 ms CPU (whole proxy step) | | | | {grouping['cpu_ms_mean']:.2f} ms "
                 f"| {'yes' if grouping['cpu_ms_mean'] <= 5 else 'no'} |")
    lines.append(f"| recall ≥ 99% of all-pairs | | | | {grouping['recall']:.2%} "
                 f"| {'yes' if grouping['recall'] >= 0.99 else 'no'} |")
    lines.append("")
    if not pin:   # pinned, direct runs on one core and the proxies on the other: no common budget
        lines += room_at_70(rows, cores=len(os.sched_getaffinity(0)))
    return "\n".join(lines)


def room_at_70(rows: list[dict[str, Any]], cores: int) -> list[str]:
    """What the 32-client target leaves for collapsing, in the run's own figures.

    At 32 clients the cores are the bottleneck, so ``cores·1000/rps`` is what one search costs the
    machine in core-milliseconds: Elasticsearch's, the load generator's and the proxy's CPU, and
    any time a core waits (which costs throughput all the same). 70% of direct allows
    ``cores·1000/(0.7·direct)``. The *spares* reference has paid the hop and the spare hits; what
    is left of that allowance is all any collapsing proxy may spend reading the answer, grouping
    and writing the page. The bare collapse's figure is what doing only that costs here.
    """
    out = []
    for row in rows:
        if row["clients"] == 1:
            continue
        d, sp, b, p = (row[name]["rps"] for name in ("direct", "spares", "bare", "proxy"))
        allowed = cores * 1000 / (0.7 * d)
        left = allowed - cores * 1000 / sp
        own_cpu = row["bare"]["cpu_bare_ms"] - row["spares"]["cpu_spares_ms"]
        out.append(f"- 32 clients, size {row['size']}: 70% of direct allows {allowed:.2f} core-ms per search; "
                   f"after the hop and the spare hits (*spares*, {cores * 1000 / sp:.2f} core-ms) "
                   f"{left:+.2f} ms are left for reading the answer, grouping and writing the page; the "
                   f"bare collapse spends {cores * 1000 / b - cores * 1000 / sp:.2f} ms on it "
                   f"({own_cpu:.2f} ms of it its own CPU, the rest Elasticsearch's and cores waiting), "
                   f"the neardup proxy {cores * 1000 / p - cores * 1000 / sp:.2f} ms.")
    if not out:
        return []
    return ["What the 32-client target leaves for collapsing (what a search costs the machine = cores × "
            "1000 / req/s core-ms, the cores being the bottleneck):", "", *out, ""]


def write_section(path: Path, text: str) -> None:
    """Replace (or append) the section ``text`` starts with (its first line, ``## Proxy`` or the
    pinned one) in the benchmark docs, leaving the others alone."""
    current = path.read_text() if path.exists() else "# Benchmark results\n"
    heading = text.split("\n", 1)[0]
    pattern = re.compile(rf"^{re.escape(heading)}\n.*?(?=^## |\Z)", re.S | re.M)
    if pattern.search(current):
        updated = pattern.sub(lambda _: text + "\n", current)
    else:
        updated = current.rstrip("\n") + "\n\n" + text + "\n"
    path.write_text(updated)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--es", default=os.environ.get("NEARDUP_TEST_ES_URL", "http://127.0.0.1:9200"))
    parser.add_argument("--index", help="an existing index of Reuters enriched by neardup index")
    parser.add_argument("--requests", type=int, default=400, help="searches per setting and target")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--workers", type=int, default=1, help="proxy worker processes (proxy.workers)")
    parser.add_argument("--results", type=Path, help="replace the section in this file (docs/benchmarks.md)")
    parser.add_argument("--pin", action="store_true",
                        help="Elasticsearch and the load generator on CPU 0, the proxies on CPU 1 "
                             "(the proxy on a core of its own; needs 2 CPUs and the right to pin the node)")
    parser.add_argument("--reference-server", nargs=3, metavar=("KIND", "PORT", "ES_URL"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.reference_server:
        kind, port, es_url = args.reference_server
        reference_server(kind, int(port), es_url)
        return 0
    es = Elasticsearch(args.es, request_timeout=300)
    load_before = f"{os.getloadavg()[0]:.1f}"
    index = args.index or load_reuters(es, args.es)
    process, proxy_url, proxy_pids = start_proxy(args.es, args.workers)
    references = {kind: start_reference(kind, args.es) for kind in REFERENCES}
    try:
        pids = {"proxy": proxy_pids, **{kind: [ref.pid] for kind, (ref, _) in references.items()},
                "es": [es_pid(es)]}
        urls = {"direct": args.es, **{kind: url for kind, (_, url) in references.items()}, "proxy": proxy_url}
        texts = queries(args.requests, args.seed)
        rows = []
        placement = pinned(pids["es"][0], [pid for name, group in pids.items() if name != "es" for pid in group]) \
            if args.pin else contextlib.nullcontext()
        with placement:
            for clients in (1, 32):
                for size in (10, 100):
                    row: dict[str, Any] = {"clients": clients, "size": size,
                                           **compare(urls, index, texts, size, clients, pids)}
                    print(f"clients={clients} size={size}: {row}", file=sys.stderr)
                    rows.append(row)
        grouping = grouping_benchmark(es, index, texts)
        total = es.count(index=index)["count"]
    finally:
        for child in (process, *(ref for ref, _ in references.values())):
            child.terminate()
            child.wait(30)
        if not args.index:
            es.options(ignore_status=404).indices.delete(index=index)
    command = "python bench/proxy.py --es URL" + (f" --requests {args.requests}" if args.requests != 400 else "") \
        + (" --index NAME" if args.index else "") + (f" --workers {args.workers}" if args.workers != 1 else "") \
        + (" --pin" if args.pin else "")
    text = report(rows, grouping, command, total, load_before, args.workers, args.pin)
    print(text)
    if args.results:
        write_section(args.results, text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
