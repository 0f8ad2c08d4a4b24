"""What TF-IDF costs the indexer: ``neardup index`` on the same Reuters stories with ``tfidf.enabled``
off and on, in the real Elasticsearch, plus the size of what it stores.

For each setting it loads a fresh index with the first ``--docs`` stories that have a body, runs
``python -m neardup index --json`` (2 workers, as a user would) and prints docs/s, the workers'
seconds fingerprinting (with TF-IDF: also weighing the vectors), counting terms and updating the
statistics index, reading and writing (summed over workers), the statistics'
size (terms, part documents, bytes of ``_source``) and the mean JSON size of a stored
vector. A second run with ``--force`` re-weights every vector (nothing is counted again) and checks
that the statistics did not change.

Usage::

    .venv/bin/python bench/tfidf_indexer.py [--es-url URL] [--docs 5000]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import uuid
from itertools import islice
from pathlib import Path
from typing import Any

from elasticsearch import Elasticsearch, helpers

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from neardup.config import load_config  # noqa: E402
from neardup.corpora import reuters_documents  # noqa: E402
from neardup.indexer.client import display_url, make_client  # noqa: E402
from neardup.indexer.retry import Retrier  # noqa: E402
from neardup.indexer.tfidf_stats import StatsStore, stats_index_name  # noqa: E402
from neardup.tfidf_config import weigher_from_config  # noqa: E402


def run_index(es_url: str, index: str, tfidf: bool, force: bool = False) -> tuple[dict[str, Any], float]:
    env = {k: v for k, v in os.environ.items() if not (k.startswith("NEARDUP_") and "__" in k)}
    env.update({"NEARDUP_UPSTREAM__URLS": es_url, "NEARDUP_TFIDF__ENABLED": "true" if tfidf else "false",
                "NEARDUP_LOGGING__LEVEL": "WARNING"})
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "neardup", "index", "--index", index, "--json", "--workers", "2"]
                          + (["--force"] if force else []), capture_output=True, env=env, cwd=ROOT, check=False)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(done.stderr.decode())
    return json.loads(done.stdout), elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--es-url", default=os.environ.get("NEARDUP_TEST_ES_URL", "http://127.0.0.1:9299"))
    parser.add_argument("--docs", type=int, default=5000)
    args = parser.parse_args()
    es = Elasticsearch(args.es_url, request_timeout=300)
    docs = list(islice(reuters_documents(with_body_only=True), args.docs))
    config = load_config(environ={"NEARDUP_UPSTREAM__URLS": args.es_url, "NEARDUP_TFIDF__ENABLED": "true"})
    print(f"{len(docs):,} Reuters stories with a body, 2 workers, batch 500\n")
    print("| tfidf | docs/s | wall s | fingerprint s | TF-IDF counting + statistics s | ES read s | ES write s |")
    print("|---|---|---|---|---|---|---|")
    for tfidf in (False, True):
        index = f"bench-tfidf-{uuid.uuid4().hex[:8]}"
        stats_index = stats_index_name(config.tfidf.stats_index, index)
        try:
            es.indices.create(index=index, settings={"number_of_shards": 1, "number_of_replicas": 0})
            helpers.bulk(es, ({"_index": index, "_id": d["id"], "_source": d} for d in docs), chunk_size=2000,
                         refresh=True)
            summary, elapsed = run_index(args.es_url, index, tfidf)
            print(f"| {'on' if tfidf else 'off'} | {summary['read'] / elapsed:,.0f} | {elapsed:.1f} | "
                  f"{summary['fingerprint_seconds']:.1f} | {summary['tfidf_seconds']:.1f} | "
                  f"{summary['read_seconds']:.1f} | {summary['write_seconds']:.1f} |")
            if not tfidf:
                continue
            client = make_client(config.upstream)
            store = StatsStore(client, Retrier(display_url(config.upstream), 3), stats_index,
                               weigher_from_config(config).version, config.tfidf.stats_parts)
            stats = store.read()
            es.indices.refresh(index=stats_index, expand_wildcards="all")
            size = es.indices.stats(index=stats_index, expand_wildcards="all")["indices"][stats_index]
            hits = es.search(index=index, size=1000, source=["neardup.tf"])["hits"]["hits"]
            vector_bytes = sum(len(json.dumps(h["_source"]["neardup"]["tf"], separators=(",", ":"))) for h in hits)
            forced, forced_elapsed = run_index(args.es_url, index, True, force=True)
            again = store.read()
            client.close()
            print(f"\nStatistics: N = {stats.doc_count:,}, {len(stats):,} distinct terms in "
                  f"{config.tfidf.stats_parts} part documents + 1 count document; "
                  f"{size['primaries']['store']['size_in_bytes'] / 1e6:.1f} MB on disk; "
                  f"{12 * len(stats) / 1e6:.2f} MB of arrays (16 bytes of base64 a term in _source).")
            print(f"Stored vector: {vector_bytes / len(hits):.0f} bytes of JSON on average (first {len(hits)}).")
            print(f"`--force` re-weighting run: {forced['read'] / forced_elapsed:,.0f} docs/s "
                  f"({forced_elapsed:.1f} s); statistics unchanged: {again == stats}.")
        finally:
            es.options(ignore_status=404).indices.delete(index=index)
            es.options(ignore_status=404).indices.delete(index=stats_index, expand_wildcards="all")


if __name__ == "__main__":
    main()
