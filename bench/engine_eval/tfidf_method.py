"""TF-IDF cosine over lemmas as a method of ``bench/quality.py`` (its ``EXTRA_METHODS`` hook).

Build: term counts of each document's canonical tokens, corpus statistics of the whole corpus,
then each document's stored vector (``fingerprint.tfidf``, default parameters: top-k terms,
16-bit weights). Query: all pairs with cosine ≥ t, computed as a sparse X·Xᵀ in row blocks
(scipy; the product's ``cosine_pairs`` does the same with NumPy for the ≤ 1000 hits of a search
response and is checked against it on a sample). Reported pairs are scored against the exact
*resemblance* truth like every other method: cosine and Jaccard are different scales, so the
same t does not mean the same thing (see the TF-IDF section of ``docs/benchmarks.md``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import numpy as np
from quality.methods import MethodRun, timed
from quality.pairs import pair_keys
from scipy import sparse

NAME = "TF-IDF cosine over lemmas"


def vector_matrix(vectors) -> sparse.csr_matrix:
    """Documents × distinct terms, each row the L2-normalised weights of one vector."""
    lengths = np.array([len(v) for v in vectors], dtype=np.int64)
    terms = np.concatenate([v.terms for v in vectors]) if len(vectors) else np.zeros(0, np.uint64)
    _, columns = np.unique(terms, return_inverse=True)
    norms = np.array([v.norm() or 1.0 for v in vectors])
    data = np.concatenate([v.weights for v in vectors]).astype(np.float64) / np.repeat(norms, lengths)
    indptr = np.concatenate([[0], np.cumsum(lengths)])
    return sparse.csr_matrix((data, columns.astype(np.int64), indptr),
                             shape=(len(vectors), int(columns.max()) + 1 if len(columns) else 0))


def sparse_cosine_pairs(matrix: sparse.csr_matrix, threshold: float, block: int = 2000
                        ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """All pairs i < j with cosine ≥ threshold (> 0), row block by row block."""
    n = matrix.shape[0]
    transposed = matrix.T.tocsc()
    out_i, out_j, out_s = [], [], []
    for start in range(0, n, block):
        product = (matrix[start:start + block] @ transposed).tocoo()
        rows = product.row.astype(np.int64) + start
        cols = product.col.astype(np.int64)
        keep = (cols > rows) & (product.data >= threshold - 1e-12) & (product.data > 0)
        out_i.append(rows[keep])
        out_j.append(cols[keep])
        out_s.append(np.minimum(product.data[keep], 1.0))
    return np.concatenate(out_i), np.concatenate(out_j), np.concatenate(out_s)


def run_tfidf(corpus, thresholds: Sequence[float]) -> MethodRun:
    from neardup.config import load_config
    from neardup.fingerprint import Fingerprinter
    from neardup.fingerprint.tfidf import CorpusStats, TfidfWeigher, cosine_pairs

    weigher = TfidfWeigher(Fingerprinter(load_config().fingerprint))

    def build():
        counts = [weigher.counts_of_tokens(t) for t in corpus.tokens]
        stats = CorpusStats.of(c.terms for c in counts)
        return [weigher.vector(c, stats) for c in counts]

    vectors, build_s = timed(build)
    matrix = vector_matrix(vectors)
    n = len(vectors)
    (i, j, sim), query_s = timed(sparse_cosine_pairs, matrix, min(thresholds))
    # the product's all-pairs function on a sample of 600 documents must agree
    sample = np.arange(0, n, max(1, n // 600))[:600]
    si, sj, _ = cosine_pairs([vectors[k] for k in sample], min(thresholds))
    inside = np.isin(i, sample) & np.isin(j, sample)
    position = {int(d): p for p, d in enumerate(sample)}
    expected = {(position[int(a)], position[int(b)]) for a, b in zip(i[inside], j[inside])}
    if expected != set(zip(si.tolist(), sj.tolist())):
        raise SystemExit("neardup.fingerprint.tfidf.cosine_pairs disagrees with the sparse product on a sample")
    run = MethodRun(name=NAME, mode="resemblance", build_seconds=build_s, query_seconds=query_s)
    for t in thresholds:
        keep = sim >= t - 1e-12
        run.pairs[t] = pair_keys(i[keep], j[keep], n)
    stored = [len(json.dumps(v.to_source(), separators=(",", ":"))) for v in vectors[::max(1, n // 200)]]
    run.bytes_per_doc = float(np.mean([len(v) * 10 for v in vectors]))
    run.note = (f"top {weigher.params.top_k} terms, 16-bit weights, cosine ≥ t (not Jaccard: compare by F1 "
                f"curve, not at equal t); stores {np.mean(stored):.0f} bytes of JSON in doc[\"neardup\"][\"tf\"]")
    return run
