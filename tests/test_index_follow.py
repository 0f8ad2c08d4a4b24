"""``neardup index --follow`` on the real cluster: a subprocess follows an index while stories are
written straight to the cluster.

* near-duplicate stories written one after the other are collapsed by searches through the
  proxy within a few seconds;
* with ``--since-field``, a partial update that changes the text gets a new fingerprint, one
  that leaves the text alone is not rewritten;
* SIGTERM and SIGINT stop it with exit status 0 and the summary;
* ``GET /metrics`` shows counters that move;
* the node is stopped and started again under a running follower: it logs one WARNING, does
  not exit, and fingerprints the stories written after the restart.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from neardup.config import load_config
from neardup.fingerprint import FIELD, Fingerprinter
from neardup.upstream import ClusterInfo
from tests.cluster_support import node_client
from tests.engine_support import create_index, delete_index, index_document, update_document
from tests.plugins.corpora import ROOT, neardup_env
from tests.plugins.elasticsearch import StartedNode
from tests.test_proxy_support import ProxyThread, free_port, make_config, search

pytestmark = [pytest.mark.es, pytest.mark.timeout(300)]

MAPPINGS = {"properties": {"title": {"type": "text"}, "body": {"type": "text"},
                           "updated": {"type": "date"}, "tag": {"type": "keyword"}}}
#: Seconds a story may take from its write to a searchable fingerprint on a loaded 2-core machine.
WITHIN = 15.0
COPIES = 3


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def eventually(check: Callable[[], Any], within: float = WITHIN, what: str = "condition",
               last: Callable[[], Any] = lambda: None) -> Any:
    deadline = time.monotonic() + within
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"{what}: not within {within:.0f}s (last seen: {last()})"
        time.sleep(0.2)


class FollowProcess:
    """``neardup index --index NAME --follow ARGS`` as a subprocess against ``url``."""

    def __init__(self, url: str, index: str, *args: str, **env: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "neardup", "index", "--index", index, "--follow", "--interval", "1", *args],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=neardup_env(url, **env), cwd=ROOT)
        self.result: subprocess.CompletedProcess[bytes] | None = None

    def running(self) -> bool:
        return self.process.poll() is None

    def stop(self, sig: int = signal.SIGTERM) -> subprocess.CompletedProcess[bytes]:
        if self.result is None:
            if self.running():
                self.process.send_signal(sig)
            out, err = self.process.communicate(timeout=120)
            self.result = subprocess.CompletedProcess(self.process.args, self.process.returncode, out, err)
        return self.result

    def __enter__(self) -> FollowProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.running():
            self.process.kill()
        self.stop()


@pytest.fixture
def news(es: Any) -> Iterator[str]:
    name = f"follow-{uuid.uuid4().hex[:8]}"
    create_index(es, name, settings={"number_of_shards": 1, "number_of_replicas": 0}, mappings=MAPPINGS)
    try:
        yield name
    finally:
        delete_index(es, name)


@pytest.fixture(scope="module")
def stories(reuters_docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Long Reuters stories, no two alike (the corpus has near-duplicates of its own)."""
    chosen: list[dict[str, Any]] = []
    words: list[set[str]] = []
    for doc in reuters_docs:
        these = set(doc["body"].lower().split())
        if len(doc["body"].split()) < 120 or not doc["title"] \
                or any(len(these & other) > 0.3 * len(these | other) for other in words):
            continue
        words.append(these)
        chosen.append({"title": doc["title"], "body": doc["body"]})
        if len(chosen) == 12:
            break
    return chosen


@pytest.fixture(scope="module")
def fingerprinter() -> Fingerprinter:
    """The fingerprinter of the configuration ``neardup index`` runs with (no NEARDUP_* variables)."""
    return Fingerprinter(load_config(environ={}).fingerprint)


def copy_of(story: dict[str, Any], k: int) -> dict[str, Any]:
    """The story with one word changed: a near-duplicate re-send."""
    words = story["body"].split()
    words[10 + 7 * k] = f"edited{k}"
    return {"title": story["title"], "body": " ".join(words)}


def fingerprint_of(fingerprinter: Fingerprinter, doc: dict[str, Any]) -> dict[str, Any]:
    return fingerprinter.fingerprint_fields([doc["title"], doc["body"]]).to_source()


