"""TF-IDF cosine over lemmas: symmetry, invariance to reordering, synonyms, incremental corpus
statistics, stored form, versions, and all pairs against brute force, on real Russian news."""

from __future__ import annotations

import dataclasses
import itertools
import re

import numpy as np
import pytest

from neardup.corpora import ru_news_documents
from neardup.fingerprint import Fingerprinter, FingerprintParams, exact_resemblance
from neardup.fingerprint.tfidf import (
    CorpusStats,
    StatsFormatError,
    SynonymFormatError,
    SynonymMap,
    TfidfFormatError,
    TfidfParams,
    TfidfVector,
    TfidfWeigher,
    cosine,
    cosine_pairs,
    parse_synonyms,
    term_counts,
    tfidf_version,
    weigh,
)


@pytest.fixture(scope="module")
def fp() -> Fingerprinter:
    return Fingerprinter()


@pytest.fixture(scope="module")
def texts() -> list[str]:
    # plain text only: shuffling the words of embedded HTML / scripts would change what is markup
    docs = (d for d in ru_news_documents() if len(d["body"].split()) >= 150 and "<" not in d["body"])
    return [d["title"] + "\n" + d["body"] for d in itertools.islice(docs, 160)]


@pytest.fixture(scope="module")
def weigher(fp) -> TfidfWeigher:
    return TfidfWeigher(fp)


@pytest.fixture(scope="module")
def counts(weigher, texts):
    return [weigher.counts(t) for t in texts]


@pytest.fixture(scope="module")
def stats(counts) -> CorpusStats:
    return CorpusStats.of(c.terms for c in counts)


@pytest.fixture(scope="module")
def vectors(weigher, counts, stats) -> list[TfidfVector]:
    return [weigher.vector(c, stats) for c in counts]


def sentences(text: str) -> list[str]:
    return [s for s in re.split(r"(?<=[.!?])\s+", text.replace("\n", " ")) if s.strip()]


def shuffled(text: str, rng: np.random.Generator) -> str:
    """Sentences in random order, and the words of every sentence in random order."""
    out = []
    for sentence in rng.permutation(np.array(sentences(text), dtype=object)):
        words = sentence.split()
        out.append(" ".join(words[k] for k in rng.permutation(len(words))))
    return " ".join(out)


# ---- cosine --------------------------------------------------------------------------

def test_cosine_is_symmetric_bounded_and_one_on_itself(vectors):
    for a, b in itertools.combinations(vectors[:60], 2):
        ab, ba = cosine(a, b), cosine(b, a)
        assert ab == ba
        assert 0.0 <= ab <= 1.0
    for v in vectors[:60]:
        assert cosine(v, v) == pytest.approx(1.0, abs=1e-9)


def test_unrelated_articles_score_low_and_the_same_article_high(vectors):
    sims = np.array([cosine(a, b) for a, b in itertools.combinations(vectors[:80], 2)])
    # a news corpus has some same-story pairs; most pairs of different articles share little
    assert np.median(sims) < 0.1


def test_reordering_words_and_sentences_leaves_the_vector_unchanged(fp, weigher, texts, stats):
    rng = np.random.default_rng(7)
    for text in texts[:20]:
        moved = shuffled(text, rng)
        a, b = weigher.vector(weigher.counts(text), stats), weigher.vector(weigher.counts(moved), stats)
        assert a == b
        assert cosine(a, b) == pytest.approx(1.0, abs=1e-9)
        # the same edit breaks shingles: the invariance is not a property of the test data
        assert exact_resemblance(fp.shingles(fp.canonical_tokens(text)), fp.shingles(fp.canonical_tokens(moved))) < 0.3


def test_empty_documents_have_empty_vectors_and_similarity_zero(weigher, stats, vectors):
    empty = weigher.vector(weigher.counts("и в на, но — а!"), stats)
    assert empty.is_empty
    assert cosine(empty, vectors[0]) == 0.0
    assert cosine(empty, empty) == 0.0


