"""The compiled hit scanner (proxy/transport/hitscan_rs): hand-written responses and their answers."""

from __future__ import annotations

import struct
from types import ModuleType

import pytest

from neardup.proxy.transport import hitscan
from tests.compiled_support import require_built


def compiled() -> ModuleType:
    """The extension, or a skip (a failure under CI, whose machine has cargo to build it)."""
    require_built(hitscan.COMPILED, "neardup.proxy.transport._hitscan")
    import neardup.proxy.transport._hitscan as _hitscan

    return _hitscan


HIT_ONE = ('{"_index":"books","_id":"a1","_routing":"r7","_score":2.5,'
           '"_source":{"title":"Gold \\"mine\\"","neardup":{"v":"3","sig":"AAEC","n":12,"extra":[1,{"k":null}]}}}')
HIT_TWO = '{"_id":"b2","_score":null,"_source":{"neardup":{"n":-4,"sig":"","v":"x"}},"sort":[1]}'


def response(hits: str = f"{HIT_ONE},{HIT_TWO}", took: str = "17", head: str = "", tail: str = "") -> bytes:
    return (f'{{{head}"took":{took},"timed_out":false,"hits":{{"total":{{"value":2,"relation":"eq"}},'
            f'"max_score":2.5,"hits":[{hits}]}}{tail}}}').encode()


def at(raw: bytes, prefix: str, text: str, start: int = 0) -> tuple[int, int]:
    """The offsets of ``text`` where ``prefix + text`` first occurs in ``raw`` from ``start``."""
    found = raw.index((prefix + text).encode(), start) + len(prefix.encode())
    return found, found + len(text.encode())


def rows(table: bytes) -> list[tuple[int, ...]]:
    values = struct.unpack(f"<{len(table) // 8}q", table)
    return [values[k:k + 16] for k in range(0, len(values), 16)]


def test_a_response_gives_its_offsets() -> None:
    raw = response()
    took_start, took_end, hits_start, hits_end, close, table = compiled().scan(raw)
    assert raw[took_start:took_end] == b"17"
    assert raw[hits_start:hits_end] == f"[{HIT_ONE},{HIT_TWO}]".encode()
    assert (close, raw[close:close + 1]) == (len(raw) - 1, b"}")
    one, two = at(raw, "", HIT_ONE), at(raw, "", HIT_TWO)
    assert rows(table) == [
        (*one, *at(raw, '"_index":"', "books"), *at(raw, '"_id":"', "a1"), *at(raw, '"_routing":"', "r7"),
         *at(raw, '"_score":', "2.5"), *at(raw, '"v":"', "3"), *at(raw, '"sig":"', "AAEC"), *at(raw, '"n":', "12")),
        (*two, -1, -1, *at(raw, '"_id":"', "b2"), -1, -1, -1, -1,
         *at(raw, '"v":"', "x"), *at(raw, '"sig":"', "", two[0]), *at(raw, '"n":', "-4")),
    ]


def test_any_buffer_and_whitespace() -> None:
    raw = response(took="-0", head=" ", tail="\n").replace(b":", b" :\t").replace(b",", b"\r\n,")
    raw = b" \n" + raw + b"\r\n "
    expected = compiled().scan(raw)
    assert expected is not None and raw[expected[0]:expected[1]] == b"-0"
    assert compiled().scan(bytearray(raw)) == expected
    assert compiled().scan(memoryview(raw)) == expected


def test_no_hits_give_an_empty_table() -> None:
    raw = response(hits="")
    assert compiled().scan(raw) == (8, 10, raw.index(b"[]"), raw.index(b"[]") + 2, len(raw) - 1, b"")


def test_nesting_up_to_512_levels() -> None:
    # The top-level object is level 1, so "x" holds 511 more levels and no more.
    assert compiled().scan(response(tail=',"x":' + "[" * 511 + "]" * 511)) is not None
    assert compiled().scan(response(tail=',"x":' + "[" * 512 + "]" * 512)) is None
    assert compiled().scan(response(tail=',"x":' + "[" * 100_000)) is None


def test_untracked_keys_may_repeat_or_be_escaped() -> None:
    assert compiled().scan(response(tail=',"y":1,"y":2,"x":{"took":1,"took":2,"n\\u0065ardup":{}}')) is not None
    assert compiled().scan(response(hits=HIT_TWO.replace('"sort":[1]', '"sort":1,"sort":2'))) is not None
    assert compiled().scan(response(hits=HIT_ONE.replace('"k"', '"\\u006b"'))) is not None


