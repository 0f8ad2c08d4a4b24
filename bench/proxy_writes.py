#!/usr/bin/env python
"""Bulk write throughput through the proxy with enrichment (``[enrich]``) against direct ``_bulk``.

    .venv/bin/python bench/proxy_writes.py --es http://127.0.0.1:9200 [--docs N] [--batch N]

The first ``--docs`` Reuters-21578 stories with a body, as ``_bulk`` bodies of ``--batch``
``index`` items, are written one request at a time (one client) into a fresh index with the
``neardup`` mapping, four ways: directly to Elasticsearch, through ``neardup proxy`` with the
index not in ``[enrich]`` (the pass-through), and through the proxy with ``on_duplicate`` =
``allow`` and ``reject``. Documents per second and the proxy's CPU seconds (utime+stime of its
process) per 1,000 documents; the proxy runs as a subprocess with one worker.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import urllib.request
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.proxy import cpu_seconds, start_proxy  # noqa: E402 - the proxy subprocess
from neardup.corpora import reuters_documents  # noqa: E402
from neardup.fingerprint import es_mapping, matching  # noqa: E402


def call(url: str, method: str, path: str, body: bytes | None = None, content_type: str = "application/json") -> bytes:
    request = urllib.request.Request(url + path, data=body, method=method,
                                     headers={"Content-Type": content_type} if body is not None else {})
    with urllib.request.urlopen(request, timeout=300) as response:
        return bytes(response.read())


def bodies(docs: int, batch: int) -> list[bytes]:
    stories = []
    for story in reuters_documents(with_body_only=True):
        stories.append(story)
        if len(stories) >= docs:
            break
    out = []
    for start in range(0, len(stories), batch):
        lines = []
        for story in stories[start:start + batch]:
            lines.append(json.dumps({"index": {"_id": str(story["id"])}}).encode())
            lines.append(json.dumps({"title": story["title"], "body": story["body"]}).encode())
        out.append(b"\n".join(lines) + b"\n")
    return out


def run(url: str, es_url: str, index: str, requests: list[bytes], pid: int | None) -> tuple[float, float]:
    mappings = es_mapping()
    mappings["properties"]["neardup"]["properties"]["duplicate_of"] = matching.DUPLICATE_OF_MAPPING
    call(es_url, "PUT", f"/{index}", json.dumps({"mappings": mappings}).encode())
    try:
        before = cpu_seconds(pid) if pid else 0.0
        started = time.perf_counter()
        for body in requests:
            answer = json.loads(call(url, "POST", f"/{index}/_bulk", body, "application/x-ndjson"))
            assert "items" in answer, answer
        elapsed = time.perf_counter() - started
        return elapsed, (cpu_seconds(pid) - before) if pid else 0.0
    finally:
        call(es_url, "DELETE", f"/{index}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--es", default=os.environ.get("NEARDUP_TEST_ES_URL", "http://127.0.0.1:9200"))
    parser.add_argument("--docs", type=int, default=5000)
    parser.add_argument("--batch", type=int, default=500)
    args = parser.parse_args()
    requests = bodies(args.docs, args.batch)
    docs = sum(body.count(b"\n") // 2 for body in requests)
    prefix = f"bench-writes-{uuid.uuid4().hex[:6]}"
    enrich = {f"{prefix}-allow": {"on_duplicate": "allow"}, f"{prefix}-reject": {"on_duplicate": "reject"}}
    process, url, pids = start_proxy(args.es, settings={"NEARDUP_ENRICH__INDICES": json.dumps(enrich)})
    try:
        print(f"{docs} documents in {len(requests)} _bulk requests of {args.batch}, one client")
        print(f"{'path':<28}{'docs/s':>10}{'proxy CPU s/1k docs':>22}")
        for label, target, index, pid in (("direct", args.es, f"{prefix}-direct", None),
                                          ("proxy, not enriched", url, f"{prefix}-plain", pids[0]),
                                          ("proxy, enrich allow", url, f"{prefix}-allow", pids[0]),
                                          ("proxy, enrich reject", url, f"{prefix}-reject", pids[0])):
            elapsed, cpu = run(target, args.es, index, requests, pid)
            cpu_text = f"{cpu / docs * 1000:.2f}" if pid else "-"
            print(f"{label:<28}{docs / elapsed:>10.0f}{cpu_text:>22}", flush=True)
    finally:
        process.terminate()
        process.wait(30)


if __name__ == "__main__":
    main()
