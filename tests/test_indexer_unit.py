"""Pure logic of the indexer: text selection, slicing, mapping checks, splicing, retries, counters."""

from __future__ import annotations

import io
import json
import random

import numpy as np
import pytest

from neardup.fingerprint import FIELD, Fingerprinter, FingerprintParams
from neardup.fingerprint.matching import RunIndex, best_match, similarity, verified_matches
from neardup.fingerprint.texts import document_texts
from neardup.indexer.enrich import add_fingerprint, enrich_line, splice_field
from neardup.indexer.errors import (
    ClusterApiError,
    ClusterConnectionError,
    ClusterTimeout,
    ClusterTlsError,
    Unreachable,
    explain,
)
from neardup.indexer.mapping import field_conflicts, mapping_conflicts, missing_properties, text_fields, wanted_properties
from neardup.indexer.progress import LogProgress, Progress
from neardup.indexer.query import SliceSpec, parse_slice, plan_slices, selection
from neardup.indexer.retry import Retrier, backoff_delay, is_transient
from neardup.indexer.stats import Failures, JobStats, format_summary

TEXT_A = ("The quick brown fox jumps over the lazy dog near the river bank while the farmer "
          "watches his cattle graze in the green meadow beyond the old stone bridge.")
TEXT_B = ("Central bank officials said on Tuesday that interest rates would stay unchanged "
          "for the rest of the quarter as inflation remained close to the target range.")


@pytest.fixture(scope="module")
def fp() -> Fingerprinter:
    return Fingerprinter(FingerprintParams())


# --- which text is fingerprinted ---------------------------------------------------------------

@pytest.mark.parametrize("source, outcome, texts", [
    ({"title": "T", "body": "B"}, "ok", ("T", "B")),
    ({"body": "B"}, "ok", ("B",)),
    ({"title": None, "body": "B"}, "ok", ("B",)),
    ({"title": ["a", "b"], "body": "B"}, "ok", ("a\nb", "B")),
    ({"other": "x"}, "no_field", ()),
    ({"title": None, "body": []}, "no_field", ()),
    ({"title": 5, "body": {"x": 1}}, "non_string", ()),
    ({"title": [1, "a"]}, "non_string", ()),
    ({"title": "", "body": "  \n\t"}, "empty", ()),
])
def test_document_texts_classifies(source, outcome, texts):
    result = document_texts(source, ["title", "body"])
    assert result.outcome == outcome
    assert result.texts == texts


def test_document_texts_counts_ignored_values_and_reads_dotted_paths():
    result = document_texts({"title": 7, "content": {"body": "deep"}}, ["title", "content.body"])
    assert (result.outcome, result.texts, result.ignored_values) == ("ok", ("deep",), 1)
    assert document_texts({"a.b": "literal", "a": {"b": "nested"}}, ["a.b"]).texts == ("literal",)


# --- selection and slices ------------------------------------------------------------------------

def test_parse_slice_accepts_i_of_n_and_rejects_the_rest():
    assert parse_slice("0/4") == (0, 4)
    assert parse_slice(" 3 / 4 ") == (3, 4)
    for bad in ("4/4", "1/0", "a/b", "1", "-1/3"):
        with pytest.raises(ValueError, match="slice"):
            parse_slice(bad)


@pytest.mark.parametrize("hosts, workers", [(1, 1), (1, 2), (3, 2), (4, 3)])
def test_host_slices_partition_the_index(hosts, workers):
    ids = [spec.id for host in range(hosts) for spec in plan_slices(host, hosts, workers)]
    assert sorted(ids) == list(range(hosts * workers))
    assert {spec.max for host in range(hosts) for spec in plan_slices(host, hosts, workers)} == {hosts * workers}


def test_whole_index_has_no_slice_clause_and_slices_use_seq_no():
    assert SliceSpec().body() is None
    assert SliceSpec(1, 4).body() == {"field": "_seq_no", "id": 1, "max": 4}


def test_selection_skips_current_version_unless_forced_and_narrows_by_since():
    plain = selection(version="1-abc", force=False, since=None, since_field="@timestamp")
    assert plain == {"bool": {"must_not": [{"term": {"neardup.v": "1-abc"}}]}}
    assert selection(version="1-abc", force=True, since=None, since_field="ts") == {"match_all": {}}
    since = selection(version="1-abc", force=True, since="now-1d", since_field="ts")
    assert since == {"bool": {"filter": [{"range": {"ts": {"gte": "now-1d"}}}]}}


