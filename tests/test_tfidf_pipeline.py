"""The TF-IDF pipeline end to end against the real Elasticsearch: ``neardup index`` (2 workers) and
``neardup load`` write ``neardup.tf`` and keep exact document frequencies in the statistics index
over several batches without counting a document twice; the proxy's ``neardup_mode=tfidf`` folds a
word-reordered rewrite that resemblance does not; a bad mode is a 400 naming the parameter."""

from __future__ import annotations

import itertools
import json
import random
import re
import uuid
from typing import Any

import numpy as np
import pytest

from neardup.config import Config
from neardup.corpora import reuters_documents
from neardup.fingerprint import FIELD, Fingerprinter
from neardup.fingerprint.tfidf import CorpusStats, TfidfVector, cosine
from neardup.indexer.client import display_url, make_client
from neardup.indexer.job import IndexOptions, run_job
from neardup.indexer.mapping import wanted_properties
from neardup.indexer.progress import Progress
from neardup.indexer.retry import Retrier
from neardup.indexer.tfidf_stats import StatsStore, stats_index_name
from neardup.indexer.tfidf_vectors import tf_properties
from neardup.tfidf_config import weigher_from_config
from tests.engine_support import bulk_load, create_index, delete_index, msearch
from tests.engine_support import search as search_index
from tests.plugins.corpora import run_neardup
from tests.plugins.elasticsearch import engine_client
from tests.test_proxy_support import ProxyThread, make_config

pytestmark = pytest.mark.es

FIELDS = ("title", "body")


@pytest.fixture(scope="module")
def stories() -> list[dict[str, Any]]:
    """80 Reuters stories with a body of at least 60 words, as plain documents."""
    docs = (d for d in reuters_documents(with_body_only=True) if len((d.get("body") or "").split()) >= 60)
    return [{"id": d["id"], "title": d.get("title") or "", "body": d["body"], "rank": k}
            for k, d in enumerate(itertools.islice(docs, 80))]


@pytest.fixture
def index_name(es: Any):
    name = f"tfidf-pipe-{uuid.uuid4().hex[:10]}"
    yield name
    delete_index(es, name)
    delete_index(es, stats_index_name("neardup-tfidf-{index}", name), expand_wildcards="all")


def tfidf_config(es_url: str, **tfidf: Any) -> Config:
    return make_config(es_url, tfidf={"enabled": True, **tfidf})


def expected_stats(config: Config, docs: list[dict[str, Any]]) -> CorpusStats:
    weigher = weigher_from_config(config)
    return CorpusStats.of(weigher.counts("\n".join(d[f] for f in FIELDS if d[f])).terms for d in docs)


def stored_stats(config: Config, index: str) -> CorpusStats:
    client = make_client(config.upstream)
    try:
        store = StatsStore(client, Retrier(display_url(config.upstream), 2),
                           stats_index_name(config.tfidf.stats_index, index),
                           weigher_from_config(config).version, config.tfidf.stats_parts)
        return store.read()
    finally:
        client.close()


def bulk(es: Any, index: str, docs: list[dict[str, Any]]) -> None:
    bulk_load(es, index, docs)


def enrich(config: Config, index: str, *, force: bool = False) -> None:
    import io

    result = run_job(config, IndexOptions(index=index, fields=FIELDS, workers=2, batch_size=7, force=force),
                     progress=Progress.for_stream(io.StringIO(), index))
    assert not result.stopped and not result.stats.failed, result.stopped


def assert_same_stats(found: CorpusStats, expected: CorpusStats) -> None:
    assert found.doc_count == expected.doc_count
    assert np.array_equal(found.terms, expected.terms)
    assert np.array_equal(found.df, expected.df)


def vectors(es: Any, index: str) -> dict[str, TfidfVector]:
    es.indices.refresh(index=index)
    hits = search_index(es, index, size=1000, _source=[f"{FIELD}.tf"])["hits"]["hits"]
    return {h["_id"]: TfidfVector.from_source(h["_source"][FIELD]["tf"]) for h in hits}


# -- the indexer ------------------------------------------------------------------------------

