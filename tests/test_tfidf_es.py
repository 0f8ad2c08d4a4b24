"""The stored TF-IDF vector against the real Elasticsearch: its mapping is accepted next to the
fingerprint's, a document carrying both round-trips bit for bit through ``_source``, and the
statistics blob survives a binary field."""

from __future__ import annotations

import base64
import uuid

import pytest

from neardup.fingerprint import FIELD, Fingerprinter, es_mapping
from neardup.fingerprint.tfidf import CorpusStats, TfidfVector, TfidfWeigher, cosine, tf_mapping
from tests.engine_support import count, create_index, index_document

pytestmark = pytest.mark.es

TEXTS = [
    "Президент США заявил, что санкции против Ирана будут усилены уже в следующем месяце.",
    "Санкции против Ирана будут усилены уже в следующем месяце, заявил президент США.",
    "Футбольный клуб «Спартак» обыграл «Зенит» в матче чемпионата России.",
]


@pytest.fixture
def index(es):
    name = f"sim-engines-tf-{uuid.uuid4().hex[:10]}"
    mapping = es_mapping()
    mapping["properties"][FIELD]["properties"].update(tf_mapping())
    mapping["properties"]["stats"] = {"type": "binary"}
    create_index(es, name, mappings=mapping)
    yield name
    es.indices.delete(index=name, ignore_unavailable=True)


def test_vectors_round_trip_through_elasticsearch(es, index):
    fp = Fingerprinter()
    weigher = TfidfWeigher(fp)
    vectors = weigher.vectors(TEXTS)
    for k, (text, vector) in enumerate(zip(TEXTS, vectors)):
        stored = {**fp.fingerprint(text).to_source(), "tf": vector.to_source()}
        index_document(es, index, str(k), {"body": text, FIELD: stored}, refresh=k == len(TEXTS) - 1)
    mapping = es.indices.get_mapping(index=index)[index]["mappings"]["properties"][FIELD]["properties"]["tf"]
    assert mapping["properties"]["v"] == {"type": "keyword"}
    assert mapping["properties"]["t"]["type"] == "binary"
    back = [TfidfVector.from_source(es.get(index=index, id=str(k))["_source"][FIELD]["tf"]) for k in range(3)]
    assert back == vectors
    assert cosine(back[0], back[1]) == cosine(vectors[0], vectors[1]) > 0.99
    assert cosine(back[0], back[2]) == 0.0
    # stale vectors can be found by their version keyword
    found = count(es, index, {"term": {f"{FIELD}.tf.v": weigher.version}})
    assert found == 3


def test_statistics_blob_round_trips_through_a_binary_field(es, index):
    weigher = TfidfWeigher(Fingerprinter())
    stats = CorpusStats.of(weigher.counts(t).terms for t in TEXTS)
    for part, piece in enumerate(stats.partition(2)):
        index_document(es, index, f"stats-{part}", {"stats": base64.b64encode(piece.to_bytes()).decode()})
    parts = [CorpusStats.from_bytes(base64.b64decode(es.get(index=index, id=f"stats-{p}")["_source"]["stats"]))
             for p in range(4)]
    assert CorpusStats.join(parts) == stats
