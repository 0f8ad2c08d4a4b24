"""``neardup index``: fingerprint every document of an index in place.

Parent process: checks the upstream, reads and checks the mapping (``neardup`` sub-fields,
the text fields, the ``--since`` field) and only then puts the missing ``neardup``
sub-fields; starts one worker process per slice, shows progress, prints the summary.

Worker process (one per Elasticsearch slice, see :mod:`neardup.indexer.query`): its own client, its
own :class:`~neardup.fingerprint.Fingerprinter`, its own point in time. It counts its slice (for
the ETA) and the documents left out as already current, then reads pages with
``search_after``, fingerprints them and writes them back conditionally: whole documents where
the index stores ``_source`` as sent, partial updates elsewhere, in bulk requests gathered over
pages (:meth:`~neardup.indexer.writer.BulkUpdater.queue`). It reports counters to the parent
after every page, stops after the page in hand (writing what it gathered) when asked to
(Ctrl-C, another worker failed) and stops at once when the parent is gone (the job was killed:
nothing is left running).

Nothing is kept outside Elasticsearch: a killed job is resumed by running it again, since
the selection leaves out documents that already carry the current scheme version.

Cluster seeds: while the index has never been clustered, each fingerprint is written together
with the values ``neardup cluster`` gives a singleton; the parent decides whether seeds are
possible (:func:`seed_plan`), every worker checks after each acknowledged bulk request
(:mod:`neardup.indexer.cluster.seeds`). Once the index has clusters, a changed fingerprint clears the
cluster values instead.
"""

from __future__ import annotations

import ctypes
import logging
import multiprocessing
import os
import queue
import signal
import sys
import threading
import time
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from neardup.config import Config, collapse_settings_for
from neardup.fingerprint import FIELD, Fingerprinter, scheme_version
from neardup.fingerprint.tfidf import TF_FIELD
from neardup.indexer.client import Client, display_url, make_client
from neardup.indexer.cluster.seeds import Seeder, SeedPlan, plan_mapping_with_seeds, seed_plan
from neardup.indexer.enrich import STORED_PATHS, cleared_keys, compute_fingerprint
from neardup.indexer.errors import ClusterApiError, ClusterError, JobError, error_type_and_reason, explain
from neardup.indexer.mapping import field_paths, put_neardup_mapping, text_fields
from neardup.indexer.progress import Progress
from neardup.indexer.query import TF_VERSION_PATH, SliceSpec, already_current, plan_slices, selection
from neardup.indexer.reader import SliceReader, check_page_order
from neardup.indexer.retry import Retrier
from neardup.indexer.stats import JobStats
from neardup.indexer.tfidf_vectors import TfidfEnricher, make_enricher, neardup_of, source_texts, tf_properties
from neardup.indexer.watermark import WINDOW_TYPES
from neardup.indexer.wholedoc import whole_document_indices
from neardup.indexer.writer import WRITE_PAGES, BulkUpdater, refresh_written
from neardup.upstream import ClusterInfo, check_upstream

log = logging.getLogger(__name__)

#: Read with each document when TF-IDF is on: whether it was counted under the current version.

DATE_TYPES = frozenset({"date", "date_nanos", "long", "integer", "unsigned_long", "double", "float",
                        "scaled_float"})


@dataclass(frozen=True)
class IndexOptions:
    index: str
    fields: tuple[str, ...]
    since: str | None = None
    since_field: str = "@timestamp"
    force: bool = False
    host_slice: int = 0
    host_slices: int = 1
    workers: int = 2
    batch_size: int = 500
    #: refresh the index at the end, so that what the job wrote is searchable when it returns
    refresh: bool = True
    #: the update-timestamp field of ``--follow --since-field`` (:mod:`neardup.indexer.watermark`)
    window_field: str | None = None
    #: write whole documents where the index allows it (:mod:`neardup.indexer.wholedoc`), else
    #: partial updates only
    whole_documents: bool = True


@dataclass
class JobResult:
    stats: JobStats
    elapsed: float
    #: why the job stopped early (unreachable, interrupted, ...), or "" if it ran to the end
    stopped: str = ""
    slices: list[str] = field(default_factory=list)


# --- checks before anything is written ------------------------------------------------------