def test_vectors_of_different_versions_are_not_comparable(fp, counts, stats, vectors):
    other = TfidfWeigher(fp, TfidfParams(top_k=8))
    with pytest.raises(ValueError, match="not comparable"):
        cosine(vectors[0], other.vector(counts[1], stats))


# ---- weighting ------------------------------------------------------------------------

def test_weights_follow_the_formula_before_truncation_and_quantisation(counts, stats):
    c = counts[3]
    big = TfidfParams(top_k=4096)
    v = weigh(c, stats, big, "t1-0000000000")
    raw = (1 + np.log(c.counts)) * (np.log((1 + stats.doc_count) / (1 + stats.df_of(c.terms))) + 1)
    expected = raw / np.linalg.norm(raw)
    assert np.array_equal(v.terms, c.terms[np.rint(65535 * expected) > 0])
    assert np.allclose(v.weights / 65535, expected[np.rint(65535 * expected) > 0], atol=0.5 / 65535 + 1e-12)


def test_top_k_keeps_the_largest_weights(counts, stats):
    c = counts[5]
    full = weigh(c, stats, TfidfParams(top_k=4096), "t1-0000000000")
    top = weigh(c, stats, TfidfParams(top_k=16), "t1-0000000000")
    assert len(top) == 16 < len(full)
    # the kept terms are the 16 heaviest of the full vector (weights before renormalisation)
    heaviest = full.terms[np.argsort(-full.weights.astype(np.int64), kind="stable")[:16]]
    assert set(top.terms.tolist()) == set(heaviest.tolist())


def test_idf_of_unseen_terms_is_finite_and_largest(stats):
    unseen = np.array([12345], dtype=np.uint64)
    assert stats.df_of(unseen)[0] == 0
    assert stats.idf(unseen)[0] == pytest.approx(np.log(1 + stats.doc_count) + 1)
    assert stats.idf(unseen)[0] >= stats.idf(stats.terms).max()


def test_stored_form_round_trips_exactly(vectors):
    for v in vectors[:30]:
        source = v.to_source()
        assert set(source) == {"v", "t", "w"}
        back = TfidfVector.from_source(source)
        assert back == v
        assert cosine(back, vectors[0]) == cosine(v, vectors[0])


@pytest.mark.parametrize("broken, message", [
    ("nope", "expected an object"),
    ({"v": "t1-0000000000", "t": ""}, "exactly the fields"),
    ({"v": "1-0000000000", "t": "", "w": ""}, "TF-IDF version"),
    ({"v": "t1-0000000000", "t": "!!", "w": ""}, "not valid base64"),
    ({"v": "t1-0000000000", "t": "AAAAAAAAAAA=", "w": ""}, "8 and 2 bytes per term"),
    ({"v": "t1-0000000000", "t": "AQAAAAAAAAAAAAAAAAAAAA==", "w": "AQABAA=="}, "strictly increasing"),
])
def test_malformed_stored_vectors_are_rejected_clearly(broken, message):
    with pytest.raises(TfidfFormatError, match=message):
        TfidfVector.from_source(broken)


def test_version_changes_only_with_what_changes_stored_vectors(fp):
    base = FingerprintParams()
    v = tfidf_version(base, TfidfParams())
    assert v == tfidf_version(dataclasses.replace(base, shingle_size=3, groups=14, rows=6), TfidfParams())
    assert v != tfidf_version(base, TfidfParams(top_k=32))
    assert v != tfidf_version(base, TfidfParams(sublinear_tf=False))
    assert v != tfidf_version(dataclasses.replace(base, lemmatize=False), TfidfParams())
    assert v != tfidf_version(dataclasses.replace(base, seed=2), TfidfParams())
    synonyms = SynonymMap.from_text("заявить, сообщить", fp.canonical_tokens)
    assert v != tfidf_version(base, TfidfParams(), synonyms)
    # the same mapping written differently is the same version
    same = SynonymMap.from_text("# news verbs\n  заявить ,сообщил  # past tense is fine\n", fp.canonical_tokens)
    assert tfidf_version(base, TfidfParams(), synonyms) == tfidf_version(base, TfidfParams(), same)
    assert v == tfidf_version(base, TfidfParams(), SynonymMap({}))


