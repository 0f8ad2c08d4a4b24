#!/usr/bin/env python
"""Two more similarity engines on the Russian news corpus: TF-IDF cosine over lemmas, and the
pseudo-matrix Bloom filter for copied fragments.

    .venv/bin/python bench/engines.py [--quick] [--seed N] [--report FILE]

**TF-IDF** (``fingerprint.tfidf``). Positives: edited copies of real articles and their
originals — the evaluation's edits (``quality.edits``: word deletions / insertions / replacements,
paragraph swaps, boilerplate, quoting in a longer article) and rewrites that keep the content but
not the word sequence (``engine_eval.rewrites``: sentence order, word order, synonyms, and all of
them with 10 % word edits). Negatives: pairs of *different* original articles on the same topic —
sharing at least two of the publisher's ``keywords`` (and, stricter, two keywords that each tag at
most 100 articles) — leaving out pairs where one holds half of the other's shingles (the same
story published twice). Scores per pair: exact shingle resemblance and containment (the best any
shingle method can do), TF-IDF cosine with the top k terms (k = 8 … 128 and the full vector), with
the synonym list, and two fixed-size sketches of the full vector (simhash, weighted MinHash).
Separation: ROC AUC and the best-threshold F1. Then the drift of IDF as the corpus grows, and
the speed of ``cosine_pairs`` on 1,000 documents.

**Bloom** (``fingerprint.bloom``). False-positive rate of the configured rows against
(1 - e^{-kn/m})^k; rows needed packed vs one filter per document; fragments of 5 %, 10 % and
50 % of a source's shingles planted in other articles; the whole corpus screened (every article
queried, candidates verified by exact containment) against an exact inverted index.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))            # helper packages bench/quality/, bench/engine_eval/
sys.path.insert(0, str(HERE.parent))     # the checkout (before bench/, whose fingerprint.py is a script)

from engine_eval.rewrites import REWRITE_KINDS, SynonymSwapper, rewritten_copies  # noqa: E402
from engine_eval.scores import auc, best_f1  # noqa: E402
from engine_eval.sketches import icws, icws_similarity, simhash, simhash_cosine  # noqa: E402
from quality.edits import EDIT_KINDS, edited_copies  # noqa: E402
from quality.truth import incidence_matrix  # noqa: E402

DEFAULT_SEED = 20240617
SYNONYMS = HERE / "data" / "synonyms-ru.txt"
TOP_KS = (8, 16, 32, 64, 128, 256)
SIMHASH_BITS = (64, 256, 1024)
FULL_K = 4096
SPECIFIC_KEYWORD_MAX = 100
SAME_STORY = 0.5
#: Limits D tried for "a shingle in more than D articles is boilerplate" in the copied-fragment screen.
BOILERPLATE_DOCS = (10, 30, 100)


def fmt(x: float, digits: int = 3) -> str:
    return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    return lines + ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]


def timed(fn: Callable, *args, **kwargs):
    start = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - start


# ---------------------------------------------------------------- corpus

@dataclass
class Corpus:
    texts: list[str]                  # originals, then edited copies, then rewrites
    keywords: list[frozenset[str]]    # originals only
    originals: int
    positives: list[tuple[int, int, str]]   # (copy, original, kind)
    tokens: list[list[str]]
    shingles: list[np.ndarray]
    canonical_seconds: float


def load_corpus(fp, limit: int | None, edits: int, rewrites: int, seed: int, swapper: SynonymSwapper,
                log: Callable[[str], None]) -> Corpus:
    from neardup.corpora import ru_news_documents

    texts, keywords = [], []
    for doc in ru_news_documents():
        texts.append("\n".join(f for f in (doc["title"], doc["body"]) if f))
        keywords.append(frozenset(doc["keywords"]))
        if limit and len(texts) >= limit:
            break
    originals = len(texts)
    edited, plans = edited_copies(texts, edits, seed)
    rewritten, rplans = rewritten_copies(texts, rewrites, seed + 1, swapper, avoid=[p.original for p in plans])
    positives = [(originals + k, p.original, p.kind) for k, p in enumerate(plans)]
    positives += [(originals + len(edited) + k, p.original, p.kind) for k, p in enumerate(rplans)]
    all_texts = texts + edited + rewritten
    tokens, seconds = timed(lambda: [fp.canonical_tokens(t) for t in all_texts])
    log(f"{len(all_texts):,} texts canonicalised in {seconds:.0f} s")
    shingles = [fp.shingles(t) for t in tokens]
    return Corpus(all_texts, keywords, originals, positives, tokens, shingles, seconds)


def same_topic_pairs(keywords: Sequence[frozenset[str]], count: int, rng: np.random.Generator,
                     max_df: int | None) -> list[tuple[int, int]]:
    """Random pairs of articles sharing ≥ 2 keywords (each tagging ≤ ``max_df`` articles, if given):
    a random article, one of its keywords, a random other article with it; kept if they share two."""
    postings: dict[str, list[int]] = {}
    for d, words in enumerate(keywords):
        for w in words:
            postings.setdefault(w, []).append(d)
    allowed = {w for w, docs in postings.items() if len(docs) >= 2 and (max_df is None or len(docs) <= max_df)}
    usable = [sorted(words & allowed) for words in keywords]
    candidates = [d for d, words in enumerate(usable) if len(words) >= 2]
    found: set[tuple[int, int]] = set()
    attempts = 0
    while len(found) < count and attempts < 200 * count and candidates:
        attempts += 1
        a = candidates[int(rng.integers(len(candidates)))]
        word = usable[a][int(rng.integers(len(usable[a])))]
        b = postings[word][int(rng.integers(len(postings[word])))]
        if b == a or len(set(usable[a]) & set(usable[b])) < 2:
            continue
        found.add((min(a, b), max(a, b)))
    return sorted(found)


def exact_pair_scores(shingles: Sequence[np.ndarray], pairs: Sequence[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray]:
    """(resemblance, max containment) of each pair."""
    res, con = np.zeros(len(pairs)), np.zeros(len(pairs))
    for k, (a, b) in enumerate(pairs):
        inter = len(np.intersect1d(shingles[a], shingles[b], assume_unique=True))
        sa, sb = len(shingles[a]), len(shingles[b])
        res[k] = inter / (sa + sb - inter) if sa + sb - inter else 0.0
        con[k] = inter / min(sa, sb) if min(sa, sb) else 0.0
    return res, con


# ---------------------------------------------------------------- TF-IDF

@dataclass
class Measures:
    """Per-measure scores of the positive pairs and of each negative set."""

    positive: dict[str, np.ndarray]
    negative: dict[str, dict[str, np.ndarray]]     # negative set -> measure -> scores


def build_costs(counts, stats, weigher) -> dict[str, float]:
    """Milliseconds a document to make each stored form from term counts and statistics."""
    from neardup.fingerprint.tfidf import TfidfParams, weigh

    def per_doc(make) -> float:
        start = time.perf_counter()
        for c in counts:
            make(c)
        return 1000 * (time.perf_counter() - start) / len(counts)

    def full(c):
        v = weigh(c, stats, TfidfParams(top_k=FULL_K), weigher.version)
        w = v.weights.astype(np.float64)
        return v.terms, w / (np.linalg.norm(w) or 1.0)

    out = {f"tfidf k={k}": per_doc(lambda c, k=k: weigh(c, stats, TfidfParams(top_k=k), weigher.version))
           for k in TOP_KS}
    out["tfidf full"] = per_doc(full)
    out.update({f"simhash {b}": per_doc(lambda c, b=b: simhash(*full(c), b)) for b in SIMHASH_BITS})
    out["weighted MinHash 84"] = per_doc(lambda c: icws(*full(c), 84))
    return out


def tfidf_measures(corpus: Corpus, fp, pos_pairs, neg_sets, log) -> tuple[Measures, dict[str, object]]:
    from neardup.fingerprint.tfidf import CorpusStats, SynonymMap, TfidfParams, TfidfWeigher, cosine, weigh

    synonyms = SynonymMap.from_text(SYNONYMS.read_text(encoding="utf-8"), fp.canonical_tokens)
    plain = TfidfWeigher(fp)
    mapped = TfidfWeigher(fp, synonyms=synonyms)
    counts, count_s = timed(lambda: [plain.counts_of_tokens(t) for t in corpus.tokens])
    mapped_counts = [mapped.counts_of_tokens(t) for t in corpus.tokens]
    stats, stats_s = timed(CorpusStats.of, (c.terms for c in counts))
    mapped_stats = CorpusStats.of(c.terms for c in mapped_counts)
    log(f"  term counts {len(counts) / count_s:,.0f} docs/s from tokens; statistics of {stats.doc_count:,} "
        f"documents, {len(stats):,} terms in {stats_s:.2f} s")
    info: dict[str, object] = {"terms": len(stats), "docs": stats.doc_count,
                               "counts_per_s": len(counts) / count_s, "stats_seconds": stats_s}
    needed = sorted({d for pairs in [pos_pairs] + list(neg_sets.values()) for p in pairs for d in p})

    def vectors_for(params, weigher, cs, st):
        return {d: weigh(cs[d], st, params, weigher.version) for d in needed}

    variants: dict[str, dict[int, object]] = {}
    for k in TOP_KS + (FULL_K,):
        variants[f"tfidf k={k}" if k != FULL_K else "tfidf full"] = vectors_for(TfidfParams(top_k=k), plain, counts, stats)
    default_k = TfidfParams().top_k
    variants["tfidf+synonyms"] = vectors_for(TfidfParams(), mapped, mapped_counts, mapped_stats)
    full = variants["tfidf full"]
    sims = {}
    for d, v in full.items():
        w = v.weights.astype(np.float64)
        w = w / (np.linalg.norm(w) or 1.0)
        sims[d] = (v.terms, w)
    sketches = {bits: {d: simhash(t, w, bits) for d, (t, w) in sims.items()} for bits in SIMHASH_BITS}
    weighted = {d: icws(t, w, 84) for d, (t, w) in sims.items()}
    info["bytes"] = {name: float(np.mean([len(json.dumps(v.to_source(), separators=(",", ":")))
                                          for v in list(vecs.values())[:300]]))
                     for name, vecs in variants.items()}
    info["bytes"].update({f"simhash {bits}": bits / 8 for bits in SIMHASH_BITS})
    info["bytes"]["weighted MinHash 84"] = 84 * 8.0
    info["ms"] = build_costs(counts[:400], stats, plain)
    info["default_k"] = default_k

    # IDF drift: statistics of a prefix of the corpus (the index while it grows)
    drift_stats = {}
    for m in (250, 1000, 2500, corpus.originals // 2):
        if m < len(counts):
            drift_stats[m] = CorpusStats.of(c.terms for c in counts[:m])
    drift_vectors = {m: vectors_for(TfidfParams(), plain, counts, st) for m, st in drift_stats.items()}
    info["drift_docs"] = list(drift_stats)

    def score(pairs):
        out: dict[str, np.ndarray] = {}
        res, con = exact_pair_scores(corpus.shingles, pairs)
        out["shingle resemblance"], out["shingle containment"] = res, con
        for name, vecs in variants.items():
            out[name] = np.array([cosine(vecs[a], vecs[b]) for a, b in pairs])
        for bits, sketch in sketches.items():
            out[f"simhash {bits}"] = np.array([simhash_cosine(sketch[a], sketch[b]) for a, b in pairs])
        out["weighted MinHash 84"] = np.array([icws_similarity(weighted[a], weighted[b]) for a, b in pairs])
        base = variants[f"tfidf k={default_k}"]
        for m, vecs in drift_vectors.items():
            out[f"drift both {m}"] = np.array([cosine(vecs[a], vecs[b]) for a, b in pairs])
            # the older document weighted when the index held m documents, the newer one now
            out[f"drift old {m}"] = np.array([cosine(vecs[min(a, b)], base[max(a, b)]) for a, b in pairs])
        return out

    positive = score(pos_pairs)
    negative = {name: score(pairs) for name, pairs in neg_sets.items()}
    return Measures(positive, negative), info


def cosine_pairs_speed(corpus: Corpus, fp, rng: np.random.Generator) -> dict[str, float]:
    """Seconds for ``cosine_pairs`` and ``similar_pairs`` on 1,000 random documents (a search
    window), and for making the vectors."""
    from neardup.fingerprint import similar_pairs
    from neardup.fingerprint.tfidf import CorpusStats, TfidfWeigher

    weigher = TfidfWeigher(fp)
    counts = [weigher.counts_of_tokens(t) for t in corpus.tokens[:corpus.originals]]
    stats = CorpusStats.of(c.terms for c in counts)
    sample = rng.choice(len(counts), size=min(1000, len(counts)), replace=False)
    vectors, weigh_s = timed(lambda: [weigher.vector(counts[k], stats) for k in sample])
    from neardup.fingerprint.tfidf import cosine_pairs

    runs = []
    for _ in range(5):
        (i, _, _), seconds = timed(cosine_pairs, vectors, 0.5)
        runs.append(seconds)
    prints = [fp.fingerprint_tokens(corpus.tokens[k]) for k in sample]
    signatures = np.stack([p.signature for p in prints])
    shingle_counts = np.array([p.shingle_count for p in prints])
    sp = min(timed(similar_pairs, signatures, shingle_counts, 0.8)[1] for _ in range(5))
    return {"n": len(sample), "cosine_pairs": float(np.median(runs)), "similar_pairs": sp,
            "weigh_per_s": len(sample) / weigh_s, "pairs_found": len(i)}


def tfidf_report(m: Measures, info: dict, positives: list[tuple[int, int, str]], neg_sets, neg_excluded,
                 speed) -> list[str]:
    kinds = [k for k in EDIT_KINDS + REWRITE_KINDS if any(p[2] == k for p in positives)]
    kind_of = np.array([p[2] for p in positives])
    rewrites = np.isin(kind_of, REWRITE_KINDS)
    default = f"tfidf k={info['default_k']}"
    measures = ["shingle resemblance", "shingle containment", default, "tfidf full", "tfidf+synonyms"]
    out = []
    out.append(f"Corpus statistics: {info['docs']:,} documents, {info['terms']:,} distinct lemmas (terms); "
               f"term counts {info['counts_per_s']:,.0f} docs/s from canonical tokens; statistics of the whole "
               f"corpus built in {info['stats_seconds']:.2f} s.")
    out.append("")
    out.append("Negatives (pairs of different articles on the same topic): " + "; ".join(
        f"**{name}**: {len(pairs):,} pairs ({neg_excluded[name]} more left out as the same story, "
        f"max containment ≥ {SAME_STORY})" for name, pairs in neg_sets.items()) + ".")
    out.append("")
    for neg_name in neg_sets:
        neg = m.negative[neg_name]
        out.append(f"**Separation, positives vs {neg_name}** (ROC AUC; 1 = every positive scores above "
                   "every negative):")
        out.append("")
        rows = []
        for kind in kinds:
            mask = kind_of == kind
            rows.append([kind, int(mask.sum())] + [fmt(auc(m.positive[x][mask], neg[x])) for x in measures])
        for label, mask in (("all rewrites", rewrites), ("all edits and rewrites", np.ones(len(kind_of), bool))):
            rows.append([f"**{label}**", int(mask.sum())] + [f"**{fmt(auc(m.positive[x][mask], neg[x]))}**"
                                                            for x in measures])
        out += table(["positives", "pairs"] + measures, rows)
        out.append("")
    neg_name = list(neg_sets)[0]
    neg = m.negative[neg_name]
    out.append(f"Medians (5th percentile) of the positives by kind, and the negatives' median / 95th / 99th "
               f"percentile ({neg_name}):")
    out.append("")
    rows = []
    for kind in kinds:
        mask = kind_of == kind
        rows.append([kind] + [f"{fmt(np.median(m.positive[x][mask]), 2)} ({fmt(np.percentile(m.positive[x][mask], 5), 2)})"
                              for x in measures])
    for name, negs in m.negative.items():
        rows.append([f"negatives: {name}"] + [
            " / ".join(fmt(np.percentile(negs[x], q), 2) for q in (50, 95, 99)) for x in measures])
    out += table(["pairs"] + measures, rows)
    out.append("")
    out.append(f"**Best-threshold F1** (positives: all rewrites, {int(rewrites.sum())} pairs; negatives: "
               f"{neg_name}, {len(neg_sets[neg_name]):,} pairs; F1 depends on that ratio) and the vector choice:")
    out.append("")
    rows = []
    for x in ["shingle resemblance", "shingle containment"] + [f"tfidf k={k}" for k in TOP_KS] + [
            "tfidf full", "tfidf+synonyms"] + [f"simhash {b}" for b in SIMHASH_BITS] + ["weighted MinHash 84"]:
        f1, threshold = best_f1(m.positive[x][rewrites], neg[x])
        f1_all, t_all = best_f1(m.positive[x], neg[x])
        error = "–"
        if x.startswith("tfidf k=") or x.startswith("simhash"):
            both = np.concatenate([m.positive[x], neg[x]])
            ref = np.concatenate([m.positive["tfidf full"], neg["tfidf full"]])
            error = f"{fmt(np.mean(np.abs(both - ref)), 4)} / {fmt(np.percentile(np.abs(both - ref), 99), 3)}"
        size = info["bytes"].get(x)
        cost = info["ms"].get(x)
        rows.append([x, fmt(auc(m.positive[x][rewrites], neg[x])), f"{fmt(f1)} at {fmt(threshold, 2)}",
                     fmt(auc(m.positive[x], neg[x])), f"{fmt(f1_all)} at {fmt(t_all, 2)}", error,
                     f"{size:,.0f}" if size else "–", fmt(cost, 2) if cost else "–"])
    out += table(["measure", "AUC rewrites", "best F1 rewrites", "AUC all copies", "best F1 all copies",
                  "|Δ| vs full cosine: mean / 99th pct", "bytes stored", "ms a document"], rows)
    out.append("")
    out.append(f"**At fixed thresholds** (k = {info['default_k']}, the stored vectors): recall of each kind of copy, "
               "and the share of same-topic negatives reported:")
    out.append("")
    rows = []
    for t in (0.4, 0.5, 0.6, 0.7, 0.8, 0.9):
        row = [f"{t:.1f}"]
        for kind in kinds:
            row.append(fmt(float(np.mean(m.positive[default][kind_of == kind] >= t)), 2))
        for negs in m.negative.values():
            row.append(fmt(float(np.mean(negs[default] >= t)), 4))
        rows.append(row)
    out += table(["cosine ≥"] + kinds + [f"negatives {k + 1}" for k in range(len(m.negative))], rows)
    out.append("")
    out.append(f"**IDF drift.** Vectors (k = {info['default_k']}) weighted with the statistics of the first m "
               "documents only, against weights from the whole corpus: both documents weighted at m "
               "(\"both\"), or the older one at m and the newer one with the final statistics (\"old vs new\", "
               "what an index that never re-weights holds). |Δcos| over all evaluated pairs:")
    out.append("")
    rows = []
    both_ref = np.concatenate([m.positive[default]] + [m.negative[n][default] for n in neg_sets])
    for size in info["drift_docs"]:
        row = [f"{size:,}"]
        for tag in ("both", "old"):
            values = np.concatenate([m.positive[f"drift {tag} {size}"]] + [m.negative[n][f"drift {tag} {size}"]
                                                                          for n in neg_sets])
            delta = np.abs(values - both_ref)
            row.append(f"{fmt(delta.mean(), 4)} / {fmt(np.percentile(delta, 99), 3)} / {fmt(delta.max(), 3)}")
        row.append(fmt(auc(m.positive[f"drift old {size}"][rewrites], neg[f"drift old {size}"])))
        rows.append(row)
    out += table(["statistics of m documents", "both: mean / 99th pct / max |Δ|", "old vs new: mean / 99th / max",
                  "AUC rewrites (old vs new)"], rows)
    out.append("")
    out.append(f"**All pairs in a search window**: `cosine_pairs` on {speed['n']:,} random articles (k = "
               f"{info['default_k']}) takes {1000 * speed['cosine_pairs']:.0f} ms (median of 5; "
               f"`similar_pairs` on their signatures at 0.8: {1000 * speed['similar_pairs']:.0f} ms); weighting "
               f"{speed['weigh_per_s']:,.0f} vectors/s from term counts.")
    return out


# ---------------------------------------------------------------- Bloom

def plant_fragment(fp, source: str, host: str, share: float, rng: np.random.Generator) -> tuple[str, int]:
    """``host`` with a contiguous run of ``source``'s words inserted at a paragraph boundary: the
    shortest run from a random start whose shingles hold ``share`` of the source's shingles."""
    words = source.split()
    target = fp.shingles(fp.canonical_tokens(source))

    def holds(a: int, length: int) -> bool:
        piece = fp.shingles(fp.canonical_tokens(" ".join(words[a:a + length])))
        return len(np.intersect1d(target, piece, assume_unique=True)) >= share * len(target) - 1e-9

    start = int(rng.integers(0, max(1, int(len(words) * (1 - share)))))
    if not holds(start, len(words) - start):
        start = 0
    low, high = 1, len(words) - start
    while low < high:
        mid = (low + high) // 2
        if holds(start, mid):
            high = mid
        else:
            low = mid + 1
    paragraphs = host.split("\n")
    at = int(rng.integers(len(paragraphs) + 1))
    fragment = " ".join(words[start:start + low])
    return "\n".join(paragraphs[:at] + [fragment] + paragraphs[at:]), low


