"""Fixed-size sketches of a TF-IDF vector, the alternatives to storing its top-k terms.

Both take a document's term hashes ``t`` (uint64) and non-negative weights ``w`` (the full,
L2-normalised TF-IDF vector). Pseudo-random numbers are derived from the term hash with the
MurmurHash3 finaliser (``fingerprint.hashing.fmix64``), so sketches are deterministic and two
documents draw the same numbers for the same term.

* **simhash** (Charikar 2002) with b bits: bit j is 1 when Σ_t w_t (2 h_j(t) - 1) > 0, h_j(t)
  the j-th pseudo-random bit of t. For random hyperplanes P[bits differ] = θ/π, θ the angle
  between the vectors, so cos θ is estimated by cos(π · Hamming / b).
* **weighted MinHash**, improved consistent weighted sampling (ICWS, Ioffe 2010), K samples.
  For sample k and every term with weight S: r, c ~ Gamma(2, 1), β ~ U(0, 1);
  t = ⌊ln S / r + β⌋, y = e^{r (t - β)}, a = c / (y e^r); the sample is (term, t) of the
  smallest a. Two documents' samples agree with probability equal to the generalised Jaccard
  Σ min(w_a, w_b) / Σ max(w_a, w_b), estimated by the share of equal samples.
"""

from __future__ import annotations

import numpy as np

from neardup.fingerprint.constants import GOLDEN
from neardup.fingerprint.hashing import fmix64

U64 = np.uint64
_SCALE = 2.0 ** -53


def _uniform(terms: np.ndarray, salt: np.ndarray) -> np.ndarray:
    """(len(salt), len(terms)) uniforms in (0, 1) from fmix64(t ⊕ salt)."""
    x = terms[None, :] ^ salt[:, None]
    fmix64(x)
    return ((x >> U64(11)).astype(np.float64) + 0.5) * _SCALE


def _salts(seed: int, count: int) -> np.ndarray:
    s = (np.arange(1, count + 1, dtype=U64) * U64(GOLDEN)) ^ U64(seed)
    return fmix64(s)


def simhash(terms: np.ndarray, weights: np.ndarray, bits: int = 64) -> np.ndarray:
    """``bits // 64`` uint64 words."""
    words = bits // 64
    out = np.zeros(words, dtype=U64)
    if len(terms) == 0:
        return out
    salts = _salts(0x51A5, words)
    for word in range(words):
        x = terms ^ salts[word]
        fmix64(x)
        bit_matrix = ((x[:, None] >> np.arange(64, dtype=U64)[None, :]) & U64(1)).astype(np.float64)
        total = weights @ (2.0 * bit_matrix - 1.0)
        out[word] = np.sum((total > 0).astype(U64) << np.arange(64, dtype=U64))
    return out


def simhash_cosine(a: np.ndarray, b: np.ndarray) -> float:
    distance = int(np.bitwise_count(a ^ b).sum())
    return float(np.cos(np.pi * distance / (64 * len(a))))


def icws(terms: np.ndarray, weights: np.ndarray, samples: int = 84, seed: int = 7) -> np.ndarray:
    """K uint64 sample ids (all-ones for an empty document)."""
    if len(terms) == 0:
        return np.full(samples, np.iinfo(np.uint64).max, dtype=U64)
    salts = _salts(seed, 5 * samples).reshape(5, samples)
    u = [_uniform(terms, salts[q]) for q in range(5)]
    r = -np.log(u[0] * u[1])
    c = -np.log(u[2] * u[3])
    beta = u[4]
    t = np.floor(np.log(weights)[None, :] / r + beta)
    y = np.exp(r * (t - beta))
    a = c / (y * np.exp(r))
    best = np.argmin(a, axis=1)
    rows = np.arange(samples)
    chosen_t = t[rows, best].astype(np.int64).view(U64)
    ids = terms[best] ^ (chosen_t * U64(GOLDEN))
    return fmix64(ids)


def icws_similarity(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.mean(a == b))
