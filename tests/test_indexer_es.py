"""``neardup index`` against the real Elasticsearch, on small indices made for each test."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from neardup.config import load_config
from neardup.fingerprint import FIELD, Fingerprinter, FingerprintParams
from neardup.indexer.client import make_client, max_clause_count
from neardup.indexer.errors import EXIT_OK, EXIT_STOPPED
from neardup.indexer.job import fingerprint_function
from neardup.indexer.query import SliceSpec, selection
from neardup.indexer.reader import SliceReader
from neardup.indexer.retry import Retrier
from neardup.indexer.stats import JobStats
from neardup.indexer.writer import BulkUpdater
from tests.engine_support import (
    bulk_load,
    count,
    create_index,
    delete_index,
    index_document,
    search,
    update_document,
    without_fingerprint,
)
from tests.plugins.corpora import neardup_env, run_neardup, with_seed

pytestmark = pytest.mark.timeout(600)

FIELDS = ["title", "body"]



@pytest.fixture(scope="module")
def fp() -> Fingerprinter:
    return Fingerprinter(FingerprintParams())


@pytest.fixture
def new_index(es: Any) -> Iterator[Any]:
    """Factory: ``new_index(docs, mappings=None, shards=2)`` → name of a fresh index (deleted after)."""
    names: list[str] = []

    def make(docs: list[dict[str, Any]], mappings: dict[str, Any] | None = None, shards: int = 2,
             id_field: str = "id", **settings: Any) -> str:
        name = f"indexer-test-{uuid.uuid4().hex[:10]}"
        names.append(name)
        create_index(es, name, settings={"number_of_shards": shards, "number_of_replicas": 0, **settings},
                     mappings=mappings)
        if docs:
            bulk_load(es, name, docs, id_field=id_field)
        return name

    yield make
    for name in names:
        delete_index(es, name)


def all_docs(es: Any, index: str) -> dict[str, dict[str, Any]]:
    es.indices.refresh(index=index)
    hits = search(es, index, size=10_000, seq_no_primary_term=True, version=True,
                  query={"match_all": {}})["hits"]["hits"]
    return {h["_id"]: h for h in hits}


def index_cmd(es_url: str, index: str, *args: str, **env: str) -> tuple[subprocess.CompletedProcess, dict]:
    result = run_neardup(["index", "--index", index, "--json", *args], es_url, **env)
    try:
        summary = json.loads(result.stdout) if result.stdout.strip() else {}
    except json.JSONDecodeError:
        summary = {}
    return result, summary


def stderr(result: subprocess.CompletedProcess) -> str:
    return result.stderr.decode(errors="replace")


def without_neardup(source: dict[str, Any]) -> str:
    """Order-sensitive serialisation of a _source minus neardup (a checksum input)."""
    return json.dumps({k: v for k, v in source.items() if k != FIELD}, ensure_ascii=False)


def reuters_sample(reuters_docs: list[dict[str, Any]], count: int) -> list[dict[str, Any]]:
    return [dict(d) for d in reuters_docs[:count]]


MIXED_DOCS = [
    {"id": "ok-1", "title": "Fox", "body": "The quick brown fox jumps over the lazy dog again and again today."},
    {"id": "ok-2", "title": "Rates", "body": "Central bank keeps interest rates unchanged for the quarter, officials said."},
    {"id": "list", "title": ["Part one", "part two"], "body": "Lists of strings count as text for the job."},
    {"id": "no-field", "headline": "no title, no body"},
    {"id": "non-string", "title": 12, "body": True},
    {"id": "empty", "title": "", "body": "   "},
    {"id": "keep-extra", "title": "Extra", "body": "A document whose neardup object has a key of a later feature.",
     FIELD: {"note": 42}},
    {"id": "unicode", "title": "Ünïcödé ё", "body": "Съешь же ещё этих мягких французских булок, да выпей чаю.",
     "price": 1.5, "tags": ["a", "b"], "nested": {"deep": [1, 2, 3], "none": None, "z": "\u0001 / \u00e9"}},
]


# --- the basic run ------------------------------------------------------------------------------------

def test_index_enriches_counts_skips_and_leaves_the_rest_unchanged(es, es_url, new_index, fp):
    name = new_index(MIXED_DOCS)
    result, summary = index_cmd(es_url, name)
    assert result.returncode == EXIT_OK, stderr(result)
    assert summary["read"] == len(MIXED_DOCS)
    assert (summary["updated"], summary["skipped_no_field"], summary["skipped_non_string"],
            summary["skipped_empty"], summary["failed"]) == (5, 1, 1, 1, 0)

    docs = all_docs(es, name)
    originals = {d["id"]: d for d in MIXED_DOCS}
    for doc_id, hit in docs.items():
        source, original = hit["_source"], originals[doc_id]
        assert without_neardup(source) == without_neardup(original), doc_id
        if doc_id in ("no-field", "non-string", "empty"):
            assert FIELD not in source
            assert hit["_version"] == 1
            continue
        texts = [t if isinstance(t, str) else "\n".join(t) for t in (original["title"], original["body"])]
        expected = fp.fingerprint_fields(texts).to_source()
        assert {k: source[FIELD][k] for k in expected} == expected, doc_id
    assert docs["keep-extra"]["_source"][FIELD]["note"] == 42

    mapping = es.indices.get_mapping(index=name)[name]["mappings"]["properties"][FIELD]["properties"]
    assert mapping["super"] == {"type": "keyword", "doc_values": False} and mapping["sig"]["type"] == "binary"


def test_second_run_reads_nothing_and_force_rewrites_nothing(es, es_url, new_index):
    name = new_index(MIXED_DOCS)
    first, _ = index_cmd(es_url, name)
    assert first.returncode == EXIT_OK, stderr(first)
    before = all_docs(es, name)

    again, summary = index_cmd(es_url, name)
    assert again.returncode == EXIT_OK, stderr(again)
    # the five enriched ones are left out by the query; the three without text are read again
    assert (summary["skipped_current"], summary["read"], summary["updated"]) == (5, 3, 0)

    forced, summary = index_cmd(es_url, name, "--force")
    assert forced.returncode == EXIT_OK, stderr(forced)
    assert (summary["read"], summary["unchanged"], summary["updated"]) == (8, 5, 0)
    after = all_docs(es, name)
    assert {i: (h["_seq_no"], h["_version"]) for i, h in after.items()} == \
        {i: (h["_seq_no"], h["_version"]) for i, h in before.items()}


def test_summary_text_names_every_count(es_url, engine, new_index):
    name = new_index(MIXED_DOCS)
    result = run_neardup(["index", "--index", name], es_url)
    assert result.returncode == EXIT_OK, stderr(result)
    text = result.stdout.decode()
    for needle in ("read 8 documents", "updated            5", "no text field    1", "non-string value 1",
                   "empty text       1", "conflicts retried  0", "deleted meanwhile  0", "failed             0",
                   f"upstream           {engine.engine} {engine.version} at {es_url.rstrip('/')}\n"):
        assert needle in text, text


def test_dynamic_strict_index_gets_the_mapping_explicitly(es, es_url, new_index):
    mappings = {"dynamic": "strict", "properties": {"id": {"type": "keyword"}, "title": {"type": "text"},
                                                    "body": {"type": "text"}}}
    name = new_index([d for d in MIXED_DOCS[:2]], mappings=mappings)
    result, summary = index_cmd(es_url, name)
    assert result.returncode == EXIT_OK, stderr(result)
    assert summary["updated"] == 2


def test_custom_routing_is_kept(es, es_url, new_index, fp):
    name = new_index([])
    for doc in MIXED_DOCS[:2]:
        index_document(es, name, doc["id"], doc, routing="r-" + doc["id"])
    es.indices.refresh(index=name)
    result, summary = index_cmd(es_url, name)
    assert result.returncode == EXIT_OK, stderr(result)
    assert summary["updated"] == 2
    got = es.get(index=name, id="ok-1", routing="r-ok-1")["_source"]
    assert got[FIELD]["v"] == fp.version


# --- the writes are searchable when the command returns ----------------------------------------------

def test_index_refreshes_what_it_wrote_unless_told_not_to(es, es_url, new_index):
    """With periodic refreshes off, only the job's own refresh makes the fingerprints searchable."""
    refreshed, unrefreshed = (new_index(MIXED_DOCS[:3], refresh_interval="-1") for _ in range(2))
    result, summary = index_cmd(es_url, refreshed)
    assert result.returncode == EXIT_OK and summary["updated"] == 3, stderr(result)
    assert without_fingerprint(es, refreshed) == 0
    result, summary = index_cmd(es_url, unrefreshed, "--no-refresh")
    assert result.returncode == EXIT_OK and summary["updated"] == 3, stderr(result)
    assert without_fingerprint(es, unrefreshed) == 3


