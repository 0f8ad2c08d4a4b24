"""The compiled page writer (proxy/grouping/compiled_rs) writes what its reference writes.

:func:`proxy.grouping.spliced_page.spliced_page` hands the usual window (resemblance, the
default algorithms, every fingerprint of the current scheme) to the compiled writer, and
everything it leaves to :func:`~proxy.grouping.spliced_page.reference_spliced_page`. Here both
write random windows of real fingerprints, with near-duplicates, split rounds, absent and
unusual scores, tooks, routings and pages, and hostile fingerprints: the compiled one must give
the reference's bytes and counts whenever it answers, and answer for every usual window.
"""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from neardup.fingerprint import Fingerprinter, FingerprintParams
from neardup.proxy.grouping import spliced_page
from neardup.proxy.grouping.collapse import Page
from neardup.proxy.grouping.fingerprints import WINDOW_ROWS, default_algorithms
from neardup.proxy.transport.hitscan import reference_scan
from tests.compiled_support import require_built

ALGORITHMS = default_algorithms(FingerprintParams())
FP = Fingerprinter(FingerprintParams())
WORDS = "oil price opec quota crude barrel bank rate cut wheat grain tonnes shares profit loss dividend".split()
SCORES = ["9.5", "1", "0", "-0.0", "1e2", "2.5E-3", "7.25", "7.250", None, "absent"]


def _compiled() -> None:
    require_built(spliced_page.COMPILED, "neardup.proxy.grouping._compiled")


def _hit(rng: random.Random, number: int, text: str) -> bytes:
    """A hit as Elasticsearch writes it, with a score spelt as given (``absent``: none)."""
    head = f'{{"_index":"{rng.choice(["news", "news-2"])}","_id":"{number}"'
    if rng.random() < 0.2:
        head += f',"_routing":"{rng.choice(["r1", "r2"])}"'
    score = rng.choice(SCORES)
    if score != "absent":
        head += f',"_score":{"null" if score is None else score}'
    source = {"title": f"story {number}", "body": text, "neardup": FP.fingerprint(text).to_source()}
    return (head + ',"_source":' + json.dumps(source, separators=(",", ":")) + "}").encode()


def _window(rng: random.Random, count: int) -> list[bytes]:
    texts: list[str] = []
    for _ in range(count):
        if texts and rng.random() < 0.5:
            words = rng.choice(texts).split()
            for _ in range(rng.randrange(0, 5) if words else 0):
                words[rng.randrange(len(words))] = rng.choice(WORDS)
            texts.append(" ".join(words))
        else:
            texts.append(" ".join(rng.choice(WORDS) for _ in range(rng.choice([0, 3, 40]))))
    return [_hit(rng, number, text) for number, text in enumerate(texts)]


def _response(hits: list[bytes], took: str) -> bytes:
    return (b'{"took":' + took.encode() + b',"timed_out":false,"hits":{"total":{"value":9,"relation":"eq"},'
            b'"max_score":null,"hits":[' + b",".join(hits) + b']},"aggregations":{"a":{"value":1.50}}}')


def _rounds(rng: random.Random, hits: list[bytes], requested: int) -> list[spliced_page.Round]:
    tooks = [rng.choice(["3", "0", "-0", "12", "170141183460469231731687303715884105728"]) for _ in range(2)]
    if len(hits) > 1 and rng.random() < 0.4:   # the two halves of a split first window
        half = len(hits) // 2
        parts = [(hits[:half], tooks[0], half), (hits[half:], tooks[1], requested - half)]
    else:
        parts = [(hits, tooks[0], requested)]
    rounds = []
    for part, took, asked in parts:
        raw = _response(part, took)
        scan = reference_scan(raw)
        assert scan is not None
        rounds.append(spliced_page.Round(raw, scan, asked))
    return rounds


def _summary(page: Page, window: int, fingerprinted: int) -> dict[str, Any]:
    return {"page": [page.groups, page.collapsed, page.window_groups], "window": window, "read": fingerprinted}


def _both(rounds: list[spliced_page.Round], start: int, size: int, threshold: float,
          as_int: bool) -> tuple[Any, Any]:
    """(compiled, reference) answers and pages, None for no page."""
    return (spliced_page.spliced_page(rounds, start, size, threshold, "resemblance", as_int, ALGORITHMS, _summary),
            spliced_page.reference_spliced_page(rounds, start, size, threshold, "resemblance", as_int, ALGORITHMS,
                                                _summary))


def test_the_compiled_writer_is_built() -> None:
    _compiled()


