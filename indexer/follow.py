"""``neardup index --follow``: keep fingerprinting the documents written to an index.

After the same checks and mapping as the batch job (:func:`neardup.indexer.job.prepare`), one
process runs *passes* every ``interval`` seconds until SIGTERM or SIGINT. A pass opens a point in
time, reads the batch job's selection (documents without a current fingerprint: new, re-indexed,
or of an older scheme) page by page, fingerprints them and writes them back with the batch job's
conditional partial updates (:class:`~neardup.indexer.writer.BulkUpdater`: a document changed
meanwhile is read again, one deleted stays deleted, no other field is touched), then refreshes
the index so the fingerprints are searchable at once (unless ``--no-refresh``).

With ``--since-field FIELD`` a pass also reads the documents updated since the previous pass's
high-water mark (:mod:`neardup.indexer.watermark`) and rewrites the fingerprint of those whose
text changed, found by comparing the fingerprint of the text with the stored one
(:func:`neardup.indexer.enrich.fingerprint_changed`: scheme version, signature and shingle
count); versions it settled are not fingerprinted again (:mod:`neardup.indexer.recent`).

Failures. A pass the cluster fails (unreachable, 429/5xx through every retry, shards missing
after a restart, any other error answer) is abandoned: what it wrote stays written, the rest is
read again by a later pass. The follower logs one WARNING when such failures begin and one INFO
line when a pass succeeds again, waits with exponential backoff (capped at
:data:`MAX_BACKOFF`) and never exits for them. A stop signal ends the page in hand (or abandons
it during a backoff: its conditional updates are either written or not) and returns.
"""

from __future__ import annotations

import logging
import random
import signal
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from neardup.config import Config
from neardup.fingerprint import FIELD, Fingerprinter, scheme_version
from neardup.indexer.client import Client, display_url, make_client
from neardup.indexer.cluster.seeds import Seeder, SeedPlan
from neardup.indexer.enrich import STORED_PATHS, fingerprint_changed
from neardup.indexer.errors import ClusterApiError, ClusterError, JobError, resume_hint
from neardup.indexer.follow_metrics import FollowMetrics, serve_metrics
from neardup.indexer.job import IndexOptions, count_page, fingerprint_function
from neardup.indexer.query import TF_VERSION_PATH, SliceSpec, selection, with_any_field
from neardup.indexer.reader import SliceReader
from neardup.indexer.recent import RecentVersions, hit_version
from neardup.indexer.retry import Retrier, backoff_delay, short_cause
from neardup.indexer.stats import JobStats
from neardup.indexer.tfidf_vectors import make_enricher
from neardup.indexer.watermark import aggregated_max, max_aggregation, timestamp_millis, window_query, window_start
from neardup.indexer.writer import BulkUpdater, Pending
from neardup.upstream import ClusterInfo

log = logging.getLogger(__name__)

#: Longest wait, seconds, between two attempts while the cluster fails.
MAX_BACKOFF = 10.0
#: Retries of one request inside a pass before the pass is abandoned.
PASS_RETRIES = 3


class Stopping(Exception):
    """A stop signal came while the follower was waiting."""


@dataclass(frozen=True)
class FollowOptions:
    #: seconds between the start of two passes
    interval: float = 1.0
    #: seconds the ``--since-field`` window reaches back before the high-water mark
    overlap: float = 5.0
    #: serve ``GET /metrics`` here (None: no metrics server)
    metrics_port: int | None = None
    metrics_host: str = "127.0.0.1"


@dataclass
class FollowResult:
    stats: JobStats
    elapsed: float
    passes: int
    #: passes the cluster failed (each retried after a backoff)
    failed_passes: int

    def to_dict(self) -> dict[str, Any]:
        return {"elapsed": round(self.elapsed, 3), "passes": self.passes, "failed_passes": self.failed_passes,
                **self.stats.to_dict()}


