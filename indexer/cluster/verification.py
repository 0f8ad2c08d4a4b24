"""Verification of candidate pairs for ``neardup cluster`` (memory strategy): exact, from the texts.

``--verify signature`` links two documents when their signature estimate ``Ĵ`` is at least
the threshold t (:func:`neardup.fingerprint.clustering.cluster_signatures` as it is). ``--verify text``
(the default of the memory strategy) links them when the *exact* resemblance of their shingle
sets is at least t, which is what exact single-link over all pairs does
(:mod:`neardup.fingerprint.verify` has the method and the math):

* candidates come from an LSH banding chosen for ``t - δ``, ``δ = 5·sqrt(t(1 - t)/K)``, and
  must pass ``Ĵ ≥ t - δ`` (the iterative rounds and shortcuts of ``cluster_signatures`` are
  kept; pairs already joined are not verified);
* the texts of the documents of those pairs are read from Elasticsearch (``mget`` of the
  configured text fields, ``--field``: the fields ``neardup index`` fingerprinted, in the same
  order), in batches, each document once, as the rounds need them;
* each text is shingled by a :class:`~neardup.fingerprint.Fingerprinter` with the configuration's
  fingerprint parameters (the stored ``neardup.v`` is the current scheme: documents of another
  scheme have no usable fingerprint and are never candidates). A document is verified exactly
  only if its text still gives the fingerprint the clustering read (same signature and
  shingle count); otherwise (text changed since it was fingerprinted, document deleted, fields
  without text) its pairs are verified by their estimate, and it is counted;
* a pair is linked when its exact resemblance (:func:`neardup.fingerprint.verify.exact_resemblances`)
  is at least t.

The LSH keys written to ``neardup.bands`` and recorded in ``_meta`` stay those of the banding
for t (later ``--incremental`` and ``aggregate`` runs, which verify on signatures, use them);
``_meta.neardup_clusters.verification`` records how the links were verified.

Cost (reported in the summary's ``verification``): the documents read and shingled, the pairs
verified, and the seconds of reading, shingling and intersecting. Memory: the shingle sets of
the documents read (8 bytes a shingle).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from neardup.fingerprint import Fingerprinter
from neardup.fingerprint.clustering import Clustering, ClusterParams, cluster_signatures
from neardup.fingerprint.hashing import multipliers
from neardup.fingerprint.texts import document_texts
from neardup.fingerprint.verify import (
    SIGMAS,
    ShingleSets,
    banding_miss,
    estimate_margin,
    estimate_miss,
    exact_resemblances,
    lowered_banding,
    set_signatures,
)
from neardup.indexer.client import Client
from neardup.indexer.cluster.documents import DocTable
from neardup.indexer.cluster.job import Job
from neardup.indexer.retry import Retrier

log = logging.getLogger(__name__)

METHODS = ("text", "signature")
#: Documents per ``mget`` request.
FETCH_BATCH = 500
#: ``mget`` requests in flight (reading overlaps shingling).
FETCH_THREADS = 2


@dataclass
class VerifyStats:
    """What the verification did (the summary's ``verification``)."""

    method: str
    margin: float = 0.0                  # δ
    floor: float = 0.0                   # t - δ: the estimate a candidate needs
    estimate_miss: float = 0.0           # most a pair with J ≥ t can fail the estimate floor
    banding_miss: float = 0.0            # most the banding loses of the pairs passing the floor
    candidate_lsh: str = ""              # the banding of the candidates (for t - δ)
    documents_read: int = 0              # texts read from Elasticsearch
    documents_exact: int = 0             # of those, giving the fingerprint that was clustered
    text_changed: int = 0                # text no longer gives the stored fingerprint
    no_text: int = 0                     # deleted meanwhile, or no text in the fields
    pairs_verified: int = 0              # pairs passed to the verification (Ĵ ≥ t - δ), distinct
    comparisons: int = 0                 # of those, verifications (a pair rejected is met again in later rounds)
    pairs_exact: int = 0                 # of those, by exact resemblance
    pairs_by_estimate: int = 0           # of those, by estimate (a document without usable text)
    examples: list[str] = field(default_factory=list)   # a few documents verified by estimate
    seconds: dict[str, float] = field(default_factory=lambda: {"read": 0.0, "shingle": 0.0, "exact": 0.0})

    def to_dict(self) -> dict[str, Any]:
        if self.method != "text":
            return {"method": self.method}
        out = dataclasses.asdict(self)
        out["seconds"] = {k: round(v, 3) for k, v in self.seconds.items()}
        out["seconds"]["total"] = round(sum(self.seconds.values()), 3)
        return out

    def describe(self) -> str:
        if self.method != "text":
            return "signature estimates (Ĵ ≥ t)"
        seconds = self.seconds
        return (f"exact resemblance from the texts: {self.pairs_verified} candidate pairs ({self.candidate_lsh}) "
                f"with Ĵ ≥ {self.floor:.3f}, {self.pairs_by_estimate} of them by estimate; {self.documents_read} "
                "documents read "
                f"({self.text_changed} text changed, {self.no_text} without text); read {seconds['read']:.2f}s, "
                f"shingle {seconds['shingle']:.2f}s, exact {seconds['exact']:.2f}s")


def text_params(params: ClusterParams, num_perm: int, groups: int, sigmas: float = SIGMAS) -> ClusterParams:
    """``params`` with the banding and margin of exact verification (:mod:`neardup.fingerprint.verify`)."""
    return dataclasses.replace(params, banding=lowered_banding(params.threshold, num_perm, groups, sigmas),
                               margin=estimate_margin(params.threshold, num_perm, sigmas))


class TextVerifier:
    """The verification hook of :func:`neardup.fingerprint.clustering.cluster_signatures`: exact
    resemblance of document pairs (rows of ``table``) from their texts, read on demand."""

    def __init__(self, client: Client, retrier: Retrier, table: DocTable, fields: Sequence[str],
                 fingerprinter: Fingerprinter, stats: VerifyStats, batch: int = FETCH_BATCH) -> None:
        self.client = client
        self.retrier = retrier
        self.table = table
        self.fields = list(fields)
        self.fingerprinter = fingerprinter
        self.stats = stats
        self.batch = batch
        self.signatures = table.signatures()
        self.counts = table.count_array()
        #: row -> its shingle set, or None when the row is verified by its estimate
        self.sets: dict[int, np.ndarray | None] = {}
        self.seen: set[int] = set()              # pairs verified (i·N + j)
        self.multipliers = multipliers(fingerprinter.params.seed, fingerprinter.params.num_perm)

    def __call__(self, i: np.ndarray, j: np.ndarray, equal: np.ndarray) -> np.ndarray:
        rows = np.unique(np.concatenate((i, j)))
        self.load([r for r in rows.tolist() if r not in self.sets])
        started = time.perf_counter()
        usable = np.array([self.sets[r] is not None for r in rows.tolist()], dtype=bool)
        position = np.searchsorted(rows, i), np.searchsorted(rows, j)
        exact = usable[position[0]] & usable[position[1]]
        sim = equal / self.signatures.shape[1]
        if exact.any():
            local = ShingleSets.from_arrays([self.sets[r] if ok else np.empty(0, np.uint64)  # type: ignore[misc]
                                             for r, ok in zip(rows.tolist(), usable.tolist())])
            sim[exact] = exact_resemblances(local, position[0][exact], position[1][exact])
        n = len(self.table)
        for code, ok in zip((i * n + j).tolist(), exact.tolist()):
            if code not in self.seen:
                self.seen.add(code)
                self.stats.pairs_exact += ok
                self.stats.pairs_by_estimate += not ok
        self.stats.pairs_verified = len(self.seen)
        self.stats.comparisons += len(i)
        self.stats.seconds["exact"] += time.perf_counter() - started
        return sim

    # ---- reading and shingling ----

    def load(self, rows: Sequence[int]) -> None:
        """Read and shingle the texts of ``rows`` (batches of ``batch`` documents, read in
        threads while the main thread shingles)."""
        if not rows:
            return
        batches = [rows[start:start + self.batch] for start in range(0, len(rows), self.batch)]
        with ThreadPoolExecutor(max_workers=min(FETCH_THREADS, len(batches))) as pool:
            waiting = time.perf_counter()
            for part, sources in zip(batches, pool.map(self._fetch, batches)):
                self.stats.seconds["read"] += time.perf_counter() - waiting
                started = time.perf_counter()
                self._add(part, [self._shingles(row, source) for row, source in zip(part, sources)])
                self.stats.seconds["shingle"] += time.perf_counter() - started
                waiting = time.perf_counter()

    def _fetch(self, rows: Sequence[int]) -> list[Mapping[str, Any] | None]:
        table = self.table
        docs = []
        for row in rows:
            spec: dict[str, Any] = {"_index": table.index[row], "_id": table.ids[row]}
            if table.routing[row] is not None:
                spec["routing"] = table.routing[row]
            docs.append(spec)
        response = self.retrier.call("reading texts to verify candidate pairs", lambda: self.client.mget(
            docs=docs, source_includes=self.fields))
        found = response["docs"]
        if len(found) != len(rows):
            raise RuntimeError(f"mget returned {len(found)} documents for {len(rows)}")
        return [d.get("_source") if d.get("found") else None for d in found]

    def _shingles(self, row: int, source: Mapping[str, Any] | None) -> np.ndarray | None:
        """The shingle set of the row's text (None: no such document, or no text)."""
        self.stats.documents_read += 1
        texts = document_texts(source, self.fields) if source is not None else None
        if texts is None or texts.outcome != "ok":
            self.stats.no_text += 1
            self._example(row)
            return None
        fp = self.fingerprinter
        # the text the indexer fingerprinted (fingerprint_fields: the fields joined by newlines)
        return fp.shingles(fp.canonical_tokens("\n".join(texts.texts)))

    def _add(self, rows: Sequence[int], shingles: Sequence[np.ndarray | None]) -> None:
        """Keep the sets of the rows whose text gives the fingerprint that was clustered
        (same shingle count and signature); the others are verified by their estimate."""
        present = [k for k, s in enumerate(shingles) if s is not None]
        again = set_signatures(ShingleSets.from_arrays([shingles[k] for k in present]), self.multipliers)  # type: ignore[misc]
        for k, signature in zip(present, again):
            row = rows[k]
            if len(shingles[k]) != int(self.counts[row]) or not np.array_equal(signature, self.signatures[row]):  # type: ignore[arg-type]
                self.stats.text_changed += 1
                self._example(row)
                self.sets[row] = None
            else:
                self.stats.documents_exact += 1
                self.sets[row] = shingles[k]
        for k, s in enumerate(shingles):
            if s is None:
                self.sets[rows[k]] = None

    def _example(self, row: int) -> None:
        if len(self.stats.examples) < 5:
            self.stats.examples.append(f"{self.table.index[row]}/{self.table.ids[row]}")


def cluster_table(job: Job, table: DocTable) -> Clustering:
    """The clusters of ``table``'s documents, verified as ``job.options.verify`` says
    (the verification step of :func:`neardup.indexer.cluster.memory.run_memory`)."""
    method = getattr(job.options, "verify", "text")
    if method not in METHODS:
        raise ValueError(f"verify = {method!r}: must be one of {', '.join(METHODS)}")
    job.settings = dataclasses.replace(job.settings, verification=method)
    stats = VerifyStats(method)
    job.result.verification = stats
    signatures, counts = table.signatures(), table.count_array()
    if method == "signature":
        return cluster_signatures(signatures, counts, job.params)
    fingerprint = job.config.fingerprint
    fingerprinter = Fingerprinter(fingerprint)
    if fingerprinter.version != job.settings.version:  # pragma: no cover - both come from the same params
        raise RuntimeError(f"scheme {fingerprinter.version} differs from the clustered {job.settings.version}")
    groups = fingerprint.groups if job.params.banding.groups else 0
    params = text_params(job.params, fingerprint.num_perm, groups)
    stats.margin = params.margin
    stats.floor = max(params.threshold - params.margin, 0.0)
    stats.estimate_miss = estimate_miss(params.threshold, fingerprint.num_perm)
    banding = params.banding
    stats.banding_miss = banding_miss(params.threshold, fingerprint.num_perm, banding.rows)
    stats.candidate_lsh = f"{banding.bands} bands × {banding.rows} rows" + (
        f" + {len(banding.extra_groups)} supershingle keys" if banding.extra_groups else "")
    verifier = TextVerifier(job.client, job.retrier, table, job.options.title_fields, fingerprinter, stats)
    clustering = cluster_signatures(signatures, counts, params, verify=verifier)
    unusable = stats.text_changed + stats.no_text
    if unusable and 2 * unusable > stats.documents_read:
        log.warning("%d of %d documents read to verify candidate pairs have no text (%d) or a text that does not "
                    "give their stored fingerprint (%d) (e.g. %s): are --field %s the fields `neardup index` "
                    "fingerprinted, and in _source? Their pairs were verified by their estimate", unusable,
                    stats.documents_read, stats.no_text, stats.text_changed, ", ".join(stats.examples),
                    " ".join(job.options.title_fields))
    return clustering
