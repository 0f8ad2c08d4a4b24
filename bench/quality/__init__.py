"""Helpers of ``bench/quality.py``: exact ground truth, the compared methods, metrics, edits, plots.

Everything here is pure computation on arrays (no I/O besides the plot writer), so the small
tests in ``tests/test_quality*.py`` can check it on tiny inputs.
"""
