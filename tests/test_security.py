"""Security of the proxy: credentials, TLS to the upstream, read-only mode and path allow-list,
a fixed upstream, and the operations endpoints on their own address.

Credentials are checked twice: against a recording upstream (:mod:`tests.faultproxy`, which
shows the exact bytes the proxy sent) and against the real Elasticsearch with security and TLS
on (``tls_es``), where basic authentication and an API key must work through the proxy.
"""

from __future__ import annotations

import base64
import gzip
import json
import re
import uuid
from collections.abc import Iterator

import pytest
from elasticsearch import AuthorizationException, Elasticsearch

from neardup.access_rules import READ_POST, RuleError, is_read, parse_rule, path_segments
from neardup.config import ConfigError, load_config
from neardup.proxy.transport.access import policy
from tests.faultproxy import Fault, FaultProxy, closed_port_url, es_like_response, http_response
from tests.plugins.elasticsearch import EsEndpoint
from tests.reliability_support import LogCapture, es_error_type, fetch, raw_exchange
from tests.test_proxy_server import ProxyProcess
from tests.test_proxy_support import ProxyThread, make_config

JSON = {"Content-Type": "application/json"}
SECRET_BASIC = "Basic " + base64.b64encode(b"alice:pw-Zq8Secret").decode()
SECRET_KEY = "ApiKey " + base64.b64encode(b"key-id:key-Zq8Secret").decode()
SECRET_COOKIE = "sid=cookie-Zq8Secret; theme=dark"
SECRETS = ("pw-Zq8Secret", "key-Zq8Secret", "cookie-Zq8Secret",
           base64.b64encode(b"alice:pw-Zq8Secret").decode(), base64.b64encode(b"key-id:key-Zq8Secret").decode())


# -- the access policy (pure) -------------------------------------------------------------------
@pytest.mark.parametrize("text, error", [
    ("FETCH /x", "unknown HTTP method 'FETCH'"), ("x/_search", "must start with '/'"),
    ("GET /a//b", "empty path segment"), ("GET /a/../b", "'.' and '..'")])
def test_bad_rules_are_refused(text: str, error: str) -> None:
    with pytest.raises(RuleError, match=re.escape(error)):
        parse_rule(text)


@pytest.mark.parametrize("method, path, allowed", [
    ("GET", "/logs-a/_search", True), ("POST", "/logs-a,logs-b/_search", True),
    ("POST", "/logs-a,secret/_search", False), ("POST", "/secret/_search", False),
    ("DELETE", "/logs-a/_search", False), ("POST", "/logs-a/%5Fsearch", False),
    ("POST", "/logs-a/_search/../../secret/_search", False), ("POST", "/logs-a/%2e%2e/_bulk", False),
    ("POST", "/logs-%61/_search", True), ("POST", "/logs-a%2Csecret/_search", False),
    ("GET", "/_cluster/health", True), ("GET", "/_cluster/health/x", False),
    ("HEAD", "/docs/_doc/1", True), ("GET", "/docs/_doc/1/x", True), ("PUT", "/docs/_doc/1", False),
    ("POST", "/_search", False), ("POST", "/logs-a,/_search", False),
])
def test_allow_list_matching(method: str, path: str, allowed: bool) -> None:
    rules = ("GET,POST /logs-*/_search", "GET /_cluster/health", "GET,HEAD /docs/**")
    assert (policy(False, rules).refusal(method, path) is None) is allowed


@pytest.mark.parametrize("method, path, read", [
    ("GET", "/x/_doc/1", True), ("HEAD", "/x", True), ("POST", "/x/_search", True),
    ("POST", "/_msearch", True), ("POST", "/x/_count", True), ("POST", "/x/_pit", True),
    ("DELETE", "/_pit", True), ("DELETE", "/_search/scroll", True), ("POST", "/_search/scroll", True),
    ("POST", "/_all/_search", True), ("POST", "/x/_mget", True),
    ("POST", "/_bulk", False), ("POST", "/x/_doc", False), ("PUT", "/x", False), ("DELETE", "/x", False),
    ("POST", "/x/_update/1", False), ("POST", "/x/_delete_by_query", False), ("POST", "/%5Fsearch", False),
    ("POST", "/x/_search/../../_bulk", False), ("PUT", "/_cluster/settings", False),
    ("POST", "/_security/user/bob", False), ("DELETE", "/x/_doc/1", False), ("PATCH", "/x/_search", False),
])
def test_read_only_classification(method: str, path: str, read: bool) -> None:
    assert is_read(method, path) is read
    refusal = policy(True, ()).refusal(method, path)
    assert (refusal is None) is read
    if refusal is not None:
        assert refusal.status == 403 and refusal.type == "security_exception" and path[:50] in refusal.reason


