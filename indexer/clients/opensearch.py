"""The indexer's client for OpenSearch 2 and 3, on opensearch-py (the ``neardup[opensearch]`` extra).

Requests carry their bodies whole (opensearch-py takes ``body=``, not its fields as keywords); a
point in time is OpenSearch's own (``POST /<index>/_search/point_in_time``, closed with
``DELETE /_search/point_in_time``) and is searched as Elasticsearch's is, with ``pit`` in the body.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any

from opensearchpy import JSONSerializer, OpenSearch, OpenSearchWarning
from opensearchpy import exceptions as os_errors

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
from neardup.upstream import ClusterInfo, auth_headers

# OpenSearch 2 pages a point in time on _id (indexer.reader.page_order), and warns on every page
# that field data on _id is deprecated: the choice is deliberate and documented, not the user's.
warnings.filterwarnings("ignore", message="Loading the fielddata on the _id field is deprecated",
                        category=OpenSearchWarning)

#: Search keywords of the interface whose name in the request body differs.
BODY_NAMES = {"source": "_source", "from_": "from"}


class _RawKeepingJson(JSONSerializer):
    """JSON answers decoded as :class:`~neardup.indexer.rawsource.RawBody` (their text kept)."""

    def loads(self, s: str) -> Any:
        try:
            return decoded(s)
        except ValueError:
            return super().loads(s)  # raises the client's own error


def client_options(upstream: UpstreamConfig) -> dict[str, Any]:
    """Keyword arguments for :class:`opensearchpy.OpenSearch` from the configuration: credentials
    and TLS as in the start-up check, the job's request timeout, no retries, a small pool, JSON
    answers that keep their text (:mod:`neardup.indexer.rawsource`)."""
    options: dict[str, Any] = {"timeout": upstream.request_timeout, "max_retries": 0, "retry_on_timeout": False,
                               "pool_maxsize": min(upstream.max_connections, 8), "serializer": _RawKeepingJson()}
    headers = auth_headers(upstream)
    if headers:
        options["headers"] = headers
    if upstream.ca_certs:
        options["ca_certs"] = upstream.ca_certs
    if not upstream.verify_certs:
        options.update(verify_certs=False, ssl_show_warn=False)
    return options


def translated(exc: Exception) -> ClusterError | None:
    """The indexer's error for an exception of opensearch-py (None: not one of its own)."""
    if isinstance(exc, os_errors.SSLError):
        return ClusterTlsError(str(exc.error))
    if isinstance(exc, os_errors.ConnectionTimeout):
        return ClusterTimeout(str(exc.error))
    if isinstance(exc, os_errors.ConnectionError):
        return ClusterConnectionError(str(exc.error))
    if isinstance(exc, os_errors.TransportError):
        if isinstance(exc.status_code, int):
            body = exc.info if isinstance(exc.info, dict) else {"error": {"type": str(exc.error),
                                                                          "reason": str(exc.info)}}
            return ClusterApiError(exc.status_code, body)
        return ClusterError(f"{type(exc).__name__}: {exc.error}")
    if isinstance(exc, os_errors.OpenSearchException):
        return ClusterError(f"{type(exc).__name__}: {exc}")
    return None


def _translating() -> AbstractContextManager[None]:
    return raising_cluster_errors(translated)


def _params(**given: Any) -> dict[str, Any]:
    """The query parameters that were given (opensearch-py sends None as a value)."""
    return {name: value for name, value in given.items() if value is not None}


class _Indices:
    def __init__(self, client: OpenSearch) -> None:
        self._os = client

    def create(self, *, index: str, mappings: Mapping[str, Any] | None = None,
               settings: Mapping[str, Any] | None = None) -> dict[str, Any]:
        with _translating():
            return self._os.indices.create(index=index, body=_params(mappings=mappings, settings=settings))

    def exists(self, *, index: str) -> bool:
        with _translating():
            return bool(self._os.indices.exists(index=index))

    def refresh(self, *, index: str) -> dict[str, Any]:
        with _translating():
            return self._os.indices.refresh(index=index)

    def get_mapping(self, *, index: str, filter_path: str | Sequence[str] | None = None) -> dict[str, Any]:
        with _translating():
            return self._os.indices.get_mapping(index=index, **_params(filter_path=filter_path))

    def put_mapping(self, *, index: str, properties: Mapping[str, Any] | None = None,
                    meta: Mapping[str, Any] | None = None) -> dict[str, Any]:
        with _translating():
            return self._os.indices.put_mapping(index=index, body=_params(properties=properties, _meta=meta))

    def get_field_mapping(self, *, index: str, fields: str, include_defaults: bool = False) -> dict[str, Any]:
        with _translating():
            return self._os.indices.get_field_mapping(fields=fields, index=index, include_defaults=include_defaults)

    def get_settings(self, *, index: str, include_defaults: bool = False,
                     filter_path: str | Sequence[str] | None = None) -> dict[str, Any]:
        with _translating():
            return self._os.indices.get_settings(index=index, include_defaults=include_defaults,
                                                 **_params(filter_path=filter_path))

    def stats(self, *, index: str, level: str | None = None, metric: str | None = None,
              filter_path: str | Sequence[str] | None = None) -> dict[str, Any]:
        with _translating():
            return self._os.indices.stats(index=index, metric=metric,
                                          **_params(level=level, filter_path=filter_path))


