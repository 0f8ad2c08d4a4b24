"""Benchmark of ``neardup index``: end-to-end documents per second on Reuters-21578 in the real
Elasticsearch, the share of time spent fingerprinting versus Elasticsearch I/O, the CPU the
cluster spends per document for each write shape, and the peak memory of the job at two corpus
sizes (memory must not grow with the index size).

For each size (Reuters ×1, ×4 by default: copies of every story under new ids) and each write
shape (``--shapes``: ``partial``, partial updates only; ``whole``, whole-document writes where
the index allows them, the default of ``neardup index``; either with ``-earlier`` on an index
mapped as neardup mapped ``super`` and ``mega`` before, plain ``keyword`` with doc values, the
other ones get the mapping ``neardup index`` puts; ``baseline``, ``neardup index`` of another
checkout, ``--baseline TREE``, with its own mapping and writes) it loads a fresh index, runs ``python
-m neardup index --json`` as a subprocess exactly as a user would (``partial`` through this
script, which runs the same command with ``IndexOptions.whole_documents`` off), samples the peak
resident memory (``VmHWM`` of /proc/PID/status) of the job's parent and each worker process
every 0.1 s, and prints:

* docs/s: documents read ÷ wall time of the command (start-up, mapping check, counting included);
* fingerprint / ES read / ES write: seconds summed over workers (from the job's summary) and the
  fingerprinting share of their sum;
* ES ms/doc: CPU time of the Elasticsearch node during the command (after a warm-up run of each
  shape on a small index, since a fresh node spends CPU compiling its own code)
  (``GET _nodes/_local/stats/process``: ``process.cpu.total_in_millis``) ÷ documents written;
* peak RSS of the parent and of the largest worker.

Usage::

    .venv/bin/python bench/indexer.py [--es-url URL] [--copies 1 4] [--workers 2] [--batch-size 500]
                                      [--shapes partial-earlier whole partial whole-earlier baseline]
                                      [--baseline TREE]

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
from neardup.fingerprint import FIELD, es_mapping  # noqa: E402

#: The ``neardup`` sub-fields as neardup mapped them before ``super`` and ``mega`` were indexed less.
EARLIER_PROPERTIES = {"super": {"type": "keyword"}, "mega": {"type": "keyword"}}
SHAPES = ["partial", "whole", "partial-earlier", "whole-earlier", "baseline"]


def load_copies(es: Elasticsearch, index: str, docs: list[dict[str, Any]], copies: int,
                earlier: bool = False) -> int:
    """A fresh index of ``copies`` × ``docs``; ``earlier``: with the earlier ``neardup`` mapping."""
    mappings = es_mapping()
    if earlier:
        mappings["properties"][FIELD]["properties"].update(EARLIER_PROPERTIES)
    es.indices.create(index=index, settings={"number_of_shards": 2, "number_of_replicas": 0,
                                             "refresh_interval": "-1"},
                      mappings=mappings if earlier else None)
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


def es_cpu_millis(es: Elasticsearch) -> int:
    """CPU time the node has used since it started (the benchmark's node: one node)."""
    nodes = es.nodes.stats(node_id="_local", metric="process").body["nodes"]
    return sum(int(n["process"]["cpu"]["total_in_millis"]) for n in nodes.values())


def peak_rss(process: psutil.Process) -> int:
    """The process's peak resident memory so far (``VmHWM``), else its resident memory now."""
    try:
        with open(f"/proc/{process.pid}/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return int(process.memory_info().rss)


def run_job(es_url: str, index: str, workers: int, batch_size: int, shape: str = "whole",
            tree: Path = ROOT) -> dict[str, Any]:
    """``neardup index`` of the checkout ``tree`` on ``index`` (``shape``: see the module docstring)."""
    env = {k: v for k, v in os.environ.items() if not (k.startswith("NEARDUP_") and "__" in k)}
    env.update(NEARDUP_UPSTREAM__URLS=es_url, NEARDUP_LOGGING__LEVEL="WARNING",
               PYTHONPATH=str(tree) + os.pathsep + env.get("PYTHONPATH", ""))
    runner = (["-m", "neardup"] if shape.startswith("whole") or shape == "baseline"
              else [str(Path(__file__).resolve()), "--run-partial"])
    command = [sys.executable, *runner, "index", "--index", index, "--json",
               "--workers", str(workers), "--batch-size", str(batch_size)]
    started = time.perf_counter()
    job = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=tree)
    parent = psutil.Process(job.pid)
    peak_parent = 0
    peak_worker: dict[int, int] = {}
    while job.poll() is None:
        try:
            peak_parent = max(peak_parent, peak_rss(parent))
            for child in parent.children(recursive=True):
                try:
                    peak_worker[child.pid] = max(peak_worker.get(child.pid, 0), peak_rss(child))
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


def run_partial(argv: list[str]) -> int:
    """``neardup ARGV`` with whole-document writes off (partial updates only)."""
    import dataclasses

    from neardup.cli import index as index_cli
    from neardup.cli import main as cli_main

    original = index_cli.run_job

    def partial_only(config: Any, options: Any, **kwargs: Any) -> Any:
        return original(config, dataclasses.replace(options, whole_documents=False), **kwargs)

    index_cli.run_job = partial_only
    return cli_main(argv)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--es-url", default=os.environ.get("NEARDUP_TEST_ES_URL", "http://127.0.0.1:9299"),
                        help="Elasticsearch to benchmark against")
    parser.add_argument("--copies", type=int, nargs="+", default=[1, 4],
                        help="corpus sizes as multiples of Reuters-21578 (default: 1 4)")
    parser.add_argument("--workers", type=int, default=2, help="worker processes (default: 2)")
    parser.add_argument("--batch-size", type=int, default=500, help="page and bulk size (default: 500)")
    parser.add_argument("--shapes", nargs="+", choices=SHAPES,
                        default=["partial-earlier", "whole", "partial", "whole-earlier", "whole", "partial-earlier"],
                        help="write shapes to compare, in this order, each on a fresh copy of the same index "
                             "(default: partial-earlier whole partial whole-earlier whole partial-earlier)")
    parser.add_argument("--baseline", type=Path, metavar="TREE",
                        help="the checkout whose neardup index the shape baseline runs (git worktree add TREE REV)")
    parser.add_argument("--warm-up", type=int, default=2000,
                        help="stories enriched with each shape first, not counted (the node's JIT warms up)")
    args = parser.parse_args()
    if ("baseline" in args.shapes) != (args.baseline is not None):
        parser.error("the shape baseline and --baseline TREE go together")
    trees = {"baseline": args.baseline.resolve()} if args.baseline else {}
    es = Elasticsearch(args.es_url, request_timeout=120)
    docs = list(reuters_documents())
    revision = subprocess.run(["git", "-C", str(args.baseline), "rev-parse", "--short", "HEAD"], check=True,
                              capture_output=True, text=True).stdout.strip() if args.baseline else ""
    print(f"Elasticsearch {args.es_url}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}, "
          f"workers={args.workers}, batch={args.batch_size}, Reuters-21578: {len(docs)} stories"
          + (f", baseline at {revision}" if revision else ""))
    header = (f"{'shape':>15} {'docs':>8} {'wall s':>7} {'docs/s':>7} {'fp s':>7} {'read s':>7} {'write s':>8} "
              f"{'fp share':>8} {'ES ms/doc':>9} {'parent MB':>9} {'worker MB':>9}")
    if args.warm_up:
        for shape in sorted(set(args.shapes)):
            index = f"bench-indexer-warm-up-{shape}-{uuid.uuid4().hex[:6]}"
            try:
                load_copies(es, index, docs[:args.warm_up], 1, shape.endswith("-earlier"))
                run_job(args.es_url, index, args.workers, args.batch_size, shape, trees.get(shape, ROOT))
            finally:
                es.options(ignore_status=404).indices.delete(index=index)
    print(header)
    for copies in args.copies:
        for shape in args.shapes:
            index = f"bench-indexer-{copies}x-{shape}-{uuid.uuid4().hex[:6]}"
            try:
                count = load_copies(es, index, docs, copies, shape.endswith("-earlier"))
                time.sleep(5)  # let the merges of the load end before the CPU is counted
                cpu_before = es_cpu_millis(es)
                result = run_job(args.es_url, index, args.workers, args.batch_size, shape, trees.get(shape, ROOT))
                cpu = es_cpu_millis(es) - cpu_before
            finally:
                es.options(ignore_status=404).indices.delete(index=index)
            s = result["summary"]
            busy = s["fingerprint_seconds"] + s["read_seconds"] + s["write_seconds"]
            written = max(1, s["updated"])
            row = (f"{shape:>15} {count:>8} {result['wall']:>7.1f} {s['read'] / result['wall']:>7.0f} "
                   f"{s['fingerprint_seconds']:>7.1f} {s['read_seconds']:>7.1f} {s['write_seconds']:>8.1f} "
                   f"{100 * s['fingerprint_seconds'] / busy:>7.0f}% {cpu / written:>9.3f} "
                   f"{result['peak_parent_mb']:>9.0f} {result['peak_worker_mb']:>9.0f}")
            print(row, flush=True)
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--run-partial"]:
        raise SystemExit(run_partial(sys.argv[2:]))
    raise SystemExit(main())
