#!/usr/bin/env python
"""Quality and speed of neardup against exact ground truth and the methods users pick instead.

    .venv/bin/python bench/quality.py [--quick] [--seed N] [--out docs/images] [--report FILE]

1. **Corpora.** Reuters-21578 (title + body; its natural near-duplicates are corrections and
   re-sends), and the Russian news plus edited copies of a sample of its articles (word
   deletions / insertions / replacements, paragraph swaps, boilerplate, quoting inside a
   longer article; ``quality.edits``), built with ``--seed``. Documents without a single
   canonical token are left out (they have no shingles to compare).
2. **Truth.** Exact resemblance and containment of the canonical shingle sets
   (``Fingerprinter.canonical_tokens`` + ``Fingerprinter.shingles``) of every pair that shares a
   shingle, from an inverted index (``quality.truth``).
3. **Methods** on the same documents (``quality.methods``): neardup as the proxy uses it
   (``fingerprint.similar_pairs`` on the signatures, estimate ≥ t; groups by
   ``fingerprint.group_labels``), in resemblance and in containment mode; supershingles alone
   (6×14, 14×6), megashingles alone; datasketch MinHashLSH; simhash; Fess's b-bit minhash; TF-IDF
   cosine over lemmas (``engine_eval.tfidf_method``, through ``EXTRA_METHODS``).
4. **Scores** for thresholds 0.50…0.95: precision, recall, F1 of the reported pairs, adjusted
   Rand index of the groups (connected components); build and query throughput; bytes stored
   per document; candidate probability against exact resemblance with the S-curves.
5. **Shingle length** 3, 4, 5, 7, 10 on both corpora.

Tables go to stdout (Markdown) and, with ``--report``, to a file; plots (PNG) to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))            # the helper package bench/quality/
sys.path.insert(0, str(HERE.parent))     # the checkout, when run without installing

from quality.curves import binned_rate, plot_candidate_probability, plot_scores  # noqa: E402
from quality.edits import EDIT_KINDS, Edit, edited_copies  # noqa: E402
from quality.methods import MethodRun, run_datasketch, run_fess, run_shared_values, run_simhash, timed  # noqa: E402
from quality.metrics import adjusted_rand_index, band_probability, expected_minhash_scores, score_pairs, two_band_probability  # noqa: E402
from quality.pairs import connected_components, disjoint_pairs, pair_keys, split_keys  # noqa: E402
from quality.truth import Truth, exact_truth  # noqa: E402

DEFAULT_SEED = 20240617
THRESHOLDS = [round(0.5 + 0.05 * k, 2) for k in range(10)]
SHINGLE_SIZES = [3, 4, 5, 7, 10]
GROUPINGS = [(6, 14), (14, 6)]
#: Pairs with containment below this are counted but not kept (below every threshold scored).
TRUTH_FLOOR = 0.2

#: Further methods, ``name -> runner`` (None: not implemented yet, named in the tables so the gap
#: is visible), where a runner takes a :class:`CorpusData` and the thresholds and returns a
#: ``MethodRun``. TF-IDF cosine over lemmas lives in ``bench/engine_eval/tfidf_method.py``.
from engine_eval.tfidf_method import NAME as TFIDF_NAME  # noqa: E402
from engine_eval.tfidf_method import run_tfidf  # noqa: E402

EXTRA_METHODS: dict[str, Callable[[CorpusData, list[float]], MethodRun] | None] = {
    TFIDF_NAME: run_tfidf,
}


# ---------------------------------------------------------------- corpora

@dataclass
class CorpusData:
    name: str
    ids: list[str]
    texts: list[str]
    tokens: list[list[str]] = field(default_factory=list)
    token_hashes: list[np.ndarray] = field(default_factory=list)
    canonical_seconds: float = 0.0
    dropped_empty: int = 0
    #: designed near-duplicates: (copy index, Edit) for the edited Russian corpus
    designed: list[tuple[int, Edit]] = field(default_factory=list)

    @property
    def n(self) -> int:
        return len(self.texts)


def joined(*fields: object) -> str:
    """Text fields joined the way the indexer joins title and body (None / non-str skipped)."""
    return "\n".join(f for f in fields if isinstance(f, str) and f)


def load_reuters(limit: int | None) -> CorpusData:
    from neardup.corpora import reuters_documents

    ids, texts = [], []
    for doc in reuters_documents():
        ids.append(f"reuters-{doc['id']}")
        texts.append(joined(doc["title"], doc["body"]))
        if limit and len(texts) >= limit:
            break
    return CorpusData(name="Reuters-21578", ids=ids, texts=texts)


def load_ru_news(limit: int | None, copies: int, seed: int) -> CorpusData:
    from neardup.corpora import ru_news_documents

    ids, texts = [], []
    for doc in ru_news_documents():
        ids.append(doc["id"])
        texts.append(joined(doc["title"], doc["body"]))
        if limit and len(texts) >= limit:
            break
    originals = len(texts)
    copied, edits = edited_copies(texts, copies, seed)
    corpus = CorpusData(name="ru-news + edited copies", ids=ids + [f"copy-{k}" for k in range(len(copied))],
                        texts=texts + copied)
    corpus.designed = [(originals + k, e) for k, e in enumerate(edits)]
    return corpus


def canonicalise(corpus: CorpusData, fp) -> CorpusData:
    """Canonical tokens of every text (timed, cold lemma cache); drop texts without tokens."""
    start = time.perf_counter()
    tokens = [fp.canonical_tokens(t) for t in corpus.texts]
    seconds = time.perf_counter() - start
    keep = [k for k, t in enumerate(tokens) if t]
    new_index = {old: new for new, old in enumerate(keep)}
    designed = [(new_index[c], replace(e, original=new_index[e.original],
                                       host=new_index.get(e.host, -1) if e.host >= 0 else -1))
                for c, e in corpus.designed if c in new_index and e.original in new_index]
    kept_tokens = [tokens[k] for k in keep]
    return CorpusData(name=corpus.name, ids=[corpus.ids[k] for k in keep],
                      texts=[corpus.texts[k] for k in keep], tokens=kept_tokens,
                      token_hashes=[fp.token_hashes(t) for t in kept_tokens],
                      canonical_seconds=seconds, dropped_empty=corpus.n - len(keep), designed=designed)


def shingle_strings(tokens: Sequence[str], size: int) -> list[str]:
    """The canonical shingles as text, with neardup's rule for short documents (one shingle of
    all tokens when there are fewer than ``size``)."""
    width = min(size, len(tokens))
    return [" ".join(tokens[p:p + width]) for p in range(len(tokens) - width + 1)] if tokens else []


def vocabulary_ids(token_lists: Sequence[Sequence[str]]) -> tuple[list[str], list[np.ndarray]]:
    index: dict[str, int] = {}
    ids = [np.array([index.setdefault(w, len(index)) for w in tokens], dtype=np.int64) for tokens in token_lists]
    return list(index), ids


# ---------------------------------------------------------------- neardup

@dataclass
class NeardupData:
    signatures: np.ndarray        # (N, K) uint64
    counts: np.ndarray            # (N,) shingle counts
    supers: np.ndarray            # (N, G)
    megas: np.ndarray             # (N, G(G-1)/2)
    shingles: list[np.ndarray]    # canonical shingle-hash sets, for the truth
    fingerprint_seconds: float    # canonical tokens -> Fingerprint
    source_bytes: float           # mean JSON size of doc["neardup"]


def fingerprint_corpus(corpus: CorpusData, fp) -> NeardupData:
    """Fingerprints from the canonical tokens (timed: the build cost every method shares the
    canonicalisation of), checked on a sample against ``fp.fingerprint(text)``."""
    prints, seconds = timed(lambda: [fp.fingerprint_tokens(tokens) for tokens in corpus.tokens])
    step = max(1, corpus.n // 200)
    differ = [k for k in range(0, corpus.n, step) if fp.fingerprint(corpus.texts[k]) != prints[k]]
    if differ:
        raise SystemExit(f"{corpus.name}: fingerprint(text) != fingerprint_tokens(canonical_tokens(text)) "
                         f"for documents {differ[:5]}")
    shingles = shingle_sets(corpus, fp.params.shingle_size, fp.params.seed)
    if any(not np.array_equal(fp.shingles(corpus.tokens[k]), shingles[k]) for k in range(0, corpus.n, step)):
        raise SystemExit(f"{corpus.name}: Fingerprinter.shingles differs from the shingles derived here")
    mismatched = sum(int(f.shingle_count != len(s)) for f, s in zip(prints, shingles))
    if mismatched:
        raise SystemExit(f"{corpus.name}: {mismatched} fingerprints count a different number of "
                         "shingles than Fingerprinter.shingles gives")
    sample = prints[::step]
    source_bytes = float(np.mean([len(json.dumps(f.to_source(), separators=(",", ":"))) for f in sample]))
    return NeardupData(signatures=np.stack([f.signature for f in prints]),
                       counts=np.array([f.shingle_count for f in prints], dtype=np.int64),
                       supers=np.stack([f.supershingles for f in prints]),
                       megas=np.stack([f.megashingles for f in prints]),
                       shingles=shingles, fingerprint_seconds=seconds, source_bytes=source_bytes)


def shingle_sets(corpus: CorpusData, size: int, seed: int) -> list[np.ndarray]:
    """Unique shingle hashes of every document, as ``Fingerprinter.shingles`` makes them, from
    token hashes computed once per corpus (the shingle-length sweep reuses them)."""
    from neardup.fingerprint.hashing import shingle_hashes

    return [np.unique(shingle_hashes(h, size, seed)) for h in corpus.token_hashes]


def regroup(signatures: np.ndarray, groups: int) -> tuple[np.ndarray, np.ndarray]:
    """Supershingles and megashingles of the same signatures under another grouping, with the
    fingerprint package's own hashing (the signature does not depend on the grouping)."""
    from neardup.fingerprint.hashing import megashingles, supershingles

    supers = np.stack([supershingles(s, groups) for s in signatures])
    return supers, np.stack([megashingles(s) for s in supers])


