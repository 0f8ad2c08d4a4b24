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
import math
import re
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal, localcontext
from typing import Any

import msgspec
import numpy as np
import orjson

#: Maps every digit to "0" and every other byte to " ": a run of 19 digits becomes ``_LONG_RUN``.
_DIGIT_MAP = bytes(0x30 if 0x30 <= b <= 0x39 else 0x20 for b in range(256))
_LONG_RUN = b"0" * 19
#: From this many bytes on (an upstream window, not a client's query) the digit runs are found
#: with NumPy shifts instead of ``translate`` and a substring search, which cost more on big input.
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
    """orjson's ``default``: a raw JSON value (:mod:`neardup.proxy.transport.rawjson`) goes out byte for byte."""
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
    """Serialise to UTF-8 JSON bytes: compact, or with ``pretty`` as Elasticsearch writes
    ``?pretty`` (:func:`pretty_bytes`).

    A :class:`msgspec.Raw` value (a hit's ``_source`` as Elasticsearch sent it) is written
    unchanged in compact output; the standard library's fallback parses it."""
    try:
        compact = _dumps_splicing_raw(value)
    except (TypeError, orjson.JSONEncodeError):
        compact = json.dumps(value, separators=(",", ":"), default=_raw_parsed).encode("ascii")
    return pretty_bytes(compact) if pretty else compact


# -- Elasticsearch's ?pretty ------------------------------------------------------------------
# Elasticsearch's pretty output is Jackson's DefaultPrettyPrinter as XContent configures it:
# two-space indent, "\n" line feeds, ``"key" : value``, one array element per line, ``{ }``
# and ``[ ]`` for empty containers, and a final "\n". A ``_source`` is not copied as stored but
# parsed and written again by Jackson, which is what the token rewriting below reproduces.

#: A JSON token, after optional whitespace (a spliced ``_source`` keeps its own spacing).
_TOKEN = re.compile(rb'[ \t\n\r]*(?:("[^"\\]*(?:\\.[^"\\]*)*")|([{}\[\],:])|([^ \t\n\r{}\[\],:"]+))',
                    re.DOTALL)
#: A string token Jackson would write differently: it has an escape, or a 4-byte UTF-8
#: character (Jackson escapes those as two ``\\uXXXX`` surrogates).
_REWRITE_STRING = re.compile(rb"[\\\xf0-\xf4]")
#: A ``\\u00xx`` escape (the standard library writes lower-case hex, Jackson upper case), or
#: an escaped backslash, matched first so that the ``u`` after it is never taken for an escape.
_CONTROL_ESCAPE = re.compile(r"\\\\|\\u00[01][0-9a-f]")
_FLOAT_MARK = re.compile(rb"[.eE]")
_SURROGATES = re.compile("[\ud800-\udfff\U00010000-\U0010ffff]")


def _utf16_escape(match: re.Match[str]) -> str:
    units = match.group().encode("utf-16-be", "surrogatepass")
    return "".join(f"\\u{units[k]:02X}{units[k + 1]:02X}" for k in range(0, len(units), 2))


def _upper_hex(match: re.Match[str]) -> str:
    return match.group()[:2] + match.group()[2:].upper()


def _jackson_string(token: bytes) -> bytes:
    """A JSON string token as Jackson writes its value (the same token when nothing differs).

    Jackson escapes ``"`` and ``\\``, ``\\b \\t \\n \\f \\r``, the other control characters as
    ``\\u00XX`` (upper case), and each UTF-16 surrogate (of a character beyond U+FFFF, or a
    lone one) as ``\\uXXXX``; everything else is UTF-8. The standard library's writer does the
    same but for the case of the hex digits and the surrogates."""
    if _REWRITE_STRING.search(token) is None:
        return token
    text = json.dumps(json.loads(token), ensure_ascii=False)
    if "\\u" in text:
        text = _CONTROL_ESCAPE.sub(_upper_hex, text)
    return _SURROGATES.sub(_utf16_escape, text).encode("utf-8")


def java_double(value: float) -> str:
    """``value`` as Java's ``Double.toString`` writes it (JDK 19 and later: the shortest
    decimal that reads back as ``value``, of at least two digits where a two-digit one is
    closer): plain from 10^-3 up to 10^7, else ``d.dddE±n``, always with a fractional digit."""
    sign = "-" if math.copysign(1.0, value) < 0 else ""
    if value == 0.0:
        return sign + "0.0"
    digits, exponent = _shortest_decimal(abs(value))
    text = "".join(map(str, digits))
    point = len(text) + exponent            # the decimal point sits after ``point`` digits
    if -2 <= point <= 7:
        if point <= 0:
            plain = "0." + "0" * -point + text
        elif point >= len(text):
            plain = text + "0" * (point - len(text)) + ".0"
        else:
            plain = text[:point] + "." + text[point:]
        return sign + plain
    return f"{sign}{text[0]}.{text[1:] or '0'}E{point - 1}"


def _shortest_decimal(value: float) -> tuple[tuple[int, ...], int]:
    """(digits, exponent) of Java's decimal for ``value`` > 0: ``digits * 10**exponent``, no
    trailing zero. Python's ``repr`` is the shortest decimal that reads back as ``value``."""
    decimal = Decimal(repr(value)).normalize()
    _, digits, exponent = decimal.as_tuple()
    assert isinstance(exponent, int)
    if len(digits) == 1:    # Java prefers a closer two-digit decimal (only subnormals have one)
        return _closest_short_decimal(value, decimal)
    return tuple(digits), exponent


