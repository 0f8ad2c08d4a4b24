#!/usr/bin/env python
"""Where a collapsed search's time goes inside the proxy, with one client.

    .venv/bin/python bench/proxy_stages.py --es URL --index NAME [--size 10] [--requests 2000]

One proxy worker runs in a child process with a wall-clock timer around each stage of the search
path (:data:`STAGES`: the functions, replaced where the search path looks them up). The parent
sends 200 warm-up searches, resets the timers, sends ``--requests`` searches with one client
(``bench/proxy.py``'s queries and load generator), and prints each stage's microseconds per
search. A stage's time includes the stages it calls; ``exchange.fetch`` includes the
Elasticsearch round trip. Each timer costs about a microsecond.

One client is what the 1-client latency target measures: every step is serial, and after each
wait on Elasticsearch the proxy runs on cold caches, so a stage takes several times what it takes
in a warm loop.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import importlib
import importlib.util
import inspect
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

#: Each timed stage: (where the search path looks it up: a module, or ``module:Class``, name).
STAGES = (
    ("neardup.proxy.app", "observe"), ("neardup.proxy.app", "proxy_request"),
    ("neardup.proxy.handlers.dispatch", "parse_controls"), ("neardup.proxy.handlers.dispatch", "resolve"),
    ("neardup.proxy.handlers.collapsed_search", "search"), ("neardup.proxy.handlers.collapsed_search", "receive"),
    ("neardup.proxy.handlers.collapsed_search", "_parse_search_body"),
    ("neardup.proxy.handlers.collapsed_search", "plan_search"), ("neardup.proxy.handlers.pushdown", "search"),
    ("neardup.proxy.handlers.collapsed_search", "_collapse_one"), ("neardup.proxy.handlers.exchange", "json_headers"),
    ("neardup.proxy.handlers.exchange", "fetch"), ("neardup.proxy.transport.rawjson", "loads_search"),
    ("neardup.proxy.handlers.search_plan:Window", "add_round"), ("neardup.proxy.grouping.collapse", "group"),
    ("neardup.proxy.grouping.collapse", "_window_read"), ("neardup.proxy.grouping.fingerprints", "read_signatures"),
    ("neardup.proxy.grouping.fingerprints", "window_pairs"),
    ("neardup.proxy.grouping.fingerprints", "similar_pairs"), ("neardup.proxy.grouping.fingerprints", "window_labels"),
    ("neardup.proxy.grouping.fingerprints", "group_labels"),
    ("neardup.proxy.handlers.collapsed_search", "annotate_page"), ("neardup.proxy.handlers.source_check", "finish"),
    ("neardup.proxy.grouping.collapse", "build_page"), ("neardup.proxy.handlers.exchange", "respond"),
    ("neardup.proxy.transport.jsonio", "dumps"),
    ("neardup.proxy.handlers.collapsed_search", "_spliced_answer"), ("neardup.proxy.transport.hitscan", "scan"),
    ("neardup.proxy.grouping.spliced_page", "spliced_page"),
    ("neardup.proxy.grouping.spliced_page", "reference_spliced_page"), ("neardup.proxy.grouping.spliced_page", "_signatures"),
    ("neardup.proxy.grouping.spliced_page", "group_signatures"), ("neardup.proxy.handlers.exchange", "upstream_response"),
)


def _timed(name: str, function: Callable[..., Any], totals: dict[str, list[int]]) -> Callable[..., Any]:
    def add(started: int) -> None:
        entry = totals.setdefault(name, [0, 0])
        entry[0] += time.perf_counter_ns() - started
        entry[1] += 1

    if inspect.iscoroutinefunction(function):
        @functools.wraps(function)
        async def timed_coroutine(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter_ns()
            try:
                return await function(*args, **kwargs)
            finally:
                add(started)
        return timed_coroutine

    @functools.wraps(function)
    def timed(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter_ns()
        try:
            return function(*args, **kwargs)
        finally:
            add(started)
    return timed


def serve_timed(port: int, es_url: str, dump: str) -> None:
    """The child: the proxy (one worker) with every stage timed. SIGUSR2 resets the timers,
    SIGUSR1 writes them to ``dump`` and ends the process."""
    totals: dict[str, list[int]] = {}
    for where, attribute in STAGES:   # before the app exists: it binds some of them at start-up
        module_name, _, owner = where.partition(":")
        target: Any = importlib.import_module(module_name)
        if owner:
            target = getattr(target, owner)
        name = f"{owner or module_name.rsplit('.', 1)[1]}.{attribute}"
        original = getattr(target, attribute)
        timed = _timed(name, original, totals)
        setattr(target, attribute, timed)
        # and in every module that imported it by name, so that each still finds the same function
        # (the compiled page writer stands in only for the default algorithms' own functions)
        for module in list(sys.modules.values()):
            if getattr(module, "__name__", "").startswith("neardup.") and getattr(module, attribute, None) is original:
                setattr(module, attribute, timed)

    def write(*_: Any) -> None:
        Path(dump).write_text(json.dumps(totals))
        os._exit(0)

    signal.signal(signal.SIGUSR1, write)
    signal.signal(signal.SIGUSR2, lambda *_: totals.clear())
    os.environ.update({"NEARDUP_PROXY__PORT": str(port), "NEARDUP_PROXY__WORKERS": "1",
                       "NEARDUP_UPSTREAM__URLS": json.dumps([es_url]), "NEARDUP_LOGGING__LEVEL": "WARNING"})
    from neardup.config import load_config
    from neardup.proxy.server import serve

    serve(load_config())


def _bench_proxy() -> Any:
    spec = importlib.util.spec_from_file_location("bench_proxy", ROOT / "bench" / "proxy.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--es", default=os.environ.get("NEARDUP_TEST_ES_URL", "http://127.0.0.1:9200"))
    parser.add_argument("--index", help="an index of Reuters enriched by neardup index (required)")
    parser.add_argument("--size", type=int, default=10)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--serve", nargs=3, metavar=("PORT", "ES_URL", "DUMP"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve_timed(int(args.serve[0]), args.serve[1], args.serve[2])
        return 0
    if not args.index:
        parser.error("--index is required")
    bench = _bench_proxy()
    collapsed = bench.Target("collapsed", "proxy")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    dump = Path(tempfile.mkdtemp(prefix="neardup-stages-")) / "stages.json"
    child = subprocess.Popen([sys.executable, __file__, "--serve", str(port), args.es, str(dump)],
                             stdout=subprocess.DEVNULL)
    try:
        for _ in range(200):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if child.poll() is not None:
                    raise SystemExit("the timed proxy did not start") from None
                time.sleep(0.1)
        url = f"http://127.0.0.1:{port}"
        texts = bench.queries(args.requests + 200, 1)
        asyncio.run(bench.drive(url, args.index, collapsed, texts[:200], args.size, 1))
        child.send_signal(signal.SIGUSR2)
        time.sleep(0.2)
        result = asyncio.run(bench.drive(url, args.index, collapsed, texts[200:], args.size, 1))
        child.send_signal(signal.SIGUSR1)
        child.wait(30)
    finally:
        if child.poll() is None:
            child.kill()
    totals = json.loads(dump.read_text())
    searches = totals["collapsed_search._collapse_one"][1]
    latencies = sorted(result["latencies"])
    print(f"{searches} searches, size {args.size}, 1 client: p50 {latencies[len(latencies) // 2] * 1000:.2f} ms "
          "end to end\n")
    print("| stage | µs per search | calls per search |\n|---|---|---|")
    for name, (nanoseconds, calls) in sorted(totals.items(), key=lambda item: -item[1][0]):
        print(f"| `{name}` | {nanoseconds / searches / 1000:.1f} | {calls / searches:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