def stored(es: Any, index: str, doc_id: str) -> dict[str, Any]:
    return dict(es.get(index=index, id=doc_id))


def identity(value: dict[str, Any] | None) -> tuple[Any, ...]:
    value = value or {}
    return value.get("v"), value.get("sig"), value.get("n")


def scrape(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        assert response.headers["Content-Type"].startswith("text/plain")
        text = response.read().decode()
    values = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            values[name] = float(value)
    return values


def test_near_duplicates_written_while_it_runs_are_collapsed_within_seconds(
        es: Any, es_url: str, engine: ClusterInfo, news: str, stories: list[dict[str, Any]]) -> None:
    # Stored fingerprints only: query-time ones would fold the copies before the follower wrote any.
    with FollowProcess(es_url, news, "--json") as follower, \
            ProxyThread(make_config(es_url, collapse={"fingerprint_missing": False}), engine=engine) as proxy:
        pes = proxy.client()
        families: dict[str, set[str]] = {}
        for s, story in enumerate(stories):
            family = {f"s{s}"} | {f"s{s}-{k}" for k in range(COPIES - 1)}
            families[f"s{s}"] = family
            index_document(es, news, f"s{s}", {**story, "updated": now()})
            for k in range(COPIES - 1):
                index_document(es, news, f"s{s}-{k}", {**copy_of(story, k), "updated": now()})
            time.sleep(0.1)
        written = time.monotonic()
        every = sorted(i for family in families.values() for i in family)

        seen: list[list[str]] = []

        def collapsed() -> bool:
            body = search(pes, news, query={"ids": {"values": every}}, size=len(every), _source=False)
            groups = [sorted({hit["_id"], *(h["_id"] for h in hit.get("inner_hits", {}).get("neardup", {})
                                            .get("hits", {}).get("hits", []))}) for hit in body["hits"]["hits"]]
            seen[:] = sorted(groups)
            return seen == sorted(sorted(family) for family in families.values())

        eventually(collapsed, what="every family collapsed through the proxy", last=lambda: seen)
        assert time.monotonic() - written < WITHIN
        assert follower.running()
        result = follower.stop(signal.SIGTERM)
    assert result.returncode == 0, result.stderr.decode(errors="replace")
    summary = json.loads(result.stdout)
    assert summary["follow"] is True and summary["index"] == news
    assert summary["updated"] == len(every) and summary["failed"] == 0
    assert summary["passes"] >= 1 and summary["failed_passes"] == 0
    assert b"Traceback" not in result.stderr


def test_a_partial_update_gets_a_new_fingerprint_with_since_field(
        es: Any, es_url: str, news: str, stories: list[dict[str, Any]], fingerprinter: Fingerprinter) -> None:
    first, second = stories[0], stories[1]
    index_document(es, news, "doc", {**first, "updated": now(), "tag": "a"})
    index_document(es, news, "other", {**second, "updated": now()})
    with FollowProcess(es_url, news, "--since-field", "updated") as follower:
        eventually(lambda: identity(stored(es, news, "doc")["_source"].get(FIELD)) ==
                   identity(fingerprint_of(fingerprinter, first)), what="first fingerprint")
        # the text changes; the neardup object (still the current scheme) stays until the follower sees it
        update_document(es, news, "doc", {"body": second["body"], "updated": now()})
        changed = {**first, "body": second["body"]}
        eventually(lambda: identity(stored(es, news, "doc")["_source"].get(FIELD)) ==
                   identity(fingerprint_of(fingerprinter, changed)), what="fingerprint of the updated text")
        # the text stays: no rewrite
        update_document(es, news, "doc", {"tag": "b", "updated": now()})
        version = stored(es, news, "doc")["_version"]
        time.sleep(3.5)
        after = stored(es, news, "doc")
        assert after["_version"] == version, "a document whose text did not change was rewritten"
        assert after["_source"]["tag"] == "b" and after["_source"]["body"] == second["body"]
        other = stored(es, news, "other")
        assert other["_version"] == 2, "a document was fingerprinted more than once"
        result = follower.stop(signal.SIGTERM)
    assert result.returncode == 0, result.stderr.decode(errors="replace")
    assert b"followed" in result.stdout and b"Traceback" not in result.stderr


def test_sigint_stops_it_with_the_summary_and_metrics_move(
        es: Any, es_url: str, news: str, stories: list[dict[str, Any]]) -> None:
    port = free_port()
    with FollowProcess(es_url, news, "--since-field", "updated", "--metrics-port", str(port)) as follower:
        before = eventually(lambda: _scrape_or_none(port), what="the metrics endpoint")
        for s, story in enumerate(stories[:5]):
            index_document(es, news, f"m{s}", {**story, "updated": now()})
        # the counters move page by page, the lag once the pass has refreshed
        after = eventually(lambda: (m := scrape(port))["neardup_follow_documents_fingerprinted_total"] >= 5
                           and m["neardup_follow_lag_seconds_count"] >= 5 and m, what="the counters")
        assert after["neardup_follow_passes_total"] > before["neardup_follow_passes_total"]
        assert 0 < after["neardup_follow_lag_max_seconds"] < WITHIN
        assert after["neardup_follow_documents_failed_total"] == 0
        assert after["neardup_follow_documents_per_second"] > 0
        with pytest.raises(urllib.error.HTTPError) as missing:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/other", timeout=10)
        assert missing.value.code == 404
        result = follower.stop(signal.SIGINT)
    assert result.returncode == 0, result.stderr.decode(errors="replace")
    out = result.stdout.decode()
    assert f"index {news}:" in out and "updated            5" in out and "passes" in out


def _scrape_or_none(port: int) -> dict[str, float] | None:
    try:
        return scrape(port)
    except OSError:
        return None


def test_usage_errors() -> None:
    for args, message in ((["--force"], "--force"), (["--overlap", "3"], "--since-field")):
        result = subprocess.run([sys.executable, "-m", "neardup", "index", "--index", "x", "--follow", *args],
                                capture_output=True, env=neardup_env("http://127.0.0.1:9"), cwd=ROOT, check=False)
        assert result.returncode == 2 and message in result.stderr.decode()
    result = subprocess.run([sys.executable, "-m", "neardup", "index", "--index", "x", "--interval", "2"],
                            capture_output=True, env=neardup_env("http://127.0.0.1:9"), cwd=ROOT, check=False)
    assert result.returncode == 2 and "only apply with --follow" in result.stderr.decode()


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_it_survives_a_node_restart(stories: list[dict[str, Any]]) -> None:
    node = StartedNode("follow-restart", "off", "512m")
    url = node.endpoint.url
    client = node_client(url, request_timeout=60)
    try:
        index = f"follow-restart-{uuid.uuid4().hex[:8]}"
        create_index(client, index, settings={"number_of_shards": 1, "number_of_replicas": 0}, mappings=MAPPINGS)
        with FollowProcess(url, index, "--json") as follower:
            for s, story in enumerate(stories[:3]):
                index_document(client, index, f"before{s}", {**story, "updated": now()})
            eventually(lambda: all(FIELD in stored(client, index, f"before{s}")["_source"] for s in range(3)),
                       what="stories before the restart fingerprinted")
            node.halt()
            time.sleep(4.0)
            assert follower.running(), "the follower exited while the node was down"
            node.restart()
            client.close()
            client = node_client(url, request_timeout=60)
            client.cluster.health(index=index, wait_for_status="yellow")  # waits up to 30 s
            for s, story in enumerate(stories[3:6]):
                index_document(client, index, f"after{s}", {**story, "updated": now()})
            eventually(lambda: all(FIELD in stored(client, index, f"after{s}")["_source"] for s in range(3)),
                       within=60.0, what="stories after the restart fingerprinted")
            assert follower.running()
            result = follower.stop(signal.SIGTERM)
        assert result.returncode == 0, result.stderr.decode(errors="replace")
        log = result.stderr.decode(errors="replace")
        assert "Traceback" not in log
        warnings = [line for line in log.splitlines() if " WARNING " in line]
        assert len(warnings) == 1 and "following" in warnings[0], log
        summary = json.loads(result.stdout)
        assert summary["updated"] == 6 and summary["failed"] == 0 and summary["failed_passes"] >= 1
    finally:
        client.close()
        node.stop()
