"""``neardup enrich``, ``neardup load`` (with --on-duplicate) and ``neardup duplicates``."""

from __future__ import annotations

import csv
import html
import io
import json
import tarfile
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from neardup.fingerprint import FIELD, Fingerprinter, FingerprintParams
from neardup.fingerprint.matching import DUPLICATE_OF_MAPPING, similarity
from neardup.indexer.errors import EXIT_DOCUMENTS_FAILED, EXIT_OK, EXIT_STOPPED
from tests.engine_support import count, create_index, delete_index, index_document, search, without_fingerprint
from tests.plugins.corpora import run_neardup, with_seed

pytestmark = pytest.mark.timeout(600)

#: Reuters stories with natural near-duplicates among them (corrections and re-sends), and others.
STORY_IDS = ["1", "2", "3", "4", "16", "230", "240", "347", "414", "421"]
THRESHOLD = 0.9



@pytest.fixture(scope="module")
def fp() -> Fingerprinter:
    return Fingerprinter(FingerprintParams())


@pytest.fixture(scope="module")
def stories(reuters_docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    by_id = {d["id"]: d for d in reuters_docs}
    return [by_id[i] for i in STORY_IDS]


@pytest.fixture
def index_name(es: Any) -> Iterator[str]:
    name = f"indexer-load-{uuid.uuid4().hex[:10]}"
    yield name
    delete_index(es, name)


def write_lines(path: Path, docs: list[Any]) -> Path:
    path.write_text("".join((d if isinstance(d, str) else json.dumps(d)) + "\n" for d in docs), encoding="utf-8")
    return path


def brute_force_duplicates(docs: list[dict[str, Any]], fp: Fingerprinter, threshold: float,
                           earlier: list[dict[str, Any]] = ()) -> dict[str, str]:
    """id → id of the most similar earlier document at or above the threshold (the oracle)."""
    seen = [(d["id"], fp.fingerprint_fields([d["title"], d["body"]])) for d in earlier]
    found = {}
    for doc in docs:
        f = fp.fingerprint_fields([doc["title"], doc["body"]])
        scored = [(similarity(f, g, "resemblance"), other) for other, g in seen if other != doc["id"]]
        best = max((s for s in scored if s[0] >= threshold and s[0] > 0), default=None, key=lambda s: s[0])
        if best:
            found[doc["id"]] = best[1]
        seen.append((doc["id"], f))
    return found


# --- enrich ---------------------------------------------------------------------------------------------

def test_enrich_adds_fingerprints_keeps_bytes_and_reports_bad_lines(tmp_path, fp, stories):
    good = '{{"id": "x", "n": 1e5, "t": "caf\\u00e9", "title": "T", "body": {}}}'.format(json.dumps(stories[0]["body"]))
    lines = [good, "this is not json", json.dumps(stories[1]), "", '{"id": "y", "title": 5}', "[1]"]
    source = write_lines(tmp_path / "in.jsonl", lines)
    result = run_neardup(["enrich", str(source)], "http://127.0.0.1:1")  # no Elasticsearch needed
    out = result.stdout.decode().split("\n")[:-1]
    err = result.stderr.decode()
    assert result.returncode == EXIT_DOCUMENTS_FAILED
    assert len(out) == len(lines)
    assert out[0].startswith(good[:-1] + ',"neardup":')
    assert json.loads(out[0])[FIELD] == fp.fingerprint_fields(["T", stories[0]["body"]]).to_source()
    assert json.loads(out[2])[FIELD] == fp.fingerprint_fields([stories[1]["title"], stories[1]["body"]]).to_source()
    assert (out[1], out[3], out[4], out[5]) == (lines[1], "", lines[4], "[1]")
    assert "line 2: not valid JSON" in err and "line 6: not a JSON object" in err
    assert "6 lines: 2 fingerprinted, 1 without text" in err and "2 bad (lines 2, 6)" in err

    piped = run_neardup(["enrich"], "http://127.0.0.1:1", input=(json.dumps(stories[2]) + "\n").encode())
    assert piped.returncode == EXIT_OK
    assert FIELD in json.loads(piped.stdout)


def test_enrich_reports_a_line_that_is_not_utf8(tmp_path):
    source = tmp_path / "latin1.jsonl"
    source.write_bytes(b'{"body": "caf\xe9"}\n{"body": "fine text here"}\n')
    result = run_neardup(["enrich", str(source)], "http://127.0.0.1:1")
    assert result.returncode == EXIT_DOCUMENTS_FAILED
    assert result.stdout.split(b"\n")[0] == b'{"body": "caf\xe9"}'
    assert "line 1: not UTF-8" in result.stderr.decode()


def test_enrich_missing_file_is_one_message():
    result = run_neardup(["enrich", "/nonexistent/file.jsonl"], "http://127.0.0.1:1")
    assert result.returncode == 2 and "cannot read /nonexistent/file.jsonl" in result.stderr.decode()
    assert "Traceback" not in result.stderr.decode()


# --- load ----------------------------------------------------------------------------------------------

def load(es_url: str, index: str, file: Path, *args: str) -> tuple[Any, dict[str, Any]]:
    result = run_neardup(["load", "--index", index, str(file), "--json", "--refresh", *args], es_url)
    summary = json.loads(result.stdout) if result.stdout.strip() else {}
    return result, summary


def test_load_creates_the_index_and_stores_lines_byte_for_byte(es, es_url, index_name, tmp_path, fp, stories):
    raw = ('{{"id": "raw", "n": 1e5, "f": 1.00000000000000000001, "title": "T", "body": {}}}'
           .format(json.dumps(stories[0]["body"])))
    source = write_lines(tmp_path / "docs.jsonl", [raw, *stories[1:4], "oops"])
    result, summary = load(es_url, index_name, source)
    assert result.returncode == EXIT_DOCUMENTS_FAILED, result.stderr.decode()  # the bad line
    assert summary["created_index"] and summary["loaded"] == 4 and summary["bad_lines"][0]["line"] == 5
    with urllib.request.urlopen(f"{es_url}/{index_name}/_source/raw") as response:
        stored = response.read().decode()
    assert stored.startswith(raw[:-1] + ',"neardup":')
    got = es.get(index=index_name, id=stories[1]["id"])["_source"]
    assert got[FIELD] == with_seed(fp.fingerprint_fields([stories[1]["title"], stories[1]["body"]]).to_source(),
                                   stories[1]["id"])
    mapping = es.indices.get_mapping(index=index_name)[index_name]["mappings"]["properties"][FIELD]
    assert mapping["properties"]["super"] == {"type": "keyword", "doc_values": False}
    assert mapping["properties"]["mega"] == {"type": "keyword", "index": False, "doc_values": False}


def test_load_refreshes_what_it_wrote_unless_told_not_to(es, es_url, index_name, tmp_path, stories):
    """With periodic refreshes off, only the job's own refresh makes the documents searchable."""
    source = write_lines(tmp_path / "docs.jsonl", stories[:5])
    unrefreshed = f"{index_name}-unrefreshed"
    try:
        for name in (index_name, unrefreshed):
            create_index(es, name, settings={"refresh_interval": "-1", "number_of_replicas": 0})
        result = run_neardup(["load", "--index", index_name, str(source)], es_url)
        assert result.returncode == EXIT_OK, result.stderr.decode()
        assert (count(es, index_name), without_fingerprint(es, index_name)) == (5, 0)
        result = run_neardup(["load", "--index", unrefreshed, str(source), "--no-refresh"], es_url)
        assert result.returncode == EXIT_OK, result.stderr.decode()
        assert count(es, unrefreshed) == 0
    finally:
        delete_index(es, unrefreshed)


@pytest.mark.parametrize("mode", ["tag", "skip"])
def test_on_duplicate_within_one_run(es, es_url, index_name, tmp_path, fp, stories, mode):
    expected = brute_force_duplicates(stories, fp, THRESHOLD)
    assert expected, "the sample must hold near-duplicates"
    source = write_lines(tmp_path / "docs.jsonl", stories)
    result, summary = load(es_url, index_name, source, "--on-duplicate", mode, "--threshold", str(THRESHOLD))
    assert result.returncode == EXIT_OK, result.stderr.decode()
    records = summary[{"tag": "tagged", "skip": "skipped"}[mode]]
    reported = {r["id"]: r["duplicate_of"] for r in records}
    assert reported == expected
    stored = {h["_id"]: h["_source"] for h in search(es, index_name, size=100)["hits"]["hits"]}
    if mode == "tag":
        assert set(stored) == set(STORY_IDS)
        tags = {i: s[FIELD]["duplicate_of"] for i, s in stored.items() if "duplicate_of" in s[FIELD]}
        assert {i: tag["id"] for i, tag in tags.items()} == expected
        assert {i: tag["similarity"] for i, tag in tags.items()} == {r["id"]: r["similarity"] for r in records}
        mapping = es.indices.get_mapping(index=index_name)[index_name]["mappings"]["properties"][FIELD]
        assert mapping["properties"]["duplicate_of"] == DUPLICATE_OF_MAPPING
    else:
        assert set(stored) == set(STORY_IDS) - set(expected)


def test_tag_into_an_index_mapping_duplicate_of_as_a_keyword_stops_with_the_conflict(es, es_url, index_name,
                                                                                   tmp_path, stories):
    create_index(es, index_name, mappings={"properties": {FIELD: {"properties": {"duplicate_of": {"type": "keyword"}}}}})
    result, _ = load(es_url, index_name, write_lines(tmp_path / "docs.jsonl", stories[:3]), "--on-duplicate", "tag")
    message = result.stderr.decode()
    assert result.returncode == EXIT_STOPPED, message
    assert "neardup.duplicate_of is mapped as 'keyword', neardup needs 'object'" in message
    assert "nothing was changed" in message and count(es, index_name) == 0


def test_on_duplicate_against_the_index_and_reloading(es, es_url, index_name, tmp_path, fp, stories):
    first, rest = stories[:6], stories[6:]
    result, _ = load(es_url, index_name, write_lines(tmp_path / "a.jsonl", first))
    assert result.returncode == EXIT_OK, result.stderr.decode()
    expected = brute_force_duplicates(rest, fp, THRESHOLD, earlier=first)
    assert any(v in {d["id"] for d in first} for v in expected.values()), "need a duplicate of an indexed doc"

    result, summary = load(es_url, index_name, write_lines(tmp_path / "b.jsonl", rest),
                           "--on-duplicate", "skip", "--threshold", str(THRESHOLD))
    assert result.returncode == EXIT_OK, result.stderr.decode()
    assert {r["id"]: r["duplicate_of"] for r in summary["skipped"]} == expected

    # loading the same documents again: a document is never a duplicate of itself, but it is
    # one of any other near-duplicate the index now holds (in either order of loading)
    result, summary = load(es_url, index_name, write_lines(tmp_path / "a.jsonl", first),
                           "--on-duplicate", "skip", "--threshold", str(THRESHOLD))
    assert result.returncode == EXIT_OK
    in_index = brute_force_duplicates(first, fp, THRESHOLD, earlier=first)
    assert set(in_index) - set(brute_force_duplicates(first, fp, THRESHOLD)), "need a pair loaded in order"
    assert {r["id"] for r in summary["skipped"]} == set(in_index)


# --- duplicates ---------------------------------------------------------------------------------------

def test_duplicates_lists_verified_near_duplicates(es, es_url, index_name, tmp_path, fp, stories):
    result, _ = load(es_url, index_name, write_lines(tmp_path / "docs.jsonl", stories))
    assert result.returncode == EXIT_OK
    target = "230"
    prints = {d["id"]: fp.fingerprint_fields([d["title"], d["body"]]) for d in stories}
    expected = {i: similarity(prints[target], f, "resemblance") for i, f in prints.items()
                if i != target and similarity(prints[target], f, "resemblance") >= 0.95}
    assert expected

    found = run_neardup(["duplicates", "--index", index_name, "--id", target, "--threshold", "0.95", "--json"], es_url)
    assert found.returncode == EXIT_OK, found.stderr.decode()
    listed = json.loads(found.stdout)["duplicates"]
    assert {d["_id"]: pytest.approx(d["similarity"]) for d in listed} == expected
    assert [d["similarity"] for d in listed] == sorted((d["similarity"] for d in listed), reverse=True)

    text = run_neardup(["duplicates", "--index", index_name, "--id", target, "--threshold", "0.95"], es_url)
    assert f"{len(expected)} near-duplicate(s) at resemblance >= 0.95" in text.stdout.decode()

    missing = run_neardup(["duplicates", "--index", index_name, "--id", "nope"], es_url)
    assert missing.returncode == EXIT_STOPPED and "no document with id 'nope'" in missing.stderr.decode()


def test_duplicates_of_a_document_without_fingerprint(es, es_url, index_name):
    index_document(es, index_name, "plain", {"title": "t", "body": "b"}, refresh=True)
    result = run_neardup(["duplicates", "--index", index_name, "--id", "plain"], es_url)
    assert result.returncode == EXIT_STOPPED
    assert "has no fingerprint" in result.stderr.decode() and "neardup index" in result.stderr.decode()


# --- load: input formats and progress -------------------------------------------------------------

def reuters_sgml(stories: list[dict[str, Any]]) -> str:
    """Reuters-21578 SGML of ``stories`` (as ``neardup.corpora`` reads it back)."""
    def story(doc: dict[str, Any]) -> str:
        topics = "".join(f"<D>{t}</D>" for t in doc["topics"])
        return (f'<REUTERS TOPICS="YES" NEWID="{doc["id"]}">\n<DATE>{doc["date"]}</DATE>\n<TOPICS>{topics}</TOPICS>\n'
                f'<TEXT>\n<TITLE>{html.escape(doc["title"])}</TITLE>\n<BODY>{html.escape(doc["body"])}</BODY></TEXT>\n'
                "</REUTERS>\n")
    return '<!DOCTYPE lewis SYSTEM "lewis.dtd">\n' + "".join(story(d) for d in stories)


@pytest.mark.parametrize("fmt", ["json", "csv", "reuters"])
def test_load_reads_json_csv_and_reuters_files(es, es_url, index_name, tmp_path, fp, stories, fmt):
    """The format comes from the file name; each document is loaded with its fingerprint."""
    docs = stories[:4]
    if fmt == "json":
        source = tmp_path / "docs.json"
        source.write_text(json.dumps([{k: d[k] for k in ("id", "title", "body")} for d in docs]), encoding="utf-8")
    elif fmt == "csv":
        source = tmp_path / "docs.csv"
        with source.open("w", encoding="utf-8", newline="") as out:
            writer = csv.writer(out)
            writer.writerow(["id", "title", "body"])
            writer.writerows([d["id"], d["title"], d["body"]] for d in docs)
    else:
        source = tmp_path / "reut2-000.sgm"
        source.write_bytes(reuters_sgml(docs).encode("latin-1", errors="replace"))
    result, summary = load(es_url, index_name, source)
    assert result.returncode == EXIT_OK, result.stderr.decode()
    assert summary["loaded"] == len(docs) and summary["fingerprinted"] == len(docs)
    for doc in docs:
        got = es.get(index=index_name, id=doc["id"])["_source"]
        assert (got["title"], got["body"]) == (doc["title"], doc["body"])
        assert got[FIELD]["sig"] == fp.fingerprint_fields([doc["title"], doc["body"]]).to_source()["sig"]
        if fmt == "reuters":
            assert got["topics"] == doc["topics"] and got["date"] == doc["date"]


def test_load_reads_the_reuters_archive(es, es_url, index_name, tmp_path, stories):
    archive = tmp_path / "reuters21578.tar.gz"
    data = reuters_sgml(stories[:3]).encode("latin-1", errors="replace")
    with tarfile.open(archive, "w:gz") as tar:
        member = tarfile.TarInfo("reut2-000.sgm")
        member.size = len(data)
        tar.addfile(member, io.BytesIO(data))
    result, summary = load(es_url, index_name, archive)
    assert result.returncode == EXIT_OK, result.stderr.decode()
    assert summary["loaded"] == 3 and es.get(index=index_name, id=stories[2]["id"])["found"]


@pytest.mark.parametrize(("name", "content", "args", "message"), [
    ("docs.json", b'{"id": 1}', [], "a JSON dict where --format json needs an array of objects"),
    ("docs.json", b'[{"id": 1},', [], "not valid JSON"),
    ("docs.csv", b"", [], "no header row"),
    ("docs.csv", b"id,title\n1,caf\xe9\n", [], "not UTF-8"),
    ("docs.txt", b'[{"id": 1}]', ["--format", "reuters"], "not a readable .tar.gz archive"),
    ("reut2-000.sgm", b"<html>nothing</html>", [], "no Reuters-21578 story"),
])
def test_load_of_a_bad_file_is_one_message(es_url, index_name, tmp_path, name, content, args, message):
    source = tmp_path / name
    source.write_bytes(content)
    result = run_neardup(["load", "--index", index_name, str(source), *args], es_url)
    err = result.stderr.decode()
    assert result.returncode == 2, err
    assert message in err and str(source) in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_load_with_a_json_array_of_non_objects_reports_them_as_bad_lines(es, es_url, index_name, tmp_path, stories):
    source = tmp_path / "docs.json"
    source.write_text(json.dumps([stories[0], 5, "x"]), encoding="utf-8")
    result, summary = load(es_url, index_name, source)
    assert result.returncode == EXIT_DOCUMENTS_FAILED
    assert summary["loaded"] == 1 and [b["line"] for b in summary["bad_lines"]] == [2, 3]


def test_load_shows_progress_as_index_does(es, es_url, index_name, tmp_path, stories, monkeypatch):
    """``neardup load`` takes its progress from ``Progress.for_stream`` like ``neardup index``
    (a bar on a terminal, periodic log lines otherwise), ticked after every bulk request."""
    from neardup.cli import load as load_command
    from neardup.cli import main
    from neardup.indexer.progress import LogProgress, Progress

    ticks: list[tuple[int, int]] = []
    made: list[tuple[str, Progress]] = []

    class Recording(Progress):
        def tick(self, stats) -> None:
            ticks.append((stats.read, stats.updated))

        def close(self) -> None:
            ticks.append((-1, -1))

    original = Progress.for_stream

    def for_stream(stream, label, interval=10.0):
        made.append((label, original(stream, label, interval)))
        return Recording()

    monkeypatch.setattr(load_command.Progress, "for_stream", staticmethod(for_stream))
    monkeypatch.setenv("NEARDUP_UPSTREAM__URLS", es_url)
    source = write_lines(tmp_path / "docs.jsonl", stories[:5])
    assert main(["load", "--index", index_name, str(source), "--batch-size", "2", "--json"]) == EXIT_OK
    assert [label for label, _ in made] == [f"load {index_name}"]
    assert isinstance(made[0][1], LogProgress)  # stderr is not a terminal here
    assert ticks == [(2, 2), (4, 4), (5, 5), (-1, -1)]