def run_neardup(data: NeardupData, thresholds: Sequence[float], mode: str,
                build_seconds: float) -> tuple[MethodRun, dict[float, np.ndarray]]:
    """Pairs as the proxy finds them, and the proxy's groups (``group_labels``) per threshold."""
    from neardup.fingerprint import group_labels, similar_pairs

    n = len(data.counts)
    run = MethodRun(name=f"neardup ({mode})", mode=mode, build_seconds=build_seconds,
                    bytes_per_doc=float(data.signatures.shape[1] * 8 + 8 + data.supers.shape[1] * 8
                                        + data.megas.shape[1] * 8))
    groups: dict[float, np.ndarray] = {}
    total = 0.0
    for t in thresholds:
        (i, j, _), seconds = timed(similar_pairs, data.signatures, data.counts, t, mode)
        total += seconds
        run.pairs[t] = pair_keys(i, j, n)
        groups[t] = group_labels(n, i, j)
    run.query_seconds = total / len(thresholds)
    run.note = f"stores {data.source_bytes:.0f} bytes of JSON in doc[\"neardup\"]"
    return run, groups


# ---------------------------------------------------------------- evaluation of one corpus

@dataclass
class Scored:
    score: object            # PairScore
    ari: float


@dataclass
class CorpusResult:
    corpus: CorpusData
    truth: Truth
    truth_seconds: float
    neardup: NeardupData
    runs: list[MethodRun]
    scores: dict[tuple[str, float], Scored]
    rates: dict[str, tuple[object, Callable]]
    estimate_error: dict[str, float]
    designed: list[dict[str, object]]
    missing: list[str]


