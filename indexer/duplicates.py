"""``neardup duplicates``: the near-duplicates of one document of an index.

The document's stored fingerprint gives its supershingles and megashingles; a ``terms``-style
candidate query finds the documents sharing any of them (see :mod:`neardup.fingerprint.matching`), and each
candidate is verified by signature at the threshold and mode. A document without a
fingerprint of the current scheme cannot be compared: the command says to run ``neardup index``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from neardup.fingerprint import FIELD, Fingerprint, FingerprintFormatError
from neardup.fingerprint.matching import Match, candidate_search, candidates_from_hits, verified_matches
from neardup.indexer.client import Client
from neardup.indexer.errors import ClusterApiError, JobError
from neardup.indexer.retry import Retrier
from neardup.upstream import ClusterInfo


@dataclass(frozen=True)
class DuplicatesResult:
    index: str
    id: str
    threshold: float
    mode: str
    candidates: int
    matches: list[Match]
    previews: dict[str, str]


def stored_fingerprint(source: dict[str, Any], doc_id: str, version: str) -> Fingerprint:
    stored = source.get(FIELD)
    if not isinstance(stored, dict) or stored.get("v") != version:
        have = "no fingerprint" if not isinstance(stored, dict) else f"a fingerprint of scheme {stored.get('v')!r}"
        raise JobError(f"document {doc_id} has {have}, not one of the current scheme {version}; "
                       "run `neardup index` on the index first")
    try:
        return Fingerprint.from_source(stored)
    except FingerprintFormatError as exc:
        raise JobError(f"document {doc_id}: {exc}; run `neardup index --force` to rewrite it") from None


def preview(source: dict[str, Any], fields: Sequence[str], width: int = 70) -> str:
    for name in fields:
        value = source.get(name)
        if isinstance(value, str) and value.strip():
            text = " ".join(value.split())
            return text if len(text) <= width else text[: width - 1] + "…"
    return ""


def find_duplicates(client: Client, retrier: Retrier, *, index: str, doc_id: str, version: str,
                    threshold: float, mode: Literal["resemblance", "containment"],
                    max_candidates: int, fields: Sequence[str], routing: str | None = None
                    ) -> DuplicatesResult:
    try:
        doc = retrier.call("reading the document", lambda: client.get(
            index=index, id=doc_id, routing=routing, source_includes=[FIELD, *fields]))
    except ClusterApiError as exc:
        if exc.status != 404:
            raise
        if exc.error_type == "index_not_found_exception":
            raise JobError(f"no such index: {index}") from None
        raise JobError(f"no document with id {doc_id!r} in {index}") from None
    source = doc.get("_source") or {}
    fingerprint = stored_fingerprint(source, doc_id, version)
    if fingerprint.is_empty:
        return DuplicatesResult(index, doc_id, threshold, mode, 0, [], {})
    body = candidate_search(fingerprint.to_source(), version, max_candidates, exclude_id=doc_id)
    body["_source"] = [FIELD, *fields]
    hits = retrier.call("searching candidates", lambda: client.search(index=index, **body))["hits"]["hits"]
    candidates = candidates_from_hits(hits)
    matches = verified_matches(fingerprint, candidates, threshold, mode)
    previews = {h["_id"]: preview(h.get("_source") or {}, fields) for h in hits}
    previews[doc_id] = preview(source, fields)
    return DuplicatesResult(index, doc_id, threshold, mode, len(candidates), matches, previews)


def format_duplicates(result: DuplicatesResult, cluster: ClusterInfo | None = None) -> str:
    lines = [f"{result.index}/{result.id}: {result.previews.get(result.id, '')}",
             *([f"upstream: {cluster.describe()}"] if cluster else []),
             f"{len(result.matches)} near-duplicate(s) at {result.mode} >= {result.threshold:g} "
             f"(of {result.candidates} candidates sharing a supershingle or megashingle)"]
    for match in result.matches:
        lines.append(f"  {match.similarity:.3f}  {match.id}  {result.previews.get(match.id, '')}")
    return "\n".join(lines)


def duplicates_json(result: DuplicatesResult) -> dict[str, Any]:
    return {"index": result.index, "id": result.id, "threshold": result.threshold, "mode": result.mode,
            "candidates": result.candidates,
            "duplicates": [{"_index": m.index, "_id": m.id, "similarity": round(m.similarity, 6)}
                           for m in result.matches]}