# --- mapping checks ------------------------------------------------------------------------------

def full(kind: str, **params) -> dict:
    """A field definition as the field-mapping API returns it with defaults."""
    base = {"keyword": {"type": "keyword", "index": True, "doc_values": True, "ignore_above": 2147483647,
                        "normalizer": None},
            "binary": {"type": "binary", "store": False, "doc_values": False},
            "integer": {"type": "integer", "index": True, "doc_values": True}}.get(kind, {"type": kind})
    return {**base, **params}


def test_wanted_mapping_is_accepted_by_elasticsearch():
    wanted = wanted_properties()
    assert set(wanted) == {"v", "sig", "n", "super", "mega"}
    assert "index" not in wanted["sig"]  # ES 8 refuses "index" on binary
    assert wanted_properties(with_duplicate_of=True)["duplicate_of"] == {
        "properties": {"id": {"type": "keyword"}, "similarity": {"type": "float"}}}


def test_compatible_mapping_has_no_conflicts_and_extra_keys_are_fine():
    wanted = wanted_properties()
    roots = {"i": {"properties": {FIELD: {"properties": {"cluster": {"type": "long"}}}}}}
    fields = {"i": {"neardup.v": full("keyword"), "neardup.sig": full("binary"), "neardup.n": full("integer"),
                    "neardup.super": full("keyword"), "neardup.mega": full("keyword"),
                    "neardup.cluster": full("long")}}
    assert mapping_conflicts(roots, fields, wanted) == []
    assert missing_properties(fields, roots, wanted) == {}
    assert set(missing_properties({"i": {}}, roots, wanted)) == set(wanted)


@pytest.mark.parametrize("root, fields, needle", [
    ({FIELD: {"type": "keyword"}}, {}, "neardup is mapped as 'keyword'"),
    ({FIELD: {"type": "nested", "properties": {}}}, {}, "'nested'"),
    ({FIELD: {"type": "object", "enabled": False}}, {}, "enabled=false"),
    ({FIELD: {"properties": {}}}, {"neardup.super": full("text")}, "neardup.super is mapped as 'text'"),
    ({FIELD: {"properties": {}}}, {"neardup.sig": full("binary", doc_values=True)}, "doc_values=True"),
    ({FIELD: {"properties": {}}}, {"neardup.mega": full("keyword", ignore_above=8)}, "ignore_above=8"),
    ({FIELD: {"properties": {}}}, {"neardup.v": full("keyword", index=False)}, "not indexed"),
    ({FIELD: {"properties": {}}}, {"neardup.duplicate_of": full("keyword")},
     "neardup.duplicate_of is mapped as 'keyword', neardup needs 'object'"),
    ({FIELD: {"properties": {}}}, {"neardup.duplicate_of.similarity": full("keyword")},
     "neardup.duplicate_of.similarity is mapped as 'keyword', neardup needs 'float'"),
])
def test_conflicting_mappings_are_named(root, fields, needle):
    problems = mapping_conflicts({"idx": {"properties": root}}, {"idx": fields}, wanted_properties(True))
    assert problems and all(p.startswith("idx: ") for p in problems)
    assert any(needle in p for p in problems), problems


def test_an_object_sub_field_is_missing_until_each_of_its_leaves_is_mapped():
    wanted = wanted_properties(with_duplicate_of=True)
    fields = {"i": {f"{FIELD}.{name}": full(wanted[name]["type"]) for name in ("v", "sig", "n", "super", "mega")}}
    assert set(missing_properties(fields, ["i"], wanted)) == {"duplicate_of"}
    fields["i"][f"{FIELD}.duplicate_of.id"] = full("keyword")
    assert set(missing_properties(fields, ["i"], wanted)) == {"duplicate_of"}
    fields["i"][f"{FIELD}.duplicate_of.similarity"] = full("float")
    assert missing_properties(fields, ["i"], wanted) == {}
    assert mapping_conflicts({"i": {"properties": {}}}, fields, wanted) == []


def test_field_conflicts_compares_booleans_loosely():
    assert field_conflicts("sig", {"type": "binary", "doc_values": "false"}, {"type": "binary", "doc_values": False}) == []