def _closest_short_decimal(value: float, shortest: Decimal) -> tuple[tuple[int, ...], int]:
    """Of the one-digit ``shortest`` and the two-digit decimals around ``value`` that read back
    as ``value``, the closest (ties: even last digit), exactly (a double has < 800 digits)."""
    with localcontext() as context:
        context.prec = 800
        exact = Decimal(value)
        scale = exact.adjusted() - 1
        scaled = exact.scaleb(-scale)
        candidates = [shortest] + [Decimal(f"{int(scaled.to_integral_value(rounding))}e{scale}")
                                   for rounding in (ROUND_FLOOR, ROUND_CEILING)]
        best = min((c for c in candidates if float(c) == value),
                   key=lambda c: (abs(c - exact), c.normalize().as_tuple().digits[-1] % 2))
        _, digits, exponent = best.normalize().as_tuple()
    assert isinstance(exponent, int)
    return tuple(digits), exponent


def _jackson_number(token: bytes) -> bytes:
    """A number token as Jackson writes it back: an integer unchanged (any size; ``-0`` is
    ``0``), a float as a double in Java's notation, one too large for a double as the string
    ``"Infinity"`` (Jackson's quoted non-numeric numbers)."""
    if not _FLOAT_MARK.search(token):
        return b"0" if token == b"-0" else token
    value = float(token)
    if math.isinf(value):
        return b'"-Infinity"' if value < 0 else b'"Infinity"'
    return java_double(value).encode()


def pretty_bytes(compact: bytes) -> bytes:
    """Compact JSON (spaced raw values allowed) as Elasticsearch's ``?pretty`` writes it.

    Whitespace is added, and each string and number is written the way Jackson writes it back
    after parsing: what Elasticsearch does to a ``_source`` when it pretty-prints (``1.50`` →
    ``1.5``), no change to what Jackson wrote (the rest of Elasticsearch's answer), and the
    proxy's own floats, written by orjson (``0.00001``), in Java's notation (``1.0E-5``).
    Strings are only re-read when they could differ (an escape, a 4-byte character), integers
    never (but ``-0``); a float is read as a double and written as Java does, which gives back
    the text of a float Elasticsearch wrote."""
    out: list[bytes] = []
    depth = 0
    opened = False     # the last token opened a container: an empty one closes as ``{ }``/``[ ]``
    for match in _TOKEN.finditer(compact):
        string, punct, scalar = match.groups()
        if punct is not None and punct in b"}]":
            depth -= 1
            out.append(b" " + punct if opened else b"\n" + b"  " * depth + punct)
            opened = False
            continue
        if opened:
            out.append(b"\n" + b"  " * depth)
            opened = False
        if string is not None:
            out.append(_jackson_string(string))
        elif scalar is not None:
            out.append(_jackson_number(scalar) if scalar[0] in b"-0123456789" else scalar)
        elif punct == b":":
            out.append(b" : ")
        elif punct == b",":
            out.append(b",\n" + b"  " * depth)
        else:
            out.append(punct)
            depth += 1
            opened = True
    out.append(b"\n")
    return b"".join(out)


class _DuplicateKey(ValueError):
    pass


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    value = dict(pairs)
    if len(value) != len(pairs):
        names = [key for key, _ in pairs]
        duplicate = next(key for position, key in enumerate(names) if key in names[:position])
        raise _DuplicateKey(f"duplicate field [{duplicate}]")
    return value


#: A string token of valid JSON. Outside strings a ``"`` only opens one, so the matches found
#: left to right from the start are the text's strings, whole.
_STRING_TOKEN = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')


def _keys_written(data: bytes) -> int:
    """How many object keys valid JSON text ``data`` writes: its ``:`` outside strings."""
    return _STRING_TOKEN.sub(b"", data).count(b":")


def _keys_parsed(value: Any) -> int:
    """How many keys the objects of a parsed value hold (a key given twice counts once)."""
    total, pending = 0, [value]
    while pending:
        item = pending.pop()
        if type(item) is dict:
            total += len(item)
            pending.extend(item.values())
        elif type(item) is list:
            pending.extend(item)
    return total


def loads_request(data: bytes | str) -> Any:
    """Parse a client's JSON the way Elasticsearch does: a key given twice in one object is an
    error (``{"size": 2, "size": 3}`` is refused by Elasticsearch, so the proxy must not pick
    one of the values and answer as if the body were valid). Raises ``ValueError``.

    orjson reads the text when it can (as in :func:`loads`) and its value is taken when the
    objects in it hold as many keys as the text writes (none was given twice); anything else
    is read by the standard library, which names the duplicate key or the error."""
    if type(data) is bytes and not _may_hold_long_integer(data):
        try:
            value = orjson.loads(data)
        except orjson.JSONDecodeError:
            pass
        else:
            parsed = _keys_parsed(value)
            # Every key is written with a ``:``, so as many ``:`` in all as keys parsed means no
            # key was given twice (and no string holds one): the strings need not be found.
            if data.count(b":") == parsed or parsed == _keys_written(data):
                return value
    return _stdlib_loads(data, object_pairs_hook=_unique_pairs)
