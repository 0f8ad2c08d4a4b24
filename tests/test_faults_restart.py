"""Elasticsearch stopped in the middle of load and started again, on a node of this module's own
(``scripts/es`` on a free port; the shared node is never stopped).

One scenario runs once (module fixture ``outage``) and the tests check what each party saw:

1. a node with 8,000 Reuters stories; the proxy in front of it (``request_timeout`` 10 s);
2. clients search, get documents and ask for cluster health through the proxy, continuously,
   while ``neardup index`` enriches the index;
3. with a few hundred documents enriched, the node is stopped (``scripts/es stop``: SIGTERM),
   left down for a while, and started again on the same port with the same data;
4. the load goes on for a while after the node is back; then the indexer is run again.

The proxy must answer 502 at once while the node is down, never hang past its timeout, never
answer wrongly, and serve again by itself. The indexer must stop with a message saying how to
resume, and the second run must finish the job: every document enriched exactly once
(``_version`` 2), every other field unchanged.
"""

from __future__ import annotations

import hashlib
import json
import random
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from neardup.config import load_config
from neardup.fingerprint import FIELD, Fingerprinter
from neardup.indexer.errors import EXIT_OK, EXIT_STOPPED
from tests.cluster_support import node_client, scan_hits
from tests.engine_support import bulk_load
from tests.plugins.corpora import neardup_env, run_neardup, with_seed
from tests.plugins.elasticsearch import StartedNode
from tests.reliability_support import Outcome, es_error_type, fetch
from tests.test_proxy_support import ProxyThread, make_config

pytestmark = [pytest.mark.es, pytest.mark.slow, pytest.mark.timeout(900)]

DOCS = 5000
TIMEOUT = 10.0           # upstream.request_timeout of the proxy
CONNECT_TIMEOUT = 2.0
SLACK = 10.0             # a loaded machine's allowance before a request counts as hung
CLIENTS = 6
RECOVERY_GRACE = 5.0     # seconds after the node is ready before every request must succeed
JSON = {"Content-Type": "application/json"}


@dataclass
class Call:
    op: str
    key: str
    outcome: Outcome


@dataclass
class Scenario:
    index: str
    docs: dict[str, dict[str, Any]]
    calls: list[Call] = field(default_factory=list)
    down_at: float = 0.0          # the node's process is gone
    restart_at: float = 0.0       # `scripts/es start` begins
    up_at: float = 0.0            # the node answers again
    first_run: subprocess.CompletedProcess | None = None
    enriched_before_stop: int = 0
    resume_run: subprocess.CompletedProcess | None = None
    final: dict[str, dict[str, Any]] = field(default_factory=dict)


