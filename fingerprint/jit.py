"""Whether the compiled (numba) kernels of :mod:`neardup.fingerprint._kernels` are used; lazy loading.

The NumPy functions of :mod:`neardup.fingerprint.hashing` and
:mod:`neardup.fingerprint.wordcache` are the reference; the kernels stand in for their hot
loops. NumPy has to make several passes over a K × S temporary for the MinHash, and several
passes over the code points to turn token strings into cached token hashes. A kernel keeps a
document's K running minima in L1 cache and folds each shingle and takes its minima in one pass
over the token hashes, and tokenises, computes word ids and probes the word cache in one pass
over the code points.

The kernels compute the same integers as the NumPy functions they stand in for (unsigned
64-bit wrap-around arithmetic; ``tests/test_fingerprint_jit.py`` checks bit-equality on
random and real inputs), so fingerprints never depend on whether numba is installed. If numba
cannot be imported, everything runs on NumPy (with a warning).

numba is imported at the first call that needs a kernel, never at ``import neardup.fingerprint``,
so a process that only reads and compares signatures (the proxy) never loads it. The machine
code is compiled once per machine and cache directory and loaded from there by later processes
(``cache=True``; ``NUMBA_CACHE_DIR`` chooses the directory).
"""

from __future__ import annotations

import threading
import warnings
from types import ModuleType

_state: dict[str, ModuleType | None] = {}
_enabled = True
_thread = threading.local()


def kernels() -> ModuleType | None:
    """:mod:`neardup.fingerprint._kernels` if compiled kernels are enabled and importable, else
    None."""
    if not _enabled or getattr(_thread, "off", False):
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


def disable_in_this_thread() -> None:
    """Switch the compiled kernels off for the calling thread only (a thread that fingerprints
    in a process that must not load numba, while other threads may use them)."""
    _thread.off = True
