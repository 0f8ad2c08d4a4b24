"""Helpers and fixtures for the proxy tests (imported by the tests/test_proxy*.py modules).

* :class:`ProxyThread`: the proxy application served in-process on a free loopback port, from
  a background thread with its own event loop (``neardup proxy`` as a subprocess is tested too).
* ``family_index``: a small index of real Reuters stories plus edited copies of some of them
  (known near-duplicates), fingerprinted with the fingerprint package and bulk-loaded with the
  official client; documents carry ``rank`` so a ``sort`` on it gives a fixed order.
* Calls both official clients take (elasticsearch-py and opensearch-py, :func:`search`,
  :func:`msearch`, :func:`create_index`, :func:`bulk`, :func:`delete_index`, :func:`request`):
  the tests run on every engine with the engine's own client (the ``es`` fixture) and the same
  client pointed at the proxy (``pes``).
"""

from __future__ import annotations

import asyncio
import itertools
import socket
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
from aiohttp import web
from elasticsearch import Elasticsearch
from elasticsearch import helpers as es_helpers

from neardup.config import Config
from neardup.corpora import reuters_documents
from neardup.fingerprint import (
    Fingerprinter,
    FingerprintParams,
    es_mapping,
    exact_resemblance,
    group_labels,
)
from neardup.proxy.app import create_app
from neardup.proxy.grouping.collapse import Algorithms
from neardup.proxy.server import ProxyRunner
from neardup.upstream import ClusterInfo
from tests.plugins.elasticsearch import engine_client

#: The CPU time a request may spend on query-time fingerprints in tests: what is grouped must not
#: depend on how busy the machine is (the bound itself is tested with a tiny one).
TEST_FINGERPRINT_CPU_MS = 60_000.0


def make_config(es_url: str, **sections: dict[str, Any]) -> Config:
    data: dict[str, Any] = {"upstream": {"urls": [es_url], "request_timeout": 30.0},
                            "proxy": {"host": "127.0.0.1", "port": 0},
                            "collapse": {"fingerprint_cpu_ms": TEST_FINGERPRINT_CPU_MS}}
    for name, values in sections.items():
        data[name] = {**data.get(name, {}), **values}
    return Config.model_validate(data)


def is_opensearch_client(client: Any) -> bool:
    return type(client).__module__.startswith("opensearchpy")