def truth_groups(truth: Truth, thresholds: Sequence[float], mode: str) -> dict[float, np.ndarray]:
    out = {}
    for t in thresholds:
        i, j = split_keys(truth.pairs_at(t, mode), truth.n)
        out[t] = connected_components(truth.n, i, j)
    return out


def estimate_error(truth: Truth, signatures: np.ndarray, independent: np.ndarray) -> dict[str, float]:
    """Ĵ - J over the kept pairs: bias, the share within ±0.12 (the fingerprint's
    target), and the spread of (Ĵ-J)/sqrt(J(1-J)/K) over document-disjoint pairs (1 when the
    slots behave as independent trials; pairs sharing documents are correlated trials)."""
    k = signatures.shape[1]
    chunks = []
    for start in range(0, len(truth.i), 200_000):
        a = signatures[truth.i[start:start + 200_000]]
        b = signatures[truth.j[start:start + 200_000]]
        chunks.append((a == b).sum(axis=1) / k)
    estimate = np.concatenate(chunks) if chunks else np.zeros(0)
    exact = truth.resemblance
    error = estimate - exact
    z = error / np.sqrt(np.maximum(exact * (1 - exact), 1e-12) / k)
    interior = (exact > 0.05) & (exact < 0.95)
    solo = np.zeros(len(exact), dtype=bool)
    solo[independent] = True
    return {"pairs": float(len(error)), "bias": float(error.mean()) if len(error) else float("nan"),
            "within_0.12": float(np.mean(np.abs(error) <= 0.12)) if len(error) else float("nan"),
            "z_sd_all": float(z[interior].std()) if interior.any() else float("nan"),
            "z_sd": float(z[interior & solo].std()) if (interior & solo).any() else float("nan"),
            "z_pairs": float((interior & solo).sum())}


