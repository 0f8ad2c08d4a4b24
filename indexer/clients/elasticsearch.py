"""The indexer's client for Elasticsearch 8 and 9, on elasticsearch-py.

elasticsearch-py talks to servers of its own major version and newer only (9.x asks for
``compatible-with=9``, which an 8.x server refuses): :func:`version_mismatch` says so before
any request is sent.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any

import elastic_transport
import elasticsearch
from elasticsearch import ApiError, Elasticsearch, UnsupportedProductError

from neardup.config import UpstreamConfig
from neardup.indexer.errors import (
    ClusterApiError,
    ClusterConnectionError,
    ClusterError,
    ClusterTimeout,
    ClusterTlsError,
    raising_cluster_errors,
)
from neardup.indexer.rawsource import decoded
from neardup.upstream import ClusterInfo, base_client_options

#: The major version of the installed elasticsearch-py.
CLIENT_MAJOR = int(elasticsearch.__versionstr__.split(".", 1)[0])


def version_mismatch(cluster: ClusterInfo) -> str | None:
    """Why the installed elasticsearch-py cannot talk to ``cluster`` (None: it can)."""
    if cluster.major is None or cluster.major >= CLIENT_MAJOR:
        return None
    wanted = "elasticsearch>=8.12,<9" if cluster.major == 8 else f"elasticsearch>={cluster.major},<{cluster.major + 1}"
    return (f"the cluster at {cluster.url} is Elasticsearch {cluster.version}, and the installed "
            f"elasticsearch-py {elasticsearch.__versionstr__} talks to Elasticsearch {CLIENT_MAJOR} "
            f"and newer only; install the client of the server's major version: pip install '{wanted}'")


class _RawKeepingJson(elasticsearch.serializer.JsonSerializer):
    """JSON answers decoded as :class:`~neardup.indexer.rawsource.RawBody` (their bytes kept)."""

    def loads(self, data: bytes) -> Any:
        try:
            return decoded(data) if data else None
        except ValueError:
            return super().loads(data)  # raises the client's own error


class _RawKeepingCompatibleJson(_RawKeepingJson):
    mimetype = elasticsearch.serializer.CompatibilityModeJsonSerializer.mimetype


def client_options(upstream: UpstreamConfig) -> dict[str, Any]:
    """Keyword arguments for :class:`elasticsearch.Elasticsearch` from the configuration.

    Credentials and TLS as in the start-up check (:mod:`neardup.upstream`); the job's own
    request timeout and a small connection pool (a worker has one request in flight); JSON
    answers that keep their bytes (:mod:`neardup.indexer.rawsource`).
    """
    options = base_client_options(upstream)
    options.update(request_timeout=upstream.request_timeout, max_retries=0, retry_on_timeout=False,
                   connections_per_node=min(upstream.max_connections, 8),
                   serializers={_RawKeepingJson.mimetype: _RawKeepingJson(),
                                _RawKeepingCompatibleJson.mimetype: _RawKeepingCompatibleJson()})
    return options


def translated(exc: Exception) -> ClusterError | None:
    """The indexer's error for an exception of elasticsearch-py (None: not one of its own)."""
    if isinstance(exc, UnsupportedProductError):
        return ClusterError(f"it does not answer as Elasticsearch does ({exc.message}); if it is OpenSearch, "
                            "let it answer GET / so that the engine is known")
    if isinstance(exc, ApiError):
        return ClusterApiError(exc.meta.status, exc.body)
    if isinstance(exc, elastic_transport.TlsError):
        return ClusterTlsError(exc.message)
    if isinstance(exc, elastic_transport.ConnectionTimeout):
        return ClusterTimeout(exc.message)
    if isinstance(exc, elastic_transport.ConnectionError):
        return ClusterConnectionError(exc.message)
    if isinstance(exc, elastic_transport.TransportError):
        return ClusterError(f"{type(exc).__name__}: {exc.message}")
    return None


def _translating() -> AbstractContextManager[None]:
    return raising_cluster_errors(translated)