def test_text_fields_lists_source_fields_only():
    mapping = {"properties": {
        "title": {"type": "text", "fields": {"keyword": {"type": "keyword"}}},
        "meta": {"properties": {"author": {"type": "keyword"}, "year": {"type": "long"}}},
        FIELD: {"properties": {"v": {"type": "keyword"}}}}}
    assert text_fields(mapping) == ["meta.author", "title"]


# --- enrichment of documents and lines ------------------------------------------------------------

def test_add_fingerprint_adds_what_fingerprint_computes_and_keeps_other_keys(fp):
    # (``cluster`` and ``bands`` are not kept when the fingerprint changes: tests/test_cluster_stale.py)
    doc = {"title": "T", "body": TEXT_A, "n": 1.5, FIELD: {"note": 7, "v": "0-old"}}
    out = add_fingerprint(doc, ["title", "body"], fp)
    expected = fp.fingerprint_fields(["T", TEXT_A]).to_source()
    assert out[FIELD] == {"note": 7, **expected}
    assert {k: v for k, v in out.items() if k != FIELD} == {k: v for k, v in doc.items() if k != FIELD}
    assert doc[FIELD] == {"note": 7, "v": "0-old"}  # the input is not modified
    assert add_fingerprint({"title": 3}, ["title"], fp) == {"title": 3}


def test_enriched_line_keeps_every_other_byte(fp):
    line = f'{{"b":1e5, "c":1.00000000000000000001,"t":"caf\\u00e9 \\/x", "body": {json.dumps(TEXT_A)} }}'
    parsed = enrich_line(line + "\n", ["title", "body"], fp)
    rendered = parsed.render()
    assert rendered.startswith(line[:-1].rstrip() + ',"neardup":')
    assert json.loads(rendered)[FIELD] == fp.fingerprint_fields([TEXT_A]).to_source()
    tagged = json.loads(parsed.render({"duplicate_of": "x"}))
    assert tagged[FIELD]["duplicate_of"] == "x"


def test_splice_into_empty_object_and_bad_lines(fp):
    assert splice_field("{ }", {}, "k", 1) == '{"k":1}'
    assert enrich_line("not json", ["body"], fp).outcome == "bad"
    bad = enrich_line("[1, 2]", ["body"], fp)
    assert (bad.outcome, bad.render()) == ("bad", "[1, 2]")
    untouched = enrich_line('{"body": "   "}', ["body"], fp)
    assert (untouched.outcome, untouched.render()) == ("empty", '{"body": "   "}')


# --- duplicates ---------------------------------------------------------------------------------

def test_similarity_modes_and_best_match(fp):
    a = fp.fingerprint(TEXT_A)
    a_longer = fp.fingerprint(TEXT_A + " " + TEXT_B)
    b = fp.fingerprint(TEXT_B)
    assert similarity(a, fp.fingerprint(TEXT_A), "resemblance") == 1.0
    assert similarity(a, b, "resemblance") < 0.2
    assert similarity(a, a_longer, "containment") > similarity(a, a_longer, "resemblance")
    assert similarity(a, fp.fingerprint(""), "resemblance") == 0.0
    candidates = [("i", "1", b), ("i", "2", a_longer), ("i", "3", fp.fingerprint(TEXT_A))]
    assert best_match(a, candidates, 0.8, "resemblance").id == "3"
    assert best_match(a, candidates, 0.8, "resemblance", exclude_id="3") is None
    matches = verified_matches(a, candidates, 0.4, "containment")
    assert {m.id for m in matches} == {"2", "3"}
    assert [m.similarity for m in matches] == sorted((m.similarity for m in matches), reverse=True)


def test_run_index_finds_documents_sharing_keys(fp):
    run = RunIndex()
    run.add("a", fp.fingerprint(TEXT_A))
    run.add("b", fp.fingerprint(TEXT_B))
    assert [doc_id for _, doc_id, _ in run.candidates(fp.fingerprint(TEXT_A))] == ["a"]
    assert run.candidates(fp.fingerprint("")) == []


# --- retries ------------------------------------------------------------------------------------

def api_error(status: int) -> ClusterApiError:
    return ClusterApiError(status, {"error": {"type": "t", "reason": "r"}, "status": status})


