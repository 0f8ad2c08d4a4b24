"""The playground page in a real browser: Debian's Chromium, headless, driven by Selenium
through Debian's chromedriver (``make browser-deps`` installs both), against the real
Elasticsearch with Reuters-21578 enriched, through a proxy with the playground enabled.

What the page shows is checked against the proxy's JSON for the very request the page made
(it prints the request; the test sends it again itself). Screenshots go to a temporary folder,
or to ``$NEARDUP_SCREENSHOTS`` when set (``NEARDUP_SCREENSHOTS=docs/images`` refreshes the
documentation's ``docs/images/playground.png``), so an ordinary test run leaves the work tree as it was.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from elasticsearch import Elasticsearch, helpers

from neardup.corpora import reuters_documents
from neardup.fingerprint import Fingerprinter, FingerprintParams
from neardup.proxy.handlers.params import MODES
from tests.test_proxy_support import ProxyThread, make_config, mapping

pytestmark = [pytest.mark.es, pytest.mark.slow]

SCREENSHOTS = Path(os.environ.get("NEARDUP_SCREENSHOTS") or Path(tempfile.gettempdir()) / "neardup-screenshots")
CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
CHROME_ARGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
               "--disable-background-networking", "--disable-component-update", "--disable-sync",
               "--hide-scrollbars", "--force-device-scale-factor=1")
WAIT = 60  # seconds for the page to answer; searches take milliseconds, a loaded CI machine longer
#: Words as the page splits them (``/[\p{L}\p{N}]+/u``).
WORD = re.compile(r"[^\W_]+")
#: Queries whose first page holds near-duplicates in Reuters-21578; the test takes the one with
#: the most groups holding a collapsed hit that is not an exact copy, so the page (and the
#: screenshot) shows groups and marked words.
CANDIDATE_QUERIES = ("gold mine ounces", "bank of japan bills", "fed customer repurchase agreements",
                     "bundesbank money market liquidity", "treasury balance at fed")


def browser_tools_or_skip() -> None:
    """The browser and its driver, or a skip with the fix (a failure under CI, which installs them)."""
    missing = [path for path in (CHROMIUM, CHROMEDRIVER) if not shutil.which(path)]
    try:
        import selenium  # noqa: F401
    except ImportError:
        missing.append("selenium (pip install -e '.[dev]')")
    if missing:
        message = f"missing {', '.join(missing)}: run `make browser-deps` (as root)"
        if os.environ.get("CI"):
            pytest.fail(message, pytrace=False)
        pytest.skip(message)


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Any]:
    browser_tools_or_skip()
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = CHROMIUM
    for arg in (*CHROME_ARGS, f"--user-data-dir={tmp_path / 'chromium-profile'}", "--window-size=1400,1000"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(WAIT)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture(scope="module")
def playground_proxy(es_url: str) -> Iterator[ProxyThread]:
    with ProxyThread(make_config(es_url, proxy={"playground": True})) as running:
        yield running


# -- helpers ------------------------------------------------------------------------------------
def post(url: str, body: dict) -> dict:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.loads(response.read())


def wait_ready(driver: Any, after: int = 0, settled: bool = False) -> None:
    """Until the page has rendered a search newer than ``after`` (its sequence number);
    ``settled``: until it is done at all, with results or with an error."""
    from selenium.webdriver.support.ui import WebDriverWait

    def ready(d: Any) -> bool:
        state = d.execute_script("return [document.body.dataset.state, document.body.dataset.seq || '0']")
        if settled:
            return state[0] in ("ready", "error")
        if state[0] == "error":
            raise AssertionError("the page shows an error: " + d.find_element("id", "status").text)
        return state[0] == "ready" and int(state[1]) > after

    WebDriverWait(driver, WAIT, poll_frequency=0.1).until(ready)


def seq(driver: Any) -> int:
    return int(driver.execute_script("return document.body.dataset.seq || '0'"))


def text_of(element: Any) -> str:
    return element.get_property("textContent")


def page_request(driver: Any) -> tuple[str, dict]:
    """The collapsed search the page made, as it prints it: (path with query string, body)."""
    lines = text_of(driver.find_element("id", "request-text")).split("\n")
    method, path = lines[0].split(" ", 1)
    assert method == "POST"
    return path, json.loads(lines[1])


def shown_groups(driver: Any) -> list[dict[str, Any]]:
    return driver.execute_script("""
        return Array.from(document.querySelectorAll('#groups > li.group')).map(function (g) {
          return {id: g.dataset.id, title: g.querySelector('.title').textContent,
                  count: g.querySelector('.count').textContent,
                  members: Array.from(g.querySelectorAll('.member')).map(function (m) {
                    var s = m.querySelector('.similarity');
                    return {id: m.dataset.id, similarity: s.textContent, value: s.dataset.value || null};
                  })};
        });""")


def summary_value(driver: Any, key: str) -> str:
    return text_of(driver.find_element("css selector", f'#summary .stat[data-key="{key}"] dd'))


def assert_page_matches_proxy(driver: Any, proxy_url: str) -> dict:
    """Everything the page shows for its last search equals the proxy's JSON for that request."""
    path, body = page_request(driver)
    collapsed = post(proxy_url + path, body)
    plain = post(proxy_url + path.split("?", 1)[0] + "?neardup=off", body)
    groups = shown_groups(driver)
    hits = collapsed["hits"]["hits"]
    assert [g["id"] for g in groups] == [h["_id"] for h in hits]
    for group, top in zip(groups, hits):
        members = top["inner_hits"]["neardup"]["hits"]["hits"]
        assert group["title"] == top["_source"]["title"]
        assert group["count"] == f"{len(members) + 1} hit{'s' if members else ''}"
        assert [m["id"] for m in group["members"]] == [m["_id"] for m in members]
        for shown, member in zip(group["members"], members):
            value = member["fields"]["neardup.similarity"][0]
            assert float(shown["value"]) == value
            assert shown["similarity"] == f"similarity {value:.2f}"
    summary = collapsed["neardup"]
    assert summary_value(driver, "threshold") == f"{summary['threshold']:.2f}"
    assert summary_value(driver, "mode") == summary["mode"]
    for key in ("groups", "collapsed", "window", "fingerprinted"):
        assert summary_value(driver, key) == str(summary[key]), key
    shown_plain = [li.get_attribute("data-id") for li in driver.find_elements("css selector", "#plain > li.plain-hit")]
    assert shown_plain == [h["_id"] for h in plain["hits"]["hits"]]
    assert "neardup" not in plain, "the right-hand column is not collapsed"
    return collapsed


