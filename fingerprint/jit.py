"""Whether the compiled kernels (:mod:`fingerprint._kernels`, numba) are used, loaded lazily.

**Decision (measured; bench/RESULTS.md, "Fingerprint").** The issue's target — canonical token
lists to signatures at ≥ 10× ``datasketch.MinHash.bulk`` on one core — is out of reach for
NumPy alone. Tuned NumPy (the transposed, cache-blocked K × block MinHash of
:func:`fingerprint.hashing.minhash_batch`: 0.7 ns per (shingle, permutation) instead of 2.2 ns
for the (block × K) broadcast; two-level string join; no per-document lists) reaches about
7×: the MinHash still makes two passes over a K × S temporary, and turning token strings
into cached token hashes takes ~10 NumPy passes over the code points plus probing rounds.
The kernels keep a document's K running minima in L1 and fuse the shingle fold with the
MinHash (0.25 ns per element, one pass over the token hashes), and fuse tokenising, word ids
and cache probing into one pass over the code points: about 14× in the same run.

The kernels compute the same integers as the NumPy functions they stand in for (unsigned
64-bit wrap-around arithmetic; ``tests/test_fingerprint_jit.py`` checks bit-equality on
random and real inputs), so fingerprints never depend on whether numba is installed. The
NumPy functions stay the reference and the fallback: if numba cannot be imported, everything
runs on NumPy (with a warning).

**Cost, once per process** (CPU, measured by ``bench/fingerprint.py``): ``import numba`` ~0.3 s
and loading the cached machine code ~0.4 s, at the first call that needs a kernel — never at
``import fingerprint``, so the proxy, which only reads and compares signatures, does not load
numba at all. Compiling (~3–4 s) happens once per machine and cache directory
(``cache=True``; ``NUMBA_CACHE_DIR`` chooses the directory).
"""

from __future__ import annotations

import warnings
from types import ModuleType

_state: dict[str, ModuleType | None] = {}
_enabled = True


def kernels() -> ModuleType | None:
    """:mod:`fingerprint._kernels` if compiled kernels are enabled and importable, else None."""
    if not _enabled:
        return None
    if "module" not in _state:
        try:
            from neardup.fingerprint import _kernels
        except Exception as exc:  # ImportError, or numba failing to set up its cache
            warnings.warn(f"fingerprint: compiled kernels unavailable ({exc!r}); using NumPy", RuntimeWarning,
                          stacklevel=2)
            _state["module"] = None
        else:
            _state["module"] = _kernels
    return _state["module"]


def set_enabled(enabled: bool) -> bool:
    """Switch the compiled kernels on or off for this process (tests, benchmarks); returns the
    previous setting. Results are the same either way."""
    global _enabled
    previous, _enabled = _enabled, enabled
    return previous
