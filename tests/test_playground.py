"""The playground's server side: off by default (404), its files and settings, and the
similarity of each collapsed hit to its kept hit that the page shows (``fields["neardup.similarity"]``).

The page itself is driven in a real browser in ``tests/test_playground_browser.py``.
"""

from __future__ import annotations

import http.client
import json
from typing import Any
from urllib.parse import urlsplit

import pytest
from elasticsearch import Elasticsearch

from neardup.config import Config
from neardup.fingerprint import Fingerprint, FingerprintFormatError, estimated_containment, estimated_resemblance
from neardup.proxy.grouping.similarity import SIMILARITY_FIELD
from neardup.proxy.handlers import playground
from neardup.proxy.handlers.params import MODES
from tests.test_proxy_support import (  # noqa: F401 - fixtures
    FamilyIndex,
    ProxyThread,
    family_index,
    make_config,
    pes,
    proxy,
)

#: No Elasticsearch is needed for the proxy's own pages: nothing listens on this address.
NO_UPSTREAM = "http://127.0.0.1:9"


def fetch(base: str, path: str, method: str = "GET") -> tuple[int, dict[str, str], bytes]:
    """One raw request (the path is sent exactly as given, nothing normalised)."""
    url = urlsplit(base)
    connection = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
    try:
        connection.request(method, path)
        response = connection.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        connection.close()


def assert_es_not_found(status: int, headers: dict[str, str], body: bytes) -> dict[str, Any]:
    assert status == 404
    assert headers["content-type"].startswith("application/json")
    error = json.loads(body)
    assert error["status"] == 404
    assert error["error"]["type"] == "resource_not_found_exception"
    assert error["error"]["root_cause"][0]["type"] == "resource_not_found_exception"
    return error


# -- switched off ---------------------------------------------------------------------------
def test_the_playground_is_off_by_default() -> None:
    assert Config().proxy.playground is False


@pytest.mark.parametrize("path", ["/_neardup/", "/_neardup", "/_neardup/playground/playground.js",
                                  "/_neardup/playground/settings?index=x"])
def test_disabled_playground_answers_404_with_an_elasticsearch_error(path: str) -> None:
    with ProxyThread(make_config(NO_UPSTREAM)) as running:
        status, headers, body = fetch(running.url, path)
        error = assert_es_not_found(status, headers, body)
        assert "proxy.playground" in error["error"]["reason"]
        assert b"<" not in body  # no page, no script


def test_the_command_line_switches_it_on() -> None:
    import argparse

    from neardup.cli.proxy import register, with_overrides

    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    assert with_overrides(Config(), parser.parse_args(["proxy", "--playground"])).proxy.playground is True
    assert with_overrides(Config(), parser.parse_args(["proxy"])).proxy.playground is False


# -- switched on ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def enabled() -> Any:
    config = make_config(NO_UPSTREAM, proxy={"playground": True},
                         collapse={"threshold": 0.75, "indices": {"news-*": {"threshold": 0.6,
                                                                              "mode": "containment"}}})
    with ProxyThread(config) as running:
        yield running


def test_page_and_files_are_served_with_a_strict_content_security_policy(enabled: ProxyThread) -> None:
    status, headers, body = fetch(enabled.url, "/_neardup/")
    assert status == 200 and headers["content-type"] == "text/html; charset=utf-8"
    assert headers["content-security-policy"] == playground.CONTENT_SECURITY_POLICY
    assert "script-src 'self'" in headers["content-security-policy"]
    assert "unsafe-inline" not in headers["content-security-policy"]
    assert headers["x-content-type-options"] == "nosniff"
    page = body.decode()
    assert '<script src="playground/playground.js" defer></script>' in page
    assert "http://" not in page and "https://" not in page, "nothing is loaded from elsewhere"
    for name, content_type in (("playground.js", "text/javascript"), ("playground.css", "text/css")):
        status, headers, body = fetch(enabled.url, "/_neardup/playground/" + name)
        assert status == 200 and headers["content-type"].startswith(content_type)
        assert body == playground._static(name) and b"http" not in body
    status, headers, _ = fetch(enabled.url, "/_neardup")
    assert status == 308 and headers["location"] == "/_neardup/"
    status, _, _ = fetch(enabled.url, "/_neardup/", method="HEAD")
    assert status == 200


def test_the_script_never_parses_text_as_html_or_code() -> None:
    script = playground._static("playground.js").decode()
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(",
                 "new Function", "setAttribute(\"on", "srcdoc"):
        assert sink not in script, sink
    assert script.count("textContent") >= 5


