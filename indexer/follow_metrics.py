"""The metrics of ``neardup index --follow`` and the HTTP endpoint that serves them.

``GET /metrics`` answers the Prometheus text exposition (:mod:`neardup.prometheus`); the server
is the standard library's, on a thread of its own, so a scrape never waits for a pass.

Lag is the time from a document's write to its fingerprint being searchable (the refresh after
the pass that wrote it). With ``--since-field`` it is measured per document, from its
``FIELD``; without, the write time is unknown, and a document first seen in a pass was not yet
searchable when the previous pass began: the time since then is its upper bound.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from neardup.prometheus import CONTENT_TYPE, empty_histogram, header, histogram_lines, observe, sample

#: Lag histogram bucket upper bounds, seconds.
LAG_BUCKETS = (0.5, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0, 30.0, 60.0, 300.0, 3600.0)
#: Seconds over which the documents-per-second gauge is averaged.
RATE_WINDOW = 60.0

_COUNTERS = {
    "neardup_follow_documents_fingerprinted_total": "Documents whose fingerprint was written.",
    "neardup_follow_documents_failed_total": "Documents that could not be written (see the log).",
    "neardup_follow_passes_total": "Passes completed (read, fingerprint, write, refresh).",
    "neardup_follow_pass_failures_total": "Passes abandoned because the cluster failed; retried after a backoff.",
}
_GAUGES = {
    "neardup_follow_documents_per_second": f"Documents fingerprinted per second over the last {RATE_WINDOW:.0f} s.",
    "neardup_follow_lag_max_seconds": "Largest lag of the last pass that wrote fingerprints.",
    "neardup_follow_last_pass_timestamp_seconds": "Unix time the last pass completed.",
}
_LAG = "neardup_follow_lag_seconds"
_LAG_HELP = "Seconds from a document's write to its fingerprint being searchable."


class FollowMetrics:
    """Counters of a follower; updated by the loop, read by the metrics server (thread-safe)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self.wall = wall
        self.counters = dict.fromkeys(_COUNTERS, 0.0)
        self.lag = empty_histogram(LAG_BUCKETS)
        self.lag_max = 0.0
        self.last_pass = 0.0
        self._recent: deque[tuple[float, int]] = deque()
        self._lock = threading.Lock()

    def written(self, count: int, failed: int) -> None:
        with self._lock:
            self.counters["neardup_follow_documents_fingerprinted_total"] += count
            self.counters["neardup_follow_documents_failed_total"] += failed
            if count:
                self._recent.append((self.clock(), count))

    def pass_done(self, lags: Iterable[float]) -> None:
        with self._lock:
            self.counters["neardup_follow_passes_total"] += 1
            self.last_pass = self.wall()
            values = list(lags)
            for value in values:
                observe(self.lag, LAG_BUCKETS, max(value, 0.0))
            if values:
                self.lag_max = max(max(values), 0.0)

    def pass_failed(self) -> None:
        with self._lock:
            self.counters["neardup_follow_pass_failures_total"] += 1

    def rate(self) -> float:
        """Documents per second over the last :data:`RATE_WINDOW` seconds."""
        now = self.clock()
        while self._recent and self._recent[0][0] < now - RATE_WINDOW:
            self._recent.popleft()
        return sum(count for _, count in self._recent) / RATE_WINDOW

    def render(self) -> str:
        with self._lock:
            lines: list[str] = []
            for name, text in _COUNTERS.items():
                lines += [*header(name, "counter", text), sample(name, self.counters[name])]
            gauges = {"neardup_follow_documents_per_second": self.rate(),
                      "neardup_follow_lag_max_seconds": self.lag_max,
                      "neardup_follow_last_pass_timestamp_seconds": self.last_pass}
            for name, text in _GAUGES.items():
                lines += [*header(name, "gauge", text), sample(name, gauges[name])]
            lines += header(_LAG, "histogram", _LAG_HELP)
            lines += histogram_lines(_LAG, (), LAG_BUCKETS, self.lag)
        return "\n".join(lines) + "\n"


def serve_metrics(metrics: FollowMetrics, host: str, port: int) -> ThreadingHTTPServer:
    """Serve ``GET /metrics`` on ``host:port`` (port 0: any free one, see ``server_address``)
    from a daemon thread; ``shutdown()`` and ``server_close()`` the result to stop."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the name http.server calls
            if self.path.split("?", 1)[0] != "/metrics":
                self.send_error(404, "only /metrics is served here")
                return
            body = metrics.render().encode("utf-8")
            self.send_response(200)
            self.send_header("Content-Type", CONTENT_TYPE)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass  # scrapes are not worth a log line each

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="neardup-follow-metrics", daemon=True).start()
    return server