def test_transient_errors_are_classified():
    assert all(is_transient(api_error(s)) for s in (429, 502, 503, 504))
    assert not any(is_transient(api_error(s)) for s in (400, 401, 403, 404, 409, 500))
    assert is_transient(ClusterConnectionError("refused"))
    assert is_transient(ClusterTimeout("slow"))
    assert not is_transient(ClusterTlsError("bad cert"))


def test_explain_names_the_cause():
    assert "rejected the credentials (401" in explain(api_error(401), "http://es")
    assert "denied access (403" in explain(api_error(403), "http://es")
    missing = ClusterApiError(404, {"error": {"type": "index_not_found_exception", "index": "i"}})
    assert explain(missing, "http://es", "i") == "no such index: i (at http://es)"
    assert explain(ClusterConnectionError("refused"), "http://es").startswith(
        "the cluster at http://es is unreachable")


def test_backoff_grows_exponentially_with_jitter_and_a_cap():
    rng = random.Random(1)
    for attempt in range(12):
        delay = backoff_delay(attempt, 0.5, 30.0, rng)
        ceiling = min(30.0, 0.5 * 2 ** attempt)
        assert ceiling / 2 <= delay <= ceiling


def test_retrier_retries_then_succeeds_or_says_how_to_resume():
    waits: list[float] = []
    failures = iter([ClusterConnectionError("refused"), api_error(503)])

    def flaky():
        failure = next(failures, None)
        if failure:
            raise failure
        return "ok"

    retrier = Retrier("http://es:9200", max_retries=3, sleep=waits.append)
    assert retrier.call("testing", flaky) == "ok"
    assert len(waits) == 2 and retrier.retries == 2

    def down():
        raise ClusterConnectionError("refused")

    with pytest.raises(Unreachable) as caught:
        Retrier("http://es:9200", max_retries=2, sleep=waits.append).call("searching", down)
    message = str(caught.value)
    assert message.startswith("the cluster at http://es:9200 is unreachable")
    assert "run the same command again to resume" in message
    with pytest.raises(ClusterApiError):
        Retrier("http://es:9200", max_retries=5, sleep=waits.append).call("x", lambda: (_ for _ in ()).throw(api_error(400)))


# --- counters and output ------------------------------------------------------------------------

def test_stats_merge_and_summary():
    a, b = JobStats(read=3, updated=2, skipped_empty=1), JobStats(read=2, deleted_meanwhile=1, unchanged=1)
    a.failures.add("400 mapper_parsing_exception: x", "d1")
    b.failures.add("400 mapper_parsing_exception: x", "d2")
    a.merge(b)
    assert (a.read, a.updated, a.done, a.failed) == (5, 2, 7, 2)
    assert a.failures.examples["400 mapper_parsing_exception: x"] == ["d1", "d2"]
    text = format_summary(a, index="i", elapsed=2.0)
    assert "read 5 documents" in text and "2 × 400 mapper_parsing_exception: x (e.g. d1, d2)" in text
    assert json.loads(json.dumps(a.to_dict()))["failed"] == 2


def test_failures_keep_only_a_few_examples():
    failures = Failures()
    for i in range(20):
        failures.add("r", str(i))
    assert failures.total == 20 and len(failures.examples["r"]) == 5


def test_log_progress_line_has_rate_and_eta():
    clock = iter([0.0, 10.0]).__next__
    progress = LogProgress("idx", 5.0, clock=clock)
    progress.add_total(1000)
    line = progress.line(JobStats(read=250, updated=240), 10.0)
    assert "read 250/1000 (25%)" in line and "25 docs/s" in line and "ETA 30s" in line


def test_terminal_gets_a_bar_and_other_streams_log_lines():
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    terminal = Terminal()
    bar = Progress.for_stream(terminal, "idx")
    bar.add_total(200)
    bar.tick(JobStats(read=100, updated=90))
    bar.close()
    assert "idx" in terminal.getvalue() and "100/200" in terminal.getvalue()
    assert isinstance(Progress.for_stream(io.StringIO(), "idx"), LogProgress)


def test_fingerprint_arrays_are_uint64(fp):
    assert fp.fingerprint(TEXT_A).signature.dtype == np.uint64


# --- command-line flags over the configuration -------------------------------------------------

def flags_over(env: dict[str, str], *argv: str):
    """(args, config): ``argv`` parsed by the ``neardup`` parser, the configuration loaded with
    ``env`` as its NEARDUP_* variables, and the configuration with the flags applied."""
    from neardup.cli import build_parser
    from neardup.cli.options import with_flags
    from neardup.config import load_config

    args = build_parser().parse_args(list(argv))
    config = load_config(environ=env)
    return config, with_flags(args, config)


