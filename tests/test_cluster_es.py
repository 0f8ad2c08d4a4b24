"""``neardup cluster`` against the real Elasticsearch, on Reuters-21578.

The enriched Reuters index of the session (``reuters_index``) is copied into this module's
own indices (fingerprints included, cluster values never), so no other test sees cluster ids.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pytest

from neardup.fingerprint import FIELD, Fingerprinter, FingerprintParams, estimated_resemblance, scheme_version
from neardup.fingerprint.clustering import ClusterParams, assign_ids, cluster_signatures, single_link_exact
from neardup.fingerprint.lsh import choose_banding, key_strings
from neardup.indexer.cluster.documents import stored_values, usable_signature
from neardup.indexer.cluster.meta import META_KEY
from tests.cluster_support import bulk, indexer_client, mappings, scan_hits
from tests.engine_support import bulk_load, delete_index
from tests.plugins.corpora import run_neardup

PARAMS = FingerprintParams()
VERSION = scheme_version(PARAMS)
THRESHOLD = 0.8


def copy_index(es: Any, source: str, name: str, ids: Sequence[str] | None = None) -> str:
    """A copy of ``source`` (2 shards, same mapping) with the fingerprints but without cluster values."""
    mapping = mappings(es, source)
    mapping.pop("_meta", None)
    for extra in ("cluster", "bands"):
        mapping.get("properties", {}).get(FIELD, {}).get("properties", {}).pop(extra, None)
    es.indices.create(index=name, body={"settings": {"number_of_shards": 2, "number_of_replicas": 0},
                                        "mappings": mapping})
    query = {"query": {"ids": {"values": list(ids)}}} if ids is not None else {"query": {"match_all": {}}}

    def actions() -> Iterator[dict[str, Any]]:
        for hit in scan_hits(es, source, query, size=2000):
            doc = hit["_source"]
            if isinstance(doc.get(FIELD), dict):
                doc[FIELD] = {k: v for k, v in doc[FIELD].items() if k not in ("cluster", "bands")}
            yield {"_index": name, "_id": hit["_id"], "_source": doc}

    bulk(es, actions(), chunk_size=2000)
    es.indices.refresh(index=name)
    return name


def cluster(es_url: str, index: str, *args: str) -> dict[str, Any]:
    if "--verify" not in args:  # these tests compare with the signature estimates (text: test_cluster_verify.py)
        args = (*args, "--verify", "signature")
    result = run_neardup(["cluster", "--index", index, "--threshold", str(THRESHOLD), "--json", *args], es_url)
    assert result.returncode == 0, result.stderr.decode(errors="replace")
    return json.loads(result.stdout)


def documents(es: Any, index: str) -> dict[str, dict[str, Any]]:
    """_id -> neardup object (or {}) of every document."""
    return {hit["_id"]: (hit["_source"].get(FIELD) or {}) for hit in scan_hits(es, index, _source=[FIELD], size=5000)}


def expected_ids(docs: dict[str, dict[str, Any]]) -> tuple[dict[str, str], np.ndarray, np.ndarray, list[str]]:
    """Cluster ids computed directly with the pure functions from the stored fingerprints."""
    keys = sorted(docs)
    sigs, counts = [], []
    for key in keys:
        raw, count = usable_signature(stored_values({FIELD: docs[key]}), VERSION, PARAMS.num_perm)
        sigs.append(raw or b"\0" * (8 * PARAMS.num_perm))
        counts.append(count if raw is not None else 0)
    signatures = np.frombuffer(b"".join(sigs), dtype="<u8").astype(np.uint64).reshape(len(keys), -1)
    counts = np.array(counts, dtype=np.int64)
    params = ClusterParams(THRESHOLD, choose_banding(THRESHOLD, PARAMS.num_perm, PARAMS.groups))
    labels = cluster_signatures(signatures, counts, params).labels
    ids = assign_ids(keys, labels, [None] * len(keys))
    return dict(zip(keys, ids)), signatures, counts, keys


@pytest.fixture(scope="module")
def clustered(es: Any, es_url: str, reuters_index: str) -> Iterator[tuple[str, dict[str, Any]]]:
    name = copy_index(es, reuters_index, f"cluster-reuters-{uuid.uuid4().hex[:8]}")
    try:
        yield name, cluster(es_url, name)
    finally:
        delete_index(es, name)


def test_every_document_gets_the_cluster_the_pure_functions_give(es, clustered):
    index, summary = clustered
    docs = documents(es, index)
    assert summary["documents"] == len(docs) == 21578
    assert all(isinstance(d.get("cluster"), str) for d in docs.values())
    want, signatures, counts, keys = expected_ids(docs)
    assert {k: d["cluster"] for k, d in docs.items()} == want
    # the clusters are exact single link of the estimates (every pair compared)
    exact = single_link_exact(signatures, counts, THRESHOLD)
    _, stored = np.unique(np.array([docs[k]["cluster"] for k in keys], dtype=object), return_inverse=True)
    assert np.array_equal(_first_member(stored), _first_member(exact))
    assert summary["clusters"] > 300  # Reuters has hundreds of resends and corrections
    assert summary["without_fingerprint"] == int(np.count_nonzero(counts == 0)) > 0
    assert summary["failed"] == 0 and summary["capped_buckets"] == 0


def _first_member(labels: np.ndarray) -> np.ndarray:
    """Labels renamed to the first index holding them (a canonical form of a partition)."""
    first: dict[int, int] = {}
    return np.array([first.setdefault(int(v), i) for i, v in enumerate(labels)])


def test_linked_members_are_similar_and_keys_are_stored(es, clustered):
    index, _ = clustered
    docs = documents(es, index)
    banding = choose_banding(THRESHOLD, PARAMS.num_perm, PARAMS.groups)
    members: dict[str, list[str]] = {}
    for key, doc in docs.items():
        members.setdefault(doc["cluster"], []).append(key)
        raw, count = usable_signature(stored_values({FIELD: doc}), VERSION, PARAMS.num_perm)
        if raw is not None and count > 0:
            signature = np.frombuffer(raw, dtype="<u8").astype(np.uint64)[None, :]
            assert doc["bands"] == key_strings(banding.keys(signature))[0]
        else:
            assert not doc.get("bands")
            assert doc["cluster"] == key  # no fingerprint: a cluster of its own
    fingerprinter = Fingerprinter(PARAMS)
    from neardup.fingerprint import Fingerprint

    def fingerprint(key: str) -> Fingerprint:
        return Fingerprint.from_source({k: docs[key][k] for k in ("v", "sig", "n", "super")})

    for cluster_id, keys in members.items():
        assert cluster_id in keys  # the id is the key of a member (the founder)
        if len(keys) > 1:
            # single link: every member is linked to at least one other member
            for key in keys:
                best = max(estimated_resemblance(fingerprint(key), fingerprint(other)) for other in keys if other != key)
                assert best >= THRESHOLD
    assert fingerprinter.version == VERSION


def test_meta_records_what_the_clusters_were_built_for(es, clustered):
    index, summary = clustered
    meta = mappings(es, index)["_meta"][META_KEY]
    assert meta["state"] == "ready" and meta["threshold"] == THRESHOLD and meta["mode"] == "resemblance"
    assert meta["version"] == VERSION and meta["clusters"] == summary["clusters"]
    mapping = mappings(es, index)["properties"][FIELD]["properties"]
    assert mapping["cluster"] == {"type": "keyword"} and mapping["bands"] == {"type": "keyword"}


def test_running_again_writes_nothing(es_url, clustered):
    index, first = clustered
    again = cluster(es_url, index)
    assert again["updated"] == 0 and again["failed"] == 0
    assert again["clusters"] == first["clusters"]


@pytest.mark.timeout(900)
def test_aggregate_mode_gives_the_same_ids_as_memory_mode(es, es_url, reuters_index, reuters_docs):
    ids = [d["id"] for d in reuters_docs[:6000]]
    suffix = uuid.uuid4().hex[:8]
    memory = copy_index(es, reuters_index, f"cluster-memory-{suffix}", ids)
    aggregate = copy_index(es, reuters_index, f"cluster-aggregate-{suffix}", ids)
    try:
        assert cluster(es_url, memory, "--mode", "memory")["strategy"] == "memory"
        summary = cluster(es_url, aggregate, "--mode", "aggregate", "--batch-size", "700")
        assert summary["strategy"] == "aggregate" and summary["capped_buckets"] == 0
        assert summary["clusters"] > 50
        assert {k: d["cluster"] for k, d in documents(es, aggregate).items()} == \
               {k: d["cluster"] for k, d in documents(es, memory).items()}
        assert cluster(es_url, aggregate, "--mode", "aggregate")["updated"] == 0
    finally:
        delete_index(es, f"{memory},{aggregate}")


# --- incremental -------------------------------------------------------------------------------------

def bridged_families(reuters_docs: list[dict[str, Any]]) -> tuple[list[str], list[str], str]:
    """Texts from real stories: a family of 3 near-identical texts, a family of 2, and a text m
    with Ĵ ≥ t to a member of each family, while no member of one family has Ĵ ≥ t to a member
    of the other: m links two clusters that are not linked to each other."""
    fp = Fingerprinter(PARAMS)

    def fingerprint(text: str):
        return fp.fingerprint_fields(["", text])  # as `neardup index` sees a document with an empty title

    bodies = [d["body"] for d in reuters_docs if len(d["body"].split()) > 250]
    shared = " ".join(bodies[0].split()[:180])
    first = bodies[1].split()
    for other in bodies[3:80]:
        second = other.split()
        for cut in range(8, 60, 2):
            xs = [f"{shared} {' '.join(first[:cut - k])}" for k in range(3)]
            ys = [f"{shared} {' '.join(second[:cut - k])}" for k in range(2)]
            m = f"{shared} {' '.join(first[:cut // 2])} {' '.join(second[:cut // 2])}"
            fx, fy, fm = [fingerprint(t) for t in xs], [fingerprint(t) for t in ys], fingerprint(m)
            if (estimated_resemblance(fm, fx[0]) >= THRESHOLD and estimated_resemblance(fm, fy[0]) >= THRESHOLD
                    and all(estimated_resemblance(a, b) < THRESHOLD for a in fx for b in fy)
                    and all(estimated_resemblance(fx[0], b) >= THRESHOLD for b in fx[1:])
                    and estimated_resemblance(fy[0], fy[1]) >= THRESHOLD):
                return xs, ys, m
    raise AssertionError("no bridging texts found")


def test_incremental_joins_merges_and_equals_a_full_run(es, es_url, reuters_index, reuters_docs):
    name = f"cluster-incremental-{uuid.uuid4().hex[:8]}"
    small = [d["id"] for d in reuters_docs[:2000]]
    copy_index(es, reuters_index, name, small)
    try:
        xs, ys, bridge = bridged_families(reuters_docs)
        family = [{"id": f"x{k}", "title": "", "body": text} for k, text in enumerate(xs)]
        family += [{"id": f"y{k}", "title": "", "body": text} for k, text in enumerate(ys)]
        bulk_load(es, name, family)
        assert run_neardup(["index", "--index", name], es_url).returncode == 0
        first = cluster(es_url, name)
        before = documents(es, name)
        assert {before[f"x{k}"]["cluster"] for k in range(3)} == {"x0"}
        assert {before[f"y{k}"]["cluster"] for k in range(2)} == {"y0"}
        # a copy of a Reuters story of a 2-member cluster, the bridge, and an unrelated text
        counts: dict[str, int] = {}
        for doc in before.values():
            counts[doc["cluster"]] = counts.get(doc["cluster"], 0) + 1
        pair_id = sorted(c for c, n in counts.items() if n == 2 and not c.startswith(("x", "y")))[0]
        original = next(d for d in reuters_docs if d["id"] == pair_id)
        new = [{"id": "copy", "title": original["title"], "body": original["body"]},
               {"id": "bridge", "title": "", "body": bridge},
               {"id": "lonely", "title": "nothing like it", "body": "zebra quantum marmalade " * 12}]
        bulk_load(es, name, new)
        assert run_neardup(["index", "--index", name], es_url).returncode == 0
        summary = cluster(es_url, name, "--incremental")
        assert summary["new_documents"] == 3 and summary["merged"] == 1 and summary["joined"] == 2
        after = documents(es, name)
        assert after["copy"]["cluster"] == pair_id
        assert after["lonely"]["cluster"] == "lonely"
        merged = {after[k]["cluster"] for k in ("x0", "x1", "x2", "y0", "y1", "bridge")}
        assert merged == {"x0"}  # the larger cluster's id survives the merge
        # nothing else changed
        changed = {k for k in before if after[k]["cluster"] != before[k]["cluster"]}
        assert changed == {"y0", "y1"}
        full = cluster(es_url, name)
        assert full["updated"] == 0 and full["clusters"] == first["clusters"] - 1
    finally:
        delete_index(es, name)


def test_incremental_needs_a_full_run_with_the_same_threshold(es, es_url, reuters_index, reuters_docs):
    name = copy_index(es, reuters_index, f"cluster-meta-{uuid.uuid4().hex[:8]}", [d["id"] for d in reuters_docs[:300]])
    try:
        result = run_neardup(["cluster", "--index", name, "--incremental"], es_url)
        assert result.returncode == 3
        assert "run `neardup cluster --index" in result.stderr.decode() and "no clusters yet" in result.stderr.decode()
        cluster(es_url, name)
        result = run_neardup(["cluster", "--index", name, "--incremental", "--threshold", "0.9"], es_url)
        assert result.returncode == 3 and "threshold 0.8" in result.stderr.decode()
        assert b"Traceback" not in result.stderr
    finally:
        delete_index(es, name)


def test_missing_index_is_one_clear_message(es_url):
    result = run_neardup(["cluster", "--index", f"cluster-missing-{uuid.uuid4().hex[:6]}"], es_url)
    assert result.returncode == 3
    assert b"no such index" in result.stderr and b"Traceback" not in result.stderr


def test_a_document_changed_meanwhile_is_not_overwritten(es, es_url):
    """The conditional update meets a changed fingerprint: re-read, left for the next run."""
    from neardup.indexer.cluster.documents import SOURCE_FIELDS, Planned
    from neardup.indexer.cluster.updates import ClusterUpdater
    from neardup.indexer.retry import Retrier
    from neardup.indexer.stats import JobStats
    from neardup.indexer.writer import Pending

    name = f"cluster-conflict-{uuid.uuid4().hex[:8]}"
    fp = Fingerprinter(PARAMS)
    es.index(index=name, id="1", body={"body": "first text", FIELD: fp.fingerprint("first text").to_source()},
             refresh=True)
    hit = es.get(index=name, id="1")
    token = stored_values(hit["_source"]).token
    es.update(index=name, id="1", body={"doc": {"body": "second", FIELD: fp.fingerprint("a new text").to_source()}},
              refresh=True)
    client = indexer_client(es_url)
    try:
        stats = JobStats()
        want = Planned("1", ("00",), token)
        updater = ClusterUpdater(client, Retrier(es_url, 2), lambda s: ("ok", None),
                                 SOURCE_FIELDS, 3, stats, plan={(name, "1"): want})
        updater.write([Pending(name, "1", None, hit["_seq_no"], hit["_primary_term"], want.partial())])
        assert updater.changed_meanwhile == 1 and stats.conflicts_retried == 1 and stats.updated == 0
        assert "cluster" not in es.get(index=name, id="1")["_source"][FIELD]
    finally:
        client.close()
        delete_index(es, name)


# --- report in a real browser ------------------------------------------------------------------------

def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    pytest.fail("the HTML report test needs Chromium: apt-get install -y chromium", pytrace=False)


def test_report_renders_in_headless_chromium(es, es_url, reuters_index, reuters_docs, tmp_path):
    name = copy_index(es, reuters_index, f"cluster-report-{uuid.uuid4().hex[:8]}",
                      [d["id"] for d in reuters_docs[:3000]])
    evil = '<script>document.title="pwned"</script><b>bold</b>'
    es.index(index=name, id="evil", body={"title": evil, "body": reuters_docs[15]["body"]}, refresh=True)
    try:
        assert run_neardup(["index", "--index", name], es_url).returncode == 0
        report = tmp_path / "report.html"
        summary = cluster(es_url, name, "--report", str(report))
        assert summary["report"] == str(report)
        browser = chromium()
        common = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--no-first-run", "--disable-sync", "--disable-component-update",
                  f"--user-data-dir={tmp_path / 'profile'}"]
        dom = subprocess.run([*common, "--dump-dom", report.as_uri()], capture_output=True, text=True,
                             timeout=120, check=False)
        assert dom.returncode == 0, dom.stderr[-2000:]
        page = dom.stdout
        assert f"Near-duplicate clusters of <code>{name}</code>" in page
        assert "<table id=\"sizes\">" in page and "<table id=\"largest\">" in page
        assert "Pairs just above the threshold" in page and 'class="sim">0.8' in page
        assert "pwned" not in page.split("<title>")[1].split("</title>")[0]  # the script never ran
        assert "<b>bold</b>" not in page and "&lt;b&gt;bold&lt;/b&gt;" in page
        shot = tmp_path / "report.png"
        run = subprocess.run([*common, f"--screenshot={shot}", "--window-size=1200,1600", report.as_uri()],
                             capture_output=True, text=True, timeout=120, check=False)
        assert run.returncode == 0 and shot.stat().st_size > 10_000
    finally:
        delete_index(es, name)


# --- native collapse on the clusters (the proxy's push-down, proxy/pushdown.py) ------------------------

def test_pushdown_pages_give_the_groups_the_cluster_ids_say(es, clustered):
    from neardup.proxy.handlers.native_collapse import clusters_match, missing_clusters_query, pushdown_body, pushdown_response

    index, _ = clustered
    metas = {name: value["mappings"].get("_meta") for name, value in es.indices.get_mapping(index=index).items()}
    assert clusters_match(metas, THRESHOLD, "resemblance", VERSION)
    assert not clusters_match(metas, 0.85, "resemblance", VERSION)
    assert es.count(index=index, body={"query": missing_clusters_query()})["count"] == 0
    clusters = {k: d["cluster"] for k, d in documents(es, index).items()}
    query = {"match": {"body": "oil prices"}}
    expected_groups = es.search(index=index, body={"size": 0, "query": query, "aggs": {"g": {"terms": {
        "field": "neardup.cluster", "size": 10000}}}})["aggregations"]["g"]["buckets"]
    matching = {b["key"]: b["doc_count"] for b in expected_groups}
    seen: set[str] = set()
    for page in range(20):
        body = {"query": query, "_source": ["title"]}
        answer = dict(es.search(index=index, body=pushdown_body(body, page * 10, 10, inner_size=5)))
        response = pushdown_response(answer, body, THRESHOLD, "resemblance")
        hits = response["hits"]["hits"]
        assert len(hits) == 10
        summary = response["neardup"]
        assert summary["pushdown"] and summary["groups_total"] == len(matching)
        assert "aggregations" not in response
        for hit in hits:
            group = hit["fields"]["neardup.group"][0]
            assert "neardup.cluster" not in hit["fields"]
            assert clusters[hit["_id"]] == group and group not in seen
            seen.add(group)
            inner = hit["inner_hits"]["neardup"]["hits"]
            assert inner["total"]["value"] == matching[group] - 1
            assert all(clusters[m["_id"]] == group and m["_id"] != hit["_id"] for m in inner["hits"])
            assert len(inner["hits"]) == min(5, matching[group] - 1)
    assert len(seen) == 200


# --- what a run needs of the engine ------------------------------------------------------------------

def test_a_run_the_engine_cannot_serve_stops_before_writing_anything(es, es_url, engine, reuters_docs):
    """OpenSearch 2 with fielddata on ``_id`` off: no order to page by; any other engine runs."""
    from neardup.indexer.reader import page_order

    pages_by_id = page_order(engine) != "_shard_doc"

    name = f"cluster-engine-{uuid.uuid4().hex[:8]}"
    bulk_load(es, name, [{"id": d["id"], "title": d["title"], "body": d["body"]} for d in reuters_docs[:50]])
    assert run_neardup(["index", "--index", name], es_url).returncode == 0
    if pages_by_id:
        es.cluster.put_settings(body={"transient": {"indices.id_field_data.enabled": False}})
    try:
        result = run_neardup(["cluster", "--index", name, "--threshold", str(THRESHOLD), "--json"], es_url)
        mapping = mappings(es, name)
        if pages_by_id:
            message = result.stderr.decode()
            assert result.returncode == 3 and b"Traceback" not in result.stderr
            assert f"OpenSearch {engine.version} has no _shard_doc" in message and "indices.id_field_data" in message
            assert META_KEY not in (mapping.get("_meta") or {})  # not even `building`
        else:
            assert result.returncode == 0, result.stderr.decode(errors="replace")
            assert mapping["_meta"][META_KEY]["state"] == "ready"
    finally:
        if pages_by_id:
            es.cluster.put_settings(body={"transient": {"indices.id_field_data.enabled": None}})
        delete_index(es, name)
