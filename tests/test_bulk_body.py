"""The pure parts of enriched writes: bulk bodies read, fingerprints spliced, answers merged."""

from __future__ import annotations

import json

import pytest

from neardup.proxy.handlers import bulk_body
from neardup.proxy.handlers.write_routes import Write, classify_write

BODY = (b'{"index":{"_index":"a","_id":"1"}}\n{"title": "x" , "n": 1.0e0, "s": "\\u00e9"}\n'
        b'{"delete":{"_index":"a","_id":"2"}}\n'
        b'{"create":{"_id":"3"}}\n{}\n'
        b'{"update":{"_id":"4"}}\n{"doc":{"t":1}}\n')


def test_a_bulk_body_is_read_item_by_item_with_the_spans_of_its_lines() -> None:
    body = bulk_body.parse_bulk(BODY)
    assert [item.action for item in body.items] == ["index", "delete", "create", "update"]
    assert body.rest == len(BODY)
    first = body.items[0]
    assert first.index(None) == "a" and first.id == "1"
    assert first.source is not None and BODY[slice(*first.source)] == b'{"title": "x" , "n": 1.0e0, "s": "\\u00e9"}'
    assert body.items[2].index("p") == "p" and body.items[1].source is None
    assert bulk_body.rebuild(body, {}, {}, set()) == BODY


@pytest.mark.parametrize("broken", [b"not json\n{}\n", b'{"index":{}, "x":1}\n{}\n', b"\n", b'{"index":{}}'])
def test_reading_stops_at_the_first_line_that_is_no_action_and_keeps_the_rest(broken: bytes) -> None:
    data = b'{"index":{"_id":"1"}}\n{"a":1}\n' + broken + b'{"index":{"_id":"2"}}\n{"a":2}\n'
    body = bulk_body.parse_bulk(data)
    assert len(body.items) == 1
    assert bulk_body.rebuild(body, {0: b'{"a":1,"x":2}'}, {}, set()) == data.replace(b'{"a":1}', b'{"a":1,"x":2}', 1)


def test_the_splice_keeps_every_other_byte() -> None:
    source = b'{"title": "x" , "n": 1.0e0, "s": "\\u00e9"}  '
    out = bulk_body.splice(source, {"title": "x"}, {"v": "1", "super": ["ab"], "t": "\u00e9"})
    assert out == b'{"title": "x" , "n": 1.0e0, "s": "\\u00e9","neardup":{"v":"1","super":["ab"],"t":"\xc3\xa9"}}  '
    assert json.loads(out)["neardup"]["t"] == "\u00e9"
    assert bulk_body.splice(b"{ }", {}, {"v": "1"}) == b'{ "neardup":{"v":"1"}}'
    with pytest.raises(ValueError):
        bulk_body.splice(b'["x"]', {}, {})


def test_a_document_with_its_own_neardup_is_not_spliced() -> None:
    assert bulk_body.spliceable({"title": "x"})
    assert not bulk_body.spliceable({"neardup": {}})
    assert not bulk_body.spliceable({"neardup.v": "1"})


def test_dropped_items_and_new_action_lines() -> None:
    body = bulk_body.parse_bulk(BODY)
    out = bulk_body.rebuild(body, {}, {2: bulk_body.action_line("create", {"_id": "z"})}, {0})
    assert out == (b'{"delete":{"_index":"a","_id":"2"}}\n{"create":{"_id":"z"}}\n{}\n'
                   b'{"update":{"_id":"4"}}\n{"doc":{"t":1}}\n')


def test_rejected_items_are_merged_back_in_their_places() -> None:
    rejected = {1: bulk_body.rejected_item("create", "a", "2", "near-duplicate"), 3:
                bulk_body.rejected_item("index", "a", None, "near-duplicate")}
    answer = {"errors": False, "took": 3, "items": [{"index": {"_id": "1", "status": 201}},
                                                    {"index": {"_id": "3", "status": 201}},
                                                    {"delete": {"_id": "9", "status": 404}}]}
    merged = bulk_body.merge_items(answer, rejected, 4)
    assert list(merged) == ["errors", "took", "items"] and merged["errors"] is True
    assert [next(iter(item.values())).get("_id") for item in merged["items"]] == ["1", "2", "3", None, "9"]
    assert merged["items"][1] == {"create": {"_index": "a", "_id": "2", "status": 409, "error": {
        "type": "neardup_duplicate_exception", "reason": "near-duplicate", "index": "a"}}}
    failed = {"error": {"type": "x"}, "status": 400}
    assert bulk_body.merge_items(failed, rejected, 4) is failed