def designed_rows(corpus: CorpusData, truth: Truth, runs: dict[str, MethodRun], default_t: float
                  ) -> list[dict[str, object]]:
    """Per edit kind: exact similarities of (copy, original) and what neardup reports."""
    if not corpus.designed:
        return []
    n = truth.n
    keys = pair_keys(np.array([c for c, _ in corpus.designed]), np.array([e.original for _, e in corpus.designed]), n)
    # pair_keys sorts; keep the kinds aligned with the sorted keys
    kind_of = {}
    for c, e in corpus.designed:
        kind_of[min(c, e.original) * n + max(c, e.original)] = e
    resemblance = truth.lookup(keys, "resemblance")
    containment = truth.lookup(keys, "containment")
    reported_r = np.isin(keys, runs["neardup (resemblance)"].at(default_t))
    reported_c = np.isin(keys, runs["neardup (containment)"].at(default_t))
    rows = []
    for kind in EDIT_KINDS:
        mask = np.array([kind_of[k].kind == kind for k in keys])
        if not mask.any():
            continue
        strength = np.array([kind_of[k].strength for k in keys[mask]])
        true_r = resemblance[mask] >= default_t
        true_c = containment[mask] >= default_t
        rows.append({
            "kind": kind, "copies": int(mask.sum()),
            "strength": f"{strength.min():.2f}–{strength.max():.2f}",
            "resemblance": float(np.mean(resemblance[mask])),
            "containment": float(np.mean(containment[mask])),
            "true_r": int(true_r.sum()), "found_r": int((reported_r[mask] & true_r).sum()),
            "true_c": int(true_c.sum()), "found_c": int((reported_c[mask] & true_c).sum()),
        })
    return rows


def evaluate_corpus(corpus: CorpusData, fp, thresholds: list[float], default_t: float,
                    log: Callable[[str], None]) -> CorpusResult:
    params = fp.params
    nd = fingerprint_corpus(corpus, fp)
    log(f"  fingerprints: {corpus.n / nd.fingerprint_seconds:,.0f} docs/s from tokens")
    truth, truth_seconds = timed(exact_truth, nd.shingles, TRUTH_FLOOR)
    log(f"  truth: {truth.pairs_sharing:,} pairs share a shingle, {len(truth.i):,} kept, {truth_seconds:.1f} s")
    runs: list[MethodRun] = []
    groups: dict[str, dict[float, np.ndarray]] = {}
    for mode in ("resemblance", "containment"):
        run, run_groups = run_neardup(nd, thresholds, mode, nd.fingerprint_seconds)
        runs.append(run)
        groups[run.name] = run_groups
        log(f"  {run.name}: {run.query_seconds:.2f} s per threshold")
    band_pairs: dict[str, np.ndarray] = {}
    configured = (params.groups, params.rows)
    for g, r in dict.fromkeys([configured] + GROUPINGS):
        if (g, r) == configured:
            supers, megas, extra = nd.supers, nd.megas, 0.0
        else:
            (supers, megas), extra = timed(regroup, nd.signatures, g)
        tag = f"{g}×{r}" + (" (configured)" if (g, r) == configured else "")
        run = run_shared_values(f"supershingles {tag}, share ≥ 1", supers, nd.fingerprint_seconds + extra)
        runs.append(run)
        band_pairs[f"super {g}×{r}"] = run.fixed
        mega = run_shared_values(f"megashingles {tag}, share ≥ 1", megas, nd.fingerprint_seconds + extra)
        band_pairs[f"mega {g}×{r}"] = mega.fixed
        if (g, r) == configured:
            runs.append(mega)
    log("  supershingles / megashingles done")
    raw, verified = run_datasketch([shingle_strings(t, params.shingle_size) for t in corpus.tokens],
                                   thresholds, num_perm=params.num_perm)
    runs += [raw, verified]
    log(f"  datasketch: build {raw.build_seconds:.1f} s, {raw.query_seconds:.2f} s per threshold")
    runs.append(run_simhash(nd.shingles))
    vocabulary, token_ids = vocabulary_ids(corpus.tokens)
    runs.append(run_fess(token_ids, vocabulary))
    log("  simhash, Fess done")
    missing = []
    for name, runner in EXTRA_METHODS.items():
        if runner is None:
            missing.append(name)
        else:
            runs.append(runner(corpus, thresholds))

    scores: dict[tuple[str, float], Scored] = {}
    truth_group = {mode: truth_groups(truth, thresholds, mode) for mode in ("resemblance", "containment")}
    for run in runs:
        fixed_labels = None
        if run.fixed is not None:
            fixed_labels = connected_components(truth.n, *split_keys(run.fixed, truth.n))
        for t in thresholds:
            reported = run.at(t)
            labels = groups[run.name][t] if run.name in groups else (
                fixed_labels if fixed_labels is not None
                else connected_components(truth.n, *split_keys(reported, truth.n)))
            scores[(run.name, t)] = Scored(score_pairs(reported, truth.pairs_at(t, run.mode)),
                                           adjusted_rand_index(labels, truth_group[run.mode][t]))

    rates = {}
    independent = disjoint_pairs(truth.i, truth.j, seed=0)
    s = truth.resemblance[independent]
    edges = np.round(np.arange(TRUTH_FLOOR, 1.0001, 0.05), 4)
    for g, r in dict.fromkeys([configured] + GROUPINGS):
        for kind, curve in (("super", band_probability), ("mega", two_band_probability)):
            if kind == "mega" and (g, r) != configured:
                continue
            label = f"{kind} {g}×{r}"
            candidate = np.isin(truth.keys[independent], band_pairs[label])
            rates[label] = (binned_rate(s, candidate, curve(s, r, g), edges),
                            (lambda x, r=r, g=g, curve=curve: curve(x, r, g)))
    by_name = {run.name: run for run in runs}
    return CorpusResult(corpus=corpus, truth=truth, truth_seconds=truth_seconds, neardup=nd, runs=runs,
                        scores=scores, rates=rates, estimate_error=estimate_error(truth, nd.signatures, independent),
                        designed=designed_rows(corpus, truth, by_name, default_t), missing=missing)


