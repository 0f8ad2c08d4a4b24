"""The searches of ``neardup cluster`` over the stored cluster values (``neardup.cluster``, ``neardup.bands``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from neardup.fingerprint import BANDS_KEY, CLUSTER_KEY, FIELD


def new_documents_query(version: str) -> dict[str, Any]:
    """Documents an incremental run places: without a cluster, or with a usable non-empty
    fingerprint but no keys (fingerprinted since the last run)."""
    return {"bool": {"should": [
        {"bool": {"must_not": [{"exists": {"field": f"{FIELD}.{CLUSTER_KEY}"}}]}},
        {"bool": {"filter": [{"term": {f"{FIELD}.v": version}}, {"range": {f"{FIELD}.n": {"gte": 1}}}],
                  "must_not": [{"exists": {"field": f"{FIELD}.{BANDS_KEY}"}}]}},
    ], "minimum_should_match": 1}}


def keys_query(version: str, keys: Sequence[str]) -> dict[str, Any]:
    """Documents of the current scheme holding any of the band keys."""
    return {"bool": {"filter": [{"term": {f"{FIELD}.v": version}}, {"terms": {f"{FIELD}.{BANDS_KEY}": list(keys)}}]}}


def clusters_query(ids: Sequence[str]) -> dict[str, Any]:
    return {"bool": {"filter": [{"terms": {f"{FIELD}.{CLUSTER_KEY}": list(ids)}}]}}
