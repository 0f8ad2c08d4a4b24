"""The synchronous Elasticsearch client the indexer uses, built from ``[upstream]``.

The client's own retries are switched off: :class:`~indexer.retry.Retrier` decides what is
retried and how long to wait, so an outage has one policy and one message.
"""

from __future__ import annotations

from typing import Any

from elasticsearch import Elasticsearch

from neardup.config import UpstreamConfig
from neardup.upstream import without_credentials


def client_options(upstream: UpstreamConfig) -> dict[str, Any]:
    """Keyword arguments for :class:`elasticsearch.Elasticsearch` from the configuration."""
    options: dict[str, Any] = {
        "request_timeout": upstream.request_timeout,
        "max_retries": 0,
        "retry_on_timeout": False,
        "connections_per_node": min(upstream.max_connections, 8),
    }
    if upstream.api_key:
        options["api_key"] = upstream.api_key
    elif upstream.username:
        options["basic_auth"] = (upstream.username, upstream.password)
    if upstream.ca_certs:
        options["ca_certs"] = upstream.ca_certs
    if not upstream.verify_certs:
        options["verify_certs"] = False
        options["ssl_show_warn"] = False
    return options


def make_client(upstream: UpstreamConfig) -> Elasticsearch:
    return Elasticsearch(upstream.url_strings, **client_options(upstream))


def display_url(upstream: UpstreamConfig) -> str:
    """The cluster as named in messages (credentials are never part of it)."""
    urls = [without_credentials(u) for u in upstream.url_strings]
    return urls[0] if len(urls) == 1 else f"{urls[0]} (and {len(urls) - 1} more)"
