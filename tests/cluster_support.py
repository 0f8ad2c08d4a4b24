"""Calls on the engine's own client (the ``es`` fixture) that elasticsearch-py and opensearch-py
spell differently.

Both take a request body as ``body=``; they differ in per-request options (elasticsearch-py:
``client.options(ignore_status=..., request_timeout=...)``; opensearch-py: ``ignore=`` and
``request_timeout=`` keywords) and each has its own ``helpers`` module.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Iterator
from types import ModuleType
from typing import Any


def is_opensearch_client(es: Any) -> bool:
    """Whether ``es`` is an :class:`opensearchpy.OpenSearch` (else elasticsearch-py's client)."""
    return type(es).__module__.partition(".")[0] == "opensearchpy"


def helpers_of(es: Any) -> ModuleType:
    """The ``helpers`` module of ``es``'s own library (scan, bulk, streaming_bulk)."""
    return importlib.import_module("opensearchpy.helpers" if is_opensearch_client(es) else "elasticsearch.helpers")


def scan(es: Any, index: str, query: dict[str, Any] | None = None, **kwargs: Any) -> Iterator[dict[str, Any]]:
    """Every hit of ``query`` (all documents by default) in ``index``, scrolled."""
    return helpers_of(es).scan(es, index=index, query=query or {"query": {"match_all": {}}}, **kwargs)


def bulk(es: Any, actions: Iterable[dict[str, Any]], request_timeout: float = 300, **kwargs: Any) -> Any:
    """``helpers.bulk`` with each request allowed ``request_timeout`` seconds."""
    if is_opensearch_client(es):
        return helpers_of(es).bulk(es, actions, request_timeout=request_timeout, **kwargs)
    return helpers_of(es).bulk(es.options(request_timeout=request_timeout), actions, **kwargs)


def delete_index(es: Any, index: str) -> None:
    """Delete ``index`` (a comma-separated list is fine); a missing one is no error."""
    if is_opensearch_client(es):
        es.indices.delete(index=index, ignore=404)
    else:
        es.options(ignore_status=404).indices.delete(index=index)


def mappings(es: Any, index: str) -> dict[str, Any]:
    """The ``mappings`` object of the concrete index ``index``, as the node returns it."""
    return dict(es.indices.get_mapping(index=index)[index]["mappings"])


def node_client(url: str, **options: Any) -> Any:
    """The official client of whatever engine answers at ``url`` (as the ``es`` fixture's)."""
    from elasticsearch import Elasticsearch

    from neardup.upstream import cluster_info
    from tests.plugins.elasticsearch import engine_client

    probe = Elasticsearch(url, request_timeout=30)
    try:
        info = cluster_info(probe, url)
    finally:
        probe.close()
    return engine_client(url, info, **options)


def indexer_client(es_url: str) -> Any:
    """The indexer's own client for ``es_url`` (:func:`neardup.indexer.client.make_client`:
    its engine, retries and timeouts); the caller closes it."""
    from neardup.config import load_config
    from neardup.indexer.client import make_client

    return make_client(load_config(environ={"NEARDUP_UPSTREAM__URLS": es_url}).upstream)
