"""The fingerprint algorithms the proxy groups hits with.

Stored fingerprints are read with :func:`neardup.fingerprint.read_signatures` (only ``sig`` and ``n``,
one base64 decode per window); an object of another scheme version or of the wrong shape
counts as "no fingerprint": the hit gets one computed from its text at query time
(:mod:`neardup.proxy.grouping.query_fingerprints`, ``collapse.fingerprint_missing``), else it is
never collapsed.
"""

from __future__ import annotations

from functools import partial

from neardup.fingerprint import FingerprintParams, group_labels, read_signatures, scheme_version, similar_pairs
from neardup.proxy.grouping.collapse import Algorithms


def default_algorithms(params: FingerprintParams, tfidf_version: str = "") -> Algorithms:
    """``tfidf_version``: the TF-IDF version (``neardup.tfidf_config.tfidf_version_of``) whose vectors
    ``neardup_mode=tfidf`` compares; empty: none (no hit is grouped in that mode)."""
    read = partial(read_signatures, version=scheme_version(params), num_perm=params.num_perm)
    return Algorithms(read=read, similar_pairs=similar_pairs, group_labels=group_labels,
                      tfidf_version=tfidf_version)
