"""The :class:`Fingerprint` value and its Elasticsearch field layout.

A fingerprint is stored in each document under :data:`FIELD` as::

    {"v": "1-3fa9c2d10b",        # scheme version: fingerprints of another version are not comparable
     "sig": "<base64>",          # the K minhashes, little-endian uint64, standard base64 (8K bytes)
     "n": 123,                   # distinct shingles in the document (0 = no words at all)
     "super": ["<16 hex>", ...]} # G supershingles, lowercase hex of the uint64 value

The *empty* fingerprint (a document without a single word token) has ``n = 0``, a
signature of all ``2^64 - 1`` and **no** supershingles (an empty list), so it shares no term
with anything and every similarity with it is 0.

``sig`` is stored as ``binary`` (not indexed, no doc values: it is only read back in
``_source``); ``super`` as an indexed ``keyword`` array without doc values, so candidate
near-duplicates can be found with ``term`` queries (nothing sorts or aggregates on it);
``v`` as ``keyword`` to find stale documents.

The G(G-1)/2 megashingles are hashes of pairs of supershingles, so they are computed from
``super`` when first used, not stored: a document sharing a megashingle shares its two
supershingles, so the candidate query needs the supershingles only
(:mod:`neardup.fingerprint.matching`), and a stored copy would only lengthen every search
answer that returns ``_source``. Documents enriched by earlier versions hold them as ``mega``
(:data:`RETIRED_KEYS`): readers ignore it, writers clear it, and the mapping keeps it neither
indexed nor with doc values.
"""

from __future__ import annotations

import base64
import binascii
import functools
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from neardup.fingerprint import hashing
from neardup.fingerprint.hashing import U64_MAX, supershingles

_simd_b64decode: Callable[..., bytes] | None
try:  # SIMD base64; binascii when it is missing
    from pybase64 import b64decode as _simd_b64decode
except ImportError:  # pragma: no cover - pybase64 is a dependency; the fallback keeps results equal
    _simd_b64decode = None

FIELD = "neardup"

_VERSION = re.compile(r"^[0-9]+-[0-9a-f]{10}$")
_HEX16 = re.compile(r"^[0-9a-f]{16}$")
_KEYS = ("v", "sig", "n", "super")
#: Keys of the ``neardup`` object that earlier versions wrote as part of the fingerprint and
#: this one does not: ignored when read, cleared (null, or dropped from a whole object) when
#: the fingerprint is written.
RETIRED_KEYS = ("mega",)
#: Keys of the ``neardup`` object that ``neardup cluster`` derives from the fingerprint: the
#: cluster id and the LSH band keys (:mod:`neardup.fingerprint.lsh`). A new fingerprint voids
#: them: whoever writes one clears them, and ``neardup cluster --incremental`` places it again.
CLUSTER_KEY, BANDS_KEY = "cluster", "bands"
CLUSTER_KEYS = (CLUSTER_KEY, BANDS_KEY)
#: ES ``integer`` upper bound.
MAX_COUNT = 2**31 - 1


class FingerprintFormatError(ValueError):
    """A stored fingerprint (``doc["neardup"]``) is malformed or inconsistent."""


def es_mapping() -> dict[str, Any]:
    """Mapping fragment for the fingerprint fields (merge into an index's ``mappings``)."""
    return {
        "properties": {
            FIELD: {
                "properties": {
                    "v": {"type": "keyword"},
                    "sig": {"type": "binary", "doc_values": False},  # binary is never indexed
                    "n": {"type": "integer"},
                    "super": {"type": "keyword", "doc_values": False},
                    # retired (RETIRED_KEYS): documents enriched before still hold it
                    "mega": {"type": "keyword", "index": False, "doc_values": False},
                }
            }
        }
    }


def _hex(values: np.ndarray) -> list[str]:
    return [f"{int(v):016x}" for v in values]