def words(text: str) -> list[str]:
    return WORD.findall(text)


def assert_marks_are_the_words_not_shared(member: Any) -> int:
    """In both panes of a collapsed hit, the marked words are exactly, in order, the words of
    that text absent (case-insensitively) from the other text."""
    kept_pane = member.find_element("css selector", ".pane.kept .pane-text")
    other_pane = member.find_element("css selector", ".pane.other .pane-text")
    kept_text, other_text = text_of(kept_pane), text_of(other_pane)
    kept_words = {w.lower() for w in words(kept_text)}
    other_words = {w.lower() for w in words(other_text)}
    marked = 0
    for pane, text, against in ((kept_pane, kept_text, other_words), (other_pane, other_text, kept_words)):
        marks = [text_of(m) for m in pane.find_elements("css selector", "mark")]
        assert marks == [w for w in words(text) if w.lower() not in against]
        marked += len(marks)
    return marked


def pick_query(proxy_url: str, index: str) -> str:
    def score(query: str) -> tuple[int, int, int]:
        """(groups with a collapsed hit that differs, groups with collapsed hits, hits collapsed)
        on the first page at threshold 0.7."""
        body = {"size": 10, "query": {"multi_match": {"query": query, "fields": ["title", "body"]}},
                "_source": {"excludes": ["neardup"]}}
        response = post(f"{proxy_url}/{index}/_search?neardup_threshold=0.7", body)
        similarities = [[m["fields"]["neardup.similarity"][0] for m in h["inner_hits"]["neardup"]["hits"]["hits"]]
                        for h in response["hits"]["hits"]]
        return (sum(1 for group in similarities if group and min(group) < 1.0),
                sum(1 for group in similarities if group), response["neardup"]["collapsed"])

    scored = sorted(((score(q), q) for q in CANDIDATE_QUERIES), reverse=True)
    assert scored[0][0][1] >= 1, f"no candidate query collapses anything: {scored}"
    return scored[0][1]