# ---------------------------------------------------------------- shingle length

def shingle_sweep(corpora: Sequence[CorpusData], base_params, sizes: Sequence[int], default_t: float,
                  log: Callable[[str], None]) -> list[dict[str, object]]:
    """Per shingle length and corpus: exact-truth pair counts, accidental overlap, neardup's
    scores at the default threshold, and (edited corpus) how similar the designed copies stay."""
    from neardup.fingerprint import Fingerprinter, similar_pairs

    rows = []
    for size in sizes:
        fp = Fingerprinter(replace(base_params, shingle_size=size))
        for corpus in corpora:
            shingles = shingle_sets(corpus, size, base_params.seed)
            prints, seconds = timed(lambda: [fp.fingerprint_shingles(s) for s in shingles])
            truth = exact_truth(shingles, TRUTH_FLOOR)
            signatures = np.stack([f.signature for f in prints])
            counts = np.array([f.shingle_count for f in prints])
            i, j, _ = similar_pairs(signatures, counts, default_t, "resemblance")
            score = score_pairs(pair_keys(i, j, truth.n), truth.pairs_at(default_t))
            row: dict[str, object] = {
                "k": size, "corpus": corpus.name, "docs": corpus.n,
                "sharing": truth.pairs_sharing / (corpus.n * (corpus.n - 1) / 2),
                "t0.5": len(truth.pairs_at(0.5)), "t0.8": len(truth.pairs_at(0.8)),
                "t0.9": len(truth.pairs_at(0.9)),
                "precision": score.precision, "recall": score.recall, "f1": score.f1,
                "mean_shingles": float(np.mean(counts)),
            }
            if corpus.designed:
                n = truth.n
                by_kind: dict[str, list[int]] = {}
                for c, e in corpus.designed:
                    light = e.kind in ("swap", "boilerplate") or (e.kind != "quoted" and e.strength <= 0.1)
                    if light:
                        by_kind.setdefault("light", []).append(min(c, e.original) * n + max(c, e.original))
                    if e.kind in ("delete", "insert", "replace", "mixed") and e.strength <= 0.1:
                        by_kind.setdefault("words≤10%", []).append(min(c, e.original) * n + max(c, e.original))
                for label, keys in by_kind.items():
                    sim = truth.lookup(np.array(keys, dtype=np.int64))
                    row[f"{label} mean J"] = float(sim.mean())
                    row[f"{label} ≥ t"] = float(np.mean(sim >= default_t))
                    row[f"{label} shares"] = {t: float(np.mean(sim >= t - 1e-12)) for t in THRESHOLDS}
                # pairs above the threshold that were not designed (natural duplicates, and
                # copies matching a relative of their original)
                designed_keys = {min(c, e.original) * n + max(c, e.original) for c, e in corpus.designed}
                above = truth.pairs_at(default_t)
                row["other ≥ t"] = int(sum(1 for k in above.tolist() if k not in designed_keys))
                row["other ≥ 0.5"] = int(sum(1 for k in truth.pairs_at(0.5).tolist() if k not in designed_keys))
            rows.append(row)
            log(f"  k={size} {corpus.name}: P {score.precision:.3f} R {score.recall:.3f} "
                f"({corpus.n / seconds:,.0f} docs/s from shingles)")
    return rows


