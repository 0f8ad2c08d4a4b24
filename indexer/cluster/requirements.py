"""What ``neardup cluster`` needs of the engine, checked before a run writes anything.

Every mode reads the index with a point in time, its pages in a total order: ``_shard_doc`` on
Elasticsearch and OpenSearch 3; OpenSearch 2 has none, so its pages are sorted on ``_id``
(:mod:`neardup.indexer.clients.opensearch`), which needs fielddata on ``_id``
(``indices.id_field_data.enabled``, on by default). Without it a run would fail at its first
read, after recording ``building``: it stops before, naming what is missing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from neardup.indexer.client import Client
from neardup.indexer.errors import JobError
from neardup.indexer.retry import Retrier
from neardup.upstream import ClusterInfo

ID_FIELDDATA = "indices.id_field_data.enabled"


def pages_by_id(engine: ClusterInfo) -> bool:
    """Whether the engine's point-in-time pages are sorted on ``_id`` (no ``_shard_doc``)."""
    return engine.is_opensearch and (engine.major or 0) < 3


def setting(settings: Mapping[str, Any], name: str) -> Any:
    """The value of the dotted ``name`` in a cluster-settings answer: transient, persistent, default."""
    for section in ("transient", "persistent", "defaults"):
        node: Any = settings.get(section) or {}
        for part in name.split("."):
            node = node.get(part) if isinstance(node, Mapping) else None
        if node is not None:
            return node
    return None


def unmet_requirement(engine: ClusterInfo, settings: Mapping[str, Any]) -> str | None:
    """Why ``engine`` (with cluster ``settings``) cannot run ``neardup cluster``; None if it can."""
    if pages_by_id(engine) and str(setting(settings, ID_FIELDDATA)).lower() == "false":
        return (f"{engine.engine} {engine.version} has no _shard_doc to page a point in time by, and sorting "
                f"on _id is off ({ID_FIELDDATA}: false); set it to true to cluster")
    return None


def check_engine(client: Client, retrier: Retrier) -> None:
    """:class:`JobError` if the cluster lacks what a run needs (one settings request on OpenSearch 2)."""
    if not pages_by_id(client.engine):
        return
    settings = retrier.call("reading the cluster settings", lambda: client.cluster.get_settings(
        include_defaults=True, filter_path="**.id_field_data"))
    reason = unmet_requirement(client.engine, settings)
    if reason:
        raise JobError(f"neardup cluster cannot run: {reason}; nothing was written")
