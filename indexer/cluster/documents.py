"""What ``neardup cluster`` reads from and writes to each document (pure).

Read (``_source`` filtered to :data:`SOURCE_FIELDS`): the fingerprint's scheme version ``v``,
signature ``sig`` and shingle count ``n``, and what an earlier run stored: the cluster id
``neardup.cluster`` and the LSH keys ``neardup.bands``.

A document's fingerprint is *usable* when ``v`` is the current scheme version and ``sig``
decodes to exactly K little-endian uint64 (``n`` a whole number); ``n = 0`` (no words) is
usable but never linked. Anything else (no fingerprint, another scheme, malformed) counts as
no fingerprint: the document is a cluster of its own and gets no keys.

Written (a partial update of ``neardup``, so the fingerprint keys are untouched):
``{"cluster": "<id>", "bands": ["<16 hex>", ...]}`` — only when one of them differs from
what the document holds. ``bands`` is the empty list for documents without keys, which
Elasticsearch indexes as no value.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from neardup.fingerprint import BANDS_KEY, CLUSTER_KEY, FIELD
from neardup.fingerprint.lsh import Banding, key_strings

#: The sub-fields ``neardup cluster`` adds to the ``neardup`` mapping.
CLUSTER_MAPPING = {CLUSTER_KEY: {"type": "keyword"}, BANDS_KEY: {"type": "keyword"}}
SOURCE_FIELDS = [f"{FIELD}.v", f"{FIELD}.sig", f"{FIELD}.n", f"{FIELD}.{CLUSTER_KEY}", f"{FIELD}.{BANDS_KEY}"]


def doc_key(index: str, doc_id: str, with_index: bool) -> str:
    """The key a document is known by in cluster ids: its ``_id``, or ``<_index>/<_id>`` when
    the clusters span several indices (index names cannot contain ``/``)."""
    return f"{index}/{doc_id}" if with_index else doc_id


def split_key(key: str, index: str | None) -> tuple[str, str]:
    """``(index, _id)`` of a key made by :func:`doc_key` (``index`` given when keys are ids)."""
    if index is not None:
        return index, key
    found, _, doc_id = key.partition("/")
    return found, doc_id


@dataclass(frozen=True)
class Stored:
    """The ``neardup`` values of one document as read."""

    version: Any = None
    sig: Any = None
    count: Any = None
    cluster: str | None = None
    bands: tuple[str, ...] | None = None

    @property
    def token(self) -> tuple[Any, Any, Any]:
        """What the clusters were computed from; a re-read document with another token changed."""
        return (self.version, self.sig, self.count)


def stored_values(source: Mapping[str, Any] | None) -> Stored:
    node = (source or {}).get(FIELD)
    if not isinstance(node, Mapping):
        return Stored()
    cluster = node.get(CLUSTER_KEY)
    bands = node.get(BANDS_KEY)
    if isinstance(bands, str):
        bands = [bands]
    return Stored(node.get("v"), node.get("sig"), node.get("n"),
                  cluster if isinstance(cluster, str) else None,
                  tuple(b for b in bands if isinstance(b, str)) if isinstance(bands, list) else None)


def usable_signature(stored: Stored, version: str, num_perm: int) -> tuple[bytes | None, int]:
    """``(8·K signature bytes, shingle count)`` of a usable fingerprint, else ``(None, 0)``."""
    count = stored.count
    if stored.version != version or not isinstance(stored.sig, str):
        return None, 0
    if not isinstance(count, int) or isinstance(count, bool) or count < 0:
        return None, 0
    try:
        raw = base64.b64decode(stored.sig.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError, ValueError):
        return None, 0
    if len(raw) != 8 * num_perm:
        return None, 0
    return raw, count


@dataclass
class DocTable:
    """Documents read, column by column (memory: about K·8 + 300 bytes a document)."""

    num_perm: int
    index: list[str] = field(default_factory=list)
    ids: list[str] = field(default_factory=list)
    routing: list[str | None] = field(default_factory=list)
    seq_no: list[int] = field(default_factory=list)
    primary_term: list[int] = field(default_factory=list)
    stored: list[Stored] = field(default_factory=list)
    signature_bytes: list[bytes] = field(default_factory=list)
    counts: list[int] = field(default_factory=list)
    usable: list[bool] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.ids)

    def add_hit(self, hit: Mapping[str, Any], version: str) -> None:
        stored = stored_values(hit.get("_source"))
        raw, count = usable_signature(stored, version, self.num_perm)
        self.index.append(hit["_index"])
        self.ids.append(hit["_id"])
        self.routing.append(hit.get("_routing"))
        self.seq_no.append(hit.get("_seq_no", -1))
        self.primary_term.append(hit.get("_primary_term", 0))
        self.stored.append(stored)
        self.signature_bytes.append(raw if raw is not None else b"\0" * (8 * self.num_perm))
        self.counts.append(count)
        self.usable.append(raw is not None)

    def extend(self, other: DocTable) -> None:
        for name in ("index", "ids", "routing", "seq_no", "primary_term", "stored", "signature_bytes",
                     "counts", "usable"):
            getattr(self, name).extend(getattr(other, name))

    def keys(self, with_index: bool) -> list[str]:
        return [doc_key(i, d, with_index) for i, d in zip(self.index, self.ids)]

    def signatures(self) -> np.ndarray:
        """(N, K) uint64 signatures (zeros where unusable)."""
        if not self.ids:
            return np.empty((0, self.num_perm), dtype=np.uint64)
        raw = b"".join(self.signature_bytes)
        return np.frombuffer(raw, dtype="<u8").astype(np.uint64).reshape(len(self.ids), self.num_perm)

    def count_array(self) -> np.ndarray:
        """(N,) shingle counts, 0 for unusable fingerprints (never linked)."""
        counts = np.asarray(self.counts, dtype=np.int64)
        return np.where(np.asarray(self.usable, dtype=bool), counts, 0)

    def take(self, order: Sequence[int]) -> DocTable:
        out = DocTable(self.num_perm)
        for name in ("index", "ids", "routing", "seq_no", "primary_term", "stored", "signature_bytes",
                     "counts", "usable"):
            column = getattr(self, name)
            setattr(out, name, [column[p] for p in order])
        return out


@dataclass(frozen=True)
class Planned:
    """The values one document should hold: its cluster id and its keys (None: leave as is)."""

    cluster: str | None
    bands: tuple[str, ...] | None
    token: tuple[Any, Any, Any]

    def differs(self, stored: Stored) -> bool:
        return ((self.cluster is not None and stored.cluster != self.cluster)
                or (self.bands is not None and (stored.bands or ()) != self.bands))

    def partial(self) -> dict[str, Any]:
        """The ``neardup`` object of the partial update."""
        value: dict[str, Any] = {}
        if self.cluster is not None:
            value[CLUSTER_KEY] = self.cluster
        if self.bands is not None:
            value[BANDS_KEY] = list(self.bands)
        return value


def band_strings(banding: Banding, table: DocTable) -> list[tuple[str, ...]]:
    """The stored form of each document's keys (empty for documents that are never linked)."""
    counts = table.count_array()
    out: list[tuple[str, ...]] = [()] * len(table)
    rows = np.flatnonzero(counts > 0)
    if len(rows):
        for row, keys in zip(rows.tolist(), key_strings(banding.keys(table.signatures()[rows]))):
            out[row] = tuple(keys)
    return out