def check_fields(client: Client, retrier: Retrier, options: IndexOptions,
                 root_mappings: Mapping[str, Any]) -> None:
    """Fail clearly if a configured text field is in no document, or the ``--since`` field is unusable."""
    total = retrier.call("counting documents", lambda: client.count(index=options.index))["count"]
    paths: dict[str, str] = {}
    dynamic_off = False
    for mapping in root_mappings.values():
        paths.update(field_paths(mapping))
        dynamic_off |= str(mapping.get("dynamic", "true")).lower() in ("false", "runtime")
    listed = sorted({f for mapping in root_mappings.values() for f in text_fields(mapping)})
    if total:
        for name in options.fields:
            found = retrier.call("checking the text fields", lambda: client.count(
                index=options.index, query={"exists": {"field": name}}))["count"]
            if found:
                continue
            if dynamic_off and name not in paths:
                log.warning("field %r is not mapped (dynamic mapping is off), so it cannot be checked; "
                            "documents without it are counted as 'no text field'", name)
                continue
            raise JobError(f"no document of {options.index} has the field {name!r}; text fields in its "
                           f"mapping: {', '.join(listed) or '(none)'} (choose with --field, or "
                           "indexer.fields in the configuration)")
    if options.since is not None:
        check_since_field(paths, options.index, options.since_field, DATE_TYPES, "--since")
        try:
            client.count(index=options.index, query={"range": {options.since_field: {"gte": options.since}}})
        except ClusterApiError as exc:
            if exc.status == 400:
                reason = error_type_and_reason(exc.body)[1]
                raise JobError(f"--since {options.since!r}: Client cannot use it on "
                               f"{options.since_field!r} ({reason}); use date math such as now-1d "
                               "or a date such as 2024-05-01") from None
            raise
    if options.window_field is not None:
        check_since_field(paths, options.index, options.window_field, WINDOW_TYPES, "--follow")


def check_since_field(paths: Mapping[str, str], index: str, name: str, kinds: frozenset[str], used_by: str) -> None:
    """:class:`JobError` unless ``name`` is mapped (``paths``: path → type) with one of ``kinds``."""
    kind = paths.get(name)
    if kind is None:
        dates = sorted(p for p, k in paths.items() if k in ("date", "date_nanos"))
        raise JobError(f"{used_by} needs a date field; {name!r} is not mapped in "
                       f"{index} (date fields: {', '.join(dates) or '(none)'}; choose with "
                       "--since-field)")
    if kind not in kinds:
        needed = "a date" if kinds == WINDOW_TYPES else "a date (or numeric)"
        raise JobError(f"--since-field {name!r} is mapped as {kind!r}; {used_by} needs {needed} field")


def prepare(config: Config, options: IndexOptions, cluster: ClusterInfo | None = None) -> SeedPlan | None:
    """All checks, then the mapping; raises :class:`JobError` having changed nothing on a problem.

    Returns how the workers seed cluster values (None: they write none)."""
    client = make_client(config.upstream, cluster)
    retrier = Retrier(display_url(config.upstream), config.indexer.max_retries)
    # a bad synonym list stops the job here, not in each worker
    tfidf = make_enricher(config, client, retrier) if config.tfidf.enabled else None
    try:
        plan, mapped = plan_mapping_with_seeds(client, retrier, options.index,
                                               extra=tf_properties() if tfidf is not None else None)
        check_fields(client, retrier, options, plan.root_mappings)
        check_page_order(client)
        put_neardup_mapping(client, retrier, options.index, plan)
        if tfidf is not None:
            for index in sorted(plan.root_mappings):
                tfidf.store(index).ensure_index()  # before the workers race to create it
        refresh_before_reading(client, retrier, options.index)
        if not mapped:
            return None
        _, threshold, _ = collapse_settings_for(config.collapse, options.index)
        return seed_plan(options.index, threshold, config.fingerprint, plan.root_mappings)
    except ClusterApiError as exc:
        raise JobError(explain(exc, display_url(config.upstream), options.index)) from None
    finally:
        client.close()


def refresh_before_reading(client: Client, retrier: Retrier, index: str) -> None:
    """Make every document acknowledged before the job started visible to its point in time.

    A point in time sees only refreshed writes: without this, a document (re)indexed in the
    second before the job would be read in its previous version, or not at all, and keep no
    current fingerprint. A caller allowed to read and write but not to refresh (the
    ``maintenance`` privilege) gets a warning, and the job goes on with the periodic refresh.
    """
    try:
        retrier.call("refreshing", lambda: client.indices.refresh(index=index))
    except ClusterApiError as exc:
        if exc.status != 403:
            raise
        log.warning("could not refresh %s before reading (%s): documents written in the last "
                    "refresh interval may be enriched by the next run only", index, exc.reason)