class _Indices:
    def __init__(self, es: Elasticsearch) -> None:
        self._es = es

    def create(self, *, index: str, mappings: Mapping[str, Any] | None = None,
               settings: Mapping[str, Any] | None = None) -> dict[str, Any]:
        with _translating():
            return self._es.indices.create(index=index, mappings=mappings, settings=settings).body

    def exists(self, *, index: str) -> bool:
        with _translating():
            return bool(self._es.indices.exists(index=index))

    def refresh(self, *, index: str) -> dict[str, Any]:
        with _translating():
            return self._es.indices.refresh(index=index).body

    def get_mapping(self, *, index: str, filter_path: str | Sequence[str] | None = None) -> dict[str, Any]:
        with _translating():
            return self._es.indices.get_mapping(index=index, filter_path=filter_path).body

    def put_mapping(self, *, index: str, properties: Mapping[str, Any] | None = None,
                    meta: Mapping[str, Any] | None = None) -> dict[str, Any]:
        with _translating():
            return self._es.indices.put_mapping(index=index, properties=properties, meta=meta).body

    def get_field_mapping(self, *, index: str, fields: str, include_defaults: bool = False) -> dict[str, Any]:
        with _translating():
            return self._es.indices.get_field_mapping(index=index, fields=fields,
                                                      include_defaults=include_defaults).body

    def get_settings(self, *, index: str, include_defaults: bool = False,
                     filter_path: str | Sequence[str] | None = None) -> dict[str, Any]:
        with _translating():
            return self._es.indices.get_settings(index=index, include_defaults=include_defaults,
                                                 filter_path=filter_path).body

    def stats(self, *, index: str, level: str | None = None, metric: str | None = None,
              filter_path: str | Sequence[str] | None = None) -> dict[str, Any]:
        with _translating():
            return self._es.indices.stats(index=index, level=level, metric=metric,
                                          filter_path=filter_path).body


class _Cluster:
    def __init__(self, es: Elasticsearch) -> None:
        self._es = es

    def health(self, *, index: str | None = None, wait_for_active_shards: str | None = None,
               timeout: str | None = None, expand_wildcards: str | None = None) -> dict[str, Any]:
        with _translating():
            return self._es.cluster.health(index=index, wait_for_active_shards=wait_for_active_shards,
                                           timeout=timeout, expand_wildcards=expand_wildcards).body

    def get_settings(self, *, include_defaults: bool = False,
                     filter_path: str | Sequence[str] | None = None) -> dict[str, Any]:
        with _translating():
            return self._es.cluster.get_settings(include_defaults=include_defaults, filter_path=filter_path).body


class ElasticsearchClient:
    """:class:`neardup.indexer.client.Client` on :class:`elasticsearch.Elasticsearch`."""

    def __init__(self, upstream: UpstreamConfig, engine: ClusterInfo) -> None:
        self.engine = engine
        self._es = Elasticsearch(upstream.url_strings, **client_options(upstream))
        self.indices = _Indices(self._es)
        self.cluster = _Cluster(self._es)

    def search(self, *, index: str | None = None, preference: str | None = None,
               filter_path: str | Sequence[str] | None = None, **body: Any) -> dict[str, Any]:
        with _translating():
            return self._es.search(index=index, preference=preference, filter_path=filter_path, **body).body

    def count(self, *, index: str, query: Mapping[str, Any] | None = None) -> dict[str, Any]:
        with _translating():
            return self._es.count(index=index, query=query).body

    def get(self, *, index: str, id: str, routing: str | None = None,
            source_includes: Sequence[str] | None = None) -> dict[str, Any]:
        with _translating():
            return self._es.get(index=index, id=id, routing=routing, source_includes=source_includes).body

    def mget(self, *, index: str | None = None, docs: Sequence[Mapping[str, Any]] | None = None,
             ids: Sequence[str] | None = None, source: bool | Sequence[str] | None = None,
             source_includes: Sequence[str] | None = None, realtime: bool | None = None) -> dict[str, Any]:
        with _translating():
            return self._es.mget(index=index, docs=docs, ids=ids, source=source,
                                 source_includes=source_includes, realtime=realtime).body

    def msearch(self, *, searches: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        with _translating():
            return self._es.msearch(searches=searches).body

    def bulk(self, *, operations: Sequence[Mapping[str, Any] | bytes], refresh: bool | None = None,
             filter_path: str | Sequence[str] | None = None) -> dict[str, Any]:
        with _translating():
            # the stubs want mappings; the ndjson serializer sends a bytes line as it is
            return self._es.bulk(operations=operations, refresh=refresh,  # type: ignore[arg-type]
                                 filter_path=filter_path).body

    def open_point_in_time(self, *, index: str, keep_alive: str) -> str:
        with _translating():
            return str(self._es.open_point_in_time(index=index, keep_alive=keep_alive).body["id"])

    def close_point_in_time(self, *, id: str) -> None:
        with _translating():
            self._es.close_point_in_time(id=id)

    def close(self) -> None:
        self._es.close()
