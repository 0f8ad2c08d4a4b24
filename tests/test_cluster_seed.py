"""Cluster seeds: the indexer writes the values a singleton gets, the first cluster run writes
only what really changes, and no document stands for "clustered" unless a run saw it.

See :mod:`indexer.cluster.seeds` for the protocol. The races are simulated by putting
``_meta.neardup_clusters`` (what a starting ``neardup cluster`` does) between a seeded bulk
request and the check that follows its acknowledgement.
"""

from __future__ import annotations

import io
import itertools
import json
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import closing
from typing import Any

import numpy as np
import pytest

from neardup.config import Config, load_config
from neardup.corpora import reuters_documents
from neardup.fingerprint import FIELD, Fingerprinter, FingerprintParams
from neardup.indexer.client import Client, make_client
from neardup.indexer.cluster import job as cluster_job
from neardup.indexer.cluster import options as cluster_options
from neardup.indexer.cluster import run as cluster_run
from neardup.indexer.cluster.documents import DocTable, band_strings
from neardup.indexer.cluster.options import ClusterOptions, cluster_params
from neardup.indexer.cluster.run import run_cluster
from neardup.indexer.cluster.seeds import META_KEY, Seeder, SeedPlan, seed_plan
from neardup.indexer.errors import ClusterTimeout
from neardup.indexer.job import fingerprint_function
from neardup.indexer.load import Loader, LoadOptions
from neardup.indexer.progress import Progress
from neardup.indexer.query import SliceSpec
from neardup.indexer.reader import SliceReader
from neardup.indexer.retry import Retrier
from neardup.indexer.stats import JobStats
from neardup.indexer.writer import BulkUpdater
from neardup.proxy.handlers.native_collapse import missing_clusters_query
from tests.cluster_support import bulk, indexer_client, mappings, scan_hits
from tests.engine_support import delete_index
from tests.plugins.corpora import neardup_json
from tests.test_cluster_es import copy_index

PARAMS = FingerprintParams()
FP = Fingerprinter(PARAMS)
FIELDS = ["title", "body"]
THRESHOLD = 0.8


def stories(count: int) -> list[dict[str, Any]]:
    """``count`` real stories, then near-copies of the first three (one word changed)."""
    found = list(itertools.islice((d for d in reuters_documents(with_body_only=True)
                                   if len(d["body"].split()) >= 200), count))
    docs = [{"id": f"s{k:02d}", "title": s["title"], "body": s["body"]} for k, s in enumerate(found)]
    for k in range(3):
        words = docs[k]["body"].split()
        words[-10] = "zyxwv"
        docs.append({"id": f"s{k:02d}-copy", "title": docs[k]["title"], "body": " ".join(words)})
    return docs


# --- pure ------------------------------------------------------------------------------------------

def test_a_seed_is_what_a_full_run_gives_a_singleton():
    plan = SeedPlan.for_target("news", THRESHOLD, PARAMS, ["news"])
    # the banding the cluster job uses by default for that threshold
    assert plan.banding == cluster_params(ClusterOptions(index="news", threshold=THRESHOLD), PARAMS).banding
    docs = stories(6)
    values = [FP.fingerprint_fields([d["title"], d["body"]]).to_source() for d in docs]
    values.append(FP.fingerprint_fields(["the of and"]).to_source())  # no words left: n = 0
    ids = [d["id"] for d in docs] + ["empty"]
    seeds = plan.values([("news", i, v) for i, v in zip(ids, values)])
    table = DocTable(PARAMS.num_perm)
    for i, v in zip(ids, values):
        table.add_hit({"_index": "news", "_id": i, "_source": {FIELD: v}}, FP.version)
    expected = band_strings(plan.banding, table)
    assert values[-1]["n"] == 0 and expected[-1] == ()
    for seed, doc_id, keys in zip(seeds, ids, expected):
        assert seed == {"cluster": doc_id, "bands": list(keys)}
    assert len(seeds[0]["bands"]) == plan.banding.key_count


def test_seeds_name_documents_as_the_cluster_job_does_and_skip_other_schemes():
    value = FP.fingerprint_fields(["Crude oil prices rose sharply after the cartel cut output"]).to_source()
    several = SeedPlan.for_target("news-*", THRESHOLD, PARAMS, ["news-1", "news-2"])
    assert several.values([("news-2", "7", value)])[0]["cluster"] == "news-2/7"
    assert several.values([("news-2", "7", {**value, "v": "0-other"})]) == [None]
    assert several.values([("news-2", "7", {**value, "sig": "???"})]) == [None]


def test_no_seeds_once_the_index_has_clusters():
    assert seed_plan("news", THRESHOLD, PARAMS, {"news": {}}) is not None
    assert seed_plan("news", THRESHOLD, PARAMS, {"news": {"_meta": {"other": 1}}}) is not None
    for state in ("building", "ready"):
        clustered = {"news": {}, "news-2": {"_meta": {META_KEY: {"state": state}}}}
        assert seed_plan("news*", THRESHOLD, PARAMS, clustered) is None


