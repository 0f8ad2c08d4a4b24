#!/usr/bin/env python
"""Throughput, latency and CPU of the collapsing proxy against direct Elasticsearch and references.

    .venv/bin/python bench/proxy.py --es http://127.0.0.1:9200 [--index NAME] [--requests N]
                                    [--workers N] [--pin] [--baseline TREE] [--results docs/benchmarks.md]

1. **Corpus.** Reuters-21578 loaded into a fresh index and enriched by ``neardup index``
   (or an existing enriched index given with ``--index``).
2. **Proxies.** ``neardup proxy`` started as a subprocess on a free port (one worker), beside
   Debian's nginx as a plain reverse proxy (:func:`start_nginx`; installed with apt-get when
   missing) and three reference proxies on neardup's own stack (:data:`REFERENCES`).
3. **Load.** The same sequence of searches (``match`` on ``title`` with the words of a real
   Reuters title, seeded) sent to every target of :data:`TARGETS` in the same run, interleaved in
   small chunks so a busy shared machine affects all alike: 1 and 32 concurrent clients ×
   ``size`` 10 and 100. The targets: Elasticsearch directly; nginx; the references (the *floor*,
   which does nothing; *spares*, the floor asking for the proxy's spare hits; the *bare*
   collapse, which does only what any collapsing proxy must); the neardup proxy passing the
   search through (``neardup=off``) and collapsing it; and with ``Accept-Encoding: gzip`` the
   floor passing Elasticsearch's gzip bytes, the proxy passing them through and the proxy
   collapsing (and compressing its own answer). Requests per second, p50 and p99 latency.
   With ``--pin`` Elasticsearch and the load generator run on CPU 0 and the proxies on CPU 1:
   the proxy on a core of its own, as on a host of its own, so it takes no CPU from
   Elasticsearch (the section ``## Proxy on a core of its own``). With ``--baseline TREE`` a
   second ``neardup proxy``, run from another checkout (``git worktree add TREE REV``), is
   driven beside the first (:data:`BASELINE_TARGETS`): a change's before and after in one run.
4. **CPU.** The CPU time of the proxy process serving each target (nginx: its master and worker)
   and of the Elasticsearch process (:func:`cpu_seconds`; the node's pid from
   ``GET _nodes/_local/process``) over each run, divided by the number of requests. The load
   generator, the proxies and Elasticsearch share the machine's cores.
5. **Targets.** The ratios of :func:`targets`, each within the one run, and beside them the
   :func:`bounds` the same run sets on two of them.
6. **Grouping micro-benchmark.** The proxy's grouping (``proxy.grouping.collapse.group``: signature read,
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
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
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
from neardup.proxy.transport.framing import GZIP_LEVEL  # noqa: E402

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
SECTION = "## Proxy"
PINNED_SECTION = "## Proxy on a core of its own (`--pin`)"


def cpu_seconds(pid: int) -> float:
    """The CPU time of a process (all its threads, user and system) from the kernel's CPU clock of
    the process, in nanoseconds. The fallback, /proc/<pid>/stat's utime + stime (fields 14 and
    15), counts whole clock ticks of 10 ms, and a chunk of 100 searches takes only a few."""
    try:
        return time.clock_gettime_ns(_process_cpu_clock(pid)) / 1e9
    except OSError:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def _process_cpu_clock(pid: int) -> int:
    """The clock id of a process's CPU clock (Linux's ``MAKE_PROCESS_CPUCLOCK(pid, CPUCLOCK_SCHED)``,
    which ``clock_getcpuclockid`` returns for another process)."""
    return ((~pid) << 3) | 2


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
    merge_away_deleted(es, name)
    return name


def merge_away_deleted(es: Elasticsearch, name: str, wait: float = 120.0) -> None:
    """Force-merge ``name`` into one segment without deleted documents. ``neardup index``
    rewrites every document, and the engine keeps the soft-deleted copies through merges until
    the shard's retention lease is synced (every 30 s): merged at once, the index would hold
    twice the documents for every search to walk."""
    deadline = time.monotonic() + wait
    while True:
        es.options(request_timeout=600).indices.forcemerge(index=name, max_num_segments=1)
        deleted = int(es.cat.indices(index=name, h="docs.deleted", format="json")[0]["docs.deleted"])
        if not deleted:
            return
        if time.monotonic() > deadline:
            raise SystemExit(f"{name} still holds {deleted} deleted documents after {wait:.0f} s of merging")
        time.sleep(5)


def start_proxy(es_url: str, workers: int = 1, settings: dict[str, str] | None = None,
                tree: Path = ROOT) -> tuple[subprocess.Popen[str], str, list[int]]:
    """The proxy subprocess, its URL and the pids whose CPU it spends (the workers: with
    ``--workers N`` > 1 the parent only supervises and forks N workers); ``settings``: more
    ``NEARDUP_*`` configuration variables; ``tree``: the checkout whose ``neardup`` it runs."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEARDUP_")}
    env.update({"PYTHONPATH": str(tree), "NEARDUP_LOGGING__LEVEL": "WARNING", **(settings or {})})
    process = subprocess.Popen([sys.executable, "-m", "neardup", "proxy", "--port", "0",
                                "--upstream", es_url, "--workers", str(workers)],
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, cwd=tree, text=True)
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


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for_port(url: str) -> None:
    host, port = url.rsplit("/", 1)[1].rsplit(":", 1)
    for _ in range(100):
        try:
            socket.create_connection((host, int(port)), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)