# --- the worker -------------------------------------------------------------------------------

def _die_with_parent() -> None:
    """Ask Linux to SIGKILL this process when its parent dies (best effort)."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def fingerprint_function(fields: Sequence[str], fingerprinter: Fingerprinter,
                         tfidf: TfidfEnricher | None = None):
    """``source -> (outcome, neardup value or None)``; with ``tfidf``, the value also holds the
    TF-IDF vector ``tf`` (weighted with the statistics of the page, see :mod:`neardup.indexer.tfidf_vectors`)."""
    def fingerprint_source(source: Mapping[str, Any]):
        outcome, fingerprint = compute_fingerprint(source, fields, fingerprinter)
        if fingerprint is None:
            return outcome, None
        value = fingerprint.to_source()
        value.update(cleared_keys(source.get(FIELD), value))  # no outdated cluster ids or retired keys
        texts = source_texts(source, fields) if tfidf is not None else None
        if tfidf is not None and texts is not None:
            value[TF_FIELD] = tfidf.vector_of(texts)
        return outcome, value
    return fingerprint_source


def count_page(tfidf: TfidfEnricher, hits: Sequence[Mapping[str, Any]], fields: Sequence[str]) -> int:
    """Count the page's documents that carry no vector of the current TF-IDF version yet."""
    return tfidf.count((hit["_index"], source_texts(hit.get("_source") or {}, fields),
                        tfidf.is_current(neardup_of(hit.get("_source")))) for hit in hits)


def run_slice(config: Config, options: IndexOptions, spec: SliceSpec, version: str,
              report: Any, stop: Any, parent_pid: int, seeds: SeedPlan | None = None,
              cluster: ClusterInfo | None = None) -> JobStats:
    """Enrich one slice; ``report(kind, payload)`` sends counters to the parent; ``seeds``:
    write cluster seeds while the index has no clusters (see the module docstring)."""
    stats = JobStats()
    client = make_client(config.upstream, cluster)
    retrier = Retrier(display_url(config.upstream), config.indexer.max_retries)
    fingerprinter = Fingerprinter(config.fingerprint)
    if fingerprinter.version != version:
        raise JobError(f"scheme version mismatch: {fingerprinter.version} != {version}")
    tfidf = make_enricher(config, client, retrier, fingerprinter) if config.tfidf.enabled else None
    tf_version = tfidf.version if tfidf is not None else None
    reader = SliceReader(client, retrier, options.index,
                         selection(version=version, force=options.force, since=options.since,
                                   since_field=options.since_field, tf_version=tf_version),
                         spec, options.batch_size, config.indexer.keep_alive,
                         tuple(options.fields) + STORED_PATHS + ((TF_VERSION_PATH,) if tfidf is not None else ()))
    seeder = Seeder(client, retrier, seeds, config.indexer.max_retries, stats.failures) if seeds else None
    updater = BulkUpdater(client, retrier, fingerprint_function(options.fields, fingerprinter, tfidf),
                          tuple(options.fields) + STORED_PATHS, config.indexer.max_retries, stats, seeder,
                          whole_indices=(whole_document_indices(client, retrier, options.index)
                                         if options.whole_documents else frozenset()),
                          write_batch=options.batch_size * WRITE_PAGES)
    reader.whole_sources = bool(updater.whole_indices)
    reported = JobStats()

    def report_progress() -> None:
        nonlocal reported
        stats.transient_retries = retrier.retries
        stats.pit_restarts = reader.pit_restarts
        report("progress", _delta(stats, reported))
        reported = _copy(stats)

    try:
        reader.open()
        to_read = reader.count(reader.query)
        skipped_current = 0 if options.force else reader.count(already_current(
            version=version, since=options.since, since_field=options.since_field, tf_version=tf_version))
        report("total", {"to_read": to_read, "skipped_current": skipped_current})
        started = time.perf_counter()
        for hits in reader.pages():
            stats.read_seconds += time.perf_counter() - started
            stats.read += len(hits)
            if tfidf is not None:
                started = time.perf_counter()
                stats.tfidf_counted += count_page(tfidf, hits, options.fields)
                stats.tfidf_seconds += time.perf_counter() - started
            updater.queue([p for p in (updater.pending_from_hit(hit) for hit in hits) if p is not None])
            if stop.is_set() or os.getppid() != parent_pid:
                break
            report_progress()
            started = time.perf_counter()
        updater.flush()
        return stats
    finally:
        report_progress()  # also what a page cut short by an error got done
        reader.close()
        client.close()


