"""The official clients work through the proxy as they do against the engine directly.

For each client of the suite's engine: the same search, once directly and once through the
proxy (a real server on a real port), over an index of near-duplicate families. Directly the
page holds the copies; through the proxy each family is one hit, its copies in
``inner_hits.neardup``. A plain call (index a document, get it) answers the same both ways.

Clients per engine: Elasticsearch 9 takes elasticsearch-py 9 (sync and async), elasticsearch-py 8
(an 8.x client talks to 9.x servers; run in a subprocess with the 8.x package first on the path)
and ``@elastic/elasticsearch`` 9; Elasticsearch 8 takes elasticsearch-py 8 (``make test`` puts it
first on the path for that engine) and ``@elastic/elasticsearch`` 8; OpenSearch takes opensearch-py
(sync and async) and ``@opensearch-project/opensearch``. The Node.js clients and elasticsearch-py 8
are installed once per machine under ``run/``; without node or npm the Node.js test skips, except
under ``CI=true`` where it fails.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from neardup.corpora import reuters_documents
from neardup.fingerprint import Fingerprinter, FingerprintParams, exact_resemblance
from neardup.upstream import ClusterInfo
from tests.test_proxy_support import ProxyThread, mapping, proxy  # noqa: F401 - fixture

pytestmark = pytest.mark.es

ROOT = Path(__file__).resolve().parents[1]
NODE_SCRIPT = ROOT / "tests" / "node" / "clients.mjs"
NODE_CLIENTS = ROOT / "run" / "node-clients"
ES8_CLIENT = ROOT / "run" / "es8client"
ES8_REQUIREMENTS = ("elasticsearch>=8.12,<9", "elastic-transport>=8.15,<9")

#: The Node.js client for each engine line: (package, version).
NODE_CLIENT: dict[tuple[str, int | None], tuple[str, str]] = {
    ("Elasticsearch", 9): ("@elastic/elasticsearch", "9.5.1"),
    ("Elasticsearch", 8): ("@elastic/elasticsearch", "8.19.2"),
    ("OpenSearch", 3): ("@opensearch-project/opensearch", "3.9.0"),
    ("OpenSearch", 2): ("@opensearch-project/opensearch", "3.9.0"),
}

FAMILIES = 6
#: Families are ranked together (original, then its two copies), so a page of FAMILIES hits
#: holds two whole families directly and FAMILIES groups through the proxy.
SEARCH: dict[str, Any] = {"query": {"match_all": {}}, "sort": [{"rank": "asc"}], "size": FAMILIES}
PLAIN_DOC = {"title": "a plain document", "body": "indexed and read back", "rank": 10_000}


# -- the index ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class ClientIndex:
    name: str
    family: dict[str, str]     # _id -> family


def _copy(body: str, *replaced: int) -> str:
    words = body.split()
    for back in replaced:
        words[len(words) - back] = "zyxwv"
    return " ".join(words)


def distinct_stories(fingerprinter: Fingerprinter, count: int) -> list[dict[str, Any]]:
    """Long Reuters stories, none a near-duplicate of another (the collection has some)."""
    chosen: list[tuple[dict[str, Any], np.ndarray]] = []
    for story in reuters_documents(with_body_only=True):
        if len(story["body"].split()) < 200:
            continue
        shingles = fingerprinter.shingles(fingerprinter.canonical_tokens(story["body"]))
        if all(exact_resemblance(shingles, other) < 0.5 for _, other in chosen):
            chosen.append((story, shingles))
            if len(chosen) == count:
                break
    return [story for story, _ in chosen]


@pytest.fixture(scope="module")
def client_index(es: Any) -> Iterator[ClientIndex]:
    fingerprinter = Fingerprinter(FingerprintParams())
    docs: dict[str, dict[str, Any]] = {}
    for k, story in enumerate(distinct_stories(fingerprinter, FAMILIES)):
        for suffix, body in (("", story["body"]), ("-a", _copy(story["body"], 10)),
                             ("-b", _copy(story["body"], 30, 60))):
            docs[f"s{k}{suffix}"] = {"title": story["title"], "body": body, "family": f"f{k}",
                                     "rank": len(docs)}
    for doc in docs.values():
        doc["neardup"] = fingerprinter.fingerprint_fields([doc["title"], doc["body"]]).to_source()
    name = f"clients-{uuid.uuid4().hex[:10]}"
    es.indices.create(index=name, body={"mappings": mapping(),
                                        "settings": {"number_of_shards": 2, "number_of_replicas": 0}})
    operations: list[dict[str, Any]] = []
    for doc_id, doc in docs.items():
        operations += [{"index": {"_index": name, "_id": doc_id}}, doc]
    answer = es.bulk(body=operations, refresh="wait_for")
    assert not answer["errors"]
    yield ClientIndex(name, {doc_id: doc["family"] for doc_id, doc in docs.items()})
    es.indices.delete(index=name)


# -- what every client must see ----------------------------------------------------------------
def spec(label: str) -> dict[str, Any]:
    """The search, the plain document and the ids it is indexed under on each side."""
    return {"search": SEARCH, "doc": PLAIN_DOC,
            "ids": {"direct": f"plain-{label}-direct", "proxy": f"plain-{label}-proxy"}}


def assert_same_through_the_proxy(results: dict[str, Any], index: ClientIndex) -> None:
    direct, proxied = results["direct"], results["proxy"]
    direct_ids = [hit["_id"] for hit in direct["search"]["hits"]["hits"]]
    assert "neardup" not in direct["search"]
    assert direct_ids == list(index.family)[:FAMILIES], "directly, the copies fill the page"
    assert len({index.family[i] for i in direct_ids}) < len(direct_ids)

    summary = proxied["search"]["neardup"]
    assert summary["collapsed"] > 0 and summary["groups"] == FAMILIES
    tops = proxied["search"]["hits"]["hits"]
    assert [hit["_id"] for hit in tops] == [f"s{k}" for k in range(FAMILIES)]
    seen = set()
    for top in tops:
        members = [hit["_id"] for hit in top["inner_hits"]["neardup"]["hits"]["hits"]]
        assert sorted(members) == [f"{top['_id']}-a", f"{top['_id']}-b"]
        seen.update([top["_id"], *members])
    assert set(direct_ids) <= seen, "through the proxy the same documents, folded"

    for side in (direct, proxied):
        assert side["index"]["result"] in ("created", "updated")
    assert direct["get"] == proxied["get"]
    for answer in direct["get"].values():
        assert answer["found"] and answer["_source"] == PLAIN_DOC


# -- the Python clients -------------------------------------------------------------------------
@dataclass
class PythonClient:
    """One official Python client object; async clients are driven on a private event loop."""

    client: Any
    opensearch: bool
    loop: asyncio.AbstractEventLoop | None = None

    def _call(self, result: Any) -> Any:
        if self.loop is not None:
            result = self.loop.run_until_complete(result)
        return getattr(result, "body", result)     # elasticsearch-py's ObjectApiResponse

    def search(self, body: dict[str, Any], index: str) -> Any:
        if self.opensearch:
            return self._call(self.client.search(index=index, body=body))
        return self._call(self.client.search(index=index, **body))

    def index(self, index: str, doc_id: str, doc: dict[str, Any]) -> Any:
        if self.opensearch:
            return self._call(self.client.index(index=index, id=doc_id, body=doc, refresh=True))
        return self._call(self.client.index(index=index, id=doc_id, document=doc, refresh=True))

    def get(self, index: str, doc_id: str) -> Any:
        return self._call(self.client.get(index=index, id=doc_id))

    def close(self) -> None:
        self._call(self.client.close())


def python_client(url: str, opensearch: bool, asynchronous: bool,
                  loop: asyncio.AbstractEventLoop | None) -> PythonClient:
    if opensearch:
        import opensearchpy
        factory: Callable[..., Any] = opensearchpy.AsyncOpenSearch if asynchronous else opensearchpy.OpenSearch
        return PythonClient(factory(url, timeout=30), True, loop)
    import elasticsearch
    factory = elasticsearch.AsyncElasticsearch if asynchronous else elasticsearch.Elasticsearch
    return PythonClient(factory(url, request_timeout=30), False, loop)


def python_results(direct_url: str, proxy_url: str, index: str, label: str, opensearch: bool,
                   asynchronous: bool) -> dict[str, Any]:
    """The scenario with this interpreter's client (also run in a subprocess for another version)."""
    if opensearch:
        from opensearchpy import __versionstr__ as version
        package = "opensearch-py"
    else:
        from elasticsearch import __versionstr__ as version
        package = "elasticsearch-py"
    loop = asyncio.new_event_loop() if asynchronous else None

    async def build() -> dict[str, PythonClient]:     # async clients are made inside a loop
        return {"direct": python_client(direct_url, opensearch, asynchronous, loop),
                "proxy": python_client(proxy_url, opensearch, asynchronous, loop)}

    sides = loop.run_until_complete(build()) if loop else asyncio.run(build())
    ids = spec(label)["ids"]
    out: dict[str, Any] = {"client": f"{package} {version}"}
    try:
        for name, client in sides.items():
            out[name] = {"search": client.search(SEARCH, index), "get": {}}
        for name, client in sides.items():
            out[name]["index"] = client.index(index, ids[name], PLAIN_DOC)
        for doc_id in ids.values():
            for name, client in sides.items():
                out[name]["get"][doc_id] = client.get(index, doc_id)
    finally:
        for client in sides.values():
            client.close()
        if loop is not None:
            loop.close()
    return out


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_the_engines_python_client(asynchronous: bool, engine: ClusterInfo, es_url: str,
                                   proxy: ProxyThread, client_index: ClientIndex) -> None:  # noqa: F811
    label = f"py-{'async' if asynchronous else 'sync'}"
    results = python_results(es_url, proxy.url, client_index.name, label, engine.is_opensearch,
                             asynchronous)
    expected = "opensearch-py" if engine.is_opensearch else f"elasticsearch-py {engine.major}."
    assert results["client"].startswith(expected)
    assert_same_through_the_proxy(results, client_index)


