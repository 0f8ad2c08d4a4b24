"""The parameters of a fingerprint scheme, and the scheme version derived from them.

Two fingerprints are comparable only when they were made with the same scheme: the same
canonicalisation switches, shingle length, seed, number of permutations and grouping.
:func:`scheme_version` turns the parameters into a short string that is stored in every
document, so a change of any parameter (or of the algorithm, via ``ALGORITHM_VERSION``)
makes old fingerprints recognisably stale instead of silently wrong.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
from dataclasses import dataclass
from typing import Literal

#: Bump whenever the algorithm changes in a way that changes fingerprints for the same
#: parameters (tokeniser, stop lists, hashing, permutation family, supershingle hashing).
#: Version 2 is the scheme documented in :mod:`neardup.fingerprint.canonical` and
#: :mod:`neardup.fingerprint.hashing`.
ALGORITHM_VERSION = 2

Language = Literal["auto", "ru", "en", "none"]


@dataclass(frozen=True)
class FingerprintParams:
    """Everything that determines a fingerprint. Immutable and validated on construction.

    ``num_perm`` must equal ``groups * rows``: the signature is cut into ``groups``
    supershingles of ``rows`` minhashes each.
    """

    # Defaults chosen by the quality benchmark (docs/benchmarks.md): short shingles keep lightly
    # edited copies similar without making unrelated pairs similar; the grouping makes a shared
    # supershingle a reliable lookup key for a pair of resemblance s = 0.8, which shares one
    # with probability 1 - (1 - s^rows)^groups.
    shingle_size: int = 3
    num_perm: int = 84
    groups: int = 14
    rows: int = 6
    seed: int = 1
    language: Language = "auto"
    strip_html: bool = True
    drop_stopwords: bool = True
    lemmatize: bool = True

    def __post_init__(self) -> None:
        def need(ok: bool, key: str, allowed: str) -> None:
            if not ok:
                raise ValueError(f"{key} = {getattr(self, key)!r}: must be {allowed}")

        def whole(value: object) -> bool:
            return isinstance(value, int) and not isinstance(value, bool)

        need(whole(self.shingle_size) and 1 <= self.shingle_size <= 32,
             "shingle_size", "a whole number from 1 to 32")
        need(whole(self.num_perm) and 1 <= self.num_perm <= 1024,
             "num_perm", "a whole number from 1 to 1024")
        need(whole(self.groups) and 1 <= self.groups <= 64,
             "groups", "a whole number from 1 to 64")
        need(whole(self.rows) and 1 <= self.rows <= 1024,
             "rows", "a whole number from 1 to 1024")
        need(self.groups * self.rows == self.num_perm,
             "num_perm", f"groups × rows = {self.groups} × {self.rows} = {self.groups * self.rows}")
        need(whole(self.seed) and 0 <= self.seed < 2**32,
             "seed", "a whole number from 0 to 4294967295")
        need(isinstance(self.language, str) and self.language in ("auto", "ru", "en", "none"),
             "language", "one of 'auto', 'ru', 'en', 'none'")
        for switch in ("strip_html", "drop_stopwords", "lemmatize"):
            need(isinstance(getattr(self, switch), bool), switch, "true or false")

    def as_dict(self) -> dict[str, object]:
        return dataclasses.asdict(self)


@functools.lru_cache(maxsize=64)
def scheme_version(params: FingerprintParams) -> str:
    """A short, stable identifier of the scheme: ``"<algorithm>-<digest of params>"``.

    The digest is over the canonical JSON of the parameters, so it is the same on every
    machine and Python version. Cached per (frozen, hashable) parameter set: the proxy asks
    for it on every search.
    """
    payload = json.dumps(params.as_dict(), sort_keys=True, separators=(",", ":"))
    digest = hashlib.sha256(payload.encode("utf-8")).hexdigest()[:10]
    return f"{ALGORITHM_VERSION}-{digest}"
