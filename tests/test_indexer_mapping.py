"""The ``neardup`` mapping a new index gets (``super`` without doc values, ``mega`` neither
indexed nor with doc values), indices mapped the earlier way, and the candidate query on both."""

from __future__ import annotations

import json
from typing import Any

import pytest

from neardup.fingerprint import FIELD, Fingerprinter, FingerprintParams, es_mapping
from neardup.fingerprint.matching import candidate_query
from neardup.indexer.errors import EXIT_OK
from neardup.indexer.mapping import mapping_conflicts, missing_properties, wanted_properties
from tests.plugins.corpora import run_neardup
from tests.test_indexer_es import all_docs, index_cmd, new_index, stderr  # noqa: F401 - new_index: the fixture
from tests.test_indexer_unit import full

pytestmark = pytest.mark.timeout(300)

#: ``super`` and ``mega`` as neardup mapped them before.
EARLIER = {"super": {"type": "keyword"}, "mega": {"type": "keyword"}}


def earlier_mapping() -> dict[str, Any]:
    mappings = es_mapping()
    mappings["properties"][FIELD]["properties"].update(EARLIER)
    return mappings


# --- without a cluster ---------------------------------------------------------------------------

def test_a_new_mapping_indexes_supershingles_without_doc_values_and_megashingles_not_at_all():
    wanted = wanted_properties()
    assert wanted["super"] == {"type": "keyword", "doc_values": False}
    assert wanted["mega"] == {"type": "keyword", "index": False, "doc_values": False}


def test_the_candidate_query_asks_for_supershingles_only():
    fingerprint = Fingerprinter(FingerprintParams()).fingerprint(
        "Crude oil prices rose sharply on Monday after the producers agreed to cut output")
    source = fingerprint.to_source()
    query = json.dumps(candidate_query(source, source["v"]))
    assert all(value in query for value in source["super"])
    assert f"{FIELD}.mega" not in query and not any(f"{int(v):016x}" in query for v in fingerprint.megashingles)


@pytest.mark.parametrize("super_, mega", [
    (full("keyword"), full("keyword")),                                        # mapped the earlier way
    (full("keyword", doc_values=False), full("keyword", index=False, doc_values=False)),
    (full("keyword"), full("keyword", index=False)),
])
def test_earlier_and_current_mappings_are_no_conflict(super_, mega):
    wanted = wanted_properties()
    fields = {"i": {"neardup.v": full("keyword"), "neardup.sig": full("binary"), "neardup.n": full("integer"),
                    "neardup.super": super_, "neardup.mega": mega}}
    roots = {"i": {"properties": {FIELD: {"properties": {}}}}}
    assert mapping_conflicts(roots, fields, wanted) == []
    assert missing_properties(fields, roots, wanted) == {}


def test_supershingles_must_stay_indexed():
    fields = {"i": {"neardup.super": full("keyword", index=False, doc_values=False)}}
    problems = mapping_conflicts({"i": {"properties": {}}}, fields, wanted_properties())
    assert problems == ["i: neardup.super is not indexed; neardup looks its values up"]


# --- on the cluster ------------------------------------------------------------------------------

def near_duplicate_docs(reuters_docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Forty stories and, for the first ten, a copy with its last sentence dropped."""
    docs = [dict(d) for d in reuters_docs[:40] if len(d.get("body", "").split()) > 80][:30]
    copies = [{**d, "id": f"{d['id']}-copy", "body": d["body"].rsplit(".", 2)[0]} for d in docs[:10]]
    return docs + copies


def neardup_mapping(es: Any, index: str) -> dict[str, Any]:
    return es.indices.get_mapping(index=index)[index]["mappings"]["properties"][FIELD]["properties"]


def duplicates_of(es_url: str, index: str, doc_id: str) -> list[tuple[str, float]]:
    result = run_neardup(["duplicates", "--index", index, "--id", doc_id, "--threshold", "0.5", "--json"], es_url)
    assert result.returncode == 0, stderr(result)
    answer = json.loads(result.stdout)
    return [(d["_id"], d["similarity"]) for d in answer["duplicates"]]


def test_earlier_mapped_index_is_enriched_and_found_like_a_new_one(es, es_url, new_index, reuters_docs):
    docs = near_duplicate_docs(reuters_docs)
    text = {"title": {"type": "text"}, "body": {"type": "text"}}
    fresh = new_index(docs, mappings={"properties": text})
    earlier = new_index(docs, mappings={"properties": {**text, **earlier_mapping()["properties"]}})
    for name in (fresh, earlier):
        result, summary = index_cmd(es_url, name)
        assert result.returncode == EXIT_OK, stderr(result)
        assert summary["updated"] == len(docs) and summary["failed"] == 0
    assert neardup_mapping(es, fresh)["super"] == {"type": "keyword", "doc_values": False}
    assert neardup_mapping(es, fresh)["mega"] == {"type": "keyword", "index": False, "doc_values": False}
    assert {k: neardup_mapping(es, earlier)[k] for k in EARLIER} == EARLIER  # left as it was
    stored = {name: {i: h["_source"][FIELD] for i, h in all_docs(es, name).items()} for name in (fresh, earlier)}
    assert stored[fresh] == stored[earlier]
    for doc in docs[:10]:
        found = duplicates_of(es_url, fresh, doc["id"])
        assert f"{doc['id']}-copy" in [doc_id for doc_id, _ in found]
        assert found == duplicates_of(es_url, earlier, doc["id"])
