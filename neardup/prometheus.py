"""Writing the Prometheus text exposition format (version 0.0.4), shared by the proxy's and the
indexer's metrics.

A series is a metric name, a label set (a sorted tuple of ``(name, value)`` pairs) and a number.
A histogram is stored as its bucket counts (not cumulative, one per upper bound) followed by the
sum and the count of the observations; :func:`histogram_lines` writes the cumulative
``_bucket`` series, ``_sum`` and ``_count``.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator, Sequence

#: A series' labels: sorted ``(name, value)`` pairs.
Labels = tuple[tuple[str, str], ...]

#: Content-Type of the text exposition format.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def header(name: str, kind: str, text: str) -> list[str]:
    """The ``# HELP`` and ``# TYPE`` lines of a metric (``kind``: counter, gauge, histogram)."""
    return [f"# HELP {name} {text}", f"# TYPE {name} {kind}"]


def sample(name: str, value: float, key: Labels = ()) -> str:
    """One series line: ``name{labels} value``."""
    return f"{name}{labels(key)} {number(value)}"


def escape(value: str) -> str:
    """A label value with backslash, newline and double quote escaped."""
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def labels(key: Labels) -> str:
    if not key:
        return ""
    return "{" + ",".join(f'{k}="{escape(str(v))}"' for k, v in key) + "}"


def number(value: float) -> str:
    """Whole numbers without a fraction, others as Python's shortest round-trip repr."""
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def empty_histogram(bounds: Sequence[float]) -> list[float]:
    """A histogram row with no observation: one count per bound, then sum and count."""
    return [0.0] * (len(bounds) + 2)


def observe(row: list[float], bounds: Sequence[float], value: float) -> None:
    """Add one observation to ``row`` (see :func:`empty_histogram`)."""
    position = bisect_left(bounds, value)
    if position < len(bounds):
        row[position] += 1
    row[-2] += value
    row[-1] += 1


def histogram_lines(name: str, key: Labels, bounds: Sequence[float], row: Sequence[float]) -> Iterator[str]:
    """The ``_bucket`` (cumulative, ``+Inf`` last), ``_sum`` and ``_count`` lines of one histogram."""
    cumulative = 0.0
    for bound, count in zip(bounds, row):
        cumulative += count
        yield f"{name}_bucket{labels(key + (('le', number(bound)),))} {number(cumulative)}"
    yield f"{name}_bucket{labels(key + (('le', '+Inf'),))} {number(row[-1])}"
    yield f"{name}_sum{labels(key)} {row[-2]!r}"
    yield f"{name}_count{labels(key)} {number(row[-1])}"
