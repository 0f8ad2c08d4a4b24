"""Adding fingerprints to documents before they are indexed (for pipelines and programs).

For programs that index with the official client::

    from neardup.fingerprint import Fingerprinter, FingerprintParams
    from neardup.indexer.enrich import add_fingerprint, enrich_documents

    fp = Fingerprinter(FingerprintParams())
    doc = add_fingerprint({"title": "...", "body": "..."}, ["title", "body"], fp)
    helpers.bulk(es, ({"_index": "news", "_source": d} for d in enrich_documents(docs, ["title", "body"], fp)))

A document whose fields hold no text (see :mod:`neardup.fingerprint.texts`) is returned unchanged.
Otherwise the fingerprint keys are written into its ``neardup`` object; other keys of an
existing ``neardup`` object are kept (the same merge a partial update does), except the values
``neardup cluster`` derived from the old fingerprint (``cluster``, ``bands``): when the
fingerprint changes they are dropped (:data:`neardup.fingerprint.CLUSTER_KEYS`), so that no document is grouped by
an outdated cluster id; ``neardup cluster --incremental`` places it again. The keys earlier
versions wrote and this one does not (:data:`neardup.fingerprint.RETIRED_KEYS`) are dropped
too, so no stale copy is left beside the new fingerprint.

These functions and ``neardup enrich`` write no cluster *seeds* (the values a singleton gets
from ``neardup cluster``): they do not know the index the documents are bound for, nor whether
it was ever clustered, nor always the ``_id``. ``neardup index`` and ``neardup load`` do, and
seed while the index has never been clustered (:mod:`neardup.indexer.cluster.seeds`; ``load`` drops
the ``cluster``/``bands`` a line brings in its own ``neardup`` object, always, and passes the
seed, if any, as ``extra`` to :meth:`EnrichedLine.render`).

:func:`enrich_line` is the byte-preserving form used by ``neardup enrich`` and ``neardup
load``: when the line has no ``neardup`` key yet, the fingerprint is spliced in before the
closing brace, so every other byte of the line (number spellings, escapes, key order) is
exactly as it came in.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from neardup.fingerprint import CLUSTER_KEYS, FIELD, RETIRED_KEYS, Fingerprint, Fingerprinter
from neardup.fingerprint.texts import compute_fingerprint
from neardup.indexer.cluster.documents import SOURCE_FIELDS
from neardup.indexer.jsonlines import Line

#: What the fingerprint keys are compared on to tell whether a fingerprint changed.
_IDENTITY_KEYS = ("v", "sig", "n")
#: The stored ``neardup`` values the indexer reads with each document (``_source`` paths): the
#: identity keys and the cluster keys, the same paths ``neardup cluster`` reads, and the
#: retired keys, to clear them.
STORED_PATHS = tuple(SOURCE_FIELDS) + tuple(f"{FIELD}.{key}" for key in RETIRED_KEYS)


def fingerprint_changed(existing: Any, value: Mapping[str, Any]) -> bool:
    """Whether the stored ``neardup`` object ``existing`` holds another fingerprint than ``value``."""
    stored = existing if isinstance(existing, Mapping) else {}
    return any(stored.get(key) != value.get(key) for key in _IDENTITY_KEYS)


def _void_keys(existing: Any, value: Mapping[str, Any]) -> tuple[str, ...]:
    """The keys of ``existing`` that writing fingerprint ``value`` voids: the cluster keys when
    the fingerprint changes, and the retired keys always."""
    return CLUSTER_KEYS + RETIRED_KEYS if fingerprint_changed(existing, value) else RETIRED_KEYS


def cleared_keys(existing: Any, value: Mapping[str, Any]) -> dict[str, None]:
    """For a partial update writing fingerprint ``value``: ``None`` (which a partial update
    stores, and which is indexed as no value) for each cluster key the document holds when its
    fingerprint changes, and for each retired key it holds."""
    if not isinstance(existing, Mapping):
        return {}
    return {key: None for key in _void_keys(existing, value) if existing.get(key) is not None}


def merged_neardup(existing: Any, fingerprint: Fingerprint) -> dict[str, Any]:
    """The new ``neardup`` object: existing extra keys kept (but the cluster keys when the
    fingerprint changed, and the retired keys), the fingerprint keys replaced."""
    base = dict(existing) if isinstance(existing, Mapping) else {}
    value = fingerprint.to_source()
    for key in _void_keys(base, value):
        base.pop(key, None)
    base.update(value)
    return base


def add_fingerprint(doc: Mapping[str, Any], fields: Sequence[str], fingerprinter: Fingerprinter) -> dict[str, Any]:
    """A copy of ``doc`` with its fingerprint under ``neardup`` (unchanged copy if it has no text)."""
    _, fingerprint = compute_fingerprint(doc, fields, fingerprinter)
    result = dict(doc)
    if fingerprint is not None:
        result[FIELD] = merged_neardup(doc.get(FIELD), fingerprint)
    return result


def enrich_documents(docs: Iterable[Mapping[str, Any]], fields: Sequence[str],
                     fingerprinter: Fingerprinter) -> Iterator[dict[str, Any]]:
    """:func:`add_fingerprint` over a stream of documents (lazy: one document in memory at a time)."""
    for doc in docs:
        yield add_fingerprint(doc, fields, fingerprinter)


# --- JSON lines ----------------------------------------------------------------------------

@dataclass(frozen=True)
class EnrichedLine:
    """One input line, parsed and fingerprinted.

    ``outcome`` is ``"ok"``, a no-text outcome (``no_field``, ``non_string``, ``empty``), or
    ``"bad"`` (``error`` says why). ``text`` is the line as it came in (without its newline);
    ``doc`` the parsed object, as it came in.
    """

    outcome: str
    text: str
    doc: dict[str, Any] | None = None
    fingerprint: Fingerprint | None = None
    error: str = ""

    def render(self, extra: Mapping[str, Any] | None = None, without: Sequence[str] = ()) -> str:
        """The line to write: with ``neardup`` (plus ``extra`` keys in it) if it has a fingerprint.

        Without an earlier ``neardup`` key the value is spliced in and every other byte is
        kept; with one, the object is merged (its keys ``without`` dropped: ``neardup load``
        drops the :data:`neardup.fingerprint.CLUSTER_KEYS` the line brings, which name clusters of another index)
        and the line serialised again. A line without a fingerprint is kept as it came in,
        but for the keys ``without`` of its ``neardup`` object (dropped, if it has any).
        """
        if self.doc is None:
            return self.text
        if self.fingerprint is None:
            node = self.doc.get(FIELD)
            if isinstance(node, Mapping) and any(key in node for key in without):
                return compact_json({**self.doc, FIELD: {k: v for k, v in node.items() if k not in without}})
            return self.text
        value = merged_neardup(self.doc.get(FIELD), self.fingerprint)
        for key in without:
            value.pop(key, None)
        value.update(extra or {})
        if FIELD in self.doc:
            return compact_json({**self.doc, FIELD: value})
        return splice_field(self.text, self.doc, FIELD, value)


def compact_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def splice_field(line: str, doc: Mapping[str, Any], name: str, value: Any) -> str:
    """``line`` (the JSON text of ``doc``) with ``"name": value`` added before its closing brace.

    Only valid when ``name`` is not a key of ``doc``; every other byte stays as it was.
    """
    body = line.rstrip()
    if not body.endswith("}"):
        raise ValueError("a JSON object ends with }")
    separator = "," if doc else ""
    return f"{body[:-1].rstrip()}{separator}{compact_json(name)}:{compact_json(value)}}}"


def enrich_line(line: str, fields: Sequence[str], fingerprinter: Fingerprinter) -> EnrichedLine:
    """Parse one JSON line and fingerprint it; never raises on bad input."""
    text = line.rstrip("\r\n")
    try:
        doc = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        return EnrichedLine("bad", text, error=f"not valid JSON: {exc}")
    if not isinstance(doc, dict):
        return EnrichedLine("bad", text, error=f"not a JSON object (a {type(doc).__name__})")
    outcome, fingerprint = compute_fingerprint(doc, fields, fingerprinter)
    return EnrichedLine(outcome, text, doc, fingerprint)


def enrich_read_line(line: Line, fields: Sequence[str], fingerprinter: Fingerprinter) -> EnrichedLine:
    """:func:`enrich_line` of a line as read; a line that is not UTF-8 is ``bad``."""
    if line.text is None:
        return EnrichedLine("bad", "", error=line.error)
    return enrich_line(line.text, fields, fingerprinter)