def elasticsearch_py_8() -> Path:
    """``run/es8client``: elasticsearch-py 8 for ``PYTHONPATH``, installed once per machine."""
    if not (ES8_CLIENT / "elasticsearch").is_dir():
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                        "--no-deps", "--target", str(ES8_CLIENT), *ES8_REQUIREMENTS],
                       check=True, timeout=600)
    return ES8_CLIENT


#: In a subprocess with elasticsearch-py 8 first on the path: the class and HTTP status of the
#: error a search raises directly and through the proxy (argv: direct URL, proxy URL, index,
#: sync|async).
PY8_REFUSAL = """
import asyncio, sys
from elasticsearch import AsyncElasticsearch, Elasticsearch
async def search(url):
    async with AsyncElasticsearch(url) as client:
        await client.search(index=sys.argv[3], size=1)
for url in sys.argv[1:3]:
    try:
        asyncio.run(search(url)) if sys.argv[4] == "async" else Elasticsearch(url).search(index=sys.argv[3], size=1)
        print("answered")
    except Exception as exc:
        print(type(exc).__name__, getattr(getattr(exc, "meta", None), "status", "-"), sep="/")
"""


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_elasticsearch_py_8(asynchronous: bool, engine: ClusterInfo, es_url: str,
                            proxy: ProxyThread,  # noqa: F811
                            client_index: ClientIndex) -> None:
    """elasticsearch-py 8 (on Elasticsearch 9 beside the suite's elasticsearch-py 9) works through
    the proxy as directly; on OpenSearch it fails through the proxy as it does directly (the same
    error and status), so the proxy never passes for Elasticsearch."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(elasticsearch_py_8()), str(ROOT)])}
    if engine.is_opensearch:
        run = subprocess.run([sys.executable, "-c", PY8_REFUSAL, es_url, proxy.url, client_index.name,
                              "async" if asynchronous else "sync"],
                             capture_output=True, text=True, timeout=300, env=env, cwd=ROOT, check=False)
        assert run.returncode == 0, run.stderr[-4000:]
        direct, through_proxy = run.stdout.split()
        assert direct == through_proxy and direct != "answered", run.stdout
        return
    label = f"py8-{'async' if asynchronous else 'sync'}"
    code = ("import json, sys; from tests.test_clients import python_results; "
            "print(json.dumps(python_results(*sys.argv[1:5], False, sys.argv[5] == 'async')))")
    run = subprocess.run([sys.executable, "-c", code, es_url, proxy.url, client_index.name, label,
                          "async" if asynchronous else "sync"],
                         capture_output=True, text=True, timeout=300, env=env, cwd=ROOT, check=False)
    assert run.returncode == 0, run.stderr[-4000:]
    results = json.loads(run.stdout)
    assert results["client"].startswith("elasticsearch-py 8.")
    assert_same_through_the_proxy(results, client_index)


# -- the Node.js clients ------------------------------------------------------------------------
def _unavailable(reason: str) -> None:
    """Fail under CI (a missing tool must not pass for a green run), skip elsewhere."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{reason} (CI=true)", pytrace=False)
    pytest.skip(reason)