# ---------------------------------------------------------------- report

def fmt(x: float, digits: int = 3) -> str:
    return "–" if x is None or (isinstance(x, float) and np.isnan(x)) else f"{x:.{digits}f}"


def table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return lines


#: Half-width of the band around the threshold left out by the "outside" scores.
GREY = 0.05


def outside_grey_zone(truth: Truth, reported: np.ndarray, threshold: float, mode: str):
    """Pair scores with the pairs whose exact similarity is within ±GREY of the threshold left
    out of both sets: what remains are the pairs any estimator should decide correctly."""
    sim = truth.similarity(mode)
    grey = truth.keys[np.abs(sim - threshold) < GREY]
    return score_pairs(np.setdiff1d(reported, grey, assume_unique=True),
                       np.setdiff1d(truth.pairs_at(threshold, mode), grey, assume_unique=True))


def corpus_report(result: CorpusResult, thresholds: list[float], default_t: float, plot_name: str) -> list[str]:
    c, truth, nd = result.corpus, result.truth, result.neardup
    out = [f"### {c.name}", ""]
    all_pairs = c.n * (c.n - 1) // 2
    out.append(f"{c.n:,} documents ({c.dropped_empty} without any canonical token left out); "
               f"mean {np.mean(nd.counts):.0f} shingles a document; canonicalisation "
               f"{c.n / c.canonical_seconds:,.0f} docs/s (cold caches; shared by every method). "
               f"Exact truth: {truth.pairs_sharing:,} of {all_pairs:,} pairs share ≥ 1 shingle "
               f"({result.truth_seconds:.1f} s, inverted index, no shingle skipped); "
               + ", ".join(f"{len(truth.pairs_at(t)):,} pairs with resemblance ≥ {t}" for t in (0.5, 0.8, 0.9))
               + f"; {len(truth.pairs_at(default_t, 'containment')):,} with containment ≥ {default_t}.")
    out.append("")
    out.append(f"**At the default threshold t = {default_t}** (a pair is true when its exact similarity "
               "is ≥ t: resemblance, or containment for the containment mode):")
    out.append("")
    rows = []
    for run in result.runs:
        sc = result.scores[(run.name, default_t)]
        total = run.build_seconds + run.query_seconds
        clear = outside_grey_zone(truth, run.at(default_t), default_t, run.mode)
        rows.append([run.name, fmt(sc.score.precision), fmt(sc.score.recall), fmt(sc.score.f1), fmt(sc.ari),
                     f"{fmt(clear.precision)} / {fmt(clear.recall)}",
                     f"{sc.score.reported:,}", f"{sc.score.true:,}",
                     f"{c.n / run.build_seconds:,.0f}" if run.build_seconds else "–",
                     f"{c.n / run.query_seconds:,.0f}" if run.query_seconds else "–",
                     f"{c.n / total:,.0f}" if total else "–", f"{run.bytes_per_doc:,.0f}"])
    for name in result.missing:
        rows.append([name, "not yet"] + [""] * 11)
    out += table(["method", "precision", "recall", "F1", "ARI", f"P / R outside t±{GREY}", "reported", "true",
                  "build docs/s",
                  "query docs/s", "docs/s", "bytes/doc"], rows)
    out.append("")
    notes = [f"- {run.name}: {run.note}" for run in result.runs if run.note]
    out += notes + [""]
    for label, key in (("F1", "f1"), ("precision", "precision"), ("recall", "recall"), ("ARI", None)):
        out.append(f"{label} by threshold:")
        out.append("")
        rows = []
        for run in result.runs:
            cells = []
            for t in thresholds:
                sc = result.scores[(run.name, t)]
                cells.append(fmt(sc.ari if key is None else getattr(sc.score, key), 3))
            rows.append([run.name] + cells)
        out += table(["method"] + [f"{t:.2f}" for t in thresholds], rows)
        out.append("")
    out.append("neardup (resemblance) observed against the MinHash model (matches in K slots ~ "
               "Binomial(K, J), reported when ≥ ⌈tK⌉), computed over the same exact similarities; "
               "the last columns predict the same corpus with more minhashes:")
    out.append("")
    rows = []
    name = "neardup (resemblance)"
    k_now = nd.signatures.shape[1]
    for t in thresholds:
        observed = result.scores[(name, t)].score
        row = [f"{t:.2f}", f"{fmt(observed.precision)} / {fmt(observed.recall)}"]
        for k in (k_now, 128, 256, 512):
            p, r, _ = expected_minhash_scores(truth.resemblance, t, k)
            row.append(f"{fmt(p)} / {fmt(r)}")
        rows.append(row)
    out += table(["t", f"observed P / R (K={k_now})", f"model K={k_now}", "model K=128", "model K=256",
                  "model K=512"], rows)
    near = np.mean(np.abs(truth.resemblance[truth.resemblance >= default_t - 0.1] - default_t) <= 0.05)
    out.append("")
    out.append(f"{100 * near:.0f} % of the pairs with exact resemblance ≥ {default_t - 0.1:.1f} lie within "
               f"±0.05 of t = {default_t}, where K = {k_now} slots (standard error "
               f"{np.sqrt(default_t * (1 - default_t) / k_now):.3f} at J = t) cannot decide reliably.")
    out.append("")
    err = result.estimate_error
    out.append(f"Estimated vs exact resemblance over the {int(err['pairs']):,} kept pairs: bias "
               f"{err['bias']:+.4f}, {100 * err['within_0.12']:.1f} % within ±0.12. Spread of "
               f"(Ĵ-J)/sqrt(J(1-J)/K) over {int(err['z_pairs']):,} document-disjoint pairs with 0.05 < J < 0.95: "
               f"{err['z_sd']:.2f} (1 for independent slots; {err['z_sd_all']:.2f} over all pairs, which "
               "are not independent trials where they share documents and text).")
    out.append("")
    out.append(f"Candidate probability against exact resemblance ([plot](images/{plot_name})): observed "
               "share of pairs that share a supershingle / megashingle, per resemblance bin, with "
               "95 % Wilson intervals, against the mean theoretical value of the bin's pairs. Only "
               "document-disjoint pairs are counted (a random maximal set of kept pairs in which no "
               "document appears twice), so that the pairs are independent binomial trials:")
    out.append("")
    labels = list(result.rates)
    first = result.rates[labels[0]][0]
    rows = []
    for b in range(len(first.centre)):
        if first.n[b] == 0:
            continue
        row = [f"{first.centre[b] - 0.025:.2f}–{first.centre[b] + 0.025:.2f}", f"{int(first.n[b]):,}"]
        for label in labels:
            rate = result.rates[label][0]
            interval = f"[{fmt(rate.low[b], 3)}, {fmt(rate.high[b], 3)}]"
            row.append(f"{fmt(rate.observed[b], 3)} {interval} vs {fmt(rate.expected[b], 3)}")
        rows.append(row)
    out += table(["resemblance", "pairs"] + labels, rows)
    out.append("")
    agreement = ", ".join(f"{label}: {int(r.agrees.sum())}/{len(r.agrees)} bins" for label, (r, _) in result.rates.items())
    out.append(f"Theory inside the 95 % interval: {agreement}.")
    out.append("")
    if result.designed:
        out.append(f"Designed near-duplicates (copy vs its original), at t = {default_t}:")
        out.append("")
        rows = [[d["kind"], d["copies"], d["strength"], fmt(d["resemblance"]), fmt(d["containment"]),
                 f"{d['found_r']}/{d['true_r']}", f"{d['found_c']}/{d['true_c']}"] for d in result.designed]
        out += table(["edit", "copies", "strength", "mean resemblance", "mean containment",
                      "neardup found / true (resemblance)", "neardup found / true (containment)"], rows)
        out.append("")
    return out