# --- real Elasticsearch ------------------------------------------------------------------------------

@pytest.fixture
def new_index(es: Any) -> Iterator[Callable[..., str]]:
    names: list[str] = []

    def make(docs: list[dict[str, Any]] | None = None) -> str:
        name = f"cluster-seed-{uuid.uuid4().hex[:8]}"
        names.append(name)
        es.indices.create(index=name, body={"settings": {"number_of_shards": 2, "number_of_replicas": 0}})
        if docs:
            bulk(es, ({"_index": name, "_id": d["id"], "_source": d} for d in docs), refresh=True)
        return name

    yield make
    for name in names:
        delete_index(es, name)


@pytest.fixture
def config(es_url: str) -> Config:
    return load_config(environ={"NEARDUP_UPSTREAM__URLS": es_url})


@pytest.fixture
def client(config: Config) -> Iterator[Client]:
    """The indexer's own client (its retries and timeouts), closed after the test."""
    made = make_client(config.upstream)
    yield made
    made.close()


def values(es: Any, index: str) -> dict[str, dict[str, Any]]:
    return {hit["_id"]: hit["_source"].get(FIELD) or {} for hit in scan_hits(es, index, _source=[FIELD])}


def index_with_cluster_fields(es: Any, new_index: Callable[..., str], docs: list[dict[str, Any]]) -> str:
    """A new index holding ``docs``, with ``neardup.cluster``/``bands`` mapped as the seeds need."""
    index = new_index(docs)
    es.indices.put_mapping(index=index, body={"properties": {FIELD: {"properties": {
        "cluster": {"type": "keyword"}, "bands": {"type": "keyword"}}}}})
    return index


def seeded_updater(client: Any, retrier: Retrier, index: str) -> tuple[Seeder, BulkUpdater, JobStats]:
    """The indexer's bulk updater writing fingerprints and seeds of ``index`` through ``client``
    (a real client, or one that interposes on its bulk requests)."""
    stats = JobStats()
    seeder = Seeder(client, retrier, SeedPlan.for_target(index, THRESHOLD, PARAMS, [index]), 3, stats.failures)
    return seeder, BulkUpdater(client, retrier, fingerprint_function(FIELDS, FP), FIELDS, 3, stats, seeder), stats


def put_clusters_meta(es: Any, index: str, state: str = "building") -> None:
    es.indices.put_mapping(index=index, body={"_meta": {META_KEY: {"state": state}}})


@pytest.mark.es
@pytest.mark.parametrize("mode", ["memory", "aggregate"])
def test_index_writes_seeds_and_the_first_run_writes_only_the_joining_members(es, es_url, new_index, mode):
    docs = stories(30)
    index = new_index(docs)
    neardup_json(es, es_url, "index", "--index", index)
    seeded = values(es, index)
    mapping = mappings(es, index)["properties"][FIELD]["properties"]
    assert mapping["cluster"] == mapping["bands"] == {"type": "keyword"}
    assert all(v["cluster"] == doc_id and len(v["bands"]) > 0 for doc_id, v in seeded.items())
    # a document without a seed (fingerprinted by another program, say) whose key is the smallest
    # of its cluster: the cluster's id is still its key, as without seeds
    es.update(index=index, id="s00", body={"doc": {FIELD: {"cluster": None, "bands": None}}}, refresh=True)

    plain = f"{index}-plain"
    try:
        copy_index(es, index, plain)  # fingerprints, but neither seeds nor cluster mapping
        reference = neardup_json(es, es_url, "cluster", "--index", plain, "--threshold", str(THRESHOLD), "--mode", mode)
        summary = neardup_json(es, es_url, "cluster", "--index", index, "--threshold", str(THRESHOLD), "--mode", mode)
        want = {k: v["cluster"] for k, v in values(es, plain).items()}
        got = values(es, index)
        assert {k: v["cluster"] for k, v in got.items()} == want  # the same ids as without seeds
        assert {k: v["bands"] for k, v in got.items()} == {k: v["bands"] for k, v in values(es, plain).items()}
        joined = sum(1 for k, c in want.items() if c != k)
        assert joined >= 3 and want["s00-copy"] == "s00"
        # only the joiners, and the document without a seed
        passes = 2 if mode == "aggregate" else 1  # aggregate writes the keys, then the ids
        assert reference["updated"] == passes * len(docs) and summary["updated"] == joined + passes
        assert summary["failed"] == 0 and summary["clusters"] == reference["clusters"]
        meta = mappings(es, index)["_meta"][META_KEY]
        assert meta["state"] == "ready"
    finally:
        delete_index(es, plain)

    # once clustered, a new document gets no seed: it is "new" until an incremental run places it
    es.index(index=index, id="late", body={"id": "late", "title": docs[5]["title"], "body": docs[5]["body"]},
             refresh=True)
    neardup_json(es, es_url, "index", "--index", index)
    assert "cluster" not in values(es, index)["late"]
    assert es.count(index=index, body={"query": missing_clusters_query()})["count"] == 1
    placed = neardup_json(es, es_url, "cluster", "--index", index, "--threshold", str(THRESHOLD), "--incremental")
    assert placed["new_documents"] == 1 and values(es, index)["late"]["cluster"] == "s05"


