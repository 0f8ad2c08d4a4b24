"""A page written from the upstream's bytes holds what the general way writes.

:func:`proxy.grouping.spliced_page.spliced_page` against the window path's own steps
(:meth:`Window.add_round`, :func:`collapse.group`, :func:`annotate_page`, :func:`finish`) on
the same responses: the same keys in the same order and the same values; None wherever the
general way would do more (another round, a hit without a fingerprint, a repeated document).
The scans come from :func:`proxy.transport.hitscan.reference_scan`; the compiled scan is
checked against it in ``test_proxy_hitscan.py``.
"""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from neardup.fingerprint import Fingerprinter, FingerprintParams
from neardup.proxy.grouping import collapse, spliced_page
from neardup.proxy.grouping.fingerprints import default_algorithms
from neardup.proxy.handlers import missing_fingerprints
from neardup.proxy.handlers.params import Settings
from neardup.proxy.handlers.search_plan import Plan, Window, annotate_page, finish, plan_search
from neardup.proxy.transport import jsonio, rawjson
from neardup.proxy.transport.hitscan import reference_scan

ALGORITHMS = default_algorithms(FingerprintParams())
FP = Fingerprinter(FingerprintParams())
WORDS = ("oil price rise opec output quota crude barrel market trade bank rate cut "
         "wheat export grain tonnes shares company profit loss quarter dividend").split()


def _texts(count: int, rng: random.Random) -> list[str]:
    """Stories with near-duplicates among them (edited copies of earlier ones)."""
    texts: list[str] = []
    for _ in range(count):
        if texts and rng.random() < 0.4:
            words = rng.choice(texts).split()
            for _ in range(rng.randrange(1, 4)):
                words[rng.randrange(len(words))] = rng.choice(WORDS)
            texts.append(" ".join(words))
        else:
            texts.append(" ".join(rng.choice(WORDS) for _ in range(60)))
    return texts


def _hits(count: int, seed: int, start: int = 0) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    hits = []
    for k, text in enumerate(_texts(count, rng)):
        source = {"title": f"story {start + k}", "body": text, "n": [1, 2.5, None], "neardup": FP.fingerprint(text).to_source()}
        hit: dict[str, Any] = {"_index": "news", "_id": str(start + k), "_score": rng.choice([round(10 - k / 7, 3), 1.0, 2])}
        if rng.random() < 0.2:
            hit["_routing"] = "r1"
        if rng.random() < 0.1:
            hit["_score"] = None
        if rng.random() < 0.2:
            hit["_ignored"] = ["body.keyword"]
        hit["_source"] = source
        hits.append(hit)
    return hits


def _response(hits: list[dict[str, Any]], took: int = 3, **extra: Any) -> bytes:
    body = {"took": took, "timed_out": False, "_shards": {"total": 1, "successful": 1, "skipped": 0, "failed": 0},
            "hits": {"total": {"value": 1000, "relation": "eq"}, "max_score": 10.0, "hits": hits}, **extra}
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()


def _plan(size: int, start: int, threshold: float, mode: str, as_int: bool) -> Plan:
    settings = Settings(enabled=True, forced=False, threshold=threshold, mode=mode)  # type: ignore[arg-type]
    params = [("rest_total_hits_as_int", "true", "rest_total_hits_as_int=true")] if as_int else []
    plan = plan_search({"from": start, "size": size}, params, settings, 10_000)
    assert isinstance(plan, Plan)
    return plan


def _general(plan: Plan, raws: list[tuple[bytes, int]]) -> bytes | None:
    """The window path's answer to these rounds (the halves of a first window, fetched at
    once: the longer took counts), or None when it would fetch another round."""
    window = Window(plan)
    took = 0
    for raw, requested in raws:
        before = window.took
        window.add_round(rawjson.loads_search(raw), requested)
        took = max(took, window.took - before)
    window.took = took
    groups, fingerprinted = collapse.group(window.hits, plan.channel, plan.settings.threshold, plan.settings.mode,
                                           ALGORITHMS)
    if window.next_round(len(groups)) is not None or not window.complete(len(groups)):
        return None
    annotate_page(window, groups, ALGORITHMS.read)
    response = finish(window, groups, fingerprinted)
    missing_fingerprints.summarize(response[collapse.SUMMARY_KEY], plan, window.hits)
    return jsonio.dumps(response)


def _spliced(plan: Plan, raws: list[tuple[bytes, int]]) -> bytes | None:
    rounds = []
    for raw, requested in raws:
        scan = reference_scan(raw)
        assert scan is not None
        rounds.append(spliced_page.Round(raw, scan, requested))
    settings = plan.settings

    def summarize(page: collapse.Page, window: int, fingerprinted: int) -> dict[str, Any]:
        summary = collapse.summary(page, settings.threshold, settings.mode, window, fingerprinted, True)
        missing_fingerprints.summarize(summary, plan, [])
        return summary

    written = spliced_page.spliced_page(rounds, plan.start, plan.size, settings.threshold,
                                        settings.mode, plan.total_as_int, ALGORITHMS, summarize)  # type: ignore[arg-type]
    return None if written is None else written[0]


