"""The hit scanner finds what a JSON parser finds, and the compiled one answers as the reference.

:func:`proxy.transport.hitscan.reference_scan` against ``json.loads`` of the same bytes (every
span holds the value the parser reads there; None exactly where the module says), and the
compiled :func:`proxy.transport.hitscan.scan` against the reference, value for value, on
responses as Elasticsearch writes them, on generated JSON and on broken bytes.
"""

from __future__ import annotations

import json
import random
import struct
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from neardup.fingerprint import Fingerprinter, FingerprintParams
from neardup.proxy.transport import hitscan
from neardup.proxy.transport.hitscan import COLUMNS, MAX_DEPTH, reference_scan
from tests.test_proxy_hitscan_compiled import NONE_CASES, compiled, response

FP = Fingerprinter(FingerprintParams())
FINGERPRINT = FP.fingerprint("oil prices rose as opec kept its output quota for the quarter").to_source()


def _hit(k: int, **extra: Any) -> dict[str, Any]:
    return {"_index": "news", "_id": str(k), "_score": 1.5 - k / 10,
            "_source": {"title": f"story {k}", "neardup": FINGERPRINT}, **extra}


def _response(hits: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"took": 5, "timed_out": False, "hits": {"total": {"value": 10, "relation": "eq"}, "max_score": 1.5,
                                                     "hits": hits}, **extra}


