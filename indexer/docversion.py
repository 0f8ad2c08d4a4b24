"""A document at a version: where it is (``_index``, ``_id``, routing) and the ``_seq_no`` and
primary term it was read or written at.

The base of what the indexer and the cluster job write conditionally and read again:
:class:`neardup.indexer.writer.Pending` (an update waiting to be sent), :class:`neardup.indexer.cluster.seeds.SeededWrite`
(a seed acknowledged) and :class:`neardup.indexer.cluster.backstop.Changed` (a cluster value changed
during a run). A plain (not frozen, slot-less) dataclass base, so that the subclasses keep their
fields, their positional order and their cost: the writer creates one :class:`~neardup.indexer.writer.Pending` per
document.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

V = TypeVar("V", bound="DocVersion")


@dataclass
class DocVersion:
    index: str
    id: str
    routing: str | None
    seq_no: int
    primary_term: int

    @classmethod
    def of(cls: type[V], hit: Mapping[str, Any], *rest: Any, **fields: Any) -> V:
        """From a search hit or a real-time get (``_seq_no``/``_primary_term`` requested); ``rest``
        and ``fields``: the subclass's own fields."""
        return cls(hit["_index"], hit["_id"], hit.get("_routing"), hit["_seq_no"], hit["_primary_term"],
                   *rest, **fields)

    def update_meta(self) -> dict[str, Any]:
        """The ``update`` action of a bulk request, conditional on this version."""
        meta: dict[str, Any] = {"_index": self.index, "_id": self.id, "if_seq_no": self.seq_no,
                                "if_primary_term": self.primary_term}
        if self.routing is not None:
            meta["routing"] = self.routing
        return {"update": meta}

    def get_ref(self) -> dict[str, Any]:
        """The entry of an ``mget`` reading the document again."""
        ref: dict[str, Any] = {"_index": self.index, "_id": self.id}
        if self.routing is not None:
            ref["routing"] = self.routing
        return ref
