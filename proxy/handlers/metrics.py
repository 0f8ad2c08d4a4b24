"""In-process metrics and their Prometheus text exposition (written by :mod:`neardup.prometheus`).

Counters and histograms keyed by label tuples; one :class:`Metrics` per worker process.
With ``--workers N`` every worker also writes its snapshot to a shared folder, and the worker
answering a scrape sums all snapshots, so ``/_neardup/metrics`` shows the whole proxy.
"""

from __future__ import annotations

import json
import os
import time
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from neardup.prometheus import Labels, empty_histogram, header, histogram_lines, observe, sample

#: Latency histogram bucket upper bounds, seconds.
BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)

_HELP = {
    "neardup_proxy_requests_total": ("counter", "Requests answered, by route and HTTP status."),
    "neardup_proxy_request_duration_seconds": ("histogram", "Time from request to the end of the response, by route."),
    "neardup_proxy_searches_total": ("counter", "Searches by outcome: collapsed, passed (with the reason) or fail_open."),
    "neardup_proxy_hits_collapsed_total": ("counter", "Hits folded under inner_hits.neardup."),
    "neardup_proxy_query_fingerprints_total": ("counter", "Hits without a stored fingerprint, by outcome: computed, "
                                               "cached, or skipped (beyond a bound: left ungrouped)."),
    "neardup_proxy_enriched_documents_total": ("counter", "Documents of enriched writes by outcome: fingerprinted, "
                                               "tagged, rejected, without_text (written as sent) or "
                                               "fingerprint_removed (an update of the text)."),
    "neardup_proxy_upstream_errors_total": ("counter", "Upstream failures by kind (unreachable, timeout, broken)."),
    "neardup_proxy_fail_open_total": ("counter", "Responses returned uncollapsed because collapsing failed."),
    "neardup_proxy_rejected_total": ("counter", "Requests refused with 429 because proxy.max_in_flight were in flight."),
    "neardup_proxy_in_flight_requests": ("gauge", "Requests being handled now."),
}

class Metrics:
    def __init__(self, snapshot_dir: str | None = None) -> None:
        self.counters: dict[str, dict[Labels, float]] = defaultdict(lambda: defaultdict(float))
        self.histograms: dict[Labels, list[float]] = {}  # bucket counts + [sum, count]
        self.in_flight = 0
        self.snapshot_dir = snapshot_dir
        self._last_snapshot = 0.0
        #: the label keys of :meth:`answered`, by (route, status), and of :meth:`searched`, by
        #: outcome: made once, not per request
        self._answer_keys: dict[tuple[str, int], tuple[Labels, Labels]] = {}
        self._outcome_keys: dict[str, Labels] = {}

    def inc(self, name: str, amount: float = 1.0, **labels: str) -> None:
        self.counters[name][tuple(sorted(labels.items()))] += amount

    def observe(self, seconds: float, **labels: str) -> None:
        self._observe_at(tuple(sorted(labels.items())), seconds)

    def _observe_at(self, key: Labels, seconds: float) -> None:
        row = self.histograms.get(key)
        if row is None:
            row = self.histograms[key] = empty_histogram(BUCKETS)
        observe(row, BUCKETS, seconds)

    def answered(self, route: str, status: int, seconds: float) -> None:
        """One answered request: ``neardup_proxy_requests_total`` by route and status, and its
        duration by route (the same series as :meth:`inc` and :meth:`observe` with those labels)."""
        keys = self._answer_keys.get((route, status))
        if keys is None:
            keys = self._answer_keys[(route, status)] = (
                tuple(sorted({"route": route, "status": str(status)}.items())), (("route", route),))
        self.counters["neardup_proxy_requests_total"][keys[0]] += 1.0
        self._observe_at(keys[1], seconds)

    def searched(self, outcome: str) -> None:
        """One search's outcome (``collapsed``, ``passed:<reason>``, ``fail_open``...):
        ``neardup_proxy_searches_total`` by outcome and reason (the same series as :meth:`inc`
        with those labels)."""
        key = self._outcome_keys.get(outcome)
        if key is None:
            kind, _, reason = outcome.partition(":")
            key = self._outcome_keys[outcome] = tuple(sorted({"outcome": kind, "reason": reason}.items()))
        self.counters["neardup_proxy_searches_total"][key] += 1.0

    # -- multi-worker -------------------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        return {
            "counters": {name: [[list(map(list, k)), v] for k, v in series.items()]
                         for name, series in self.counters.items()},
            "histograms": [[list(map(list, k)), row] for k, row in self.histograms.items()],
            "in_flight": self.in_flight,
        }

    def maybe_write_snapshot(self, force: bool = False) -> None:
        """Write this worker's snapshot at most once a second (atomic rename)."""
        if not self.snapshot_dir:
            return
        now = time.monotonic()
        if not force and now - self._last_snapshot < 1.0:
            return
        self._last_snapshot = now
        path = Path(self.snapshot_dir) / f"{os.getpid()}.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.snapshot()))
        os.replace(tmp, path)

    def combined(self) -> Metrics:
        """This worker's metrics plus the latest snapshots of the other workers."""
        if not self.snapshot_dir:
            return self
        total = Metrics()
        snapshots = [self.snapshot()]
        for path in Path(self.snapshot_dir).glob("*.json"):
            if path.stem == str(os.getpid()):
                continue
            try:
                snapshots.append(json.loads(path.read_text()))
            except (OSError, ValueError):
                continue
        for snap in snapshots:
            for name, series in snap["counters"].items():
                for key, value in series:
                    total.counters[name][tuple(tuple(p) for p in key)] += value
            for key, row in snap["histograms"]:
                labels = tuple(tuple(p) for p in key)
                mine = total.histograms.setdefault(labels, empty_histogram(BUCKETS))
                for k, value in enumerate(row):
                    mine[k] += value
            total.in_flight += snap["in_flight"]
        return total

    # -- exposition ---------------------------------------------------------------------
    def render(self) -> str:
        lines: list[str] = []
        for name, (kind, text) in _HELP.items():
            lines += header(name, kind, text)
            if name == "neardup_proxy_in_flight_requests":
                lines.append(sample(name, self.in_flight))
            elif kind == "histogram":
                lines.extend(self._render_histogram(name))
            else:
                series = self.counters.get(name, {})
                if not series and not _has_labels(name):
                    lines.append(sample(name, 0))
                for key, value in sorted(series.items()):
                    lines.append(sample(name, value, key))
        return "\n".join(lines) + "\n"

    def _render_histogram(self, name: str) -> Iterable[str]:
        for key, row in sorted(self.histograms.items()):
            yield from histogram_lines(name, key, BUCKETS, row)


def _has_labels(name: str) -> bool:
    return name not in ("neardup_proxy_hits_collapsed_total", "neardup_proxy_fail_open_total",
                        "neardup_proxy_rejected_total")