def sweep_report(rows: list[dict[str, object]], default_t: float) -> list[str]:
    extra = [key for key in ("light mean J", "light ≥ t", "words≤10% mean J", "words≤10% ≥ t", "other ≥ t",
                             "other ≥ 0.5")
             if any(key in r for r in rows)]
    header = ["k", "corpus", "shingles/doc", "pairs sharing ≥1 shingle", "J ≥ 0.5", "J ≥ 0.8", "J ≥ 0.9",
              f"neardup P@{default_t}", f"R@{default_t}", f"F1@{default_t}"] + extra
    body = []
    for r in rows:
        body.append([r["k"], r["corpus"], f"{r['mean_shingles']:.0f}", f"{100 * r['sharing']:.3f} %",
                     f"{r['t0.5']:,}", f"{r['t0.8']:,}", f"{r['t0.9']:,}", fmt(r["precision"]), fmt(r["recall"]),
                     fmt(r["f1"])] + [fmt(r[k]) if isinstance(r.get(k), float) else r.get(k, "") for k in extra])
    lines = table(header, body)
    shares = [r for r in rows if "light shares" in r]
    if shares:
        lines += ["", "Share of the light designed copies (word edits ≤ 10 %, paragraph swaps, boilerplate) "
                  "whose exact resemblance to their original reaches t, by shingle length:", ""]
        lines += table(["k"] + [f"{t:.2f}" for t in THRESHOLDS],
                       [[r["k"]] + [fmt(r["light shares"][t], 2) for t in THRESHOLDS] for r in shares])
    return lines


