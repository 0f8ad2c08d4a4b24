#!/usr/bin/env python
"""Collection-wide clustering (`neardup cluster`) against exact single-link, and at scale.

    .venv/bin/python bench/cluster.py --es-url http://127.0.0.1:9299 [--results docs/benchmarks.md]

**Part 1: the LSH clustering study's table, side by side in one run.** Reuters-21578 stories
with a body (19,043), in NEWID order; the first 1,000, 10,000 and all of them. Each text is
title + body, as ``neardup index`` fingerprints it.

* *Exact single-link*: the exact resemblance (Jaccard) of the canonical shingle sets of every
  pair of documents (an inverted index finds every pair sharing at least one shingle, all
  other pairs have resemblance 0: ``bench/quality/truth.py``), the pairs at or above the
  threshold joined into connected components. Timed from the shingle sets (shingling, the
  same work for every method, is shown apart).
* *neardup*: the documents are loaded into a fresh index of the real Elasticsearch and
  enriched by ``neardup index``; then ``neardup cluster`` runs (memory strategy, in process,
  ``--verify text``: candidates from the LSH bands for ``t - δ`` with ``Ĵ ≥ t - δ``, δ = 5
  standard errors of the estimate at t, linked when the *exact* resemblance of their shingle
  sets, from the texts read back for the candidates' documents, is ≥ t: see
  :mod:`fingerprint.verify` and :mod:`indexer.cluster.verification`), and its wall time is split into
  reading the fingerprints, clustering, verification (reading the candidates' texts,
  shingling them, intersecting), and writing the ids back. The clusters are read back from the
  index.
* *neardup, signatures only*: the clusters ``--verify signature`` gives (links at ``Ĵ ≥ t``, the
  84-minhash estimate), computed in memory by :func:`fingerprint.clustering.cluster_signatures`
  from the signatures stored in the same index (the same function and parameters the job uses);
  quality only.

Quality against the TOPICS labels, as pair counts over the documents that carry at least one
TOPICS label (the clustering covers all documents; unlabelled ones are left out of the
counts): a pair is *together* when both are in one cluster, and *related* when they share a
TOPICS label. TP = together and related, FP = together and not related, FN = apart and
related, TN = the rest; accuracy = (TP + TN) / pairs (the Rand index), precision = TP / (TP +
FP), recall = TP / (TP + FN), F = 2PR / (P + R) (the pair-counting measures of Manning,
Raghavan and Schütze, §16.3). Near-duplicate clusters are far finer than topics, so recall
(and F) are small in absolute terms for every method at these thresholds; the comparison is
between the methods at the same threshold. The agreement rows compare neardup's co-clustered
pairs with exact single-link's directly.

Also measured on all of Reuters: the ``aggregate`` strategy (same ids as ``memory``?), an
``--incremental`` run that has nothing to do, and which candidate keys find which links
(LSH bands, supershingles of 6×14 and 14×6 groups, megashingles) against an all-pairs
comparison of the estimates.

**Part 2: 1,000,000 synthetic documents** (``bench/cluster_synthetic.py``: real paragraphs,
edited copies, fixed seed), clustered from their signatures by
:func:`fingerprint.clustering.cluster_signatures` and :func:`~fingerprint.clustering.assign_ids`
in a fresh process that loads the stored signatures: wall time and peak memory (RSS) of that
process. Targets: under 5 minutes and under 4 GB.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
from elasticsearch import Elasticsearch, helpers  # noqa: E402

from bench.quality.truth import exact_truth  # noqa: E402
from neardup.config import load_config  # noqa: E402
from neardup.corpora import reuters_documents  # noqa: E402
from neardup.fingerprint import FIELD, Fingerprinter, group_labels, similar_pairs  # noqa: E402
from neardup.fingerprint.clustering import ClusterParams, cluster_signatures  # noqa: E402
from neardup.fingerprint.lsh import choose_banding  # noqa: E402

SECTION = "## Clustering"


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# --- quality measures ------------------------------------------------------------------------------

def pairs_together(labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """All pairs (i < j) with the same label."""
    order = np.argsort(labels, kind="stable")
    sorted_labels = labels[order]
    starts = np.flatnonzero(np.concatenate(([True], sorted_labels[1:] != sorted_labels[:-1])))
    sizes = np.diff(np.append(starts, len(labels)))
    i_parts, j_parts = [], []
    for start, size in zip(starts[sizes > 1].tolist(), sizes[sizes > 1].tolist()):
        members = np.sort(order[start:start + size])
        a, b = np.triu_indices(size, 1)
        i_parts.append(members[a])
        j_parts.append(members[b])
    if not i_parts:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    return np.concatenate(i_parts), np.concatenate(j_parts)


def topic_masks(topics: Sequence[Sequence[str]]) -> np.ndarray:
    names = sorted({t for ts in topics for t in ts})
    position = {t: k for k, t in enumerate(names)}
    words = (len(names) + 63) // 64
    masks = np.zeros((len(topics), max(words, 1)), dtype=np.uint64)
    for d, ts in enumerate(topics):
        for t in ts:
            masks[d, position[t] // 64] |= np.uint64(1) << np.uint64(position[t] % 64)
    return masks


def related_pairs(masks: np.ndarray) -> int:
    """Pairs of documents sharing at least one label."""
    total = 0
    for d in range(len(masks) - 1):
        total += int(np.count_nonzero(np.any(masks[d] & masks[d + 1:], axis=1)))
    return total


def topic_scores(labels: np.ndarray, topics: Sequence[Sequence[str]], related_total: int | None = None
                 ) -> dict[str, float]:
    labelled = np.array([bool(t) for t in topics])
    rows = np.flatnonzero(labelled)
    masks = topic_masks([topics[r] for r in rows])
    related = related_pairs(masks) if related_total is None else related_total
    i, j = pairs_together(labels[rows])
    tp = int(np.count_nonzero(np.any(masks[i] & masks[j], axis=1))) if len(i) else 0
    fp = len(i) - tp
    fn = related - tp
    n = len(rows)
    total = n * (n - 1) // 2
    tn = total - tp - fp - fn
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    f = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"accuracy": (tp + tn) / total if total else 0.0, "precision": precision, "recall": recall,
            "f": f, "tp": tp, "fp": fp, "fn": fn, "related": related, "labelled": n}


def agreement(found: np.ndarray, reference: np.ndarray) -> dict[str, float]:
    """Pairwise precision/recall of ``found``'s co-clustered pairs against ``reference``'s."""
    n = len(found)
    fi, fj = pairs_together(found)
    ri, rj = pairs_together(reference)
    f_codes, r_codes = fi * n + fj, ri * n + rj
    common = len(np.intersect1d(f_codes, r_codes))
    return {"pairs": len(f_codes), "reference_pairs": len(r_codes),
            "precision": common / len(f_codes) if len(f_codes) else 1.0,
            "recall": common / len(r_codes) if len(r_codes) else 1.0,
            "same_partition": bool(np.array_equal(_canonical(found), _canonical(reference)))}


def _canonical(labels: np.ndarray) -> np.ndarray:
    _, first = np.unique(labels, return_index=True)
    mapping = {labels[f]: k for k, f in enumerate(sorted(first))}
    return np.array([mapping[v] for v in labels])


def contingency_scores(labels: np.ndarray, truth: np.ndarray) -> dict[str, float]:
    """Pairwise precision/recall/F of a clustering against a partition, by pair counting."""
    def pairs(counts: np.ndarray) -> int:
        counts = counts.astype(np.int64)
        return int((counts * (counts - 1) // 2).sum())

    _, cluster_sizes = np.unique(labels, return_counts=True)
    _, truth_sizes = np.unique(truth, return_counts=True)
    _, cell_sizes = np.unique(labels.astype(np.int64) * (int(truth.max()) + 1) + truth, return_counts=True)
    tp, together, related = pairs(cell_sizes), pairs(cluster_sizes), pairs(truth_sizes)
    precision = tp / together if together else 1.0
    recall = tp / related if related else 1.0
    return {"precision": precision, "recall": recall,
            "f": 2 * precision * recall / (precision + recall) if precision + recall else 0.0}


# --- Reuters ---------------------------------------------------------------------------------------

def reuters_with_body() -> list[dict[str, Any]]:
    return [d for d in reuters_documents() if d["body"]]


def run_neardup_command(args: Sequence[str], es_url: str) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not (k.startswith("NEARDUP_") and "__" in k)}
    env.update(NEARDUP_UPSTREAM__URLS=es_url, NEARDUP_LOGGING__LEVEL="WARNING",
               PYTHONPATH=str(ROOT) + os.pathsep + env.get("PYTHONPATH", ""))
    result = subprocess.run([sys.executable, "-m", "neardup", *args, "--json"], capture_output=True, text=True,
                            env=env, cwd=ROOT, timeout=3600, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"neardup {' '.join(args)} failed ({result.returncode}): {result.stderr[-2000:]}")
    return json.loads(result.stdout)


def load_index(es: Elasticsearch, name: str, docs: Sequence[dict[str, Any]], es_url: str) -> float:
    es.options(ignore_status=404).indices.delete(index=name)
    es.indices.create(index=name, settings={"number_of_shards": 2, "number_of_replicas": 0})
    actions = ({"_index": name, "_id": d["id"], "_source": d} for d in docs)
    for ok, item in helpers.streaming_bulk(es.options(request_timeout=300), actions, chunk_size=2000,
                                           raise_on_error=False, max_retries=5):
        if not ok:
            raise RuntimeError(f"loading {name} failed: {item}")
    es.indices.refresh(index=name)
    started = time.perf_counter()
    run_neardup_command(["index", "--index", name, "--workers", "2"], es_url)
    return time.perf_counter() - started


def cluster_job(es_url: str, index: str, threshold: float, **options: Any) -> dict[str, Any]:
    from neardup.indexer.cluster.options import ClusterOptions
    from neardup.indexer.cluster.run import run_cluster
    from neardup.indexer.progress import Progress

    config = load_config(environ={"NEARDUP_UPSTREAM__URLS": es_url})
    started = time.perf_counter()
    result = run_cluster(config, ClusterOptions(index=index, threshold=threshold, **options), progress=Progress())
    wall = time.perf_counter() - started
    return {"wall": wall, **result.to_dict()}


def stored_clusters(es: Elasticsearch, index: str, ids: Sequence[str]) -> np.ndarray:
    found: dict[str, str] = {}
    for hit in helpers.scan(es, index=index, query={"query": {"match_all": {}}},
                            _source=[f"{FIELD}.cluster"], size=5000):
        found[hit["_id"]] = hit["_source"][FIELD]["cluster"]
    values = [found[i] for i in ids]
    _, labels = np.unique(np.asarray(values, dtype=object), return_inverse=True)
    return labels.astype(np.int64)


def exact_single_link(shingle_sets: Sequence[np.ndarray], threshold: float) -> tuple[np.ndarray, float]:
    started = time.perf_counter()
    truth = exact_truth(shingle_sets, floor=threshold)
    keys = truth.pairs_at(threshold)
    n = len(shingle_sets)
    labels = group_labels(n, keys // n, keys % n)
    return labels, time.perf_counter() - started


def candidate_keys_table(signatures: np.ndarray, counts: np.ndarray, threshold: float,
                         num_perm: int) -> list[list[str]]:
    """Links (Ĵ ≥ t) found by each kind of candidate key, against all pairs of estimates."""
    from neardup.fingerprint.clustering import cross_pairs, equal_slots, shared_buckets, unique_pairs
    from neardup.fingerprint.hashing import megashingles, supershingles
    from neardup.fingerprint.lsh import needed_matches

    n = len(signatures)
    ei, ej, _ = similar_pairs(signatures, counts, threshold, "resemblance")
    exact = set((ei * n + ej).tolist())
    need = needed_matches(threshold, num_perm)
    rows = np.flatnonzero(counts > 0)

    def found(keys: np.ndarray) -> tuple[int, int]:
        """(candidate pairs, links among them) for per-document key arrays (rows × k)."""
        buckets = shared_buckets(keys.ravel(), np.repeat(rows, keys.shape[1]), np.arange(n))
        i, j = unique_pairs(*cross_pairs(buckets, np.arange(len(buckets.bucket_start))), n)
        return len(i), int(np.count_nonzero(equal_slots(signatures, i, j) >= need))

    rows_table = []
    banding = choose_banding(threshold, num_perm)
    for label, keys in [
        (f"LSH bands ({banding.bands} × {banding.rows})", banding.keys(signatures[rows])),
        ("bands + supershingle keys of 6 groups", choose_banding(threshold, num_perm, 6).keys(signatures[rows])),
        ("bands + supershingle keys of 14 groups", choose_banding(threshold, num_perm, 14).keys(signatures[rows])),
    ]:
        candidates, linked = found(keys)
        rows_table.append([label, f"{keys.shape[1]}", f"{candidates:,}", f"{linked:,}", f"{linked / max(len(exact), 1):.4f}"])
    for groups in (6, 14):
        supers = np.stack([supershingles(s, groups) for s in signatures[rows]])
        megas = np.stack([megashingles(s) for s in supers])
        for label, keys in ((f"supershingles alone ({groups} × {num_perm // groups})", supers),
                            (f"megashingles alone ({groups} groups)", megas)):
            # make keys of different groups distinct (a supershingle hash is already seeded per group)
            candidates, linked = found(keys)
            rows_table.append([label, f"{keys.shape[1]}", f"{candidates:,}", f"{linked:,}",
                               f"{linked / max(len(exact), 1):.4f}"])
    rows_table.append(["all pairs of estimates (`similar_pairs`)", "-", "-", f"{len(exact):,}", "1.0000"])
    return rows_table


def reuters_part(es: Elasticsearch, es_url: str, thresholds: Sequence[float], sizes: Sequence[int | None],
                 report_dir: Path) -> dict[str, Any]:
    docs = reuters_with_body()
    config = load_config(environ={})
    fp = Fingerprinter(config.fingerprint)
    started = time.perf_counter()
    shingle_sets = [fp.shingles(fp.canonical_tokens(f"{d['title']}\n{d['body']}")) for d in docs]
    shingling = time.perf_counter() - started
    log(f"shingled {len(docs):,} stories in {shingling:.1f}s")
    out: dict[str, Any] = {"documents": len(docs), "shingling": shingling, "rows": [], "extra": {}}
    suffix = uuid.uuid4().hex[:8]
    for size in sizes:
        n = len(docs) if size is None else min(size, len(docs))
        subset = docs[:n]
        topics = [d["topics"] for d in subset]
        ids = [d["id"] for d in subset]
        related = related_pairs(topic_masks([t for t in topics if t]))
        index = f"cluster-bench-{n}-{suffix}"
        log(f"loading and enriching {n:,} stories into {index}")
        enrich_seconds = load_index(es, index, subset, es_url)
        try:
            for threshold in thresholds:
                exact_labels, exact_seconds = exact_single_link(shingle_sets[:n], threshold)
                report = str(report_dir / f"cluster-report-{n}-{threshold:g}.html") if n == len(docs) else None
                job = cluster_job(es_url, index, threshold, mode="memory", report=report, verify="text")
                rerun = cluster_job(es_url, index, threshold, mode="memory", verify="text")
                labels = stored_clusters(es, index, ids)
                signatures, counts = stored_signatures(es, index, ids)
                signature_labels = signature_clusters(signatures, counts, threshold)
                row = {"n": n, "threshold": threshold, "exact_seconds": exact_seconds,
                       "exact": topic_scores(exact_labels, topics, related),
                       "neardup": topic_scores(labels, topics, related),
                       "signature": topic_scores(signature_labels, topics, related),
                       "signature_agreement": agreement(signature_labels, exact_labels),
                       "agreement": agreement(labels, exact_labels), "job": job, "rerun": rerun,
                       "enrich_seconds": enrich_seconds,
                       "exact_clusters": int(len(np.unique(exact_labels)))}
                out["rows"].append(row)
                log(f"  t={threshold}: exact {exact_seconds:.2f}s F={row['exact']['f']:.5f}; neardup job "
                    f"{job['wall']:.2f}s (cluster {job['seconds'].get('cluster', 0):.2f}s, verify "
                    f"{job['seconds'].get('verify', 0):.2f}s) F={row['neardup']['f']:.5f}; signatures only "
                    f"F={row['signature']['f']:.5f}")
                if n == len(docs) and threshold == thresholds[0]:
                    out["extra"] = all_reuters_extras(es, es_url, index, threshold, ids, labels, job)
        finally:
            es.options(ignore_status=404).indices.delete(index=index)
    return out


def stored_signatures(es: Elasticsearch, index: str, ids: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """The stored signatures and shingle counts of ``ids`` (zeros / 0 where not usable)."""
    from neardup.indexer.cluster.documents import stored_values, usable_signature

    config = load_config(environ={})
    version = __import__("fingerprint").scheme_version(config.fingerprint)
    num_perm = config.fingerprint.num_perm
    table = {}
    for hit in helpers.scan(es, index=index, query={"query": {"match_all": {}}},
                            _source=[f"{FIELD}.v", f"{FIELD}.sig", f"{FIELD}.n"], size=5000):
        raw, count = usable_signature(stored_values(hit["_source"]), version, num_perm)
        table[hit["_id"]] = (raw or b"\0" * (8 * num_perm), count if raw is not None else 0)
    signatures = np.frombuffer(b"".join(table[i][0] for i in ids), dtype="<u8").astype(np.uint64).reshape(len(ids), -1)
    return signatures, np.array([table[i][1] for i in ids], dtype=np.int64)


def signature_clusters(signatures: np.ndarray, counts: np.ndarray, threshold: float) -> np.ndarray:
    """The clusters of ``neardup cluster --verify signature`` (same function, same parameters)."""
    from neardup.indexer.cluster.options import ClusterOptions, cluster_params

    config = load_config(environ={})
    params = cluster_params(ClusterOptions(index="-", threshold=threshold), config.fingerprint)
    return cluster_signatures(signatures, counts, params).labels


def all_reuters_extras(es: Elasticsearch, es_url: str, index: str, threshold: float, ids: Sequence[str],
                       memory_labels: np.ndarray, memory_job: dict[str, Any]) -> dict[str, Any]:
    extras: dict[str, Any] = {}
    config = load_config(environ={})
    signatures, counts = stored_signatures(es, index, ids)
    signature_labels = signature_clusters(signatures, counts, threshold)
    incremental = cluster_job(es_url, index, threshold, incremental=True)
    extras["incremental"] = incremental
    # the aggregate strategy on a copy with no cluster values yet, and on the clustered index
    copy = f"{index}-aggregate"
    es.options(ignore_status=404).indices.delete(index=copy)
    mappings = es.indices.get_mapping(index=index)[index]["mappings"]
    mappings.pop("_meta", None)
    es.indices.create(index=copy, settings={"number_of_shards": 2, "number_of_replicas": 0}, mappings=mappings)
    actions = ({"_index": copy, "_id": hit["_id"], "_source": {k: v for k, v in hit["_source"].items()}}
               for hit in helpers.scan(es, index=index, query={"query": {"match_all": {}}}, size=2000))

    def strip(action: dict[str, Any]) -> dict[str, Any]:
        neardup = dict(action["_source"].get(FIELD) or {})
        neardup.pop("cluster", None)
        neardup.pop("bands", None)
        action["_source"][FIELD] = neardup
        return action

    helpers.bulk(es.options(request_timeout=300), (strip(a) for a in actions), chunk_size=2000)
    es.indices.refresh(index=copy)
    try:
        aggregate = cluster_job(es_url, copy, threshold, mode="aggregate")
        extras["aggregate"] = aggregate
        # the aggregate strategy verifies on the signatures: compare with --verify signature's clusters
        extras["aggregate_same_ids"] = agreement(stored_clusters(es, copy, ids), signature_labels)["same_partition"]
        extras["aggregate_rerun"] = cluster_job(es_url, copy, threshold, mode="aggregate")
    finally:
        es.options(ignore_status=404).indices.delete(index=copy)
    # candidate keys, from the stored signatures
    extras["keys"] = candidate_keys_table(signatures, counts, threshold, config.fingerprint.num_perm)
    # in-memory clustering of the same signatures: rounds versus one round
    for rounds in (True, False):
        params = ClusterParams(threshold, choose_banding(threshold, config.fingerprint.num_perm,
                                                         config.fingerprint.groups), rounds=rounds)
        started = time.perf_counter()
        result = cluster_signatures(signatures, counts, params)
        extras[f"pure_rounds_{rounds}"] = {"seconds": time.perf_counter() - started,
                                           "candidates": result.candidates, "clusters": result.clusters}
    started = time.perf_counter()
    exact_estimates = group_labels(len(ids), *similar_pairs(signatures, counts, threshold, "resemblance")[:2])
    extras["estimates_single_link_seconds"] = time.perf_counter() - started
    extras["estimates_agreement"] = agreement(signature_labels, exact_estimates)
    return extras


# --- synthetic ---------------------------------------------------------------------------------------

CLUSTER_PROCESS = r"""
import json, resource, sys, time
import numpy as np
sys.path.insert(0, sys.argv[1])
from neardup.fingerprint.clustering import ClusterParams, assign_ids, cluster_signatures
from neardup.fingerprint.lsh import choose_banding
folder, threshold, groups, rounds = sys.argv[2], float(sys.argv[3]), int(sys.argv[4]), sys.argv[5] == "1"
started = time.perf_counter()
signatures = np.load(folder + "/signatures.npy")
counts = np.load(folder + "/counts.npy")
loaded = time.perf_counter()
params = ClusterParams(threshold, choose_banding(threshold, signatures.shape[1], groups), rounds=rounds)
result = cluster_signatures(signatures, counts, params)
clustered = time.perf_counter()
keys = [f"doc-{d:07d}" for d in range(len(counts))]
ids = assign_ids(keys, result.labels, [None] * len(keys))
done = time.perf_counter()
np.save(folder + "/labels.npy", result.labels)
print(json.dumps({"load": loaded - started, "cluster": clustered - loaded, "ids": done - clustered,
                  "total": done - started, "clusters": result.clusters, "candidates": result.candidates,
                  "capped": result.capped_buckets, "distinct_ids": len(set(ids)),
                  "rounds": [vars(r) for r in result.rounds],
                  "max_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def synthetic_part(documents: int, threshold: float, seed: int, cache: Path) -> dict[str, Any]:
    from bench.cluster_synthetic import collection, paragraph_pool
    from neardup.fingerprint import scheme_version

    config = load_config(environ={})
    params = config.fingerprint
    folder = cache / f"synthetic-{scheme_version(params)}-{documents}-{seed}"
    if not (folder / "story.npy").is_file():
        pool = paragraph_pool(params, cache, log)
        log(f"generating {documents:,} documents (seed {seed})")
        made = collection(pool, documents, params, seed, log)
        folder.mkdir(parents=True, exist_ok=True)
        np.save(folder / "signatures.npy", made.signatures)
        np.save(folder / "counts.npy", made.counts)
        np.save(folder / "story.npy", made.story)
        log(f"generated in {made.seconds:.0f}s")
    story = np.load(folder / "story.npy")
    out: dict[str, Any] = {"documents": documents, "stories": int(story.max()) + 1, "seed": seed, "runs": {}}
    for rounds in (True, False):
        log(f"clustering {documents:,} stored signatures (rounds={rounds}) in a fresh process")
        started = time.perf_counter()
        result = subprocess.run([sys.executable, "-c", CLUSTER_PROCESS, str(ROOT), str(folder), str(threshold),
                                 str(params.groups), "1" if rounds else "0"],
                                capture_output=True, text=True, timeout=3600, check=False)
        if result.returncode != 0:
            raise RuntimeError(f"clustering process failed: {result.stderr[-3000:]}")
        run = json.loads(result.stdout)
        run["wall"] = time.perf_counter() - started
        labels = np.load(folder / "labels.npy")
        run["scores"] = contingency_scores(labels, story)
        out["runs"][rounds] = run
        log(f"  total {run['total']:.1f}s, peak {run['max_rss_mb']:.0f} MB, clusters {run['clusters']:,}")
    return out


# --- report ------------------------------------------------------------------------------------------

def fmt(x: float, digits: int = 4) -> str:
    return f"{x:.{digits}f}"


def table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|",
            *("| " + " | ".join(str(c) for c in row) + " |" for row in rows)]


def render(reuters: dict[str, Any] | None, synthetic: dict[str, Any] | None, command: str) -> str:
    load = os.getloadavg()
    lines = [SECTION, "", "```sh", command, "```", "",
             f"Machine: {platform.machine()}, {os.cpu_count()} vCPUs shared with Elasticsearch (same host) and with "
             f"whatever else runs there; load average {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} at the end. "
             "Method and definitions: the docstring of `bench/cluster.py`.", ""]
    if reuters:
        lines += ["### Reuters-21578: exact single-link versus neardup, side by side", "",
                  f"Stories with a body: {reuters['documents']:,}. Shingling all of them (canonical text, "
                  f"{reuters['shingling']:.1f}s) is common to every method and not in the times below. "
                  "exact s: exact Jaccard of all pairs + components, from the shingle sets. neardup s: "
                  "`neardup cluster --verify text` wall time (read fingerprints + cluster + verify + write ids "
                  "+ mapping/_meta/refresh), first run on a freshly enriched index (what differs from the "
                  "values `neardup index` seeded is written); read / cluster / verify / write: its parts "
                  "(verify: reading the candidates' texts, "
                  "shingling them, exact intersections; detailed below); rerun s: the same command again (nothing "
                  "to write). neardup, signatures only: the clusters `--verify signature` gives (the same "
                  "clustering of the stored signatures, in memory; quality only). "
                  "Quality against TOPICS (pair counting over labelled stories; see the docstring).", ""]
        rows = []
        for r in reuters["rows"]:
            job, rerun = r["job"], r["rerun"]
            parts = job["seconds"]
            methods = [("exact single-link", r["exact"], f"{r['exact_seconds']:.2f}"),
                       ("neardup", r["neardup"],
                        f"{job['wall']:.2f} ({parts.get('reading', 0):.2f} / {parts.get('cluster', 0):.2f} / "
                        f"{parts.get('verify', 0):.2f} / {parts.get('write', 0):.2f}); rerun {rerun['wall']:.2f}")]
            if "signature" in r:
                methods.append(("neardup, signatures only", r["signature"], "-"))
            for name, scores, seconds in methods:
                rows.append([f"{r['n']:,}", f"{r['threshold']:g}", name, fmt(scores["accuracy"]), fmt(scores["precision"]),
                             fmt(scores["recall"], 5), fmt(scores["f"], 5), seconds])
        lines += table(["docs", "t", "method", "accuracy", "precision", "recall", "F",
                        "seconds (read / cluster / verify / write)"], rows)
        lines += ["", "Agreement with exact single-link (pairs of documents put together): neardup (text "
                  "verification), and signatures only:", ""]
        rows = [[f"{r['n']:,}", f"{r['threshold']:g}", f"{r['exact_clusters']:,}", f"{r['job']['clusters']:,}",
                 f"{r['agreement']['reference_pairs']:,}", f"{r['agreement']['pairs']:,}",
                 fmt(r["agreement"]["precision"]), fmt(r["agreement"]["recall"]),
                 str(r["agreement"]["same_partition"]),
                 (f"{fmt(r['signature_agreement']['precision'])} / {fmt(r['signature_agreement']['recall'])}"
                  if "signature_agreement" in r else "-"),
                 f"{r['job']['candidates']:,}"] for r in reuters["rows"]]
        lines += table(["docs", "t", "exact clusters (incl. singletons)", "neardup clusters of 2+",
                        "exact pairs together", "neardup pairs together", "precision", "recall", "same partition",
                        "signatures only: precision / recall", "pairs compared by neardup"], rows)
        if any((r["job"].get("verification") or {}).get("method") == "text" for r in reuters["rows"]):
            lines += ["", "Cost of the text verification (first run; t - δ: the estimate a candidate needs; "
                      "documents read: texts fetched with `mget` and shingled, each once; pairs: distinct "
                      "candidate pairs with Ĵ ≥ t - δ, verified on their exact resemblance; by estimate: pairs "
                      "with a document whose text no longer gives its fingerprint):", ""]
            rows = []
            for r in reuters["rows"]:
                v = r["job"].get("verification") or {}
                if v.get("method") != "text":
                    continue
                sec = v["seconds"]
                rows.append([f"{r['n']:,}", f"{r['threshold']:g}", f"{v['floor']:.3f}", f"{v['documents_read']:,}",
                             f"{v['pairs_verified']:,}", f"{v['pairs_by_estimate']:,}", f"{sec['read']:.2f}",
                             f"{sec['shingle']:.2f}", f"{sec['exact']:.3f}", f"{sec['total']:.2f}",
                             f"{r['rerun']['seconds'].get('verify', 0):.2f}"])
            lines += table(["docs", "t", "t - δ", "documents read", "pairs verified", "by estimate", "read s",
                            "shingle s", "exact s", "verify s", "verify s (rerun)"], rows)
        extra = reuters.get("extra") or {}
        if extra:
            agg, inc = extra["aggregate"], extra["incremental"]
            lines += ["", f"All of Reuters at t = {agg['threshold']:g}, more runs:", "",
                      f"* `--mode aggregate` on a copy without cluster values: {agg['wall']:.1f}s "
                      f"(keys pass {agg['seconds'].get('keys', 0):.1f}s, composite aggregation + verification "
                      f"{agg['seconds'].get('buckets', 0):.1f}s, writes {agg['seconds'].get('write', 0):.1f}s); "
                      f"same clusters as `--verify signature` of the memory strategy (the aggregate strategy "
                      f"verifies on the signatures): **{extra['aggregate_same_ids']}**; "
                      f"again on the clustered copy: {extra['aggregate_rerun']['wall']:.1f}s, "
                      f"{extra['aggregate_rerun']['updated']} written.",
                      f"* `--incremental` with no new document: {inc['wall']:.2f}s, {inc['updated']} written.",
                      f"* The same signatures clustered in memory by `cluster_signatures`: iterative rounds "
                      f"{extra['pure_rounds_True']['seconds']:.2f}s ({extra['pure_rounds_True']['candidates']:,} pairs "
                      f"compared), one round {extra['pure_rounds_False']['seconds']:.2f}s "
                      f"({extra['pure_rounds_False']['candidates']:,}); exact single-link of the estimates "
                      f"(`similar_pairs` over all pairs) {extra['estimates_single_link_seconds']:.2f}s, "
                      f"agreement precision {extra['estimates_agreement']['precision']:.4f} / recall "
                      f"{extra['estimates_agreement']['recall']:.4f} (same partition: "
                      f"{extra['estimates_agreement']['same_partition']}).", "",
                      "Which candidate keys find the links (pairs with Ĵ ≥ t) of all of Reuters:", ""]
            lines += table(["keys", "per document", "candidate pairs", "links found", "share of all links"], extra["keys"])
    if synthetic:
        lines += ["", f"### {synthetic['documents']:,} synthetic documents", "",
                  f"`bench/cluster_synthetic.py`, seed {synthetic['seed']}: {synthetic['stories']:,} stories "
                  "(real paragraphs of Reuters and the Russian news, edited copies). Clustered from the stored "
                  "signatures in a fresh process (load the .npy files, `cluster_signatures`, `assign_ids` for "
                  "every document); peak RSS of that process. Scores: pair counting against the generating "
                  "stories (a copy edited below the threshold counts as a miss).", ""]
        rows = []
        for rounds, run in synthetic["runs"].items():
            rows.append(["iterative rounds" if rounds in (True, "True", "true") else "one round",
                         f"{run['load']:.1f}", f"{run['cluster']:.1f}", f"{run['ids']:.1f}", f"{run['total']:.1f}",
                         f"{run['max_rss_mb']:,.0f}", f"{run['candidates']:,}", f"{run['clusters']:,}",
                         fmt(run["scores"]["precision"]), fmt(run["scores"]["recall"]), f"{run['capped']}"])
        lines += table(["scheme", "load s", "cluster s", "ids s", "total s", "peak MB", "pairs compared",
                        "clusters (incl. singletons)", "precision", "recall", "capped buckets"], rows)
    return "\n".join(lines) + "\n"


def write_section(path: Path, section: str) -> None:
    """Replace this script's section of a Markdown file such as docs/benchmarks.md (from its heading
    to the next ``## ``), or append it."""
    text = path.read_text(encoding="utf-8") if path.exists() else "# Benchmark results\n"
    pattern = re.compile(rf"^{re.escape(SECTION)}\b.*?(?=^## |\Z)", re.S | re.M)
    if pattern.search(text):
        text = pattern.sub(lambda _: section + "\n", text, count=1)
    else:
        text = text.rstrip("\n") + "\n\n" + section
    path.write_text(text, encoding="utf-8")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--es-url", default=os.environ.get("NEARDUP_TEST_ES_URL", "http://127.0.0.1:9200"))
    parser.add_argument("--thresholds", type=float, nargs="+", default=[0.8, 0.5])
    parser.add_argument("--sizes", nargs="+", default=["1000", "10000", "all"])
    parser.add_argument("--synthetic", type=int, default=1_000_000, help="synthetic documents (0: skip)")
    parser.add_argument("--seed", type=int, default=20240617)
    parser.add_argument("--skip-reuters", action="store_true")
    parser.add_argument("--cache", type=Path, default=ROOT / "run" / "bench-cache",
                        help="folder for the paragraph pool and the generated signatures")
    parser.add_argument("--report-dir", type=Path, default=Path(tempfile.gettempdir()),
                        help="where the HTML reports of all-Reuters runs go")
    parser.add_argument("--results", type=Path, help="also write the section into this Markdown file, replacing its own "
                        "section (e.g. docs/benchmarks.md)")
    parser.add_argument("--save", type=Path, help="also save the measurements as JSON")
    parser.add_argument("--load", type=Path, nargs="+", default=[],
                        help="render measurements saved by earlier runs (e.g. the two parts run apart)")
    args = parser.parse_args(argv)
    sizes = [None if s == "all" else int(s) for s in args.sizes]
    parts: dict[str, Any] = {"reuters": None, "synthetic": None, "commands": []}
    for saved in args.load:
        loaded = json.loads(saved.read_text(encoding="utf-8"))
        for key in ("reuters", "synthetic"):
            parts[key] = loaded.get(key) or parts[key]
        parts["commands"] += loaded.get("commands", [])
    if not args.load:
        if not args.skip_reuters:
            es = Elasticsearch(args.es_url, request_timeout=300)
            parts["reuters"] = reuters_part(es, args.es_url, args.thresholds, sizes, args.report_dir)
        if args.synthetic:
            parts["synthetic"] = synthetic_part(args.synthetic, args.thresholds[0], args.seed, args.cache)
        parts["commands"].append(".venv/bin/python bench/cluster.py "
                                 + " ".join(a for a in (argv if argv is not None else sys.argv[1:])))
    if args.save:
        args.save.write_text(json.dumps(parts, default=str), encoding="utf-8")
    section = render(parts["reuters"], parts["synthetic"], "\n".join(parts["commands"]))
    print(section)
    if args.results:
        write_section(args.results, section)
    return 0


if __name__ == "__main__":
    sys.exit(main())
