""":func:`proxy.transport.jsonio.loads_request` reads a client's JSON exactly as the standard
library with its duplicate-key check does: the same value, or a ``ValueError`` for the same
texts (orjson's quick read is only taken when no key was given twice)."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from neardup.proxy.transport import jsonio


def _reference(data: bytes) -> tuple[str, Any]:
    try:
        return "value", jsonio._stdlib_loads(data, object_pairs_hook=jsonio._unique_pairs)
    except ValueError as exc:
        return "error", str(exc)


def _read(data: bytes) -> tuple[str, Any]:
    try:
        return "value", jsonio.loads_request(data)
    except ValueError as exc:
        return "error", str(exc)


def _same(data: bytes) -> None:
    expected, got = _reference(data), _read(data)
    assert got[0] == expected[0], data
    if got[0] == "value":
        assert repr(got[1]) == repr(expected[1]), data   # repr: 1 and 1.0, -0.0 and 0.0 differ
    else:
        assert got[1] == expected[1], data


CASES = [
    b'{"query": {"match": {"title": "oil prices"}}, "size": 10}',
    b'{"size": 2, "size": 3}', b'{"a": {"b": 1, "b": 1}}', b'[{"a": 1}, {"a": 1, "a": 2}]',
    b'{"k": [",", ":"], "k": 1}', b'{"k": ":", "j": "\\":"}', b'{"a\\"": 1, "a\\"" : 2}',
    b'{"x": "\\\\", "x\\\\": 1}', b'{"": 1, "": 2}', b'{"a" :1,\n"b"\t: 2}',
    b'-0', b'-0.0', b'1E5', b'0.1e-3', b'1e999', b'-1e400', b'1e-400', b'4.9e-324', b'0.30000000000000004',
    b'123456789012345678', b'1234567890123456789', b'-9223372036854775809', b'18446744073709551616',
    b'{"n": 123456789012345678901234567890}', b'NaN', b'{"a": Infinity}', b'"\\ud800"', b'"\xed\xa0\x80"',
    b'"\xc0\xaf"', b'\xef\xbb\xbf{}', b'"\x01"', b'"\t"', b'01', b'1.', b'.5', b'+1', b'[1,]', b'{"a":1,}',
    b'"a"x', b'[1] [2]', b'', b' ', b'nul', b'true', b'null', b'{"a":1}\n', b'"\\u00e9\\ud83d\\ude00"',
    b'[' * 1100 + b']' * 1100, b'{"a":' * 600 + b'1' + b'}' * 600,
]


@pytest.mark.parametrize("data", CASES)
def test_crafted_texts(data: bytes) -> None:
    _same(data)


def _random_value(rng: random.Random, depth: int) -> str:
    """Compact or spaced JSON text, with keys repeated now and then and strings holding the
    characters that matter to the key count (quotes, backslashes, colons, commas)."""
    kind = rng.randrange(7 if depth < 4 else 4)
    if kind == 0:
        return rng.choice(["1", "-0", "2.50", "1e3", "true", "null", "12345678901234567890", "-3"])
    if kind in (1, 2, 3):
        text = "".join(rng.choice(['a', ':', ',', '\\"', '\\\\', '"', 'é', '{', ' ', '\\u00e9']) for _ in range(rng.randrange(5)))
        return '"' + text.replace('"', '\\"') if text.endswith('\\') and not text.endswith('\\\\') else '"' + text + '"'
    if kind == 4:
        return "[" + ", ".join(_random_value(rng, depth + 1) for _ in range(rng.randrange(4))) + "]"
    keys = ["a", "b", "c:", 'd\\"', "e,"]
    members = [f'"{rng.choice(keys)}"{rng.choice([":", " : "])}{_random_value(rng, depth + 1)}'
               for _ in range(rng.randrange(4))]
    return "{" + rng.choice([",", ", "]).join(members) + "}"


@pytest.mark.parametrize("seed", range(4))
def test_random_texts(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(1500):
        _same(_random_value(rng, 0).encode())


def test_str_and_non_bytes_go_the_standard_way() -> None:
    assert jsonio.loads_request('{"a": 1}') == {"a": 1}
    with pytest.raises(ValueError, match="duplicate field"):
        jsonio.loads_request('{"a": 1, "a": 1}')
    assert json.loads(b'{"a": 1}') == jsonio.loads_request(bytearray(b'{"a": 1}'))