@pytest.mark.es
def test_load_writes_seeds_only_while_the_index_has_no_clusters(es, es_url, new_index, tmp_path):
    docs = stories(12)
    source = tmp_path / "docs.jsonl"
    source.write_text("".join(json.dumps(d) + "\n" for d in docs), encoding="utf-8")
    index = f"cluster-seed-{uuid.uuid4().hex[:8]}"
    try:
        loaded = neardup_json(es, es_url, "load", "--index", index, str(source))
        assert loaded["loaded"] == len(docs) and loaded["failed"] == 0
        seeded = values(es, index)
        assert all(v["cluster"] == k and v["bands"] for k, v in seeded.items())
        summary = neardup_json(es, es_url, "cluster", "--index", index, "--threshold", str(THRESHOLD))
        final = values(es, index)
        assert final["s01-copy"]["cluster"] == "s01"
        assert summary["updated"] == sum(1 for k, v in final.items() if v["cluster"] != k) >= 3
        # loaded again into the clustered index: replaced without cluster values
        neardup_json(es, es_url, "load", "--index", index, str(source))
        assert es.count(index=index, body={"query": missing_clusters_query()})["count"] == len(docs)
    finally:
        delete_index(es, index)


class Interposed:
    """The client, with ``after_first_bulk()`` run once right after the first bulk request is
    acknowledged (before the writer checks the ``_meta`` again)."""

    def __init__(self, client: Client, after_first_bulk: Callable[[], None]) -> None:
        self._client = client
        self._after = after_first_bulk
        self.bulks = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def bulk(self, **kwargs: Any) -> Any:
        response = self._client.bulk(**kwargs)
        self.bulks += 1
        if self.bulks == 1:
            self._after()
        return response


def read_hits(client: Client, index: str) -> list[dict[str, Any]]:
    reader = SliceReader(client, Retrier("test", 1), index, {"match_all": {}}, SliceSpec(), 1000, "1m",
                         FIELDS + ["neardup.v", "neardup.sig", "neardup.n", "neardup.cluster", "neardup.bands"])
    reader.open()
    try:
        return [hit for page in reader.pages() for hit in page]
    finally:
        reader.close()


@pytest.mark.es
def test_seeds_are_withdrawn_when_clusters_appear_between_the_check_and_the_acknowledgement(es, es_url, new_index,
                                                                                           client):
    docs = stories(20)
    index = index_with_cluster_fields(es, new_index, docs)
    first = [d["id"] for d in docs[:10]]

    def meanwhile() -> None:
        # another writer touches s00 (the seed stays), a cluster run "writes" s01, then a cluster
        # job starts: it records `building` and opens its point in time
        es.update(index=index, id="s00", body={"doc": {"note": 1}})
        es.update(index=index, id="s01", body={"doc": {FIELD: {"cluster": "s09"}}})
        put_clusters_meta(es, index)

    interposed = Interposed(client, meanwhile)
    seeder, updater, stats = seeded_updater(interposed, Retrier(es_url, 3), index)
    hits = {h["_id"]: h for h in read_hits(client, index)}
    updater.write([updater.pending_from_hit(hits[i]) for i in first])
    assert not seeder.seeding and seeder.checks == 1
    updater.write([updater.pending_from_hit(hits[d["id"]]) for d in docs[10:]])
    assert seeder.checks == 1  # no seeds, nothing to check
    es.indices.refresh(index=index)
    stored = values(es, index)
    assert stats.updated == len(docs) and stats.failed == 0
    assert seeder.withdrawn == 9  # all of the first request but s01
    assert stored["s01"]["cluster"] == "s09"  # a cluster run wrote it (so it saw it): left alone
    for doc_id, value in stored.items():
        assert value["v"] == FP.version
        if doc_id != "s01":
            assert value.get("cluster") is None and value.get("bands") is None, doc_id
    assert es.count(index=index, body={"query": missing_clusters_query()})["count"] == len(docs) - 1


