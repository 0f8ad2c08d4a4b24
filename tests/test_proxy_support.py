"""Helpers and fixtures for the proxy tests (imported by the tests/test_proxy*.py modules).

* :class:`ProxyThread`: the proxy application served in-process on a free loopback port, from
  a background thread with its own event loop (``neardup proxy`` as a subprocess is tested too).
* ``family_index``: a small index of real Reuters stories plus edited copies of some of them
  (known near-duplicates), fingerprinted with the fingerprint package and bulk-loaded with the
  official client; documents carry ``rank`` so a ``sort`` on it gives a fixed order.
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
from elasticsearch import Elasticsearch, helpers

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


def make_config(es_url: str, **sections: dict[str, Any]) -> Config:
    data: dict[str, Any] = {"upstream": {"urls": [es_url], "request_timeout": 30.0},
                            "proxy": {"host": "127.0.0.1", "port": 0}}
    for name, values in sections.items():
        data[name] = {**data.get(name, {}), **values}
    return Config.model_validate(data)


class ProxyThread:
    """The proxy app on ``127.0.0.1:<free port>`` in a background thread."""

    def __init__(self, config: Config, algorithms: Algorithms | None = None) -> None:
        self.config = config
        self.algorithms = algorithms
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

    def client(self, **options: Any) -> Elasticsearch:
        options.setdefault("request_timeout", 30)
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


def build_family_index(es: Elasticsearch, stories: int = 48, families: int = 12,
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
    es.indices.create(index=name, mappings=mapping(),
                      settings={"number_of_shards": 2, "number_of_replicas": 0})
    helpers.bulk(es, ({"_index": name, "_id": i, "_source": d} for i, d in docs.items()),
                 refresh="wait_for")
    return FamilyIndex(name, docs, order, shingles, fp)


@pytest.fixture(scope="session")
def family_index(es: Elasticsearch) -> Iterator[FamilyIndex]:
    index = build_family_index(es)
    yield index
    es.options(ignore_status=404).indices.delete(index=index.name)


@pytest.fixture(scope="session")
def proxy(es_url: str) -> Iterator[ProxyThread]:
    with ProxyThread(make_config(es_url)) as running:
        yield running


@pytest.fixture(scope="session")
def pes(proxy: ProxyThread) -> Iterator[Elasticsearch]:
    """The official sync client pointed at the proxy."""
    client = proxy.client()
    yield client
    client.close()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
