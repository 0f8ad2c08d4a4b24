"""The real cluster for the test suite, Elasticsearch or OpenSearch (never mocked).

Fixtures (session scoped):

* ``es_url`` (str): base URL of a node with security off. ``$NEARDUP_TEST_ES_URL`` when set
  (``make test`` starts one node and sets it); otherwise this plugin starts a node with
  ``scripts/es`` on a free port for the session and stops it at the end (the engine and version
  of ``scripts/es``: ``$NEARDUP_ES_ENGINE``, ``$NEARDUP_ES_VERSION``).
* ``engine`` (:class:`neardup.upstream.ClusterInfo`): what that node is, asked of the node itself;
  tests whose results differ by engine assert per engine with it.
* ``es``: the engine's own official client for ``es_url``: :class:`elasticsearch.Elasticsearch`
  or :class:`opensearchpy.OpenSearch`. Tests that run on both use the calls both clients take:
  ``body=`` rather than the Elasticsearch client's body fields as keywords. (elasticsearch-py
  talks to its own major and newer servers only: an 8.x server needs elasticsearch-py 8.)
* ``secure_es`` (:class:`EsEndpoint`): a second node with x-pack security on and HTTP basic
  authentication (``url``, ``username``, ``password``, ``client()``), started only when a
  test asks for it; or ``$NEARDUP_TEST_SECURE_ES_URL`` with credentials in the URL
  (``http://user:password@host:port``) or in ``$NEARDUP_TEST_SECURE_ES_USER`` /
  ``$NEARDUP_TEST_SECURE_ES_PASSWORD``.
* ``tls_es`` (:class:`EsEndpoint`): a node with security on, basic authentication and HTTPS
  (``scripts/es start --security tls``); ``ca_certs`` is the CA file that signed its certificate.
  Or ``$NEARDUP_TEST_TLS_ES_URL`` (``https://user:password@host:port``) with
  ``$NEARDUP_TEST_TLS_ES_CA``.

If a node cannot be started or reached, the tests that need it ERROR with the reason;
they are never skipped. Tests using these fixtures get the ``es`` marker automatically.
"""

from __future__ import annotations

import base64
import os
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

import pytest
from elasticsearch import Elasticsearch

from neardup.upstream import ClusterInfo, cluster_info

ROOT = Path(__file__).resolve().parents[2]
ES_SCRIPT = ROOT / "scripts" / "es"

ENV_URL = "NEARDUP_TEST_ES_URL"
ENV_SECURE_URL = "NEARDUP_TEST_SECURE_ES_URL"
ENV_SECURE_USER = "NEARDUP_TEST_SECURE_ES_USER"
ENV_SECURE_PASSWORD = "NEARDUP_TEST_SECURE_ES_PASSWORD"
ENV_HEAP = "NEARDUP_TEST_ES_HEAP"
ENV_TLS_URL = "NEARDUP_TEST_TLS_ES_URL"
ENV_TLS_CA = "NEARDUP_TEST_TLS_ES_CA"

#: Seconds for ``scripts/es start``: the first run on a machine downloads the server.
START_TIMEOUT = 900
REACHABLE_TIMEOUT = 60
ES_FIXTURES = frozenset({"es_url", "es", "engine", "secure_es", "tls_es"})


@dataclass(frozen=True)
class EsEndpoint:
    """Where a node answers and how to authenticate (empty username: no authentication)."""

    url: str
    username: str = ""
    password: str = ""
    ca_certs: str = ""    # CA bundle of an https node

    @classmethod
    def from_url(cls, url: str, username: str = "", password: str = "") -> EsEndpoint:
        """Split ``http://user:password@host:port`` into a bare URL and credentials."""
        parts = urlsplit(url.strip())
        if parts.username is not None:
            username, password = unquote(parts.username), unquote(parts.password or "")
            parts = parts._replace(netloc=parts.netloc.rsplit("@", 1)[1])
        return cls(urlunsplit(parts).rstrip("/"), username, password)

    @property
    def basic_auth(self) -> tuple[str, str] | None:
        return (self.username, self.password) if self.username else None

    def client(self, **options) -> Elasticsearch:
        options.setdefault("request_timeout", 60)
        if self.basic_auth:
            options.setdefault("basic_auth", self.basic_auth)
        if self.ca_certs:
            options.setdefault("ca_certs", self.ca_certs)
        return Elasticsearch(self.url, **options)