def test_the_clause_limit_is_the_engines(es_url, engine):
    client = make_client(load_config(environ={"NEARDUP_UPSTREAM__URLS": es_url}).upstream, engine)
    try:
        assert max_clause_count(client) == (1024 if engine.is_opensearch else 4096)
    finally:
        client.close()


# --- selection: --since and --slice --------------------------------------------------------------------

def test_since_only_touches_recent_documents(es, es_url, new_index):
    docs = [dict(d, **{"@timestamp": "2020-01-01T00:00:00Z"}) for d in MIXED_DOCS[:2]]
    docs += [dict(MIXED_DOCS[2], **{"@timestamp": "2030-01-01T00:00:00Z"})]
    name = new_index(docs)
    result, summary = index_cmd(es_url, name, "--since", "2025-01-01")
    assert result.returncode == EXIT_OK, stderr(result)
    assert (summary["read"], summary["updated"]) == (1, 1)
    assert [i for i, h in all_docs(es, name).items() if FIELD in h["_source"]] == ["list"]

    bad, _ = index_cmd(es_url, name, "--since", "yesterday-ish")
    assert bad.returncode == EXIT_STOPPED and "--since 'yesterday-ish'" in stderr(bad)
    missing, _ = index_cmd(es_url, name, "--since", "now-1d", "--since-field", "updated")
    assert missing.returncode == EXIT_STOPPED
    assert "'updated' is not mapped" in stderr(missing) and "@timestamp" in stderr(missing)


