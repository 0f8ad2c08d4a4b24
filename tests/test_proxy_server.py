"""``neardup proxy`` as a real process: start-up message, workers, graceful shutdown, auth."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from elasticsearch import AuthenticationException, Elasticsearch

from tests.test_proxy_support import ProxyThread, make_config

pytestmark = pytest.mark.es
ROOT = Path(__file__).resolve().parents[1]


class ProxyProcess:
    def __init__(self, es_url: str, *args: str, **env: str) -> None:
        environment = {k: v for k, v in os.environ.items() if not k.startswith("NEARDUP_")}
        environment.update({"PYTHONPATH": str(ROOT), "NEARDUP_LOGGING__FORMAT": "json", **env})
        self.process = subprocess.Popen(
            [sys.executable, "-m", "neardup", "proxy", "--port", "0", "--upstream", es_url, *args],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=environment, cwd=ROOT, text=True)
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        match = re.search(r"listening on (https?://\S+)", line)
        if not match:
            self.process.kill()
            raise AssertionError(f"no start-up line: {line!r} {self.process.stderr.read()}")
        self.url = match.group(1)
        self.first_line = line

    def stop(self, timeout: float = 30) -> tuple[int, str]:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            _, err = self.process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            _, err = self.process.communicate()
        return self.process.returncode, err


@pytest.fixture
def running(es_url: str) -> Iterator[ProxyProcess]:
    proxy = ProxyProcess(es_url)
    yield proxy
    proxy.stop()


def get(url: str, timeout: float = 30) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def test_neardup_proxy_prints_its_url_serves_and_stops_cleanly(running: ProxyProcess, es_url: str) -> None:
    assert f"upstream: {es_url}" in running.first_line
    client = Elasticsearch(running.url)
    try:
        assert client.cluster.health()["status"] in ("green", "yellow")
    finally:
        client.close()
    code, err = running.stop()
    assert code == 0
    lines = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    access = [entry for entry in lines if entry.get("event") == "access"]
    assert access and access[0]["url.path"] == "/_cluster/health"
    assert any("shutting down" in entry["message"] for entry in lines)


def test_shutdown_finishes_requests_in_flight(running: ProxyProcess) -> None:
    # A yellow cluster never turns green here: Elasticsearch holds this request for 3 s.
    result: dict[str, object] = {}

    def slow() -> None:
        result["status"], result["body"] = get(
            running.url + "/_cluster/health?wait_for_status=green&timeout=3s&wait_for_nodes=99")

    thread = threading.Thread(target=slow)
    thread.start()
    time.sleep(1.0)
    running.process.send_signal(signal.SIGTERM)
    thread.join(30)
    assert result["status"] == 408 and json.loads(result["body"])["timed_out"] is True
    assert running.process.wait(30) == 0


def test_workers_share_the_port_and_metrics_add_up(es_url: str) -> None:
    proxy = ProxyProcess(es_url, "--workers", "2")
    try:
        assert "workers: 2" in proxy.first_line
        from concurrent.futures import ThreadPoolExecutor

        pids: set[int] = set()
        sent, deadline = 0, time.monotonic() + 60
        with ThreadPoolExecutor(8) as pool:   # concurrent connections, so both workers accept
            # in rounds: on a loaded machine one worker can take a whole round while the other
            # is still being scheduled; a worker that never accepts fails the test below
            while len(pids) < 2 and time.monotonic() < deadline:
                answers = list(pool.map(lambda _: get(proxy.url + "/_neardup/health"), range(40)))
                assert all(status == 200 for status, _ in answers)
                pids |= {json.loads(body)["proxy"]["pid"] for _, body in answers}
                sent += len(answers)
        # Workers publish their counters about once a second (later on a loaded machine):
        # poll until every worker's share is in, or give up after 60 s.
        pattern = rb'neardup_proxy_requests_total\{route="health",status="200"\} (\d+)'
        deadline, count = time.monotonic() + 60, 0
        while count < sent and time.monotonic() < deadline:
            time.sleep(0.5)
            _, text = get(proxy.url + "/_neardup/metrics")
            found = re.search(pattern, text)
            count = int(found.group(1)) if found else 0
        assert count >= sent
    finally:
        code, _ = proxy.stop()
    assert code == 0
    assert len(pids) == 2, "connections are spread over both workers"


def test_bad_options_are_reported(es_url: str) -> None:
    result = subprocess.run([sys.executable, "-m", "neardup", "proxy", "--upstream", "not a url"],
                            capture_output=True, text=True, cwd=ROOT, timeout=60,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert result.returncode == 2 and "Traceback" not in result.stderr and "urls" in result.stderr


def test_credentials_are_forwarded_to_a_secure_cluster(secure_es) -> None:  # noqa: ANN001
    with ProxyThread(make_config(secure_es.url)) as proxy:
        good = Elasticsearch(proxy.url, basic_auth=(secure_es.username, secure_es.password))
        bad = Elasticsearch(proxy.url, basic_auth=(secure_es.username, "wrong"))
        anonymous = Elasticsearch(proxy.url)
        try:
            assert good.cluster.health()["status"] in ("green", "yellow")
            name = f"proxy-secure-{time.time_ns()}"
            good.index(index=name, id="1", document={"t": "x"}, refresh=True)
            assert good.search(index=name)["hits"]["hits"][0]["_id"] == "1"
            good.indices.delete(index=name)
            for client in (bad, anonymous):
                with pytest.raises(AuthenticationException) as caught:
                    client.search(index="*")
                assert caught.value.meta.status == 401
                assert "WWW-Authenticate" in caught.value.meta.headers or \
                    "www-authenticate" in caught.value.meta.headers
        finally:
            for client in (good, bad, anonymous):
                client.close()


@pytest.mark.parametrize("taken", ["port", "ops_address"])
def test_an_address_in_use_is_named_and_nothing_is_left_listening(es_url: str, taken: str) -> None:
    import socket

    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen(1)
        port = holder.getsockname()[1]
        environment = {k: v for k, v in os.environ.items() if not k.startswith("NEARDUP_")}
        environment["PYTHONPATH"] = str(ROOT)
        if taken == "port":
            args = ["--port", str(port)]
        else:
            args = ["--port", "0"]
            environment["NEARDUP_PROXY__OPS_ADDRESS"] = f"127.0.0.1:{port}"
        done = subprocess.run([sys.executable, "-m", "neardup", "proxy", "--host", "127.0.0.1",
                               "--upstream", es_url, *args],
                              capture_output=True, text=True, env=environment, cwd=ROOT, timeout=60)
    assert done.returncode == 1
    assert f"cannot listen on 127.0.0.1:{port}" in done.stderr
    assert "Traceback" not in done.stderr and "listening on" not in done.stdout
