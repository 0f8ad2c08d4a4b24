"""Benchmark of ``neardup index --follow``: the lag from a story's write to its searchable fingerprint
under a steady stream of writes.

For each ``--interval`` it creates a fresh index, starts ``python -m neardup index --follow`` on it
as a subprocess, and runs two threads against the cluster directly (no proxy):

* the writer sends Reuters stories (new ids, each with ``written``: the send time, epoch ms, and a
  sequence number ``seq``) in bulk requests of ``--bulk`` documents, paced to ``--rate`` writes/s;
* the poller watches every ``--sample``-th document: every ``--poll`` seconds it searches for
  the watched documents sent and not yet seen fingerprinted (``terms`` on ``seq``, ``neardup.v``
  present), and notes when each is first seen (when the answer came). Watching a sample keeps
  its searches small whatever the lag: a poller asking for every late document would load the
  cluster more the further the follower falls behind.

Lag = first seen − sent, for the watched documents sent after ``--warmup`` seconds. The poll period bounds
the error (a lag is over-stated by at most one period). Also reported: the writes/s achieved, the
follower's CPU (share of one core), and the documents still unfingerprinted 30 s after the writes
stopped (there must be none).

Usage::

    .venv/bin/python bench/follow_lag.py [--es-url URL] [--rate 500] [--seconds 60] [--interval 1 2]

The Elasticsearch URL defaults to ``$NEARDUP_TEST_ES_URL``, else http://127.0.0.1:9299. The indices
are named ``bench-follow-*`` and deleted afterwards.
"""

from __future__ import annotations

import argparse
import itertools
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import psutil
from elasticsearch import Elasticsearch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from neardup.corpora import reuters_documents  # noqa: E402

MAPPINGS = {"properties": {"title": {"type": "text"}, "body": {"type": "text"},
                           "written": {"type": "date", "format": "epoch_millis"}, "seq": {"type": "long"}}}


@dataclass
class Run:
    interval: float
    issued: int = 0                                            # seqs 0 .. issued-1 sent or being sent
    sent: dict[int, float] = field(default_factory=dict)      # seq -> send time (monotonic)
    seen: dict[int, float] = field(default_factory=dict)      # seq -> first seen fingerprinted
    write_errors: int = 0
    started: float = 0.0
    stopped: float = 0.0
    cpu_seconds: float = 0.0
    left: int = 0


def writer(es: Elasticsearch, index: str, stories: list[dict[str, Any]], run: Run, rate: int, bulk: int,
           seconds: float) -> None:
    counter = itertools.count()
    cycle = itertools.cycle(stories)
    period = bulk / rate
    run.started = time.monotonic()
    next_at = run.started
    while time.monotonic() < run.started + seconds:
        operations: list[dict[str, Any]] = []
        sent = time.monotonic()
        wall = int(time.time() * 1000)
        seqs = []
        for _ in range(bulk):
            seq = next(counter)
            story = next(cycle)
            seqs.append(seq)
            operations += [{"index": {"_index": index, "_id": f"w{seq}"}},
                           {"title": story["title"], "body": story["body"], "written": wall, "seq": seq}]
        run.issued = seqs[-1] + 1
        response = es.bulk(operations=operations)
        for seq in seqs:
            run.sent[seq] = sent
        if response["errors"]:
            run.write_errors += sum(1 for item in response["items"] if item["index"].get("error"))
        next_at += period
        time.sleep(max(0.0, next_at - time.monotonic()))
    run.stopped = time.monotonic()


def sampled(run: Run, every: int) -> list[int]:
    """The sequence numbers sent that the poller watches: every ``every``-th."""
    return [seq for seq in run.sent if seq % every == 0]


def poller(es: Elasticsearch, index: str, run: Run, period: float, every: int, done: threading.Event) -> None:
    lowest = 0
    while not done.is_set():
        started = time.monotonic()
        unseen = [seq for seq in range(lowest, run.issued, every) if seq not in run.seen][:2_000]
        if unseen:
            response = es.search(index=index, size=len(unseen), query={"bool": {"filter": [
                {"exists": {"field": "neardup.v"}}, {"terms": {"seq": unseen}}]}},
                source=False, docvalue_fields=["seq"], track_total_hits=False)
            now = time.monotonic()
            for hit in response["hits"]["hits"]:
                run.seen.setdefault(int(hit["fields"]["seq"][0]), now)
            while lowest in run.seen:
                lowest += every
        done.wait(max(0.0, period - (time.monotonic() - started)))


def follower_command(index: str, interval: float, since_field: bool) -> list[str]:
    command = [sys.executable, "-m", "neardup", "index", "--index", index, "--follow", "--interval", str(interval)]
    return command + (["--since-field", "written"] if since_field else [])