def test_read_api_table_parses_and_dot_segments_never_match() -> None:
    assert all(parse_rule(rule) for rule in READ_POST)
    assert path_segments("/a/%2E/b") is None and path_segments("/") == ()


def test_config_validates_the_new_keys() -> None:
    with pytest.raises(ConfigError, match=r"proxy\.allowed_paths.*must start with '/'"):
        load_config(environ={"NEARDUP_PROXY__ALLOWED_PATHS": '["GET logs/_search"]'})
    with pytest.raises(ConfigError, match=r"proxy\.ops_address.*host:port"):
        load_config(environ={"NEARDUP_PROXY__OPS_ADDRESS": "localhost"})
    config = load_config(environ={"NEARDUP_PROXY__READ_ONLY": "true", "NEARDUP_PROXY__OPS_ADDRESS": "[::1]:0",
                                  "NEARDUP_PROXY__ALLOWED_PATHS": "GET /_cluster/health"})
    assert config.proxy.read_only and config.proxy.allowed_paths == ["GET /_cluster/health"]


# -- credentials: forwarded unchanged, never logged or echoed ----------------------------------
@pytest.fixture(scope="module")
def recorder() -> Iterator[FaultProxy]:
    with FaultProxy(fault=Fault("respond", response=es_like_response)) as upstream:
        yield upstream


def _credential_requests() -> list[tuple[str, str, bytes | None, dict[str, str]]]:
    msearch = b'{"index":"i"}\n{"query":{"match_all":{}}}\n{}\n{"size":2}\n'
    out = []
    for auth in (SECRET_BASIC, SECRET_KEY):
        creds = {"Authorization": auth, "Cookie": SECRET_COOKIE}
        out += [("GET", "/i/_doc/1", None, creds),
                ("POST", "/i/_search", b'{"query":{"match_all":{}}}', {**creds, **JSON}),
                ("POST", "/i/_search?neardup=off", b"{}", {**creds, **JSON}),
                ("POST", "/_msearch", msearch, {**creds, "Content-Type": "application/x-ndjson"}),
                ("POST", "/_bulk", b'{"index":{"_index":"i"}}\n{"a":1}\n',
                 {**creds, "Content-Type": "application/x-ndjson"})]
    return out


def test_credentials_are_forwarded_unchanged(recorder: FaultProxy) -> None:
    with ProxyThread(make_config(recorder.url)) as proxy:
        for method, path, body, headers in _credential_requests():
            recorder.seen.clear()
            out = fetch(proxy.url, method, path, body, headers)
            assert out.status == 200, (path, out)
            assert recorder.seen, path
            for received in recorder.seen:   # a collapsed search may take several rounds
                assert received.header("Authorization") == [headers["Authorization"]], path
                assert received.header("Cookie") == [SECRET_COOKIE], path


def test_proxy_uses_no_credentials_of_its_own(recorder: FaultProxy) -> None:
    """User information in upstream.urls is not added to clients' requests, nor shown."""
    with_user = recorder.url.replace("http://", "http://svc:svc-Zq8Secret@")
    with ProxyThread(make_config(with_user)) as proxy:
        recorder.seen.clear()
        assert fetch(proxy.url, "GET", "/i/_doc/1").status == 200
        assert recorder.seen and recorder.seen[-1].header("Authorization") == []
    with ProxyThread(make_config(closed_port_url().replace("http://", "http://svc:svc-Zq8Secret@"))) as proxy:
        down = fetch(proxy.url, "GET", "/_cluster/health")
    assert down.status == 502 and b"127.0.0.1" in down.body and b"svc-Zq8Secret" not in down.body