class Follower:
    """The state kept from pass to pass: client, fingerprinter, writer, high-water mark, metrics."""

    def __init__(self, config: Config, options: IndexOptions, follow: FollowOptions, cluster: ClusterInfo,
                 seeds: SeedPlan | None, metrics: FollowMetrics, stop: threading.Event) -> None:
        self.options = options
        self.follow = follow
        self.metrics = metrics
        self.stop = stop
        self.stats = JobStats()
        self.client: Client = make_client(config.upstream, cluster)
        self.retrier = Retrier(display_url(config.upstream), PASS_RETRIES, sleep=self._sleep, log_level=logging.DEBUG)
        fingerprinter = Fingerprinter(config.fingerprint)
        self.version = scheme_version(config.fingerprint)
        self.tfidf = make_enricher(config, self.client, self.retrier, fingerprinter) if config.tfidf.enabled else None
        tf_version = self.tfidf.version if self.tfidf is not None else None
        self.selection = with_any_field(selection(version=self.version, force=False, since=options.since,
                                                  since_field=options.since_field, tf_version=tf_version),
                                        options.fields)
        window = (options.window_field,) if options.window_field else ()
        self.source_fields = (tuple(options.fields) + STORED_PATHS + window
                              + ((TF_VERSION_PATH,) if self.tfidf is not None else ()))
        seeder = Seeder(self.client, self.retrier, seeds, config.indexer.max_retries, self.stats.failures) if seeds else None
        self.updater = BulkUpdater(self.client, self.retrier,
                                   fingerprint_function(options.fields, fingerprinter, self.tfidf), self.source_fields,
                                   config.indexer.max_retries, self.stats, seeder, on_settled=self._settled)
        self.keep_alive = config.indexer.keep_alive
        self.high_water: float | None = None
        self.recent = RecentVersions()
        self.passes = 0
        self.failed_passes = 0
        self.refresh = options.refresh
        #: per pass: the ``--since-field`` time (epoch ms) of each document to write, and of each written
        self._updated_at: dict[tuple[str, str], float | None] = {}
        self._written: list[float | None] = []
        self._pass_started: float | None = None
        self._previous_pass_started: float | None = None

    def close(self) -> None:
        self.client.close()

    # -- the loop -------------------------------------------------------------------------
    def run(self) -> None:
        """Passes every ``interval`` seconds until ``stop`` is set; cluster failures back off."""
        failures = 0
        while not self.stop.is_set():
            started = time.monotonic()
            try:
                self.run_pass()
            except Stopping:
                break
            except (ClusterError, JobError) as exc:
                failures += 1
                self.failed_passes += 1
                self.metrics.pass_failed()
                self._report_failure(exc, failures)
                if self.stop.wait(backoff_delay(failures - 1, self.follow.interval, MAX_BACKOFF, random.Random())):
                    break
                continue
            if failures:
                log.info("following %s again after %d failed passes", self.options.index, failures)
                failures = 0
            self.stop.wait(max(0.0, self.follow.interval - (time.monotonic() - started)))

    def _report_failure(self, exc: BaseException, failures: int) -> None:
        # a follower resumes by itself: the batch job's hint to run the command again does not apply
        cause = short_cause(exc) if isinstance(exc, ClusterError) else str(exc).replace(f"; {resume_hint()}", "")
        if failures == 1:
            log.warning("following %s: %s; trying again with backoff (up to %.0fs) until it works",
                        self.options.index, cause, MAX_BACKOFF)
        else:
            log.debug("following %s: still failing (%d passes): %s", self.options.index, failures, cause)

    def _sleep(self, seconds: float) -> None:
        if self.stop.wait(seconds):
            raise Stopping()

    # -- one pass -------------------------------------------------------------------------
    def run_pass(self) -> None:
        self._previous_pass_started, self._pass_started = self._pass_started, time.time()
        before, read_before = self.stats.updated, self.stats.read
        failed_before = self.stats.failed
        reader = SliceReader(self.client, self.retrier, self.options.index, self.selection,
                             SliceSpec(self.options.host_slice, self.options.host_slices),
                             self.options.batch_size, self.keep_alive, self.source_fields)
        self._updated_at, self._written = {}, []
        reader.open()
        try:
            newest = None
            if self.options.window_field:
                newest = aggregated_max(reader.aggregate({"match_all": {}}, max_aggregation(self.options.window_field)))
                start = window_start(self.high_water, newest, self.follow.overlap)
                self.recent.prune(start, time.monotonic())
                reader.query = window_query(self.selection, self.options.window_field, start)
            pages = reader.pages()
            while not self.stop.is_set():
                reading = time.perf_counter()
                hits = next(pages, None)
                self.stats.read_seconds += time.perf_counter() - reading
                if hits is None:
                    break
                self._write_page(hits)
        finally:
            reader.close()
        if newest is not None:
            self.high_water = max(newest, self.high_water or newest)
        written = self.stats.updated - before
        if written and self.refresh:
            self._refresh()
        self.passes += 1
        self.metrics.pass_done(self._lags(time.time()))
        log.debug("pass %d on %s: %d documents read, %d fingerprints written in %.2fs (so far: fingerprinting "
                  "%.1fs, reads %.1fs, writes %.1fs)", self.passes, self.options.index, self.stats.read - read_before,
                  written, time.time() - self._pass_started, self.stats.fingerprint_seconds,
                  self.stats.read_seconds, self.stats.write_seconds)
        if self.stats.failed > failed_before:
            log.warning("%d documents of %s could not be fingerprinted in this pass (see the summary at exit)",
                        self.stats.failed - failed_before, self.options.index)

    def _write_page(self, hits: list[dict[str, Any]]) -> None:
        todo = [hit for hit in hits if not self.recent.known(hit)]
        self.stats.read += len(todo)
        if self.tfidf is not None:
            self.stats.tfidf_counted += count_page(self.tfidf, todo, self.options.fields)
        pending: list[Pending] = []
        for hit in todo:
            item = self.updater.pending_from_hit(hit)
            source = hit.get("_source") or {}
            if item is None:
                self._remember(hit, {hit_version(hit)})  # no text: not fingerprinted again for a while
                continue
            if self.options.window_field and self._current(source, item):
                self.stats.unchanged += 1  # in the window, its text unchanged
                self._remember(hit, {hit_version(hit)})
                continue
            self._updated_at[(item.index, item.id)] = self._updated(source)
            pending.append(item)
        updated, failed = self.stats.updated, self.stats.failed
        self.updater.write(pending)
        self.metrics.written(self.stats.updated - updated, self.stats.failed - failed)

    def _current(self, source: Mapping[str, Any], item: Pending) -> bool:
        """Whether the stored ``neardup`` is what the text gives now (and, with TF-IDF, of its version)."""
        stored = source.get(FIELD)
        return not fingerprint_changed(stored, item.neardup) and (self.tfidf is None or self.tfidf.is_current(stored))

    def _settled(self, item: Pending, answer: Mapping[str, Any]) -> None:
        """An update acknowledged: remember the version read and the version written."""
        versions = {(item.seq_no, item.primary_term)}
        if "_seq_no" in answer and "_primary_term" in answer:
            versions.add((int(answer["_seq_no"]), int(answer["_primary_term"])))
        updated = self._updated_at.get((item.index, item.id))
        self.recent.remember((item.index, item.id), versions, updated, time.monotonic())
        if answer.get("result") != "noop":
            self._written.append(updated)

    def _remember(self, hit: Mapping[str, Any], versions: set[tuple[int, int]]) -> None:
        updated = self._updated(hit.get("_source") or {})
        self.recent.remember((hit["_index"], hit["_id"]), versions, updated, time.monotonic())

    def _updated(self, source: Mapping[str, Any]) -> float | None:
        """The document's ``--since-field`` time (epoch ms), None without one."""
        return timestamp_millis(source, self.options.window_field) if self.options.window_field else None

    def _refresh(self) -> None:
        try:
            self.retrier.call("refreshing", lambda: self.client.indices.refresh(index=self.options.index))
        except ClusterApiError as exc:
            if exc.status != 403:
                raise
            self.refresh = False
            log.warning("could not refresh %s (%s): fingerprints become searchable with the index's "
                        "periodic refresh", self.options.index, exc.reason)

    def _lags(self, now: float) -> list[float]:
        """Seconds from each document's write to now (:mod:`neardup.indexer.follow_metrics`)."""
        if self.options.window_field:
            return [now - millis / 1000.0 for millis in self._written if millis is not None]
        if self._previous_pass_started is None:
            return []
        return [now - self._previous_pass_started] * len(self._written)


