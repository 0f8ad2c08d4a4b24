"""HTTPS between the clients and the proxy (``proxy.tls_cert``, ``proxy.tls_key``,
``proxy.tls_client_ca``), with certificates made by ``openssl`` for the test: a CA, a server
certificate for 127.0.0.1 and localhost, a client certificate, and a second CA nobody trusts.

``neardup proxy`` runs as a real process with two workers, so every worker's TLS is exercised.
"""

from __future__ import annotations

import base64
import json
import os
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from elasticsearch import AuthenticationException, Elasticsearch
from elasticsearch import ConnectionError as EsConnectionError
from elasticsearch import SSLError as EsSSLError

from neardup.config import ConfigError, ProxyConfig, load_config
from tests.plugins.elasticsearch import EsEndpoint
from tests.test_proxy_server import ProxyProcess
from tests.test_proxy_support import FamilyIndex, build_family_index, family_index  # noqa: F401 - fixture

ROOT = Path(__file__).resolve().parents[1]
CA_EXTENSIONS = ["-addext", "basicConstraints=critical,CA:TRUE",
                 "-addext", "keyUsage=critical,keyCertSign,cRLSign",
                 "-addext", "subjectKeyIdentifier=hash"]
LEAF_EXTENSIONS = ("basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\n"
                   "subjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid\n")


@dataclass(frozen=True)
class Pki:
    ca: str
    server_cert: str
    server_key: str
    client_cert: str
    client_key: str
    other_client_cert: str   # signed by a CA the proxy does not trust
    other_client_key: str


def openssl(folder: Path, *args: str) -> None:
    subprocess.run(["openssl", *args], cwd=folder, check=True, capture_output=True, timeout=60)


def new_key_and_request(folder: Path, name: str, *extra: str) -> list[str]:
    return ["req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", f"{name}.key", "-subj", f"/CN={name}", *extra]


def make_ca(folder: Path, name: str) -> None:
    openssl(folder, *new_key_and_request(folder, name, "-x509", "-days", "2", "-out", f"{name}.pem",
                                         *CA_EXTENSIONS))


def issue(folder: Path, name: str, ca: str, extensions: str) -> tuple[str, str]:
    """A certificate for ``name`` signed by ``ca``: (certificate file, key file)."""
    openssl(folder, *new_key_and_request(folder, name, "-out", f"{name}.csr"))
    (folder / f"{name}.ext").write_text(LEAF_EXTENSIONS + extensions, encoding="utf-8")
    openssl(folder, "x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key",
            "-set_serial", str(time.time_ns()), "-days", "2", "-extfile", f"{name}.ext",
            "-out", f"{name}.pem")
    return str(folder / f"{name}.pem"), str(folder / f"{name}.key")


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    folder = tmp_path_factory.mktemp("pki")
    make_ca(folder, "ca")
    make_ca(folder, "other-ca")
    server = issue(folder, "server", "ca", "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
                                           "extendedKeyUsage=serverAuth\n")
    client = issue(folder, "client", "ca", "extendedKeyUsage=clientAuth\n")
    other = issue(folder, "other-client", "other-ca", "extendedKeyUsage=clientAuth\n")
    return Pki(str(folder / "ca.pem"), *server, *client, *other)


def https_proxy(upstream: str, pki: Pki, client_ca: bool = False, **env: str) -> ProxyProcess:
    tls = {"NEARDUP_PROXY__TLS_CERT": pki.server_cert, "NEARDUP_PROXY__TLS_KEY": pki.server_key}
    if client_ca:
        tls["NEARDUP_PROXY__TLS_CLIENT_CA"] = pki.ca
    proxy = ProxyProcess(upstream, "--workers", "2", **tls, **env)
    assert proxy.url.startswith("https://127.0.0.1:"), proxy.first_line
    return proxy


@pytest.fixture(scope="module")
def tls_proxy(es_url: str, pki: Pki) -> Iterator[ProxyProcess]:
    proxy = https_proxy(es_url, pki)
    yield proxy
    code, err = proxy.stop()
    assert code == 0, err