def run_es_script(*args: str, timeout: float, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(ES_SCRIPT), *args], capture_output=True, text=True,
                          timeout=timeout, check=False, env=env)


def _secured_node_env() -> dict[str, str]:
    """The environment for a node with security on: always ``scripts/es``'s default Elasticsearch
    (the test distributions of OpenSearch carry no security plugin), whatever engine the suite's
    own node is."""
    return {k: v for k, v in os.environ.items() if k not in ("NEARDUP_ES_ENGINE", "NEARDUP_ES_VERSION")}


def _status(home: Path) -> dict[str, str]:
    """``scripts/es status`` as a dict (url, security, user, password, ...)."""
    result = run_es_script("status", "--home", str(home), timeout=60)
    return dict(line.split("=", 1) for line in result.stdout.splitlines() if "=" in line)


class StartedNode:
    """A node this plugin started with ``scripts/es``; :meth:`stop` stops it and removes its folder."""

    def __init__(self, name: str, security: str, heap: str) -> None:
        self.home = ROOT / "run" / f"pytest-{name}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self.security, self.heap = security, heap
        try:
            result = run_es_script("start", "--port", "auto", "--home", str(self.home),
                                    "--security", security, "--heap", heap, "--fresh",
                                    timeout=START_TIMEOUT,
                                    env=None if security == "off" else _secured_node_env())
        except subprocess.TimeoutExpired as exc:
            self.stop()
            pytest.fail(f"scripts/es start --security {security} did not finish within "
                        f"{START_TIMEOUT}s:\n{_text(exc.stderr)[-4000:]}", pytrace=False)
        if result.returncode != 0:
            self.stop()
            pytest.fail(f"Elasticsearch (security {security}) could not be started with "
                        f"scripts/es (exit {result.returncode}):\n{result.stderr[-4000:]}",
                        pytrace=False)
        status = _status(self.home)
        self.endpoint = EsEndpoint(status["url"], status.get("user", ""), status.get("password", ""),
                                   status.get("ca", ""))

    def stop(self) -> None:
        run_es_script("stop", "--home", str(self.home), "--purge", timeout=120)

    def halt(self) -> None:
        """Stop the node and keep its data, for :meth:`restart` (a node going down under a client)."""
        result = run_es_script("stop", "--home", str(self.home), timeout=120)
        assert result.returncode == 0, result.stderr

    def restart(self) -> None:
        """Start the halted node again, on its port and with its data."""
        port = self.endpoint.url.rsplit(":", 1)[1]
        result = run_es_script("start", "--home", str(self.home), "--port", port, "--security", self.security,
                               "--heap", self.heap, timeout=600,
                               env=None if self.security == "off" else _secured_node_env())
        assert result.returncode == 0, result.stderr


def _text(value: str | bytes | None) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else (value or "")


def wait_until_reachable(endpoint: EsEndpoint, source: str) -> None:
    """Fail (not skip) with the cause unless the node answers ``_cluster/health`` in time."""
    deadline = time.monotonic() + REACHABLE_TIMEOUT
    client = endpoint.client(request_timeout=10)
    # Through the transport: the client's own API refuses an OpenSearch node (product check).
    headers = {"accept": "application/json"}
    if endpoint.basic_auth:
        headers["authorization"] = "Basic " + base64.b64encode(":".join(endpoint.basic_auth).encode()).decode()
    try:
        while True:
            try:
                answer = client.transport.perform_request(
                    "GET", "/_cluster/health?wait_for_status=yellow&timeout=5s", headers=headers)
                if answer.meta.status != 200:
                    raise RuntimeError(f"_cluster/health answered {answer.meta.status}")
                return
            except Exception as exc:  # noqa: BLE001 - any failure is reported as the reason
                if time.monotonic() > deadline:
                    pytest.fail(f"Elasticsearch at {endpoint.url} ({source}) is not reachable: "
                                f"{type(exc).__name__}: {exc}", pytrace=False)
                time.sleep(1)
    finally:
        client.close()


