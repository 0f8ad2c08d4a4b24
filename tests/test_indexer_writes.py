"""Whole-document writes of ``neardup index``: bytes kept, conditional, and the indices that fall
back to partial updates."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from typing import Any

import pytest

from neardup.config import load_config
from neardup.fingerprint import FIELD, Fingerprinter, FingerprintParams
from neardup.fingerprint.splice import value_spans, with_field
from neardup.indexer import writer
from neardup.indexer.client import make_client
from neardup.indexer.retry import Retrier
from neardup.indexer.wholedoc import settings_allow, source_stored_as_sent, whole_document_indices
from neardup.indexer.writer import Pending, bulk_operations, by_size, merged_object
from tests.engine_support import index_document, search, update_document
from tests.plugins.corpora import COMMAND_TIMEOUT, ROOT, neardup_env, run_neardup
from tests.test_indexer_es import new_index, page_writer  # noqa: F401 - new_index: the fixture

pytestmark = pytest.mark.timeout(300)

FIELDS = ["title", "body"]

#: Documents as bytes a client may send: spacing, escapes, number spellings and key order that a
#: decode and encode would change (without line breaks: see ``test_line_breaks_...``).
RAW_DOCS = {
    "plain": b'{ "title" : "Caf\\u00e9 prices",\t  "body": "Coffee prices rose again in the market today, traders said.",'
             b' "n": 1.0e2, "big": 9007199254740993, "tags": [ "a" , "b" ] }',
    "with-neardup": b'{"body":"Oil output falls as the cartel trims supply for a third month running.",'
                    b'"neardup" : { "note" : 42 , "nested": {"k": 1} },"title":"Oil", "z": 1E3}',
    "trailing": b'{"title":"Wheat","body":"Wheat harvest forecast raised after a mild and wet spring season."}  ',
}


@pytest.fixture(scope="module")
def fp() -> Fingerprinter:
    return Fingerprinter(FingerprintParams())


def http(es_url: str, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
    request = urllib.request.Request(f"{es_url}{path}", data=body, method=method,
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def put_raw(es_url: str, index: str, docs: dict[str, bytes]) -> None:
    for doc_id, body in docs.items():
        status, answer = http(es_url, "PUT", f"/{index}/_doc/{doc_id}", body)
        assert status in (200, 201), answer
    http(es_url, "POST", f"/{index}/_refresh")


def stored_source(es_url: str, index: str, doc_id: str) -> bytes:
    status, body = http(es_url, "GET", f"/{index}/_source/{doc_id}")
    assert status == 200, body
    return body


def without_field(source: bytes, name: str) -> bytes:
    """``source`` with the bytes of ``"name": value`` (and its comma) cut out."""
    spans = value_spans(source)
    assert spans is not None and name in spans
    start, end = spans[name]
    key = source.rindex(json.dumps(name).encode(), 0, start)
    comma = source.rindex(b",", 0, key) if source[:key].rstrip().endswith(b",") else key
    if comma == key:  # the first key: cut the comma after the value instead
        after = source.index(b",", end) + 1 if source[end:].lstrip().startswith(b",") else end
        return source[:key] + source[after:].lstrip()
    return source[:comma] + source[end:]


# --- pure parts -----------------------------------------------------------------------------------

def test_with_field_inserts_or_replaces_and_keeps_every_other_byte():
    source = b'{ "a" : 1.0e2 ,\n "b": "\\u00e9" }  '
    doc = json.loads(source)
    added = with_field(source, doc, "neardup", {"v": 1})
    assert added == b'{ "a" : 1.0e2 ,\n "b": "\\u00e9" ,"neardup":{"v":1}}  '
    replaced = with_field(added, json.loads(added), "a", [1])
    assert replaced == b'{ "a" : [1] ,\n "b": "\\u00e9" ,"neardup":{"v":1}}  '
    assert with_field(b"{}", {}, "x", "é") == '{"x":"é"}'.encode()
    twice = b'{"neardup": 1, "neardup": 2}'
    assert with_field(twice, json.loads(twice), "neardup", 3) is None
    unicode = '{"ü": "ё", "neardup": {"v": 0}, "z": 1}'.encode()
    assert with_field(unicode, json.loads(unicode), "neardup", {"v": 2}) == '{"ü": "ё", "neardup": {"v":2}, "z": 1}'.encode()


def test_merged_object_is_a_partial_updates_merge():
    stored = {"note": 42, "nested": {"k": 1, "j": 2}, "list": [1, 2], "cluster": "c1"}
    changes = {"nested": {"k": 3}, "list": [3], "cluster": None, "v": 1}
    assert merged_object(stored, changes) == {"note": 42, "nested": {"k": 3, "j": 2}, "list": [3],
                                              "cluster": None, "v": 1}


def test_a_write_that_changes_nothing_is_a_partial_update_and_large_pages_are_split():
    source = {"title": "t", FIELD: {"v": 1, "note": 2}}
    raw = json.dumps(source).encode()
    same = Pending("i", "1", None, 5, 1, {"v": 1}, raw=raw, source=source)
    changed = Pending("i", "2", None, 5, 1, {"v": 2}, raw=raw, source=source)
    partial = Pending("i", "3", None, 5, 1, {"v": 2})
    operations = bulk_operations([same, changed, partial])
    assert [next(iter(op)) for op in operations[0::2]] == ["update", "index", "update"]  # type: ignore[arg-type]
    assert operations[2] == {"index": {"_index": "i", "_id": "2", "if_seq_no": 5, "if_primary_term": 1,
                                       "pipeline": "_none"}}
    assert json.loads(operations[3]) == {"title": "t", FIELD: {"v": 2, "note": 2}}  # type: ignore[arg-type]
    broken = Pending("i", "4", None, 5, 1, {"v": 2}, raw=b'{"title":\n"t"}', source={"title": "t"})
    assert next(iter(bulk_operations([broken])[0])) == "update"  # type: ignore[arg-type]
    big = [Pending("i", str(n), None, 1, 1, {"v": 1}, raw=b"{" + b" " * 600 + b"}", source={}) for n in range(5)]
    assert [len(run) for run in by_size(big, limit=1300)] == [2, 2, 1]


def test_only_sources_stored_as_sent_take_whole_documents():
    assert source_stored_as_sent({}) and source_stored_as_sent({"_source": {"enabled": True}})
    assert not source_stored_as_sent({"_source": {"excludes": ["secret"]}})
    assert not source_stored_as_sent({"_source": {"includes": ["title"]}})
    assert not source_stored_as_sent({"_source": {"enabled": False}})
    assert not source_stored_as_sent({"_source": {"mode": "synthetic"}})
    assert settings_allow({}) and settings_allow({"index": {"default_pipeline": "p"}})
    assert not settings_allow({"index": {"final_pipeline": "p"}})
    assert not settings_allow({"index": {"mode": "logsdb"}})
    assert settings_allow({"index": {"mode": "logsdb", "mapping": {"source": {"mode": "stored"}}}})
    assert not settings_allow({"index": {"mapping": {"source": {"mode": "synthetic"}}}})
    assert not settings_allow({"index": {"derived_source": {"enabled": "true"}}})


# --- on the cluster -------------------------------------------------------------------------------

def test_every_byte_of_the_source_but_neardup_is_kept(es, es_url, new_index, fp):
    name = new_index([])
    put_raw(es_url, name, RAW_DOCS)
    before = {doc_id: stored_source(es_url, name, doc_id) for doc_id in RAW_DOCS}
    assert before == RAW_DOCS  # the engine gives the bytes back as sent
    result = run_neardup(["index", "--index", name, "--json"], es_url)
    assert result.returncode == 0, result.stderr.decode(errors="replace")
    assert json.loads(result.stdout)["updated"] == len(RAW_DOCS)
    for doc_id, sent in RAW_DOCS.items():
        after = stored_source(es_url, name, doc_id)
        # whitespace after the object is not part of the hit's _source (nor of the object)
        assert without_field(after, FIELD) == (without_field(sent, FIELD) if b'"neardup"' in sent else sent.rstrip()), doc_id
        doc = json.loads(sent)
        written = json.loads(after)[FIELD]
        expected = fp.fingerprint_fields([doc["title"], doc["body"]]).to_source()
        assert {k: written[k] for k in expected} == expected
        if doc_id == "with-neardup":
            assert (written["note"], written["nested"]) == (42, {"k": 1})


def test_sources_with_includes_or_excludes_get_partial_updates(es, es_url, new_index, fp):
    plain = new_index([])
    excluding = new_index([], {"_source": {"excludes": ["secret"]}})
    including = new_index([], {"_source": {"includes": ["title", "body", FIELD]}})
    config = load_config(environ={"NEARDUP_UPSTREAM__URLS": es_url})
    client = make_client(config.upstream)
    try:
        retrier = Retrier(es_url, 1)
        assert whole_document_indices(client, retrier, plain) == {plain}
        assert whole_document_indices(client, retrier, excluding) == frozenset()
        assert whole_document_indices(client, retrier, including) == frozenset()
        assert whole_document_indices(client, retrier, "indexer-test-*") >= {plain}
    finally:
        client.close()
    doc = {"title": "Gold", "body": "Gold prices climb as investors look for a safe haven this week.",
           "secret": "kept out of the source"}
    for name in (excluding, including):
        index_document(es, name, "1", doc, refresh=True)
        result = run_neardup(["index", "--index", name, "--json"], es_url)
        assert result.returncode == 0, result.stderr.decode(errors="replace")
        source = es.get(index=name, id="1")["_source"]
        assert {k: v for k, v in source.items() if k != FIELD} == {k: v for k, v in doc.items() if k != "secret"}
        expected = fp.fingerprint_fields([doc["title"], doc["body"]]).to_source()
        assert {k: source[FIELD][k] for k in expected} == expected


def test_the_default_pipeline_is_skipped_and_a_final_pipeline_means_partial_updates(es, es_url, new_index):
    """Pipelines named in the settings that do not exist: an ``index`` action that ran one would
    fail, so the job succeeds only if whole-document writes skip the default pipeline and the
    index with a final pipeline gets partial updates (which run no pipeline)."""
    defaulted, final = new_index([]), new_index([])
    doc = {"title": "Sugar", "body": "Sugar exports rise on a weak currency and strong demand abroad."}
    for name in (defaulted, final):
        index_document(es, name, "1", doc, refresh=True)
    es.indices.put_settings(index=defaulted, body={"index": {"default_pipeline": "writes-test-missing"}})
    es.indices.put_settings(index=final, body={"index": {"final_pipeline": "writes-test-missing"}})
    config = load_config(environ={"NEARDUP_UPSTREAM__URLS": es_url})
    client = make_client(config.upstream)
    try:
        assert whole_document_indices(client, Retrier(es_url, 1), defaulted) == {defaulted}
        assert whole_document_indices(client, Retrier(es_url, 1), final) == frozenset()
    finally:
        client.close()
    for name in (defaulted, final):
        result = run_neardup(["index", "--index", name, "--json"], es_url)
        assert result.returncode == 0, result.stderr.decode(errors="replace")
        assert json.loads(result.stdout)["updated"] == 1, name
        source = es.get(index=name, id="1")["_source"]
        assert FIELD in source and {k: v for k, v in source.items() if k != FIELD} == doc, name


def test_concurrent_writes_are_not_lost_and_deleted_documents_stay_deleted(es, es_url, new_index, fp):
    """Read a page whole, then change, replace and delete documents, then write the whole
    documents read: each changed one is read again, none is resurrected."""
    name = new_index([])
    docs = {f"d{n}": {"title": f"Story {n}", "body": f"Story number {n} tells of markets, prices and trade. " * 3}
            for n in range(30)}
    for doc_id, doc in docs.items():
        index_document(es, name, doc_id, doc)
    es.indices.refresh(index=name)
    client, reader, updater = page_writer(es_url, name, fp, whole=True)
    stats = updater.stats
    patched, replaced, deleted = ["d0", "d1", "d2"], ["d3", "d4"], ["d5", "d6", "d7"]
    try:
        reader.open()
        hits = next(reader.pages())
        pending = [p for p in (updater.pending_from_hit(h) for h in hits) if p is not None]
        assert len(pending) == 30 and all(p.raw is not None for p in pending)
        for doc_id in patched:
            update_document(es, name, doc_id, {"extra": f"written meanwhile {doc_id}"})
        for doc_id in replaced:
            index_document(es, name, doc_id, {"title": "Replaced", "body": f"a new text for {doc_id} " * 5})
        for doc_id in deleted:
            es.delete(index=name, id=doc_id)
        updater.write(pending)
    finally:
        reader.close()
        client.close()
    # a whole-document write on a deleted document is a version conflict: read again, found gone
    assert (stats.conflicts_retried, stats.deleted_meanwhile) == (8, 3)
    assert (stats.updated, stats.failed) == (27, 0)
    es.indices.refresh(index=name)
    final = {h["_id"]: h["_source"] for h in search(es, name, size=100, query={"match_all": {}})["hits"]["hits"]}
    assert set(final) == set(docs) - set(deleted)
    for doc_id in patched:
        assert final[doc_id]["extra"] == f"written meanwhile {doc_id}"
    for doc_id in replaced:
        assert final[doc_id]["title"] == "Replaced"
    for doc_id, source in final.items():
        assert source[FIELD] == fp.fingerprint_fields([source["title"], source["body"]]).to_source(), doc_id


def test_only_the_workers_load_the_compiled_kernels(es_url, new_index):
    """The parent of ``neardup index`` reads no text: numba (over 100 MB resident) stays out of it."""
    name = new_index([{"id": "1", "title": "Tin", "body": "Tin prices steady as the buffer stock manager waits."}])
    code = ("import sys\nfrom neardup.cli import main\n"
            f"code = main(['index', '--index', {name!r}, '--json'])\n"
            "print('numba' in sys.modules, file=sys.stderr)\nraise SystemExit(code)\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=COMMAND_TIMEOUT,
                            env=neardup_env(es_url), cwd=ROOT, check=False)
    assert result.returncode == 0, result.stderr.decode(errors="replace")
    assert json.loads(result.stdout)["updated"] == 1
    assert result.stderr.decode().splitlines()[-1] == "False"


def test_a_page_of_large_documents_is_written_in_several_requests(es, es_url, new_index, fp, monkeypatch):
    monkeypatch.setattr(writer, "MAX_BULK_BYTES", 120_000)  # two of these documents
    name = new_index([])
    docs = {f"big-{n}": {"title": f"Long report {n}",
                         "body": " ".join(f"word{(n * 7919 + k) % 5000} trade" for k in range(4000))}
            for n in range(6)}
    for doc_id, doc in docs.items():
        index_document(es, name, doc_id, doc)
    es.indices.refresh(index=name)
    client, reader, updater = page_writer(es_url, name, fp, whole=True)
    sizes: list[int] = []
    bulk = client.bulk

    def counting_bulk(*, operations: Any, **options: Any) -> Any:
        sizes.append(len(operations) // 2)
        return bulk(operations=operations, **options)

    client.bulk = counting_bulk  # type: ignore[method-assign]
    try:
        reader.open()
        hits = next(reader.pages())
        updater.write([p for p in (updater.pending_from_hit(h) for h in hits) if p is not None])
    finally:
        reader.close()
        client.close()
    assert sorted(sizes) == [2, 2, 2] and updater.stats.updated == 6
    for doc_id, doc in docs.items():
        source = es.get(index=name, id=doc_id)["_source"]
        assert {k: v for k, v in source.items() if k != FIELD} == doc
        assert source[FIELD] == fp.fingerprint_fields([doc["title"], doc["body"]]).to_source()


def test_queued_writes_are_sent_together_once_a_batch_is_gathered(monkeypatch):
    updater = writer.BulkUpdater(client=None, retrier=None, fingerprint_source=lambda s: ("ok", None),  # type: ignore[arg-type]
                                 source_fields=FIELDS, max_retries=1, stats=None, write_batch=5)  # type: ignore[arg-type]
    sent: list[list[str]] = []
    monkeypatch.setattr(updater, "write", lambda pending: sent.append([p.id for p in pending]))

    def page(*ids: str) -> list[Pending]:
        return [Pending(index="i", id=i, routing=None, seq_no=1, primary_term=1, neardup={}) for i in ids]

    updater.queue(page("a", "b", "c"))
    assert sent == []
    updater.queue(page("d", "e", "f"))
    assert sent == [["a", "b", "c", "d", "e", "f"]]
    updater.queue(page("g"))
    updater.flush()
    assert sent[1:] == [["g"]]
    big = page("large")
    big[0].raw = b"x" * writer.MAX_BULK_BYTES
    updater.queue(big)
    assert sent[2:] == [["large"]]