def _copy(stats: JobStats) -> JobStats:
    copy = JobStats()
    copy.merge(stats)
    return copy


def _delta(now: JobStats, before: JobStats) -> JobStats:
    """Counters added since ``before`` (failures: all new ones)."""
    delta = JobStats()
    for name in JobStats.counter_names():
        setattr(delta, name, getattr(now, name) - getattr(before, name))
    for reason, count in now.failures.counts.items():
        new = count - before.failures.counts.get(reason, 0)
        if new:
            delta.failures.counts[reason] = new
            delta.failures.examples[reason] = [i for i in now.failures.examples.get(reason, [])
                                               if i not in before.failures.examples.get(reason, [])]
    return delta


def _worker_main(config: Config, options: IndexOptions, spec: SliceSpec, version: str,
                 messages: Any, stop: Any, parent_pid: int, seeds: SeedPlan | None = None,
                 cluster: ClusterInfo | None = None) -> None:
    _die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides; it sets ``stop``

    def report(kind: str, payload: Any) -> None:
        messages.put((kind, str(spec), payload))

    try:
        run_slice(config, options, spec, version, report, stop, parent_pid, seeds, cluster)
        report("done", None)
    except JobError as exc:
        report("error", str(exc))
    except ClusterError as exc:
        report("error", explain(exc, display_url(config.upstream), options.index))
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which prints it
        report("crash", f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}")


# --- the parent -------------------------------------------------------------------------------

def _context() -> Any:
    methods = multiprocessing.get_all_start_methods()
    return multiprocessing.get_context("fork" if "fork" in methods else "spawn")


def run_job(config: Config, options: IndexOptions, *, progress: Progress | None = None,
            cluster: ClusterInfo | None = None) -> JobResult:
    """Check, put the mapping, run the workers, refresh (``options.refresh``); :class:`JobError`
    if the job cannot start. ``cluster``: what the cluster is (asked when not given)."""
    cluster = cluster or check_upstream(config)
    seeds = prepare(config, options, cluster)
    version = scheme_version(config.fingerprint)
    specs = plan_slices(options.host_slice, options.host_slices, options.workers)
    progress = progress or Progress.for_stream(sys.stderr, options.index)
    context = _context()
    messages = context.Queue()
    stop = context.Event()
    started = time.perf_counter()
    workers = {str(spec): context.Process(target=_worker_main, name=f"neardup-index-{spec}",
                                          args=(config, options, spec, version, messages, stop, os.getpid(), seeds, cluster),
                                          daemon=True)
               for spec in specs}
    stats = JobStats()
    stopped = ""
    running = set(workers)
    in_main_thread = threading.current_thread() is threading.main_thread()
    previous_handlers = ({sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
                         if in_main_thread else {})

    def interrupt(signum: int, frame: Any) -> None:
        nonlocal stopped
        stopped = stopped or "interrupted; " + "run the same command again to resume"
        stop.set()

    for sig in previous_handlers:
        signal.signal(sig, interrupt)
    try:
        for process in workers.values():
            process.start()
        while running:
            try:
                kind, name, payload = messages.get(timeout=0.5)
            except queue.Empty:
                for name in list(running):
                    if not workers[name].is_alive() and workers[name].exitcode not in (None, 0):
                        running.discard(name)
                        stopped = stopped or f"worker for slice {name} died (exit code {workers[name].exitcode})"
                        stop.set()
                progress.tick(stats)
                continue
            if kind == "total":
                stats.skipped_current += payload["skipped_current"]
                progress.add_total(payload["to_read"])
            elif kind == "progress":
                stats.merge(payload)
                progress.tick(stats)
            elif kind in ("error", "crash"):
                running.discard(name)
                if kind == "crash":
                    log.debug("worker %s crashed:\n%s", name, payload)
                    payload = f"internal error in worker {name}: {payload.splitlines()[0]}"
                stopped = stopped or payload
                stop.set()
            elif kind == "done":
                running.discard(name)
        for process in workers.values():
            process.join(timeout=30)
    finally:
        for sig, handler in previous_handlers.items():
            signal.signal(sig, handler)
        for process in workers.values():
            if process.is_alive():
                process.terminate()
                process.join(timeout=5)
        progress.close()
    if options.refresh:
        client = make_client(config.upstream, cluster)
        try:
            refresh_written(client, options.index)
        finally:
            client.close()
    return JobResult(stats, time.perf_counter() - started, stopped, [str(s) for s in specs])
