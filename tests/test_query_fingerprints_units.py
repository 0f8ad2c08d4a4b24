"""The pure parts of query-time fingerprints (no cluster): the text, the cache, the budget, grouping."""

from __future__ import annotations

import threading

from msgspec import Raw

from neardup.config import CollapseConfig
from neardup.fingerprint import Fingerprinter, FingerprintParams, jit
from neardup.fingerprint.texts import compute_fingerprint, document_text
from neardup.proxy.grouping import collapse
from neardup.proxy.grouping.fingerprints import default_algorithms
from neardup.proxy.grouping.query_fingerprints import (
    FingerprintCache,
    QueryFingerprints,
    fingerprint_texts,
    in_thread,
    source_text,
    text_digest,
)
from neardup.proxy.handlers.params import parse_controls, resolve

PARAMS = FingerprintParams()
FP = Fingerprinter(PARAMS)
ALGORITHMS = default_algorithms(PARAMS)
TEXT = ("Crude oil prices rose sharply on Monday after the cartel agreed to cut its output by two "
        "million barrels a day, traders said, and analysts expect the rise to last for weeks")


def _read_keys(source: dict) -> dict:
    return {key: source[key] for key in ("v", "sig", "n")}


def test_document_text_is_what_the_indexer_fingerprints() -> None:
    doc = {"title": "Oil", "body": ["first part", "second part"], "other": "x"}
    outcome, text = document_text(doc, ["title", "body"])
    assert outcome == "ok" and text == "Oil\nfirst part\nsecond part"
    assert compute_fingerprint(doc, ["title", "body"], FP)[1] == FP.fingerprint_fields(["Oil", "first part\nsecond part"])
    assert document_text({"title": 7}, ["title", "body"]) == ("non_string", None)
    assert document_text({"title": "  "}, ["title"]) == ("empty", None)
    assert compute_fingerprint({}, ["title"], FP) == ("no_field", None)


def test_fingerprint_texts_gives_the_stored_keys() -> None:
    values, spent = fingerprint_texts(FP, [TEXT, "the of and"], 10.0)
    assert values == [_read_keys(FP.fingerprint(TEXT).to_source()), _read_keys(FP.fingerprint("the of and").to_source())]
    assert values[1] is not None and values[1]["n"] == 0   # no words left: the empty fingerprint
    assert spent >= 0


def test_fingerprint_texts_stops_at_the_cpu_budget() -> None:
    values, _ = fingerprint_texts(FP, [TEXT + str(k) for k in range(50)], 1e-9)
    assert len(values) == 50 and values.count(None) >= 49


def test_source_text_reads_raw_and_parsed_sources() -> None:
    assert source_text(Raw(b'{"title":"A","body":"b\\u00e9","neardup":{"v":"x"}}'), ["title", "body"]) == "A\nb\u00e9"
    assert source_text({"body": "only"}, ["title", "body"]) == "only"
    assert source_text(Raw(b"[1]"), ["title"]) is None
    assert source_text(None, ["title"]) is None
    assert source_text({"title": 3}, ["title"]) is None


def test_cache_is_bounded_and_least_recently_used() -> None:
    cache = FingerprintCache(2)
    a, b, c = (("v", text_digest(t)) for t in ("a", "b", "c"))
    cache.put(a, {"n": 1})
    cache.put(b, {"n": 2})
    assert cache.get(a) == {"n": 1}   # a is now the most recent
    cache.put(c, {"n": 3})
    assert cache.get(b) is None and cache.get(a) == {"n": 1} and cache.get(c) == {"n": 3} and len(cache) == 2
    off = FingerprintCache(0)
    off.put(a, {"n": 1})
    assert off.get(a) is None and len(off) == 0


def test_digest_tells_texts_apart() -> None:
    assert text_digest("a") == text_digest("a") != text_digest("a ")
    assert len(text_digest("\ud800 lone surrogate")) == 16


def test_supplied_fingerprints_group_the_window() -> None:
    stored = FP.fingerprint(TEXT).to_source()
    hits = collapse.WindowHits([{"_id": "0", "_source": {"neardup": stored}},
                                {"_id": "1", "_source": {}},
                                {"_id": "2", "_source": {"neardup": {**stored, "v": "0-old"}}},
                                {"_id": "3", "_source": {}}])
    groups, fingerprinted = collapse.group(hits, "_source", 0.8, "resemblance", ALGORITHMS)
    assert groups == [[0], [1], [2], [3]] and fingerprinted == 1
    collapse.supply(hits, {1: _read_keys(stored), 2: _read_keys(stored)})
    groups, fingerprinted = collapse.group(hits, "_source", 0.8, "resemblance", ALGORITHMS)
    assert groups == [[0, 1, 2], [3]] and fingerprinted == 3
    signatures = collapse.window_signatures(hits, "_source", ALGORITHMS.read)
    assert signatures is not None and signatures[0].tolist() == [0, 1, 2]
    # a tail round appends hits: the supplied ones are still read
    hits.append({"_id": "4", "_source": {"neardup": stored}})
    groups, fingerprinted = collapse.group(hits, "_source", 0.8, "resemblance", ALGORITHMS)
    assert groups == [[0, 1, 2, 4], [3]] and fingerprinted == 4


def test_the_fingerprinting_thread_runs_without_compiled_kernels() -> None:
    worker = QueryFingerprints(PARAMS, ["title", "body"], 10)
    try:
        kernels = worker.executor().submit(jit.kernels).result()
        values, _ = worker.executor().submit(in_thread, [TEXT], 10.0).result()
    finally:
        worker.close()
    assert kernels is None
    assert values == [_read_keys(FP.fingerprint(TEXT).to_source())]


def test_disable_in_this_thread_leaves_other_threads_alone() -> None:
    seen: list[bool] = []

    def off() -> None:
        jit.disable_in_this_thread()
        seen.append(jit.kernels() is None)

    thread = threading.Thread(target=off)
    thread.start()
    thread.join()
    assert seen == [True]
    assert jit.set_enabled(True) is True   # the process-wide switch is untouched


def test_the_request_control_overrides_the_configuration() -> None:
    controls, query, given = parse_controls("neardup_fingerprint_missing=off&q=x", {})
    assert controls.fingerprint_missing is False and query == "q=x" and given
    assert resolve(controls, CollapseConfig(), "news").fingerprint_missing is False
    assert resolve(parse_controls("", {})[0], CollapseConfig(), "news").fingerprint_missing is True
    header, _, _ = parse_controls("", {"X-Neardup-Fingerprint-Missing": "on"})
    assert resolve(header, CollapseConfig(fingerprint_missing=False), "news").fingerprint_missing is True