def _param(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return ",".join(map(str, value))
    return str(value)


def request(client: Any, method: str, path: str, params: dict[str, Any] | None = None,
            body: Any = None, headers: dict[str, str] | None = None) -> Any:
    """One request through the client's own transport (JSON body, extra ``headers``), its
    decoded answer; raises the client's own error on a status of 400 or more."""
    query = {name: _param(value) for name, value in (params or {}).items()}
    if is_opensearch_client(client):
        return client.transport.perform_request(method, path, params=query, body=body, headers=headers)
    sent = {"accept": "application/json", **(headers or {})}
    if body is not None:
        sent["content-type"] = "application/json"
    return client.perform_request(method, path, params=query, headers=sent, body=body).body


#: Keyword arguments of :func:`search` that go into the query string (the rest is the body).
SEARCH_PARAMS = frozenset({"typed_keys", "rest_total_hits_as_int", "filter_path", "scroll",
                           "source_includes", "source_excludes", "search_pipeline", "phase_took",
                           "request_cache", "preference", "routing", "search_type", "pretty"})


def search(client: Any, index: str | None = None, headers: dict[str, str] | None = None,
           **request_: Any) -> dict[str, Any]:
    """``POST [/<index>]/_search`` as elasticsearch-py's ``search`` sends it: keywords of
    :data:`SEARCH_PARAMS` as parameters (``source_includes`` is ``_source_includes``), the
    others as the body (``from_`` is ``from``, ``source`` is ``_source``)."""
    params = {("_" + name if name.startswith("source") else name): request_.pop(name)
              for name in list(request_) if name in SEARCH_PARAMS}
    renamed = {"from_": "from", "source": "_source"}
    body = {renamed.get(name, name): value for name, value in request_.items()}
    return dict(request(client, "POST", f"/{index}/_search" if index else "/_search", params, body, headers))


def msearch(client: Any, searches: list[dict[str, Any]], index: str | None = None) -> dict[str, Any]:
    """``_msearch`` of (header, body) pairs given as one flat list, as the clients take them."""
    return dict(client.msearch(body=searches, index=index))


def create_index(client: Any, name: str, mappings: dict[str, Any] | None = None,
                 settings: dict[str, Any] | None = None) -> None:
    body: dict[str, Any] = {"settings": settings or {"number_of_replicas": 0}}
    if mappings is not None:
        body["mappings"] = mappings
    client.indices.create(index=name, body=body)


def bulk(client: Any, actions: Any, **options: Any) -> tuple[int, Any]:
    """The bulk helper of the client's own library."""
    if is_opensearch_client(client):
        from opensearchpy import helpers as os_helpers
        return os_helpers.bulk(client, actions, **options)
    return es_helpers.bulk(client, actions, **options)


def scan(client: Any, **options: Any) -> Any:
    """The scan helper of the client's own library."""
    if is_opensearch_client(client):
        from opensearchpy import helpers as os_helpers
        return os_helpers.scan(client, **options)
    return es_helpers.scan(client, **options)


def delete_index(client: Any, name: str) -> None:
    """Delete ``name`` if it exists."""
    client.indices.delete(index=name, ignore_unavailable=True)


def open_pit(client: Any, index: str, keep_alive: str = "1m") -> str:
    """A point in time on ``index``: Elasticsearch's ``_pit``, OpenSearch's ``_search/point_in_time``."""
    if is_opensearch_client(client):
        return str(client.create_pit(index=index, keep_alive=keep_alive)["pit_id"])
    return str(client.open_point_in_time(index=index, keep_alive=keep_alive)["id"])


def close_pit(client: Any, pit: str) -> bool:
    """Close a point in time; whether the engine says it did."""
    if is_opensearch_client(client):
        return bool(client.delete_pit(body={"pit_id": [pit]})["pits"][0]["successful"])
    return bool(client.close_point_in_time(id=pit)["succeeded"])


def async_engine_client(url: str, engine: ClusterInfo, **options: Any) -> Any:
    """The engine's official asyncio client for ``url``."""
    if engine.is_opensearch:
        from opensearchpy import AsyncOpenSearch
        return AsyncOpenSearch(url, timeout=options.pop("request_timeout", 30), **options)
    from elasticsearch import AsyncElasticsearch
    return AsyncElasticsearch(url, request_timeout=options.pop("request_timeout", 30), **options)


def product_header(engine: ClusterInfo) -> str | None:
    """The ``X-elastic-product`` value the engine sends on its answers (OpenSearch: none)."""
    return None if engine.is_opensearch else "Elasticsearch"


class ProxyThread:
    """The proxy app on ``127.0.0.1:<free port>`` in a background thread; :meth:`client` is the
    official client of ``engine`` (Elasticsearch's when not given) pointed at it."""

    def __init__(self, config: Config, algorithms: Algorithms | None = None,
                 engine: ClusterInfo | None = None) -> None:
        self.config = config
        self.algorithms = algorithms
        self.engine = engine
        self.url = ""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.app: web.Application | None = None

    def _run(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as exc:  # noqa: BLE001 - reported to the test thread
            self._error = exc
            self._ready.set()

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        self.app = create_app(self.config, algorithms=self.algorithms)
        runner = ProxyRunner(self.app, access_log=None, auto_decompress=False,
                               handle_signals=False, shutdown_timeout=5)
        await runner.setup()
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        sock.listen(128)
        site = web.SockSite(runner, sock)
        await site.start()
        self.url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        self._ready.set()
        await self._stop.wait()
        await runner.cleanup()

    def __enter__(self) -> ProxyThread:
        self._thread.start()
        self._ready.wait(30)
        if self._error is not None:
            raise self._error
        return self

    def __exit__(self, *exc: object) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)

    def client(self, **options: Any) -> Any:
        options.setdefault("request_timeout", 30)
        if self.engine is not None:
            return engine_client(self.url, self.engine, **options)
        return Elasticsearch(self.url, **options)

    @property
    def metrics(self):  # noqa: ANN201 - the worker's Metrics
        from neardup.proxy.handlers.context import STATE

        assert self.app is not None
        return self.app[STATE].metrics


def mapping() -> dict[str, Any]:
    fragment = es_mapping()
    return {"properties": {**fragment["properties"], "title": {"type": "text"},
                           "body": {"type": "text"}, "rank": {"type": "integer"},
                           "topics": {"type": "keyword"}, "family": {"type": "keyword"}}}


def _edit(body: str, where: int, word: str) -> str:
    words = body.split()
    words[min(where, len(words) - 1)] = word
    return " ".join(words)


@dataclass
class FamilyIndex:
    name: str
    docs: dict[str, dict[str, Any]]          # _id -> document as indexed (with neardup)
    ranked: list[str]                         # ids in rank order
    shingles: dict[str, np.ndarray] = field(default_factory=dict)
    fingerprinter: Fingerprinter | None = None

    def exact(self, a: str, b: str) -> float:
        return exact_resemblance(self.shingles[a], self.shingles[b])

    def exact_groups(self, ids: list[str], threshold: float) -> list[set[str]]:
        """Connected components of "exact resemblance ≥ threshold" among ``ids`` (fingerprinted only)."""
        usable = [i for i in ids if i in self.shingles]
        pairs = [(x, y) for x, y in itertools.combinations(range(len(usable)), 2)
                 if self.exact(usable[x], usable[y]) >= threshold]
        labels = group_labels(len(usable), np.array([p[0] for p in pairs], np.int64),
                              np.array([p[1] for p in pairs], np.int64))
        groups: dict[int, set[str]] = {}
        for position, label in enumerate(labels.tolist()):
            groups.setdefault(label, set()).add(usable[position])
        return list(groups.values())


def build_family_index(es: Any, stories: int = 48, families: int = 12,
                       params: FingerprintParams | None = None) -> FamilyIndex:
    """Index ``stories`` real stories; ``families`` of them get two edited copies each.

    Copy 1 changes one word near the end (resemblance ≈ 0.95); copy 2 changes two words
    (≈ 0.9). Copies are ranked far from their original, so they fall on later pages.
    Three extra documents have no usable fingerprint (none, another scheme version, garbage).
    """
    fp = Fingerprinter(params or FingerprintParams())
    source = (d for d in reuters_documents(with_body_only=True) if len(d["body"].split()) >= 200)
    originals = list(itertools.islice(source, stories))
    docs: dict[str, dict[str, Any]] = {}
    for k, story in enumerate(originals):
        docs[f"s{k}"] = {"title": story["title"], "body": story["body"], "topics": story["topics"],
                         "family": f"f{k}"}
        if k < families:
            n = len(story["body"].split())
            docs[f"s{k}-a"] = {**docs[f"s{k}"], "body": _edit(story["body"], n - 10, "zyxwv")}
            docs[f"s{k}-b"] = {**docs[f"s{k}"], "body": _edit(_edit(story["body"], n - 30, "qqqqq"),
                                                                   n - 60, "wwwww")}
    # A fixed interleaving: originals first-ish, copies spread over later ranks.
    ids = list(docs)
    rng = np.random.default_rng(7)
    order = [ids[i] for i in rng.permutation(len(ids))]
    shingles = {}
    for rank, doc_id in enumerate(order):
        doc = docs[doc_id]
        doc["rank"] = rank
        text = "\n".join([doc["title"], doc["body"]])
        doc["neardup"] = fp.fingerprint_fields([doc["title"], doc["body"]]).to_source()
        shingles[doc_id] = fp.shingles(fp.canonical_tokens(text))
    n = len(order)
    extras = {"x-none": {}, "x-old": {"neardup": {**docs[order[0]]["neardup"], "v": "0-old"}},
              "x-bad": {"neardup": {"v": docs[order[0]]["neardup"]["v"], "sig": "!!", "n": 3}}}
    for k, (doc_id, extra) in enumerate(extras.items()):
        docs[doc_id] = {"title": docs[order[0]]["title"], "body": docs[order[0]]["body"],
                        "rank": n + k, "topics": [], "family": "x", **extra}
        order.append(doc_id)
    name = f"proxy-test-{uuid.uuid4().hex[:10]}"
    create_index(es, name, mapping(), {"number_of_shards": 2, "number_of_replicas": 0})
    bulk(es, ({"_index": name, "_id": i, "_source": d} for i, d in docs.items()), refresh="wait_for")
    return FamilyIndex(name, docs, order, shingles, fp)


@pytest.fixture(scope="session")
def family_index(es: Any) -> Iterator[FamilyIndex]:
    index = build_family_index(es)
    yield index
    delete_index(es, index.name)


@pytest.fixture(scope="session")
def proxy(es_url: str, engine: ClusterInfo) -> Iterator[ProxyThread]:
    with ProxyThread(make_config(es_url), engine=engine) as running:
        yield running


@pytest.fixture(scope="session")
def pes(proxy: ProxyThread) -> Iterator[Any]:
    """The engine's official sync client pointed at the proxy."""
    client = proxy.client()
    yield client
    client.close()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