# --- the job ----------------------------------------------------------------------------------

@contextmanager
def stop_on_signals(stop: threading.Event) -> Iterator[None]:
    """Set ``stop`` on SIGTERM and SIGINT (from the main thread only), restoring the handlers after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    signals = (signal.SIGINT, signal.SIGTERM)
    previous = {sig: signal.getsignal(sig) for sig in signals}

    def handler(signum: int, frame: Any) -> None:
        log.info("stopping on %s after the page in hand", signal.Signals(signum).name)
        stop.set()

    for sig in signals:
        signal.signal(sig, handler)
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def run_follow(config: Config, options: IndexOptions, follow: FollowOptions, cluster: ClusterInfo,
               seeds: SeedPlan | None, metrics: FollowMetrics | None = None,
               stop: threading.Event | None = None) -> FollowResult:
    """Follow ``options.index`` until ``stop`` is set (SIGTERM/SIGINT set it); the caller has run
    :func:`~neardup.indexer.job.prepare`."""
    stop = stop or threading.Event()
    metrics = metrics or FollowMetrics()
    started = time.perf_counter()
    follower = Follower(config, options, follow, cluster, seeds, metrics, stop)
    server = serve_metrics(metrics, follow.metrics_host, follow.metrics_port) if follow.metrics_port is not None else None
    log.info("following %s every %.1fs%s", options.index, follow.interval,
             f"; metrics at http://{follow.metrics_host}:{server.server_address[1]}/metrics" if server else "")
    try:
        with stop_on_signals(stop):
            follower.run()
    finally:
        follower.stats.transient_retries = follower.retrier.retries
        follower.close()
        if server is not None:
            server.shutdown()
            server.server_close()
    return FollowResult(follower.stats, time.perf_counter() - started, follower.passes, follower.failed_passes)