@pytest.mark.parametrize("path", ["/_neardup/playground/nope.js", "/_neardup/playground/..%2Fapp.py",
                                  "/_neardup/playground/../playground.html",
                                  "/_neardup/playground/%2e%2e/%2e%2e/neardup/config.py"])
def test_only_the_playground_files_are_served(enabled: ProxyThread, path: str) -> None:
    status, headers, body = fetch(enabled.url, path)
    assert_es_not_found(status, headers, body)
    assert b"import" not in body and b"<html" not in body


def test_settings_tell_the_page_the_configured_threshold_mode_and_override(enabled: ProxyThread) -> None:
    status, _, body = fetch(enabled.url, "/_neardup/playground/settings?index=news-2024")
    settings = json.loads(body)
    assert status == 200
    assert settings["collapse"] == {"enabled": True, "threshold": 0.6, "mode": "containment",
                                    "override": "news-*"}
    assert settings["defaults"]["threshold"] == 0.75 and settings["defaults"]["mode"] == "resemblance"
    assert settings["modes"] == list(MODES)
    assert settings["fields"] == ["title", "body"]
    status, _, body = fetch(enabled.url, "/_neardup/playground/settings?index=archive")
    assert json.loads(body)["collapse"] == {"enabled": True, "threshold": 0.75, "mode": "resemblance",
                                            "override": None}


# -- with proxy.ops_address: served there, like /_neardup/health ------------------------------
@pytest.mark.es
def test_with_an_ops_address_the_playground_and_its_searches_are_served_there(
        es_url: str, family_index: FamilyIndex) -> None:
    import asyncio

    import aiohttp
    from aiohttp import web

    from neardup.proxy.app import create_app, create_ops_app

    config = make_config(es_url, proxy={"playground": True, "ops_address": "127.0.0.1:0"})

    async def scenario() -> dict[str, tuple[int, Any]]:
        main = create_app(config)
        ops = create_ops_app(main)
        runners, urls = [], []
        for app in (main, ops):   # the main application first: it opens the shared upstream session
            runner = web.AppRunner(app, access_log=None)
            await runner.setup()
            await web.TCPSite(runner, "127.0.0.1", 0).start()
            runners.append(runner)
            urls.append(f"http://127.0.0.1:{runner.addresses[0][1]}")
        main_url, ops_url = urls
        results: dict[str, tuple[int, Any]] = {}
        try:
            async with aiohttp.ClientSession() as session:
                async def call(key: str, method: str, url: str, body: Any = None) -> None:
                    async with session.request(method, url, json=body, allow_redirects=False) as response:
                        text = await response.text()
                        results[key] = (response.status, json.loads(text) if "json" in response.content_type
                                        else text)

                await call("main page", "GET", main_url + "/_neardup/")
                await call("ops page", "GET", ops_url + "/_neardup/")
                await call("ops settings", "GET", ops_url + "/_neardup/playground/settings?index=x")
                await call("ops indices", "GET", ops_url + "/_cat/indices?format=json&h=index")
                await call("ops mapping", "GET", ops_url + "/_mapping/field/neardup.v")
                await call("ops search", "POST", f"{ops_url}/{family_index.name}/_search?neardup_threshold=0.8",
                           {"sort": ["rank"], "size": 10})
                await call("ops bulk", "POST", ops_url + "/_bulk", {})
                await call("ops index doc", "PUT", f"{ops_url}/{family_index.name}/_doc/1", {"a": 1})
        finally:
            for runner in reversed(runners):
                await runner.cleanup()
        return results

    results = asyncio.run(scenario())
    status, body = results["main page"]
    assert status == 404 and body["error"]["reason"] == playground.MOVED_REASON
    status, page = results["ops page"]
    assert status == 200 and "playground/playground.js" in page
    assert results["ops settings"][0] == 200
    status, indices = results["ops indices"]
    assert status == 200 and family_index.name in {row["index"] for row in indices}
    assert family_index.name in results["ops mapping"][1]
    status, search = results["ops search"]
    assert status == 200 and search["neardup"]["threshold"] == 0.8 and len(search["hits"]["hits"]) == 10
    # Nothing but the page's own read requests is forwarded on the ops address.
    for key in ("ops bulk", "ops index doc"):
        assert results[key][0] in (404, 405) and "error" in results[key][1], key


