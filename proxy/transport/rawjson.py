"""Search responses read with each hit's ``_source`` kept as the upstream's own bytes.

Collapsing reads three fields of a hit's ``_source`` (``neardup.v``, ``neardup.sig``,
``neardup.n``; ``neardup.tf`` in ``tfidf`` mode) and never changes it, yet parsing the window's
sources into Python objects and writing them out again would cost more than everything else
the proxy does on a search, since a window's bytes are nearly all ``_source``. So:

* :func:`loads_search` decodes a search response with ``msgspec`` in two passes that do not
  build the sources: the top-level object as ``{key: raw value}``, then its ``hits`` object
  with every hit as ``{key: raw value}``. Each hit's ``_source`` stays a :class:`msgspec.Raw`
  (a zero-copy slice of the response); everything else (the envelope: ``took``,
  ``aggregations``, ``hits.total``, and each hit's ``_index``, ``_id``, ``_score``,
  ``fields``, ``inner_hits``, ...) is decoded into ordinary Python values in one more call on
  the (small) rest, in its original key order.
* :func:`source_fingerprint` / :func:`source_vector` read only ``neardup.{v,sig,n}`` /
  ``neardup.tf`` out of a raw ``_source`` (a typed decode that skips everything else).
* :func:`materialize` parses a raw ``_source`` when something must look inside it
  (``filter_path`` into ``_source``, ``neardup_source`` texts).
* :mod:`neardup.proxy.transport.jsonio` writes a raw ``_source`` back byte for byte (spliced into orjson's output), so
  the client gets exactly Elasticsearch's ``_source``, numbers and escapes included.

Values keep the guarantees of :func:`neardup.proxy.transport.jsonio.loads`: integers of any size stay exact
(msgspec reads them as Python ints), nothing that is not JSON is accepted (``NaN``, numbers
that overflow, trailing bytes), duplicate keys keep the last value. A raw ``_source`` is checked
to be well-formed JSON (structure, escapes, number syntax) but not parsed, so a number in it
that no double holds (``1e999``) goes to the client as Elasticsearch sent it, and only its own
hit loses its fingerprint if it is one of ``neardup``'s fields. Whenever the fast decode
cannot (an unexpected shape, a lone surrogate escape, a pretty-printed upstream answer, nesting
deeper than msgspec allows), the response is read by :func:`neardup.proxy.transport.jsonio.loads`,
which gives the same values or raises the same ``ValueError``.
"""

from __future__ import annotations

from typing import Any

import msgspec
import numpy as np
from msgspec import Raw

from neardup.proxy.transport import jsonio

_OBJECT = msgspec.json.Decoder(dict[str, Raw])
_ANY = msgspec.json.Decoder()
_ENCODE = msgspec.json.Encoder()
#: Stands in for a hit's ``_source`` in the rest that is decoded (replaced afterwards).
_PLACEHOLDER = Raw(b"0")


class _Hits(msgspec.Struct, forbid_unknown_fields=True):
    """A search response's ``hits`` object (Elasticsearch writes these three keys, in this
    order); any other key makes the decode fail, and the response goes the general way."""

    # Absent: None; JSON null: Raw(b"null"). (msgspec decodes no ``Raw | None`` union.)
    total: Raw = None  # type: ignore[assignment]
    max_score: Raw = None  # type: ignore[assignment]
    hits: list[dict[str, Raw]] | None = None


_HITS = msgspec.json.Decoder(_Hits)


def _hits_in_order(raw: Raw, hits: _Hits) -> bool:
    """Whether the ``hits`` object's keys came as total, max_score, hits (those present): its
    first key is the first present one and it ends with the ``hits`` array (compact JSON)."""
    view = memoryview(raw)
    first = b'{"total":' if hits.total is not None else \
        b'{"max_score":' if hits.max_score is not None else b'{"hits":'
    return view[:len(first)] == first and view[-2:] == b"]}"


def loads_search(raw: bytes) -> Any:
    """A search response with each hit's ``_source`` as :class:`msgspec.Raw` (see the module);
    raises ``ValueError`` for what is not JSON, like :func:`neardup.proxy.transport.jsonio.loads`."""
    try:
        value = _decode_search(raw)
    except (msgspec.MsgspecError, RecursionError, ValueError, TypeError):
        value = None
    return jsonio.loads(raw) if value is None else value


class _Top(msgspec.Struct):
    """The ``hits`` of a search response (its other keys are read from the envelope)."""

    hits: _Hits | None = None


_TOP = msgspec.json.Decoder(_Top)


def _address(buffer: Any) -> int:
    """Where a buffer's bytes are in memory (a :class:`msgspec.Raw` points into the response)."""
    return int(np.frombuffer(buffer, np.uint8).__array_interface__["data"][0])


def _decode_search(raw: bytes) -> Any:
    value = _decode_search_one_pass(raw)
    return value if value is not None else _decode_search_two_passes(raw)