def screenshot(driver: Any, name: str, max_height: int = 2400) -> Path:
    """A PNG of the page from its top (as tall as its content, at most ``max_height`` pixels)
    under ``SCREENSHOTS``."""
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(1400, min(max(int(height), 900), max_height))
    driver.execute_script("window.scrollTo(0, 0)")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / name
    assert driver.save_screenshot(str(path))
    driver.set_window_size(1400, 1000)
    return path


# -- the end-to-end test --------------------------------------------------------------------------
def test_playground_shows_what_the_proxy_answers(browser: Any, playground_proxy: ProxyThread,
                                                 reuters_index: str) -> None:
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import Select, WebDriverWait

    driver, url = browser, playground_proxy.url
    query = pick_query(url, reuters_index)
    driver.get(url + "/_neardup/")
    # The first index of the picker is searched at once; on the shared test node it may be
    # another test's index, gone meanwhile, so an error there is not this test's concern.
    wait_ready(driver, settled=True)
    assert driver.title == "neardup playground"
    fingerprinted = driver.execute_script(
        "return Array.from(document.querySelectorAll('#index optgroup')).filter(function (g) {"
        "  return g.label === 'with neardup fingerprints'; }).map(function (g) {"
        "  return Array.from(g.querySelectorAll('option')).map(function (o) { return o.value; }); })[0] || []")
    assert reuters_index in fingerprinted
    # The mode switch offers exactly the modes the proxy accepts.
    offered = [e.get_attribute("value") for e in driver.find_elements("css selector", "#modes input")]
    assert offered == list(MODES)

    # Pick the index: the configured threshold and mode are loaded and a search runs.
    # On a node holding only this index it is already selected and searched: selecting it
    # again fires no change event, so wait for a new search only when the selection changes.
    picker = Select(driver.find_element("id", "index"))
    if picker.first_selected_option.get_attribute("value") != reuters_index:
        before = seq(driver)
        picker.select_by_value(reuters_index)
        wait_ready(driver, before)
    else:
        wait_ready(driver)
    assert text_of(driver.find_element("id", "threshold-value")) == "0.80"

    # Type a query.
    before = seq(driver)
    box = driver.find_element("id", "query")
    box.clear()
    box.send_keys(query + Keys.ENTER)
    wait_ready(driver, before)
    path, body = page_request(driver)
    assert body["query"]["multi_match"]["query"] == query
    assert "neardup_threshold=0.80" in path and "neardup_mode=resemblance" in path
    at_080 = assert_page_matches_proxy(driver, url)

    # Move the threshold down to 0.70 with the keyboard, as a person would.
    before = seq(driver)
    slider = driver.find_element("id", "threshold")
    slider.send_keys(*[Keys.ARROW_LEFT] * 10)
    assert text_of(driver.find_element("id", "threshold-value")) == "0.70"
    wait_ready(driver, before)
    WebDriverWait(driver, WAIT).until(lambda d: "neardup_threshold=0.70" in page_request(d)[0]
                                      and d.execute_script("return document.body.dataset.state") == "ready")
    at_070 = assert_page_matches_proxy(driver, url)
    assert at_070["neardup"]["threshold"] == 0.7 and at_080["neardup"]["threshold"] == 0.8
    assert at_070["neardup"]["collapsed"] >= 1, "the query was picked for its near-duplicates at 0.7"
    snippet = text_of(driver.find_element("id", "snippet"))
    assert f'[collapse.indices."{reuters_index}"]' in snippet
    assert "threshold = 0.70" in snippet and 'mode = "resemblance"' in snippet
    driver.find_element("css selector", 'input[name=scope][value="global"]').click()
    snippet = text_of(driver.find_element("id", "snippet"))
    assert snippet.splitlines()[1:] == ["[collapse]", "threshold = 0.70", 'mode = "resemblance"']
    driver.find_element("css selector", 'input[name=scope][value="index"]').click()

    # Expand a group with collapsed hits: the one holding the least similar hit (the most
    # words to mark), among the smallest ones (so that it fits the screenshot).
    groups = driver.find_elements("css selector", "#groups > li.group.has-members")

    def least_similar(g: Any) -> tuple[int, float]:
        values = [float(e.get_attribute("data-value") or 1) for e in g.find_elements("css selector", ".similarity")]
        return min(int(g.get_attribute("data-members")), 3), min(values)

    group = min(groups, key=least_similar)
    members_list = group.find_element("css selector", ".members")
    assert not members_list.is_displayed()
    group.find_element("css selector", ".toggle").click()
    assert members_list.is_displayed()
    assert group.find_element("css selector", ".toggle").get_attribute("aria-expanded") == "true"
    members = group.find_elements("css selector", ".member")
    assert members and all(m.is_displayed() for m in members)
    marked = sum(assert_marks_are_the_words_not_shared(member) for member in members)
    lowest = min(float(m.find_element("css selector", ".similarity").get_attribute("data-value"))
                 for m in members)
    if lowest < 0.95:  # shingle sets that far apart differ in words (Reuters has no pure reorderings)
        assert marked > 0
    screenshot(driver, "playground.png", max_height=1700)

    # The mode switch: containment.
    before = seq(driver)
    driver.find_element("id", "mode-containment").click()
    wait_ready(driver, before)
    assert "neardup_mode=containment" in page_request(driver)[0]
    at_containment = assert_page_matches_proxy(driver, url)
    assert at_containment["neardup"]["mode"] == "containment"
    expand_all = driver.find_element("id", "expand-all")
    expand_all.click()
    assert all(m.is_displayed() for m in driver.find_elements("css selector", "#groups .member"))
    assert expand_all.text == "Collapse all groups"
    expand_all.click()
    assert not any(m.is_displayed() for m in driver.find_elements("css selector", "#groups .member"))
    screenshot(driver, "playground-containment.png")


