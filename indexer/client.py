"""The synchronous Elasticsearch client the indexer uses, built from ``[upstream]``.

The client's own retries are switched off: :class:`~neardup.indexer.retry.Retrier` decides what is
retried and how long to wait, so an outage has one policy and one message.
"""

from __future__ import annotations

from typing import Any

from elasticsearch import Elasticsearch

from neardup.config import UpstreamConfig
from neardup.upstream import base_client_options, without_credentials


def client_options(upstream: UpstreamConfig) -> dict[str, Any]:
    """Keyword arguments for :class:`elasticsearch.Elasticsearch` from the configuration.

    Credentials and TLS as in the start-up check (:mod:`neardup.upstream`); the job's own
    request timeout and a small connection pool (a worker has one request in flight).
    """
    options = base_client_options(upstream)
    options.update(request_timeout=upstream.request_timeout, max_retries=0, retry_on_timeout=False,
                   connections_per_node=min(upstream.max_connections, 8))
    return options


def make_client(upstream: UpstreamConfig) -> Elasticsearch:
    return Elasticsearch(upstream.url_strings, **client_options(upstream))


def display_url(upstream: UpstreamConfig) -> str:
    """The cluster as named in messages (credentials are never part of it)."""
    urls = [without_credentials(u) for u in upstream.url_strings]
    return urls[0] if len(urls) == 1 else f"{urls[0]} (and {len(urls) - 1} more)"
