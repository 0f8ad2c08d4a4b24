"""Pure parts of the proxy: controls, filter_path, planning, grouping and paging (no server)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from multidict import CIMultiDict

from neardup.config import CollapseConfig
from neardup.corpora import reuters_documents
from neardup.fingerprint import Fingerprinter, FingerprintParams
from neardup.proxy.grouping import collapse
from neardup.proxy.grouping.fingerprints import default_algorithms
from neardup.proxy.handlers import filter_path
from neardup.proxy.handlers.deep_pages import TooDeep, deeper, needs_more
from neardup.proxy.handlers.dispatch import controls_of
from neardup.proxy.handlers.params import Controls, parse_controls, resolve, split_query
from neardup.proxy.handlers.result_window import smallest
from neardup.proxy.handlers.routes import classify, index_of
from neardup.proxy.handlers.search_plan import Plan, Skip, Window, finish, plan_search, round_request
from neardup.proxy.transport.errors import ProxyError, collapsed_window_too_large

ALGORITHMS = default_algorithms(FingerprintParams())
DEFAULTS = resolve(Controls(), CollapseConfig(), "")


# -- controls -------------------------------------------------------------------------------
def test_controls_are_read_and_removed_keeping_the_rest_byte_for_byte() -> None:
    controls, rest, given = parse_controls(
        "q=a%20b&neardup=off&size=3&neardup_threshold=0.85&neardup_mode=containment&x", CIMultiDict())
    assert controls == Controls(False, 0.85, "containment") and given
    assert rest == "q=a%20b&size=3&x"


def test_query_string_without_controls_is_untouched() -> None:
    _, rest, given = parse_controls("q=a+b&&pretty", CIMultiDict())
    assert rest == "q=a+b&&pretty" and not given


def test_headers_control_and_the_query_parameter_wins() -> None:
    headers = CIMultiDict({"X-Neardup": "on", "x-neardup-threshold": "0.5", "X-Neardup-Mode": "containment"})
    controls, _, _ = parse_controls("neardup_threshold=0.9", headers)
    assert controls == Controls(True, 0.9, "containment")


@pytest.mark.parametrize("query, named", [
    ("neardup_threshold=1.5", "neardup_threshold"),
    ("neardup_threshold=abc", "neardup_threshold"),
    ("neardup_threshold=nan", "neardup_threshold"),
    ("neardup=maybe", "[neardup]"),
    ("neardup_mode=jaccard", "neardup_mode"),
    ("neardup_colour=red", "neardup_colour"),
    ("neardup_threshold=0.5&neardup_threshold=0.6", "neardup_threshold"),
])
def test_invalid_controls_are_400_naming_the_parameter(query: str, named: str) -> None:
    with pytest.raises(ProxyError) as caught:
        parse_controls(query, CIMultiDict())
    error = caught.value
    assert error.status == 400 and error.type == "illegal_argument_exception"
    assert named in error.reason
    body = error.body()
    assert body["status"] == 400 and body["error"]["root_cause"][0]["reason"] == error.reason


def test_invalid_header_is_400_naming_the_header() -> None:
    with pytest.raises(ProxyError) as caught:
        parse_controls("", CIMultiDict({"X-Neardup-Mode": "x"}))
    assert "X-Neardup-Mode" in caught.value.reason


def test_per_index_overrides_then_request_controls() -> None:
    config = CollapseConfig(threshold=0.8, indices={"news-*": {"threshold": 0.6, "mode": "containment"},
                                                   "logs": {"enabled": False}})
    assert resolve(Controls(), config, "news-1").threshold == 0.6
    assert resolve(Controls(), config, "news-1").mode == "containment"
    assert resolve(Controls(threshold=0.9), config, "news-1").threshold == 0.9
    assert resolve(Controls(), config, "logs").enabled is False
    assert resolve(Controls(enabled=True), config, "logs").enabled is True
    assert resolve(Controls(), config, "other").threshold == 0.8


def test_routes() -> None:
    assert classify("GET", "/_search") == "search"
    assert classify("POST", "/a,b*/_search") == "search"
    assert classify("POST", "/_msearch") == "msearch" == classify("GET", "/idx/_msearch")
    for method, path in [("PUT", "/idx/_search"), ("POST", "/_search/scroll"), ("GET", "/idx/_doc/1"),
                         ("POST", "/idx/_search/template"), ("POST", "/_msearch/template"),
                         ("POST", "/idx/_async_search"), ("GET", "/")]:
        assert classify(method, path) == "passthrough", path
    assert index_of("/news%2A/_search") == "news*" and index_of("/_search") == ""


# -- filter_path ----------------------------------------------------------------------------
RESPONSE = {"took": 3, "hits": {"total": {"value": 2, "relation": "eq"},
                                "hits": [{"_id": "1", "_source": {"a": 1, "b": {"c": 2}}},
                                         {"_id": "2", "_source": {"a": 3}}]},
            "aggregations": {"t": {"buckets": [{"key": "x", "doc_count": 1}]}}}


@pytest.mark.parametrize("expression, expected", [
    ("hits.hits._id", {"hits": {"hits": [{"_id": "1"}, {"_id": "2"}]}}),
    ("hits.hits._source.b.c", {"hits": {"hits": [{"_source": {"b": {"c": 2}}}]}}),
    ("**.key", {"aggregations": {"t": {"buckets": [{"key": "x"}]}}}),
    ("hits.total,-hits.total.relation", {"hits": {"total": {"value": 2}}}),
    ("-hits,-aggregations", {"took": 3}),
    ("hits.hits._s*.a", {"hits": {"hits": [{"_source": {"a": 1}}, {"_source": {"a": 3}}]}}),
    ("nothing", {}),
])
def test_filter_path(expression: str, expected: dict) -> None:
    parsed = filter_path.parse(expression)
    assert parsed is not None and parsed.apply(RESPONSE) == expected


def test_unsupported_filter_path_is_refused() -> None:
    with pytest.raises(filter_path.UnsupportedFilterPath):
        filter_path.parse("hits.hits._source.a\\.b")
    assert filter_path.parse("") is None


# -- planning -------------------------------------------------------------------------------
def plan(body: dict, query: str = "") -> Plan | Skip:
    return plan_search(body, split_query(query), DEFAULTS, 1000)


def test_whole_source_uses_the_source_channel_and_adds_nothing() -> None:
    planned = plan({"query": {"match_all": {}}})
    assert isinstance(planned, Plan) and planned.channel == "_source" and planned.added_fields == ()
    assert plan({"_source": True}, "_source=true").channel == "_source"
    # stored_fields turns the source off unless _source: true asks for it (Elasticsearch then
    # returns the whole source beside the stored fields)
    assert plan({"stored_fields": [], "_source": True}).channel == "_source"
    assert plan({"stored_fields": ["title"]}, "_source=true").channel == "_source"


@pytest.mark.parametrize("body, query", [
    ({"_source": False}, ""), ({"_source": ["title"]}, ""), ({}, "_source=false"),
    ({}, "_source_includes=title"), ({}, "_source_excludes=body"), ({"stored_fields": ["title"]}, ""),
    ({"stored_fields": []}, ""), ({}, "stored_fields="), ({"stored_fields": "_id"}, ""),
    # only "true" spelled so is a boolean to Elasticsearch; "TRUE" is an include pattern
    ({}, "_source=TRUE"), ({"stored_fields": []}, "_source=True"),
])
def test_filtered_source_fetches_fingerprints_through_fields(body: dict, query: str) -> None:
    planned = plan(body, query)
    assert isinstance(planned, Plan) and planned.channel == "fields"
    assert planned.added_fields == ("neardup.v", "neardup.sig", "neardup.n")
    _, upstream_body = round_request(planned, 0, 16)
    assert upstream_body["fields"][-3:] == ["neardup.v", "neardup.sig", "neardup.n"]


def test_fields_the_client_asked_for_are_not_stripped() -> None:
    planned = plan({"_source": False, "fields": ["neardup.s*", {"field": "title"}]})
    assert planned.added_fields == ("neardup.v", "neardup.n")


@pytest.mark.parametrize("body, query, reason", [
    ({}, "scroll=1m", "scroll"), ({"search_after": [1]}, "", "search_after"),
    ({"collapse": {"field": "f"}}, "", "native_collapse"), ({"size": 0}, "", "size_0"),
    ({}, "size=x", "invalid_from_size"), ({"stored_fields": "_none_"}, "", "stored_fields_none"),
    # Elasticsearch refuses a bad body from/size even when the query string's replace them
    ({"from": -1, "size": 3}, "from=10", "invalid_from_size"), ({"size": -2}, "size=5", "invalid_from_size"),
    ({"size": None}, "size=5", "invalid_from_size"), ({"size": True}, "", "invalid_from_size"),
    ({"from": "0x5"}, "", "invalid_from_size"), ({"size": 2147483647.5}, "", "invalid_from_size"),
    ({"size": [5]}, "", "invalid_from_size"), ({}, "size=%205", "invalid_from_size"), ({}, "size=+5", "invalid_from_size"),
    ({"from": "1" * 100_000 + "x"}, "", "invalid_from_size"),   # no backtracking over a long string
    ({"docvalue_fields": ["neardup.*"]}, "", "fingerprint_field_requested"),
    ({}, "filter_path=a\\.b", "unsupported_filter_path"),
])
def test_searches_that_pass_through(body: dict, query: str, reason: str) -> None:
    assert plan(body, query) == Skip(reason)


def test_from_size_in_the_query_string_win_and_are_taken_over() -> None:
    planned = plan({"from": 1, "size": 2}, "from=20&size=5&q=x&filter_path=hits")
    assert (planned.start, planned.size) == (20, 5)
    qs, body = round_request(planned, 32, 32)
    assert qs == "q=x" and (body["from"], body["size"]) == (32, 32)
    assert planned.first_window() == 28   # 25 groups + 3 spare hits


def test_tail_rounds_do_not_aggregate_or_count_again() -> None:
    planned = plan({"aggs": {"a": {}}, "suggest": {}, "track_total_hits": True}, "track_total_hits=true")
    qs, body = round_request(planned, 16, 16)
    assert "aggs" not in body and "suggest" not in body and body["track_total_hits"] is False
    assert "track_total_hits" not in qs
    _, first = round_request(planned, 0, 16)
    assert "aggs" in first and first["track_total_hits"] is True


# -- grouping and paging over real fingerprints -----------------------------------------------
@pytest.fixture(scope="module")
def stories() -> list[dict]:
    source = (d for d in reuters_documents(with_body_only=True) if len(d["body"].split()) > 100)
    return list(itertools.islice(source, 30))


def hit(doc_id: str, fingerprint: dict | None, score: float = 1.0) -> dict:
    source = {"title": doc_id}
    if fingerprint is not None:
        source["neardup"] = fingerprint
    return {"_index": "i", "_id": doc_id, "_score": score, "_source": source}


def variants(stories: list[dict], fp: Fingerprinter) -> list[dict]:
    """Hits in rank order: each story, and for every third story an edited copy 5 ranks later."""
    hits = []
    for k, story in enumerate(stories):
        hits.append(hit(f"s{k}", fp.fingerprint(story["body"]).to_source(), 100 - k))
    for k in range(0, len(stories), 3):
        words = stories[k]["body"].split()
        words[-5] = "zzzzz"
        hits.insert(min(len(hits), k + 5), hit(f"s{k}-copy", fp.fingerprint(" ".join(words)).to_source(), 0))
    return hits


def test_grouping_is_transitive_and_ignores_hits_without_usable_fingerprints(stories: list[dict]) -> None:
    fp = Fingerprinter(FingerprintParams())
    a = stories[0]["body"].split()
    b = a[:-8] + ["x1", "x2", "x3", "x4", "x5", "x6", "x7", "x8"]   # close to a
    c = b[:-16] + ["y"] * 16                                        # close to b, further from a
    prints = [fp.fingerprint(" ".join(words)).to_source() for words in (a, b, c)]
    old = {**prints[0], "v": "0-stale"}
    hits = [hit("a", prints[0]), hit("none", None), hit("b", prints[1]), hit("old", old),
            hit("bad", {"v": prints[0]["v"], "sig": "###", "n": 1}), hit("c", prints[2])]
    groups, fingerprinted = collapse.group(hits, "_source", 0.8, "resemblance", ALGORITHMS)
    assert fingerprinted == 3
    assert groups == [[0, 2, 5], [1], [3], [4]]


def test_page_format_matches_native_collapse(stories: list[dict]) -> None:
    fp = Fingerprinter(FingerprintParams())
    hits = variants(stories[:6], fp)
    ids = [h["_id"] for h in hits]
    groups, _ = collapse.group(hits, "_source", 0.8, "resemblance", ALGORITHMS)
    page = collapse.build_page(hits, groups, 0, 3)
    top = page.hits[0]
    assert top["_id"] == "s0" and top["fields"] == {"neardup.group": ["i/s0"]}
    inner = top["inner_hits"]["neardup"]["hits"]
    assert inner["total"] == {"value": 1, "relation": "eq"} and inner["max_score"] == 0
    assert [h["_id"] for h in inner["hits"]] == ["s0-copy"]
    assert page.collapsed == 1 and page.groups == 3 and ids.index("s0-copy") > 3
    alone = page.hits[1]["inner_hits"]["neardup"]["hits"]
    assert alone == {"total": {"value": 0, "relation": "eq"}, "max_score": None, "hits": []}
    as_int = collapse.build_page(hits, groups, 0, 1, total_as_int=True)
    assert as_int.hits[0]["inner_hits"]["neardup"]["hits"]["total"] == 1


class Refused(Exception):
    """:func:`_page` refused the page (its :class:`TooDeep` is the argument)."""


def _page(hits: list[dict], start: int, size: int, max_window: int, result_window: int = 0,
          relation: str = "eq") -> tuple[list[str], dict]:
    """Run the window rounds over a fixed ranked list, as the proxy does against Elasticsearch:
    a page that ``max_window`` hits cannot fill is extended up to ``result_window`` hits (0: the
    ``refuse`` policy), else :class:`Refused`."""
    planned = plan_search({"from": start, "size": size}, [], DEFAULTS, max_window)
    window = Window(planned)
    offset, count = 0, planned.first_window()
    while True:
        chunk = [dict(h, _source=dict(h["_source"])) for h in hits[offset:offset + count]]
        window.add_round({"took": 1, "hits": {"total": {"value": len(hits), "relation": relation},
                                              "hits": chunk}}, count)
        groups, printed = collapse.group(window.hits, "_source", 0.8, "resemblance", ALGORITHMS)
        following = window.next_round(len(groups))
        if needs_more(window, len(groups)):
            deeper_round = deeper(window, len(groups), "extend" if result_window else "refuse", result_window)
            if isinstance(deeper_round, TooDeep):
                raise Refused(deeper_round)
            following = deeper_round
        if following is None:
            break
        offset, count = following
    response = finish(window, groups, printed)
    shown = []
    for top in response["hits"]["hits"]:
        shown.append(top["_id"])
        shown.extend(h["_id"] for h in top["inner_hits"]["neardup"]["hits"]["hits"])
    return shown, response


def test_pages_are_full_and_never_repeat_a_document_or_a_near_duplicate(stories: list[dict]) -> None:
    fp = Fingerprinter(FingerprintParams())
    hits = variants(stories, fp)
    by_id = {h["_id"]: h for h in hits}
    seen: set[str] = set()
    for page in range(5):
        shown, response = _page(hits, page * 4, 4, 1000)
        tops = [h["_id"] for h in response["hits"]["hits"]]
        assert len(tops) == 4 and response["neardup"]["complete"]
        assert not seen & set(shown)
        for top in tops:   # no result is a near-duplicate of something on an earlier page
            for earlier in seen:
                pair = [by_id[top]["_source"]["neardup"], by_id[earlier]["_source"]["neardup"]]
                _, sigs, counts = ALGORITHMS.read(pair)
                i, _, _ = ALGORITHMS.similar_pairs(sigs, counts, 0.8, "resemblance")
                assert len(i) == 0, (top, earlier)
        seen |= set(shown)


def test_a_page_past_max_window_is_extended_up_to_the_result_window(stories: list[dict]) -> None:
    """A page that ``max_window`` hits cannot fill used to come back short with ``complete:
    false``; the window now grows on up to the result window and the page is the one a window
    of every hit gives."""
    hits = variants(stories, Fingerprinter(FingerprintParams()))
    shown, response = _page(hits, 0, 25, max_window=16, result_window=100)
    reference, whole = _page(hits, 0, 25, max_window=1000)
    assert response["neardup"]["complete"] and response["neardup"]["window"] > 16
    assert shown == reference and response["hits"]["hits"] == whole["hits"]["hits"]
    assert len(response["hits"]["hits"]) == 25


def test_a_page_past_the_limit_is_refused_naming_it(stories: list[dict]) -> None:
    """Past ``max_window`` (policy ``refuse``) or the result window (``extend``), while more
    hits exist, the page is refused instead of coming back short with ``complete: false``."""
    hits = variants(stories, Fingerprinter(FingerprintParams()))
    groups_in = {n: len(collapse.group(hits[:n], "_source", 0.8, "resemblance", ALGORITHMS)[0]) for n in (16, 20)}
    with pytest.raises(Refused) as refused:
        _page(hits, 0, 40, max_window=16)
    assert refused.value.args[0] == TooDeep(40, groups_in[16], 16, "collapse.max_window")
    with pytest.raises(Refused) as refused:
        _page(hits, 10, 15, max_window=16, result_window=20)
    assert refused.value.args[0] == TooDeep(25, groups_in[20], 20, "index.max_result_window")
    error = collapsed_window_too_large(25, groups_in[20], 20, "index.max_result_window")
    assert error.status == 400 and error.type == "illegal_argument_exception"
    assert error.reason.startswith(f"Result window is too large for collapsed near-duplicates, from + size must "
                                   f"be less than or equal to: [{groups_in[20]}] but was [25]")
    for remedy in ("search_after", "[index.max_result_window] index level setting", "neardup cluster"):
        assert remedy in error.reason


def test_a_page_short_because_the_hits_run_out_is_complete(stories: list[dict]) -> None:
    """Fewer groups than from + size because no more hits exist is the end of the results:
    complete, never refused; also when the window ends exactly at the last hit counted."""
    hits = variants(stories, Fingerprinter(FingerprintParams()))
    shown, response = _page(hits[:12], 5, 10, max_window=16)     # a short round: no more hits
    assert response["neardup"]["complete"] and 0 < len(response["hits"]["hits"]) < 10
    shown, response = _page(hits[:16], 0, 20, max_window=16)     # hits.total says 16: all there
    assert response["neardup"]["complete"] and len(shown) == 16
    with pytest.raises(Refused):   # at least 16: more may exist
        _page(hits[:16], 0, 20, max_window=16, relation="gte")
    _, beyond = _page(hits[:12], 30, 10, max_window=16)         # from past the last group: empty
    assert beyond["neardup"]["complete"] and beyond["hits"]["hits"] == []


def test_only_an_exact_total_tells_the_window_holds_every_hit() -> None:
    """A window at its limit is complete when ``hits.total`` counted exactly that many hits; an
    uncounted (-1 with ``rest_total_hits_as_int``), inexact or absent total says nothing."""
    planned = plan_search({"size": 20}, [], DEFAULTS, 16)
    hits = [hit(f"h{k}", None) for k in range(16)]
    for total, complete in ((16, True), ({"value": 16, "relation": "eq"}, True), (-1, False),
                            ({"value": 16, "relation": "gte"}, False), (None, False), (17, False)):
        window = Window(planned)
        window.add_round({"hits": {"total": total, "hits": [dict(h) for h in hits]}}, 16)
        assert window.next_round(16) is None and window.complete(16) is complete, total


def test_unexpected_shapes_raise_collapse_error() -> None:
    with pytest.raises(collapse.CollapseError):
        collapse.group([{"_id": "1"}, "not a hit"], "_source", 0.8, "resemblance", ALGORITHMS)
    window = Window(plan({}))
    with pytest.raises(collapse.CollapseError):
        window.add_round({"hits": {"hits": 5}}, 16)


def test_fast_signature_reader_agrees_with_from_source(stories: list[dict]) -> None:
    from neardup.fingerprint import Fingerprint

    fp = Fingerprinter(FingerprintParams())
    stored = [fp.fingerprint(s["body"]).to_source() for s in stories[:10]]
    positions, sigs, counts = ALGORITHMS.read([None, *stored, {"v": "x"}])
    assert positions.tolist() == list(range(1, 11))
    for row, obj, count in zip(sigs, stored, counts):
        decoded = Fingerprint.from_source(obj)
        assert np.array_equal(row, decoded.signature) and count == decoded.shingle_count


# -- jsonio: integers outside 64 bits are never turned into floats ---------------------------------
@pytest.mark.parametrize("number", ["123456789012345678901234567890", "-9999999999999999999",
                                    "-9223372036854775809", "18446744073709551616",
                                    "18446744073709551615", "-9223372036854775808", "9999999999999999999"])
@pytest.mark.parametrize("padding", [0, 5000])   # below and above the vectorised scan's size
def test_jsonio_keeps_every_integer_exact(number: str, padding: int) -> None:
    from neardup.proxy.transport import jsonio

    raw = ('{"pad": "' + "x" * padding + '", "n": ' + number + "}").encode()
    value = jsonio.loads(raw)
    assert isinstance(value["n"], int) and str(value["n"]) == number
    assert jsonio.dumps(value) == raw.replace(b": ", b":").replace(b", ", b",")


def test_jsonio_digit_run_scan_agrees_with_the_plain_scan() -> None:
    import random

    from neardup.proxy.transport import jsonio

    rng = random.Random(7)
    for _ in range(300):
        raw = bytes(rng.choice(b"0123456789 ,-x") for _ in range(rng.randint(0, 200)))
        raw = raw * rng.randint(1, 40)
        assert jsonio._has_digit_run(raw) == (jsonio._LONG_RUN in raw.translate(jsonio._DIGIT_MAP)), raw


def test_a_first_window_is_split_in_halves_only_on_an_idle_worker() -> None:
    from types import SimpleNamespace

    from neardup.proxy.handlers.collapsed_search import _halves

    def state(least: int, in_flight: int) -> object:
        return SimpleNamespace(config=SimpleNamespace(proxy=SimpleNamespace(split_fetch_min_hits=least)),
                               metrics=SimpleNamespace(in_flight=in_flight))

    assert _halves(state(40, 1), 0, 112) == [(0, 56), (56, 56)]
    assert _halves(state(40, 1), 0, 41) == [(0, 21), (21, 20)]
    assert _halves(state(40, 1), 0, 39) == [(0, 39)]          # small: one request
    assert _halves(state(40, 2), 0, 112) == [(0, 112)]        # another request in flight: under load
    assert _halves(state(40, 1), 112, 112) == [(112, 112)]    # a later round
    assert _halves(state(0, 1), 0, 1000) == [(0, 1000)]       # switched off


@pytest.mark.parametrize(("accept_encoding", "gzip"), [
    (None, False), ("", False), ("identity", False), ("gzip", True), ("x-gzip", True), ("GZip", True),
    ("gzip;q=0", False), ("gzip; q=0.5", True), ("gzip;q=abc", False), ("*", True), ("br, *", True),
    ("*;q=0", False), ("deflate, br", False),
    # an explicit gzip entry decides over "*", in either order (Netty's HttpContentCompressor)
    ("*;q=0, gzip", True), ("gzip;q=0, *", False), ("*, gzip;q=0", False), ("gzip;q=0, x-gzip", True),
])
def test_gzip_is_accepted_as_elasticsearch_decides(accept_encoding: str | None, gzip: bool) -> None:
    from neardup.proxy.transport.framing import accepts_gzip

    assert accepts_gzip(accept_encoding) is gzip


@pytest.mark.parametrize(("body", "query", "start", "size"), [
    # a body's from/size as Elasticsearch reads them: numbers or numeric strings, truncated
    ({"size": 5.0}, "", 0, 5), ({"from": 5.7, "size": "1e1"}, "", 5, 10), ({"from": -0.5}, "", 0, 10),
    ({"from": "+5", "size": " 5 "}, "", 5, 5), ({"size": "5.5"}, "", 0, 5),
    # overridden by the query string (Integer.parseInt: a sign is allowed), still checked
    ({"size": 5.0}, "size=3", 0, 3), ({"from": "+5"}, "from=0", 0, 10), ({}, "size=%2B5&from=-0", 0, 5),
])
def test_from_and_size_are_read_as_elasticsearch_reads_them(body: dict, query: str, start: int, size: int) -> None:
    planned = plan({"query": {"match_all": {}}, **body}, query)
    assert isinstance(planned, Plan) and (planned.start, planned.size) == (start, size)


# -- what differs by engine -------------------------------------------------------------------
def test_filter_path_exclusions_drop_empty_values_on_opensearch() -> None:
    """As the engines filter ``{"a": {}, "b": [], "c": 1, "d": {"e": [], "f": {}}}`` (checked
    on Elasticsearch 9.5 and OpenSearch 3.8): an exclusion that reaches an empty object or array
    keeps it on Elasticsearch and drops it on OpenSearch; one that stops above it keeps it on both."""
    doc = {"a": {}, "b": [], "c": 1, "d": {"e": [], "f": {}}}
    for drop_empty, deep in ((False, {"a": {}, "b": [], "c": 1, "d": {"e": [], "f": {}}}), (True, {"c": 1})):
        spec = filter_path.parse("-**.zz", drop_empty=drop_empty)
        assert spec is not None and spec.apply(doc) == deep
        spec = filter_path.parse("-zz", drop_empty=drop_empty)
        assert spec is not None and spec.apply(doc) == doc
        spec = filter_path.parse("b,a", drop_empty=drop_empty)   # inclusions keep what matched whole
        assert spec is not None and spec.apply(doc) == {"a": {}, "b": []}


def test_the_engine_is_learned_from_its_answers() -> None:
    from neardup.proxy.transport.engine import Engine
    from neardup.proxy.transport.errors import error_response, rejected

    engine = Engine()
    assert not engine.known and engine.answer_headers() == {"X-elastic-product": "Elasticsearch"}
    assert rejected(1, engine).type == "es_rejected_execution_exception" and engine.reads_compatible_with
    engine.note_headers(CIMultiDict({"X-OpenSearch-Version": "OpenSearch/3.8.0 (opensearch)"}))
    assert engine.known and engine.is_opensearch and not engine.reads_compatible_with
    assert engine.answer_headers() == {"X-OpenSearch-Version": "OpenSearch/3.8.0 (opensearch)"}
    assert rejected(1, engine).type == "rejected_execution_exception"
    response = error_response(rejected(1, engine), engine=engine)
    assert "X-elastic-product" not in response.headers
    older = Engine()
    assert older.note_root({"version": {"distribution": "opensearch", "number": "2.19.6"}})
    assert older.is_opensearch and older.answer_headers() == {}
    assert not Engine().note_root({"error": "no"})
    elastic = Engine()
    elastic.note_headers(CIMultiDict({"X-elastic-product": "Elasticsearch"}))
    assert elastic.known and not elastic.is_opensearch


def test_the_result_window_is_the_smallest_of_the_indices() -> None:
    """``index.max_result_window`` per index from the ``_settings`` answer (set, else default,
    else the engines' default): the smallest bounds a window over all of them."""
    answer = {"a": {"settings": {"index.max_result_window": "500"}, "defaults": {}},
              "b": {"settings": {}, "defaults": {"index.max_result_window": "10000"}},
              "c": {"settings": {}}}
    assert smallest(answer) == 500
    assert smallest({"b": answer["b"], "c": answer["c"]}) == 10_000
    for unreadable in ({}, None, [], {"a": "x"}, {"a": {"settings": {"index.max_result_window": "many"}}}):
        assert smallest(unreadable) is None


@pytest.mark.parametrize("query", ["", "neardup=off", "size=3&neardup=on&pretty", "neardup_threshold=0.5&q=a%20b",
                                   "neardup_mode=tfidf&neardup_source=x"])
@pytest.mark.parametrize("headers", [{}, {"Accept": "*/*"}, {"X-Neardup": "off"}, {"x-neardup-threshold": "0.9"},
                                     {"X-Neardup-Mode": "containment", "X-Neardup-Fingerprint-Missing": "off"}])
def test_controls_of_a_request_are_parse_controls_ones_remembered_or_not(query: str, headers: dict[str, str]) -> None:
    expected, expected_query, _ = parse_controls(query, CIMultiDict(headers))
    for _ in range(2):   # the second time from memory when no control header is given
        assert controls_of(query, CIMultiDict(headers)) == (expected, expected_query)


def test_an_invalid_control_is_refused_every_time() -> None:
    for _ in range(2):
        with pytest.raises(ProxyError) as refused:
            controls_of("neardup=maybe", CIMultiDict())
        assert refused.value.status == 400 and "neardup" in refused.value.reason