# -- the similarity of each collapsed hit to its kept hit -------------------------------------
def test_annotate_puts_the_similarity_to_the_kept_hit_on_each_collapsed_hit_only() -> None:
    from neardup.fingerprint import Fingerprinter, FingerprintParams
    from neardup.proxy.grouping.fingerprints import default_algorithms
    from neardup.proxy.grouping.similarity import annotate

    params = FingerprintParams()
    fingerprinter, read = Fingerprinter(params), default_algorithms(params).read
    base = " ".join(f"word{k} said the company on monday" for k in range(40))
    texts = [base, base + " and more words at the end of it", base.replace("word3 ", "other ")]
    stored = [fingerprinter.fingerprint(t).to_source() for t in texts]

    def hits() -> list[dict]:
        return [{"_id": "kept", "_source": {"neardup": stored[0]}},
                {"_id": "longer", "_source": {"neardup": stored[1]}, "fields": {"rank": [3]}},
                {"_id": "none", "_source": {}},
                {"_id": "alone", "_source": {"neardup": stored[2]}},
                {"_id": "edited", "_source": {"neardup": stored[2]}}]

    prints = [Fingerprint.from_source(s) for s in stored]
    for mode in ("resemblance", "containment"):
        page = hits()
        annotate(page, [[0, 1, 2, 4], [3]], "_source", mode, read)
        assert "fields" not in page[0] and "fields" not in page[2] and "fields" not in page[3]
        for position, other in ((1, prints[1]), (4, prints[2])):
            exact = estimated_resemblance(prints[0], other) if mode == "resemblance" else \
                max(estimated_containment(prints[0], other), estimated_containment(other, prints[0]))
            assert page[position]["fields"][SIMILARITY_FIELD] == [round(exact, 4)]
        assert page[1]["fields"]["rank"] == [3]
    page = hits()
    annotate(page, [[0, 1, 2, 3, 4]], "_source", "some-later-mode", read)
    assert page == hits(), "no number for a mode without an estimator"


def grouped_fingerprint(index: FamilyIndex, doc_id: str) -> Fingerprint:
    """The fingerprint the proxy groups a document by: its stored one, or, when it has none of
    the current scheme (the x-* documents), the one computed from its text at query time."""
    doc, fp = index.docs[doc_id], index.fingerprinter
    assert fp is not None
    try:
        stored = Fingerprint.from_source(doc.get("neardup"))
    except (FingerprintFormatError, TypeError):
        stored = None
    if stored is not None and stored.version == fp.version:
        return stored
    return fp.fingerprint_fields([doc["title"], doc["body"]])


def expected_similarity(index: FamilyIndex, kept: str, other: str, mode: str) -> float:
    a = grouped_fingerprint(index, kept)
    b = grouped_fingerprint(index, other)
    if mode == "resemblance":
        return estimated_resemblance(a, b)
    return max(estimated_containment(a, b), estimated_containment(b, a))


@pytest.mark.es
@pytest.mark.parametrize("mode, body", [
    ("resemblance", {}),
    ("containment", {}),
    ("resemblance", {"_source": False}),            # fingerprints come through `fields`
    ("resemblance", {"_source": ["title"], "fields": ["rank"]}),
])
def test_collapsed_hits_carry_their_estimated_similarity_to_the_kept_hit(
        pes: Elasticsearch, family_index: FamilyIndex, mode: str, body: dict) -> None:
    response = pes.options(headers={"X-Neardup-Mode": mode}).search(
        index=family_index.name, sort=["rank"], size=40, **body).body
    checked = 0
    for top in response["hits"]["hits"]:
        assert SIMILARITY_FIELD not in top["fields"]
        for member in top["inner_hits"]["neardup"]["hits"]["hits"]:
            value = member["fields"][SIMILARITY_FIELD]
            assert isinstance(value, list) and len(value) == 1
            assert value[0] == pytest.approx(expected_similarity(family_index, top["_id"], member["_id"], mode),
                                             abs=1e-4)
            assert 0.0 <= value[0] <= 1.0
            checked += 1
        if "fields" in body:
            assert set(top["fields"]) == {"rank", "neardup.group"}
    assert checked >= 10, "the family index has collapsed copies"


@pytest.mark.es
def test_msearch_items_carry_the_similarity_too(pes: Elasticsearch, family_index: FamilyIndex) -> None:
    def similarities(result: dict) -> dict[tuple[str, str], float]:
        return {(top["_id"], member["_id"]): member["fields"][SIMILARITY_FIELD][0]
                for top in result["hits"]["hits"] for member in top["inner_hits"]["neardup"]["hits"]["hits"]}

    searches = [{"sort": ["rank"], "size": 40}, {"sort": ["rank"], "size": 5, "_source": False}]
    response = pes.msearch(searches=[line for body in searches
                                     for line in ({"index": family_index.name}, body)]).body
    for body, item in zip(searches, response["responses"]):
        alone = pes.search(index=family_index.name, **body).body
        assert similarities(item) == similarities(alone)
    assert len(similarities(response["responses"][0])) >= 10