def test_credentials_are_never_logged_or_echoed(recorder: FaultProxy) -> None:
    """Every kind of answer the proxy writes itself, with JSON and text logs at DEBUG."""
    creds = {"Authorization": SECRET_BASIC, "Cookie": SECRET_COOKIE, "X-Api-Key": "key-Zq8Secret"}
    gzip_bomb = gzip.compress(b" " * 3_000_000)
    seen_bodies: list[bytes] = []
    with LogCapture() as logs:
        with ProxyThread(make_config(recorder.url, proxy={"max_body_bytes": 1_000_000})) as proxy:
            cases = [
                ("GET", "/i/_doc/1", None, {}),                                   # forwarded
                ("POST", "/i/_search?neardup_threshold=2", b"{}", JSON),          # 400, ours
                ("POST", "/i/_search?neardup_colour=red", b"{}", JSON),           # 400, unknown parameter
                ("POST", "/i/_search", gzip_bomb, {**JSON, "Content-Encoding": "gzip"}),   # 413
                ("PUT", "/i/_doc/1", b"x" * 1_100_000, JSON),                     # 413
                ("POST", "/i/_search", b"{not json", JSON),                       # upstream's answer
            ]
            for method, path, body, headers in cases:
                out = fetch(proxy.url, method, path, body, {**creds, **headers})
                seen_bodies.append(out.body + json.dumps(out.headers).encode())
            recorder.fault = Fault("respond", response=http_response(200, b'{"hits": 7}'))   # fail-open
            seen_bodies.append(fetch(proxy.url, "POST", "/i/_search", b"{}", {**creds, **JSON}).body)
            recorder.fault = Fault("respond", response=es_like_response)
            seen_bodies.append(raw_exchange(proxy.url, b"GET http://elsewhere/x HTTP/1.1\r\nHost: x\r\n"
                                            b"Authorization: " + SECRET_BASIC.encode() + b"\r\n"
                                            b"Connection: close\r\n\r\n"))
        recorder.fault = Fault("respond", response=es_like_response, delay=1.5)
        with ProxyThread(make_config(recorder.url, upstream={"request_timeout": 0.5})) as proxy:
            late = fetch(proxy.url, "GET", "/i/_doc/1", headers=creds)
            recorder.fault = Fault("respond", response=es_like_response)
            assert late.status == 504
            seen_bodies.append(late.body + json.dumps(late.headers).encode())
        with ProxyThread(make_config(closed_port_url(), proxy={"read_only": True})) as proxy:
            for method, path in (("GET", "/_cluster/health"), ("POST", "/_bulk"), ("GET", "/_neardup/health")):
                out = fetch(proxy.url, method, path, b"{}" if method == "POST" else None, creds)
                assert out.status in (403, 502, 503)
                seen_bodies.append(out.body + json.dumps(out.headers).encode())
        text = logs.text()
    assert "access" in text and "fail_open" in text      # the logs were captured
    for secret in SECRETS:
        assert secret not in text
        assert all(secret.encode() not in body for body in seen_bodies)


def test_credentials_in_upstream_urls_are_not_printed(recorder: FaultProxy) -> None:
    url = recorder.url.replace("http://", "http://svc:svc-Zq8Secret@")
    proxy = ProxyProcess(url, NEARDUP_LOGGING__LEVEL="DEBUG")
    try:
        fetch(proxy.url, "GET", "/i/_doc/1", headers={"Authorization": SECRET_BASIC})
    finally:
        code, err = proxy.stop()
    assert code == 0
    assert "127.0.0.1" in proxy.first_line and "svc-Zq8Secret" not in proxy.first_line + err
    assert "pw-Zq8Secret" not in err and base64.b64encode(b"alice:pw-Zq8Secret").decode() not in err


# -- TLS to the upstream, against the real Elasticsearch -----------------------------------------
def _tls_config(endpoint: EsEndpoint, **upstream: object) -> object:
    return make_config(endpoint.url, upstream=upstream)


def test_tls_upstream_with_ca_bundle_and_basic_auth(tls_es: EsEndpoint) -> None:
    """(API keys cannot be created on the integ-test distribution: its security index needs the
    missing analysis-common module. ``ApiKey`` headers are checked by the recording upstream.)"""
    assert tls_es.url.startswith("https://") and tls_es.ca_certs
    direct = tls_es.client()
    index = f"reliab-tls-{uuid.uuid4().hex[:8]}"
    try:
        direct.index(index=index, id="1", document={"title": "hello"}, refresh=True)
        with ProxyThread(_tls_config(tls_es, ca_certs=tls_es.ca_certs)) as proxy:
            client = Elasticsearch(proxy.url, basic_auth=tls_es.basic_auth, request_timeout=60)
            try:
                assert client.get(index=index, id="1")["_source"] == {"title": "hello"}
                found = client.search(index=index, query={"match_all": {}})
                assert found["hits"]["hits"][0]["_id"] == "1" and "neardup" in found
            finally:
                client.close()
            basic = "Basic " + base64.b64encode(f"{tls_es.username}:{tls_es.password}".encode()).decode()
            who = fetch(proxy.url, "GET", "/_security/_authenticate", headers={"Authorization": basic})
            assert who.status == 200 and who.json()["username"] == tls_es.username
            wrong = fetch(proxy.url, "GET", "/_security/_authenticate",
                          headers={"Authorization": "Basic " + base64.b64encode(b"neardup-admin:wrong").decode()})
            anonymous = fetch(proxy.url, "GET", f"/{index}/_search")
        assert wrong.status == 401 and es_error_type(wrong) == "security_exception"   # Elasticsearch's own
        assert anonymous.status == 401 and "www-authenticate" in anonymous.headers
    finally:
        direct.options(ignore_status=404).indices.delete(index=index)
        direct.close()


