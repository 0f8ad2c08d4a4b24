"""Exact resemblance and containment for every pair of documents sharing a shingle.

Documents are sets of 64-bit shingle hashes ``A_d``. For a pair ``(i, j)`` with
``c = |A_i ∩ A_j|``:

* resemblance (Jaccard) ``r = c / (|A_i| + |A_j| - c)``
* containment of i in j ``c / |A_i|``, of j in i ``c / |A_j|``; the pair's containment is the
  larger of the two, ``c / min(|A_i|, |A_j|)`` (the proxy's containment mode is symmetric
  the same way).

The intersection sizes come from an inverted index: the sparse incidence matrix ``X``
(documents × distinct shingles) in CSR form, whose columns are the posting lists. Row block
``B`` of ``X @ X.T`` counts, for every document of ``B`` and every document that shares at
least one shingle with it, the shared shingles: exactly the pairs sharing ≥ 1 shingle, with
no all-pairs loop and without skipping common shingles. The work is
``Σ_shingles df²``; blocks are sized from that sum so memory stays bounded.

Only pairs whose containment reaches ``floor`` are kept (every pair is counted, see
:attr:`Truth.pairs_sharing`); since resemblance ≤ containment, that keeps every pair above
any threshold ≥ ``floor`` in either measure.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import sparse


@dataclass(frozen=True)
class Truth:
    """Exact similarities of the kept pairs, sorted by key ``i * n + j`` (``i < j``)."""

    n: int
    sizes: np.ndarray          # (n,) shingle set sizes
    i: np.ndarray
    j: np.ndarray
    intersection: np.ndarray
    floor: float
    pairs_sharing: int         # pairs sharing >= 1 shingle, kept or not

    @property
    def keys(self) -> np.ndarray:
        return self.i * self.n + self.j

    @property
    def resemblance(self) -> np.ndarray:
        c = self.intersection
        return c / (self.sizes[self.i] + self.sizes[self.j] - c)

    @property
    def containment(self) -> np.ndarray:
        """max(|A∩B|/|A|, |A∩B|/|B|)."""
        return self.intersection / np.minimum(self.sizes[self.i], self.sizes[self.j])

    def similarity(self, mode: str) -> np.ndarray:
        return self.resemblance if mode == "resemblance" else self.containment

    def pairs_at(self, threshold: float, mode: str = "resemblance") -> np.ndarray:
        """Keys of the pairs whose exact similarity is ≥ threshold."""
        if threshold < self.floor:
            raise ValueError(f"threshold {threshold} is below the kept floor {self.floor}")
        return self.keys[self.similarity(mode) >= threshold - 1e-12]

    def lookup(self, keys: np.ndarray, mode: str = "resemblance") -> np.ndarray:
        """Exact similarity of the given pairs; pairs not kept are below ``floor`` (given as 0)."""
        all_keys = self.keys
        pos = np.searchsorted(all_keys, keys)
        pos = np.minimum(pos, max(len(all_keys) - 1, 0))
        found = (len(all_keys) > 0) & (all_keys[pos] == keys) if len(all_keys) else np.zeros(len(keys), bool)
        out = np.zeros(len(keys), dtype=np.float64)
        if len(all_keys):
            out[found] = self.similarity(mode)[pos[found]]
        return out


def incidence_matrix(shingle_sets: Sequence[np.ndarray]) -> sparse.csr_matrix:
    """Documents × distinct shingles, 1 where the document holds the shingle."""
    lengths = np.array([len(s) for s in shingle_sets], dtype=np.int64)
    flat = np.concatenate([np.asarray(s, dtype=np.uint64) for s in shingle_sets]) if len(shingle_sets) else np.zeros(0, np.uint64)
    _, columns = np.unique(flat, return_inverse=True)
    indptr = np.concatenate([[0], np.cumsum(lengths)])
    data = np.ones(len(flat), dtype=np.int32)
    shape = (len(shingle_sets), int(columns.max()) + 1 if len(columns) else 0)
    matrix = sparse.csr_matrix((data, columns.astype(np.int64), indptr), shape=shape)
    matrix.sum_duplicates()          # a set given with repeats still counts once
    matrix.data[:] = 1
    return matrix


def exact_truth(shingle_sets: Sequence[np.ndarray], floor: float = 0.3,
                max_work_per_block: int = 20_000_000) -> Truth:
    """Exact similarities of all pairs sharing ≥ 1 shingle; keep those with containment ≥ floor."""
    x = incidence_matrix(shingle_sets)
    n = x.shape[0]
    sizes = np.diff(x.indptr).astype(np.int64)
    xt = x.T.tocsr()                                  # shingle -> documents: the inverted index
    df = np.diff(xt.indptr).astype(np.int64)
    # work of row d in X @ X.T is the sum of the posting-list lengths of its shingles
    row_work = np.add.reduceat(df[x.indices], x.indptr[:-1]) if x.nnz else np.zeros(n, np.int64)
    row_work[sizes == 0] = 0
    x_columns = xt.tocsc()
    kept_i, kept_j, kept_c = [], [], []
    sharing = 0
    start = 0
    while start < n:
        stop = start + 1
        budget = row_work[start]
        while stop < n and budget + row_work[stop] <= max_work_per_block:
            budget += row_work[stop]
            stop += 1
        block = (x[start:stop] @ x_columns).tocoo()           # (rows, n) shared-shingle counts
        rows = block.row.astype(np.int64) + start
        cols = block.col.astype(np.int64)
        counts = block.data.astype(np.int64)
        upper = cols > rows
        rows, cols, counts = rows[upper], cols[upper], counts[upper]
        sharing += len(rows)
        keep = counts >= floor * np.minimum(sizes[rows], sizes[cols]) - 1e-9
        kept_i.append(rows[keep])
        kept_j.append(cols[keep])
        kept_c.append(counts[keep])
        start = stop
    i = np.concatenate(kept_i) if kept_i else np.zeros(0, np.int64)
    j = np.concatenate(kept_j) if kept_j else np.zeros(0, np.int64)
    c = np.concatenate(kept_c) if kept_c else np.zeros(0, np.int64)
    order = np.argsort(i * n + j, kind="stable")
    return Truth(n=n, sizes=sizes, i=i[order], j=j[order], intersection=c[order],
                 floor=floor, pairs_sharing=sharing)


def brute_force_truth(shingle_sets: Sequence[np.ndarray]) -> dict[tuple[int, int], int]:
    """Reference for tests: ``{(i, j): |A_i ∩ A_j|}`` for all pairs sharing a shingle."""
    out: dict[tuple[int, int], int] = {}
    sets = [set(np.asarray(s, dtype=np.uint64).tolist()) for s in shingle_sets]
    for a in range(len(sets)):
        for b in range(a + 1, len(sets)):
            shared = len(sets[a] & sets[b])
            if shared:
                out[(a, b)] = shared
    return out


__all__ = ["Truth", "exact_truth", "incidence_matrix", "brute_force_truth"]