@pytest.mark.es
def test_a_seeded_request_acknowledged_before_the_clusters_appeared_keeps_its_seeds(es, es_url, new_index, client):
    docs = stories(8)
    index = index_with_cluster_fields(es, new_index, docs)
    seeder, updater, stats = seeded_updater(client, Retrier(es_url, 3), index)
    hits = read_hits(client, index)
    updater.write([updater.pending_from_hit(h) for h in hits[:4]])
    assert seeder.seeding and seeder.checks == 1
    put_clusters_meta(es, index)  # the cluster job starts after the check: it will see them
    updater.write([updater.pending_from_hit(h) for h in hits[4:]])  # seeded, then withdrawn
    assert not seeder.seeding and seeder.withdrawn == len(hits) - 4
    es.indices.refresh(index=index)
    stored = values(es, index)
    assert sorted(k for k, v in stored.items() if v.get("cluster") == k) == sorted(h["_id"] for h in hits[:4])


@pytest.mark.es
def test_load_withdraws_its_seeds_when_clusters_appear_meanwhile(es, es_url, client):
    docs = stories(10)
    index = f"cluster-seed-{uuid.uuid4().hex[:8]}"
    try:
        interposed = Interposed(client, lambda: put_clusters_meta(es, index))
        loader = Loader(interposed, Retrier(es_url, 3), FP,  # type: ignore[arg-type]
                        LoadOptions(index=index, fields=tuple(FIELDS), batch_size=5, seed_threshold=THRESHOLD),
                        io.StringIO())
        result = loader.run(io.BytesIO("".join(json.dumps(d) + "\n" for d in docs).encode()))
        assert result.loaded == len(docs) and result.failures.total == 0
        assert loader.seeder is not None and loader.seeder.withdrawn == 5 and not loader.seeder.seeding
        es.indices.refresh(index=index)
        stored = values(es, index)
        assert all(v.get("cluster") is None and v["v"] == FP.version for v in stored.values())
        assert es.count(index=index, body={"query": missing_clusters_query()})["count"] == len(docs)
    finally:
        delete_index(es, index)


@pytest.mark.es
def test_the_cluster_job_records_building_before_it_reads(es, es_url, new_index, monkeypatch, config):
    index = new_index(stories(6))
    neardup_json(es, es_url, "index", "--index", index)
    seen: list[Any] = []
    read_table = cluster_job.Job.read_table

    def spying(job: Any, *args: Any, **kwargs: Any) -> Any:
        seen.append(mappings(es, index).get("_meta", {}).get(META_KEY, {}).get("state"))
        return read_table(job, *args, **kwargs)

    monkeypatch.setattr(cluster_job.Job, "read_table", spying)
    result = run_cluster(config, ClusterOptions(index=index, threshold=THRESHOLD, mode="memory"), progress=Progress())
    assert seen == ["building"] and result.stats.failed == 0
    assert mappings(es, index)["_meta"][META_KEY]["state"] == "ready"
    final = values(es, index)
    assert all(final[f"s0{k}-copy"]["cluster"] == final[f"s0{k}"]["cluster"] for k in range(3))
    # only the members that joined another's cluster were written; the rest kept their seeds
    assert result.stats.updated == sum(1 for k, v in final.items() if v["cluster"] != k) >= 3