@pytest.mark.parametrize("seed", range(6))
def test_the_compiled_page_is_the_reference_page(seed: int) -> None:
    _compiled()
    rng = random.Random(seed)
    answered = 0
    for _ in range(60):
        count = rng.randrange(1, WINDOW_ROWS + 1) if rng.random() < 0.8 else rng.randrange(WINDOW_ROWS, 130)
        hits = _window(rng, count)
        rounds = _rounds(rng, hits, count + rng.choice([0, 0, 1]))
        start, size = rng.choice([0, 0, 0, 1, 3]), rng.choice([0, 1, 5, 10, count])
        for threshold in (0.3, 0.8, 1.0):
            compiled, reference = _both(rounds, start, size, threshold, rng.random() < 0.3)
            assert compiled == reference
            answered += compiled is not None
    assert answered > 100


def test_the_usual_window_is_written_by_the_compiled_writer(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the reference out of reach, the usual window is still answered: by the compiled one."""
    _compiled()
    rng = random.Random(5)
    hits = _window(rng, 13)
    rounds = _rounds(random.Random(1), hits, 13)
    expected = _both(rounds, 0, 5, 0.5, False)[1]
    assert expected is not None and expected[1].collapsed > 0

    def unreachable(*args: Any) -> None:
        raise AssertionError("the reference was asked")

    monkeypatch.setattr(spliced_page, "reference_spliced_page", unreachable)
    assert spliced_page.spliced_page(rounds, 0, 5, 0.5, "resemblance", False, ALGORITHMS, _summary) == expected


@pytest.mark.parametrize("case", ["unfilled", "repeated"])
def test_no_page_is_answered_without_the_reference(case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A window that does not fill the page, or that holds a document twice, has no page: the
    reference finds none either, and is not asked again."""
    _compiled()
    hits = _window(random.Random(4), 8)
    if case == "unfilled":   # every hit a copy of the first: one group, and more hits exist
        copy = next(print_ for hit in hits if (print_ := json.loads(hit)["_source"]["neardup"])["n"] > 0)
        for number in range(len(hits)):
            one = json.loads(hits[number])
            one["_source"]["neardup"] = copy
            hits[number] = json.dumps(one, separators=(",", ":")).encode()
        raws = [(_response(hits, "4"), len(hits))]
    else:   # the same document in both halves
        raws = [(_response(hits[:5], "4"), 5), (_response(hits[4:], "6"), 4)]
    rounds = []
    for raw, requested in raws:
        scan = reference_scan(raw)
        assert scan is not None
        rounds.append(spliced_page.Round(raw, scan, requested))
    assert _both(rounds, 0, 5, 0.8, False) == (None, None)

    def unreachable(*args: Any) -> None:
        raise AssertionError("the reference was asked")

    monkeypatch.setattr(spliced_page, "reference_spliced_page", unreachable)
    assert spliced_page.spliced_page(rounds, 0, 5, 0.8, "resemblance", False, ALGORITHMS, _summary) is None


@pytest.mark.parametrize("change", ["letter", "padding", "stale_version", "huge_count", "negative_count", "too_many"])
def test_what_the_compiled_writer_cannot_be_sure_of_goes_to_the_reference(change: str,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    _compiled()
    rng = random.Random(9)
    count = spliced_page.COMPILED_ROWS + 1 if change == "too_many" else 8
    hits = _window(rng, count)
    one = json.loads(hits[3])
    fingerprint = one["_source"]["neardup"]
    if change == "letter":
        fingerprint["sig"] = "-" + fingerprint["sig"][1:]
    elif change == "padding":
        fingerprint["sig"] = fingerprint["sig"][:-1] + "="
    elif change == "stale_version":
        fingerprint["v"] = "0-stale"
    elif change == "huge_count":
        fingerprint["n"] = 2**63
    elif change == "negative_count":
        fingerprint["n"] = -1
    hits[3] = json.dumps(one, separators=(",", ":")).encode()
    raw = _response(hits, "5")
    scan = reference_scan(raw)
    assert scan is not None
    rounds = [spliced_page.Round(raw, scan, count)]
    compiled, reference = _both(rounds, 0, 5, 0.8, False)
    assert compiled == reference
    asked: list[int] = []
    original = spliced_page.reference_spliced_page

    def recorded(*args: Any) -> Any:
        asked.append(1)
        return original(*args)

    monkeypatch.setattr(spliced_page, "reference_spliced_page", recorded)
    spliced_page.spliced_page(rounds, 0, 5, 0.8, "resemblance", False, ALGORITHMS, _summary)
    assert asked
