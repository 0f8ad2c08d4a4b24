"""Start-up check of the upstream cluster: reachable, the credentials accepted, and which engine it is.

The jobs call :func:`check_upstream` and the proxy :func:`check_reachable` before doing anything else, so a
wrong ``upstream.urls``, a closed port, a TLS problem or rejected credentials stop start-up
with one clear message instead of a traceback later. Each URL is asked for
``GET /_cluster/health`` with the configured credentials and TLS settings:

* it answers (any status, or 403: authenticated, but without the ``monitor`` privilege): ok;
* 401: the credentials were rejected;
* no connection, TLS failure, timeout or a 5xx: the node is unreachable.

At least one URL must be ok; the others are logged as warnings (a cluster keeps serving
while one node is down). The node that answered is then asked what it is (:class:`ClusterInfo`):
Elasticsearch or OpenSearch, and its version, so a job talks to it through that engine's own
client and its summary can name the cluster it worked on.

These requests go through the transport of the official client (``elastic_transport``) with plain
``application/json``: it is the one layer that talks to either engine before the engine is known
(the Elasticsearch client itself refuses a server that is not Elasticsearch).
"""

from __future__ import annotations

import base64
import logging
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from elastic_transport import ConnectionTimeout, TransportError
from elasticsearch import Elasticsearch

from neardup.config import Config, UpstreamConfig

log = logging.getLogger(__name__)

_ERRNO = re.compile(r"\[Errno -?\d+\][^)'\"]*")
_SSL = re.compile(r"\[SSL[^\]]*\][^)'\"]*")


class UpstreamError(Exception):
    """No configured upstream URL answered, or the credentials were rejected."""


