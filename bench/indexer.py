"""Benchmark of ``neardup index``: end-to-end documents per second on Reuters-21578 in the real
Elasticsearch, the share of time spent fingerprinting versus Elasticsearch I/O, and the peak
memory of the job at two corpus sizes (memory must not grow with the index size).

For each size (Reuters ×1, ×4 by default: copies of every story under new ids) it loads a fresh
index, runs ``python -m neardup index --json`` as a subprocess exactly as a user would, samples
the resident memory (RSS) of the job's parent and each worker process every 0.1 s, and prints:

* docs/s: documents read ÷ wall time of the command (start-up, mapping check, counting included);
* fingerprint / ES read / ES write: seconds summed over workers (from the job's summary) and the
  fingerprinting share of their sum;
* peak RSS of the parent and of the largest worker.

Usage::

    .venv/bin/python bench/indexer.py [--es-url URL] [--copies 1 4] [--workers 2] [--batch-size 500]

The Elasticsearch URL defaults to ``$NEARDUP_TEST_ES_URL``, else http://127.0.0.1:9299. The indices
are named ``bench-indexer-*`` and deleted afterwards.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import psutil
from elasticsearch import Elasticsearch, helpers

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from neardup.corpora import reuters_documents  # noqa: E402


def load_copies(es: Elasticsearch, index: str, docs: list[dict[str, Any]], copies: int) -> int:
    es.indices.create(index=index, settings={"number_of_shards": 2, "number_of_replicas": 0,
                                             "refresh_interval": "-1"})
    actions = ({"_index": index, "_id": f"{copy}-{doc['id']}", "_source": {**doc, "id": f"{copy}-{doc['id']}"}}
               for copy in range(copies) for doc in docs)
    loaded = 0
    for ok, item in helpers.streaming_bulk(es.options(request_timeout=300), actions, chunk_size=2000,
                                           max_retries=5, raise_on_error=False):
        if not ok:
            raise SystemExit(f"loading failed: {item}")
        loaded += 1
    es.indices.put_settings(index=index, settings={"refresh_interval": "1s"})
    es.indices.refresh(index=index)
    es.options(request_timeout=600).indices.forcemerge(index=index, max_num_segments=5)
    return loaded


def run_job(es_url: str, index: str, workers: int, batch_size: int) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not (k.startswith("NEARDUP_") and "__" in k)}
    env.update(NEARDUP_UPSTREAM__URLS=es_url, NEARDUP_LOGGING__LEVEL="WARNING",
               PYTHONPATH=str(ROOT) + os.pathsep + env.get("PYTHONPATH", ""))
    command = [sys.executable, "-m", "neardup", "index", "--index", index, "--json",
               "--workers", str(workers), "--batch-size", str(batch_size)]
    started = time.perf_counter()
    job = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=ROOT)
    parent = psutil.Process(job.pid)
    peak_parent = 0
    peak_worker: dict[int, int] = {}
    while job.poll() is None:
        try:
            peak_parent = max(peak_parent, parent.memory_info().rss)
            for child in parent.children(recursive=True):
                try:
                    peak_worker[child.pid] = max(peak_worker.get(child.pid, 0), child.memory_info().rss)
                except psutil.NoSuchProcess:
                    pass
        except psutil.NoSuchProcess:
            break
        time.sleep(0.1)
    out, err = job.communicate()
    wall = time.perf_counter() - started
    if job.returncode != 0:
        raise SystemExit(f"neardup index failed ({job.returncode}):\n{err.decode()}")
    summary = json.loads(out)
    return {"wall": wall, "summary": summary, "peak_parent_mb": peak_parent / 2**20,
            "peak_worker_mb": max(peak_worker.values(), default=0) / 2**20, "workers_seen": len(peak_worker)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--es-url", default=os.environ.get("NEARDUP_TEST_ES_URL", "http://127.0.0.1:9299"),
                        help="Elasticsearch to benchmark against")
    parser.add_argument("--copies", type=int, nargs="+", default=[1, 4],
                        help="corpus sizes as multiples of Reuters-21578 (default: 1 4)")
    parser.add_argument("--workers", type=int, default=2, help="worker processes (default: 2)")
    parser.add_argument("--batch-size", type=int, default=500, help="page and bulk size (default: 500)")
    args = parser.parse_args()

    es = Elasticsearch(args.es_url, request_timeout=120)
    docs = list(reuters_documents())
    print(f"Elasticsearch {args.es_url}, {os.cpu_count()} CPUs, workers={args.workers}, "
          f"batch={args.batch_size}, Reuters-21578: {len(docs)} stories")
    header = (f"{'docs':>8} {'wall s':>7} {'docs/s':>7} {'fp s':>7} {'read s':>7} {'write s':>8} "
              f"{'fp share':>8} {'parent MB':>9} {'worker MB':>9}")
    rows = [header]
    print(header)
    for copies in args.copies:
        index = f"bench-indexer-{copies}x-{uuid.uuid4().hex[:6]}"
        try:
            count = load_copies(es, index, docs, copies)
            result = run_job(args.es_url, index, args.workers, args.batch_size)
        finally:
            es.options(ignore_status=404).indices.delete(index=index)
        s = result["summary"]
        busy = s["fingerprint_seconds"] + s["read_seconds"] + s["write_seconds"]
        row = (f"{count:>8} {result['wall']:>7.1f} {s['read'] / result['wall']:>7.0f} "
               f"{s['fingerprint_seconds']:>7.1f} {s['read_seconds']:>7.1f} {s['write_seconds']:>8.1f} "
               f"{100 * s['fingerprint_seconds'] / busy:>7.0f}% {result['peak_parent_mb']:>9.0f} "
               f"{result['peak_worker_mb']:>9.0f}")
        rows.append(row)
        print(row, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
