"""The pure parts of ``neardup index --follow``: the update window, the versions it settled, its
metrics and their exposition, and which options go together (no cluster)."""

from __future__ import annotations

import argparse
import urllib.error
import urllib.request

import pytest

from neardup.cli import build_parser
from neardup.cli.index import follow_usage_problem
from neardup.indexer.follow_metrics import LAG_BUCKETS, FollowMetrics, serve_metrics
from neardup.indexer.query import with_any_field
from neardup.indexer.recent import MAX_AGE, RecentVersions
from neardup.indexer.watermark import aggregated_max, timestamp_millis, window_query, window_start
from neardup.prometheus import empty_histogram, histogram_lines, labels, number, observe


def test_the_window_starts_at_the_high_water_mark_minus_the_overlap() -> None:
    assert window_start(None, None, 5.0) is None
    assert window_start(None, 10_000.0, 5.0) == 5_000.0       # first pass: from the newest document
    assert window_start(20_000.0, 30_000.0, 2.0) == 18_000.0  # then: from the previous pass's mark


def test_the_window_query_adds_the_recent_documents_to_the_selection() -> None:
    selection = {"bool": {"must_not": [{"term": {"neardup.v": "2-x"}}]}}
    assert window_query(selection, "updated", None) == selection
    query = window_query(selection, "updated", 1234.7)
    assert query == {"bool": {"should": [selection, {"range": {"updated": {"gt": 1234, "format": "epoch_millis"}}}],
                              "minimum_should_match": 1}}
    assert aggregated_max({"newest": {"value": 5.0}}) == 5.0
    assert aggregated_max({"newest": {"value": None}}) is None


def test_the_selection_leaves_out_documents_without_any_text_field() -> None:
    query = with_any_field({"match_all": {}}, ["title", "body"])
    assert query["bool"]["filter"][1] == {"bool": {"should": [{"exists": {"field": "title"}},
                                                               {"exists": {"field": "body"}}],
                                                   "minimum_should_match": 1}}


@pytest.mark.parametrize(("value", "millis"), [
    (1_700_000_000_123, 1_700_000_000_123.0),
    ("1700000000123", 1_700_000_000_123.0),
    ("2023-11-14T22:13:20.123Z", 1_700_000_000_123.0),
    ("2023-11-14T22:13:20.123", 1_700_000_000_123.0),     # no zone: UTC
    ("2023-11-15T00:13:20.123+02:00", 1_700_000_000_123.0),
    (["2023-11-14T22:13:20.123Z", 5.0], 1_700_000_000_123.0),
    ("14/11/2023", None), (True, None), (None, None), ({"a": 1}, None),
])
def test_timestamps_are_read_as_a_date_field_reads_them(value: object, millis: float | None) -> None:
    got = timestamp_millis({"meta": {"updated": value}}, "meta.updated")
    assert got == (pytest.approx(millis) if millis is not None else None)
    assert timestamp_millis({}, "updated") is None


def test_a_settled_version_is_known_until_it_leaves_the_window() -> None:
    recent = RecentVersions()
    hit = {"_index": "news", "_id": "1", "_seq_no": 4, "_primary_term": 1}
    recent.remember(("news", "1"), {(3, 1), (4, 1)}, 1000.0, now=0.0)
    assert recent.known(hit)
    assert not recent.known({**hit, "_seq_no": 5})          # written again since: fingerprint it
    assert not recent.known({**hit, "_id": "2"})
    recent.prune(900.0, now=1.0)
    assert recent.known(hit)
    recent.prune(1000.0, now=2.0)                           # older than the window's start
    assert len(recent) == 0
    recent.remember(("news", "1"), {(4, 1)}, None, now=0.0)
    recent.prune(None, now=MAX_AGE + 1)
    assert len(recent) == 0


def test_the_exposition_writer() -> None:
    assert labels((("route", 'a"b\\c\n'),)) == '{route="a\\"b\\\\c\\n"}'
    assert number(3.0) == "3" and number(0.25) == "0.25"
    row = empty_histogram((1.0, 2.0))
    for value in (0.5, 1.5, 7.0):
        observe(row, (1.0, 2.0), value)
    assert list(histogram_lines("lag", (), (1.0, 2.0), row)) == [
        'lag_bucket{le="1"} 1', 'lag_bucket{le="2"} 2', 'lag_bucket{le="+Inf"} 3', "lag_sum 9.0", "lag_count 3"]


def test_metrics_render_and_serve() -> None:
    clock = [100.0]
    metrics = FollowMetrics(clock=lambda: clock[0], wall=lambda: 1_700_000_000.0)
    metrics.written(30, 1)
    metrics.pass_done([0.7, 2.5])
    metrics.pass_failed()
    text = metrics.render()
    assert "# TYPE neardup_follow_documents_fingerprinted_total counter" in text
    assert "neardup_follow_documents_fingerprinted_total 30\n" in text
    assert "neardup_follow_documents_failed_total 1\n" in text
    assert "neardup_follow_passes_total 1\n" in text and "neardup_follow_pass_failures_total 1\n" in text
    assert "neardup_follow_documents_per_second 0.5\n" in text
    assert "neardup_follow_lag_max_seconds 2.5\n" in text
    assert 'neardup_follow_lag_seconds_bucket{le="1"} 1\n' in text
    assert f'neardup_follow_lag_seconds_bucket{{le="{number(LAG_BUCKETS[-1])}"}} 2\n' in text
    assert "neardup_follow_last_pass_timestamp_seconds 1700000000\n" in text
    clock[0] += 61
    assert "neardup_follow_documents_per_second 0\n" in metrics.render()
    server = serve_metrics(metrics, "127.0.0.1", 0)
    try:
        port = server.server_address[1]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
            assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
            assert b"neardup_follow_passes_total 1" in response.read()
        with pytest.raises(urllib.error.HTTPError) as missing:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10)
        assert missing.value.code == 404
    finally:
        server.shutdown()
        server.server_close()


def parse(*args: str) -> argparse.Namespace:
    return build_parser().parse_args(["index", "--index", "news", *args])


def test_which_options_go_with_follow() -> None:
    assert follow_usage_problem(parse()) == ""
    assert follow_usage_problem(parse("--follow", "--since-field", "t", "--overlap", "2", "--metrics-port", "0")) == ""
    assert "only apply with --follow" in follow_usage_problem(parse("--interval", "2", "--metrics-port", "9"))
    assert "--force" in follow_usage_problem(parse("--follow", "--force"))
    assert "--since-field" in follow_usage_problem(parse("--follow", "--overlap", "2"))
    with pytest.raises(SystemExit):
        parse("--follow", "--interval", "0")
