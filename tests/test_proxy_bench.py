"""bench/proxy.py's *bare* collapse is a lower bound for the proxy only if it does the same
grouping: it must fold exactly the hits ``proxy.grouping.collapse.group`` folds, keep the heads in rank
order and stop at ``size`` groups. Checked on search answers built from real Reuters stories and
edited copies of them (no Elasticsearch: the answer's shape is Elasticsearch's)."""

from __future__ import annotations

import importlib.util
import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from neardup.corpora import reuters_documents
from neardup.fingerprint import Fingerprinter, FingerprintParams
from neardup.proxy.grouping import collapse
from neardup.proxy.grouping.fingerprints import default_algorithms

BENCH = Path(__file__).resolve().parent.parent / "bench" / "proxy.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_proxy", BENCH)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module   # msgspec resolves the Structs' annotations through it
    spec.loader.exec_module(module)
    yield module
    del sys.modules[spec.name]


@pytest.fixture(scope="module")
def stories() -> list[str]:
    texts = [d["body"] for d in reuters_documents() if len(d.get("body", "").split()) > 80]
    return random.Random(5).sample(texts, 40)


def _edited(text: str, rng: random.Random) -> str:
    """A reprint: a few words dropped (resemblance stays high)."""
    words = text.split()
    for _ in range(2):
        del words[rng.randrange(len(words))]
    return " ".join(words)


def _answer(stories: list[str], rng: random.Random, hits: int) -> tuple[bytes, list[dict]]:
    fingerprinter = Fingerprinter(FingerprintParams())
    texts: list[str] = []
    while len(texts) < hits:
        original = rng.choice(stories)
        texts.append(original if original not in texts else _edited(original, rng))
        if rng.random() < 0.4:
            texts.append(_edited(original, rng))
    texts = texts[:hits]
    sources = [{"body": text, "neardup": fingerprinter.fingerprint(text).to_source()} for text in texts]
    hit_list = [{"_index": "i", "_id": str(k), "_score": float(hits - k), "_source": source}
                for k, source in enumerate(sources)]
    answer = {"took": 3, "timed_out": False,
              "_shards": {"total": 1, "successful": 1, "skipped": 0, "failed": 0},
              "hits": {"total": {"value": 500, "relation": "eq"}, "max_score": float(hits),
                       "hits": hit_list}}
    return json.dumps(answer).encode(), hit_list


@pytest.mark.parametrize("seed", range(8))
def test_bare_collapse_folds_what_the_proxy_folds(bench, stories, seed):
    rng = random.Random(seed)
    size = rng.choice([3, 5, 10])
    raw, hits = _answer(stories, rng, size + 6)
    groups, _ = collapse.group(hits, "_source", 0.8, "resemblance", default_algorithms(FingerprintParams()))
    page = json.loads(bench.bare_collapse(raw, size, 0.8))

    got = [[hit["_id"]] + [m["_id"] for m in hit["inner_hits"]["neardup"]["hits"]["hits"]]
           for hit in page["hits"]["hits"]]
    expected = [[hits[k]["_id"] for k in group] for group in groups[:size]]
    assert got == expected
    assert any(len(group) > 1 for group in groups), "the answer should hold near-duplicates"
    assert page["hits"]["total"] == {"value": 500, "relation": "eq"}
    for hit in page["hits"]["hits"]:   # the sources come back as they went in
        assert hit["_source"] == hits[int(hit["_id"])]["_source"]


def test_each_run_replaces_only_its_own_section_of_results(bench, tmp_path):
    """A pinned run (``--pin``) and a shared one write different sections; each run replaces its
    own and leaves the other, and the rest of RESULTS.md, as they were."""
    results = tmp_path / "RESULTS.md"
    results.write_text("# Benchmark results\n\n## Proxy\n\nold shared\n\n## Indexer\n\nindexer text\n")
    bench.write_section(results, f"{bench.PINNED_SECTION}\n\npinned one\n")
    bench.write_section(results, f"{bench.SECTION}\n\nshared two\n")
    bench.write_section(results, f"{bench.PINNED_SECTION}\n\npinned three\n")
    text = results.read_text()
    assert text.count("## Proxy") == 2 and "old shared" not in text and "pinned one" not in text
    assert "shared two" in text and "pinned three" in text and text.endswith("pinned three\n\n")
    assert text.index("shared two") < text.index("## Indexer") < text.index("indexer text")


