"""What one ``neardup cluster`` run is asked to do, and the strategy it takes.

:func:`cluster_params` turns the threshold into an LSH banding (:func:`neardup.fingerprint.lsh.choose_banding`:
``b`` bands of ``r`` rows, so a pair of resemblance ``s`` becomes a candidate with probability
``1 - (1 - s^r)^b``). :func:`choose_strategy` picks ``memory`` while the fingerprints fit
(K·8 bytes of signature plus :data:`BYTES_PER_DOC` a document), else ``aggregate``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from neardup.fingerprint import FingerprintParams
from neardup.fingerprint.clustering import ClusterParams
from neardup.fingerprint.lsh import choose_banding

Strategy = Literal["auto", "memory", "aggregate"]
#: Estimated bytes of memory per document in the memory strategy, besides the signature.
BYTES_PER_DOC = 400


@dataclass(frozen=True)
class ClusterOptions:
    index: str
    threshold: float
    mode: Strategy = "auto"
    incremental: bool = False
    report: str | None = None
    title_fields: tuple[str, ...] = ("title", "body")
    workers: int = 2
    batch_size: int = 1000
    memory_limit_mb: int = 2048
    supershingles: bool = True
    rounds: bool = True
    verify: str = "text"             # memory strategy: "text" (exact) or "signature"; see indexer.cluster.verification


def cluster_params(options: ClusterOptions, fingerprint: FingerprintParams) -> ClusterParams:
    banding = choose_banding(options.threshold, fingerprint.num_perm,
                             fingerprint.groups if options.supershingles else 0)
    return ClusterParams(options.threshold, banding, rounds=options.rounds)


def choose_strategy(options: ClusterOptions, documents: int, num_perm: int) -> str:
    if options.mode != "auto":
        return options.mode
    needed = documents * (num_perm * 8 + BYTES_PER_DOC)
    return "memory" if needed <= options.memory_limit_mb * 2**20 else "aggregate"
