"""The clusters' record in the index mapping: ``_meta.neardup_clusters``.

It holds the threshold, mode, scheme version and LSH parameters the clusters were built for,
and ``state``: ``building`` from the start of a full run, ``ready`` once every document holds
its value. A later ``--incremental`` run extends the clusters only when they match
(:meth:`ClusterSettings.mismatch`); the proxy collapses natively only on ``ready``.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from neardup.fingerprint import FIELD
from neardup.fingerprint.lsh import Banding
from neardup.indexer.client import Client
from neardup.indexer.errors import ClusterApiError, JobError, error_type_and_reason
from neardup.indexer.retry import Retrier

META_KEY = "neardup_clusters"


@dataclass(frozen=True)
class ClusterSettings:
    """What the clusters are built for; stored in ``_meta`` and checked by later runs."""

    version: str
    threshold: float
    banding: Banding
    with_index: bool
    verification: str = "signature"  # how links were verified (indexer.cluster.verification); not checked

    def meta(self, state: str, **figures: Any) -> dict[str, Any]:
        return {"state": state, "threshold": self.threshold, "mode": "resemblance", "version": self.version,
                "lsh": self.banding.describe(), "keys": "index/id" if self.with_index else "id",
                "verification": self.verification,
                "updated": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
                **figures}

    def mismatch(self, meta: Mapping[str, Any] | None) -> str | None:
        """Why clusters recorded in ``meta`` cannot be extended by this run, or None."""
        if not isinstance(meta, Mapping):
            return "the index has no clusters yet"
        if meta.get("state") != "ready":
            return f"the last run did not finish (state {meta.get('state')!r})"
        wanted = self.meta("ready")
        for name in ("threshold", "mode", "version", "lsh", "keys"):
            if meta.get(name) != wanted[name]:
                return f"the clusters were built with {name} {meta.get(name)!r}, this run uses {wanted[name]!r}"
        return None


def put_cluster_meta(client: Client, retrier: Retrier, indices: Sequence[str], root_mappings: dict[str, Any],
                     value: Mapping[str, Any], properties: Mapping[str, Any] | None = None, *,
                     require_acknowledged: bool = False) -> None:
    """Record ``value`` as ``_meta.neardup_clusters`` of every index (other ``_meta`` keys kept),
    with the missing ``neardup`` sub-fields ``properties`` in the same put-mapping request.

    ``require_acknowledged``: :class:`JobError` if the cluster does not acknowledge the request
    (not every node applied it within the timeout). The ``building`` state needs it: the seed
    protocol (:mod:`neardup.indexer.cluster.seeds`) relies on ``building`` being visible on every node
    before the run's refresh."""
    for index in indices:
        current = dict(root_mappings.get(index, {}).get("_meta") or {})
        current[META_KEY] = dict(value)
        body: dict[str, Any] = {"meta": current}
        if properties:
            body["properties"] = {FIELD: {"properties": dict(properties)}}
        try:
            response = retrier.call("recording the clusters in _meta",
                                    lambda: client.indices.put_mapping(index=index, **body))
        except ClusterApiError as exc:
            if not properties or exc.status in (401, 403, 404):
                raise
            kind, reason = error_type_and_reason(exc.body)
            raise JobError(f"{client.engine.engine} refused the neardup mapping for {index} ({kind}: {reason}); "
                           "nothing was changed") from None
        if require_acknowledged and not response.get("acknowledged"):
            raise JobError(f"{client.engine.engine} did not acknowledge recording `{value.get('state')}` in the _meta of "
                           f"{index} (not every node applied it in time): the run is not started, since the "
                           "indexer's cluster seeds rely on it; try again (a slow or unstable cluster?)")
        root_mappings.setdefault(index, {})["_meta"] = current