def without_credentials(url: str) -> str:
    """The URL as shown in messages: any ``user:password@`` removed."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]))


def base_client_options(upstream: UpstreamConfig) -> dict[str, Any]:
    """Credentials and TLS of :class:`elasticsearch.Elasticsearch` from ``[upstream]``, with a
    short timeout and no retries (the start-up check; the indexer overrides both)."""
    options: dict[str, Any] = {
        "request_timeout": max(upstream.connect_timeout, 1.0),
        "max_retries": 0,
        "retry_on_timeout": False,
    }
    if upstream.api_key:
        options["api_key"] = upstream.api_key
    elif upstream.username:
        options["basic_auth"] = (upstream.username, upstream.password)
    if upstream.ca_certs:
        options["ca_certs"] = upstream.ca_certs
    if not upstream.verify_certs:
        options.update(verify_certs=False, ssl_show_warn=False)
    return options


def _cause(exc: Exception, timeout: float) -> str:
    """The root cause of a transport failure in a few words (``[Errno 111] Connection refused``)."""
    if isinstance(exc, ConnectionTimeout):
        return f"no answer within {timeout:g}s (upstream.connect_timeout)"
    text = " ".join(str(arg) for arg in exc.args) or str(exc)
    text = re.sub(r"\s*\(_ssl\.c:\d+\)", "", text)
    for pattern in (_SSL, _ERRNO):
        found = pattern.search(text)
        if found:
            hint = " (check upstream.ca_certs / upstream.verify_certs)" if pattern is _SSL else ""
            return found.group(0).strip() + hint
    return text if len(text) <= 300 else text[:300] + "..."


#: Plain JSON both ways: every engine and version takes it (``compatible-with`` is Elasticsearch's).
_PLAIN_JSON = {"accept": "application/json"}


def auth_headers(upstream: UpstreamConfig) -> dict[str, str]:
    """The ``Authorization`` header of the configured credentials (credentials in a URL are the
    transport's own: it sends them for that node)."""
    if upstream.api_key:
        return {"authorization": f"ApiKey {upstream.api_key}"}
    if upstream.username:
        token = base64.b64encode(f"{upstream.username}:{upstream.password}".encode()).decode()
        return {"authorization": f"Basic {token}"}
    return {}


def _get(client: Elasticsearch, path: str, upstream: UpstreamConfig | None) -> tuple[int, Any]:
    """``GET path`` through the client's transport: status and parsed body (no product check)."""
    auth = auth_headers(upstream) if upstream else {}
    response = client.transport.perform_request("GET", path, headers={**_PLAIN_JSON, **auth})
    return response.meta.status, response.body


def probe(client: Elasticsearch, upstream: UpstreamConfig) -> str | None:
    """``None`` if the node of ``client`` answers and accepts the credentials, else the reason."""
    try:
        status, body = _get(client, "/_cluster/health", upstream)
    except TransportError as exc:
        return _cause(exc, base_client_options(upstream)["request_timeout"])
    if status < 300 or status == 403:   # 403: authenticated, without the monitor privilege
        return None
    if status == 401:
        who = "upstream.api_key" if upstream.api_key else (
            f"upstream.username = {upstream.username!r}" if upstream.username else "no credentials")
        return f"credentials rejected (HTTP 401) with {who}"
    error = body.get("error") if isinstance(body, dict) else None
    detail = (error.get("reason") if isinstance(error, dict) else error) or "is it Elasticsearch or OpenSearch?"
    return f"answered HTTP {status} to GET /_cluster/health ({detail})"


def engine_of(version: dict[str, Any]) -> str:
    """The engine named by the ``version`` object of a root or node info: OpenSearch says so in
    ``distribution``, Elastic's serverless offering in ``build_flavor``; else Elasticsearch."""
    if version.get("distribution") == "opensearch":
        return "OpenSearch"
    return "Elasticsearch Serverless" if version.get("build_flavor") == "serverless" else "Elasticsearch"


def cluster_info(client: Elasticsearch, url: str, upstream: UpstreamConfig | None = None) -> ClusterInfo:
    """What the node of ``client`` (at ``url``) is: ``GET /``, else ``GET /_nodes/_local`` (a
    node without the root endpoint, such as Elasticsearch's integ-test distribution, answers
    ``GET /`` with 405), else the version is unknown (e.g. no ``monitor`` privilege)."""
    shown = without_credentials(url)
    for path in ("/?filter_path=version", "/_nodes/_local?filter_path=nodes.*.version,nodes.*.build_flavor"):
        try:
            status, body = _get(client, path, upstream)
        except TransportError as exc:
            log.debug("GET %s of %s: %s", path, shown, exc)
            continue
        if status >= 300 or not isinstance(body, dict):
            log.debug("GET %s of %s: HTTP %s", path, shown, status)
            continue
        versions = [body.get("version") or {}] if "nodes" not in body else list(body["nodes"].values())
        for version in versions:
            number = version.get("number") if "number" in version else version.get("version")
            if number:
                return ClusterInfo(shown, engine_of(version), str(number))
    return ClusterInfo(shown, "Elasticsearch", None)


def upstream_of(config: Config | UpstreamConfig) -> UpstreamConfig:
    return config.upstream if isinstance(config, Config) else config


def _answering_client(config: Config | UpstreamConfig) -> tuple[Elasticsearch, str]:
    """An open client of the first configured node that answers with the configured credentials,
    and its URL; :class:`UpstreamError` naming ``upstream.urls``, each URL and its cause, if none
    does. The caller closes the client."""
    upstream = upstream_of(config)
    failures: list[tuple[str, str]] = []
    for url in upstream.url_strings:
        client = Elasticsearch(url, **base_client_options(upstream))
        try:
            reason = probe(client, upstream)
        except BaseException:
            client.close()
            raise
        if reason is None:
            for failed_url, failed_reason in failures:
                log.warning("upstream.urls: %s is not usable: %s", failed_url, failed_reason)
            return client, url
        client.close()
        failures.append((without_credentials(url), reason))
    lines = "\n  ".join(f"{url}: {reason}" for url, reason in failures)
    raise UpstreamError(f"upstream.urls: cannot use Elasticsearch at\n  {lines}")


def check_reachable(config: Config | UpstreamConfig) -> None:
    """Raise :class:`UpstreamError` unless at least one configured node answers with the
    configured credentials (the proxy's start-up check: it does not need to know more)."""
    client, _ = _answering_client(config)
    client.close()


def check_upstream(config: Config | UpstreamConfig) -> ClusterInfo:
    """As :func:`check_reachable`, and then what the first node that answered is: the cluster a
    job's summary names."""
    client, url = _answering_client(config)
    try:
        return cluster_info(client, url, upstream_of(config))
    finally:
        client.close()


@dataclass(frozen=True)
class ClusterInfo:
    """The cluster a job worked on, as its summary names it: the URL of the node that answered
    (never with credentials), the engine, and its version (None: the node would not say)."""

    url: str
    engine: str
    version: str | None

    @property
    def is_opensearch(self) -> bool:
        return self.engine == "OpenSearch"

    @property
    def major(self) -> int | None:
        """The major version (``9`` of ``9.5.4``); None when the node would not say."""
        head = (self.version or "").split(".", 1)[0]
        return int(head) if head.isdigit() else None

    def describe(self) -> str:
        """``Elasticsearch 8.19.21 at http://127.0.0.1:9200``."""
        return f"{self.engine} {self.version or '(version unknown)'} at {self.url}"

    def to_dict(self) -> dict[str, str | None]:
        return {"url": self.url, "engine": self.engine, "version": self.version}
