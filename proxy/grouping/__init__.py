"""Pure grouping of search hits: fingerprints and TF-IDF vectors to groups, a page, similarities.

No I/O; imports only :mod:`neardup.fingerprint` and the JSON readers of :mod:`neardup.proxy.transport`.
"""