def test_params_are_validated():
    with pytest.raises(ValueError, match="top_k"):
        TfidfParams(top_k=0)
    with pytest.raises(ValueError, match="sublinear_tf"):
        TfidfParams(sublinear_tf="yes")  # type: ignore[arg-type]


# ---- synonyms -------------------------------------------------------------------------

SYNONYMS = """
# group name first
США, Соединённые Штаты, Штаты
заявить, сообщить, отметить
автомобиль, машина, авто
"""


def test_synonym_mapping_makes_rewrites_with_synonyms_identical(fp):
    mapping = SynonymMap.from_text(SYNONYMS, fp.canonical_tokens)
    plain, mapped = TfidfWeigher(fp), TfidfWeigher(fp, synonyms=mapping)
    a = "Министр заявил, что Соединённые Штаты купят новые машины для полиции."
    b = "Министр сообщил, что США купят новые автомобили для полиции."
    stats = CorpusStats.of([plain.counts(a).terms, plain.counts(b).terms, mapped.counts(a).terms])
    without = cosine(plain.vector(plain.counts(a), stats), plain.vector(plain.counts(b), stats))
    with_map = cosine(mapped.vector(mapped.counts(a), stats), mapped.vector(mapped.counts(b), stats))
    assert without < 0.6
    assert with_map == pytest.approx(1.0, abs=1e-9)
    # inflected forms and the phrase map to the group's term
    assert mapping.apply(fp.canonical_tokens("Соединённых Штатов заявила")) == ["сша", "заявить"]


def test_longest_synonym_phrase_wins(fp):
    mapping = SynonymMap.from_text("США, Соединённые Штаты\nгосударство, штат", fp.canonical_tokens)
    assert mapping.apply(fp.canonical_tokens("соединённые штаты и штаты")) == ["сша", "государство"]


def test_synonym_file_format():
    assert parse_synonyms("a, b ,c\n\n# x\nd,e  # trailing\n") == [("a", "b", "c"), ("d", "e")]
    assert parse_synonyms("Соединённые   Штаты, США") == [("Соединённые Штаты", "США")]


@pytest.mark.parametrize("text, message", [
    ("a, b\nsolo", "line 2: a group needs at least two entries"),
    ("a, , b", "line 1: empty entry"),
    ("a, b,", "line 1: empty entry"),
])
def test_bad_synonym_files_name_the_line(text, message):
    with pytest.raises(SynonymFormatError, match=message):
        parse_synonyms(text)


def test_synonym_groups_that_conflict_or_vanish_are_errors(fp):
    with pytest.raises(SynonymFormatError, match="line 2: 'машины' already belongs to the group"):
        SynonymMap.from_text("машина, автомобиль\nавто, машины", fp.canonical_tokens)
    with pytest.raises(SynonymFormatError, match="line 3: 'и' has no words left"):
        SynonymMap.from_text("# cars\n\nмашина, и", fp.canonical_tokens)


# ---- corpus statistics -----------------------------------------------------------------

def test_incremental_statistics_equal_batch_statistics(counts, stats):
    rng = np.random.default_rng(3)
    docs = [c.terms for c in counts]
    order = rng.permutation(len(docs))
    built = CorpusStats.empty()
    for batch in np.array_split(order, 9):
        built = built.add(docs[k] for k in batch)
    assert built == stats
    assert built.doc_count == len(docs)
    # merging the statistics of disjoint parts gives the same
    halves = [CorpusStats.of(docs[k] for k in part) for part in np.array_split(order, 2)]
    assert halves[0].merge(halves[1]) == stats
    # df is the number of documents holding the term
    term = stats.terms[np.argmax(stats.df)]
    assert stats.df_of(np.array([term]))[0] == sum(term in set(d.tolist()) for d in docs)