def test_slices_of_several_hosts_cover_every_document_once(es, es_url, new_index, reuters_docs):
    name = new_index(reuters_sample(reuters_docs, 600), shards=3)
    summaries = []
    for host in range(3):
        result, summary = index_cmd(es_url, name, "--slice", f"{host}/3", "--workers", "2", "--batch-size", "50")
        assert result.returncode == EXIT_OK, stderr(result)
        assert len(summary["slices"]) == 2
        summaries.append(summary)
    docs = all_docs(es, name)
    enriched = [h for h in docs.values() if FIELD in h["_source"]]
    assert sum(s["read"] for s in summaries) == 600
    assert len(enriched) == sum(s["updated"] for s in summaries)
    assert all(h["_version"] == 2 for h in enriched)  # written exactly once
    assert len(enriched) + sum(s["skipped_empty"] + s["skipped_no_field"] for s in summaries) == 600


def test_bad_slice_option_is_a_usage_error(es_url):
    result = run_neardup(["index", "--index", "whatever", "--slice", "2/2"], es_url)
    assert result.returncode == 2 and "0 <= I < N" in stderr(result)


# --- clear errors --------------------------------------------------------------------------------------

def assert_one_clear_message(result: subprocess.CompletedProcess, *needles: str) -> None:
    text = stderr(result)
    assert result.returncode == EXIT_STOPPED, text
    assert "Traceback" not in text
    for needle in needles:
        assert needle in text, text