def ensure_nginx() -> str:
    """The ``nginx`` binary; Debian's package installed with apt-get when missing. Its service
    is kept from starting (``policy-rc.d`` answers 101 during the install): the bench runs its
    own nginx with its own configuration, and leaves nothing running."""
    found = shutil.which("nginx") or ("/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None)
    if found:
        return found
    policy = Path("/usr/sbin/policy-rc.d")
    own_policy = not policy.exists()
    if own_policy:
        policy.write_text("#!/bin/sh\nexit 101\n")
        policy.chmod(0o755)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    try:
        if subprocess.run(["apt-get", "install", "-y", "-q", "nginx"], env=env,
                          stdout=subprocess.DEVNULL).returncode != 0:
            subprocess.run(["apt-get", "update", "-q"], env=env, check=True, stdout=subprocess.DEVNULL)
            subprocess.run(["apt-get", "install", "-y", "-q", "nginx"], env=env, check=True,
                           stdout=subprocess.DEVNULL)
    finally:
        if own_policy:
            policy.unlink()
    return shutil.which("nginx") or "/usr/sbin/nginx"


#: nginx as a plain reverse proxy: one worker (as the proxy's one), a keep-alive upstream pool,
#: answers buffered in memory (never in temp files), no access log.
NGINX_CONF = """\
worker_processes 1;
daemon off;
pid {home}/nginx.pid;
error_log {home}/error.log warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    client_body_temp_path {home}/client_body;
    proxy_temp_path {home}/proxy;
    fastcgi_temp_path {home}/fastcgi;
    uwsgi_temp_path {home}/uwsgi;
    scgi_temp_path {home}/scgi;
    client_max_body_size 100m;
    client_body_buffer_size 1m;
    upstream elasticsearch {{
        server {upstream};
        keepalive 64;
    }}
    server {{
        listen 127.0.0.1:{port} backlog=4096;
        location / {{
            proxy_pass http://elasticsearch;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering on;
            proxy_buffer_size 64k;
            proxy_buffers 32 64k;
            proxy_max_temp_file_size 0;
        }}
    }}
}}
"""


@contextlib.contextmanager
def start_nginx(es_url: str) -> Iterator[tuple[str, list[int]]]:
    """nginx (:data:`NGINX_CONF`) on a free port in front of ``es_url``: its URL and the pids
    whose CPU it spends (the master and its worker); stopped on exit."""
    binary = ensure_nginx()
    with tempfile.TemporaryDirectory(prefix="bench-nginx-") as home:
        port = free_port()
        conf = Path(home, "nginx.conf")
        conf.write_text(NGINX_CONF.format(home=home, port=port, upstream=es_url.split("://", 1)[1].rstrip("/")))
        process = subprocess.Popen([binary, "-p", home, "-c", str(conf), "-e", f"{home}/error.log"],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            url = f"http://127.0.0.1:{port}"
            wait_for_port(url)
            if process.poll() is not None:
                raise SystemExit(f"nginx did not start: {Path(home, 'error.log').read_text()[-500:]}")
            children: list[str] = []
            for _ in range(50):
                children = Path(f"/proc/{process.pid}/task/{process.pid}/children").read_text().split()
                if children:
                    break
                time.sleep(0.1)
            yield url, [process.pid, *map(int, children)]
        finally:
            process.send_signal(signal.SIGQUIT)   # graceful stop of master and worker
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


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
            headers = [("Content-Type", "application/json")]
            if kind == "floor" and "Accept-Encoding" in request.headers:
                headers.append(("Accept-Encoding", request.headers["Accept-Encoding"]))
            reply = await nodes["n"].exchange(request.method, request.raw_path, headers, body)
            answer = bare_collapse(reply.body, size) if kind == "bare" and reply.status == 200 else reply.body
            response = web.Response(body=answer, status=reply.status,
                                    headers={"Content-Type": reply.headers["Content-Type"]})
            if "Content-Encoding" in reply.headers:   # the floor: Elasticsearch's gzip bytes as they came
                response.headers["Content-Encoding"] = reply.headers["Content-Encoding"]
            return response

        async def stop(app: web.Application) -> None:
            nodes["n"].close()

        app.on_startup.append(start)
        app.on_cleanup.append(stop)
        app.router.add_route("*", "/{tail:.*}", handle)
        return app

    web.run_app(init(), host="127.0.0.1", port=port, print=None, access_log=None,
                loop=uvloop.new_event_loop())


def start_reference(kind: str, es_url: str) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    process = subprocess.Popen([sys.executable, __file__, "--reference-server", kind, str(port), es_url])
    url = f"http://127.0.0.1:{port}"
    wait_for_port(url)
    return process, url


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


@dataclass(frozen=True)
class Target:
    """One way of sending the bench's searches: to ``server`` (whose process's CPU is counted),
    with ``query`` after the path, asking for gzip or not."""

    name: str
    server: str
    query: str = ""
    gzip: bool = False


#: Everything driven in each setting, in the order of the report's rows.
TARGETS = (
    Target("direct", "direct"),
    Target("nginx", "nginx"),
    Target("floor", "floor"),
    Target("spares", "spares"),
    Target("bare", "bare"),
    Target("pass-through", "proxy", "?neardup=off"),
    Target("collapsed", "proxy"),
    Target("floor gzip", "floor", gzip=True),
    Target("pass-through gzip", "proxy", "?neardup=off", gzip=True),
    Target("collapsed gzip", "proxy", gzip=True),
)
#: Driven as well with ``--baseline TREE``: the proxy of another checkout, beside this one's.
BASELINE_TARGETS = (
    Target("pass-through, baseline", "baseline", "?neardup=off"),
    Target("collapsed, baseline", "baseline"),
    Target("collapsed gzip, baseline", "baseline", gzip=True),
)


def queries(count: int, seed: int) -> list[str]:
    titles = [d["title"] for d in reuters_documents() if len(d["title"].split()) >= 3]
    rng = random.Random(seed)
    return [" ".join(rng.sample(t.split(), min(3, len(t.split())))) for t in rng.sample(titles, count)]


async def drive(url: str, index: str, target: Target, texts: list[str], size: int, clients: int) -> dict[str, Any]:
    """Send every query once with ``clients`` concurrent connections; latencies in seconds. An
    answer other than 200 (or not gzipped when gzip was asked for) counts as an error."""
    latencies: list[float] = []
    errors = 0
    position = 0
    connector = aiohttp.TCPConnector(limit=clients)
    # Like the official client (http_compress off): no Accept-Encoding unless the target asks
    # for gzip; gzip answers are counted, not decoded (the load generator's CPU is shared).
    headers = {"Content-Type": "application/json", **({"Accept-Encoding": "gzip"} if target.gzip else {})}
    async with aiohttp.ClientSession(connector=connector, skip_auto_headers=("Accept-Encoding",),
                                     auto_decompress=False) as session:
        async def worker() -> None:
            nonlocal position, errors
            while position < len(texts):
                text = texts[position]
                position += 1
                body = json.dumps({"query": {"match": {"title": text}}, "size": size}).encode()
                started = time.perf_counter()
                async with session.post(f"{url}/{index}/_search{target.query}", data=body,
                                        headers=headers) as response:
                    await response.read()
                    gzipped = response.headers.get("Content-Encoding") == "gzip"
                    if response.status != 200 or gzipped != target.gzip:
                        errors += 1
                latencies.append(time.perf_counter() - started)

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(clients)))
        elapsed = time.perf_counter() - started
    return {"latencies": latencies, "elapsed": elapsed, "errors": errors}