def _compact(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def _rows(table: bytes) -> list[tuple[int, ...]]:
    size = 8 * COLUMNS
    return [struct.unpack(f"<{COLUMNS}q", table[k:k + size]) for k in range(0, len(table), size)]


def _check_spans(raw: bytes, found: hitscan.ScanResult) -> None:
    """Every span of ``found`` holds what ``json.loads`` reads at that place."""
    value = json.loads(raw)
    took_start, took_end, hits_start, hits_end, close, table = found
    assert int(raw[took_start:took_end]) == value["took"]
    assert json.loads(raw[hits_start:hits_end]) == value["hits"]["hits"]
    assert raw[close:close + 1] == b"}" and not raw[close + 1:].strip()
    rows = _rows(table)
    assert len(rows) == len(value["hits"]["hits"])
    for row, hit in zip(rows, value["hits"]["hits"]):
        assert json.loads(raw[row[0]:row[1]]) == hit
        for column, key in ((2, "_index"), (4, "_id"), (6, "_routing")):
            text = raw[row[column]:row[column + 1]].decode() if row[column] >= 0 else None
            assert text == hit.get(key) and (row[column] < 0) == (key not in hit)
        score = hit.get("_score")
        assert (row[8] < 0) == (score is None)
        if score is not None:
            assert float(raw[row[8]:row[9]]) == score
        fingerprint = hit["_source"]["neardup"]
        assert raw[row[10]:row[11]].decode() == fingerprint["v"]
        assert raw[row[12]:row[13]].decode() == fingerprint["sig"]
        assert int(raw[row[14]:row[15]]) == fingerprint["n"]


def _both(raw: bytes) -> hitscan.ScanResult | None:
    """The reference's answer, after checking that the compiled scan gives the same (when it
    is built: see :func:`test_the_compiled_scanner_is_built`)."""
    expected = reference_scan(raw)
    if hitscan.COMPILED:
        assert hitscan.scan(raw) == expected
    return expected


def test_the_compiled_scanner_is_built() -> None:
    """``make install`` builds it where cargo is installed; without it every collapsed page is
    decoded and written again and the cross-checks here check the reference alone: a skip,
    and a failure under CI, whose machine has cargo."""
    compiled()


def test_a_response_as_elasticsearch_writes_it() -> None:
    hits = [_hit(0), _hit(1, _routing="r", _ignored=["body.keyword"]), _hit(2, _score=None),
            {**_hit(3), "_source": {"neardup": FINGERPRINT, "deep": [[[{"neardup": 1}]]], "t": "é\\\"\u2028"}}]
    del hits[2]["_score"]
    for raw in (_compact(_response(hits)), json.dumps(_response(hits), indent=2).encode(),
                _compact(_response([])), _compact({"hits": {"hits": hits}, "took": -3}),
                b" \n" + _compact(_response(hits)) + b"\r\n\t"):
        found = _both(raw)
        assert found is not None
        _check_spans(raw, found)


UNUSUAL = {
    "not an object": lambda r: [r],
    "no took": lambda r: {k: v for k, v in r.items() if k != "took"},
    "float took": lambda r: {**r, "took": 5.0},
    "string took": lambda r: {**r, "took": "5"},
    "neardup at the top": lambda r: {**r, "neardup": {}},
    "no hits": lambda r: {k: v for k, v in r.items() if k != "hits"},
    "hits not an object": lambda r: {**r, "hits": []},
    "no hits array": lambda r: {**r, "hits": {"total": 0}},
    "hits array not an array": lambda r: {**r, "hits": {"hits": {}}},
    "a hit not an object": lambda r: {**r, "hits": {"hits": [*r["hits"]["hits"], 1]}},
    "fields": lambda r: _with_hit(r, fields={"a": [1]}),
    "inner_hits": lambda r: _with_hit(r, inner_hits={}),
    "numeric id": lambda r: _with_hit(r, _id=5),
    "null index": lambda r: _with_hit(r, _index=None),
    "string score": lambda r: _with_hit(r, _score="1"),
    "boolean score": lambda r: _with_hit(r, _score=True),
    "no source": lambda r: {**r, "hits": {"hits": [{"_id": "1"}]}},
    "source not an object": lambda r: _with_hit(r, _source="x"),
    "no fingerprint": lambda r: _with_hit(r, _source={"title": "x"}),
    "fingerprint not an object": lambda r: _with_hit(r, _source={"neardup": [FINGERPRINT]}),
    "no sig": lambda r: _with_hit(r, _source={"neardup": {"v": "1", "n": 3}}),
    "number v": lambda r: _with_hit(r, _source={"neardup": {**FINGERPRINT, "v": 1}}),
    "float n": lambda r: _with_hit(r, _source={"neardup": {**FINGERPRINT, "n": 3.0}}),
    "string n": lambda r: _with_hit(r, _source={"neardup": {**FINGERPRINT, "n": "3"}}),
    "escaped id": lambda r: _with_hit(r, _id='a"b'),
    "escaped sig": lambda r: _with_hit(r, _source={"neardup": {**FINGERPRINT, "sig": "a/b\n"}}),
}


def _with_hit(response: dict[str, Any], **changes: Any) -> dict[str, Any]:
    hits = [dict(hit) for hit in response["hits"]["hits"]]
    hits[-1].update(changes)
    return {**response, "hits": {**response["hits"], "hits": hits}}


@pytest.mark.parametrize("name", sorted(UNUSUAL))
def test_an_unusual_response_is_left_to_the_general_way(name: str) -> None:
    raw = _compact(UNUSUAL[name](_response([_hit(0), _hit(1)])))
    assert _both(raw) is None


RAW_UNUSUAL = [
    b'{"took":1,"took":2,"hits":{"hits":[]}}',                         # a key read given twice
    b'{"took":1,"hits":{"hits":[]},"hits":{"hits":[]}}',
    b'{"took":1,"h\\u0069ts":{"hits":[]},"hits":{"hits":[]}}',          # an escaped key at a level read
    b'{"took":1,"hits":{"hits":[],"h\\u0069ts":1}}',
    b'{"took":1,"hits":{"hits":[]}}x',                                  # not JSON
    b'{"took":01,"hits":{"hits":[]}}',
    b'{"took":1,"hits":{"hits":[]},"a":[1,]}',
    b'{"took":1,"hits":{"hits":[]},"a":"\x01"}',
    b'{"took":1,"hits":{"hits":[]},"a":"\\x"}',
    b'{"took":1,"hits":{"hits":[]},"a":"\xff"}',
    b'{"took":1,"hits":{"hits":[]},"a":"\xed\xa0\x80"}',               # an encoded surrogate
    b'{"took":1,"hits":{"hits":[]},"a":NaN}',
    b'{"took":1,"hits":{"hits":[]},"a":tru}',
    b'{"took":1,"hits":{"hits":[]},"a":1.}',
    b'{"took":1,"hits":{"hits":[]},"a":-}',
    b'{"took":1,"hits":{"hits":[]},}',
    b'{"took":1 "hits":{"hits":[]}}',
    b'',
    b'  ',
]


@pytest.mark.parametrize("raw", RAW_UNUSUAL)
def test_broken_or_doubtful_text_is_left_to_the_general_way(raw: bytes) -> None:
    assert _both(raw) is None


def test_keys_given_twice_count_only_where_they_are_read() -> None:
    raw = b'{"took":1,"a":1,"a":2,"hits":{"x":1,"x":2,"hits":[]},"b":{"\\u0062":1,"c":1,"c":2}}'
    hits = raw.index(b"[]")
    assert _both(raw) == (8, 9, hits, hits + 2, len(raw) - 1, b"")


def test_nesting_deeper_than_the_limit_is_refused() -> None:
    def nested(depth: int) -> bytes:   # the top object, then depth - 1 arrays
        return b'{"took":1,"hits":{"hits":[]},"a":' + b"[" * (depth - 1) + b"]" * (depth - 1) + b"}"

    assert _both(nested(MAX_DEPTH)) is not None
    assert _both(nested(MAX_DEPTH + 1)) is None
    source = {"neardup": FINGERPRINT, "deep": None}
    raw = _compact(_response([{**_hit(0), "_source": source}]))
    prefix_depth = 6   # top, hits, hits.hits, the hit, _source, then the value of "deep"
    deep = b"[" * (MAX_DEPTH - prefix_depth + 1) + b"]" * (MAX_DEPTH - prefix_depth + 1)
    assert _both(raw.replace(b'"deep":null', b'"deep":' + deep)) is not None
    assert _both(raw.replace(b'"deep":null', b'"deep":[' + deep + b"]")) is None


#: Keys at the levels the scanner reads hold no escape (else it leaves the response alone).
PLAIN_KEYS = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E, exclude_characters='"\\'), max_size=6)
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-10**30, max_value=10**30)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=12),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4),
    max_leaves=12)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(extra_top=st.dictionaries(PLAIN_KEYS.filter(lambda k: k not in ("took", "hits", "neardup")),
                                 JSON_VALUES, max_size=3),
       extra_hit=st.dictionaries(st.sampled_from(["_ignored", "_version", "sort", "highlight", "_nested", "x"]),
                                 JSON_VALUES, max_size=3),
       extra_source=st.dictionaries(PLAIN_KEYS.filter(lambda k: k != "neardup"), JSON_VALUES, max_size=3),
       count=st.integers(min_value=0, max_value=4), indent=st.sampled_from([None, 1]))