NONE_CASES = {
    # Not JSON, or not strict JSON.
    "empty": b"",
    "trailing data": response() + b" 1",
    "byte order mark": b"\xef\xbb\xbf" + response(),
    "form feed as whitespace": response() + b"\x0c",
    "trailing comma": response(tail=","),
    "leading zero": response(tail=',"x":01'),
    "bare fraction dot": response(tail=',"x":1.'),
    "exponent without digits": response(tail=',"x":1e+'),
    "NaN": response(tail=',"x":NaN'),
    "single quotes": response(tail=",'x':1"),
    "raw control byte in a string": response(tail=',"x":"a\tb"'),
    "unknown escape": response(tail=',"x":"\\x41"'),
    "short unicode escape": response(tail=',"x":"\\u12"'),
    "overlong UTF-8": response().replace(b'"AAEC"', b'"\xc0\x80"'),
    "encoded surrogate": response().replace(b'"AAEC"', b'"\xed\xa0\x80"'),
    "invalid UTF-8 byte": response().replace(b'"AAEC"', b'"\xff"'),
    "truncated": response()[:-1],
    # The shape.
    "top level is an array": b"[" + response() + b"]",
    "took missing": response(took="1").replace(b'"took":1,', b""),
    "took is a fraction": response(took="1.0"),
    "took has an exponent": response(took="1e3"),
    "took is a string": response(took='"17"'),
    "took twice": response(tail=',"took":3'),
    "neardup at the top": response(tail=',"neardup":{}'),
    "escaped top-level key": response(tail=',"a\\u0062":1'),
    "hits missing": b'{"took":1}',
    "hits not an object": b'{"took":1,"hits":[]}',
    "hits twice": response(tail=',"hits":{"hits":[]}'),
    "hits.hits missing": b'{"took":1,"hits":{"total":0}}',
    "hits.hits not an array": b'{"took":1,"hits":{"hits":{}}}',
    "hits.hits twice": b'{"took":1,"hits":{"hits":[],"hits":[]}}',
    "a hit that is not an object": response(hits=f"{HIT_ONE},1"),
    "fields": response(hits=HIT_TWO.replace('"sort"', '"fields"')),
    "inner_hits": response(hits=HIT_TWO.replace('"sort"', '"inner_hits"')),
    "escaped _id": response(hits=HIT_TWO.replace('"b2"', '"b\\u0032"')),
    "_index not a string": response(hits=HIT_ONE.replace('"books"', "7")),
    "_routing null": response(hits=HIT_ONE.replace('"r7"', "null")),
    "_id twice": response(hits=HIT_TWO.replace('"sort"', '"_id"')),
    "_score a string": response(hits=HIT_ONE.replace("2.5", '"2.5"')),
    "_score twice": response(hits=HIT_TWO.replace('"sort":[1]', '"_score":1')),
    "_source missing": response(hits='{"_id":"x"}'),
    "_source not an object": response(hits='{"_id":"x","_source":[]}'),
    "_source.neardup missing": response(hits='{"_source":{"title":"t"}}'),
    "_source.neardup not an object": response(hits='{"_source":{"neardup":"v"}}'),
    "_source.neardup twice": response(hits=HIT_TWO.replace('"v":"x"}', '"v":"x"},"neardup":{}')),
    "escaped key in _source": response(hits=HIT_ONE.replace('"title"', '"t\\u0069tle"')),
    "escaped key in _source.neardup": response(hits=HIT_ONE.replace('"extra"', '"ex\\tra"')),
    "neardup.v missing": response(hits=HIT_TWO.replace(',"v":"x"', "")),
    "neardup.sig escaped": response(hits=HIT_ONE.replace('"AAEC"', '"AA\\/EC"')),
    "neardup.sig a number": response(hits=HIT_ONE.replace('"AAEC"', "5")),
    "neardup.n a fraction": response(hits=HIT_TWO.replace("-4", "-4.0")),
    "neardup.n a string": response(hits=HIT_TWO.replace("-4", '"4"')),
    "neardup.n twice": response(hits=HIT_TWO.replace('"n":-4', '"n":-4,"n":-4')),
}


@pytest.mark.parametrize("raw", NONE_CASES.values(), ids=NONE_CASES.keys())
def test_none(raw: bytes) -> None:
    assert compiled().scan(raw) is None


def test_buffers_of_other_items_are_refused() -> None:
    with pytest.raises(TypeError):
        compiled().scan("{}")
    with pytest.raises(TypeError):
        compiled().scan(memoryview(response())[::2])