def compare(urls: dict[str, str], index: str, texts: list[str], size: int, clients: int,
            pids: dict[str, list[int]], targets: tuple[Target, ...] = TARGETS) -> dict[str, dict[str, Any]]:
    """Send the queries to every target, interleaved in chunks (20 queries with 1 client, 100
    with 32; the order alternates), so that the machine's changing load hits all targets alike.

    Per target: req/s over its own busy time, p50/p99 latency, CPU ms per request of the process
    serving it (``cpu_ms``, none for direct) and of Elasticsearch (``es_cpu_ms``).
    """
    for target in targets:  # warm up
        asyncio.run(drive(urls[target.server], index, target, texts[: max(20, clients * 2)], size, clients))
    chunk = 20 if clients == 1 else 100
    latencies: dict[str, list[float]] = {t.name: [] for t in targets}
    busy = {t.name: 0.0 for t in targets}
    cpu = {t.name: 0.0 for t in targets}
    es_cpu = {t.name: 0.0 for t in targets}
    errors = {t.name: 0 for t in targets}
    order = list(targets)
    for start in range(0, len(texts), chunk):
        part = texts[start:start + chunk]
        for target in order:
            own = pids.get(target.server, [])
            before, es_before = sum(map(cpu_seconds, own)), sum(map(cpu_seconds, pids["es"]))
            result = asyncio.run(drive(urls[target.server], index, target, part, size, clients))
            cpu[target.name] += sum(map(cpu_seconds, own)) - before
            es_cpu[target.name] += sum(map(cpu_seconds, pids["es"])) - es_before
            latencies[target.name] += result["latencies"]
            busy[target.name] += result["elapsed"]
            errors[target.name] += result["errors"]
        order.reverse()
    out = {}
    for target in targets:
        lat = sorted(latencies[target.name])
        n = len(lat)
        out[target.name] = {
            "rps": n / busy[target.name], "p50": lat[n // 2] * 1000, "p99": lat[min(n - 1, int(n * 0.99))] * 1000,
            "errors": errors[target.name], "n": n, "es_cpu_ms": es_cpu[target.name] / n * 1000,
            "cpu_ms": cpu[target.name] / n * 1000 if target.server in pids else None}
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


def gzip_benchmark(es: Elasticsearch, index: str, texts: list[str]) -> list[dict[str, Any]]:
    """CPU ms and compressed share of whole search answers (``size`` 10 and 100, ``_source``
    whole) gzipped by zlib at levels 1, 3 (Elasticsearch's default) and 6 and by ISA-L at its
    levels 0-2: what choosing the proxy's compressor and level (``framing.GZIP_LEVEL``) weighs."""
    import zlib

    from isal import isal_zlib

    compressors = [("zlib", level, zlib.compress) for level in (1, 3, 6)]
    compressors += [("ISA-L", level, isal_zlib.compress) for level in (0, 1, 2)]
    out: list[dict[str, Any]] = []
    for size in (10, 100):
        answers = [json.dumps(es.search(index=index, query={"match": {"title": text}}, size=size).body,
                              separators=(",", ":"), ensure_ascii=False).encode()   # compact, as Elasticsearch writes
                   for text in texts[:20]]
        raw = sum(map(len, answers))
        for name, level, compress in compressors:
            started = time.process_time()
            packed = sum(len(compress(answer, level, wbits=31)) for answer in answers)
            out.append({"size": size, "compressor": name, "level": level, "kib": raw / len(answers) / 1024,
                        "cpu_ms": (time.process_time() - started) / len(answers) * 1000, "share": packed / raw})
    return out


def share_at_32_clients(rows: list[dict[str, Any]], name: str) -> list[float | None]:
    """Target ``name``'s req/s over direct's per setting of ``rows``; None with 1 client."""
    return [r[name]["rps"] / r["direct"]["rps"] if r["clients"] == 32 else None for r in rows]


def targets(rows: list[dict[str, Any]], pin: bool) -> list[tuple[str, list[float | None], str, bool | None]]:
    """The targets, each a ratio or difference within the run: (what, the value per setting of
    ``rows`` (None where it does not apply), its unit, met)."""
    def per_row(value: Any) -> list[float | None]:
        return [value(row) for row in rows]

    def cpu(row: dict[str, Any], name: str) -> float:
        return float(row[name]["cpu_ms"])

    out: list[tuple[str, list[float | None], str, bool | None]] = []

    def add(what: str, values: list[float | None], unit: str, ok: Any) -> None:
        given = [v for v in values if v is not None]
        out.append((what, values, unit, all(ok(v) for v in given) if given else None))

    add("pass-through ≤ 1.2× floor CPU", per_row(lambda r: cpu(r, "pass-through") / cpu(r, "floor")),
        "×", lambda v: v <= 1.2)
    add("pass-through gzip ≤ 1.2× floor gzip CPU",
        per_row(lambda r: cpu(r, "pass-through gzip") / cpu(r, "floor gzip")), "×", lambda v: v <= 1.2)
    add("collapsed ≤ 2× floor CPU (size 10)",
        per_row(lambda r: cpu(r, "collapsed") / cpu(r, "floor") if r["size"] == 10 else None), "×", lambda v: v <= 2)
    add("collapsed ≤ 5× floor CPU (size 100)",
        per_row(lambda r: cpu(r, "collapsed") / cpu(r, "floor") if r["size"] == 100 else None), "×", lambda v: v <= 5)
    add("collapsed gzip ≤ 1.5× collapsed CPU",
        per_row(lambda r: cpu(r, "collapsed gzip") / cpu(r, "collapsed")), "×", lambda v: v <= 1.5)
    if not pin:   # pinned, CPU 0 runs Elasticsearch and the load generator together
        add("1 client, size 10: collapsed +p50 ≤ 1 ms", per_row(
            lambda r: r["collapsed"]["p50"] - r["direct"]["p50"] if (r["clients"], r["size"]) == (1, 10) else None),
            "ms", lambda v: v <= 1)
        add("1 client, size 100: collapsed +p50 ≤ 2.5 ms", per_row(
            lambda r: r["collapsed"]["p50"] - r["direct"]["p50"] if (r["clients"], r["size"]) == (1, 100) else None),
            "ms", lambda v: v <= 2.5)
    collapsed_share = share_at_32_clients(rows, "collapsed")
    if pin:
        add("32 clients: collapsed ≥ 90% of direct req/s", collapsed_share, "%", lambda v: v >= 0.9)
    else:   # sharing the cores with Elasticsearch: shown, the target is the pinned run's
        out.append(("32 clients: collapsed share of direct req/s (target ≥ 90% pinned)", collapsed_share, "%", None))
    return out


def bounds(rows: list[dict[str, Any]], gzip_levels: list[dict[str, Any]]) -> list[tuple[str, list[float | None], str]]:
    """What the run itself says two targets can reach at best: (what, value per setting of
    ``rows``, unit).

    * Compressing an answer costs at least what the proxy's compressor takes on a whole answer
      of that size in a warm loop, so no proxy that compresses its own collapsed answer does
      better than ``1 + deflate / collapsed`` CPU against the same answer uncompressed.
    * The *spares* reference asks Elasticsearch for the proxy's first window and does nothing
      else: where Elasticsearch's core is the limit (pinned), its share of direct req/s is what
      a proxy that reads that window can reach.
    """
    deflate = {g["size"]: g["cpu_ms"] for g in gzip_levels if g["compressor"] == "ISA-L" and g["level"] == GZIP_LEVEL}
    out: list[tuple[str, list[float | None], str]] = []
    if deflate:
        out.append((f"collapsed gzip over collapsed CPU, were the warm-loop deflate (ISA-L level {GZIP_LEVEL}) "
                    "of a whole answer its only cost",
                    [1 + deflate[r["size"]] / r["collapsed"]["cpu_ms"] if r["size"] in deflate else None
                     for r in rows], "×"))
    out.append(("spares' share of direct req/s (the proxy's first window fetched, nothing else done)",
                share_at_32_clients(rows, "spares"), "%"))
    return out


def _cells(values: list[float | None], unit: str) -> list[str]:
    # a tenth of a point: a share of 89.86% reads 89.9%, not 90%, against a 90% line
    return ["" if v is None else f"{v:.1%}" if unit == "%" else f"{v:+.2f} ms" if unit == "ms"
            else f"{v:.2f}×" for v in values]


def report(rows: list[dict[str, Any]], grouping: dict[str, float], command: str, total_docs: int,
           load_before: str, workers: int = 1, pin: bool = False,
           gzip_levels: list[dict[str, Any]] | None = None, baseline: str = "") -> str:
    """The section's text; ``baseline``: the revision ``--baseline`` ran, empty without it."""
    lines = [PINNED_SECTION if pin else SECTION, "", f"Command: `{command}`", "",
             f"Reuters-21578 ({total_docs} stories) enriched by `neardup index`, one shard; `match` on "
             "`title` with three words of a real title; every setting sends the same queries to each "
             f"target, interleaved in chunks of 20 (1 client) or 100 (32 clients) queries: directly; "
             "through Debian's nginx as a plain reverse proxy (one worker, keep-alive upstream pool); "
             "through three reference proxies on neardup's stack (aiohttp's server, one pooled upstream "
             "exchange over `proxy.transport.http1_client`): the *floor*, which does nothing (the upstream "
             "bytes answered), *spares*, the floor asking for the same spare hits as the proxy, and the "
             "*bare* collapse, which does only what any collapsing proxy must; through `neardup proxy` "
             f"({workers} worker{'s' if workers > 1 else ''}) passing the search through (`neardup=off`) "
             "and collapsing it; and with `Accept-Encoding: gzip`, the floor passing Elasticsearch's gzip "
             "bytes, the proxy passing them through, and the proxy collapsing (compressing its own answer). "
             + (f"A second `neardup proxy`, run from another checkout (`--baseline`, at {baseline}), passes "
                "through and collapses beside it (the rows marked baseline). " if baseline else "")
             + ("Pinned (`--pin`): Elasticsearch and the load generator on CPU 0, the proxies on CPU 1. "
                if pin else "Load generator, proxies and Elasticsearch share the 2 cores. ")
             + "CPU per request of the process serving the target (nginx: master and worker) and of "
             "Elasticsearch, from the kernel's CPU clock of each process (nanoseconds). "
             f"Load average at the start: {load_before}, at the end: {os.getloadavg()[0]:.1f} "
             "(other work on the machine shares the cores and the Elasticsearch node).", "",
             "| clients | size | target | req/s | of direct | p50 ms | +p50 ms | p99 ms | CPU ms/req "
             "| × floor CPU | ES CPU ms/req | errors |",
             "|---" * 12 + "|"]
    for row in rows:
        d = row["direct"]
        for target in (*TARGETS, *BASELINE_TARGETS):
            if target.name not in row:
                continue
            r = row[target.name]
            floor = row["floor gzip" if target.gzip else "floor"]["cpu_ms"]
            cpu = "" if r["cpu_ms"] is None else f"{r['cpu_ms']:.2f}"
            times = "" if r["cpu_ms"] is None else f"{r['cpu_ms'] / floor:.2f}"
            lines.append(f"| {row['clients']} | {row['size']} | {target.name} | {r['rps']:.0f} "
                         f"| {r['rps'] / d['rps']:.0%} | {r['p50']:.2f} | "
                         + ("" if target.name == "direct" else f"{r['p50'] - d['p50']:+.2f}")
                         + f" | {r['p99']:.2f} | {cpu} | {times} | {r['es_cpu_ms']:.2f} | {r['errors']} |")
    settings = " | ".join(f"{r['clients']} × {r['size']}" for r in rows)
    lines += ["", "× floor CPU: the target's CPU per request over the floor's (with gzip, over the floor "
              "passing Elasticsearch's gzip bytes).", "",
              "| target | " + settings + " | met |",
              "|---" * (len(rows) + 2) + "|"]
    for what, values, unit, met in targets(rows, pin):
        lines.append(f"| {what} | " + " | ".join(_cells(values, unit))
                     + f" | {'' if met is None else 'yes' if met else 'no'} |")
    lines += ["", "At best, from the same run (`bounds` in `bench/proxy.py`):", "",
              "| at best | " + settings + " |",
              "|---" * (len(rows) + 1) + "|"]
    lines += [f"| {what} | " + " | ".join(_cells(values, unit)) + " |"
              for what, values, unit in bounds(rows, gzip_levels or [])]
    lines += ["", f"Grouping micro-benchmark ({grouping['windows']} windows of 1,000 real hits of `match` "
              "queries on `body`, threshold 0.8, garbage collector as in a proxy worker): "
              "`fingerprint.similar_pairs` + `group_labels` "
              f"{grouping['core_ms_mean']:.2f} ms CPU mean ({grouping['core_ms_max']:.2f} max); the proxy's "
              "whole `proxy.grouping.collapse.group` (reading 1,000 signatures out of the hits, pairs, labels, "
              f"member lists) {grouping['cpu_ms_mean']:.2f} ms mean ({grouping['cpu_ms_max']:.2f} max); "
              f"pairs found {grouping['pairs_found']} of "
              f"{grouping['pairs_all_pairs']} an all-pairs comparison of the same signatures finds "
              f"(recall {grouping['recall']:.4f}; targets ≤ 5 ms CPU, ≥ 99% recall).", ""]
    if gzip_levels:
        lines += ["gzip levels: 20 whole search answers per size (`_source` whole, as the bench's searches "
                  "ask) compressed in the load generator by zlib (what Elasticsearch uses) and by ISA-L; the "
                  "proxy compresses its collapsed answers by ISA-L at `framing.GZIP_LEVEL`, what it passes "
                  "through keeps Elasticsearch's bytes.", "",
                  "| size | answer KiB | compressor | level | CPU ms | compressed to |", "|---|---|---|---|---|---|"]
        lines += [f"| {g['size']} | {g['kib']:.0f} | {g['compressor']} | {g['level']} | {g['cpu_ms']:.2f} "
                  f"| {g['share']:.0%} |"
                  for g in gzip_levels]
        lines.append("")
    return "\n".join(lines)


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
    parser.add_argument("--baseline", type=Path, metavar="TREE",
                        help="also drive the neardup proxy of this checkout (a git worktree of the revision before a change)")
    parser.add_argument("--reference-server", nargs=3, metavar=("KIND", "PORT", "ES_URL"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.reference_server:
        kind, port, es_url = args.reference_server
        reference_server(kind, int(port), es_url)
        return 0
    es = Elasticsearch(args.es, request_timeout=300)
    load_before = f"{os.getloadavg()[0]:.1f}"
    index = args.index or load_reuters(es, args.es)
    if args.index:   # a given index measured as a loaded one: one segment, no deleted documents
        merge_away_deleted(es, index)
    process, proxy_url, proxy_pids = start_proxy(args.es, args.workers)
    baseline = start_proxy(args.es, args.workers, tree=args.baseline.resolve()) if args.baseline else None
    references = {kind: start_reference(kind, args.es) for kind in REFERENCES}
    try:
        with start_nginx(args.es) as (nginx_url, nginx_pids):
            pids = {"proxy": proxy_pids, "nginx": nginx_pids,
                    **{kind: [ref.pid] for kind, (ref, _) in references.items()}, "es": [es_pid(es)]}
            urls = {"direct": args.es, "nginx": nginx_url, "proxy": proxy_url,
                    **{kind: url for kind, (_, url) in references.items()}}
            driven: tuple[Target, ...] = TARGETS
            if baseline:
                pids["baseline"], urls["baseline"] = baseline[2], baseline[1]
                driven = (*TARGETS, *BASELINE_TARGETS)
            texts = queries(args.requests, args.seed)
            rows = []
            placement = pinned(pids["es"][0], [pid for name, group in pids.items() if name != "es" for pid in group]) \
                if args.pin else contextlib.nullcontext()
            with placement:
                for clients in (1, 32):
                    for size in (10, 100):
                        row: dict[str, Any] = {"clients": clients, "size": size,
                                               **compare(urls, index, texts, size, clients, pids, driven)}
                        print(f"clients={clients} size={size}: {row}", file=sys.stderr)
                        rows.append(row)
        grouping = grouping_benchmark(es, index, texts)
        gzip_levels = gzip_benchmark(es, index, texts)
        total = es.count(index=index)["count"]
    finally:
        children: list[subprocess.Popen[Any]] = [process, *(ref for ref, _ in references.values())]
        for child in children + ([baseline[0]] if baseline else []):
            child.terminate()
            child.wait(30)
        if not args.index:
            es.options(ignore_status=404).indices.delete(index=index)
    command = "python bench/proxy.py --es URL" + (f" --requests {args.requests}" if args.requests != 400 else "") \
        + (" --index NAME" if args.index else "") + (f" --workers {args.workers}" if args.workers != 1 else "") \
        + (" --pin" if args.pin else "") + (" --baseline TREE" if args.baseline else "")
    revision = subprocess.run(["git", "-C", str(args.baseline), "rev-parse", "--short", "HEAD"], check=True,
                              capture_output=True, text=True).stdout.strip() if args.baseline else ""
    text = report(rows, grouping, command, total, load_before, args.workers, args.pin, gzip_levels, revision)
    print(text)
    if args.results:
        write_section(args.results, text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
