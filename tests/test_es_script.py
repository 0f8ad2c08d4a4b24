"""scripts/es and the Elasticsearch fixtures: argument checking, and a node with basic
authentication that rejects anonymous requests and accepts its user."""

from __future__ import annotations

import base64
import json
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.plugins.elasticsearch import ES_SCRIPT, EsEndpoint


def run_es(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(ES_SCRIPT), *args], capture_output=True, text=True, timeout=60)


def http_status(url: str, credentials: tuple[str, str] | None = None) -> tuple[int, dict]:
    request = urllib.request.Request(url)
    if credentials:
        token = base64.b64encode(":".join(credentials).encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"{}")


@pytest.mark.parametrize(("args", "status", "message"), [
    (["start", "--security", "none"], 1, "--security must be off, basic or tls, not 'none'"),
    (["start", "--port", "99999"], 1, "--port must be a port number (1-65535) or 'auto', not '99999'"),
    (["start", "--heap", "lots"], 1, "--heap must look like 512m or 1g, not 'lots'"),
    (["start", "--timeout", "-3"], 1, "--timeout must be a positive number of seconds"),
    (["restart"], 2, "unknown command: restart"),
    (["stop", "--bogus"], 2, "unknown option: --bogus"),
    ([], 2, "scripts/es start"),
])
def test_bad_arguments_are_refused_with_a_message(args, status, message):
    result = run_es(*args)
    assert result.returncode == status
    assert message in result.stderr


def test_status_of_a_folder_without_a_node_exits_3(tmp_path: Path):
    result = run_es("status", "--home", str(tmp_path / "none"))
    assert result.returncode == 3
    assert "no node here" in result.stderr


def test_url_of_a_port_is_the_loopback_url(tmp_path: Path):
    result = run_es("url", "--port", "9555", "--home", str(tmp_path / "none"))
    assert (result.returncode, result.stdout) == (0, "http://127.0.0.1:9555\n")


def test_endpoint_splits_credentials_out_of_the_url():
    endpoint = EsEndpoint.from_url("http://us%40er:p%3Ass@127.0.0.1:9250/")
    assert endpoint == EsEndpoint("http://127.0.0.1:9250", "us@er", "p:ss")
    assert EsEndpoint.from_url("http://h:1", "u", "p").basic_auth == ("u", "p")
    assert EsEndpoint.from_url("http://h:1").basic_auth is None


def test_secured_node_rejects_anonymous_requests_and_accepts_its_user(secure_es):
    health = f"{secure_es.url}/_cluster/health"
    status, body = http_status(health)
    assert status == 401
    assert body["error"]["type"] == "security_exception"
    assert http_status(health, (secure_es.username, "not-the-password"))[0] == 401
    status, body = http_status(health, (secure_es.username, secure_es.password))
    assert status == 200 and body["status"] in ("green", "yellow")
    status, body = http_status(f"{secure_es.url}/_security/_authenticate",
                               (secure_es.username, secure_es.password))
    assert body["username"] == secure_es.username and "superuser" in body["roles"]


def test_plain_node_answers_anonymous_requests(es_url, es):
    status, body = http_status(f"{es_url}/_cluster/health")
    assert status == 200 and body["status"] in ("green", "yellow")
    assert es.cluster.health()["cluster_name"] == body["cluster_name"]