def _decode_search_one_pass(raw: bytes) -> Any:
    """One pass over the response for compact JSON in Elasticsearch's key order (the usual
    case): the ``hits`` object decoded typed, the rest of the response (``"hits"`` cut out of it
    by the positions of the raw values) decoded as it is; None when anything is different."""
    hits = _TOP.decode(raw).hits
    if hits is None or not hits.hits:
        return None
    first, key = (hits.total, b'"hits":{"total":') if hits.total is not None else \
        (hits.max_score, b'"hits":{"max_score":') if hits.max_score is not None else (None, b"")
    last_hit = hits.hits[-1]
    if first is None or not last_hit:
        return None
    last = next(reversed(last_hit.values()))
    base = _address(raw)
    start = _address(first) - base - len(key)
    end = _address(last) - base + len(last) + 3   # the last hit's "}", the array's "]", "}"
    if start < 1 or raw[start:start + len(key)] != key or raw[end - 3:end] != b"}]}":
        return None
    view = memoryview(raw)   # the envelope around "hits", joined without copying its parts first
    value = _ANY.decode(b"".join((view[:start], b'"hits":0', view[end:])))
    if type(value) is not dict or type(value.get("hits")) is not int:
        return None
    value["hits"] = _hits_value(hits)
    return value


def _decode_search_two_passes(raw: bytes) -> Any:
    top = _OBJECT.decode(raw)
    hits_raw = top.get("hits")
    if hits_raw is None:
        return None
    hits = _HITS.decode(hits_raw)
    if hits.hits is None or not _hits_in_order(hits_raw, hits):
        return None
    top["hits"] = _PLACEHOLDER
    value = _ANY.decode(_ENCODE.encode(top))
    value["hits"] = _hits_value(hits)
    return value


def _hits_value(hits: _Hits) -> dict[str, Any]:
    """The ``hits`` object as Python values, each hit's ``_source`` left raw."""
    assert hits.hits is not None
    sources: list[Raw | None] = []
    for hit in hits.hits:
        source = hit.get("_source")
        if source is not None:
            hit["_source"] = _PLACEHOLDER
        sources.append(source)
    rest: dict[str, Any] = {}
    if hits.total is not None:
        rest["total"] = hits.total
    if hits.max_score is not None:
        rest["max_score"] = hits.max_score
    rest["hits"] = hits.hits
    value = _ANY.decode(_ENCODE.encode(rest))
    for hit, source in zip(value["hits"], sources):
        if source is not None:
            hit["_source"] = source
    return value


_RESPONSES = msgspec.json.Decoder(list[Raw])


def loads_msearch(raw: bytes) -> Any:
    """An ``_msearch`` response, each search response in it read as by :func:`loads_search`."""
    try:
        value = _decode_msearch(raw)
    except (msgspec.MsgspecError, RecursionError, ValueError, TypeError):
        value = None
    return jsonio.loads(raw) if value is None else value


def _decode_msearch(raw: bytes) -> Any:
    top = _OBJECT.decode(raw)
    responses_raw = top.get("responses")
    if responses_raw is None:
        return None
    responses = []
    for item in _RESPONSES.decode(responses_raw):
        response = _decode_search(bytes(item))
        responses.append(_ANY.decode(item) if response is None else response)
    top["responses"] = _PLACEHOLDER
    value = _ANY.decode(_ENCODE.encode(top))
    value["responses"] = responses
    return value


class _Fingerprint(msgspec.Struct):
    v: Any = None
    sig: Any = None
    n: Any = None


class _FingerprintSource(msgspec.Struct):
    neardup: _Fingerprint | None = None


class _Vector(msgspec.Struct):
    tf: Any = None


class _VectorSource(msgspec.Struct):
    neardup: _Vector | None = None


_FINGERPRINT = msgspec.json.Decoder(_FingerprintSource)
_VECTOR = msgspec.json.Decoder(_VectorSource)


def source_fingerprint(source: Raw) -> dict[str, Any] | None:
    """``{"v", "sig", "n"}`` of a raw ``_source``'s ``neardup`` object; None when the source
    has none, it is not an object, or the source is not an object (no fingerprint). A typed
    decode: msgspec skips everything else without building it."""
    try:
        found = _FINGERPRINT.decode(source).neardup
    except (msgspec.MsgspecError, RecursionError):
        return None
    return None if found is None else {"v": found.v, "sig": found.sig, "n": found.n}


def source_vector(source: Raw) -> Any:
    """``neardup.tf`` of a raw ``_source`` (the stored TF-IDF vector object), or None."""
    try:
        found = _VECTOR.decode(source).neardup
    except (msgspec.MsgspecError, RecursionError):
        return None
    return None if found is None else found.tf


def materialize(value: Any) -> Any:
    """A raw value parsed (:func:`neardup.proxy.transport.jsonio.loads`); anything else unchanged."""
    return jsonio.loads(bytes(value)) if type(value) is Raw else value
