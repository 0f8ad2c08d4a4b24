"""Small checks of bench/engines.py's own helpers: separation scores against brute force, the
sketches against what they estimate, the rewrites, and the TF-IDF method of the quality
evaluation against the product's all-pairs function."""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

import numpy as np
import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(BENCH.parent))  # the checkout first: bench/fingerprint.py is a script

from engine_eval.rewrites import SynonymSwapper, rewritten_copies, shuffle_sentences, swap_words  # noqa: E402
from engine_eval.scores import auc, best_f1  # noqa: E402
from engine_eval.sketches import icws, icws_similarity, simhash, simhash_cosine  # noqa: E402
from engine_eval.tfidf_method import sparse_cosine_pairs, vector_matrix  # noqa: E402


def test_auc_is_the_share_of_correctly_ordered_pairs():
    rng = np.random.default_rng(1)
    for _ in range(20):
        pos = rng.integers(0, 6, rng.integers(1, 15)).astype(float)
        neg = rng.integers(0, 6, rng.integers(1, 15)).astype(float)
        expected = np.mean([1.0 if p > n else 0.5 if p == n else 0.0 for p, n in itertools.product(pos, neg)])
        assert auc(pos, neg) == pytest.approx(expected)


def test_best_f1_is_the_best_over_all_thresholds():
    rng = np.random.default_rng(2)
    for _ in range(20):
        pos, neg = rng.random(12).round(1), (rng.random(30) * 0.8).round(1)
        best = 0.0
        for t in np.unique(np.concatenate([pos, neg])):
            tp, fp = np.sum(pos >= t), np.sum(neg >= t)
            p, r = tp / (tp + fp), tp / len(pos)
            best = max(best, 2 * p * r / (p + r) if p + r else 0.0)
        f1, threshold = best_f1(pos, neg)
        assert f1 == pytest.approx(best)
        tp, fp = np.sum(pos >= threshold), np.sum(neg >= threshold)
        assert 2 * tp / (2 * tp + fp + (len(pos) - tp)) == pytest.approx(f1)


def test_sketches_estimate_cosine_and_weighted_jaccard():
    rng = np.random.default_rng(3)
    terms = rng.integers(0, 2**63, 400).astype(np.uint64)
    a = rng.random(400)
    b = a.copy()
    b[:150] = 0
    keep = b > 0
    a, b = a / np.linalg.norm(a), b / np.linalg.norm(b)
    cosine = float(a[keep] @ b[keep])
    assert simhash_cosine(simhash(terms, a, 1024), simhash(terms[keep], b[keep], 1024)) == pytest.approx(cosine, abs=0.08)
    jaccard = np.minimum(a, b).sum() / np.maximum(a, b).sum()
    assert icws_similarity(icws(terms, a, 500), icws(terms[keep], b[keep], 500)) == pytest.approx(jaccard, abs=0.07)
    assert simhash_cosine(simhash(terms, a, 256), simhash(terms, a, 256)) == 1.0


def test_rewrites_keep_the_words_and_are_reproducible():
    text = "Первое предложение здесь. Второе предложение там! Третье тоже есть?\nНовый абзац начинается. Конец."
    rng = np.random.default_rng(4)
    moved = shuffle_sentences(text, rng)
    assert sorted(moved.split()) == sorted(text.split())
    swapped = swap_words(text, 0.5, np.random.default_rng(5))
    assert sorted(swapped.split()) == sorted(text.split()) and swapped != text

    from neardup.fingerprint import Fingerprinter

    fp = Fingerprinter()
    swapper = SynonymSwapper([("автомобиль", "машина", "авто")], fp.canonical_tokens)
    out = swapper.swap("Новая машина стоит у дома. Машины едут.", 1.0, np.random.default_rng(6))
    assert "машина" not in out.lower()
    texts = [text, "Другой текст про машины. Ещё одно предложение.", "Третий текст."]
    first = rewritten_copies(texts, 3, 7, swapper)
    assert first == rewritten_copies(texts, 3, 7, swapper)


def test_quality_method_sparse_pairs_match_the_products_all_pairs():
    from neardup.corpora import ru_news_documents
    from neardup.fingerprint import Fingerprinter
    from neardup.fingerprint.tfidf import TfidfWeigher, cosine_pairs

    texts = [d["title"] + "\n" + d["body"] for d in itertools.islice(ru_news_documents(), 120)]
    texts += [shuffle_sentences(t, np.random.default_rng(k)) for k, t in enumerate(texts[:10])]
    vectors = TfidfWeigher(Fingerprinter()).vectors(texts)
    for threshold in (0.2, 0.6):
        i, j, sim = sparse_cosine_pairs(vector_matrix(vectors), threshold, block=37)
        ei, ej, esim = cosine_pairs(vectors, threshold)
        order = np.lexsort((j, i))
        assert np.array_equal(i[order], ei) and np.array_equal(j[order], ej)
        assert np.allclose(sim[order], esim)
