"""The 64-bit constants of the hashing scheme, shared by the NumPy functions and the compiled kernels.

Both compute the same integers (:mod:`neardup.fingerprint.hashing` is the reference), so both
read their constants from here. Changing any of them changes every fingerprint: the scheme
version (:class:`~neardup.fingerprint.params.FingerprintParams`) must change with it.
"""

MASK64 = (1 << 64) - 1
#: φ = 2^64 / golden ratio: spreads a small integer (a length, a group index) over 64 bits.
GOLDEN = 0x9E3779B97F4A7C15
#: The multipliers of MurmurHash3's 64-bit finaliser ``fmix64``.
FMIX_C1 = 0xFF51AFD7ED558CCD
FMIX_C2 = 0xC4CEB9FE1A85EC53
#: The base of the word-id polynomial: the 64-bit FNV prime, odd, with well-spread bits.
WORD_BASE = 0x100000001B3