def _started_or_given(name: str, security: str, given: EsEndpoint | None,
                      source: str) -> Iterator[EsEndpoint]:
    if given is not None:
        wait_until_reachable(given, source)
        yield given
        return
    node = StartedNode(name, security, os.environ.get(ENV_HEAP, "1g" if security == "off" else "512m"))
    try:
        wait_until_reachable(node.endpoint, f"started by scripts/es in {node.home}")
        yield node.endpoint
    finally:
        node.stop()


@pytest.fixture(scope="session")
def es_url() -> Iterator[str]:
    """Base URL of an Elasticsearch node with security off."""
    given = os.environ.get(ENV_URL, "").strip()
    endpoint = EsEndpoint.from_url(given) if given else None
    for started in _started_or_given("plain", "off", endpoint, f"${ENV_URL}"):
        yield started.url


@pytest.fixture(scope="session")
def engine(es_url: str) -> ClusterInfo:
    """The engine and version of the node at ``es_url``, as the node reports them."""
    client = Elasticsearch(es_url, request_timeout=30)
    try:
        info = cluster_info(client, es_url)
    finally:
        client.close()
    if info.major is None:
        pytest.fail(f"the node at {es_url} did not say which engine and version it is", pytrace=False)
    return info


def engine_client(url: str, info: ClusterInfo, **options: Any) -> Any:
    """The official client of ``info``'s engine for ``url`` (``request_timeout`` in seconds)."""
    timeout = options.pop("request_timeout", 60)
    if info.is_opensearch:
        from opensearchpy import OpenSearch
        return OpenSearch(url, timeout=timeout, **options)
    return Elasticsearch(url, request_timeout=timeout, **options)


@pytest.fixture(scope="session")
def es(es_url: str, engine: ClusterInfo) -> Iterator[Any]:
    """Synchronous official client of the node's engine for ``es_url``."""
    client = engine_client(es_url, engine)
    yield client
    client.close()


@pytest.fixture(scope="session")
def secure_es() -> Iterator[EsEndpoint]:
    """A node with security on and basic authentication: URL and superuser credentials."""
    given = os.environ.get(ENV_SECURE_URL, "").strip()
    endpoint = None
    if given:
        endpoint = EsEndpoint.from_url(given, os.environ.get(ENV_SECURE_USER, ""),
                                       os.environ.get(ENV_SECURE_PASSWORD, ""))
        if not endpoint.username:
            pytest.fail(f"${ENV_SECURE_URL} is set but no credentials: put them in the URL or "
                        f"set ${ENV_SECURE_USER} and ${ENV_SECURE_PASSWORD}", pytrace=False)
    yield from _started_or_given("secure", "basic", endpoint, f"${ENV_SECURE_URL}")


@pytest.fixture(scope="session")
def tls_es() -> Iterator[EsEndpoint]:
    """A node with security on, basic authentication and HTTPS; ``ca_certs`` is its CA file."""
    given = os.environ.get(ENV_TLS_URL, "").strip()
    endpoint = None
    if given:
        ca = os.environ.get(ENV_TLS_CA, "").strip()
        endpoint = EsEndpoint.from_url(given)
        if not endpoint.username or not ca:
            pytest.fail(f"${ENV_TLS_URL} needs credentials in the URL and ${ENV_TLS_CA} the CA file",
                        pytrace=False)
        endpoint = EsEndpoint(endpoint.url, endpoint.username, endpoint.password, ca)
    yield from _started_or_given("tls", "tls", endpoint, f"${ENV_TLS_URL}")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test that uses a node with ``es`` so ``-m "not es"`` selects the rest."""
    for item in items:
        if ES_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.es)


def pytest_report_header() -> str:
    given = os.environ.get(ENV_URL)
    where = EsEndpoint.from_url(given).url if given else "started by scripts/es when needed"
    return f"cluster: {where}"
