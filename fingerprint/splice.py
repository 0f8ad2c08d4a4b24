"""Setting one top-level field of a JSON object in its bytes, every other byte kept.

A document's ``_source`` is stored as the bytes it was indexed with: key order, whitespace,
number spellings (``1.0e2``), escapes (``\\u00e9``). Decoding and encoding it again changes
them. :func:`with_field` writes ``"name": value`` into the object's text instead: the value of
an existing key is replaced in place (its span found by :func:`value_spans`), a new key goes
before the final ``}``; the bytes outside that span are the input's.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

_SPACE = re.compile(r"[ \t\n\r]*")


def compact(value: Any) -> bytes:
    """``value`` as compact JSON (UTF-8, no ASCII escapes)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def _skip_space(text: str, at: int) -> int:
    match = _SPACE.match(text, at)
    return match.end() if match is not None else at


def value_spans(source: bytes) -> dict[str, tuple[int, int]] | None:
    """The byte span of each top-level value of the JSON object ``source`` (the last one of a
    key given twice), or None if it is no valid JSON object."""
    try:
        text = source.decode("utf-8")
    except UnicodeDecodeError:
        return None
    decoder = json.JSONDecoder()
    spans: dict[str, tuple[int, int]] = {}
    at = _skip_space(text, 0)
    if text[at:at + 1] != "{":
        return None
    at = _skip_space(text, at + 1)
    ascii_only = text.isascii()
    try:
        while text[at:at + 1] != "}":
            if text[at:at + 1] != '"':
                return None
            key, at = json.decoder.scanstring(text, at + 1)  # type: ignore[attr-defined]  # public, untyped
            at = _skip_space(text, at)
            if text[at:at + 1] != ":":
                return None
            start = _skip_space(text, at + 1)
            _, end = decoder.raw_decode(text, start)
            spans[key] = ((start, end) if ascii_only
                          else (len(text[:start].encode("utf-8")), len(text[:end].encode("utf-8"))))
            at = _skip_space(text, end)
            if text[at:at + 1] == ",":
                at = _skip_space(text, at + 1)
                if text[at:at + 1] == "}":
                    return None
            elif text[at:at + 1] != "}":
                return None
    except (ValueError, RecursionError):
        return None
    return spans if not text[at + 1:].strip(" \t\n\r") else None


def with_field(source: bytes, doc: Mapping[str, Any], name: str, value: Any) -> bytes | None:
    """``source`` (the JSON text of ``doc``) with top-level ``name`` set to ``value``; None
    when its bytes cannot be read as one JSON object, or name ``name`` twice."""
    if name in doc:
        spans = value_spans(source)
        if spans is None or name not in spans or source.count(compact(name)) > 1 and _twice(source, name):
            return None
        start, end = spans[name]
        return source[:start] + compact(value) + source[end:]
    brace = len(source.rstrip(b" \t\n\r")) - 1
    if brace < 0 or source[brace:brace + 1] != b"}":
        return None
    field = compact({name: value})[1:-1]
    return source[:brace] + (b"," if doc else b"") + field + source[brace:]


def _twice(source: bytes, name: str) -> bool:
    """Whether ``name`` is a top-level key of ``source`` more than once."""
    text = source.decode("utf-8")
    keys = json.loads(text, object_pairs_hook=lambda pairs: [key for key, _ in pairs])
    return isinstance(keys, list) and keys.count(name) > 1
