"""Compiled (numba) kernel of :mod:`neardup.fingerprint.verify`; imported only through
:func:`neardup.fingerprint.verify._kernel` (after :func:`neardup.fingerprint.jit.kernels` has
loaded numba).

``pair_intersections`` gives exactly the integers of
:func:`neardup.fingerprint.verify.pair_intersections_numpy` (tests/test_cluster_verify.py): a
merge of the two sorted arrays of distinct ``uint64`` values of each pair; comparisons are
between ``uint64`` values, so they are unsigned.
"""

from __future__ import annotations

from neardup.fingerprint._kernels import njit


@njit(cache=True, nogil=True)
def pair_intersections(values, offsets, a, b, out):
    """``out[p] = |values[offsets[a[p]]:offsets[a[p]+1]] ∩ values[offsets[b[p]]:offsets[b[p]+1]]|``."""
    for p in range(a.shape[0]):
        x = a[p]
        y = b[p]
        i = offsets[x]
        i_end = offsets[x + 1]
        j = offsets[y]
        j_end = offsets[y + 1]
        shared = 0
        while i < i_end and j < j_end:
            u = values[i]
            v = values[j]
            if u == v:
                shared += 1
                i += 1
                j += 1
            elif u < v:
                i += 1
            else:
                j += 1
        out[p] = shared
