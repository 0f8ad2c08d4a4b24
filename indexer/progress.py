"""Progress of a long job: a tqdm bar on a terminal, periodic log lines otherwise.

The total (for the ETA) is the sum of the workers' counts of their slices, reported as soon
as each worker has opened its point in time.
"""

from __future__ import annotations

import logging
import time
from typing import IO, Any

from neardup.indexer.stats import JobStats

log = logging.getLogger("neardup.indexer.progress")


class Progress:
    """Base class: no output (used when progress is not wanted)."""

    def add_total(self, count: int) -> None:
        pass

    def tick(self, stats: JobStats) -> None:
        pass

    def close(self) -> None:
        pass

    @staticmethod
    def for_stream(stream: IO[str], label: str, interval: float = 10.0) -> Progress:
        isatty = getattr(stream, "isatty", None)
        if callable(isatty) and isatty():
            return BarProgress(stream, label)
        return LogProgress(label, interval)


class BarProgress(Progress):
    def __init__(self, stream: IO[str], label: str) -> None:
        from tqdm import tqdm

        self.bar: Any = tqdm(total=None, desc=label, unit="docs", file=stream, dynamic_ncols=True,
                             smoothing=0.1)
        self.shown = 0

    def add_total(self, count: int) -> None:
        self.bar.total = (self.bar.total or 0) + count
        self.bar.refresh()

    def tick(self, stats: JobStats) -> None:
        if stats.read > self.shown:
            self.bar.update(stats.read - self.shown)
            self.shown = stats.read
        self.bar.set_postfix(updated=stats.updated, conflicts=stats.conflicts_retried,
                             failed=stats.failed, refresh=False)

    def close(self) -> None:
        self.bar.close()


class LogProgress(Progress):
    """One INFO line every ``interval`` seconds: done/total, docs/s, ETA and the main counters."""

    def __init__(self, label: str, interval: float, clock: Any = time.monotonic) -> None:
        self.label = label
        self.interval = interval
        self.clock = clock
        self.started = clock()
        self.last = self.started
        self.total = 0

    def add_total(self, count: int) -> None:
        self.total += count

    def line(self, stats: JobStats, now: float) -> str:
        elapsed = max(now - self.started, 1e-9)
        rate = stats.read / elapsed
        share = f"/{self.total} ({100 * stats.read / self.total:.0f}%)" if self.total else ""
        remaining = max(self.total - stats.read, 0)
        eta = f", ETA {remaining / rate:.0f}s" if rate > 0 and self.total else ""
        return (f"{self.label}: read {stats.read}{share}, {rate:.0f} docs/s{eta}; "
                f"updated {stats.updated}, conflicts {stats.conflicts_retried}, failed {stats.failed}")

    def tick(self, stats: JobStats) -> None:
        now = self.clock()
        if now - self.last >= self.interval:
            self.last = now
            log.info("%s", self.line(stats, now))