def directional_truth(shingles: Sequence[np.ndarray], floor: float) -> set[tuple[int, int]]:
    """Exact (a, b) with |A∩B| / |A| ≥ floor, a ≠ b, from the inverted index X·Xᵀ."""
    x = incidence_matrix(shingles)
    sizes = np.diff(x.indptr)
    xt = x.T.tocsc()
    found = set()
    for start in range(0, x.shape[0], 1000):
        block = (x[start:start + 1000] @ xt).tocoo()
        a = block.row.astype(np.int64) + start
        b = block.col.astype(np.int64)
        keep = (a != b) & (block.data >= floor * sizes[a] - 1e-9) & (sizes[a] > 0)
        found.update(zip(a[keep].tolist(), b[keep].tolist()))
    return found


def screen(shingles: Sequence[np.ndarray], params, min_share: float):
    """Insert every document, query every document (its own rows excluded), verify the
    candidates by exact containment. Returns the filter, the verified ordered pairs (source,
    container), the number of candidates and the three timings."""
    from neardup.fingerprint.bloom import PseudoMatrixBloom, containment_shares

    bloom = PseudoMatrixBloom(params)
    _, build_s = timed(lambda: [bloom.insert(d, s) for d, s in enumerate(shingles)])
    candidates: list[tuple[int, np.ndarray]] = []
    start = time.perf_counter()
    for d, s in enumerate(shingles):
        found, _ = bloom.query(s, min_share, exclude=d)
        candidates.append((d, found))
    query_s = time.perf_counter() - start
    start = time.perf_counter()
    verified: set[tuple[int, int]] = set()
    checked = 0
    for d, found in candidates:
        shares = containment_shares(shingles[d], [shingles[c] for c in found.tolist()], assume_unique=True)
        checked += len(found)
        verified.update((d, int(c)) for c in found[shares >= min_share - 1e-9])
    verify_s = time.perf_counter() - start
    return bloom, verified, checked, (build_s, query_s, verify_s)


