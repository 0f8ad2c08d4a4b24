"""Helpers of ``bench/engines.py``: rewrite edits, sketches over TF-IDF weights, separation
scores, and the TF-IDF method for ``bench/quality.py`` (its ``EXTRA_METHODS`` hook)."""