def address(url: str) -> tuple[str, int]:
    host, port = url.split("//", 1)[1].rsplit(":", 1)
    return host, int(port)


def tls_exchange(url: str, context: ssl.SSLContext, request: bytes) -> bytes:
    """Send ``request`` over TLS and read until the server closes; handshake errors propagate."""
    with socket.create_connection(address(url), timeout=30) as raw, \
            context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
        tls.sendall(request)
        answer = b""
        while chunk := tls.recv(65536):
            answer += chunk
        return answer


def refused(url: str, context: ssl.SSLContext) -> bool:
    """Whether the server ends the TLS connection without answering. With TLS 1.3 the client's
    handshake ends before the server has checked the client's certificate, so the refusal comes
    as an alert or as the connection closing when the client reads."""
    try:
        return not tls_exchange(url, context, health_request())
    except (ssl.SSLError, ConnectionResetError):
        return True


def health_request() -> bytes:
    return b"GET /_neardup/health HTTP/1.1\r\nHost: proxy\r\nConnection: close\r\n\r\n"


# -- a client that trusts the CA gets collapsed searches from every worker ------------------------
def test_official_client_verifies_the_proxy_and_gets_a_collapsed_search(
        tls_proxy: ProxyProcess, pki: Pki, family_index: FamilyIndex) -> None:  # noqa: F811
    client = Elasticsearch(tls_proxy.url, ca_certs=pki.ca, request_timeout=60)
    try:
        found = client.search(index=family_index.name, sort=["rank"], size=len(family_index.docs))
    finally:
        client.close()
    assert found["neardup"]["collapsed"] > 0
    assert any(hit.get("inner_hits", {}).get("neardup") for hit in found["hits"]["hits"])


def test_every_worker_serves_https(tls_proxy: ProxyProcess, pki: Pki) -> None:
    context = ssl.create_default_context(cafile=pki.ca)
    pids: set[int] = set()
    deadline = time.monotonic() + 60
    while len(pids) < 2 and time.monotonic() < deadline:   # the kernel spreads connections
        answer = tls_exchange(tls_proxy.url, context, health_request())
        assert answer.startswith(b"HTTP/1.1 200"), answer[:200]
        pids.add(json.loads(answer.split(b"\r\n\r\n", 1)[1])["proxy"]["pid"])
    assert len(pids) == 2


# -- clients that cannot verify the proxy, or speak plain HTTP, get nothing -----------------------
def test_a_client_without_the_ca_is_refused_at_the_handshake(tls_proxy: ProxyProcess) -> None:
    with pytest.raises(ssl.SSLCertVerificationError):
        tls_exchange(tls_proxy.url, ssl.create_default_context(), health_request())
    client = Elasticsearch(tls_proxy.url, request_timeout=30, max_retries=0)
    try:
        with pytest.raises(EsSSLError) as caught:
            client.info()
        assert "CERTIFICATE_VERIFY_FAILED" in repr(caught.value)
    finally:
        client.close()


def plain_http_answer(url: str, request: bytes) -> bytes:
    """What a plain-HTTP client reads from the TLS port: the server's bytes until it closes."""
    with socket.create_connection(address(url), timeout=30) as sock:
        sock.sendall(request)
        answer = b""
        try:
            while chunk := sock.recv(65536):
                answer += chunk
        except ConnectionResetError:
            pass
        return answer


def assert_no_http_answer(answer: bytes) -> None:
    """Nothing but a TLS alert record (content type 21) or nothing at all."""
    assert not answer or answer[0] == 21, answer[:200]
    assert b"HTTP/" not in answer and b"{" not in answer