def checksum(source: dict[str, Any]) -> str:
    kept = {k: v for k, v in source.items() if k != FIELD}
    return hashlib.sha256(json.dumps(kept, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def _client_loop(proxy_url: str, scenario: Scenario, stop: threading.Event, seed: int) -> None:
    rng = random.Random(seed)
    ids = list(scenario.docs)
    titles = [d["title"] for d in scenario.docs.values() if len(d["title"].split()) >= 2]
    while not stop.is_set():
        kind = rng.choice(("search", "get", "health"))
        if kind == "search":
            words = rng.choice(titles).split()[:3]
            body = json.dumps({"query": {"match": {"title": " ".join(words)}}, "size": 10}).encode()
            call = Call("search", "", fetch(proxy_url, "POST", f"/{scenario.index}/_search", body, JSON,
                                            timeout=TIMEOUT + 2 * SLACK))
        elif kind == "get":
            doc_id = rng.choice(ids)
            call = Call("get", doc_id, fetch(proxy_url, "GET", f"/{scenario.index}/_doc/{doc_id}",
                                             timeout=TIMEOUT + 2 * SLACK))
        else:
            call = Call("health", "", fetch(proxy_url, "GET", "/_cluster/health", timeout=TIMEOUT + 2 * SLACK))
        scenario.calls.append(call)
        time.sleep(0.02)


def _enriched(es: Any, index: str, version: str) -> int:
    es.indices.refresh(index=index)
    return es.count(index=index, body={"query": {"term": {f"{FIELD}.v": version}}})["count"]


@pytest.fixture(scope="module")
def fingerprinter() -> Fingerprinter:
    """The fingerprinter of the configuration ``neardup index`` runs with (no NEARDUP_* variables)."""
    return Fingerprinter(load_config(environ={}).fingerprint)


@pytest.fixture(scope="module")
def outage(reuters_docs: list[dict[str, Any]], fingerprinter: Fingerprinter) -> Iterator[Scenario]:
    node = StartedNode("reliability", "off", "512m")
    url = node.endpoint.url
    es = node_client(url, request_timeout=120)
    try:
        index = f"reliab-outage-{uuid.uuid4().hex[:8]}"
        docs = {d["id"]: d for d in reuters_docs[:DOCS]}
        es.indices.create(index=index, body={"settings": {"number_of_shards": 2, "number_of_replicas": 0}})
        bulk_load(es, index, list(docs.values()))
        scenario = Scenario(index, docs)
        config = make_config(url, upstream={"request_timeout": TIMEOUT, "connect_timeout": CONNECT_TIMEOUT})
        with ProxyThread(config) as proxy:
            stop = threading.Event()
            clients = [threading.Thread(target=_client_loop, args=(proxy.url, scenario, stop, k), daemon=True)
                       for k in range(CLIENTS)]
            for thread in clients:
                thread.start()
            job = subprocess.Popen([sys.executable, "-m", "neardup", "index", "--index", index, "--json",
                                    "--batch-size", "10", "--workers", "1"],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   env=neardup_env(url, NEARDUP_INDEXER__MAX_RETRIES="2"))
            try:
                deadline = time.monotonic() + 300
                while (enriched := _enriched(es, index, fingerprinter.version)) < 300:
                    assert job.poll() is None, "the indexer finished before the outage"
                    assert time.monotonic() < deadline, "the indexer made no progress"
                    time.sleep(0.2)
                scenario.enriched_before_stop = enriched
                node.halt()
                scenario.down_at = time.monotonic()
                out, err = job.communicate(timeout=300)
                scenario.first_run = subprocess.CompletedProcess(job.args, job.returncode, out, err)
                time.sleep(max(0.0, scenario.down_at + 4.0 - time.monotonic()))  # down for a while
                scenario.restart_at = time.monotonic()
                node.restart()
                scenario.up_at = time.monotonic()
                time.sleep(RECOVERY_GRACE + 5.0)
            finally:
                stop.set()
                for thread in clients:
                    thread.join(TIMEOUT + 3 * SLACK)
                if job.poll() is None:
                    job.kill()
                    job.wait()
        scenario.resume_run = run_neardup(["index", "--index", index, "--json"], url)
        es.indices.refresh(index=index)
        scenario.final = {h["_id"]: h for h in scan_hits(es, index, version=True)}
        yield scenario
    finally:
        es.close()
        node.stop()


def _valid_answer(call: Call, scenario: Scenario) -> bool:
    """A 200 whose body is right for the request (the document itself, a search result)."""
    out = call.outcome
    body = out.json()
    if call.op == "get":
        return body["_id"] == call.key and checksum(body["_source"]) == checksum(scenario.docs[call.key])
    if call.op == "search":
        hits = body["hits"]["hits"]
        return all(checksum(h["_source"]) == checksum(scenario.docs[h["_id"]]) for h in hits)
    return body.get("status") in ("green", "yellow", "red")


def test_proxy_answers_502_fast_while_es_is_down_and_recovers_by_itself(outage: Scenario) -> None:
    calls = outage.calls
    assert len(calls) > 100
    for call in calls:
        out = call.outcome
        assert out.complete, f"{call.op}: {out.error} (a response broke off)"
        assert out.elapsed < TIMEOUT + SLACK, f"{call.op} took {out.elapsed:.1f}s"
        if out.status == 200:
            assert _valid_answer(call, outage), call
        else:
            assert out.status in (502, 503, 504) and es_error_type(out), call
    down = [c for c in calls if outage.down_at + 0.5 <= c.outcome.started
            and c.outcome.started + c.outcome.elapsed <= outage.restart_at]
    assert len(down) >= 10, "too few requests while the node was down"
    for call in down:
        assert call.outcome.status == 502, call
        assert es_error_type(call.outcome) == "neardup_upstream_unreachable_exception"
        assert call.outcome.elapsed < CONNECT_TIMEOUT + 3.0   # at once, not after a timeout
    after = [c for c in calls if c.outcome.started >= outage.up_at + RECOVERY_GRACE]
    assert len(after) >= 10
    assert [c.outcome.status for c in after if c.outcome.status != 200] == []


def test_indexer_stops_on_the_outage_and_resumes_without_writing_twice(
        outage: Scenario, fingerprinter: Fingerprinter) -> None:
    first = outage.first_run
    assert first is not None and first.returncode == EXIT_STOPPED, first and first.stderr.decode()
    message = first.stderr.decode()
    assert "run the same command again to resume" in message and "Traceback" not in message
    resumed = outage.resume_run
    assert resumed is not None and resumed.returncode == EXIT_OK, resumed and resumed.stderr.decode()
    summary = json.loads(resumed.stdout)
    assert summary["skipped_current"] >= outage.enriched_before_stop
    final = outage.final
    assert set(final) == set(outage.docs), "documents lost or added"
    for doc_id, hit in final.items():
        original = outage.docs[doc_id]
        source = hit["_source"]
        assert checksum(source) == checksum(original), f"{doc_id}: fields changed"
        if (original["title"] + original["body"]).strip():
            assert hit["_version"] == 2, f"{doc_id} written {hit['_version'] - 1} times"
            expected = fingerprinter.fingerprint_fields([original["title"], original["body"]]).to_source()
            assert source[FIELD] == with_seed(expected, doc_id)
        else:
            assert hit["_version"] == 1 and FIELD not in source