def bloom_section(corpus: Corpus, fp, plants_per_share: int, seed: int, min_share: float,
                  log: Callable[[str], None]) -> list[str]:
    from neardup.fingerprint.bloom import BloomParams, PseudoMatrixBloom, containment_shares, frequent_shingles, rows_needed

    params = BloomParams()
    rng = np.random.default_rng(seed)
    out = []
    # 1. false-positive rate at the configured size, rows filled to capacity
    bloom = PseudoMatrixBloom(params)
    for d in range(8):
        bloom.insert(d, rng.integers(0, 2**64 - 1, params.capacity, dtype=np.uint64, endpoint=True))
    probes = rng.integers(0, 2**64 - 1, 1_000_000, dtype=np.uint64, endpoint=True)
    measured = bloom.row_counts(probes) / len(probes)
    formula = params.false_positive_rate(np.array(bloom.fill))
    out.append(f"Configured row: m = {params.row_bits:,} bits ({params.row_bits // 8 // 1024} KiB), k = "
               f"{params.hashes}, designed false-positive rate p* = {params.target_fp} → capacity n* = "
               f"{params.capacity:,} shingles a row ({params.row_bits / params.capacity:.1f} bits a shingle).")
    out.append("")
    out.append(f"**False-positive rate** of membership, {len(probes):,} random absent keys against each of "
               f"{bloom.rows} rows filled to n*: measured {', '.join(fmt(v, 5) for v in measured)} against the "
               f"formula (1-e^(-kn/m))^k = {fmt(float(formula[0]), 5)} (ratio {fmt(float(measured.mean() / formula.mean()))}; "
               "a 20 % tolerance is 40 standard errors at this many trials).")
    out.append("")

    # 2. plant fragments, then the corpus of originals with planted hosts
    texts = list(corpus.texts[:corpus.originals])
    tokens = list(corpus.tokens[:corpus.originals])
    shingles = list(corpus.shingles[:corpus.originals])
    edited = {o for _, o, _ in corpus.positives}
    # plain-text articles only: a fragment pasted inside an embedded <script> would be stripped as markup
    pool = [d for d in range(corpus.originals)
            if d not in edited and len(shingles[d]) >= 100 and "<" not in texts[d]]
    chosen = rng.choice(pool, size=2 * 3 * plants_per_share, replace=False).tolist()
    plants: list[tuple[int, int, float]] = []       # (source, host, share)
    lengths = []
    start = time.perf_counter()
    for q, share in enumerate((0.05, 0.10, 0.50)):
        for k in range(plants_per_share):
            source = chosen[2 * (q * plants_per_share + k)]
            host = chosen[2 * (q * plants_per_share + k) + 1]
            texts[host], words = plant_fragment(fp, texts[source], texts[host], share, rng)
            tokens[host] = fp.canonical_tokens(texts[host])
            shingles[host] = fp.shingles(tokens[host])
            plants.append((source, host, share))
            lengths.append(words)
    log(f"  planted {len(plants)} fragments in {time.perf_counter() - start:.0f} s")

    # 3. rows needed, packed vs one filter per document, for several row sizes
    sizes = np.array([len(s) for s in shingles])
    out.append(f"**Rows needed** for the {len(sizes):,} Russian articles ({int(sizes.sum()):,} shingles, "
               f"distinct within each article; per article median {int(np.median(sizes))}, 95th percentile "
               f"{int(np.percentile(sizes, 95))}, max {int(sizes.max())}) at p* = {params.target_fp}, k = "
               f"{params.hashes}: packed (documents continue into the next row) against one filter of the "
               "same size per document (a document larger than a row takes several):")
    out.append("")
    rows = []
    for bits in (1 << 13, 1 << 14, 1 << 15, 1 << 16, 1 << 17):
        p = BloomParams(row_bits=bits, hashes=params.hashes, target_fp=params.target_fp)
        packed, separate = rows_needed(sizes, p.capacity)
        rows.append([f"{bits:,}" + (" (configured)" if bits == params.row_bits else ""), f"{p.capacity:,}",
                     f"{packed:,}", f"{separate:,}", f"1 : {separate / packed:.1f}",
                     f"{packed * bits / 8 / 2**20:.1f}", f"{separate * bits / 8 / 2**20:.1f}"])
    out += table(["row bits m", "capacity n*", "rows packed", "rows, one filter per document", "ratio",
                  "MiB packed", "MiB one per document"], rows)
    out.append("")

    # 4. screen the whole corpus
    bloom, verified, checked, (build_s, query_s, verify_s) = screen(shingles, params, min_share)
    figures = bloom.figures()
    fp_rows = bloom.row_counts(probes[:200_000]) / 200_000
    formula_rows = params.false_positive_rate(np.array(bloom.fill))
    truth, truth_s = timed(directional_truth, shingles, min_share)
    missed = truth - verified
    log(f"  screened {len(shingles):,} documents: build {build_s:.1f} s, queries {query_s:.1f} s, "
        f"verification {verify_s:.1f} s; exact index {truth_s:.1f} s")
    planted_found = {share: np.mean([(s, h) in verified for s, h, sh in plants if sh == share])
                     for share in (0.05, 0.10, 0.50)}
    # at min_share = the planted share: query the sources again
    at_share = {}
    for share in (0.05, 0.10, 0.50):
        hits = []
        for s, h, sh in plants:
            if sh == share:
                found, _ = bloom.query(shingles[s], share, exclude=s)
                hits.append(h in found.tolist())
        at_share[share] = float(np.mean(hits))
    out.append(f"**Screening the corpus** ({len(shingles):,} articles, {len(plants)} of them hosting a planted "
               f"fragment; min_share = {min_share}): {figures['rows']:,} rows ({figures['bytes'] / 2**20:.1f} MiB, mean "
               f"fill {figures['mean_fill']:,.0f} of {params.capacity:,}; one filter per document would take "
               f"{figures['rows_one_filter_per_document']:,} rows, 1 : "
               f"{figures['rows_one_filter_per_document'] / figures['rows']:.1f}). Measured false-positive rate "
               f"over the corpus rows {fmt(float(fp_rows.mean()), 5)} vs the formula at each row's fill "
               f"{fmt(float(formula_rows.mean()), 5)}.")
    out.append("")
    out += table(["step", "seconds", "docs/s", "what"], [
        ["insert every article", f"{build_s:.1f}", f"{len(shingles) / build_s:,.0f}", f"{figures['rows']:,} rows"],
        ["query every article", f"{query_s:.1f}", f"{len(shingles) / query_s:,.0f}",
         f"{checked:,} candidates ({checked / len(shingles):.1f} a query)"],
        ["verify candidates by exact containment", f"{verify_s:.1f}", f"{len(shingles) / verify_s:,.0f}",
         f"{len(verified):,} pairs hold ≥ {min_share} of the source ({len(verified) / max(1, checked):.1%} of candidates)"],
        ["**screen, total**", f"**{build_s + query_s + verify_s:.1f}**",
         f"**{len(shingles) / (build_s + query_s + verify_s):,.0f}**", ""],
        ["reference: exact inverted index (scipy X·Xᵀ)", f"{truth_s:.1f}", f"{len(shingles) / truth_s:,.0f}",
         f"{len(truth):,} pairs"],
    ])
    out.append("")
    out.append(f"Against the exact index: {len(truth - missed):,} of {len(truth):,} pairs found "
               f"(recall {fmt(1 - len(missed) / max(1, len(truth)), 4)}; a Bloom filter has no false negatives, "
               f"so the screen can only miss what verification rejects), {len(verified - truth)} extra.")
    out.append("")
    median_words = {share: int(np.median([w for (s, h, sh), w in zip(plants, lengths) if sh == share]))
                    for share in (0.05, 0.10, 0.50)}
    held = {share: [float(containment_shares(shingles[s], [shingles[h]])[0]) for s, h, sh in plants if sh == share]
            for share in (0.05, 0.10, 0.50)}
    out += table(["planted fragment", "plants", "median words copied", "exact containment in the host: min / median",
                  f"found at min_share {min_share}", "found at min_share = its share"],
                 [[f"{int(share * 100)} % of the source's shingles", plants_per_share, median_words[share],
                   f"{fmt(min(held[share]))} / {fmt(float(np.median(held[share])))}",
                   fmt(planted_found[share]), fmt(at_share[share])] for share in (0.05, 0.10, 0.50)])
    natural = len(verified) - sum((s, h) in verified for s, h, _ in plants)
    out.append("")
    # 5. the same without boilerplate: shingles found in more than D articles
    out.append(f"Besides the plants, {natural:,} ordered pairs of articles hold ≥ {min_share} of each other's "
               "shingles in the corpus itself. Most of them share only shingles that occur in many articles "
               "(embedded analytics, video-player and ad scripts, tweet embeds, stock phrases such as "
               "\"президент США Дональд Трамп\"). Leaving the shingles found in more than D articles out of the "
               "filter and the queries (`fingerprint.bloom.frequent_shingles`):")
    out.append("")
    rows = []
    for limit in BOILERPLATE_DOCS:
        common = frequent_shingles(shingles, limit)
        content = [s[~np.isin(s, common)] for s in shingles]
        _, kept, kept_checked, kept_times = screen(content, params, min_share)
        kept_natural = len(kept) - sum((s, h) in kept for s, h, _ in plants)
        found = {share: np.mean([(s, h) in kept for s, h, sh in plants if sh == share]) for share in (0.05, 0.10, 0.50)}
        log(f"  shingles in > {limit} articles left out: {sum(kept_times):.1f} s")
        rows.append([f"{limit}", f"{len(common):,}", f"{kept_natural:,} ({1 - kept_natural / max(1, natural):.1%} fewer)",
                     " / ".join(fmt(float(found[share]), 2) for share in (0.05, 0.10, 0.50)),
                     f"{kept_checked / len(shingles):.1f}", f"{sum(kept_times):.1f}"])
    out += table(["D", "shingles left out", "pairs besides the plants", "plants found (5 / 10 / 50 %)",
                  "candidates a query", "screen seconds"], rows)
    out.append("")
    out.append("(A planted fragment that includes such shingles can fall below its share without them.)")
    return out