def _ordered(raw: bytes) -> Any:
    """The JSON value with every object as its list of (key, value) pairs: key order counts."""
    return json.loads(raw, object_pairs_hook=list)


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("mode", ["resemblance", "containment"])
def test_the_spliced_page_is_the_general_page(seed: int, mode: str) -> None:
    rng = random.Random(seed)
    written = 0
    for threshold in (0.3, 0.6, 0.8, 1.0):
        size, start = rng.choice([1, 5, 10, 30]), rng.choice([0, 0, 2])
        plan = _plan(size, start, threshold, mode, as_int=rng.random() < 0.3)
        count = rng.choice([plan.first_window(), plan.first_window() - 1, 3])   # full, short (exhausted)
        raws = [(_response(_hits(count, seed * 100 + int(threshold * 10))), plan.first_window())]
        general, spliced = _general(plan, raws), _spliced(plan, raws)
        assert (general is None) == (spliced is None)
        if general is not None and spliced is not None:
            assert _ordered(spliced) == _ordered(general)
            written += 1
    assert written


def test_two_halves_take_the_longer_took_and_keep_the_order() -> None:
    plan = _plan(40, 0, 0.95, "resemblance", as_int=False)
    hits = _hits(plan.first_window(), 7)
    half = len(hits) // 2
    raws = [(_response(hits[:half], took=4), half), (_response(hits[half:], took=9), len(hits) - half)]
    spliced = _spliced(plan, raws)
    assert spliced is not None and _ordered(spliced) == _ordered(_general(plan, raws) or b"")
    assert json.loads(spliced)["took"] == 9


def test_a_page_the_window_does_not_fill_is_left_to_the_general_way() -> None:
    plan = _plan(10, 0, 0.3, "resemblance", as_int=False)
    hits = _hits(plan.first_window(), 3)
    for k in range(1, len(hits)):   # every hit a copy of the first: one group
        hits[k]["_source"]["neardup"] = hits[0]["_source"]["neardup"]
    raws = [(_response(hits), plan.first_window())]
    assert _general(plan, raws) is None and _spliced(plan, raws) is None
    short = [(_response(hits), plan.first_window() + 1)]   # fewer than asked: no more hits exist
    spliced = _spliced(plan, short)
    assert spliced is not None and _ordered(spliced) == _ordered(_general(plan, short) or b"")
    assert json.loads(spliced)["neardup"]["groups"] == 1


@pytest.mark.parametrize("change", ["no_fingerprint", "stale_version", "short_sig", "negative_count", "huge_count"])
def test_a_hit_without_a_usable_fingerprint_is_left_to_the_general_way(change: str) -> None:
    plan = _plan(5, 0, 0.8, "resemblance", as_int=False)
    hits = _hits(plan.first_window(), 11)
    fingerprint = hits[2]["_source"]["neardup"]
    if change == "no_fingerprint":
        fingerprint.clear()
    elif change == "stale_version":
        fingerprint["v"] = "0-stale"
    elif change == "short_sig":
        fingerprint["sig"] = fingerprint["sig"][:-4]
    elif change == "negative_count":
        fingerprint["n"] = -1
    else:
        fingerprint["n"] = 2**63
    raw = _response(hits)
    scan = reference_scan(raw)
    if change == "no_fingerprint":
        assert scan is None
        return
    assert scan is not None
    assert _spliced(plan, [(raw, plan.first_window())]) is None


def test_a_document_in_both_rounds_is_left_to_the_general_way() -> None:
    plan = _plan(5, 0, 0.8, "resemblance", as_int=False)
    hits = _hits(8, 5)
    raws = [(_response(hits[:4]), 4), (_response(hits[3:]), 5)]
    assert _spliced(plan, raws) is None
    routed = [dict(hit) for hit in hits[3:]]
    routed[0]["_routing"] = "elsewhere" if routed[0].get("_routing") != "elsewhere" else "r2"
    assert _spliced(plan, [(_response(hits[:4]), 4), (_response(routed), 5)]) is not None


def test_a_response_with_other_parts_keeps_them_as_they_were_written() -> None:
    plan = _plan(3, 0, 0.8, "resemblance", as_int=False)
    hits = _hits(plan.first_window(), 13)
    aggregations = {"by_topic": {"buckets": [{"key": "oil", "doc_count": 12345678901234567890123}]},
                    "avg": {"value": 1.50}}
    raw = _response(hits, aggregations=aggregations).replace(b'"value":1.5}', b'"value":1.50}')
    spliced = _spliced(plan, [(raw, plan.first_window())])
    assert spliced is not None
    assert b'"doc_count":12345678901234567890123}' in spliced and b'"value":1.50}' in spliced
    assert _ordered(spliced) == _ordered(_general(plan, [(raw, plan.first_window())]) or b"")