def test_index_two_batches_counts_exactly_and_force_does_not_count_again(es, es_url, stories, index_name):
    config = tfidf_config(es_url)
    version = weigher_from_config(config).version
    create_index(es, index_name)
    bulk(es, index_name, stories[:40])
    enrich(config, index_name)
    assert_same_stats(stored_stats(config, index_name), expected_stats(config, stories[:40]))
    first = vectors(es, index_name)
    assert len(first) == 40 and {v.version for v in first.values()} == {version}
    assert all(0 < len(v) <= config.tfidf.top_k for v in first.values())

    bulk(es, index_name, stories[40:])   # a second batch: only the new documents are read
    enrich(config, index_name)
    final = expected_stats(config, stories)
    assert_same_stats(stored_stats(config, index_name), final)
    second = vectors(es, index_name)
    assert len(second) == 80
    assert all(second[k] == first[k] for k in first)   # not re-read, not re-weighted

    enrich(config, index_name, force=True)   # re-weights every vector, counts nothing again
    assert_same_stats(stored_stats(config, index_name), final)
    weigher = weigher_from_config(config)
    reweighted = vectors(es, index_name)
    for doc in stories:   # under unchanged statistics, exactly the vector of the final statistics
        counts = weigher.counts("\n".join(doc[f] for f in FIELDS if doc[f]))
        assert reweighted[doc["id"]] == weigher.vector(counts, final)

    settings = es.indices.get_settings(index=stats_index_name(config.tfidf.stats_index, index_name),
                                       expand_wildcards="all")
    assert next(iter(settings.values()))["settings"]["index"]["hidden"] == "true"
    mapping = es.indices.get_mapping(index=index_name)[index_name]["mappings"]["properties"][FIELD]
    assert mapping["properties"]["tf"]["properties"]["v"]["type"] == "keyword"
    assert mapping["properties"]["tf"]["properties"]["t"]["type"] == "binary"


def test_statistics_of_another_version_are_kept_apart(es, es_url, stories, index_name):
    create_index(es, index_name)
    bulk(es, index_name, stories[:12])
    enrich(tfidf_config(es_url), index_name)
    other = tfidf_config(es_url, top_k=16)   # another version: every document counted afresh
    enrich(other, index_name)
    assert_same_stats(stored_stats(other, index_name), expected_stats(other, stories[:12]))
    assert_same_stats(stored_stats(tfidf_config(es_url), index_name), expected_stats(other, stories[:12]))
    assert {len(v) <= 16 for v in vectors(es, index_name).values()} == {True}


def test_load_in_chunks_and_again_counts_each_document_once(es, es_url, stories, index_name, tmp_path):
    config = tfidf_config(es_url)
    file = tmp_path / "docs.jsonl"
    file.write_text("".join(json.dumps(d) + "\n" for d in stories[:25]), encoding="utf-8")
    for _ in range(2):   # the second load replaces the same ids: nothing is counted again
        done = run_neardup(["load", "--index", index_name, "--batch-size", "6", "--refresh", "--json", str(file)],
                           es_url, NEARDUP_TFIDF__ENABLED="true")
        assert done.returncode == 0, done.stderr.decode()
        assert json.loads(done.stdout)["loaded"] == 25
    assert_same_stats(stored_stats(config, index_name), expected_stats(config, stories[:25]))
    assert len(vectors(es, index_name)) == 25


# -- the proxy --------------------------------------------------------------------------------

def reorder_words(text: str, rng: random.Random) -> str:
    """Every sentence with its words shuffled, and the sentences in reverse order."""
    sentences = [s.split() for s in re.split(r"(?<=[.!?])\s+", text) if s.strip()]
    for words in sentences:
        rng.shuffle(words)
    return " ".join(" ".join(words) for words in reversed(sentences))


@pytest.fixture
def rewrite_index(es, es_url, stories, index_name):
    """Stories 0–29, and a word-reordered rewrite of story 3 ranked right after it (rank 4)."""
    source = stories[3]
    rewrite = {"id": "rewrite", "title": source["title"], "body": reorder_words(source["body"], random.Random(7)),
               "rank": 4}
    docs = [dict(d, rank=d["rank"] if d["rank"] <= 3 else d["rank"] + 1) for d in stories[:30]] + [rewrite]
    create_index(es, index_name, mappings={"properties": {"rank": {"type": "integer"}}})
    bulk(es, index_name, docs)
    enrich(tfidf_config(es_url), index_name)
    es.indices.refresh(index=index_name)
    return index_name, source["id"]


