"""Where a search response's hits and fingerprints are: one validating pass over its bytes.

:func:`scan` reads an upstream ``_search`` answer without building it: it checks that the
text is JSON and finds, as byte offsets, the ``took`` number, the ``hits.hits`` array, the
top-level object's closing brace and, for each hit, the hit's bounds, its ``_index``, ``_id``,
``_routing`` and ``_score``, and the ``v``, ``sig`` and ``n`` of its ``_source.neardup``
fingerprint. A collapsed page is then written by splicing those bytes
(:mod:`neardup.proxy.grouping.spliced_page`): the sources are copied, never decoded.

It answers None unless the response has the usual shape, which the caller then reads the
general way (:mod:`neardup.proxy.transport.rawjson`):

* the text is JSON (RFC 8259, strict UTF-8), nested at most :data:`MAX_DEPTH` deep;
* at the levels read (the top object, ``hits``, each hit, its ``_source``, its ``neardup``)
  no key holds an escape and no key read is given twice;
* the top object has an integer ``took``, a ``hits`` object with a ``hits`` array of
  objects, and no ``neardup`` key;
* every hit has a ``_source`` object with a ``neardup`` object holding the strings ``v`` and
  ``sig`` and the integer ``n``; no ``fields`` or ``inner_hits``; ``_index``, ``_id`` and
  ``_routing`` absent or strings, ``_score`` absent, null or a number; the strings read hold
  no escape (so their bytes are their text).

The answer is ``(took_start, took_end, hits_start, hits_end, close, table)``: ``raw[took_start:
took_end]`` is the ``took`` number, ``hits_start`` the offset of the ``[`` of ``hits.hits`` and
``hits_end`` the offset after its ``]``, ``close`` the offset of the top object's ``}``, and
``table`` holds :data:`COLUMNS` little-endian int64 per hit (:data:`COLUMN_NAMES`): a value's
span (a string's text without its quotes, a number's token), -1 and -1 when absent (or a null
``_score``).

Two implementations return the same value for every input: the compiled one (a Rust extension
built when neardup is installed, when a Rust toolchain is there) and :func:`reference_scan`
here, which the tests compare it with. :data:`COMPILED` says whether the compiled one is
loaded; without it :func:`scan` answers None and the proxy reads every response the general
way, since this reference is slower than that.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable

ScanResult = tuple[int, int, int, int, int, bytes]

COLUMN_NAMES = ("start", "end", "index_start", "index_end", "id_start", "id_end", "routing_start", "routing_end",
                "score_start", "score_end", "v_start", "v_end", "sig_start", "sig_end", "n_start", "n_end")
COLUMNS = len(COLUMN_NAMES)
#: Deepest nesting of arrays and objects accepted (the top-level container is at depth 1).
MAX_DEPTH = 512

_ROW = struct.Struct(f"<{COLUMNS}q")
_WHITESPACE = re.compile(rb"[ \t\n\r]*")
#: A string token: any byte but ``"``, ``\\`` and control characters, or a valid escape.
_STRING = re.compile(rb'"((?:[^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})*)"')
_NUMBER = re.compile(rb"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
_INTEGER = re.compile(rb"-?(?:0|[1-9][0-9]*)")
_LITERALS = (b"true", b"false", b"null")
_HIT_KEYS = frozenset({b"_index", b"_id", b"_routing", b"_score", b"_source", b"fields", b"inner_hits"})


class _Unusual(Exception):
    """Not JSON, or not the usual shape: :func:`reference_scan` answers None."""


def _skip_space(raw: bytes, at: int) -> int:
    match = _WHITESPACE.match(raw, at)
    assert match is not None
    return match.end()


def _string(raw: bytes, at: int) -> tuple[int, int, int]:
    """(text start, text end, end) of the string token at ``at``."""
    match = _STRING.match(raw, at)
    if match is None:
        raise _Unusual
    return match.start(1), match.end(1), match.end()


def _key(raw: bytes, at: int) -> tuple[bytes, int]:
    """An object key at ``at`` (after whitespace) and the offset after its ``:``."""
    start, end, at = _string(raw, _skip_space(raw, at))
    at = _skip_space(raw, at)
    if raw[at:at + 1] != b":":
        raise _Unusual
    return raw[start:end], at + 1


def _scalar_end(raw: bytes, at: int) -> int:
    """The end of the number or literal at ``at``."""
    match = _NUMBER.match(raw, at)
    if match is not None:
        return match.end()
    for literal in _LITERALS:
        if raw.startswith(literal, at):
            return at + len(literal)
    raise _Unusual


def _skip_value(raw: bytes, at: int, depth: int) -> int:
    """The end of the JSON value at ``at`` (after whitespace), checked; ``depth``: that of the
    container holding it. Iterative, so that deep nesting costs no Python stack."""
    closers: list[bytes] = []
    while True:
        at = _skip_space(raw, at)
        first = raw[at:at + 1]
        if first in (b"{", b"["):
            if depth + len(closers) + 1 > MAX_DEPTH:
                raise _Unusual
            closer = b"}" if first == b"{" else b"]"
            at = _skip_space(raw, at + 1)
            if raw[at:at + 1] != closer:
                closers.append(closer)
                if closer == b"}":
                    _, at = _key(raw, at)
                continue
            at += 1
        elif first == b'"':
            at = _string(raw, at)[2]
        else:
            at = _scalar_end(raw, at)
        while True:   # after a value: a comma, or the end of containers
            if not closers:
                return at
            at = _skip_space(raw, at)
            following = raw[at:at + 1]
            if following == b",":
                at += 1
                if closers[-1] == b"}":
                    _, at = _key(raw, at)
                break
            if following != closers[-1]:
                raise _Unusual
            closers.pop()
            at += 1


class _Members:
    """The members of the object at ``at``, read key by key: ``next()`` gives (key, offset
    of its value) or None after the closing brace (``self.at`` then is the offset after it);
    the caller sets ``self.at`` to the end of each value. Keys holding an escape, and
    ``tracked`` keys given twice, are refused."""

    def __init__(self, raw: bytes, at: int, tracked: frozenset[bytes]) -> None:
        at = _skip_space(raw, at)
        if raw[at:at + 1] != b"{":
            raise _Unusual
        self.raw, self.at, self.tracked = raw, at + 1, tracked
        self.first = True
        self.seen: set[bytes] = set()

    def next(self) -> tuple[bytes, int] | None:
        raw = self.raw
        at = _skip_space(raw, self.at)
        mark = raw[at:at + 1]
        if mark == b"}":
            self.at = at + 1
            return None
        if not self.first:
            if mark != b",":
                raise _Unusual
            at += 1
        self.first = False
        key, value_at = _key(raw, at)
        if b"\\" in key:
            raise _Unusual
        if key in self.tracked:
            if key in self.seen:
                raise _Unusual
            self.seen.add(key)
        return key, _skip_space(raw, value_at)


def _plain_string(raw: bytes, at: int) -> tuple[int, int, int]:
    """A string without escapes at ``at``: (text start, text end, end)."""
    if raw[at:at + 1] != b'"':
        raise _Unusual
    start, end, after = _string(raw, at)
    if b"\\" in raw[start:end]:
        raise _Unusual
    return start, end, after


def _integer(raw: bytes, at: int) -> tuple[int, int]:
    match = _NUMBER.match(raw, at)
    if match is None or _INTEGER.fullmatch(match.group()) is None:
        raise _Unusual
    return at, match.end()


def _object(raw: bytes, at: int, tracked: frozenset[bytes], read: Callable[[bytes, int], int], depth: int) -> int:
    """Walk the object at ``at`` (at ``depth``): ``read(key, value offset)`` reads a tracked
    key's value and gives its end; other keys' values are skipped. The offset after the object."""
    if depth > MAX_DEPTH:
        raise _Unusual
    members = _Members(raw, at, tracked)
    while (member := members.next()) is not None:
        key, value_at = member
        members.at = read(key, value_at) if key in tracked else _skip_value(raw, value_at, depth)
    return members.at


def _fingerprint(raw: bytes, at: int, row: list[int], depth: int) -> int:
    def read(key: bytes, value_at: int) -> int:
        if key == b"n":
            row[14], row[15] = _integer(raw, value_at)
            return row[15]
        start, end, after = _plain_string(raw, value_at)
        column = 10 if key == b"v" else 12
        row[column], row[column + 1] = start, end
        return after

    end = _object(raw, at, frozenset({b"v", b"sig", b"n"}), read, depth)
    if min(row[10], row[12], row[14]) < 0:
        raise _Unusual
    return end


def _source(raw: bytes, at: int, row: list[int], depth: int) -> int:
    def read(key: bytes, value_at: int) -> int:
        return _fingerprint(raw, value_at, row, depth + 1)

    end = _object(raw, at, frozenset({b"neardup"}), read, depth)
    if row[10] < 0:
        raise _Unusual
    return end


def _hit(raw: bytes, at: int, depth: int) -> list[int]:
    row = [-1] * COLUMNS
    row[0] = at
    has_source = False

    def read(key: bytes, value_at: int) -> int:
        nonlocal has_source
        if key in (b"fields", b"inner_hits"):
            raise _Unusual
        if key == b"_source":
            has_source = True
            return _source(raw, value_at, row, depth + 1)
        if key == b"_score":
            if raw.startswith(b"null", value_at):
                return value_at + 4
            match = _NUMBER.match(raw, value_at)
            if match is None:
                raise _Unusual
            row[8], row[9] = value_at, match.end()
            return match.end()
        start, end, after = _plain_string(raw, value_at)
        column = {b"_index": 2, b"_id": 4, b"_routing": 6}[key]
        row[column], row[column + 1] = start, end
        return after

    row[1] = _object(raw, at, _HIT_KEYS, read, depth)
    if not has_source:
        raise _Unusual
    return row


def _hits_array(raw: bytes, at: int, rows: list[list[int]], depth: int) -> int:
    """Read the ``hits.hits`` array at ``at`` (its ``[``) into ``rows``; the offset after it."""
    if raw[at:at + 1] != b"[" or depth > MAX_DEPTH:
        raise _Unusual
    at = _skip_space(raw, at + 1)
    if raw[at:at + 1] == b"]":
        return at + 1
    while True:
        rows.append(_hit(raw, at, depth + 1))
        at = _skip_space(raw, rows[-1][1])
        mark = raw[at:at + 1]
        if mark == b"]":
            return at + 1
        if mark != b",":
            raise _Unusual
        at = _skip_space(raw, at + 1)


def _scan(raw: bytes) -> ScanResult:
    rows: list[list[int]] = []
    spans = {"took": (-1, -1), "hits": (-1, -1)}

    def read_hits(key: bytes, value_at: int) -> int:
        start = value_at
        end = _hits_array(raw, value_at, rows, 3)
        spans["hits"] = (start, end)
        return end

    def read_top(key: bytes, value_at: int) -> int:
        if key == b"neardup":
            raise _Unusual
        if key == b"took":
            spans["took"] = _integer(raw, value_at)
            return spans["took"][1]
        return _object(raw, value_at, frozenset({b"hits"}), read_hits, 2)

    end = _object(raw, 0, frozenset({b"took", b"hits", b"neardup"}), read_top, 1)
    close = end - 1
    if _skip_space(raw, end) != len(raw) or spans["took"][0] < 0 or spans["hits"][0] < 0:
        raise _Unusual
    table = b"".join(_ROW.pack(*row) for row in rows)
    return spans["took"][0], spans["took"][1], spans["hits"][0], spans["hits"][1], close, table


def reference_scan(raw: bytes) -> ScanResult | None:
    """The scan of ``raw`` (see the module), in Python: the reference of the compiled one."""
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
    try:
        return _scan(raw)
    except _Unusual:
        return None


try:
    import neardup.proxy.transport._hitscan as _hitscan
except ImportError:   # not built (no cargo at install): no response is scanned
    _hitscan = None  # type: ignore[assignment]

#: Whether the compiled scan is loaded (the extension is built when neardup is installed on a
#: machine with a Rust toolchain).
COMPILED = _hitscan is not None


def scan(raw: bytes) -> ScanResult | None:
    """The scan of ``raw`` (see the module) by the compiled implementation; None for every
    response when it is not loaded."""
    return _hitscan.scan(raw) if _hitscan is not None else None