def test_missing_index(es_url):
    result = run_neardup(["index", "--index", f"indexer-missing-{uuid.uuid4().hex[:6]}"], es_url)
    assert_one_clear_message(result, "no such index: indexer-missing-")


def test_wrong_field_lists_the_text_fields(es, es_url, new_index):
    name = new_index(MIXED_DOCS[:2])
    result = run_neardup(["index", "--index", name, "--field", "titel"], es_url)
    assert_one_clear_message(result, "has the field 'titel'", "text fields in its mapping: body, id, title")
    assert FIELD not in es.indices.get_mapping(index=name)[name]["mappings"]["properties"]


@pytest.mark.parametrize("neardup_mapping, needle", [
    ({"type": "keyword"}, "neardup is mapped as 'keyword'"),
    ({"properties": {"super": {"type": "text"}}}, "neardup.super is mapped as 'text'"),
    ({"properties": {"sig": {"type": "keyword"}}}, "neardup.sig is mapped as 'keyword'"),
])
def test_mapping_conflict_changes_nothing(es, es_url, new_index, neardup_mapping, needle):
    mappings = {"properties": {"title": {"type": "text"}, "body": {"type": "text"}, FIELD: neardup_mapping}}
    name = new_index(MIXED_DOCS[:2], mappings=mappings)
    before_mapping = es.indices.get_mapping(index=name)[name]
    before = all_docs(es, name)
    result = run_neardup(["index", "--index", name], es_url)
    assert_one_clear_message(result, "conflicts with the fields neardup writes", needle, "nothing was changed")
    assert es.indices.get_mapping(index=name)[name] == before_mapping
    assert {i: h["_seq_no"] for i, h in all_docs(es, name).items()} == {i: h["_seq_no"] for i, h in before.items()}


def test_bad_credentials(secure_es):
    result = run_neardup(["index", "--index", "anything"], secure_es.url,
                         NEARDUP_UPSTREAM__USERNAME=secure_es.username,
                         NEARDUP_UPSTREAM__PASSWORD="wrong-password")
    assert_one_clear_message(result, "401", "credentials")


def test_unreachable_cluster_at_start():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    result = run_neardup(["index", "--index", "x"], f"http://127.0.0.1:{port}")
    assert_one_clear_message(result, f"127.0.0.1:{port}")


# --- changes while the job runs -------------------------------------------------------------------------

def page_writer(es_url: str, name: str, fp: Fingerprinter,
                whole: bool = False) -> tuple[Any, SliceReader, BulkUpdater]:
    """A client, a reader of pages of 100 of ``name`` and the job's writer (``whole``: writing
    whole documents), as a worker builds them."""
    client = make_client(load_config(environ={"NEARDUP_UPSTREAM__URLS": es_url}).upstream)
    retrier = Retrier(es_url, 3)
    reader = SliceReader(client, retrier, name, selection(version=fp.version, force=False, since=None,
                                                          since_field="@timestamp"),
                         SliceSpec(), 100, "1m", FIELDS, whole_sources=whole)
    updater = BulkUpdater(client, retrier, fingerprint_function(FIELDS, fp), FIELDS, 3, JobStats(),
                          whole_indices=frozenset({name}) if whole else frozenset())
    return client, reader, updater


def test_conflicting_writes_are_reread_and_deleted_documents_stay_deleted(es, es_url, new_index, fp, reuters_docs):
    """Read a page, change and delete documents, then write: nothing stale, nothing resurrected."""
    docs = [d for d in reuters_sample(reuters_docs, 80) if d["body"]][:40]
    name = new_index(docs)
    client, reader, updater = page_writer(es_url, name, fp)
    stats = updater.stats
    try:
        reader.open()
        hits = next(reader.pages())
        replaced = [d["id"] for d in docs[:10]]
        patched = [d["id"] for d in docs[10:20]]
        deleted = [d["id"] for d in docs[20:30]]
        for doc_id in replaced:
            index_document(es, name, doc_id, {"id": doc_id, "title": "replaced", "body": f"new text {doc_id} " * 20})
        for doc_id in patched:
            update_document(es, name, doc_id, {"body": f"patched body {doc_id} " * 20})
        for doc_id in deleted:
            es.delete(index=name, id=doc_id)
        updater.write([updater.pending_from_hit(h) for h in hits])
    finally:
        reader.close()
        client.close()
    assert stats.conflicts_retried == 20
    assert stats.deleted_meanwhile == 10
    assert stats.updated == 30 and stats.failed == 0
    final = all_docs(es, name)
    assert not set(deleted) & set(final)
    for doc_id in replaced + patched:
        source = final[doc_id]["_source"]
        assert "new text" in source["body"] or "patched body" in source["body"]
        assert source[FIELD] == fp.fingerprint_fields([source["title"], source["body"]]).to_source()


