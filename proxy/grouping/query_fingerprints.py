"""Fingerprints computed at query time for hits that have none stored (no asyncio, no I/O).

A hit whose stored fingerprint grouping cannot use (no ``neardup`` object, another scheme
version, a malformed one) gets one from its text: the ``indexer.fields`` of its ``_source``
joined as the indexer joins them and fingerprinted by the indexer's own function
(:func:`neardup.fingerprint.texts.compute_fingerprint`), so it equals what ``neardup index``
would store.

The work of one request is bounded (:class:`Budget`): at most ``collapse.fingerprint_max_hits``
hits, and ``collapse.fingerprint_cpu_ms`` of CPU time (``time.thread_time`` of the thread that
fingerprints). A hit beyond either bound stays a group of its own and is counted.

Results are remembered in a least-recently-used :class:`FingerprintCache` keyed by the scheme
version and a digest of the text itself: a fingerprint is a function of the text and the
scheme alone, so an entry can never be stale, whatever happened to the document (changed,
deleted and written again, its index recreated under the same name, where ``_seq_no`` and
``_primary_term`` start over), and exact copies share one entry. The price: a hit's text has to
be read for the lookup.

Fingerprinting runs on one thread per worker (:class:`QueryFingerprints`), so the event loop
keeps serving other requests; that thread has its own :class:`~neardup.fingerprint.Fingerprinter`
and runs on NumPy alone (:func:`neardup.fingerprint.jit.disable_in_this_thread`: the proxy never
loads numba).
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from neardup.fingerprint import Fingerprint, Fingerprinter, FingerprintParams, jit, scheme_version
from neardup.fingerprint.texts import document_text
from neardup.proxy.transport import rawjson

#: The keys of a fingerprint object grouping reads (``neardup.v``, ``.sig``, ``.n``).
READ_KEYS = ("v", "sig", "n")


@dataclass
class Budget:
    """What one request may still spend on query-time fingerprints, and what it did."""

    hits: int               # hits that may still be fingerprinted (cached or computed)
    cpu_seconds: float      # CPU time left for computing
    computed: int = 0       # fingerprints computed for this request
    cached: int = 0         # fingerprints found in the cache
    skipped: int = 0        # hits left without one: beyond a bound

    @property
    def fingerprinted(self) -> int:
        return self.computed + self.cached


class FingerprintCache:
    """A bounded least-recently-used map (scheme version, text digest) → fingerprint object.
    Used from the event loop only (no lock)."""

    def __init__(self, entries: int) -> None:
        self.entries = entries
        self._values: OrderedDict[tuple[str, bytes], dict[str, Any]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._values)

    def get(self, key: tuple[str, bytes]) -> dict[str, Any] | None:
        value = self._values.get(key)
        if value is not None:
            self._values.move_to_end(key)
        return value

    def put(self, key: tuple[str, bytes], value: dict[str, Any]) -> None:
        if self.entries <= 0:
            return
        self._values[key] = value
        self._values.move_to_end(key)
        while len(self._values) > self.entries:
            self._values.popitem(last=False)


def text_digest(text: str) -> bytes:
    """A 128-bit digest of the text (its UTF-8 bytes; lone surrogates escaped)."""
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()


def source_text(source: Any, fields: Sequence[str]) -> str | None:
    """The text the indexer fingerprints in a hit's ``_source`` (raw or parsed), None if none."""
    try:
        value = rawjson.materialize(source)
    except ValueError:
        return None
    return document_text(value, fields)[1] if isinstance(value, Mapping) else None


# -- the fingerprinting thread -------------------------------------------------------------
_thread = threading.local()


#: Fingerprinted once when the thread starts: the word analysers load (tens of milliseconds of
#: CPU each) before a request's budget is counted.
_WARM_UP = ("Crude oil prices rose after the cartel cut its output.",
            "Цены на нефть выросли после того, как картель сократил добычу.")


def start_thread(params: FingerprintParams) -> None:
    """Set up the calling thread (or process) to fingerprint: NumPy only, a warm fingerprinter."""
    jit.disable_in_this_thread()
    fingerprinter = _thread.fingerprinter = Fingerprinter(params)
    for text in _WARM_UP:
        fingerprinter.fingerprint(text)


def fingerprint_texts(fingerprinter: Fingerprinter, texts: Sequence[str], cpu_seconds: float
                      ) -> tuple[list[dict[str, Any] | None], float]:
    """The fingerprint objects (:data:`READ_KEYS`) of ``texts`` in order, until ``cpu_seconds``
    of this thread's CPU time are spent (the rest None), and the CPU time spent. Each text is
    a :func:`~neardup.fingerprint.texts.document_text`, fingerprinted as
    :func:`~neardup.fingerprint.texts.compute_fingerprint` does."""
    started = time.thread_time()
    out: list[dict[str, Any] | None] = []
    for text in texts:
        if time.thread_time() - started >= cpu_seconds:
            out += [None] * (len(texts) - len(out))
            break
        value = fingerprinter.fingerprint(text).to_source()
        out.append({key: value[key] for key in READ_KEYS})
    return out, time.thread_time() - started


def in_thread(texts: Sequence[str], cpu_seconds: float) -> tuple[list[dict[str, Any] | None], float]:
    """:func:`fingerprint_texts` with the thread's own fingerprinter (run on
    :meth:`QueryFingerprints.executor`)."""
    return fingerprint_texts(_thread.fingerprinter, texts, cpu_seconds)


def whole_in_thread(texts: Sequence[str]) -> list[Fingerprint]:
    """The fingerprints of ``texts``, whole and without a CPU bound (documents written through
    the proxy get theirs all), with the thread's own fingerprinter."""
    fingerprinter: Fingerprinter = _thread.fingerprinter
    return [fingerprinter.fingerprint(text) for text in texts]


class QueryFingerprints:
    """One worker's query-time fingerprinting: the cache, the fields, and the thread."""

    def __init__(self, params: FingerprintParams, fields: Sequence[str], cache_entries: int) -> None:
        self.params = params
        self.version = scheme_version(params)
        self.fields = tuple(fields)
        self.cache = FingerprintCache(cache_entries)
        self._executor: ThreadPoolExecutor | None = None

    def executor(self) -> ThreadPoolExecutor:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="neardup-fingerprint",
                                                initializer=start_thread, initargs=(self.params,))
        return self._executor

    def start(self) -> None:
        """Start the thread now (it warms up in the background), not at the first request."""
        self.executor().submit(int)

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None