def search(proxy: ProxyThread, index: str, query: str = "", headers: dict[str, str] | None = None,
           **body: Any) -> tuple[int, Any]:
    import urllib.error
    import urllib.request

    payload = {"query": {"match_all": {}}, "sort": [{"rank": "asc"}], "size": 10, **body}
    request = urllib.request.Request(f"{proxy.url}/{index}/_search" + (f"?{query}" if query else ""),
                                     data=json.dumps(payload).encode(), method="POST",
                                     headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def folded(response: dict[str, Any]) -> dict[str, list[str]]:
    return {h["_id"]: [m["_id"] for m in h["inner_hits"]["neardup"]["hits"]["hits"]]
            for h in response["hits"]["hits"] if h["inner_hits"]["neardup"]["hits"]["hits"]}


def test_tfidf_mode_folds_a_reordered_rewrite_that_resemblance_does_not(es, es_url, engine, rewrite_index):
    index, original = rewrite_index
    fp = Fingerprinter(make_config(es_url).fingerprint)
    docs = {h["_id"]: h["_source"] for h in search_index(es, index, size=100)["hits"]["hits"]}
    from neardup.fingerprint import Fingerprint, estimated_resemblance
    resemblance = estimated_resemblance(Fingerprint.from_source(docs[original][FIELD]),
                                        Fingerprint.from_source(docs["rewrite"][FIELD]))
    stored_cosine = cosine(TfidfVector.from_source(docs[original][FIELD]["tf"]),
                           TfidfVector.from_source(docs["rewrite"][FIELD]["tf"]))
    assert resemblance < 0.5 and stored_cosine >= 0.9, (resemblance, stored_cosine)
    assert fp.version == docs[original][FIELD]["v"]

    with ProxyThread(tfidf_config(es_url)) as proxy:
        status, by_resemblance = search(proxy, index, "neardup_mode=resemblance")
        assert status == 200 and original not in folded(by_resemblance)
        assert "rewrite" in [h["_id"] for h in by_resemblance["hits"]["hits"]]

        status, by_tfidf = search(proxy, index, "neardup_mode=tfidf")
        assert status == 200, by_tfidf
        assert folded(by_tfidf).get(original) == ["rewrite"]
        assert by_tfidf["neardup"]["mode"] == "tfidf" and by_tfidf["neardup"]["threshold"] == 0.7
        assert by_tfidf["neardup"]["fingerprinted"] == by_tfidf["neardup"]["window"] > 10   # every hit has a vector
        kept = next(h for h in by_tfidf["hits"]["hits"] if h["_id"] == original)
        member = kept["inner_hits"]["neardup"]["hits"]["hits"][0]
        assert member["fields"]["neardup.similarity"] == [round(stored_cosine, 4)]
        # 10 groups on the page: the rewrite's place is taken by the next story
        assert len(by_tfidf["hits"]["hits"]) == 10 and "rewrite" not in [h["_id"] for h in by_tfidf["hits"]["hits"]]

        # the fields channel (no _source): the vector is fetched as fields and removed again
        status, by_fields = search(proxy, index, headers={"X-Neardup-Mode": "tfidf"}, _source=False)
        assert status == 200 and folded(by_fields).get(original) == ["rewrite"]
        assert all(not any(k.startswith("neardup.tf") for k in h.get("fields", {}))
                   for h in by_fields["hits"]["hits"])

        # _msearch: each search in tfidf mode
        client = engine_client(proxy.url, engine)
        try:
            multi = msearch(client, [{"index": index}, {"query": {"match_all": {}}, "sort": [{"rank": "asc"}], "size": 10}],
                            headers={"X-Neardup-Mode": "tfidf"})
        finally:
            client.close()
        assert folded(multi["responses"][0]).get(original) == ["rewrite"]

        # a threshold above the rewrite's cosine keeps it apart
        status, strict = search(proxy, index, "neardup_mode=tfidf&neardup_threshold=1")
        assert status == 200 and (stored_cosine == 1.0 or original not in folded(strict))


@pytest.mark.parametrize(("query", "headers", "named"), [
    ("neardup_mode=cosine", {}, "neardup_mode"),
    ("", {"X-Neardup-Mode": "tf-idf"}, "X-Neardup-Mode"),
])
def test_bad_mode_is_a_400_naming_the_parameter(es_url, query, headers, named):
    with ProxyThread(tfidf_config(es_url)) as proxy:
        status, body = search(proxy, "any-index", query, headers)
    assert status == 400
    assert body["error"]["type"] == "illegal_argument_exception"
    assert f"[{named}]" in body["error"]["reason"]
    assert "tfidf" in body["error"]["reason"]
    assert body["status"] == 400


# -- the statistics store: concurrent writers, lost answers -------------------------------------

def random_documents(rng: np.random.Generator, count: int) -> list[np.ndarray]:
    vocabulary = rng.integers(0, 2**63, size=400, dtype=np.int64).astype(np.uint64) << np.uint64(1)
    return [np.unique(rng.choice(vocabulary, size=int(rng.integers(1, 60)))) for _ in range(count)]


def new_store(config: Config, index: str) -> StatsStore:
    client = make_client(config.upstream)
    return StatsStore(client, Retrier(display_url(config.upstream), 3), stats_index_name(config.tfidf.stats_index, index),
                      "t1-0123456789", parts=4)


def test_concurrent_writers_lose_no_increment(es_url, index_name):
    import threading

    config = tfidf_config(es_url)
    rng = np.random.default_rng(5)
    batches = [random_documents(rng, 15) for _ in range(24)]
    stores = [new_store(config, index_name) for _ in range(3)]
    stores[0].ensure_index()
    errors: list[BaseException] = []

    def writer(store: StatsStore, mine: list[list[np.ndarray]]) -> None:
        try:
            for batch in mine:
                store.add(batch)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(store, batches[k::3])) for k, store in enumerate(stores)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not errors
    expected = CorpusStats.of(doc for batch in batches for doc in batch)
    assert_same_stats(new_store(config, index_name).read(), expected)
    for store in stores:
        store.client.close()


