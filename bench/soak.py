#!/usr/bin/env python
"""Soak test of the collapsing proxy: many clients, a mixed load, minutes on end.

    .venv/bin/python bench/soak.py --es http://127.0.0.1:9200 [--minutes 10] [--clients 64]
                                   [--index NAME] [--results docs/benchmarks.md]

1. **Corpus.** Reuters-21578 streamed to ``neardup load`` (fingerprints added on the way in)
   into a fresh index, or an enriched index given with ``--index``. Writes go to a second,
   fresh index.
2. **Proxy.** ``neardup proxy`` as a subprocess on a free port (one worker, default settings).
3. **Load.** ``--clients`` concurrent clients (one aiohttp session, one connection each), each
   looping until the time is up over a fixed mix: collapsed searches (``from`` 0 to 20), the
   same with ``neardup=off``, searches with ``_source`` filtering, ``_msearch`` of three searches,
   paging (pages 1 to 3 of one query), ``_bulk`` writes of 10 new documents, realtime gets of
   documents this client wrote, gets of Reuters documents.
4. **Checks on every answer** (a failure counts as an error of kind ``corrupt:<check>``): status,
   JSON, every hit's ``_source.title`` equal to the corpus's for its ``_id``, ``size`` groups at
   most, the collapse summary present exactly when collapsing was on, no document twice across
   the pages of one query, every ``_bulk`` item created, every get equal to what was written.
5. **The proxy process** every 5 s: resident memory, open file descriptors, TCP connections from
   clients and to Elasticsearch (psutil); reported at the start (after a warm-up of a tenth of the
   run) and at the end, with the range over the run.
6. **Afterwards:** every acknowledged write is read back from Elasticsearch directly and compared
   by SHA-256 of its canonical JSON; documents missing, unexpected or different are counted.

Prints a Markdown report (requests, errors by kind, p50/p99/max latency overall and per kind,
proxy memory and connections); ``--results`` writes it as the ``## Reliability`` section.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import random
import re
import subprocess
import sys
import time
import uuid
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import psutil
from elasticsearch import Elasticsearch, helpers

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from neardup.corpora import reuters_documents  # noqa: E402

SECTION = "## Reliability"
SAMPLE_SECONDS = 5.0
REQUEST_TIMEOUT = 120.0
#: The mix: (operation, weight).
MIX = (("search", 30), ("search_off", 10), ("search_source", 10), ("msearch", 10), ("paging", 10),
       ("bulk", 10), ("get_written", 10), ("get_reuters", 10))
WORDS = ("oil", "prices", "bank", "rates", "trade", "wheat", "dollar", "shares", "profit", "net",
         "loss", "company", "said", "year", "market", "stock", "tonnes", "billion", "exports")


def canonical_sha(source: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(source, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


class Corrupt(Exception):
    """An answer that arrived but is wrong."""


@dataclass
class Tally:
    latencies: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    errors: Counter[str] = field(default_factory=Counter)
    examples: dict[str, str] = field(default_factory=dict)
    requests: int = 0
    written: dict[str, str] = field(default_factory=dict)       # _id -> sha256 of the acknowledged source

    def error(self, kind: str, detail: str) -> None:
        self.errors[kind] += 1
        self.examples.setdefault(kind, detail[:300])


@dataclass
class Target:
    proxy_url: str
    index: str
    write_index: str
    titles: dict[str, str]           # Reuters _id -> title
    ids: list[str]


# -- the load ------------------------------------------------------------------------------------------
async def request(session: aiohttp.ClientSession, tally: Tally, kind: str, method: str, url: str,
                  body: Any = None, ndjson: bytes | None = None) -> Any:
    """One request; its latency goes under ``kind``; returns the parsed JSON of a 2xx answer."""
    headers = {"Content-Type": "application/x-ndjson" if ndjson is not None else "application/json"}
    data = ndjson if ndjson is not None else (json.dumps(body).encode() if body is not None else None)
    started = time.perf_counter()
    tally.requests += 1
    async with session.request(method, url, data=data, headers=headers) as response:
        raw = await response.read()
        tally.latencies[kind].append(time.perf_counter() - started)
        if not 200 <= response.status < 300:
            raise Corrupt(f"status:{response.status}", raw[:200].decode(errors="replace"))
        try:
            return json.loads(raw)
        except ValueError:
            raise Corrupt("not_json") from None


def check_search(answer: Any, target: Target, size: int, collapsed: bool, title_only: bool = False) -> list[str]:
    """The ids on the page (kept hits and their folded near-duplicates); raises Corrupt."""
    if not isinstance(answer, dict) or not isinstance(answer.get("hits", {}).get("hits"), list):
        raise Corrupt("search_shape")
    if ("neardup" in answer) != collapsed:
        raise Corrupt("collapse_summary")
    page = answer["hits"]["hits"]
    if len(page) > size:
        raise Corrupt("page_size")
    ids = []
    for hit in page:
        members = [hit] + (hit.get("inner_hits", {}).get("neardup", {}).get("hits", {}).get("hits", [])
                           if collapsed else [])
        for member in members:
            source = member.get("_source", {})
            if source.get("title") != target.titles.get(member.get("_id")):
                raise Corrupt("hit_source")
            if title_only and set(source) - {"title"}:
                raise Corrupt("source_filtering")
            ids.append(member["_id"])
    return ids


def query_body(rng: random.Random) -> dict[str, Any]:
    return {"query": {"match": {"body": " ".join(rng.sample(WORDS, 2))}}}


async def one_operation(session: aiohttp.ClientSession, rng: random.Random, client: int, tally: Tally,
                        target: Target, written: list[str], counter: list[int]) -> None:
    op = rng.choices([m[0] for m in MIX], weights=[m[1] for m in MIX])[0]
    base = f"{target.proxy_url}/{target.index}"
    if op in ("search", "search_off", "search_source"):
        start = rng.choice((0, 10, 20))
        body = {**query_body(rng), "from": start, "size": 10}
        if op == "search_source":
            body["_source"] = ["title"]
        url = base + "/_search" + ("?neardup=off" if op == "search_off" else "")
        answer = await request(session, tally, op, "POST", url, body)
        check_search(answer, target, 10, op != "search_off", title_only=op == "search_source")
    elif op == "msearch":
        lines = []
        for _ in range(3):
            lines += [json.dumps({"index": target.index}), json.dumps({**query_body(rng), "size": 5})]
        answer = await request(session, tally, op, "POST", f"{target.proxy_url}/_msearch",
                               ndjson=("\n".join(lines) + "\n").encode())
        if len(answer.get("responses", [])) != 3:
            raise Corrupt("msearch_responses")
        for item in answer["responses"]:
            check_search(item, target, 5, True)
    elif op == "paging":
        body = query_body(rng)
        seen: set[str] = set()
        for page in range(3):
            answer = await request(session, tally, op, "POST", base + "/_search",
                                   {**body, "from": 10 * page, "size": 10})
            ids = check_search(answer, target, 10, True)
            if seen.intersection(ids):
                raise Corrupt("paging_repeat")
            seen.update(ids)
    elif op == "bulk":
        lines, docs = [], {}
        for _ in range(10):
            counter[0] += 1
            doc_id = f"c{client}-{counter[0]}"
            doc = {"client": client, "seq": counter[0], "title": rng.choice(list(target.titles.values())),
                   "text": " ".join(rng.choices(WORDS, k=rng.randint(5, 60))) + " ёжик €",
                   "n": rng.randint(-2**62, 2**62), "x": rng.random()}
            docs[doc_id] = doc
            lines += [json.dumps({"index": {"_index": target.write_index, "_id": doc_id}}),
                      json.dumps(doc, ensure_ascii=False)]
        answer = await request(session, tally, op, "POST", f"{target.proxy_url}/_bulk",
                               ndjson=("\n".join(lines) + "\n").encode())
        items = answer.get("items", [])
        if answer.get("errors") or len(items) != 10 or any(i["index"]["status"] != 201 for i in items):
            raise Corrupt("bulk_items")
        for doc_id, doc in docs.items():
            tally.written[doc_id] = canonical_sha(doc)
            written.append(doc_id)
    elif op == "get_written" and written:
        doc_id = rng.choice(written)
        answer = await request(session, tally, op, "GET", f"{target.proxy_url}/{target.write_index}/_doc/{doc_id}")
        if not answer.get("found") or canonical_sha(answer["_source"]) != tally.written[doc_id]:
            raise Corrupt("get_written")
    else:
        doc_id = rng.choice(target.ids)
        answer = await request(session, tally, "get_reuters", "GET", f"{base}/_doc/{doc_id}")
        if answer.get("_source", {}).get("title") != target.titles[doc_id]:
            raise Corrupt("get_reuters")


async def client_loop(session: aiohttp.ClientSession, client: int, deadline: float, tally: Tally,
                      target: Target, seed: int) -> None:
    rng = random.Random(seed * 1000 + client)
    written: list[str] = []
    counter = [0]
    while time.monotonic() < deadline:
        try:
            await one_operation(session, rng, client, tally, target, written, counter)
        except Corrupt as exc:
            kind = exc.args[0] if exc.args[0].startswith("status:") else f"corrupt:{exc.args[0]}"
            tally.error(kind, f"client {client}: {exc.args[1] if len(exc.args) > 1 else ''}")
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            tally.error(f"exception:{type(exc).__name__}", str(exc))


# -- the proxy process ---------------------------------------------------------------------------------
@dataclass
class Sample:
    at: float
    rss_mb: float
    fds: int
    client_connections: int
    upstream_connections: int


def sample(pid: int, proxy_port: int, es_port: int) -> Sample:
    process = psutil.Process(pid)
    connections = process.net_connections(kind="tcp")
    established = [c for c in connections if c.status == psutil.CONN_ESTABLISHED]
    return Sample(time.monotonic(), process.memory_info().rss / 2**20, process.num_fds(),
                  sum(1 for c in established if c.laddr and c.laddr.port == proxy_port),
                  sum(1 for c in established if c.raddr and c.raddr.port == es_port))


async def monitor(pid: int, proxy_port: int, es_port: int, until: float, samples: list[Sample]) -> None:
    while time.monotonic() < until:
        samples.append(sample(pid, proxy_port, es_port))
        await asyncio.sleep(SAMPLE_SECONDS)
    samples.append(sample(pid, proxy_port, es_port))


async def run_load(target: Target, clients: int, seconds: float, seed: int, pid: int,
                   es_port: int) -> tuple[Tally, list[Sample], float]:
    tally = Tally()
    samples: list[Sample] = []
    connector = aiohttp.TCPConnector(limit=clients, limit_per_host=clients)
    timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT)
    started = time.monotonic()
    deadline = started + seconds
    proxy_port = int(target.proxy_url.rsplit(":", 1)[1])
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        await asyncio.gather(monitor(pid, proxy_port, es_port, deadline, samples),
                             *(client_loop(session, k, deadline, tally, target, seed) for k in range(clients)))
    return tally, samples, time.monotonic() - started


# -- set-up and verification ----------------------------------------------------------------------------
def load_corpus(es_url: str, index: str) -> None:
    lines = "".join(json.dumps(doc, ensure_ascii=False) + "\n" for doc in reuters_documents()).encode()
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEARDUP_")}
    env.update({"NEARDUP_UPSTREAM__URLS": es_url, "NEARDUP_LOGGING__LEVEL": "WARNING", "PYTHONPATH": str(ROOT)})
    subprocess.run([sys.executable, "-m", "neardup", "load", "--index", index, "--id-field", "id", "--refresh", "-"],
                   input=lines, check=True, env=env, cwd=ROOT, stdout=subprocess.DEVNULL)


def start_proxy(es_url: str) -> tuple[subprocess.Popen[str], str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEARDUP_")}
    env.update({"PYTHONPATH": str(ROOT), "NEARDUP_LOGGING__LEVEL": "WARNING"})
    process = subprocess.Popen([sys.executable, "-m", "neardup", "proxy", "--port", "0", "--upstream", es_url],
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, cwd=ROOT, text=True)
    assert process.stdout is not None
    match = re.search(r"listening on (http://\S+)", process.stdout.readline())
    if not match:
        process.kill()
        raise SystemExit("the proxy did not start")
    return process, match.group(1)


def verify_writes(es: Elasticsearch, index: str, written: dict[str, str]) -> dict[str, int]:
    es.indices.refresh(index=index)
    stored = {hit["_id"]: canonical_sha(hit["_source"]) for hit in
              helpers.scan(es, index=index, query={"query": {"match_all": {}}}, size=2000)}
    return {"acknowledged": len(written), "stored": len(stored),
            "missing": sum(1 for k in written if k not in stored),
            "unexpected": sum(1 for k in stored if k not in written),
            "different": sum(1 for k, sha in written.items() if k in stored and stored[k] != sha)}


def proxy_counters(url: str) -> dict[str, float]:
    import urllib.request

    text = urllib.request.urlopen(url + "/_neardup/metrics", timeout=30).read().decode()
    totals: dict[str, float] = defaultdict(float)
    for line in text.splitlines():
        for name in ("neardup_proxy_upstream_errors_total", "neardup_proxy_fail_open_total",
                     "neardup_proxy_hits_collapsed_total"):
            if line.startswith(name):
                totals[name] += float(line.rsplit(" ", 1)[1])
    return dict(totals)


# -- the report ------------------------------------------------------------------------------------------
def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def report(tally: Tally, samples: list[Sample], elapsed: float, checks: dict[str, int], counters: dict[str, float],
           args: argparse.Namespace, loads: tuple[float, float], corpus_docs: int) -> str:
    every = [v for values in tally.latencies.values() for v in values]
    warm = [s for s in samples if s.at - samples[0].at >= elapsed / 10] or samples
    first, last = warm[0], samples[-1]
    failed = sum(tally.errors.values())
    lines = [
        SECTION, "",
        f"`{command(args)}` — {args.clients} clients for {elapsed / 60:.1f} min against Elasticsearch 8.19 "
        f"(one node, loopback), Reuters-21578 ({corpus_docs} documents, enriched by `neardup load`), "
        f"`neardup proxy` with one worker and default settings. Machine: {os.cpu_count()} cores shared with "
        f"Elasticsearch, the proxy and the load generator; load average {loads[0]:.1f} at the start, "
        f"{loads[1]:.1f} at the end.", "",
        f"* **Requests:** {tally.requests} ({tally.requests / elapsed:.0f}/s); operations by kind: "
        + ", ".join(f"{k} {len(v)}" for k, v in sorted(tally.latencies.items())) + ".",
        f"* **Errors:** {failed}" + (" — " + ", ".join(f"{k}: {n}" for k, n in tally.errors.most_common())
                                     if failed else " (no failed, wrong or corrupted answer)") + ".",
        f"* **Latency (all requests):** p50 {percentile(every, 0.5) * 1000:.1f} ms, p99 "
        f"{percentile(every, 0.99) * 1000:.1f} ms, max {max(every, default=0) * 1000:.0f} ms.",
        f"* **Writes verified afterwards:** {checks['acknowledged']} acknowledged, {checks['stored']} stored, "
        f"{checks['missing']} missing, {checks['unexpected']} unexpected, {checks['different']} with a different "
        "checksum.",
        f"* **Proxy counters:** upstream errors {counters.get('neardup_proxy_upstream_errors_total', 0):.0f}, "
        f"fail-opens {counters.get('neardup_proxy_fail_open_total', 0):.0f}, hits collapsed "
        f"{counters.get('neardup_proxy_hits_collapsed_total', 0):.0f}.",
        "", "| proxy process | start (after warm-up) | end | min | max |", "|---|---|---|---|---|",
    ]
    for label, attr, fmt in (("resident memory, MB", "rss_mb", "{:.1f}"), ("open file descriptors", "fds", "{}"),
                             ("client connections", "client_connections", "{}"),
                             ("connections to Elasticsearch", "upstream_connections", "{}")):
        values = [getattr(s, attr) for s in warm]
        lines.append(f"| {label} | {fmt.format(getattr(first, attr))} | {fmt.format(getattr(last, attr))} | "
                     f"{fmt.format(min(values))} | {fmt.format(max(values))} |")
    tenths = [min(samples, key=lambda point: abs(point.at - samples[0].at - k * elapsed / 10)) for k in range(11)]
    lines += ["", "Resident memory at each tenth of the run, MB: "
              + ", ".join(f"{point.rss_mb:.1f}" for point in tenths) + "."]
    lines += ["", "| operation | requests | p50 ms | p99 ms | max ms |", "|---|---|---|---|---|"]
    for kind, values in sorted(tally.latencies.items()):
        lines.append(f"| {kind} | {len(values)} | {percentile(values, 0.5) * 1000:.1f} | "
                     f"{percentile(values, 0.99) * 1000:.1f} | {max(values) * 1000:.0f} |")
    if tally.examples:
        lines += ["", "First example of each error kind: "
                  + "; ".join(f"`{k}`: {v}" for k, v in tally.examples.items())]
    return "\n".join(lines) + "\n"


def command(args: argparse.Namespace) -> str:
    return (f"python bench/soak.py --es URL --minutes {args.minutes:g}"
            + (f" --clients {args.clients}" if args.clients != 64 else ""))


def write_section(path: Path, text: str) -> None:
    """Replace (or append) this script's section of a Markdown file such as docs/benchmarks.md,
    leaving the others alone."""
    current = path.read_text() if path.exists() else "# Benchmark results\n"
    pattern = re.compile(r"^## Reliability\b.*?(?=^## |\Z)", re.S | re.M)
    updated = pattern.sub(lambda _: text + "\n", current) if pattern.search(current) \
        else current.rstrip("\n") + "\n\n" + text
    path.write_text(updated)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--es", default=os.environ.get("NEARDUP_TEST_ES_URL", "http://127.0.0.1:9200"))
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--index", help="an existing index of Reuters enriched by neardup (not changed)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--results", type=Path, help="also write the section into this Markdown file, replacing its own "
                        "section (e.g. docs/benchmarks.md)")
    args = parser.parse_args()
    es = Elasticsearch(args.es, request_timeout=300)
    suffix = uuid.uuid4().hex[:8]
    index = args.index or f"bench-soak-reuters-{suffix}"
    write_index = f"bench-soak-writes-{suffix}"
    if not args.index:
        print(f"loading Reuters-21578 into {index} with neardup load ...", file=sys.stderr)
        load_corpus(args.es, index)
    es.indices.create(index=write_index, settings={"number_of_shards": 1, "number_of_replicas": 0})
    titles = {hit["_id"]: hit["_source"].get("title") for hit in
              helpers.scan(es, index=index, query={"query": {"match_all": {}}, "_source": ["title"]}, size=5000)}
    target = Target("", index, write_index, titles, sorted(titles))
    process, target.proxy_url = start_proxy(args.es)
    loads = [os.getloadavg()[0], 0.0]
    try:
        print(f"proxy at {target.proxy_url}; {args.clients} clients for {args.minutes:g} min ...", file=sys.stderr)
        tally, samples, elapsed = asyncio.run(run_load(target, args.clients, args.minutes * 60, args.seed,
                                                       process.pid, int(args.es.rsplit(":", 1)[1].strip("/"))))
        loads[1] = os.getloadavg()[0]
        counters = proxy_counters(target.proxy_url)
    finally:
        process.terminate()
        process.wait(60)
    checks = verify_writes(es, write_index, tally.written)
    text = report(tally, samples, elapsed, checks, counters, args, (loads[0], loads[1]), len(titles))
    print(text)
    if args.results:
        write_section(args.results, text)
    es.options(ignore_status=404).indices.delete(index=write_index)
    if not args.index:
        es.options(ignore_status=404).indices.delete(index=index)
    clean = not tally.errors and not any(checks[k] for k in ("missing", "unexpected", "different"))
    return 0 if clean else 1


if __name__ == "__main__":
    raise SystemExit(main())