@dataclass(frozen=True, eq=False)
class Fingerprint:
    """One document's fingerprint. Arrays are read-only ``uint64``.

    ``signature`` (K,), ``supershingles`` (G,) and ``megashingles`` (G(G-1)/2,); for the empty
    fingerprint (``shingle_count == 0``) the last two are empty.
    """

    version: str
    signature: np.ndarray
    supershingles: np.ndarray
    shingle_count: int

    @property
    def is_empty(self) -> bool:
        return self.shingle_count == 0

    @functools.cached_property
    def megashingles(self) -> np.ndarray:
        """Hashes of the pairs of supershingles, at first use: only candidate matching reads them,
        and neither writing a fingerprint nor grouping hits needs them."""
        megas = hashing.megashingles(self.supershingles)
        megas.setflags(write=False)
        return megas

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Fingerprint):
            return NotImplemented
        return (self.version == other.version and self.shingle_count == other.shingle_count
                and np.array_equal(self.signature, other.signature)
                and np.array_equal(self.supershingles, other.supershingles))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return (f"Fingerprint(version={self.version!r}, shingle_count={self.shingle_count}, "
                f"num_perm={len(self.signature)}, groups={len(self.supershingles)})")

    def to_source(self) -> dict[str, Any]:
        """The JSON value stored at ``doc["neardup"]`` (see the module docstring)."""
        return {
            "v": self.version,
            "sig": base64.b64encode(self.signature.astype("<u8", copy=False).tobytes()).decode("ascii"),
            "n": int(self.shingle_count),
            "super": _hex(self.supershingles),
        }

    @classmethod
    def from_source(cls, obj: Any, *, groups: int | None = None, num_perm: int | None = None) -> Fingerprint:
        """Parse and validate a stored fingerprint; :class:`FingerprintFormatError` if malformed.

        Checks the types, the version format, base64, the signature length (a positive
        multiple of 8 bytes), hex formats, that there are G supershingles with K divisible
        by G, that they are the hashes of the signature (so a corrupted or hand-edited value is
        caught), and the empty-fingerprint convention. The megashingles are derived from the
        supershingles when first used; a stored ``mega`` (:data:`RETIRED_KEYS`) is not read.
        ``groups`` / ``num_perm``, if given, must match too. Whether the version is the
        current scheme is the caller's business (compare ``f.version`` with
        ``Fingerprinter.version``).
        """
        def fail(message: str) -> FingerprintFormatError:
            return FingerprintFormatError(f"invalid {FIELD} fingerprint: {message}")

        if not isinstance(obj, Mapping):
            raise fail(f"expected an object, got {type(obj).__name__}")
        missing = [k for k in _KEYS if k not in obj]
        if missing:
            raise fail(f"missing field(s) {', '.join(missing)}")
        # Other keys of the object belong to other features (``cluster``, ``duplicate_of``, ...)
        # that share the ``neardup`` object, or are retired; they are not part of the fingerprint.
        version, sig_text, count, supers = (obj[k] for k in _KEYS)

        if not isinstance(version, str) or not _VERSION.match(version):
            raise fail(f"v = {version!r}: must be a scheme version like '1-3fa9c2d10b'")
        if not isinstance(count, int) or isinstance(count, bool) or not 0 <= count <= MAX_COUNT:
            raise fail(f"n = {count!r}: must be a whole number from 0 to {MAX_COUNT}")
        if not isinstance(sig_text, str):
            raise fail(f"sig: must be a base64 string, got {type(sig_text).__name__}")
        try:
            raw = base64.b64decode(sig_text.encode("ascii"), validate=True)
        except (binascii.Error, UnicodeEncodeError, ValueError):
            raise fail("sig: not valid base64") from None
        if not raw or len(raw) % 8:
            raise fail(f"sig: {len(raw)} bytes, must be a positive multiple of 8")
        signature = np.frombuffer(raw, dtype="<u8").astype(np.uint64)
        k = len(signature)
        if num_perm is not None and k != num_perm:
            raise fail(f"sig: {k} minhashes, the scheme has {num_perm}")

        if not isinstance(supers, list):
            raise fail("super: must be a list of 16-digit lowercase hex strings")
        for value in supers:
            if not isinstance(value, str) or not _HEX16.match(value):
                raise fail(f"super: {value!r} is not a 16-digit lowercase hex string")
        super_values = np.array([int(v, 16) for v in supers], dtype=np.uint64)

        if count == 0:
            if super_values.size or not np.all(signature == U64_MAX):
                raise fail("n = 0 (empty document) needs an all-ones sig and an empty super")
        else:
            g = len(super_values)
            if g == 0 or k % g:
                raise fail(f"super: {g} supershingles do not divide {k} minhashes")
            if groups is not None and g != groups:
                raise fail(f"super: {g} supershingles, the scheme has {groups}")
            if not np.array_equal(supershingles(signature, g), super_values):
                raise fail("super: does not match sig")
        return make_fingerprint(version, signature, super_values, count)


