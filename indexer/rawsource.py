"""The ``_source`` of each hit as the bytes the cluster sent, beside the decoded answer.

A whole-document write (:mod:`neardup.indexer.writer`) must store every byte of the document
but ``neardup`` as it was. The engines send a hit's stored ``_source`` verbatim inside a search
or ``mget`` answer when the request filters neither the source nor the answer
(``filter_path``); decoding it loses the spelling. The clients keep each JSON answer's bytes
(:class:`RawBody`, a dict with ``raw``), and :func:`attach_raw_sources` cuts the sources out of
them with msgspec (``msgspec.Raw``: the span of a value, undecoded) and puts each into its hit
under :data:`RAW_SOURCE`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

#: The hit key under which :func:`attach_raw_sources` puts the ``_source`` bytes.
RAW_SOURCE = "neardup_raw_source"


class RawBody(dict[str, Any]):
    """A decoded JSON answer that keeps the bytes it was decoded from."""

    __slots__ = ("raw",)

    def __init__(self, value: Mapping[str, Any], raw: bytes | str) -> None:
        super().__init__(value)
        self.raw = raw


def decoded(data: bytes | str) -> Any:
    """``data`` decoded; a JSON object as a :class:`RawBody`."""
    value = json.loads(data)
    return RawBody(value, data) if isinstance(value, dict) else value


class _Doc(msgspec.Struct):
    source: msgspec.Raw = msgspec.field(name="_source", default_factory=msgspec.Raw)


class _Hits(msgspec.Struct):
    hits: list[_Doc] = []


class _SearchAnswer(msgspec.Struct):
    hits: _Hits = msgspec.field(default_factory=_Hits)


class _MgetAnswer(msgspec.Struct):
    docs: list[_Doc] = []


_SEARCH = msgspec.json.Decoder(_SearchAnswer)
_MGET = msgspec.json.Decoder(_MgetAnswer)


def attach_raw_sources(response: Mapping[str, Any], docs: Sequence[dict[str, Any]]) -> bool:
    """Put the ``_source`` bytes of each of ``docs`` (the hits of the search answer
    ``response``, or the docs of an ``mget`` answer) under :data:`RAW_SOURCE`; False, and
    nothing put, when the answer's bytes were not kept or do not match ``docs``."""
    raw = getattr(response, "raw", None)
    if raw is None:
        return False
    try:
        found = _SEARCH.decode(raw).hits.hits if "hits" in response else _MGET.decode(raw).docs
    except msgspec.DecodeError:
        return False
    if len(found) != len(docs):
        return False
    for doc, answer in zip(docs, found):
        if len(answer.source) and "_source" in doc:
            doc[RAW_SOURCE] = bytes(answer.source)
    return True