# -- nothing from a document runs ------------------------------------------------------------------
PAYLOADS = {
    "script": '<script>window.__neardupPwned = 1; document.title = "pwned"</script>',
    "img": '<img src=x onerror="window.__neardupPwned = 2; document.title = \'pwned\'">',
    "svg": '"><svg onload="window.__neardupPwned = 3">',
}
HOSTILE_ID = '<b id="pwned">x</b>'


@pytest.fixture
def hostile_index(es: Elasticsearch) -> Iterator[str]:
    """Three near-copies of one story whose titles (and one id) are markup payloads."""
    story = next(d for d in reuters_documents(with_body_only=True) if len(d["body"].split()) >= 200)
    fp = Fingerprinter(FingerprintParams())
    docs = {}
    for k, (kind, payload) in enumerate(PAYLOADS.items()):
        doc_id = HOSTILE_ID if kind == "svg" else f"hostile-{kind}"
        body = story["body"] + ("" if k == 0 else f" {payload}")
        docs[doc_id] = {"title": payload, "body": body,
                        "neardup": fp.fingerprint_fields([payload, body]).to_source()}
    name = f"playground-xss-{uuid.uuid4().hex[:8]}"
    es.indices.create(index=name, mappings=mapping(), settings={"number_of_shards": 1, "number_of_replicas": 0})
    try:
        helpers.bulk(es, ({"_index": name, "_id": i, "_source": d} for i, d in docs.items()), refresh="wait_for")
        yield name
    finally:
        es.options(ignore_status=404).indices.delete(index=name)


def test_document_text_is_shown_literally_and_never_runs(browser: Any, playground_proxy: ProxyThread,
                                                         hostile_index: str) -> None:
    driver = browser
    driver.get(f"{playground_proxy.url}/_neardup/#index={hostile_index}&q=&threshold=0.50")
    wait_ready(driver)
    collapsed = assert_page_matches_proxy(driver, playground_proxy.url)
    assert collapsed["neardup"]["collapsed"] == 2, "the three copies form one group"
    driver.find_element("id", "expand-all").click()
    shown_titles = [text_of(e) for e in driver.find_elements("css selector", "#groups .title")]
    assert sorted(shown_titles) == sorted(PAYLOADS.values())
    plain_titles = [text_of(e) for e in driver.find_elements("css selector", "#plain .title")]
    assert sorted(plain_titles) == sorted(PAYLOADS.values())
    shown_ids = [text_of(e) for e in driver.find_elements("css selector", "#groups .doc-id")]
    assert HOSTILE_ID in shown_ids
    # The payloads are in the comparison panes too (as text), and nothing ran.
    panes = " ".join(text_of(e) for e in driver.find_elements("css selector", ".pane-text"))
    assert PAYLOADS["img"] in panes
    assert driver.execute_script("return typeof window.__neardupPwned") == "undefined"
    assert driver.title == "neardup playground"
    assert driver.execute_script(
        "return document.querySelectorAll('main img, main svg, main script, main b, #pwned').length") == 0
    screenshot(driver, "playground-escaping.png")