def save_plots(results: list[CorpusResult], thresholds: list[float], out_dir: Path) -> tuple[str, str]:
    out_dir.mkdir(parents=True, exist_ok=True)
    curve_name, score_name = "quality-candidate-probability.png", "quality-scores.png"
    plot_candidate_probability(str(out_dir / curve_name),
                               [(r.corpus.name, dict(r.rates)) for r in results])
    panels = []
    for r in results:
        methods = {}
        for run in r.runs:
            if run.mode != "resemblance":
                continue
            methods[run.name] = {key: [getattr(r.scores[(run.name, t)].score, key) for t in thresholds]
                                 for key in ("precision", "recall", "f1")}
        panels.append((r.corpus.name, methods))
    plot_scores(str(out_dir / score_name), panels, thresholds)
    return curve_name, score_name


# ---------------------------------------------------------------- main

def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true",
                        help="a small sample (3,000 Reuters stories, 1,500 Russian articles + 300 copies)")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED, help=f"edits seed (default {DEFAULT_SEED})")
    parser.add_argument("--out", type=Path, default=HERE.parent / "docs" / "images",
                        help="folder for the PNG plots (default: docs/images, where docs/benchmarks.md shows them)")
    parser.add_argument("--report", type=Path, help="also write the Markdown report to this file")
    parser.add_argument("--copies", type=int, help="edited copies of Russian articles (default 1,000; quick 300)")
    parser.add_argument("--shingle-sizes", default=",".join(map(str, SHINGLE_SIZES)),
                        help="shingle lengths for the sweep ('' to skip)")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    from neardup.config import load_config
    from neardup.fingerprint import Fingerprinter

    config = load_config()
    params = config.fingerprint
    default_t = config.collapse.threshold
    thresholds = THRESHOLDS if default_t in THRESHOLDS else sorted(THRESHOLDS + [default_t])
    copies = args.copies if args.copies is not None else (300 if args.quick else 1000)
    started = time.perf_counter()

    def log(message: str) -> None:
        print(f"[{time.perf_counter() - started:6.1f} s] {message}", file=sys.stderr, flush=True)

    command = "bench/quality.py" + (" --quick" if args.quick else "") + f" --seed {args.seed}"
    log(f"{command}  (seed {args.seed}; fingerprint scheme {Fingerprinter(params).version}: "
        f"shingle {params.shingle_size}, {params.groups}×{params.rows}; threshold {default_t})")
    fp = Fingerprinter(params)
    corpora = []
    for loader in (lambda: load_reuters(3000 if args.quick else None),
                   lambda: load_ru_news(1500 if args.quick else None, copies, args.seed)):
        raw = loader()
        corpus = canonicalise(raw, fp)
        log(f"{corpus.name}: {corpus.n:,} documents, canonical tokens at {corpus.n / corpus.canonical_seconds:,.0f} docs/s")
        corpora.append(corpus)
    results = []
    for corpus in corpora:
        log(f"evaluating {corpus.name}")
        results.append(evaluate_corpus(corpus, fp, thresholds, default_t, log))
    curve_name, score_name = save_plots(results, thresholds, args.out)
    sizes = [int(s) for s in args.shingle_sizes.split(",") if s.strip()]
    sweep = []
    if sizes:
        log("shingle-length sweep")
        sweep = shingle_sweep(corpora, params, sizes, default_t, log)

    lines = [f"Command: `.venv/bin/python {command}` (seed {args.seed}), "
             f"{time.perf_counter() - started:.0f} s on {os.cpu_count()} cores, Python {platform.python_version()}, "
             f"NumPy {np.__version__}. Scheme `{fp.version}`: shingle {params.shingle_size}, "
             f"{params.num_perm} minhashes as {params.groups}×{params.rows}, threshold {default_t}, "
             f"mode {config.collapse.mode}.", "",
             f"![precision, recall and F1 by threshold](images/{score_name})", ""]
    for result in results:
        lines += corpus_report(result, thresholds, default_t, curve_name)
    if sweep:
        lines += [f"### Shingle length (t = {default_t}; J = exact resemblance of that length's shingle sets)", ""]
        lines += sweep_report(sweep, default_t) + [""]
    text = "\n".join(lines)
    print(text)
    if args.report:
        args.report.write_text(text + "\n", encoding="utf-8")
    log("done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
