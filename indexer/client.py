"""The calls the indexer makes to the cluster, whichever engine it is, built from ``[upstream]``.

:class:`Client` is the whole interface: the requests the jobs send, with answers as plain dicts
and failures as the indexer's own :class:`~neardup.indexer.errors.ClusterError`. Each engine has
its implementation in :mod:`neardup.indexer.clients` on top of its official client
(elasticsearch-py for Elasticsearch, opensearch-py for OpenSearch); :func:`make_client` picks it
from what the node said it is (:func:`neardup.upstream.check_upstream`).

The official clients' own retries are switched off: :class:`~neardup.indexer.retry.Retrier`
decides what is retried and how long to wait, so an outage has one policy and one message.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from neardup.config import UpstreamConfig
from neardup.indexer.clients import elasticsearch as es_client
from neardup.indexer.errors import ClusterApiError, JobError
from neardup.upstream import ClusterInfo, check_upstream, without_credentials

#: ``filter_path``: one pattern or several.
FilterPath = str | Sequence[str] | None


def make_client(upstream: UpstreamConfig, cluster: ClusterInfo | None = None) -> Client:
    """The client for the cluster of ``upstream`` (``cluster``: what it is, asked when not given).

    :class:`JobError` at once when the engine's client is not installed, or is too new for the
    server, with the command that fixes it."""
    cluster = cluster or check_upstream(upstream)
    if cluster.is_opensearch:
        try:
            from neardup.indexer.clients import opensearch
        except ImportError as exc:
            raise JobError(f"the cluster at {cluster.url} is {cluster.engine} {cluster.version or ''}, "
                           f"whose client is not installed ({exc}); install it with "
                           "pip install 'neardup[opensearch]'") from None
        return opensearch.OpenSearchClient(upstream, cluster)
    problem = es_client.version_mismatch(cluster)
    if problem:
        raise JobError(problem)
    return es_client.ElasticsearchClient(upstream, cluster)


#: The clauses a bool query may hold when the cluster does not say (OpenSearch's default).
DEFAULT_MAX_CLAUSE_COUNT = 1024


def cluster_setting(client: Client, name: str) -> str | None:
    """The value of the dynamic cluster setting ``name`` (``indices.query.bool.max_clause_count``):
    as set (transient, then persistent) or by default; None when it cannot be read."""
    try:
        body = client.cluster.get_settings(include_defaults=True, filter_path=f"**.{name.rsplit('.', 1)[-1]}")
    except ClusterApiError:
        return None
    for section in ("transient", "persistent", "defaults"):
        value: Any = body.get(section, {})
        for part in name.split("."):
            value = value.get(part, {}) if isinstance(value, dict) else {}
        if value != {}:
            return str(value)
    return None


def max_clause_count(client: Client) -> int:
    """How many clauses one bool (or terms-expanded) query may hold on the cluster:
    ``indices.query.bool.max_clause_count`` (1024 on OpenSearch, 4096 reported by Elasticsearch
    8 and 9); 1024 when it cannot be read."""
    value = cluster_setting(client, "indices.query.bool.max_clause_count")
    return int(value) if value is not None else DEFAULT_MAX_CLAUSE_COUNT


def display_url(upstream: UpstreamConfig) -> str:
    """The cluster as named in messages (credentials are never part of it)."""
    urls = [without_credentials(u) for u in upstream.url_strings]
    return urls[0] if len(urls) == 1 else f"{urls[0]} (and {len(urls) - 1} more)"


class Indices(Protocol):
    """The index-level calls (``client.indices``)."""

    def create(self, *, index: str, mappings: Mapping[str, Any] | None = None,
               settings: Mapping[str, Any] | None = None) -> dict[str, Any]: ...

    def exists(self, *, index: str) -> bool: ...

    def refresh(self, *, index: str) -> dict[str, Any]: ...

    def get_mapping(self, *, index: str, filter_path: FilterPath = None) -> dict[str, Any]: ...

    def put_mapping(self, *, index: str, properties: Mapping[str, Any] | None = None,
                    meta: Mapping[str, Any] | None = None) -> dict[str, Any]: ...

    def get_field_mapping(self, *, index: str, fields: str, include_defaults: bool = False) -> dict[str, Any]: ...

    def get_settings(self, *, index: str, include_defaults: bool = False,
                     filter_path: FilterPath = None) -> dict[str, Any]: ...

    def stats(self, *, index: str, level: str | None = None, metric: str | None = None,
              filter_path: FilterPath = None) -> dict[str, Any]: ...


class ClusterCalls(Protocol):
    """The cluster-level calls (``client.cluster``)."""

    def health(self, *, index: str | None = None, wait_for_active_shards: str | None = None,
               timeout: str | None = None, expand_wildcards: str | None = None) -> dict[str, Any]: ...

    def get_settings(self, *, include_defaults: bool = False, filter_path: FilterPath = None) -> dict[str, Any]: ...


class Client(Protocol):
    """A connection to the cluster: answers are plain dicts, failures :class:`~neardup.indexer.errors.ClusterError`."""

    #: What the cluster is (engine and version), as the start-up check found it.
    engine: ClusterInfo

    @property
    def indices(self) -> Indices: ...

    @property
    def cluster(self) -> ClusterCalls: ...

    def search(self, *, index: str | None = None, preference: str | None = None,
               filter_path: FilterPath = None, **body: Any) -> dict[str, Any]:
        """``body``: the search request's fields (``query``, ``size``, ``pit``, ``sort`` ...)."""
        ...

    def count(self, *, index: str, query: Mapping[str, Any] | None = None) -> dict[str, Any]: ...

    def get(self, *, index: str, id: str, routing: str | None = None,
            source_includes: Sequence[str] | None = None) -> dict[str, Any]: ...

    def mget(self, *, index: str | None = None, docs: Sequence[Mapping[str, Any]] | None = None,
             ids: Sequence[str] | None = None, source: bool | Sequence[str] | None = None,
             source_includes: Sequence[str] | None = None, realtime: bool | None = None) -> dict[str, Any]: ...

    def msearch(self, *, searches: Sequence[Mapping[str, Any]]) -> dict[str, Any]: ...

    def bulk(self, *, operations: Sequence[Mapping[str, Any] | bytes], refresh: bool | None = None,
             filter_path: FilterPath = None) -> dict[str, Any]: ...

    def open_point_in_time(self, *, index: str, keep_alive: str) -> str:
        """A point in time on ``index``: its id, for searches with ``pit={"id": ..., "keep_alive": ...}``."""
        ...

    def close_point_in_time(self, *, id: str) -> None: ...

    def close(self) -> None: ...