def test_tls_upstream_is_verified_by_default(tls_es: EsEndpoint) -> None:
    auth = {"Authorization": "Basic " + base64.b64encode(f"{tls_es.username}:{tls_es.password}".encode()).decode()}
    with ProxyThread(_tls_config(tls_es)) as proxy:          # no CA bundle: the system's CAs
        refused = fetch(proxy.url, "GET", "/_cluster/health", headers=auth)
        # The collapsed search path (proxy/transport/http1_client.py) verifies the same way.
        refused_search = fetch(proxy.url, "POST", "/any/_search", headers=auth)
    with ProxyThread(_tls_config(tls_es, verify_certs=False)) as proxy:
        unverified = fetch(proxy.url, "GET", "/_cluster/health", headers=auth)
    assert refused.status == 502 and es_error_type(refused) == "neardup_upstream_unreachable_exception"
    assert b"CERTIFICATE_VERIFY_FAILED" in refused.body or b"certificate" in refused.body.lower()
    assert unverified.status == 200
    assert refused_search.status == 502 and es_error_type(refused_search) == "neardup_upstream_unreachable_exception"
    assert b"CERTIFICATE_VERIFY_FAILED" in refused_search.body


# -- read-only mode and path allow-list, against the real Elasticsearch --------------------------
@pytest.fixture
def docs_index(es: Elasticsearch) -> Iterator[str]:
    name = f"reliab-acl-{uuid.uuid4().hex[:8]}"
    es.indices.create(index=name, settings={"number_of_shards": 1, "number_of_replicas": 0})
    es.index(index=name, id="1", document={"title": "kept"}, refresh=True)
    yield name
    es.options(ignore_status=404).indices.delete(index=name)


def test_read_only_mode_serves_reads_and_refuses_writes(es_url: str, es: Elasticsearch, docs_index: str) -> None:
    with ProxyThread(make_config(es_url, proxy={"read_only": True})) as proxy:
        client = proxy.client()
        try:
            assert client.get(index=docs_index, id="1")["_source"] == {"title": "kept"}
            assert client.search(index=docs_index)["hits"]["total"]["value"] == 1
            assert client.count(index=docs_index)["count"] == 1
            assert client.msearch(searches=[{"index": docs_index}, {}])["responses"][0]["hits"]["hits"]
            pit = client.open_point_in_time(index=docs_index, keep_alive="1m")["id"]
            assert client.close_point_in_time(id=pit)["succeeded"]
            page = client.search(index=docs_index, scroll="1m", size=1)
            client.clear_scroll(scroll_id=page["_scroll_id"])
            writes = [lambda: client.index(index=docs_index, id="2", document={"title": "new"}),
                      lambda: client.bulk(operations=[{"index": {"_index": docs_index, "_id": "3"}}, {"a": 1}]),
                      lambda: client.update(index=docs_index, id="1", doc={"title": "changed"}),
                      lambda: client.delete(index=docs_index, id="1"),
                      lambda: client.indices.delete(index=docs_index),
                      lambda: client.indices.create(index=docs_index + "-x")]
            for write in writes:
                with pytest.raises(AuthorizationException) as refused:
                    write()
                assert refused.value.meta.status == 403 and refused.value.error == "security_exception"
                assert "read-only" in str(refused.value)
        finally:
            client.close()
        sneaky = [fetch(proxy.url, "POST", f"/{docs_index}/_search/../../_bulk", b"{}", JSON),
                  fetch(proxy.url, "POST", "/%5Fbulk", b'{"index":{"_index":"x"}}\n{}\n', JSON)]
    assert all(o.status == 403 and es_error_type(o) == "security_exception" for o in sneaky)
    es.indices.refresh(index=docs_index)
    assert es.count(index=docs_index)["count"] == 1
    assert es.get(index=docs_index, id="1")["_source"] == {"title": "kept"}
    assert not es.indices.exists(index=docs_index + "-x")


