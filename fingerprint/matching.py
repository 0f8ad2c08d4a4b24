"""Finding the near-duplicates of a fingerprint: candidates by shared keys, verified by signature.

Candidates are documents sharing at least one supershingle or megashingle with the
fingerprint. A supershingle is a hash of ``rows`` minhashes, so two documents of resemblance
``s`` share a given one with probability ``s^rows``, and at least one of ``groups`` with
``1 - (1 - s^rows)^groups``; a megashingle (a hash of a pair of supershingles) is the rarer,
more specific key. Each candidate is then verified with its signature:

* resemblance: ``Ĵ(a, b)`` = share of equal minhash slots;
* containment: ``max(Ĉ(a in b), Ĉ(b in a))`` (one text is, for the most part, inside the other).

A candidate is a duplicate when the estimate is ``>= threshold`` (and > 0). Empty
fingerprints (no words) have no keys and never match.

In Elasticsearch, the candidate query asks for the supershingles only (``term`` queries on
``neardup.super``, which is indexed; ``neardup.mega`` is not): two documents sharing a
megashingle share both of its supershingles (but for a 64-bit hash collision), so the
documents sharing any key are the documents sharing a supershingle. It ranks by the number of
shared supershingles ``k`` (each is a ``constant_score`` clause worth 1), so the most likely
duplicates come first when a cap on candidates applies: the same order as counting the shared
keys, ``k + k(k-1)/2``, which grows with ``k``. Within one ``neardup load`` run (or one ``_bulk`` request through the
proxy), :class:`RunIndex` keeps the fingerprints written so far in memory, keyed the same way.

The decision is shared by ``neardup load --on-duplicate`` and the proxy's enriched writes
(``[enrich]``): :func:`find_duplicate` over the candidates of the index and of the run, and
:func:`duplicate_of`, the value a tagged document stores at ``neardup.duplicate_of`` (an object
``{id, similarity}``, mapped as :data:`DUPLICATE_OF_MAPPING`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from neardup.fingerprint import FIELD, Fingerprint, FingerprintFormatError, estimated_containment, estimated_resemblance

Mode = Literal["resemblance", "containment"]


def similarity(a: Fingerprint, b: Fingerprint, mode: Mode) -> float:
    """Estimated similarity of two fingerprints of the same scheme (see the module docstring)."""
    if a.version != b.version or a.is_empty or b.is_empty:
        return 0.0
    if mode == "containment":
        return max(estimated_containment(a, b), estimated_containment(b, a))
    return estimated_resemblance(a, b)


def fingerprint_keys(fingerprint: Fingerprint) -> list[tuple[int, int]]:
    """The keys a fingerprint is found by: ``(0, supershingle)`` and ``(1, megashingle)``."""
    return ([(0, int(v)) for v in fingerprint.supershingles]
            + [(1, int(v)) for v in fingerprint.megashingles])


@dataclass(frozen=True)
class Match:
    id: str
    similarity: float
    index: str = ""


def best_match(fingerprint: Fingerprint, candidates: Iterable[tuple[str, str, Fingerprint]],
               threshold: float, mode: Mode, exclude_id: str | None = None) -> Match | None:
    """The most similar candidate at or above ``threshold`` (ties: the first), or ``None``."""
    best: Match | None = None
    for index, doc_id, other in candidates:
        if doc_id == exclude_id:
            continue
        value = similarity(fingerprint, other, mode)
        if value > 0 and value >= threshold and (best is None or value > best.similarity):
            best = Match(doc_id, value, index)
    return best


def verified_matches(fingerprint: Fingerprint, candidates: Iterable[tuple[str, str, Fingerprint]],
                     threshold: float, mode: Mode, exclude_id: str | None = None) -> list[Match]:
    """Every candidate at or above ``threshold``, most similar first (ties by id)."""
    found = [Match(doc_id, value, index) for index, doc_id, other in candidates
             if doc_id != exclude_id
             for value in [similarity(fingerprint, other, mode)] if value > 0 and value >= threshold]
    return sorted(found, key=lambda m: (-m.similarity, m.id))


#: Key of ``neardup`` naming the document a tagged near-duplicate duplicates.
DUPLICATE_OF = "duplicate_of"
#: The mapping of ``neardup.duplicate_of``: the earlier document's ``_id`` and the similarity.
DUPLICATE_OF_MAPPING: dict[str, Any] = {"properties": {"id": {"type": "keyword"}, "similarity": {"type": "float"}}}


def find_duplicate(fingerprint: Fingerprint, from_index: Iterable[tuple[str, str, Fingerprint]],
                   run: RunIndex, threshold: float, mode: Mode, exclude_id: str | None = None) -> Match | None:
    """The earlier document ``fingerprint`` duplicates: the best of the index's candidates and
    the documents written before it in this run (never the same ``_id``), or ``None``."""
    return best_match(fingerprint, [*from_index, *run.candidates(fingerprint)], threshold, mode,
                      exclude_id=exclude_id)


def duplicate_of(match: Match) -> dict[str, Any]:
    """The value of ``neardup.duplicate_of``: the earlier document's ``_id`` and the estimated
    similarity (4 decimals, as the reasons and summaries show it)."""
    return {"id": match.id, "similarity": round(match.similarity, 4)}


def duplicate_reason(match: Match) -> str:
    """Why a near-duplicate is refused, naming the earlier document and the similarity."""
    return f"near-duplicate of document [{match.id}] (similarity {match.similarity:.4f})"


# --- candidates in Elasticsearch ------------------------------------------------------------------

def candidate_query(source: dict[str, Any], version: str, exclude_id: str | None = None) -> dict[str, Any]:
    """Documents of the same scheme sharing a supershingle (and so any key) with ``source``."""
    should = [{"constant_score": {"filter": {"term": {f"{FIELD}.super": v}}, "boost": 1.0}}
              for v in source.get("super", [])]
    query: dict[str, Any] = {"filter": [{"term": {f"{FIELD}.v": version}}],
                             "should": should, "minimum_should_match": 1}
    if exclude_id is not None:
        query["must_not"] = [{"ids": {"values": [exclude_id]}}]
    return {"bool": query}


def candidate_search(source: dict[str, Any], version: str, size: int,
                     exclude_id: str | None = None) -> dict[str, Any]:
    """The body of a candidate search (for ``search`` or one entry of ``msearch``)."""
    return {"query": candidate_query(source, version, exclude_id), "size": size,
            "_source": [FIELD], "track_total_hits": False}


def candidates_from_hits(hits: Iterable[dict[str, Any]]) -> list[tuple[str, str, Fingerprint]]:
    """``(index, id, fingerprint)`` of hits whose stored fingerprint parses (others are ignored)."""
    found = []
    for hit in hits:
        stored = (hit.get("_source") or {}).get(FIELD)
        if not isinstance(stored, dict):
            continue
        try:
            found.append((hit.get("_index", ""), hit["_id"], Fingerprint.from_source(stored)))
        except FingerprintFormatError:
            continue
    return found


# --- candidates among the documents of this run ---------------------------------------------------

@dataclass
class RunIndex:
    """Fingerprints of the documents loaded so far in one run, by supershingle and megashingle."""

    ids: list[str] = field(default_factory=list)
    fingerprints: list[Fingerprint] = field(default_factory=list)
    by_key: dict[tuple[int, int], list[int]] = field(default_factory=dict)

    def add(self, doc_id: str, fingerprint: Fingerprint) -> None:
        position = len(self.ids)
        self.ids.append(doc_id)
        self.fingerprints.append(fingerprint)
        for key in fingerprint_keys(fingerprint):
            self.by_key.setdefault(key, []).append(position)

    def candidates(self, fingerprint: Fingerprint) -> list[tuple[str, str, Fingerprint]]:
        positions: set[int] = set()
        for key in fingerprint_keys(fingerprint):
            positions.update(self.by_key.get(key, ()))
        return [("", self.ids[p], self.fingerprints[p]) for p in sorted(positions)]