def measure(es: Elasticsearch, es_url: str, stories: list[dict[str, Any]], args: argparse.Namespace,
            interval: float) -> Run:
    index = f"bench-follow-{uuid.uuid4().hex[:8]}"
    es.indices.create(index=index, settings={"number_of_shards": 1, "number_of_replicas": 0}, mappings=MAPPINGS)
    env = {k: v for k, v in os.environ.items() if not (k.startswith("NEARDUP_") and "__" in k)}
    env.update(NEARDUP_UPSTREAM__URLS=es_url, NEARDUP_LOGGING__LEVEL="DEBUG" if args.follower_log else "WARNING",
               PYTHONPATH=str(ROOT) + os.pathsep + env.get("PYTHONPATH", ""))
    log = open(args.follower_log, "ab") if args.follower_log else subprocess.PIPE  # noqa: SIM115 - closed below
    follower = subprocess.Popen(follower_command(index, interval, args.since_field), env=env, cwd=ROOT,
                                stdout=subprocess.PIPE, stderr=log)
    run = Run(interval)
    try:
        es.index(index=index, id="probe", document={"title": "probe", "body": "warm the follower up", "seq": -1},
                 refresh=True)
        deadline = time.monotonic() + 120
        while not es.exists(index=index, id="probe") or "neardup" not in es.get(index=index, id="probe")["_source"]:
            if time.monotonic() > deadline or follower.poll() is not None:
                raise SystemExit("the follower did not start (see --follower-log)")
            time.sleep(0.2)
        process = psutil.Process(follower.pid)
        cpu_before = sum(process.cpu_times()[:2])
        done = threading.Event()
        poll = threading.Thread(target=poller, args=(es, index, run, args.poll, args.sample, done), daemon=True)
        poll.start()
        writer(es, index, stories, run, args.rate, args.bulk, args.seconds)
        run.cpu_seconds = sum(process.cpu_times()[:2]) - cpu_before
        deadline = time.monotonic() + 30
        while len(run.seen) < len(sampled(run, args.sample)) and time.monotonic() < deadline:
            time.sleep(0.5)
        done.set()
        poll.join(30)
        run.left = len(sampled(run, args.sample)) - len(run.seen)
    finally:
        follower.send_signal(signal.SIGTERM)
        try:
            follower.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            follower.kill()
        if args.follower_log:
            log.close()
        es.options(ignore_status=404).indices.delete(index=index)
    return run


def row(run: Run, args: argparse.Namespace) -> str:
    counted = [seq for seq in sampled(run, args.sample) if run.sent[seq] >= run.started + args.warmup]
    lags = np.array([run.seen[seq] - run.sent[seq] for seq in counted if seq in run.seen])
    achieved = len(run.sent) / max(run.stopped - run.started, 1e-9)
    p50, p90, p99 = (np.percentile(lags, q) for q in (50, 90, 99)) if len(lags) else (float("nan"),) * 3
    cpu = 100 * run.cpu_seconds / max(run.stopped - run.started, 1e-9)
    return (f"| {run.interval:g} | {args.rate} | {achieved:.0f} | {len(lags):,} | {p50:.2f} | {p90:.2f} | {p99:.2f} | "
            f"{lags.max() if len(lags) else float('nan'):.2f} | {cpu:.0f} % | {run.left} | {run.write_errors} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--es-url", default=os.environ.get("NEARDUP_TEST_ES_URL", "http://127.0.0.1:9299"))
    parser.add_argument("--rate", type=int, default=500, help="writes per second")
    parser.add_argument("--bulk", type=int, default=25, help="documents per bulk request")
    parser.add_argument("--seconds", type=float, default=60.0, help="seconds of writes per interval")
    parser.add_argument("--warmup", type=float, default=5.0, help="seconds of writes left out of the figures")
    parser.add_argument("--poll", type=float, default=0.1, help="seconds between two searches of the poller")
    parser.add_argument("--sample", type=int, default=10, help="the poller watches every N-th document")
    parser.add_argument("--interval", type=float, nargs="+", default=[1.0, 2.0], help="--interval of the follower")
    parser.add_argument("--since-field", action="store_true", help="run the follower with --since-field written")
    parser.add_argument("--follower-log", metavar="FILE", help="append the follower's DEBUG log to FILE")
    args = parser.parse_args()
    es = Elasticsearch(args.es_url, request_timeout=120)
    stories = [{"title": d["title"], "body": d["body"]} for d in reuters_documents() if d["body"].strip()]
    print(f"follower {'with' if args.since_field else 'without'} --since-field; {args.seconds:g} s of writes "
          f"per interval, {args.bulk} documents a bulk request, every {args.sample}th watched, poll every "
          f"{args.poll:g} s; load average "
          f"{os.getloadavg()[0]:.1f} at the start")
    print()
    print("| interval s | target writes/s | achieved writes/s | watched documents | lag p50 s | p90 s | p99 s | max s "
          "| follower CPU | watched left unfingerprinted | write errors |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for interval in args.interval:
        print(row(measure(es, args.es_url, stories, args, interval), args), flush=True)
    print()
    print(f"load average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