# ---------------------------------------------------------------- main

def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="2,000 articles, fewer copies and pairs")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument("--report", type=Path, help="also write the Markdown report here")
    parser.add_argument("--skip-bloom", action="store_true")
    parser.add_argument("--skip-tfidf", action="store_true")
    args = parser.parse_args(argv)

    from neardup.config import load_config
    from neardup.fingerprint import Fingerprinter
    from neardup.fingerprint.tfidf import parse_synonyms

    started = time.perf_counter()

    def log(message: str) -> None:
        print(f"[{time.perf_counter() - started:6.1f} s] {message}", file=sys.stderr, flush=True)

    params = load_config().fingerprint
    fp = Fingerprinter(params)
    command = "bench/engines.py" + (" --quick" if args.quick else "") + f" --seed {args.seed}"
    log(f"{command} (scheme {fp.version}, shingle {params.shingle_size})")
    swapper = SynonymSwapper(parse_synonyms(SYNONYMS.read_text(encoding="utf-8")), fp.canonical_tokens)
    limit, edits, rewrites, negatives, plants = ((2000, 280, 200, 3000, 20) if args.quick
                                                 else (None, 700, 600, 20000, 100))
    corpus = load_corpus(fp, limit, edits, rewrites, args.seed, swapper, log)
    rng = np.random.default_rng(args.seed)
    lines = [f"Command: `.venv/bin/python {command}` (seed {args.seed}) on {os.cpu_count()} shared cores, "
             f"Python {platform.python_version()}, NumPy {np.__version__}; scheme `{fp.version}` (shingle "
             f"{params.shingle_size}). {corpus.originals:,} Russian articles, {len(corpus.positives):,} edited "
             f"copies and rewrites; canonicalisation {len(corpus.texts) / corpus.canonical_seconds:,.0f} docs/s.", ""]
    if not args.skip_tfidf:
        log("TF-IDF")
        pos_pairs = [(c, o) for c, o, _ in corpus.positives]
        neg_sets, excluded = {}, {}
        for name, max_df in (("same topic (≥ 2 shared keywords)", None),
                             (f"same specific topic (≥ 2 shared keywords tagging ≤ {SPECIFIC_KEYWORD_MAX} articles)",
                              SPECIFIC_KEYWORD_MAX)):
            pairs = same_topic_pairs(corpus.keywords, negatives, rng, max_df)
            _, con = exact_pair_scores(corpus.shingles, pairs)
            neg_sets[name] = [p for p, c in zip(pairs, con) if c < SAME_STORY]
            excluded[name] = int(np.sum(con >= SAME_STORY))
        measures, info = tfidf_measures(corpus, fp, pos_pairs, neg_sets, log)
        speed = cosine_pairs_speed(corpus, fp, rng)
        lines += ["### TF-IDF cosine over lemmas", ""]
        lines += tfidf_report(measures, info, corpus.positives, neg_sets, excluded, speed) + [""]
    if not args.skip_bloom:
        log("Bloom")
        lines += ["### Pseudo-matrix Bloom filter", ""]
        lines += bloom_section(corpus, fp, plants, args.seed, 0.05, log) + [""]
    text = "\n".join(lines)
    print(text)
    if args.report:
        args.report.write_text(text + "\n", encoding="utf-8")
    log("done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
