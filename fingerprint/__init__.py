"""Pure fingerprinting core shared by the indexer and the proxy (no I/O, no asyncio).

See :mod:`neardup.fingerprint.fingerprinter` for the pipeline,
:mod:`neardup.fingerprint.canonical` for canonical text, :mod:`neardup.fingerprint.hashing` for
the hash functions and their maths, :mod:`neardup.fingerprint.wordcache` for the word cache,
:mod:`neardup.fingerprint.jit` for the optional compiled kernels (loaded at first use, never at
import), :mod:`neardup.fingerprint.model` for the stored field layout and
:mod:`neardup.fingerprint.similarity` for the similarity measures.
"""

from neardup.fingerprint.fingerprinter import Fingerprinter
from neardup.fingerprint.model import (
    BANDS_KEY,
    CLUSTER_KEY,
    CLUSTER_KEYS,
    FIELD,
    RETIRED_KEYS,
    Fingerprint,
    FingerprintFormatError,
    es_mapping,
    read_signatures,
)
from neardup.fingerprint.params import ALGORITHM_VERSION, FingerprintParams, scheme_version
from neardup.fingerprint.similarity import (
    estimated_containment,
    estimated_resemblance,
    exact_containment,
    exact_resemblance,
    group_labels,
    similar_pairs,
)

__all__ = [
    "ALGORITHM_VERSION",
    "BANDS_KEY",
    "CLUSTER_KEY",
    "CLUSTER_KEYS",
    "FIELD",
    "Fingerprint",
    "FingerprintFormatError",
    "FingerprintParams",
    "Fingerprinter",
    "RETIRED_KEYS",
    "read_signatures",
    "es_mapping",
    "estimated_containment",
    "estimated_resemblance",
    "exact_containment",
    "exact_resemblance",
    "group_labels",
    "scheme_version",
    "similar_pairs",
]