@pytest.mark.parametrize(("method", "path", "expected"), [
    ("POST", "/_bulk", Write("bulk", None)),
    ("PUT", "/news/_bulk", Write("bulk", "news")),
    ("POST", "/news/_doc", Write("doc", "news")),
    ("PUT", "/news/_doc/a%2Fb", Write("doc", "news", "a/b")),
    ("PUT", "/news/_create/1", Write("doc", "news", "1")),
    ("PUT", "/news/_doc", None),
    ("GET", "/news/_doc/1", None),
    ("POST", "/news/_update/1", Write("update", "news", "1")),
    ("PUT", "/news/_update/a%2Fb", Write("update", "news", "a/b")),
    ("POST", "/news/_update", None),
    ("GET", "/news/_update/1", None),
    ("POST", "/news//_bulk", None),
])
def test_write_routes(method: str, path: str, expected: Write | None) -> None:
    assert classify_write(method, path) == expected


def test_the_values_of_an_update_line_are_found_and_spliced_in_place() -> None:
    line = ' { "doc" : {"t": "\u00e9x", "n":[1,{"a":"}"}]} , "doc_as_upsert":true,"upsert":{} } '.encode()
    spans = bulk_body.value_spans(line)
    assert spans is not None
    assert {key: line[start:end] for key, (start, end) in spans.items()} == {
        "doc": '{"t": "\u00e9x", "n":[1,{"a":"}"}]}'.encode(), "doc_as_upsert": b"true", "upsert": b"{}"}
    assert bulk_body.splice_inner(line, spans["upsert"], {}, {"v": "1"}) == line.replace(b"{} }", b'{"neardup":{"v":"1"}} }')
    for bad in (b'{"a":1,}', b'{"a":1} x', b"[1]", b'{"a" 1}', b"\xff"):
        assert bulk_body.value_spans(bad) is None
    assert bulk_body.value_spans(b"{ }") == {}


def test_a_partial_doc_touches_the_text_when_it_sets_a_field_or_an_object_above_or_below_one() -> None:
    fields = ["title", "meta.body"]
    assert bulk_body.touches({"title": "x"}, fields)
    assert bulk_body.touches({"meta": {"author": "y"}}, fields)      # may replace meta.body
    assert bulk_body.touches({"title.en": "x"}, fields)
    assert bulk_body.touches({"meta.body": None}, fields)
    assert not bulk_body.touches({"n": 1, "titles": "x", "meta2": {}}, fields)
    assert not bulk_body.touches({}, fields)


def test_a_stale_fingerprint_is_spliced_as_null_and_an_inline_script_starts_by_removing_it() -> None:
    assert bulk_body.splice(b'{"body" : "x"}', {"body": "x"}, None) == b'{"body" : "x","neardup":null}'
    line = b'{ "script" : {"lang":"painless", "source" : "ctx._source.body = \\"\\u00e9\\"", "params":{}},"upsert":{}}'
    update = json.loads(line)
    spans = bulk_body.value_spans(line)
    assert spans is not None
    span = bulk_body.inline_script_span(line, update, spans)
    assert span is not None and line[span[0]:span[1]] == b'"ctx._source.body = \\"\\u00e9\\""'
    out = bulk_body.replace_spans(line, {span: bulk_body.prepend_to_string(line[span[0]:span[1]],
                                                                           bulk_body.REMOVE_FINGERPRINT),
                                         spans["upsert"]: b'{"neardup":{}}'})
    assert out == line.replace(b'"ctx._', b'"ctx._source.remove(\'neardup\');ctx._', 1).replace(
        b'"upsert":{}', b'"upsert":{"neardup":{}}')
    assert json.loads(out)["script"]["source"] == "ctx._source.remove('neardup');" + update["script"]["source"]
    short = b'{"script":"ctx._source.n += 1"}'
    assert bulk_body.inline_script_span(short, json.loads(short), bulk_body.value_spans(short) or {}) == (10, 30)
    for other in (b'{"script":{"id":"stored"}}', b'{"script":{"source":"x","lang":"mustache"}}', b'{"doc":{}}',
                  b'{"script":{"source":1}}'):
        assert bulk_body.inline_script_span(other, json.loads(other), bulk_body.value_spans(other) or {}) is None


def test_a_refusal_of_another_kind_keeps_the_engines_item_shape() -> None:
    assert bulk_body.rejected_item("index", "a", "1", "mapped as keyword", 400, "neardup_mapping_exception") == {
        "index": {"_index": "a", "_id": "1", "status": 400, "error": {
            "type": "neardup_mapping_exception", "reason": "mapped as keyword", "index": "a"}}}