def test_removing_documents_undoes_adding_them(counts, stats):
    docs = [c.terms for c in counts]
    assert stats.remove(docs[100:]) == CorpusStats.of(docs[:100])
    assert stats.remove(docs) == CorpusStats.empty()
    with pytest.raises(ValueError, match="never added"):
        CorpusStats.of(docs[:3]).remove(docs[3:4])


def test_statistics_round_trip_through_bytes(stats):
    back = CorpusStats.from_bytes(stats.to_bytes())
    assert back == stats
    assert len(stats.to_bytes()) == 20 + 12 * len(stats)
    with pytest.raises(StatsFormatError, match="terms need"):
        CorpusStats.from_bytes(stats.to_bytes()[:-1])
    with pytest.raises(StatsFormatError, match="not an NDS1 blob"):
        CorpusStats.from_bytes(b"junk")


def test_statistics_split_into_parts_and_join_back(stats):
    parts = stats.partition(4)
    assert len(parts) == 16
    assert sum(len(p) for p in parts) == len(stats)
    assert all(p.doc_count == stats.doc_count for p in parts)
    assert all(np.all(p.terms >> np.uint64(60) == k) for k, p in enumerate(parts))
    assert CorpusStats.join(parts[::-1]) == stats
    assert CorpusStats.join(stats.partition(0)) == stats
    with pytest.raises(ValueError, match="overlap"):
        CorpusStats.join([stats, stats])
    with pytest.raises(ValueError, match="document counts"):
        CorpusStats.join([parts[0], CorpusStats.empty()])


def test_term_counts_count_each_distinct_term(fp):
    tokens = ["а", "б", "а", "в", "а"]
    c = term_counts(tokens, fp.params.seed)
    assert sorted(c.counts.tolist()) == [1, 1, 3]
    assert len(term_counts([], fp.params.seed)) == 0


# ---- all pairs -----------------------------------------------------------------------

def brute_force(vectors, threshold):
    out = []
    for i, j in itertools.combinations(range(len(vectors)), 2):
        s = cosine(vectors[i], vectors[j])
        if s >= threshold - 1e-12 and s > 0:
            out.append((i, j, s))
    return out


@pytest.mark.parametrize("threshold", [0.0, 0.1, 0.3, 0.7])
def test_cosine_pairs_equal_brute_force(weigher, counts, stats, texts, threshold):
    rng = np.random.default_rng(11)
    # real articles plus reordered copies of some of them, and an empty document
    extra = [weigher.counts(shuffled(texts[k], rng)) for k in range(0, 40, 4)]
    vectors = [weigher.vector(c, stats) for c in counts[:70] + extra] + [weigher.vector(weigher.counts(""), stats)]
    i, j, sim = cosine_pairs(vectors, threshold)
    expected = brute_force(vectors, threshold)
    assert list(zip(i.tolist(), j.tolist())) == [(a, b) for a, b, _ in expected]
    assert np.allclose(sim, [s for _, _, s in expected], atol=1e-9)
    if threshold >= 0.7:
        found = set(zip(i.tolist(), j.tolist()))
        assert {(k, 70 + k // 4) for k in range(0, 40, 4)} <= found


def test_cosine_pairs_bounds_its_work(vectors):
    with pytest.raises(ValueError, match="exceed the limit"):
        cosine_pairs(vectors, 0.5, max_products=10)
    with pytest.raises(ValueError, match="threshold"):
        cosine_pairs(vectors, 1.5)
    assert [len(a) for a in cosine_pairs(vectors[:1], 0.5)] == [0, 0, 0]