def test_seeds_taken_as_previous_ids_would_give_the_same_ids_only_if_every_document_had_one():
    """Why the first full run ignores stored values (``Job.previous_ids``): read as previous ids,
    seeds on every document give the ids of no previous id, but seeds on some documents only
    would make a seeded member's key win over a smaller unseeded one."""
    from neardup.fingerprint.clustering import assign_ids

    rng = np.random.default_rng(7)
    differs = 0
    for _ in range(200):
        n = int(rng.integers(1, 40))
        keys = [f"k{v}" for v in rng.permutation(1000)[:n]]
        labels = rng.integers(0, max(1, n // 3), size=n)
        want = assign_ids(keys, labels, [None] * n)
        assert assign_ids(keys, labels, list(keys)) == want
        partly = [k if rng.random() < 0.5 else None for k in keys]
        differs += assign_ids(keys, labels, partly) != want
    assert differs > 0


class Scripted:
    """The client, whose bulk requests are answered by ``script`` (attempt number, operations,
    real client, keyword arguments) instead of sent as they are."""

    def __init__(self, client: Client, script: Callable[[int, list[Any], Client, dict[str, Any]], Any]):
        self._client = client
        self._script = script
        self.bulks = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def bulk(self, *, operations: list[Any], **kwargs: Any) -> Any:
        self.bulks += 1
        return self._script(self.bulks, operations, self._client, kwargs)


def first_attempt_times_out(es: Any, index: str, real: Client, operations: list[Any],
                            kwargs: dict[str, Any]) -> None:
    """A cluster run starts (``building`` recorded, refresh), then the first action of the bulk
    request is applied and the client times out: :class:`Retrier` sends the request again."""
    put_clusters_meta(es, index)
    es.indices.refresh(index=index)
    real.bulk(operations=operations[:2], **kwargs)
    raise ClusterTimeout("timed out")


def write_seeded(client: Scripted, es_url: str, index: str,
                 doc_ids: Sequence[str]) -> tuple[Seeder, JobStats]:
    """Write the fingerprints (and seeds) of ``doc_ids`` through the indexer's bulk updater with
    ``client``, then close it."""
    try:
        seeder, updater, stats = seeded_updater(client, Retrier(es_url, 3, base_delay=0.01, max_delay=0.02), index)
        hits = {h["_id"]: h for h in read_hits(client._client, index)}
        updater.write([updater.pending_from_hit(hits[doc_id]) for doc_id in doc_ids])
    finally:
        client._client.close()
    return seeder, stats


@pytest.mark.es
def test_a_seed_applied_by_an_attempt_that_timed_out_is_withdrawn_after_the_retry_conflicts(es, es_url, new_index):
    """The first attempt writes x's seed after a cluster run opened its point in time, the client
    times out, the retry answers 409 for x (already applied) and 200 for y, and the check finds
    the clusters: x's seed must be withdrawn too (it was not, when only 2xx items were checked)."""
    docs = stories(2)
    index = index_with_cluster_fields(es, new_index, docs)
    x, y = docs[0]["id"], docs[1]["id"]

    def script(attempt: int, operations: list[Any], real: Client, kwargs: dict[str, Any]) -> Any:
        if attempt == 1:
            first_attempt_times_out(es, index, real, operations, kwargs)
        return real.bulk(operations=operations, **kwargs)

    client = Scripted(indexer_client(es_url), script)
    seeder, stats = write_seeded(client, es_url, index, [x, y])
    assert client.bulks >= 2 and not seeder.seeding and stats.failed == 0
    es.indices.refresh(index=index)
    stored = values(es, index)
    for doc_id in (x, y):
        assert stored[doc_id]["v"] == FP.version
        assert stored[doc_id].get("cluster") is None and stored[doc_id].get("bands") is None, doc_id
    assert seeder.withdrawn == 2
    assert es.count(index=index, body={"query": missing_clusters_query()})["count"] == len(docs)


@pytest.mark.es
def test_a_seed_applied_by_a_timed_out_attempt_is_withdrawn_when_the_resend_carries_none(es, es_url, new_index):
    """The first attempt applies x's seed and times out; the retry rejects x (429) and writes y;
    the check finds clusters (seeding stops), and x is sent again without a seed: 409, re-read,
    noop. x's seed must still be withdrawn (it was sent with one)."""
    docs = stories(2)
    index = index_with_cluster_fields(es, new_index, docs)
    x = docs[0]["id"]

    def script(attempt: int, operations: list[Any], real: Client, kwargs: dict[str, Any]) -> Any:
        if attempt == 1:
            first_attempt_times_out(es, index, real, operations, kwargs)
        if attempt == 2:  # x rejected, y written: the answer says 429 for x
            response = real.bulk(operations=operations[2:], **kwargs)
            response["items"].insert(0, {"update": {"status": 429, "error": {
                "type": "es_rejected_execution_exception", "reason": "simulated"}}})
            return response
        return real.bulk(operations=operations, **kwargs)

    client = Scripted(indexer_client(es_url), script)
    seeder, stats = write_seeded(client, es_url, index, [d["id"] for d in docs])
    assert client.bulks >= 3 and not seeder.seeding and stats.failed == 0
    es.indices.refresh(index=index)
    stored = values(es, index)
    assert stored[x].get("cluster") is None and stored[x].get("bands") is None
    assert es.count(index=index, body={"query": missing_clusters_query()})["count"] == len(docs)


@pytest.mark.es
@pytest.mark.parametrize("clustered", [True, False])
def test_load_drops_the_cluster_values_a_line_brings(es, es_url, client, clustered):
    """A line exported from another index holds that index's ``cluster``/``bands``: loaded, they
    would make the document count as clustered (and fold it into an unrelated group)."""
    docs = stories(3)[:3]
    index = f"cluster-seed-{uuid.uuid4().hex[:8]}"
    foreign = {"cluster": "s00", "bands": ["deadbeefdeadbeef"]}
    lines = [dict(docs[0])]  # no neardup key: spliced in
    extra = dict(docs[1])
    extra[FIELD] = {**FP.fingerprint_fields([extra["title"], extra["body"]]).to_source(), **foreign, "keep": 1}
    lines.append(extra)  # the same fingerprint as it gets here, with another index's values
    other = dict(docs[2])
    other[FIELD] = {**FP.fingerprint_fields(["something else entirely"]).to_source(), **foreign}
    lines.append(other)  # another fingerprint
    lines.append({"id": "no-text", "title": 7, FIELD: dict(foreign)})  # no text: no fingerprint
    try:
        options = LoadOptions(index=index, fields=tuple(FIELDS), seed_threshold=THRESHOLD)
        if clustered:
            Loader(client, Retrier(es_url, 3), FP, options, io.StringIO()).run(io.BytesIO(b""))
            put_clusters_meta(es, index, "ready")
        loader = Loader(client, Retrier(es_url, 3), FP, options, io.StringIO())
        result = loader.run(io.BytesIO("".join(json.dumps(d) + "\n" for d in lines).encode()))
        assert result.loaded == len(lines) and result.failures.total == 0
        es.indices.refresh(index=index)
        stored = values(es, index)
        assert stored[docs[1]["id"]]["keep"] == 1
        assert "cluster" not in stored["no-text"] and "bands" not in stored["no-text"]
        for doc_id in (d["id"] for d in docs):
            if clustered:
                assert "cluster" not in stored[doc_id] and "bands" not in stored[doc_id], doc_id
            else:  # its own seed
                assert stored[doc_id]["cluster"] == doc_id and "deadbeefdeadbeef" not in stored[doc_id]["bands"]
        if clustered:
            assert es.count(index=index, body={"query": missing_clusters_query()})["count"] == len(lines)
    finally:
        delete_index(es, index)


@pytest.mark.es
def test_the_cluster_job_fails_if_building_is_not_acknowledged(es, es_url, new_index, monkeypatch, config):
    """The seed protocol relies on `building` being applied on every node before the refresh."""
    from neardup.indexer.errors import JobError

    index = new_index(stories(2))
    real_make_client = cluster_run.make_client

    class Indices:
        def __init__(self, real: Any) -> None:
            self._real = real

        def __getattr__(self, name: str) -> Any:
            return getattr(self._real, name)

        def put_mapping(self, **kwargs: Any) -> Any:
            self._real.put_mapping(**kwargs)
            return {"acknowledged": False}

    class Unacknowledged:
        def __init__(self, real: Client) -> None:
            self._real = real
            self.indices = Indices(real.indices)

        def __getattr__(self, name: str) -> Any:
            return getattr(self._real, name)

    monkeypatch.setattr(cluster_run, "make_client", lambda upstream: Unacknowledged(real_make_client(upstream)))
    with pytest.raises(JobError, match="did not acknowledge recording `building`"):
        run_cluster(config, ClusterOptions(index=index, threshold=THRESHOLD, mode="memory"), progress=Progress())


@pytest.mark.es
def test_withdrawn_seeds_are_not_visible_to_searches_after_the_job(es, es_url, new_index, client):
    """A refresh between the seeded write and its withdrawal makes the seed searchable: the
    withdrawal is refreshed, so the proxy never sees it afterwards (no automatic refreshes here)."""
    docs = stories(4)
    index = index_with_cluster_fields(es, new_index, docs)
    es.indices.put_settings(index=index, body={"index": {"refresh_interval": "-1"}})

    def cluster_run_starts() -> None:
        put_clusters_meta(es, index)
        es.indices.refresh(index=index)  # the seeds are searchable now

    interposed = Interposed(client, cluster_run_starts)
    seeder, updater, stats = seeded_updater(interposed, Retrier(es_url, 3), index)
    updater.write([updater.pending_from_hit(h) for h in read_hits(client, index)])
    assert seeder.withdrawn == len(docs) and stats.failed == 0
    # no refresh here: what a search sees right after the job
    assert es.count(index=index, body={"query": {"exists": {"field": f"{FIELD}.cluster"}}})["count"] == 0
    assert es.count(index=index, body={"query": missing_clusters_query()})["count"] == len(docs)


def near_copy(doc: dict[str, Any], doc_id: str, word: str = "qwzrt") -> dict[str, Any]:
    """``doc`` with one word of its body changed, as ``doc_id``."""
    words = doc["body"].split()
    words[-20] = word
    return {"id": doc_id, "title": doc["title"], "body": " ".join(words)}


@pytest.mark.es
@pytest.mark.parametrize("mode", ["memory", "aggregate", "auto"])
def test_seeds_of_a_killed_worker_are_withdrawn_by_the_first_cluster_run(es, es_url, new_index, monkeypatch, mode, config):
    """An indexer worker killed between a seeded request's acknowledgement and its check (or
    whose check fails: the node is unreachable) leaves seeds that no check withdraws. Written
    after the first cluster run's point in time, the run never examined them: ``late`` (a new
    near-copy of s00) and ``x`` (read by the run without text, then given a near-copy of s01's
    text) would keep their own key as cluster id in a `ready` index. The run's backstop
    (:meth:`indexer.cluster.Job.withdraw_unexamined`) withdraws them: they count as new."""
    from neardup.indexer.cluster import aggregate as cluster_aggregate

    docs = stories(10)
    index = new_index(docs + [{"id": "x", "note": "no text yet"}])
    neardup_json(es, es_url, "index", "--index", index)  # seeds; x gets no fingerprint
    seeded = values(es, index)
    assert seeded["s00"]["cluster"] == "s00" and seeded["x"] == {}

    def killed_worker_writes() -> None:
        es.update(index=index, id="x", body={"doc": {k: v for k, v in near_copy(docs[1], "x").items() if k != "id"}})
        es.index(index=index, id="late", body=near_copy(docs[0], "late"))
        client = indexer_client(es_url)
        try:
            seeder, updater, _ = seeded_updater(client, Retrier(es_url, 3), index)
            seeder.confirm = lambda *args, **kwargs: None  # type: ignore[method-assign]  # killed before it
            found = client.mget(index=index, ids=["x", "late"], source=FIELDS, realtime=True)["docs"]
            updater.write([updater.pending_from_hit(doc) for doc in found])
        finally:
            client.close()

    if mode in ("memory", "auto"):  # auto chooses memory here
        read_table = cluster_job.Job.read_table

        def reading(job: Any, *args: Any, **kwargs: Any) -> Any:
            table = read_table(job, *args, **kwargs)
            killed_worker_writes()  # after the point in time
            return table

        monkeypatch.setattr(cluster_job.Job, "read_table", reading)
    else:
        write_clusters = cluster_aggregate._write_clusters

        def writing(job: Any, renamed: Any) -> None:
            killed_worker_writes()  # after the aggregation read the keys
            write_clusters(job, renamed)

        monkeypatch.setattr(cluster_aggregate, "_write_clusters", writing)
    result = run_cluster(config, ClusterOptions(index=index, threshold=THRESHOLD, mode=mode), progress=Progress())
    assert result.stats.failed == 0 and result.strategy == ("memory" if mode == "auto" else mode)
    assert mappings(es, index)["_meta"][META_KEY]["state"] == "ready"
    stored = values(es, index)
    assert stored["x"]["v"] == stored["late"]["v"] == FP.version
    # no value a run did not examine: withdrawn, so both count as new (the proxy waits for them)
    for doc_id in ("x", "late"):
        assert stored[doc_id].get("cluster") is None and stored[doc_id].get("bands") is None, doc_id
    assert es.count(index=index, body={"query": missing_clusters_query()})["count"] == 2
    assert stored["s00-copy"]["cluster"] == "s00" and stored["s05"]["cluster"] == "s05"  # the rest as usual
    placed = neardup_json(es, es_url, "cluster", "--index", index, "--threshold", str(THRESHOLD), "--incremental")
    assert placed["new_documents"] == 2
    final = values(es, index)
    assert final["late"]["cluster"] == "s00" and final["x"]["cluster"] == "s01"



STATS = "reading the shards' checkpoints"  # the Retrier label of take_cut's _stats request


def requests_of_a_run(monkeypatch: pytest.MonkeyPatch, config: Config, options: ClusterOptions) -> list[str]:
    """What ``run_cluster`` asks Elasticsearch, in order (the :class:`Retrier` labels), with
    ``cut`` for each :func:`take_cut` (the real one runs)."""
    asked: list[str] = []
    call, take_cut = Retrier.call, cluster_run.take_cut

    def labelled(retrier: Retrier, what: str, fn: Callable[[], Any]) -> Any:
        asked.append(what)
        return call(retrier, what, fn)

    def counted(*args: Any, **kwargs: Any) -> Any:
        asked.append("cut")
        return take_cut(*args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(Retrier, "call", labelled)
        patch.setattr(cluster_run, "take_cut", counted)
        patch.setattr(cluster_job, "take_cut", counted)
        result = run_cluster(config, options, progress=Progress())
    assert result.stats.failed == 0
    return asked


@pytest.mark.es
@pytest.mark.parametrize("mode, memory_limit, strategy", [
    ("memory", 2048, "memory"), ("aggregate", 2048, "aggregate"), ("auto", 2048, "memory"), ("auto", 1, "aggregate")])
def test_a_full_run_takes_its_cut_just_before_the_refresh_its_reading_rests_on(
        es, es_url, new_index, monkeypatch, config, mode, memory_limit, strategy):
    """One ``_stats`` request a run (:mod:`indexer.cluster.backstop`) but for ``auto`` choosing
    aggregate: memory (named or chosen by ``auto``) takes it before the first refresh (its point
    in time is opened after it); aggregate after the key pass wrote the keys, before the refresh
    the aggregation rests on, replacing the one ``auto`` took. An incremental run takes none."""
    docs = stories(6)
    index = new_index(docs)
    neardup_json(es, es_url, "index", "--index", index)
    if memory_limit == 1:  # 9 documents need about 11 KB: make them need more than 1 MB
        monkeypatch.setattr(cluster_options, "BYTES_PER_DOC", 2**20)
    # not the seeds' threshold: other keys, so aggregate's key pass writes every document
    options = ClusterOptions(index=index, threshold=0.7, mode=mode, memory_limit_mb=memory_limit)
    asked = requests_of_a_run(monkeypatch, config, options)
    cuts = [k for k, what in enumerate(asked) if what == "cut"]
    assert len(cuts) == asked.count(STATS) == (2 if (mode, strategy) == ("auto", "aggregate") else 1), asked
    cut = cuts[-1]   # the one the backstop uses
    assert asked[cut + 1:cut + 3] == [STATS, "refreshing"], asked  # the cut, then the refresh
    first_reading = asked.index("opening a point in time")
    if strategy == "memory":
        assert cut < asked.index("counting documents") < first_reading, asked
        assert "aggregating the band keys" not in asked
    else:
        keys_written = asked.index("writing fingerprints")  # the key pass
        aggregation = asked.index("aggregating the band keys")
        assert first_reading < keys_written < cut < aggregation, asked
    assert mappings(es, index)["_meta"][META_KEY]["state"] == "ready"
    # the cluster values are those of a run without the counting
    assert values(es, index)["s00-copy"]["cluster"] == "s00"

    es.index(index=index, id="late", body=near_copy(docs[0], "late"), refresh=True)
    neardup_json(es, es_url, "index", "--index", index)
    incremental = ClusterOptions(index=index, threshold=0.7, mode=mode, incremental=True)
    assert not {"cut", STATS} & set(requests_of_a_run(monkeypatch, config, incremental))
    assert values(es, index)["late"]["cluster"] == "s00"


def test_the_cut_is_not_held_back_by_a_replicas_stale_global_checkpoint():
    """Once writes stop, a replica keeps the global checkpoint the primary last told it (until the
    next sync, up to 30 s): below the writes acknowledged before the run. The cut must not use
    it, or the aggregate strategy withdraws values it saw (the indexer's seeds, its own keys)."""
    from neardup.indexer.cluster.backstop import take_cut

    def copy(primary: bool, local: int, global_: int) -> dict[str, Any]:
        return {"routing": {"primary": primary},
                "seq_no": {"max_seq_no": local, "local_checkpoint": local, "global_checkpoint": global_}}

    stats = {"indices": {"i": {"shards": {"0": [copy(True, 99, 99), copy(False, 99, 40)],
                                          "1": [copy(False, 50, 10), copy(True, 60, 55)],
                                          "2": [copy(False, 7, 3)]}}}}

    class StatsOnly:
        class indices:  # noqa: N801 - the client's namespace
            @staticmethod
            def stats(**kwargs: Any) -> Any:
                return stats

    class Once:
        @staticmethod
        def call(what: str, fn: Callable[[], Any]) -> Any:
            return fn()

    # the smallest local checkpoint, not above the primary's global one; no primary: every copy's
    assert take_cut(StatsOnly(), Once(), "i") == {"i": {0: 99, 1: 50, 2: 3}}  # type: ignore[arg-type]


@pytest.mark.es
@pytest.mark.parametrize("mode", ["memory", "aggregate"])
def test_a_cut_below_the_runs_own_writes_withdraws_none_of_them(es, es_url, new_index, monkeypatch, mode, config):
    """Another writer's request in flight since before the run holds every copy's local
    checkpoint back: the cut then lies below what the run itself wrote. A lower cut must only
    cost reading more: the aggregate strategy's key pass (acknowledged before the refresh the
    aggregation rests on, so seen by it) and the last pass's writes of those versions stay."""
    docs = stories(10)
    index = new_index(docs)
    neardup_json(es, es_url, "index", "--index", index)
    run_cluster(config, ClusterOptions(index=index, threshold=THRESHOLD, mode=mode), progress=Progress())
    # a wrong value the next run's last pass rewrites (on the version its key pass wrote)
    es.update(index=index, id="s05", body={"doc": {FIELD: {"cluster": "wrong"}}}, refresh=True)
    take_cut = cluster_run.take_cut
    with closing(indexer_client(es_url)) as client:
        before_run = take_cut(client, Retrier(es_url, 3), index)   # held there while the run writes

    monkeypatch.setattr(cluster_run, "take_cut", lambda *args, **kwargs: before_run)
    monkeypatch.setattr(cluster_job, "take_cut", lambda *args, **kwargs: before_run)
    # another threshold: other bands, so the key pass rewrites every document
    result = run_cluster(config, ClusterOptions(index=index, threshold=0.7, mode=mode), progress=Progress())
    assert result.stats.failed == 0 and result.stats.updated >= len(docs)
    assert result.withdrawn_unexamined == 0
    assert es.count(index=index, body={"query": missing_clusters_query()})["count"] == 0
    stored = values(es, index)
    assert stored["s00-copy"]["cluster"] == "s00" and stored["s05"]["cluster"] == "s05"