def test_path_allow_list(es_url: str, docs_index: str) -> None:
    rules = [f"GET,POST /{docs_index[:-3]}*/_search", "GET /_cluster/health"]
    with ProxyThread(make_config(es_url, proxy={"allowed_paths": rules})) as proxy:
        allowed = [fetch(proxy.url, "POST", f"/{docs_index}/_search", b"{}", JSON),
                   fetch(proxy.url, "GET", "/_cluster/health")]
        refused = [fetch(proxy.url, "GET", f"/{docs_index}/_doc/1"),
                   fetch(proxy.url, "POST", "/_search", b"{}", JSON),
                   fetch(proxy.url, "POST", f"/{docs_index},.security/_search", b"{}", JSON),
                   fetch(proxy.url, "DELETE", f"/{docs_index}/_search"),
                   fetch(proxy.url, "GET", "/_cat/indices")]
        ops = fetch(proxy.url, "GET", "/_neardup/health")   # the proxy's own endpoint
    assert [o.status for o in allowed] == [200, 200]
    for out in refused:
        assert out.status == 403 and es_error_type(out) == "security_exception"
        assert "proxy.allowed_paths" in out.json()["error"]["reason"]
    assert ops.status == 200


# -- the upstream is fixed by configuration --------------------------------------------------------
def test_no_request_makes_the_proxy_connect_elsewhere(recorder: FaultProxy) -> None:
    with FaultProxy(fault=Fault("respond", response=es_like_response)) as elsewhere:
        host = elsewhere.url.split("//")[1]
        with ProxyThread(make_config(recorder.url)) as proxy:
            recorder.seen.clear()
            absolute = raw_exchange(proxy.url, f"GET {elsewhere.url}/i/_doc/1 HTTP/1.1\r\nHost: {host}\r\n"
                                               "Connection: close\r\n\r\n".encode())
            connect = raw_exchange(proxy.url, f"CONNECT {host} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode(),
                                   timeout=5)
            by_host = fetch(proxy.url, "GET", "/i/_doc/1", headers={"Host": host})
            by_slashes = fetch(proxy.url, "GET", f"//{host}/i/_doc/1")
            by_at = raw_exchange(proxy.url, f"GET @{host}/i/_doc/1 HTTP/1.1\r\nHost: x\r\n"
                                            "Connection: close\r\n\r\n".encode())
    assert absolute.startswith(b"HTTP/1.1 400") and b"illegal_argument_exception" in absolute
    assert connect.split(b" ")[1] in (b"400", b"404", b"405")   # never a tunnel
    assert by_at.split(b" ")[1] == b"400"
    assert by_host.status == 200 and by_slashes.status == 200
    assert elsewhere.accepted == 0
    lines = [r.request_line for r in recorder.seen]
    assert lines == ["GET /i/_doc/1 HTTP/1.1", f"GET //{host}/i/_doc/1 HTTP/1.1"]
    assert all(r.header("Host") == [recorder.url.split("//")[1]] for r in recorder.seen)


# -- the operations endpoints on their own address -------------------------------------------------
@pytest.mark.parametrize("workers", ["1", "2"])
def test_health_and_metrics_on_a_separate_address(es_url: str, workers: str) -> None:
    proxy = ProxyProcess(es_url, "--workers", workers, NEARDUP_PROXY__OPS_ADDRESS="127.0.0.1:0",
                         NEARDUP_LOGGING__LEVEL="WARNING")
    try:
        match = re.search(r"health and metrics on (http://\S+?)\)", proxy.first_line)
        assert match, proxy.first_line
        ops_url = match.group(1)
        assert ops_url != proxy.url
        health = fetch(ops_url, "GET", "/_neardup/health")
        metrics = fetch(ops_url, "GET", "/_neardup/metrics")
        not_ops = fetch(ops_url, "GET", "/_cluster/health")
        main = [fetch(proxy.url, "GET", "/_neardup/health"), fetch(proxy.url, "GET", "/_neardup/metrics")]
        search = fetch(proxy.url, "POST", "/_search?size=1", b"{}", JSON)
    finally:
        code, _ = proxy.stop()
    assert code == 0
    assert health.status == 200 and health.json()["status"] == "ok"
    assert metrics.status == 200 and b"neardup_proxy_requests_total" in metrics.body
    assert not_ops.status == 404 and es_error_type(not_ops)
    for out in main:
        assert out.status == 404 and es_error_type(out) == "resource_not_found_exception"
    assert search.status == 200
