"""A collapsed page written from the upstream's own bytes (pure).

The usual collapsed search (the whole ``_source`` goes to the client, no ``filter_path`` or
``pretty``, every hit holds a fingerprint, one window is enough) is answered without decoding
the response. :mod:`neardup.proxy.transport.hitscan` finds the hits and their fingerprints,
grouping runs on the signatures (:func:`neardup.proxy.grouping.collapse.group_signatures`),
and the answer is the upstream's bytes with the page's hits put together anew:

* each kept hit is copied with ``"fields":{"neardup.group":[…]}`` and
  ``"inner_hits":{"neardup":…}`` appended before its closing brace;
* each folded hit is copied into those inner hits with ``"fields":{"neardup.similarity":[…]}``;
* everything else of the response is copied, and the ``neardup`` summary appended to it.

That is what :func:`~neardup.proxy.grouping.collapse.build_page` and
:func:`~neardup.proxy.grouping.similarity.annotate` give, with the keys in the same order; the
copied values keep the upstream's spelling (a ``_score`` stays as Elasticsearch wrote it).

:func:`spliced_page` answers None whenever it cannot give that answer (a hit without a usable
fingerprint, the same document twice, a page the window does not fill): the caller then
reads the response the general way.

Two implementations write the same bytes: :func:`reference_spliced_page` here, and the compiled
one (``proxy/grouping/compiled_rs``, a Rust extension built at install) for the usual window, at
resemblance with the default algorithms, every fingerprint of the current scheme and at most
:data:`COMPILED_ROWS` hits. The compiled one does the whole of it (signatures, pairs, groups, similarities, the bytes written)
without a Python object per hit, and answers no page where the reference answers none (a
repeated document, a window that does not fill the page); where it cannot be sure of the
reference's answer it leaves the window to the reference. The tests compare the two.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from neardup.fingerprint.model import decode_joined_signatures, signature_text_length
from neardup.fingerprint.similarity import Mode
from neardup.proxy.grouping.collapse import (
    GROUP_FIELD,
    INNER_HITS_NAME,
    SUMMARY_KEY,
    Algorithms,
    Page,
    Signatures,
    group_signatures,
)
from neardup.proxy.grouping.fingerprints import equal_slots_needed, window_labels, window_pairs
from neardup.proxy.grouping.similarity import ESTIMATORS, SIMILARITY_FIELD
from neardup.proxy.transport import jsonio
from neardup.proxy.transport.hitscan import COLUMNS, ScanResult

_LARGEST_COUNT = 2**63
_GROUP_OPEN = b',"fields":{' + jsonio.dumps(GROUP_FIELD) + b":["
_INNER_OPEN = b']},"inner_hits":{' + jsonio.dumps(INNER_HITS_NAME) + b':{"hits":{"total":'
_SIMILARITY_OPEN = b',"fields":{' + jsonio.dumps(SIMILARITY_FIELD) + b":["
_SUMMARY_OPEN = b"," + jsonio.dumps(SUMMARY_KEY) + b":"

try:
    import neardup.proxy.grouping._compiled as _compiled
except ImportError:   # not built (no cargo at install): the reference writes every page
    _compiled = None  # type: ignore[assignment]

#: Whether :func:`spliced_page` writes the usual window with the compiled writer.
COMPILED = _compiled is not None
#: The largest window the compiled writer takes: its pairs cost at worst the square of the
#: window (a window of copies), where the reference's NumPy search sorts band keys.
COMPILED_ROWS = 256


@dataclass(frozen=True)
class Round:
    """One upstream answer of the window: its bytes, their scan, and how many hits were asked."""

    raw: bytes
    scan: ScanResult
    requested: int


#: ``summarize(page, window, fingerprinted)``: the ``neardup`` summary of ``page``, written from a
#: window of ``window`` hits of which ``fingerprinted`` hold a fingerprint.
Summarize = Callable[[Page, int, int], dict[str, Any]]


def _rows(table: bytes) -> list[list[int]]:
    values = np.frombuffer(table, dtype="<i8").tolist()
    return [values[k:k + COLUMNS] for k in range(0, len(values), COLUMNS)]


def spliced_page(rounds: Sequence[Round], start: int, size: int, threshold: float, mode: Mode,
                 total_as_int: bool, algorithms: Algorithms, summarize: Summarize) -> tuple[bytes, Page] | None:
    """The answer with the page ``[start, start + size)`` (in groups) of the window the ``rounds``
    hold, in window order, written from their bytes with its summary (see the module), and the
    page; None when it cannot be."""
    if _compiled is not None and mode == "resemblance" and type(threshold) is float and 0.0 < threshold <= 1.0 \
            and start >= 0 and size >= 0 and algorithms.version and algorithms.similar_pairs is window_pairs \
            and algorithms.group_labels is window_labels and rounds:
        pages: list[Page] = []

        def summary(shown: int, collapsed: int, groups: int, window: int) -> bytes:
            pages.append(Page([], shown, collapsed, groups))
            return jsonio.dumps(summarize(pages[0], window, window))

        k = algorithms.num_perm
        written = _compiled.spliced_page([(one.raw, one.scan, one.requested) for one in rounds], start, size,
                                         equal_slots_needed(threshold, k), total_as_int, algorithms.version.encode(),
                                         k, COMPILED_ROWS, _similarity_texts(k), _MARKS, summary)
        if written is False:   # no page, as the reference would find
            return None
        if written is not None:
            return written[0], pages[0]
    return reference_spliced_page(rounds, start, size, threshold, mode, total_as_int, algorithms, summarize)


#: What the compiled writer puts before a kept hit's group key, before its inner hits' total,
#: before a folded hit's similarity (as :func:`_write_kept_hit`) and before the summary.
_MARKS = (_GROUP_OPEN, _INNER_OPEN, _SIMILARITY_OPEN, _SUMMARY_OPEN)


@lru_cache(maxsize=4)
def _similarity_texts(num_perm: int) -> bytes:
    """The similarity of ``m`` equal slots of ``num_perm`` as :func:`_similarities` writes it,
    for every ``m``, joined by commas: a resemblance is ``m / K``."""
    return b",".join(jsonio.dumps(round(m / max(num_perm, 1), 4)) for m in range(num_perm + 1))


def reference_spliced_page(rounds: Sequence[Round], start: int, size: int, threshold: float, mode: Mode,
                           total_as_int: bool, algorithms: Algorithms, summarize: Summarize
                           ) -> tuple[bytes, Page] | None:
    """:func:`spliced_page` in Python: every window, and the reference of the compiled writer."""
    if not rounds:
        return None
    hits: list[tuple[bytes, list[int]]] = []
    seen: set[tuple[bytes, bytes, bytes]] = set()
    took, exhausted = 0, False
    for one in rounds:
        raw = one.raw
        took = max(took, int(raw[one.scan[0]:one.scan[1]]))
        rows = _rows(one.scan[5])
        for row in rows:
            # An absent value's span is (-1, -1): its slice is empty, as group_key reads it.
            if row[4] >= 0:   # the same document twice (moved between rounds): the general way
                identity = (raw[row[2]:row[3]], raw[row[4]:row[5]], raw[row[6]:row[7]])
                if identity in seen:
                    return None
                seen.add(identity)
            hits.append((raw, row))
        exhausted = len(rows) < one.requested
    read = _signatures(hits, algorithms)
    if read is None:   # a hit without a usable fingerprint of this scheme
        return None
    groups, fingerprinted = group_signatures(len(hits), read, threshold, mode, algorithms)
    if len(groups) < start + size and not exhausted:   # another round, or a deep page
        return None
    shown = groups[start:start + size]
    similarities = _similarities(shown, read[1], read[2], mode)
    first = rounds[0]
    view = memoryview(first.raw)
    took_start, took_end, hits_start, hits_end, close, _ = first.scan
    head: list[Any]
    if first.raw[took_start:took_end] == b"%d" % took:
        head = [view[:hits_start + 1]]
    elif took_end <= hits_start:
        head = [view[:took_start], b"%d" % took, view[took_end:hits_start + 1]]
    else:
        return None
    collapsed = 0
    for number, members in enumerate(shown):
        if number:
            head.append(b",")
        _write_kept_hit(head, hits, members, similarities, total_as_int)
        collapsed += len(members) - 1
    head.append(view[hits_end - 1:close])
    page = Page([], len(shown), collapsed, len(groups))
    summary = jsonio.dumps(summarize(page, len(hits), fingerprinted))
    return b"".join([*head, _SUMMARY_OPEN, summary, view[close:]]), page


def _signatures(hits: Sequence[tuple[bytes, list[int]]], algorithms: Algorithms) -> Signatures | None:
    """The signatures of all ``hits``, or None if one has no usable fingerprint. When the
    reader is :func:`neardup.fingerprint.read_signatures` (``algorithms.version`` is set), its
    checks are made on the bytes and the texts decoded at once; else (or when that decode
    fails) the fingerprints go through ``algorithms.read``, which leaves out what it refuses."""
    counts: list[int] = []
    for raw, row in hits:
        count = int(raw[row[14]:row[15]])
        if not 0 <= count < _LARGEST_COUNT:
            return None
        counts.append(count)
    if algorithms.version:
        version, length = algorithms.version.encode(), signature_text_length(algorithms.num_perm)
        if any(raw[row[10]:row[11]] != version or row[13] - row[12] != length for raw, row in hits):
            return None
        matrix = decode_joined_signatures(b"".join([raw[row[12]:row[13]] for raw, row in hits]), len(hits),
                                          algorithms.num_perm)
        if matrix is not None:
            return (np.arange(len(hits), dtype=np.int64), matrix.astype(np.uint64, copy=False),
                    np.asarray(counts, dtype=np.int64))
    read = algorithms.read([{"v": raw[row[10]:row[11]].decode(), "sig": raw[row[12]:row[13]].decode(), "n": count}
                            for (raw, row), count in zip(hits, counts)])
    return read if len(read[0]) == len(hits) else None


def _similarities(shown: Sequence[Sequence[int]], signatures: np.ndarray, counts: np.ndarray,
                  mode: Mode) -> dict[int, bytes]:
    """Each folded hit's similarity to its kept hit (as
    :func:`~neardup.proxy.grouping.similarity.annotate` writes it), by position."""
    kept = [members[0] for members in shown for _ in members[1:]]
    folded = [member for members in shown for member in members[1:]]
    if not folded:
        return {}
    a, b = np.asarray(kept, dtype=np.int64), np.asarray(folded, dtype=np.int64)
    values = np.asarray(ESTIMATORS[mode](signatures[a], signatures[b], counts[a], counts[b]), dtype=np.float64)
    return {member: jsonio.dumps(round(value, 4)) for member, value in zip(folded, values.tolist())}


def _write_kept_hit(out: list[Any], hits: Sequence[tuple[bytes, list[int]]], members: Sequence[int],
                    similarities: dict[int, bytes], total_as_int: bool) -> None:
    """Append a kept hit's pieces, with its group key and its folded hits (see the module):
    pieces of the responses, joined once for the whole answer."""
    raw, row = hits[members[0]]
    others = len(members) - 1
    out += [memoryview(raw)[row[0]:row[1] - 1], _GROUP_OPEN, b'"', raw[row[2]:row[3]], b"/", raw[row[4]:row[5]],
            b'"', _INNER_OPEN, b"%d" % others if total_as_int else b'{"value":%d,"relation":"eq"}' % others,
            b',"max_score":', _max_score(hits, members), b',"hits":[']
    for number, member in enumerate(members[1:]):
        member_raw, member_row = hits[member]
        out += [b"," if number else b"", memoryview(member_raw)[member_row[0]:member_row[1] - 1], _SIMILARITY_OPEN,
                similarities[member], b"]}}"]
    out.append(b"]}}}}")


def _max_score(hits: Sequence[tuple[bytes, list[int]]], members: Sequence[int]) -> bytes:
    """The highest ``_score`` of the folded hits as written (the first of equal ones), or null."""
    best: float | None = None
    best_text = b"null"
    for member in members[1:]:
        raw, row = hits[member]
        if row[8] >= 0:
            text = raw[row[8]:row[9]]
            score = float(text)
            if best is None or score > best:
                best, best_text = score, text
    return best_text