def node_client(package: str, version: str) -> Path:
    """The npm prefix holding ``package@version`` under run/node-clients, installed once."""
    prefix = NODE_CLIENTS / f"{package.lstrip('@').replace('/', '-')}@{version}"
    if (prefix / "node_modules" / package / "package.json").is_file():
        return prefix
    npm = shutil.which("npm")
    if npm is None:
        _unavailable("npm is not installed: the Node.js clients cannot be installed")
    staging = prefix.with_name(f"{prefix.name}.{uuid.uuid4().hex[:6]}")
    staging.mkdir(parents=True)
    install = subprocess.run([str(npm), "install", "--prefix", str(staging), "--no-save", "--no-audit",
                              "--no-fund", "--loglevel=error", f"{package}@{version}"],
                             capture_output=True, text=True, timeout=600, check=False)
    if install.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        _unavailable(f"npm install {package}@{version} failed:\n{install.stderr[-2000:]}")
    try:
        staging.rename(prefix)
    except OSError:     # installed meanwhile by another run
        shutil.rmtree(staging, ignore_errors=True)
    return prefix


def test_the_engines_node_client(engine: ClusterInfo, es_url: str, proxy: ProxyThread,  # noqa: F811
                                 client_index: ClientIndex) -> None:
    node = shutil.which("node")
    if node is None:
        _unavailable("node is not installed: the Node.js clients are not tested")
    package, version = NODE_CLIENT[(engine.engine, engine.major)]
    prefix = node_client(package, version)
    run = subprocess.run([str(node), str(NODE_SCRIPT), str(prefix), package, es_url, proxy.url,
                          client_index.name, json.dumps(spec("node"))],
                         capture_output=True, text=True, timeout=300, check=False)
    assert run.returncode == 0, run.stderr[-4000:]
    results = json.loads(run.stdout)
    assert results["client"] == f"{package} {version}"
    assert_same_through_the_proxy(results, client_index)

