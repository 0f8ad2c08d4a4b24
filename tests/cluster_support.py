"""Helpers of the ``neardup cluster`` and reliability tests on either engine, beside
:mod:`tests.engine_support`: scrolling and bulk loading with the options these tests pass, a
mapping as the node returns it, the official client of a node started by a test, and the
indexer's own client for the code under test.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from types import ModuleType
from typing import Any

from tests.engine_support import is_opensearch


def helpers_of(es: Any) -> ModuleType:
    """The ``helpers`` module of ``es``'s own library (scan, bulk, streaming_bulk)."""
    if is_opensearch(es):
        from opensearchpy import helpers as os_helpers
        return os_helpers
    from elasticsearch import helpers as es_helpers
    return es_helpers


def scan_hits(es: Any, index: str, query: dict[str, Any] | None = None, **kwargs: Any) -> Iterator[dict[str, Any]]:
    """Every hit of ``query`` (all documents by default) in ``index``, scrolled; ``kwargs`` go to
    the search (``_source``, ``version``, ``size`` ...)."""
    return helpers_of(es).scan(es, index=index, query=query or {"query": {"match_all": {}}}, **kwargs)


def bulk(es: Any, actions: Iterable[dict[str, Any]], request_timeout: float = 300, **kwargs: Any) -> Any:
    """``helpers.bulk`` with each request allowed ``request_timeout`` seconds."""
    if is_opensearch(es):
        return helpers_of(es).bulk(es, actions, request_timeout=request_timeout, **kwargs)
    return helpers_of(es).bulk(es.options(request_timeout=request_timeout), actions, **kwargs)


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
