"""What tests do on the cluster through the engine's own client (the ``es`` fixture), on either engine.

elasticsearch-py and opensearch-py both take a request's body whole (``body=``), so most calls are
written once; where they differ (ignoring a status, the bulk helpers), this module asks the client
which it is.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any


def is_opensearch(client: Any) -> bool:
    """Whether ``client`` is opensearch-py's (else elasticsearch-py's)."""
    return type(client).__module__.startswith("opensearchpy")


def create_index(client: Any, name: str, *, settings: Mapping[str, Any] | None = None,
                 mappings: Mapping[str, Any] | None = None) -> None:
    body = {key: value for key, value in (("settings", settings), ("mappings", mappings)) if value is not None}
    client.indices.create(index=name, body=body)


def delete_index(client: Any, name: str, **params: Any) -> None:
    """Delete ``name`` if it exists (``params``: of the delete-index API, e.g. ``expand_wildcards``)."""
    if is_opensearch(client):
        client.indices.delete(index=name, ignore=[404], **params)
    else:
        client.options(ignore_status=404).indices.delete(index=name, **params)


def bulk_load(client: Any, index: str, docs: Sequence[Mapping[str, Any]], id_field: str = "id",
              chunk_size: int = 2000) -> None:
    """Index ``docs`` as they are (``_id`` from ``id_field``), failing on any rejected item; then refresh."""
    actions = ({"_index": index, "_id": doc[id_field], "_source": doc} for doc in docs)
    for ok, item in streaming_bulk(client, actions, chunk_size=chunk_size):
        if not ok:
            raise AssertionError(f"loading {index} failed: {item}")
    client.indices.refresh(index=index)


def streaming_bulk(client: Any, actions: Iterable[Mapping[str, Any]], chunk_size: int = 500) -> Iterable[Any]:
    """The engine's ``helpers.streaming_bulk`` (no raising on a failed item, 5 retries of 429s)."""
    if is_opensearch(client):
        from opensearchpy import helpers as os_helpers
        return os_helpers.streaming_bulk(client, actions, chunk_size=chunk_size, raise_on_error=False,
                                         max_retries=5, request_timeout=120)
    from elasticsearch import helpers as es_helpers
    return es_helpers.streaming_bulk(client.options(request_timeout=120), actions, chunk_size=chunk_size,
                                     raise_on_error=False, max_retries=5)


def scan(client: Any, index: str, query: Mapping[str, Any], size: int = 1000) -> Iterable[dict[str, Any]]:
    """Every hit of ``query`` (a search body) in ``index``, through the engine's ``helpers.scan``."""
    if is_opensearch(client):
        from opensearchpy import helpers as os_helpers
        return os_helpers.scan(client, index=index, size=size, query=query)
    from elasticsearch import helpers as es_helpers
    return es_helpers.scan(client, index=index, size=size, query=query)


def search(client: Any, index: str, **body: Any) -> dict[str, Any]:
    """``POST /index/_search`` with ``body`` (fields as in the request: ``_source``, ``query``, ...)."""
    return dict(client.search(index=index, body=body))


def msearch(client: Any, searches: Sequence[Mapping[str, Any]], headers: Mapping[str, str] | None = None
            ) -> dict[str, Any]:
    """``POST /_msearch`` of ``searches`` (header and body lines), with extra HTTP ``headers``."""
    if is_opensearch(client):
        return dict(client.msearch(body=list(searches), headers=dict(headers or {})))
    return dict(client.options(headers=dict(headers or {})).msearch(searches=list(searches)))


def count(client: Any, index: str, query: Mapping[str, Any] | None = None) -> int:
    return int(client.count(index=index, body={"query": query} if query is not None else None)["count"])


def index_document(client: Any, index: str, doc_id: str, document: Mapping[str, Any], **params: Any) -> None:
    client.index(index=index, id=doc_id, body=document, **params)


def update_document(client: Any, index: str, doc_id: str, doc: Mapping[str, Any]) -> None:
    client.update(index=index, id=doc_id, body={"doc": doc})


def without_fingerprint(client: Any, index: str, field: str = "neardup") -> int:
    """Documents of ``index`` searchable now without the ``field`` object (no refresh first)."""
    return count(client, index, {"bool": {"must_not": {"exists": {"field": field}}}})