@pytest.mark.parametrize("size", [1, 10, 25, 100, 500])
def test_spares_reference_asks_for_the_proxys_first_window(bench, size):
    """The *spares* reference costs Elasticsearch what the proxy's first window costs it only if
    it asks for the same number of hits (the proxy's plan for the bench's search; the bench's
    sizes are far below ``collapse.max_window``, which caps the proxy's window, not the
    reference's)."""
    from neardup.config import load_config
    from neardup.proxy.handlers.params import parse_controls, resolve, split_query
    from neardup.proxy.handlers.search_plan import Plan, plan_search

    config = load_config()
    body = {"query": {"match": {"title": "oil prices rise"}}, "size": size}
    controls, _, _ = parse_controls("", {})
    plan = plan_search(body, split_query(""), resolve(controls, config.collapse, "reuters", config.tfidf.threshold),
                       config.collapse.max_window)
    assert isinstance(plan, Plan)

    sent, asked = bench.with_spares(json.dumps(body).encode())
    assert asked == size
    assert json.loads(sent) == {**body, "size": plan.first_window()}


def test_bounds_come_from_the_run_and_the_proxys_own_gzip_level(bench):
    """The gzip bound adds the warm-loop CPU of the proxy's compressor at its own level (not
    another level's, nor zlib's) to the collapsed CPU of the same size; the throughput bound is
    the spares reference's share of direct, given at 32 clients only; the report shows both."""
    from neardup.proxy.transport.framing import GZIP_LEVEL

    def row(clients: int, size: int, collapsed_ms: float, spares_rps: float) -> dict:
        target = {"cpu_ms": 1.0, "rps": 100.0, "p50": 1.0, "p99": 2.0, "es_cpu_ms": 1.0, "errors": 0}
        row = {name: dict(target) for name in (t.name for t in bench.TARGETS)}
        row["collapsed"]["cpu_ms"], row["spares"]["rps"] = collapsed_ms, spares_rps
        return {"clients": clients, "size": size, **row}

    rows = [row(1, 10, 0.8, 90.0), row(32, 100, 1.2, 88.0)]
    levels = [{"size": size, "compressor": name, "level": level, "kib": 1.0, "share": 0.5,
               "cpu_ms": 9.0 if (name, level) != ("ISA-L", GZIP_LEVEL) else {10: 0.08, 100: 0.6}[size]}
              for size in (10, 100) for name in ("zlib", "ISA-L") for level in (0, 1, 2, 3)]
    (gzip_what, gzip_values, _), (share_what, share_values, unit) = bench.bounds(rows, levels)
    assert gzip_values == [pytest.approx(1.1), pytest.approx(1.5)]
    assert share_values == [None, pytest.approx(0.88)] and unit == "%"
    text = bench.report(rows, {"windows": 1, "core_ms_mean": 0, "core_ms_max": 0, "cpu_ms_mean": 0,
                               "cpu_ms_max": 0, "pairs_found": 1, "pairs_all_pairs": 1, "recall": 1.0},
                        "cmd", 1, "0.0", gzip_levels=levels)
    assert f"| {gzip_what} | 1.10× | 1.50× |" in text and f"| {share_what} |  | 88.0% |" in text


def test_cpu_seconds_counts_another_process_finer_than_clock_ticks(bench):
    """The bench reads the CPU of processes it does not run in: a child's CPU seconds, read from
    outside, agree with the child's own count, to well under the 10 ms of a clock tick."""
    child = subprocess.Popen([sys.executable, "-c",
                              "import sys, time\n"
                              "end = time.process_time() + 0.155\n"
                              "while time.process_time() < end: pass\n"
                              "print(time.process_time(), flush=True)\n"
                              "sys.stdin.read()"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        own = float(child.stdout.readline())
        seen = bench.cpu_seconds(child.pid)
    finally:
        child.communicate("")
    assert own >= 0.155
    assert abs(seen - own) < 0.0005, (seen, own)   # ticks would be up to 10 ms apart
