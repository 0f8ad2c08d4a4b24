"""All of Reuters-21578 enriched by ``neardup index`` in the real cluster (shared fixture)."""

from __future__ import annotations

import json
from multiprocessing import get_context
from typing import Any

import pytest

from neardup.fingerprint import FIELD, Fingerprinter, FingerprintParams
from neardup.indexer.cluster.seeds import SeedPlan
from tests.engine_support import scan

pytestmark = [pytest.mark.timeout(1800), pytest.mark.slow]

FIELDS = ("title", "body")


def without_neardup(source: dict[str, Any]) -> str:
    """Order-sensitive JSON of a ``_source`` minus ``neardup``: equal strings, equal documents."""
    return json.dumps({k: v for k, v in source.items() if k != FIELD}, ensure_ascii=False)


_FINGERPRINTER: Fingerprinter | None = None


def _expected(texts: tuple[str, ...]) -> dict[str, Any] | None:
    """What fingerprint/ computes for the texts (None: no text, so no fingerprint)."""
    global _FINGERPRINTER
    if not any(t.strip() for t in texts):
        return None
    _FINGERPRINTER = _FINGERPRINTER or Fingerprinter(FingerprintParams())
    return _FINGERPRINTER.fingerprint_fields(list(texts)).to_source()


def test_every_story_is_fingerprinted_and_otherwise_unchanged(es: Any, reuters_index: str,
                                                               reuters_index_summary: dict[str, Any],
                                                               reuters_docs: list[dict[str, Any]]):
    stored = {hit["_id"]: hit["_source"] for hit in scan(es, reuters_index, {"query": {"match_all": {}}}, size=2000)}
    assert len(stored) == len(reuters_docs) == 21578

    changed = [d["id"] for d in reuters_docs if without_neardup(stored[d["id"]]) != without_neardup(d)]
    assert changed == [], f"{len(changed)} documents changed outside neardup, e.g. {changed[:5]}"

    with get_context("fork").Pool(2) as pool:
        expected = pool.map(_expected, [tuple(d[f] for f in FIELDS) for d in reuters_docs], chunksize=500)
    # with the cluster seed `neardup index` writes while the index was never clustered
    # (indexer.cluster.seeds: cluster = the _id, bands = the LSH keys of the default threshold)
    plan = SeedPlan.for_target(reuters_index, 0.8, FingerprintParams(), [reuters_index])
    seeds = plan.values([(reuters_index, d["id"], want or {}) for d, want in zip(reuters_docs, expected)])
    expected = [None if want is None else {**want, **seed} for want, seed in zip(expected, seeds)]
    wrong = [d["id"] for d, want in zip(reuters_docs, expected) if stored[d["id"]].get(FIELD) != want]
    assert wrong == [], f"{len(wrong)} fingerprints differ from fingerprint/, e.g. {wrong[:5]}"

    with_text = sum(1 for want in expected if want is not None)
    summary = reuters_index_summary
    assert summary["read"] == 21578 and summary["skipped_current"] == 0
    assert summary["updated"] == with_text
    assert summary["skipped_empty"] + summary["skipped_no_field"] == 21578 - with_text
    assert summary["failed"] == 0 and summary["conflicts_retried"] == 0