# -- client certificates -------------------------------------------------------------------------
def test_with_tls_client_ca_only_clients_with_a_certificate_of_that_ca_get_through(
        es_url: str, pki: Pki) -> None:
    proxy = https_proxy(es_url, pki, client_ca=True)
    try:
        with_cert = Elasticsearch(proxy.url, ca_certs=pki.ca, client_cert=pki.client_cert,
                                  client_key=pki.client_key, request_timeout=30, max_retries=0)
        without = Elasticsearch(proxy.url, ca_certs=pki.ca, request_timeout=30, max_retries=0)
        other_ca = Elasticsearch(proxy.url, ca_certs=pki.ca, client_cert=pki.other_client_cert,
                                 client_key=pki.other_client_key, request_timeout=30, max_retries=0)
        try:
            assert with_cert.cluster.health()["status"] in ("green", "yellow")
            for stranger in (without, other_ca):
                with pytest.raises(EsConnectionError):
                    stranger.cluster.health()
        finally:
            for client in (with_cert, without, other_ca):
                client.close()
        context = ssl.create_default_context(cafile=pki.ca)
        assert refused(proxy.url, context)
        context.load_cert_chain(pki.client_cert, pki.client_key)
        assert tls_exchange(proxy.url, context, health_request()).startswith(b"HTTP/1.1 200")
    finally:
        code, err = proxy.stop()
    assert code == 0 and "Traceback" not in err, err


# -- end to end: HTTPS from the client to the proxy and from the proxy to a secured node ----------
def test_credentials_travel_over_https_both_ways(tls_es: EsEndpoint, pki: Pki) -> None:
    assert tls_es.url.startswith("https://") and tls_es.username
    direct = tls_es.client()
    index = build_family_index(direct, stories=12, families=4)
    proxy = https_proxy(tls_es.url, pki, NEARDUP_UPSTREAM__CA_CERTS=tls_es.ca_certs)
    try:
        client = Elasticsearch(proxy.url, ca_certs=pki.ca, basic_auth=tls_es.basic_auth,
                               request_timeout=60)
        anonymous = Elasticsearch(proxy.url, ca_certs=pki.ca, request_timeout=60, max_retries=0)
        try:
            found = client.search(index=index.name, sort=["rank"], size=len(index.docs))
            assert found["neardup"]["collapsed"] > 0
            assert client.security.authenticate()["username"] == tls_es.username
            with pytest.raises(AuthenticationException):
                anonymous.search(index=index.name)
        finally:
            client.close()
            anonymous.close()
        basic = base64.b64encode(f"{tls_es.username}:{tls_es.password}".encode())
        assert_no_http_answer(plain_http_answer(
            proxy.url, b"GET /_security/_authenticate HTTP/1.1\r\nHost: proxy\r\nAuthorization: Basic "
            + basic + b"\r\nConnection: close\r\n\r\n"))
    finally:
        code, err = proxy.stop()
        direct.options(ignore_status=404).indices.delete(index=index.name)
        direct.close()
    assert code == 0 and "Traceback" not in err, err
    assert tls_es.password not in err


# -- bad configuration ---------------------------------------------------------------------------
def run_proxy(**env: str) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("NEARDUP_")}
    environment.update({"PYTHONPATH": str(ROOT), **env})
    return subprocess.run([sys.executable, "-m", "neardup", "proxy", "--port", "0"],
                          capture_output=True, text=True, env=environment, cwd=ROOT, timeout=60)


@pytest.mark.parametrize(("given", "error"), [
    ({"TLS_CERT": "{server_cert}"},
     "proxy.tls_key = '': needed with proxy.tls_cert (both or neither) (from NEARDUP_PROXY__TLS_CERT)"),
    ({"TLS_KEY": "{server_key}"},
     "proxy.tls_cert = '': needed with proxy.tls_key (both or neither) (from NEARDUP_PROXY__TLS_KEY)"),
    ({"TLS_CERT": "/no/such/cert.pem", "TLS_KEY": "{server_key}"},
     "proxy.tls_cert = '/no/such/cert.pem' (from NEARDUP_PROXY__TLS_CERT): no such file: /no/such/cert.pem"),
    ({"TLS_CERT": "{server_cert}", "TLS_KEY": "{server_key}", "TLS_CLIENT_CA": "/no/such/ca.pem"},
     "proxy.tls_client_ca = '/no/such/ca.pem' (from NEARDUP_PROXY__TLS_CLIENT_CA): no such file: /no/such/ca.pem"),
], ids=["cert-only", "key-only", "missing-cert", "missing-client-ca"])
def test_bad_tls_configuration_stops_the_proxy_with_one_line(pki: Pki, given: dict[str, str],
                                                              error: str) -> None:
    env = {f"NEARDUP_PROXY__{key}": value.format(**vars(pki)) for key, value in given.items()}
    done = run_proxy(**env)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.splitlines()
    assert [line.strip() for line in lines if "proxy.tls_" in line] == [error], done.stderr
    assert "Traceback" not in done.stderr and "listening on" not in done.stdout


