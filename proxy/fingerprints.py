"""Reading stored fingerprints fast enough for the request path.

``fingerprint.Fingerprint.from_source`` validates a stored object completely (it recomputes the
supershingles from the signature), about 40 µs a hit. Grouping needs only the signature and the
shingle count, so the proxy reads those directly from the documented storage format
(``sig`` = base64 of ``num_perm`` little-endian uint64, ``n`` = shingle count, ``v`` = scheme
version), all signatures of a window in one strict base64 decode. An object of another version or of
the wrong shape counts as "no fingerprint"; its hit is never collapsed.
"""

from __future__ import annotations

import binascii
from typing import Any, Callable, Sequence

import numpy as np

from fingerprint import FingerprintParams, group_labels, scheme_version, similar_pairs
from proxy.collapse import Algorithms, Signatures

Reader = Callable[[Sequence[Any]], Signatures]


def signature_reader(params: FingerprintParams) -> Reader:
    """A function from stored fingerprint objects (or None) to (positions, signatures, counts)."""
    version = scheme_version(params)
    width = params.num_perm
    text_length = 4 * (-(-8 * width // 3))
    joinable = (8 * width) % 3 == 0  # no '=' padding: concatenated strings decode as one

    def decode_one(text: str) -> np.ndarray | None:
        try:
            raw = binascii.a2b_base64(text, strict_mode=True)
        except (binascii.Error, ValueError):
            return None
        return np.frombuffer(raw, dtype="<u8") if len(raw) == 8 * width else None

    def read(objects: Sequence[Any]) -> Signatures:
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
        if not positions:
            return np.zeros(0, np.int64), np.zeros((0, width), np.uint64), np.zeros(0, np.int64)
        matrix = None
        if joinable:
            try:
                raw = binascii.a2b_base64("".join(texts), strict_mode=True)
                matrix = np.frombuffer(raw, dtype="<u8").reshape(len(texts), width)
            except (binascii.Error, ValueError):
                matrix = None
        if matrix is None:  # some text is malformed (or padded): decode one by one, drop bad ones
            rows = [decode_one(t) for t in texts]
            keep = [k for k, row in enumerate(rows) if row is not None]
            positions = [positions[k] for k in keep]
            counts = [counts[k] for k in keep]
            matrix = np.vstack([rows[k] for k in keep]) if keep else np.zeros((0, width), "<u8")
        return (np.asarray(positions, np.int64), matrix.astype(np.uint64, copy=False),
                np.asarray(counts, np.int64))

    return read


def default_algorithms(params: FingerprintParams) -> Algorithms:
    return Algorithms(read=signature_reader(params), similar_pairs=similar_pairs,
                      group_labels=group_labels)
