"""Which indices take whole-document writes: the stored ``_source`` is the whole document as sent.

A whole-document write (an ``index`` action carrying the ``_source`` read, with ``neardup``
spliced in, :mod:`neardup.indexer.writer`) is what a partial update does on the cluster (read
the document, merge, index it again) without the read and the merge. It is only as safe when
the ``_source`` the job reads is the whole document and nothing on the way rewrites it:

* ``_source`` is stored as sent: not disabled, no ``includes``/``excludes`` (the source read
  would be the filtered one, and writing it back would drop the rest for good), not synthetic
  (``_source.mode``, ``index.mapping.source.mode``, or the default of ``index.mode``
  ``logsdb``/``time_series``), not derived (OpenSearch's ``index.derived_source.enabled``);
* no ``index.final_pipeline`` (it runs on every ``index`` action and could change user fields;
  a partial update runs no pipeline; the default pipeline is skipped with ``pipeline: _none``).

Any other index is written with partial updates.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from neardup.indexer.client import Client
from neardup.indexer.retry import Retrier

#: ``_source`` mapping values that store the source as sent.
_STORED_AS_SENT: tuple[dict[str, Any], ...] = ({}, {"enabled": True}, {"mode": "stored"}, {"enabled": True, "mode": "stored"})
#: ``index.mode`` values whose ``_source`` is synthetic unless told otherwise.
_SYNTHETIC_MODES = frozenset({"logsdb", "time_series"})


def source_stored_as_sent(mapping: Mapping[str, Any]) -> bool:
    """Whether the root mapping ``mapping`` stores ``_source`` whole and as sent."""
    source = mapping.get("_source", {})
    return isinstance(source, Mapping) and dict(source) in _STORED_AS_SENT


def settings_allow(settings: Mapping[str, Any]) -> bool:
    """Whether an index's settings (``{"index": {...}}``, nested) let a whole-document write
    store the source as sent and run no pipeline that cannot be skipped."""
    index = settings.get("index", {})
    if not isinstance(index, Mapping):
        return True
    if str(index.get("final_pipeline", "_none")) != "_none":
        return False
    derived = index.get("derived_source", {})
    if isinstance(derived, Mapping) and str(derived.get("enabled", "false")).lower() == "true":
        return False
    source_mode = index.get("mapping", {}).get("source", {}).get("mode") if isinstance(
        index.get("mapping"), Mapping) else None
    if source_mode is not None:
        return str(source_mode) == "stored"
    return str(index.get("mode", "standard")) not in _SYNTHETIC_MODES


def whole_document_indices(client: Client, retrier: Retrier, index: str) -> frozenset[str]:
    """The concrete indices of ``index`` (a name, alias or pattern) that take whole-document writes."""
    mappings = retrier.call("reading the mapping", lambda: client.indices.get_mapping(index=index))
    settings = retrier.call("reading the index settings", lambda: client.indices.get_settings(
        index=index, filter_path=["*.settings.index.final_pipeline", "*.settings.index.mode",
                                  "*.settings.index.mapping.source.mode",
                                  "*.settings.index.derived_source.enabled"]))
    return frozenset(name for name, body in mappings.items()
                     if source_stored_as_sent(body.get("mappings", {}))
                     and settings_allow(settings.get(name, {}).get("settings", {})))
