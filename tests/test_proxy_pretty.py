"""``?pretty`` answers the proxy builds itself are Elasticsearch's bytes (proxy/jsonio.py).

Elasticsearch pretty-prints with Jackson: ``"key" : value``, ``{ }`` and ``[ ]`` for empty
containers, one array element per line, a final line feed, and a ``_source`` parsed and
written again (floats in Java's notation, Jackson's escapes). The unit tests pin that format
on inputs taken from Elasticsearch 8.19's own answers; the ``es`` tests compare the proxy's
printer and the proxy itself with the dev node, byte for byte.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from typing import Any

import msgspec
import pytest
import urllib3
from elasticsearch import Elasticsearch

from neardup.proxy.transport import jsonio
from tests.test_proxy_support import ProxyThread, proxy  # noqa: F401 - fixture

_POOL = urllib3.PoolManager(retries=False, timeout=urllib3.Timeout(total=60))

#: A stored ``_source`` with every kind of value, and Elasticsearch 8.19's ``?pretty`` of it
#: (``GET <index>/_doc/1?pretty``, the ``_source`` part, shifted left by 4 columns).
SOURCE = (rb'{"b":1,"a":{"z":[],"y":{},"x":[1,2.50,-3e5,1E20,1.0,123456789012345678901234567890,'
          rb'0.1e-7, -0, 1.5E+3, 12345678901234567890],"w":[{"q":null},{"r":true,"s":false}]},'
          rb'"s":"tab\there \"q\" \\ \u00e9 ' b'\xc3\xa9 \xf0\x9d\x84\x9e' rb' \ud834\udd1e \u0001 \u001f '
          rb'\u007f / \/ <>&\u2028 \u00A0","big":-9999999999999999999, "nested":[[],[[]],{}],   '
          rb'"emptykey":{"":""}}')
SOURCE_PRETTY = (
    b'{\n'
    b'  "b" : 1,\n'
    b'  "a" : {\n'
    b'    "z" : [ ],\n'
    b'    "y" : { },\n'
    b'    "x" : [\n'
    b'      1,\n      2.5,\n      -300000.0,\n      1.0E20,\n      1.0,\n'
    b'      123456789012345678901234567890,\n      1.0E-8,\n      0,\n      1500.0,\n'
    b'      12345678901234567890\n'
    b'    ],\n'
    b'    "w" : [\n'
    b'      {\n        "q" : null\n      },\n'
    b'      {\n        "r" : true,\n        "s" : false\n      }\n'
    b'    ]\n'
    b'  },\n'
    b'  "s" : "tab\\there \\"q\\" \\\\ \xc3\xa9 \xc3\xa9 \\uD834\\uDD1E \\uD834\\uDD1E \\u0001 \\u001F '
    b'\x7f / / <>&\xe2\x80\xa8 \xc2\xa0",\n'
    b'  "big" : -9999999999999999999,\n'
    b'  "nested" : [\n    [ ],\n    [\n      [ ]\n    ],\n    { }\n  ],\n'
    b'  "emptykey" : {\n    "" : ""\n  }\n'
    b'}\n')

#: More values for the node: floats where Java's notation differs from Python's, escapes,
#: lone surrogates.
SOURCES = [
    SOURCE,
    rb'{"f":[1.1,0.30000000000000004,1e22,9999999.0,10000000.0,0.001,0.000999,123.456e-10,'
    rb'-0.0,0.0,1.7976931348623157e308,2.2250738585072014E-308,0.1000000000000000055511151231257827,'
    rb'1.0e-7,3.0e10,5e-324,4.9e-324,-1e-5],'
    rb'"s":"\ud800 x \udc00 \u0000 \b\f\n\r\t \u0008 \u000b \u007f\u0080 \uffff \ufeff"}',
    '{"\u00e9t\u00e9":{"k\\"ey":["\U0001F600",{"":[{}]}],"n":[-0,-12,3E-2]},"t":" x "}'.encode(),
    b'{ "spaced" : [ 1 , { "a" : [ ] } ] ,\n\t"e" : { } }',
]
#: Numbers no double holds: Jackson writes the strings "Infinity" and "-Infinity". Not ranked,
#: so the searches leave it out (the proxy's reader refuses it once anything else in the window,
#: such as a lone surrogate escape, makes it parse the whole answer, and it fails open).
INFINITE = b'{"big":[1e400,-1e400,1E+999]}'


# -- the printer -------------------------------------------------------------------------------
def test_a_source_is_printed_as_elasticsearch_prints_it() -> None:
    assert jsonio.pretty_bytes(SOURCE) == SOURCE_PRETTY


@pytest.mark.parametrize(("compact", "pretty"), [
    (b"{}", b"{ }\n"),
    (b"[]", b"[ ]\n"),
    (b'{"a":[]}', b'{\n  "a" : [ ]\n}\n'),
    (b'[{},[],[1]]', b'[\n  { },\n  [ ],\n  [\n    1\n  ]\n]\n'),
    (b'{"a":{"b":{"c":"d"}}}', b'{\n  "a" : {\n    "b" : {\n      "c" : "d"\n    }\n  }\n}\n'),
    (b'"x"', b'"x"\n'),
    (b'[true,false,null]', b'[\n  true,\n  false,\n  null\n]\n'),
    (b'{"a:b,[]{}":"],:{"}', b'{\n  "a:b,[]{}" : "],:{"\n}\n'),
    # strings as Jackson escapes them
    (b'"plain \xc3\xa9 \xe2\x80\xa8"', b'"plain \xc3\xa9 \xe2\x80\xa8"\n'),
    (rb'"\u00e9\/\u007f"', b'"\xc3\xa9/\x7f"\n'),
    (rb'"\u0000\u0008\u000b\u001f\t\n\r\f"', rb'"\u0000\b\u000B\u001F\t\n\r\f"' + b"\n"),
    (b'"\xf0\x9f\x98\x80"', rb'"\uD83D\uDE00"' + b"\n"),
    (rb'"\ud800 \udfff"', rb'"\uD800 \uDFFF"' + b"\n"),
    (rb'"\"\\"', rb'"\"\\"' + b"\n"),
])
def test_layout_and_strings(compact: bytes, pretty: bytes) -> None:
    assert jsonio.pretty_bytes(compact) == pretty


@pytest.mark.parametrize(("text", "java"), [
    # What Elasticsearch 8.19 (on JDK 17) wrote for these values in a pretty ``_source``.
    ("2.50", "2.5"), ("-3e5", "-300000.0"), ("1E20", "1.0E20"), ("1.0", "1.0"), ("0.1e-7", "1.0E-8"),
    ("1.5E+3", "1500.0"), ("1e22", "1.0E22"), ("9999999.0", "9999999.0"), ("10000000.0", "1.0E7"),
    ("0.001", "0.001"), ("0.000999", "9.99E-4"), ("123.456e-10", "1.23456E-8"), ("-0.0", "-0.0"),
    ("0.0", "0.0"), ("1.7976931348623157e308", "1.7976931348623157E308"), ("5e-324", "4.9E-324"),
    ("0.30000000000000004", "0.30000000000000004"), ("0.1000000000000000055511151231257827", "0.1"),
    # JDK 19+ (Elasticsearch's bundled JDK): the shortest decimal; JDK 17 writes 1.9999999999999998E23.
    ("2e23", "2.0E23"), ("1e23", "1.0E23"),
    # JDK 19+: a closer two-digit decimal beats a one-digit one (2 × Double.MIN_VALUE).
    ("1e-323", "9.9E-324"),
])
def test_java_double(text: str, java: str) -> None:
    assert jsonio.java_double(float(text)) == java


def test_numbers_are_written_back_as_jackson_writes_them() -> None:
    assert jsonio.pretty_bytes(b"[-0,0,7,-12e0,1e400,-1e400,123456789012345678901234567890]") == \
        b'[\n  0,\n  0,\n  7,\n  -12.0,\n  "Infinity",\n  "-Infinity",\n  123456789012345678901234567890\n]\n'


def test_raw_and_parsed_sources_print_the_same() -> None:
    """A hit's ``_source`` kept raw (the fast decode) and one parsed (``filter_path`` into it, a
    pretty upstream answer) print alike, and so does the standard library's fallback (an
    integer beyond 64 bits outside the source, which orjson refuses)."""
    for source in SOURCES:
        raw = {"hits": [{"_id": "1", "_score": 1.0e-5, "_source": msgspec.Raw(source)}]}
        parsed = {"hits": [{"_id": "1", "_score": 1.0e-5, "_source": jsonio.loads(source)}]}
        assert jsonio.dumps(raw, pretty=True) == jsonio.dumps(parsed, pretty=True)
        fallback = {**parsed, "big": 2**70}
        assert jsonio.dumps(fallback, pretty=True) == jsonio.dumps({**raw, "big": 2**70}, pretty=True)
        assert jsonio.dumps(fallback, pretty=True).endswith(b'  "big" : 1180591620717411303424\n}\n')


def test_compact_output_is_unchanged() -> None:
    value = {"a": [1.0e-5, "\xe9"], "_source": msgspec.Raw(b'{ "x" : 1.50 }')}
    assert jsonio.dumps(value) == b'{"a":[0.00001,"\xc3\xa9"],"_source":{ "x" : 1.50 }}'
    assert jsonio.dumps(value, pretty=True) == \
        b'{\n  "a" : [\n    1.0E-5,\n    "\xc3\xa9"\n  ],\n  "_source" : {\n    "x" : 1.5\n  }\n}\n'


# -- against Elasticsearch ---------------------------------------------------------------------
def get(url: str, body: bytes | None = None, content_type: str = "application/json") -> tuple[int, Any, bytes]:
    reply = _POOL.request("POST" if body is not None else "GET", url, body=body,
                          headers={"Content-Type": content_type})
    return reply.status, reply.headers, reply.data


@pytest.fixture(scope="module")
def pretty_index(es: Elasticsearch, es_url: str) -> Iterator[str]:
    """``SOURCES`` as documents 0… (``payload`` not indexed), each with a double ``rank``."""
    name = f"proxy-pretty-{uuid.uuid4().hex[:8]}"
    es.indices.create(index=name, settings={"number_of_shards": 1, "number_of_replicas": 0},
                      mappings={"dynamic": False, "properties": {
                          "rank": {"type": "double"}, "payload": {"type": "object", "enabled": False}}})
    try:
        ranks = [b"1e20", b"1.0E-5", b"2.5", b"-12345678.9"]
        for number, (source, rank) in enumerate(zip(SOURCES, ranks)):
            doc = b'{"rank":' + rank + b',"payload":' + source + b"}"
            status, _, text = get(f"{es_url}/{name}/_doc/{number}", doc)
            assert status in (200, 201), text
        status, _, text = get(f"{es_url}/{name}/_doc/infinite", b'{"payload":' + INFINITE + b"}")
        assert status == 201, text
        es.indices.refresh(index=name)
        yield name
    finally:
        es.options(ignore_status=404).indices.delete(index=name)


@pytest.mark.es
def test_documents_print_as_elasticsearch_prints_them(es_url: str, pretty_index: str) -> None:
    """Elasticsearch's compact answer, through the printer, is its ``?pretty`` answer (the
    stored sources re-rendered as Elasticsearch re-renders them), raw or parsed."""
    for number, source in [*enumerate(SOURCES), ("infinite", INFINITE)]:
        _, _, compact = get(f"{es_url}/{pretty_index}/_doc/{number}")
        status, _, pretty = get(f"{es_url}/{pretty_index}/_doc/{number}?pretty")
        assert status == 200 and source in compact
        assert jsonio.pretty_bytes(compact) == pretty
        if source is not INFINITE:   # the proxy's reader refuses what no double holds
            assert jsonio.dumps(jsonio.loads(compact), pretty=True) == pretty


@pytest.mark.es
@pytest.mark.parametrize("filter_path", [
    "hits.hits._id,hits.hits._source,hits.hits.sort,hits.total,aggregations",
    "hits.hits._source.payload.a,hits.hits._source.payload.f,hits.hits._source.rank",
])
def test_a_collapsed_search_prints_as_elasticsearch_does(proxy: ProxyThread, es_url: str, pretty_index: str,
                                                         filter_path: str) -> None:
    """Nothing folds (no fingerprints), so with a ``filter_path`` that leaves out ``took`` and
    what the proxy adds, the collapsed page is Elasticsearch's page: sort values and an
    aggregation's doubles (Java's notation), the sources as Elasticsearch re-renders them (the
    second ``filter_path`` reaches into ``_source``, which the proxy then parses)."""
    body = json.dumps({"query": {"exists": {"field": "rank"}}, "sort": [{"rank": "desc"}],
                       "aggs": {"total": {"sum": {"field": "rank"}}, "low": {"min": {"field": "rank"}}}}).encode()
    path = f"/{pretty_index}/_search?pretty&filter_path={filter_path}"
    direct = get(es_url + path, body)
    mine = get(proxy.url + path, body)
    assert direct[0] == mine[0] == 200
    assert "X-Neardup-Skipped" not in mine[1], "the proxy collapsed this search itself"
    assert mine[2] == direct[2]
    _, headers, compact = get(proxy.url + f"/{pretty_index}/_search", body)
    assert "X-Neardup-Skipped" not in headers and b'"neardup":{' in compact


@pytest.mark.es
def test_a_collapsed_msearch_prints_as_elasticsearch_does(proxy: ProxyThread, es_url: str, pretty_index: str) -> None:
    ranked = {"exists": {"field": "rank"}}
    lines = [{"index": pretty_index}, {"query": ranked, "sort": [{"rank": "asc"}], "size": 3},
             {"index": pretty_index + "-missing"}, {}]   # an item's error (index_not_found)
    body = b"".join(json.dumps(line).encode() + b"\n" for line in lines)
    path = "/_msearch?pretty&filter_path=responses.hits.hits._source,responses.hits.hits.sort,responses.error.type"
    direct = get(es_url + path, body, "application/x-ndjson")
    mine = get(proxy.url + path, body, "application/x-ndjson")
    assert direct[0] == mine[0] == 200
    assert mine[2] == direct[2]


def skeleton(pretty: bytes) -> bytes:
    """Pretty JSON with every string value emptied: its format, not its messages."""
    return re.sub(rb'(:\s*)"(?:[^"\\]|\\.)*"', rb'\1""', pretty)


@pytest.mark.es
def test_the_proxys_errors_print_as_elasticsearchs_errors(proxy: ProxyThread, es_url: str, pretty_index: str) -> None:
    for pretty in ("pretty", "pretty=true", "pretty=false"):
        es_status, _, theirs = get(f"{es_url}/{pretty_index}/_search?search_type=bogus&{pretty}")
        status, _, mine = get(f"{proxy.url}/{pretty_index}/_search?neardup_threshold=2&{pretty}")
        assert status == es_status == 400 and b"neardup_threshold" in mine
        assert skeleton(mine) == skeleton(theirs)
        assert mine.endswith(b"}" if pretty == "pretty=false" else b"}\n")
