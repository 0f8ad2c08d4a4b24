"""The document versions a follower has settled recently, so that it does not fingerprint them again.

Each pass of ``neardup index --follow --since-field`` reads again every document of its window
(:mod:`neardup.indexer.watermark`), most of them fingerprinted by an earlier pass. A document is
known by its ``_seq_no`` and primary term: the version the follower wrote (or found current),
and the version it read before writing (what a search shows until the next refresh). A hit at a
known version has not changed since and is skipped without being fingerprinted; any write to
the document gives it a new ``_seq_no``, so a changed document is never skipped.

Entries are dropped once their document left the window (its ``FIELD`` is older than the
window's start) or after :data:`MAX_AGE` seconds.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

#: Seconds an entry is kept whatever its ``FIELD`` (a date in the future stays in the window).
MAX_AGE = 60.0

Key = tuple[str, str]
Version = tuple[int, int]


def hit_version(hit: Mapping[str, Any]) -> Version:
    return int(hit["_seq_no"]), int(hit["_primary_term"])


@dataclass
class Entry:
    versions: set[Version]
    #: the document's ``FIELD`` (epoch ms), None if unknown
    updated: float | None
    added: float


@dataclass
class RecentVersions:
    entries: dict[Key, Entry] = field(default_factory=dict)

    def remember(self, key: Key, versions: set[Version], updated: float | None, now: float) -> None:
        self.entries[key] = Entry(versions, updated, now)

    def known(self, hit: Mapping[str, Any]) -> bool:
        """Whether the hit is at a version this follower settled (unchanged since)."""
        entry = self.entries.get((hit["_index"], hit["_id"]))
        return entry is not None and hit_version(hit) in entry.versions

    def prune(self, window_start: float | None, now: float) -> None:
        """Forget documents older than the window (epoch ms) and entries older than :data:`MAX_AGE`."""
        self.entries = {key: entry for key, entry in self.entries.items()
                        if now - entry.added <= MAX_AGE
                        and (window_start is None or entry.updated is None or entry.updated > window_start)}

    def __len__(self) -> int:
        return len(self.entries)
