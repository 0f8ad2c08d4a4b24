"""Pure fingerprinting core shared by the indexer and the proxy (no I/O, no asyncio)."""

from fingerprint.params import ALGORITHM_VERSION, FingerprintParams, scheme_version

__all__ = ["ALGORITHM_VERSION", "FingerprintParams", "scheme_version"]