def test_generated_responses_are_read_as_json_reads_them(extra_top: dict[str, Any], extra_hit: dict[str, Any],
                                                         extra_source: dict[str, Any], count: int,
                                                         indent: int | None) -> None:
    hits = [{**_hit(k), **extra_hit, "_source": {**extra_source, "neardup": FINGERPRINT}} for k in range(count)]
    value = {**_response(hits), **extra_top}
    raw = json.dumps(value, indent=indent, ensure_ascii=bool(indent)).encode()
    found = _both(raw)
    assert found is not None
    _check_spans(raw, found)


@settings(max_examples=300, deadline=None)
@given(seed=st.integers(min_value=0, max_value=2**32))
def test_damaged_bytes_are_read_alike_and_only_when_they_are_json(seed: int) -> None:
    rng = random.Random(seed)
    raw = bytearray(_compact(_response([_hit(0), _hit(1, _routing="r")], aggregations={"a": {"value": 1.25}})))
    for _ in range(rng.randrange(1, 4)):
        at = rng.randrange(len(raw))
        action = rng.randrange(3)
        if action == 0:
            raw[at] = rng.choice(b'{}[]",:\\ 0123456789.-eEtrufalsn\x00\x1f\x7f\xc3\xa9\xff')
        elif action == 1:
            del raw[at]
        else:
            raw.insert(at, rng.randrange(256))
    found = _both(bytes(raw))
    if found is not None:
        _check_spans(bytes(raw), found)


@pytest.mark.parametrize("name", sorted(NONE_CASES))
def test_the_compiled_scanners_refusals_are_the_references(name: str) -> None:
    assert _both(NONE_CASES[name]) is None


def test_the_compiled_scanners_offsets_are_the_references() -> None:
    raw = response()
    found = _both(raw)
    assert found is not None and _rows(found[5])[0][:2] == (raw.index(b'{"_index"'), raw.index(b',{"_id":"b2"'))