def make_fingerprint(version: str, signature: np.ndarray, supers: np.ndarray, count: int) -> Fingerprint:
    """A :class:`Fingerprint` with read-only arrays."""
    for array in (signature, supers):
        array.setflags(write=False)
    return Fingerprint(version, signature, supers, int(count))


def empty_fingerprint(version: str, num_perm: int) -> Fingerprint:
    """The fingerprint of a document without words (see the module docstring)."""
    return make_fingerprint(version, np.full(num_perm, U64_MAX, dtype=np.uint64),
                            np.empty(0, dtype=np.uint64), 0)


def read_signatures(objects: Sequence[Any], version: str, num_perm: int
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Signatures and shingle counts of many stored fingerprints at once, for the request path.

    Returns ``(positions, signatures (M, K) uint64, counts (M,))`` for the objects of
    ``objects`` (stored ``neardup`` values, or anything else) that hold a fingerprint of scheme
    ``version`` with ``num_perm`` minhashes; the rest are left out ("no fingerprint").

    :meth:`Fingerprint.from_source` validates an object completely (it recomputes the
    supershingles, the costly part); grouping needs only ``sig`` and ``n``, so this reads just
    those, with one strict base64 decode for the whole batch when every text has the exact
    length.
    A malformed ``sig`` drops only its own object.
    """
    text_length = signature_text_length(num_perm)
    positions: list[int] = []
    texts: list[str] = []
    counts: list[int] = []
    for position, obj in enumerate(objects):
        if type(obj) is not dict or obj.get("v") != version:
            continue
        text, count = obj.get("sig"), obj.get("n")
        if type(text) is not str or len(text) != text_length or type(count) is not int or count < 0:
            continue
        positions.append(position)
        texts.append(text)
        counts.append(count)
    matrix = decode_joined_signatures("".join(texts), len(texts), num_perm) if texts else None
    if matrix is None:   # some text is malformed (or K's texts are padded): one by one
        rows = [_decode_signature(t, num_perm) for t in texts]
        keep = [k for k, row in enumerate(rows) if row is not None]
        positions = [positions[k] for k in keep]
        counts = [counts[k] for k in keep]
        kept = [row for row in rows if row is not None]
        matrix = np.vstack(kept) if kept else np.zeros((0, num_perm), "<u8")
    return (np.asarray(positions, np.int64), matrix.astype(np.uint64, copy=False),
            np.asarray(counts, np.int64))


def signature_text_length(num_perm: int) -> int:
    """The length of a stored ``sig``: standard base64 of ``8 * num_perm`` bytes."""
    return 4 * (-(-8 * num_perm // 3))


def decode_joined_signatures(text: str | bytes, rows: int, num_perm: int) -> np.ndarray | None:
    """The (rows, K) signatures whose ``sig`` texts, each of :func:`signature_text_length`,
    are concatenated in ``text``, in one strict base64 decode; None when a text is malformed,
    or when K's texts end in ``=`` padding (then they do not decode as one)."""
    if (8 * num_perm) % 3:
        return None
    try:
        raw = _strict_b64decode(text)
        return np.frombuffer(raw, dtype="<u8").reshape(rows, num_perm)
    except (binascii.Error, ValueError):
        return None


def _strict_b64decode(text: str | bytes) -> bytes:
    """Standard base64 of ``text``, refusing any character outside the alphabet (binascii.Error).

    pybase64's ``validate=True`` and binascii's ``strict_mode`` accept and refuse the same texts
    here: the caller checks the decoded length, which a misplaced ``=`` always changes."""
    if _simd_b64decode is not None:
        return _simd_b64decode(text, validate=True)
    return binascii.a2b_base64(text, strict_mode=True)


def _decode_signature(text: str, num_perm: int) -> np.ndarray | None:
    try:
        raw = _strict_b64decode(text)
    except (binascii.Error, ValueError):
        return None
    return np.frombuffer(raw, dtype="<u8") if len(raw) == 8 * num_perm else None