class _Cluster:
    def __init__(self, client: OpenSearch, request_timeout: float) -> None:
        self._os = client
        self._request_timeout = request_timeout

    def health(self, *, index: str | None = None, wait_for_active_shards: str | None = None,
               timeout: str | None = None, expand_wildcards: str | None = None) -> dict[str, Any]:
        # opensearch-py takes a ``timeout`` parameter for the request's own timeout unless
        # ``request_timeout`` is given: then it is the server's wait, as meant here
        with _translating():
            return self._os.cluster.health(index=index, request_timeout=self._request_timeout, **_params(
                wait_for_active_shards=wait_for_active_shards, timeout=timeout, expand_wildcards=expand_wildcards))

    def get_settings(self, *, include_defaults: bool = False,
                     filter_path: str | Sequence[str] | None = None) -> dict[str, Any]:
        with _translating():
            return self._os.cluster.get_settings(include_defaults=include_defaults, **_params(filter_path=filter_path))


def ndjson(lines: Sequence[Mapping[str, Any] | bytes | str], dumps: Callable[[Any], str]) -> bytes:
    """A bulk body: each line as given (bytes or text), an object as ``dumps`` writes it."""
    return b"".join((line if isinstance(line, bytes) else (line if isinstance(line, str) else dumps(line)).encode("utf-8"))
                    + b"\n" for line in lines)


class OpenSearchClient:
    """:class:`neardup.indexer.client.Client` on :class:`opensearchpy.OpenSearch`."""

    def __init__(self, upstream: UpstreamConfig, engine: ClusterInfo) -> None:
        self.engine = engine
        self._os = OpenSearch(upstream.url_strings, **client_options(upstream))
        self.indices = _Indices(self._os)
        self.cluster = _Cluster(self._os, upstream.request_timeout)

    def search(self, *, index: str | None = None, preference: str | None = None,
               filter_path: str | Sequence[str] | None = None, **body: Any) -> dict[str, Any]:
        request = {BODY_NAMES.get(name, name): value for name, value in body.items() if value is not None}
        with _translating():
            return self._os.search(index=index, body=request, **_params(preference=preference, filter_path=filter_path))

    def count(self, *, index: str, query: Mapping[str, Any] | None = None) -> dict[str, Any]:
        with _translating():
            return self._os.count(index=index, body=_params(query=query) or None)

    def get(self, *, index: str, id: str, routing: str | None = None,
            source_includes: Sequence[str] | None = None) -> dict[str, Any]:
        with _translating():
            return self._os.get(index=index, id=id, **_params(routing=routing, _source_includes=source_includes))

    def mget(self, *, index: str | None = None, docs: Sequence[Mapping[str, Any]] | None = None,
             ids: Sequence[str] | None = None, source: bool | Sequence[str] | None = None,
             source_includes: Sequence[str] | None = None, realtime: bool | None = None) -> dict[str, Any]:
        body = {"docs": list(docs)} if docs is not None else {"ids": list(ids or ())}
        with _translating():
            return self._os.mget(body=body, index=index, **_params(
                _source=source, _source_includes=source_includes, realtime=realtime))

    def msearch(self, *, searches: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        with _translating():
            return self._os.msearch(body=list(searches))

    def bulk(self, *, operations: Sequence[Mapping[str, Any] | bytes], refresh: bool | None = None,
             filter_path: str | Sequence[str] | None = None) -> dict[str, Any]:
        with _translating():
            # opensearch-py joins text lines: a body holding bytes lines is put together here
            body = (ndjson(operations, self._os.transport.serializer.dumps)
                    if any(isinstance(line, bytes) for line in operations) else list(operations))
            return self._os.bulk(body=body, **_params(refresh=refresh, filter_path=filter_path))

    def open_point_in_time(self, *, index: str, keep_alive: str) -> str:
        with _translating():
            return str(self._os.create_pit(index=index, keep_alive=keep_alive)["pit_id"])

    def close_point_in_time(self, *, id: str) -> None:
        with _translating():
            self._os.delete_pit(body={"pit_id": [id]})

    def close(self) -> None:
        self._os.close()
