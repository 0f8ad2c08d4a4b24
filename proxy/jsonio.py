"""JSON in and out: orjson when it can, the standard library when orjson refuses or would be wrong.

orjson rejects a few things Elasticsearch may legally send (escaped lone surrogates) and reads
integers outside [-2^63, 2^64) as floats, which would change a document's ``_source`` on its
way through (``123456789012345678901234567890`` → ``1.2345678901234568e+29``,
``-9999999999999999999`` → ``-1e+19``). Text holding a run of 19 or more digits (every integer
outside that range has at least 19) is therefore read by the standard library, which keeps such integers exact
(a quick byte scan decides; a false alarm only costs speed). Neither reader accepts what is not
JSON (``NaN``, ``Infinity``, numbers that overflow to infinity), so a broken upstream response is
never turned into a valid-looking one. Both keep object key order, and both write compact JSON
like Elasticsearch does.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec
import numpy as np
import orjson


#: Maps every digit to "0" and every other byte to " ": a run of 19 digits becomes ``_LONG_RUN``.
_DIGIT_MAP = bytes(0x30 if 0x30 <= b <= 0x39 else 0x20 for b in range(256))
_LONG_RUN = b"0" * 19
#: From this many bytes on (an upstream window, not a client's query) the digit runs are found
#: with NumPy: ~10× faster than ``translate`` and a substring search on a 400 kB response.
_VECTOR_SCAN_BYTES = 4096
#: Shifts that turn "byte k is a digit" into "bytes k … k+18 are digits": runs of 2, 4, 8, 16, 19.
_RUN_SHIFTS = (1, 2, 4, 8, 3)


def _has_digit_run(raw: bytes | bytearray) -> bool:
    """Whether ``raw`` holds 19 consecutive ASCII digits: ``d[k] = raw[k] is a digit``, then
    ``d[k] &= d[k + s]`` for s = 1, 2, 4, 8, 3 leaves ``d[k]`` true exactly where a run of
    1+1+2+4+8+3 = 19 digits starts (five passes over a boolean array, no Python loop)."""
    digits = np.frombuffer(raw, dtype=np.uint8) - np.uint8(0x30) < 10
    n = digits.size
    for shift in _RUN_SHIFTS:
        n -= shift
        if n <= 0:
            return False
        np.logical_and(digits[:n], digits[shift:shift + n], out=digits[:n])
    return bool(digits[:n].any())


def _may_hold_long_integer(data: bytes | str) -> bool:
    raw = data if isinstance(data, (bytes, bytearray)) else data.encode("utf-8", "surrogatepass")
    if len(raw) >= _VECTOR_SCAN_BYTES:
        return _has_digit_run(raw)
    return _LONG_RUN in raw.translate(_DIGIT_MAP)


def _not_json(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _finite(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise ValueError(f"number {text[:30]} is out of range")
    return value


def _stdlib_loads(data: bytes | str, **hooks: Any) -> Any:
    try:
        return json.loads(data, parse_constant=_not_json, parse_float=_finite, **hooks)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None


def loads(data: bytes | str) -> Any:
    """Parse JSON; raises ``ValueError`` if it is not JSON (or nested deeper than either
    parser allows: orjson stops at 1024 levels, the standard library at the recursion limit)."""
    if not _may_hold_long_integer(data):
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError:
            pass
    return _stdlib_loads(data)


def _raw_fragment(value: Any) -> Any:
    """orjson's ``default``: a raw JSON value (:mod:`proxy.rawjson`) goes out byte for byte."""
    if type(value) is msgspec.Raw:
        return orjson.Fragment(bytes(value))
    raise TypeError(f"Type is not JSON serializable: {type(value).__name__}")


#: What orjson writes in place of a raw value: a NUL byte, which JSON text never holds outside
#: a fragment (orjson escapes control characters in strings), so it marks the raw values' places.
_MARK = b"\x00"
_MARK_FRAGMENT = orjson.Fragment(_MARK)


def _dumps_splicing_raw(value: Any) -> bytes:
    """Compact JSON of ``value``, each :class:`msgspec.Raw` in it written byte for byte.

    orjson writes the value with a one-byte mark in place of every raw value (collected in
    order), and the marks are replaced by the raw values' bytes in one join: each raw value
    (a hit's ``_source``, most of a search response) is copied once, straight from the upstream
    response into the answer, instead of into a ``bytes`` copy, then orjson's growing buffer.
    Same bytes as ``orjson.dumps(value, default=_raw_fragment)``."""
    raws: list[Any] = []

    def mark(item: Any) -> Any:
        if type(item) is msgspec.Raw:
            raws.append(item)
            return _MARK_FRAGMENT
        raise TypeError(f"Type is not JSON serializable: {type(item).__name__}")

    text = orjson.dumps(value, default=mark)
    if not raws:
        return text
    parts = text.split(_MARK)
    if len(parts) != len(raws) + 1:   # cannot happen (see _MARK); the plain way if it did
        return orjson.dumps(value, default=_raw_fragment)
    pieces: list[Any] = [None] * (2 * len(raws) + 1)
    pieces[::2] = parts
    pieces[1::2] = raws
    return b"".join(pieces)


def _raw_parsed(value: Any) -> Any:
    """The standard library's ``default``: a raw JSON value, parsed (exact integers)."""
    if type(value) is msgspec.Raw:
        return loads(bytes(value))
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def dumps(value: Any, pretty: bool = False) -> bytes:
    """Serialise to UTF-8 JSON bytes; ``pretty`` indents by two spaces.

    A :class:`msgspec.Raw` value (a hit's ``_source`` as Elasticsearch sent it) is written
    unchanged; pretty output, and the standard library's fallback, parse it and indent it
    with the rest."""
    if not pretty:
        try:
            return _dumps_splicing_raw(value)
        except (TypeError, orjson.JSONEncodeError):
            pass
    else:
        try:
            return orjson.dumps(value, default=_raw_parsed, option=orjson.OPT_INDENT_2)
        except (TypeError, orjson.JSONEncodeError, ValueError):
            pass
    text = json.dumps(value, indent=2 if pretty else None,
                      separators=None if pretty else (",", ":"), default=_raw_parsed)
    return text.encode("ascii")


class _DuplicateKey(ValueError):
    pass


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    value = dict(pairs)
    if len(value) != len(pairs):
        names = [key for key, _ in pairs]
        duplicate = next(key for position, key in enumerate(names) if key in names[:position])
        raise _DuplicateKey(f"duplicate field [{duplicate}]")
    return value


def loads_request(data: bytes | str) -> Any:
    """Parse a client's JSON the way Elasticsearch does: a key given twice in one object is an
    error (``{"size": 2, "size": 3}`` is refused by Elasticsearch, so the proxy must not pick
    one of the values and answer as if the body were valid). Raises ``ValueError``."""
    return _stdlib_loads(data, object_pairs_hook=_unique_pairs)