def test_expired_point_in_time_is_reopened(es, es_url, new_index, fp, reuters_docs):
    name = new_index(reuters_sample(reuters_docs, 50))
    config = load_config(environ={"NEARDUP_UPSTREAM__URLS": es_url})
    client = make_client(config.upstream)
    reader = SliceReader(client, Retrier(es_url, 1), name, {"match_all": {}}, SliceSpec(), 20, "1m", FIELDS)
    try:
        reader.open()
        pages = reader.pages()
        first = next(pages)
        client.close_point_in_time(id=reader.pit_id)  # what expiry does to it
        rest = [hit for page in pages for hit in page]
    finally:
        reader.close()
        client.close()
    assert reader.pit_restarts == 1
    # the slice is read again from its start: every document is seen, the first page twice
    assert {h["_id"] for h in rest} == {d["id"] for d in reuters_sample(reuters_docs, 50)}
    assert len(first) == 20


def test_concurrent_updates_and_deletes_while_the_job_runs(es, es_url, new_index, fp, reuters_docs):
    docs = reuters_sample(reuters_docs, 1500)
    name = new_index(docs)
    job = subprocess.Popen([sys.executable, "-m", "neardup", "index", "--index", name, "--json",
                            "--batch-size", "20", "--workers", "2"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=neardup_env(es_url))
    replaced: dict[str, str] = {}
    deleted: set[str] = set()
    i = 0
    while job.poll() is None and i < len(docs) - 1:
        doc_id = docs[i]["id"]
        if i % 3 == 0:
            deleted.add(doc_id)
            es.delete(index=name, id=doc_id)
        else:
            body = f"replacement {doc_id}: " + docs[i + 1]["body"]
            index_document(es, name, doc_id, {**docs[i], "body": body})
            replaced[doc_id] = body
        i += 1
    out, err = job.communicate(timeout=600)
    assert job.returncode == EXIT_OK, err.decode()
    first = json.loads(out)
    assert replaced and deleted and first["failed"] == 0
    print("first run:", {k: first[k] for k in ("read", "updated", "conflicts_retried", "deleted_meanwhile")})

    second, _ = index_cmd(es_url, name)
    assert second.returncode == EXIT_OK, stderr(second)
    final = all_docs(es, name)
    assert not deleted & set(final), "a deleted document came back"
    assert len(final) == len(docs) - len(deleted)
    for doc_id, hit in final.items():
        source = hit["_source"]
        if doc_id in replaced:
            assert source["body"] == replaced[doc_id]
        texts = [t for t in (source["title"], source["body"])]
        if any(t.strip() for t in texts):
            assert source[FIELD] == with_seed(fp.fingerprint_fields(texts).to_source(), doc_id), doc_id


def count_enriched(es: Any, index: str, version: str) -> int:
    es.indices.refresh(index=index)
    return count(es, index, {"term": {f"{FIELD}.v": version}})


def test_sigkill_halfway_then_resume(es, es_url, new_index, fp, reuters_docs):
    # Enough documents that the job is still far from done when the poll sees 600 enriched:
    # the count lags by up to a refresh interval, and the compiled fingerprint kernels are fast.
    docs = reuters_sample(reuters_docs, 8000)
    name = new_index(docs)
    job = subprocess.Popen([sys.executable, "-m", "neardup", "index", "--index", name,
                            "--batch-size", "25", "--workers", "2"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           env=neardup_env(es_url), start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while count_enriched(es, name, fp.version) < 600:
            assert job.poll() is None, "the job finished before it could be killed"
            assert time.monotonic() < deadline
            time.sleep(0.2)
    finally:
        os.killpg(job.pid, signal.SIGKILL)
        job.wait()
    time.sleep(1.5)
    killed_at = count_enriched(es, name, fp.version)
    time.sleep(1.5)
    assert count_enriched(es, name, fp.version) == killed_at, "workers kept running after the kill"
    assert killed_at < len(docs) - 100

    before = {i: (h["_seq_no"], h["_version"]) for i, h in all_docs(es, name).items()
              if FIELD in h["_source"]}
    result, summary = index_cmd(es_url, name)
    assert result.returncode == EXIT_OK, stderr(result)
    assert summary["skipped_current"] == len(before)
    final = all_docs(es, name)
    for doc_id, (seq_no, version) in before.items():
        assert (final[doc_id]["_seq_no"], final[doc_id]["_version"]) == (seq_no, version), doc_id
    for doc_id, hit in final.items():
        source = hit["_source"]
        if (source["title"] + source["body"]).strip():
            assert hit["_version"] == 2, f"{doc_id} enriched {hit['_version'] - 1} times"
            assert source[FIELD] == with_seed(fp.fingerprint_fields([source["title"], source["body"]]).to_source(),
                                              doc_id)


# --- an outage in the middle of the job ------------------------------------------------------------------

class CuttableProxy:
    """A TCP forwarder to Elasticsearch that can be cut (connections refused) and restored."""

    def __init__(self, target: str) -> None:
        host, port = target.split("//", 1)[1].rsplit(":", 1)
        self.target = (host, int(port))
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.connections: list[socket.socket] = []
        self.lock = threading.Lock()
        self.open()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def open(self) -> None:
        if self.listener.fileno() == -1:
            self.listener = socket.socket()
            self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self.listener.bind(("127.0.0.1", self.port))
        self.listener.listen(50)
        threading.Thread(target=self._accept, args=(self.listener,), daemon=True).start()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            with self.lock:
                self.connections += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for s in (source, sink):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def cut(self) -> None:
        self.listener.close()
        with self.lock:
            for s in self.connections:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()
            self.connections.clear()


def test_lasting_outage_stops_with_how_to_resume(es, es_url, new_index, fp, reuters_docs):
    docs = reuters_sample(reuters_docs, 2000)
    name = new_index(docs)
    proxy = CuttableProxy(es_url)
    job = subprocess.Popen([sys.executable, "-m", "neardup", "index", "--index", name, "--json",
                            "--batch-size", "20", "--workers", "2"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           env=neardup_env(proxy.url, NEARDUP_INDEXER__MAX_RETRIES="2"))
    try:
        deadline = time.monotonic() + 300
        while count_enriched(es, name, fp.version) < 200:
            assert job.poll() is None and time.monotonic() < deadline
            time.sleep(0.1)
        proxy.cut()
        out, err = job.communicate(timeout=300)
    finally:
        if job.poll() is None:
            job.kill()
    message = err.decode()
    assert job.returncode == EXIT_STOPPED, message
    assert f"the cluster at {proxy.url} is unreachable" in message
    assert "run the same command again to resume (already-enriched documents are skipped)" in message
    assert "Traceback" not in message
    partial = json.loads(out)
    assert partial["stopped"] and partial["updated"] >= 200

    proxy.open()
    result, summary = index_cmd(proxy.url, name)
    assert result.returncode == EXIT_OK, stderr(result)
    assert summary["skipped_current"] >= 200
    enriched = count_enriched(es, name, fp.version)
    with_text = sum(1 for d in docs if (d["title"] + d["body"]).strip())
    assert enriched == with_text
    proxy.cut()