def tls_error(**proxy: str) -> str:
    with pytest.raises(ConfigError) as caught:
        load_config(environ={f"NEARDUP_PROXY__{key.upper()}": value for key, value in proxy.items()})
    return str(caught.value)


def test_files_that_are_no_usable_certificate_or_key_are_named(pki: Pki, tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate\n", encoding="utf-8")
    mismatch = tls_error(tls_cert=pki.server_cert, tls_key=pki.client_key)
    assert f"proxy.tls_cert = {pki.server_cert!r}: not a PEM certificate matching the PEM key " \
           f"proxy.tls_key = {pki.client_key!r} (KEY_VALUES_MISMATCH)" in mismatch
    assert "proxy.tls_cert = " in tls_error(tls_cert=str(garbage), tls_key=pki.server_key)
    assert f"proxy.tls_client_ca = {str(garbage)!r}: not PEM CA certificates" in tls_error(
        tls_cert=pki.server_cert, tls_key=pki.server_key, tls_client_ca=str(garbage))
    assert "proxy.tls_client_ca = " in tls_error(tls_client_ca=pki.ca)
    assert "no such file" in tls_error(tls_cert=str(tmp_path), tls_key=pki.server_key)   # a folder


def test_an_encrypted_key_is_refused_without_asking_for_a_password(pki: Pki, tmp_path: Path) -> None:
    encrypted = tmp_path / "encrypted.key"
    openssl(tmp_path, "pkey", "-in", pki.server_key, "-aes256", "-passout", "pass:secret",
            "-out", str(encrypted))
    message = tls_error(tls_cert=pki.server_cert, tls_key=str(encrypted))
    assert f"proxy.tls_key = {str(encrypted)!r}: the key is encrypted; give an unencrypted key" in message


#: A file nobody may read, root included (a write-only sysctl): root reads a chmod 0 file.
WRITE_ONLY = Path("/proc/sys/vm/compact_memory")


def test_an_unreadable_file_is_named(pki: Pki, tmp_path: Path) -> None:
    locked = tmp_path / "locked.key"
    if os.geteuid() == 0:
        if not WRITE_ONLY.is_file():
            pytest.skip(f"running as root and no {WRITE_ONLY}")
        locked = WRITE_ONLY
    else:
        locked.write_bytes(Path(pki.server_key).read_bytes())
        locked.chmod(0)
    message = tls_error(tls_cert=pki.server_cert, tls_key=str(locked))
    assert f"proxy.tls_key = {str(locked)!r}" in message and "cannot be read: Permission denied" in message


def test_server_context_needs_tls_1_2_and_client_certificates_only_with_a_client_ca(pki: Pki) -> None:
    assert ProxyConfig().ssl_context() is None
    plain = ProxyConfig(tls_cert=pki.server_cert, tls_key=pki.server_key).ssl_context()
    strict = ProxyConfig(tls_cert=pki.server_cert, tls_key=pki.server_key,
                         tls_client_ca=pki.ca).ssl_context()
    assert plain is not None and strict is not None
    assert plain.minimum_version == strict.minimum_version == ssl.TLSVersion.TLSv1_2
    assert plain.verify_mode == ssl.CERT_NONE and strict.verify_mode == ssl.CERT_REQUIRED