@pytest.mark.parametrize("command", ["index", "cluster", "copies"])
def test_job_flags_given_override_the_configuration_and_the_rest_keep_it(command):
    env = {"NEARDUP_INDEXER__WORKERS": "5", "NEARDUP_INDEXER__BATCH_SIZE": "300", "NEARDUP_INDEXER__FIELDS": "a,b"}
    config, applied = flags_over(env, command, "--index", "x", "--batch-size", "7")
    assert applied.indexer.batch_size == 7 and applied.indexer.fields == ["a", "b"]
    assert applied.indexer.workers == 5 and applied.indexer.keep_alive == config.indexer.keep_alive
    assert config.indexer.batch_size == 300  # the loaded configuration is left as it was
    _, applied = flags_over(env, command, "--index", "x", "--field", "headline", "--field", "text")
    assert applied.indexer.fields == ["headline", "text"] and applied.indexer.batch_size == 300
    if command != "copies":  # copies reads with one thread: no --workers
        _, applied = flags_over(env, command, "--index", "x", "--workers", "1")
        assert applied.indexer.workers == 1


def test_a_flag_given_as_zero_overrides_the_configuration():
    """``--max-df 0`` keeps every shingle: 0 is a value, not "not given" (``or`` would lose it)."""
    env = {"NEARDUP_COPIES__MAX_DF": "50", "NEARDUP_COPIES__MIN_SHARED": "3"}
    config, applied = flags_over(env, "copies", "--index", "x", "--max-df", "0", "--min-share", "0.5")
    assert config.copies.max_df == 50
    assert (applied.copies.max_df, applied.copies.min_share, applied.copies.min_shared) == (0, 0.5, 3)
    _, untouched = flags_over(env, "copies", "--index", "x")
    assert untouched == config


def test_a_flag_outside_its_keys_limits_is_a_usage_error_naming_the_flag(capsys):
    """A flag has the limits its key has in the file (``indexer.workers`` ≤ 64, ``batch_size`` ≤
    10000): exit 2 with the flag named, before anything is sent anywhere."""
    from neardup.cli import main
    from neardup.config import ConfigError

    with pytest.raises(ConfigError, match="--workers"):
        flags_over({}, "index", "--index", "x", "--workers", "65")
    assert main(["cluster", "--index", "x", "--batch-size", "10001", "--workers", "64"]) == 2
    err = capsys.readouterr().err
    assert "--batch-size" in err and "10000" in err and "--workers" not in err and "Traceback" not in err


def test_the_commands_run_with_the_options_the_flags_and_the_configuration_give(monkeypatch, capsys):
    """The handlers build their options from the configuration with the flags applied."""
    from neardup.cli import cluster, copies, index, main
    from neardup.config import load_config
    from neardup.indexer.errors import JobError
    from neardup.upstream import ClusterInfo

    seen = {}

    def recording(name):
        def run(*args, **keywords):
            seen[name] = args[-1]  # the options are the last positional argument of each runner
            raise JobError("stop here")
        return run

    for module in (index, cluster, copies):
        monkeypatch.setattr(module, "check_upstream", lambda config: ClusterInfo("http://es", "Elasticsearch", "9.5.4"))
    monkeypatch.setattr(index, "run_job", recording("index"))
    monkeypatch.setattr(cluster, "run_cluster", recording("cluster"))
    monkeypatch.setattr(copies, "run_copies", recording("copies"))
    monkeypatch.setenv("NEARDUP_INDEXER__WORKERS", "3")
    monkeypatch.setenv("NEARDUP_COPIES__MAX_DF", "50")
    assert main(["index", "--index", "x", "--batch-size", "9"]) == 3
    assert main(["cluster", "--index", "x", "--field", "t", "--workers", "4"]) == 3
    assert main(["copies", "--index", "x", "--max-df", "0"]) == 3
    assert (seen["index"].workers, seen["index"].batch_size) == (3, 9)
    assert (seen["cluster"].workers, seen["cluster"].title_fields) == (4, ("t",))
    assert (seen["copies"].max_df, seen["copies"].fields) == (0, tuple(load_config().indexer.fields))