def test_a_batch_applied_but_not_acknowledged_is_not_added_again(es_url, index_name):
    config = tfidf_config(es_url)
    store = new_store(config, index_name)
    documents = random_documents(np.random.default_rng(9), 10)
    store.add(documents)
    store.batches -= 1          # as if the answer was lost and the same batch is sent again
    store.add(documents)
    assert_same_stats(new_store(config, index_name).read(), CorpusStats.of(documents))
    store.add(documents)        # a new batch with the same documents does count
    assert new_store(config, index_name).read().doc_count == 20
    store.client.close()


def test_enrich_with_index_counts_lines_once_and_index_then_finds_them_current(es, es_url, stories, index_name):
    config = tfidf_config(es_url)
    lines = "".join(json.dumps(d) + "\n" for d in stories[:15]).encode()
    done = run_neardup(["enrich", "--index", index_name], es_url, input=lines, NEARDUP_TFIDF__ENABLED="true",
                       NEARDUP_INDEXER__BATCH_SIZE="4")
    assert done.returncode == 0, done.stderr.decode()
    enriched = [json.loads(line) for line in done.stdout.decode().splitlines()]
    assert len(enriched) == 15 and all(TfidfVector.from_source(d[FIELD]["tf"]) for d in enriched)
    again = run_neardup(["enrich", "--index", index_name], es_url, input=done.stdout, NEARDUP_TFIDF__ENABLED="true")
    assert again.returncode == 0, again.stderr.decode()   # lines that carry a vector are not counted again
    assert_same_stats(stored_stats(config, index_name), expected_stats(config, stories[:15]))

    create_index(es, index_name, mappings={"properties": {FIELD: {"properties": {
        **wanted_properties(), **tf_properties()}}}})
    bulk(es, index_name, enriched)
    enrich(config, index_name)   # every document is current: nothing read, nothing counted
    assert_same_stats(stored_stats(config, index_name), expected_stats(config, stories[:15]))

    without = run_neardup(["enrich"], es_url, input=lines, NEARDUP_TFIDF__ENABLED="true")
    assert without.returncode == 0 and b"without --index" in without.stderr
    assert all("tf" not in json.loads(line)[FIELD] for line in without.stdout.decode().splitlines())
