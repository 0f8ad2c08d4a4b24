"""The pseudo-matrix Bloom filter: false-positive rate against the formula, designed fill and
rows needed, delete rebuilding exactly the affected rows, and queries finding planted copied
fragments of real Russian articles (5 %, 10 %, 50 % of a source) with no false negatives."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from neardup.corpora import ru_news_documents
from neardup.fingerprint import Fingerprinter, exact_containment
from neardup.fingerprint.bloom import (
    BloomParams,
    PseudoMatrixBloom,
    bit_positions,
    containment_shares,
    frequent_shingles,
    rows_needed,
)


def random_keys(rng: np.random.Generator, n: int) -> np.ndarray:
    return np.unique(rng.integers(0, 2**64 - 1, n, dtype=np.uint64, endpoint=True))


# ---- parameters and the formula --------------------------------------------------------

def test_capacity_is_the_fill_at_which_the_formula_reaches_the_target():
    for params in (BloomParams(), BloomParams(row_bits=4096, hashes=3, target_fp=0.05),
                   BloomParams(row_bits=1 << 20, hashes=10, target_fp=0.001)):
        n = params.capacity
        assert params.false_positive_rate(n) <= params.target_fp < params.false_positive_rate(n + 1)
    # optimal k: about 9.6 bits per shingle at 1 %
    assert BloomParams().row_bits / BloomParams().capacity == pytest.approx(-math.log(0.01) / math.log(2) ** 2, rel=0.01)


@pytest.mark.parametrize("params, fill", [
    (BloomParams(), 1.0),
    (BloomParams(row_bits=8192, hashes=3, target_fp=0.03), 0.5),
    (BloomParams(row_bits=4096, hashes=3, target_fp=0.05), 1.0),
    (BloomParams(row_bits=1 << 14, hashes=4, target_fp=0.02), 0.8),
])
def test_measured_false_positive_rate_is_within_20_percent_of_the_formula(params, fill):
    rng = np.random.default_rng(2024)
    n = int(params.capacity * fill)
    bloom = PseudoMatrixBloom(params)
    members = [random_keys(rng, n) for _ in range(4)]
    for d, keys in enumerate(members):
        bloom.insert(d, keys)
    # enough trials for a relative standard error of about 2.5 %: 20 % is eight standard errors
    absent = random_keys(rng, int(1600 / params.false_positive_rate(n)))
    for row in range(bloom.rows):
        parts = np.concatenate([members[p.doc][p.start:p.end] for p in bloom.parts[row]])
        assert bloom.row_holds(row, parts).all()          # no false negatives
        expected = params.false_positive_rate(bloom.fill[row])
        if bloom.fill[row] >= n:                           # rows at the tested fill or fuller
            assert bloom.row_holds(row, absent).mean() == pytest.approx(expected, rel=0.2)


def test_bit_positions_use_double_hashing():
    params = BloomParams(row_bits=1024, hashes=5)
    x = np.array([(7 << 32) | 3, (2**64 - 1)], dtype=np.uint64)
    pos = bit_positions(x, params)
    assert pos[0].tolist() == [(3 + i * 7) % 1024 for i in range(5)]
    h1, h2 = 2**32 - 1, (2**32 - 1) | 1
    assert pos[1].tolist() == [(h1 + i * h2) % 1024 for i in range(5)]


@pytest.mark.parametrize("kwargs, message", [
    ({"row_bits": 100}, "row_bits"),
    ({"hashes": 0}, "hashes"),
    ({"target_fp": 1.5}, "target_fp"),
    ({"row_bits": 64, "hashes": 30, "target_fp": 1e-30}, "cannot hold one shingle"),
])
def test_bad_parameters_are_rejected(kwargs, message):
    with pytest.raises(ValueError, match=message):
        BloomParams(**kwargs)


def test_rows_needed_packed_vs_one_filter_per_document():
    assert rows_needed(np.array([10, 10, 10, 10]), 40) == (1, 4)
    assert rows_needed(np.array([100, 10, 0]), 40) == (3, 3 + 1 + 1)


def test_documents_are_packed_across_rows_until_each_row_is_full():
    rng = np.random.default_rng(5)
    params = BloomParams(row_bits=4096, hashes=3, target_fp=0.05)
    bloom = PseudoMatrixBloom(params)
    sizes = rng.integers(1, params.capacity // 2, 60)
    for d, s in enumerate(sizes):
        bloom.insert(d, random_keys(rng, int(s)))
    assert all(f == params.capacity for f in bloom.fill[:-1])
    assert 0 < bloom.fill[-1] <= params.capacity
    figures = bloom.figures()
    assert figures["rows"] == rows_needed(np.array([bloom.doc_sizes[d] for d in range(60)]), params.capacity)[0]
    assert figures["rows_one_filter_per_document"] == 60 > figures["rows"]
    assert figures["bytes"] == bloom.rows * 4096 // 8
    with pytest.raises(ValueError, match="already in the filter"):
        bloom.insert(0, random_keys(rng, 3))
    assert bloom.insert(999, np.empty(0, dtype=np.uint64)) == []


# ---- delete --------------------------------------------------------------------------

def row_bits(bloom: PseudoMatrixBloom, row: int) -> np.ndarray:
    return ((bloom.bits[:, row >> 6] >> np.uint64(row & 63)) & np.uint64(1)).astype(bool)


def test_delete_removes_exactly_that_document_and_rebuilds_only_its_rows():
    rng = np.random.default_rng(9)
    params = BloomParams(row_bits=8192, hashes=4, target_fp=0.02)
    docs = {d: random_keys(rng, int(rng.integers(50, 900))) for d in range(80)}
    bloom = PseudoMatrixBloom(params)
    for d, keys in docs.items():
        bloom.insert(d, keys)
    victim = max(docs, key=lambda d: len(bloom.doc_rows[d]))  # one spanning two rows
    victim_rows = list(bloom.doc_rows[victim])
    before = {r: row_bits(bloom, r) for r in range(bloom.rows)}
    rebuilt = bloom.delete(victim, docs.__getitem__)
    assert rebuilt == victim_rows
    assert victim not in bloom.doc_rows
    for r in range(bloom.rows):
        if r in victim_rows:
            # exactly the bits of the remaining parts of the row
            reference = PseudoMatrixBloom(params)
            reference._ensure_rows(1)
            reference.fill.append(0)
            reference.parts.append([])
            for part in bloom.parts[r]:
                reference._set(0, docs[part.doc][part.start:part.end])
            assert np.array_equal(row_bits(bloom, r), row_bits(reference, 0))
            assert bloom.fill[r] == sum(p.end - p.start for p in bloom.parts[r])
            assert all(p.doc != victim for p in bloom.parts[r])
        else:
            assert np.array_equal(row_bits(bloom, r), before[r])
    # its shingles are gone (up to false positives), everyone else's are all still there
    for r in victim_rows:
        own = bloom.row_holds(r, docs[victim])
        others = np.concatenate([docs[p.doc][p.start:p.end] for p in bloom.parts[r]])
        assert own.mean() < 0.1 + np.isin(docs[victim], others).mean()
        assert bloom.row_holds(r, others).all()
    docs_found, _ = bloom.query(docs[victim], 0.5)
    assert victim not in docs_found.tolist()
    for d in (0, 40, 79):
        if d != victim:
            assert d in bloom.query(docs[d], 0.99)[0].tolist()
    with pytest.raises(KeyError):
        bloom.delete(victim, docs.__getitem__)


def test_delete_checks_the_shingles_it_is_given():
    rng = np.random.default_rng(1)
    bloom = PseudoMatrixBloom(BloomParams(row_bits=4096, hashes=3, target_fp=0.05))
    a, b = random_keys(rng, 50), random_keys(rng, 50)
    bloom.insert(1, a)
    bloom.insert(2, b)
    with pytest.raises(ValueError, match="were inserted"):
        bloom.delete(1, lambda d: b[:10])


# ---- queries on real text ----------------------------------------------------------------

@pytest.fixture(scope="module")
def fp() -> Fingerprinter:
    return Fingerprinter()


@pytest.fixture(scope="module")
def corpus(fp) -> list[list[str]]:
    """Canonical tokens of 150 Russian articles with at least 300 canonical tokens."""
    out = []
    for d in ru_news_documents():
        tokens = fp.canonical_tokens(d["title"] + "\n" + d["body"])
        if len(tokens) >= 300:
            out.append(tokens)
        if len(out) == 150:
            break
    return out


@pytest.mark.parametrize("share", [0.05, 0.10, 0.50])
def test_query_finds_planted_fragments_of_a_source(fp, corpus, share):
    rng = np.random.default_rng(int(share * 100))
    size = fp.params.shingle_size
    sources = list(range(0, 30, 3))
    hosts = list(range(100, 100 + len(sources)))
    docs = [list(t) for t in corpus]
    for s, h in zip(sources, hosts):
        tokens = corpus[s]
        shingles = len(fp.shingles(tokens))
        length = int(math.ceil(share * shingles)) + size - 1      # a fragment of share·|S| shingles
        start = int(rng.integers(0, len(tokens) - length))
        while exact_containment(fp.shingles(tokens), fp.shingles(tokens[start:start + length])) < share:
            length += 1                                             # repeated shingles in the source
            start = min(start, len(tokens) - length)
        at = int(rng.integers(0, len(docs[h])))
        docs[h] = docs[h][:at] + tokens[start:start + length] + docs[h][at:]
    sets = [fp.shingles(t) for t in docs]
    bloom = PseudoMatrixBloom(BloomParams())
    for d, s in enumerate(sets):
        bloom.insert(d, s)
    assert bloom.rows < len(docs)  # several documents a row
    for s, h in zip(sources, hosts):
        assert exact_containment(sets[s], sets[h]) >= share
        found, bound = bloom.query(sets[s], share, exclude=s)
        assert h in found.tolist()
        verified = [d for d in found.tolist() if exact_containment(sets[s], sets[d]) >= share]
        assert h in verified
        # no false negatives: every document holding that share of the source is a candidate
        holding = [d for d in range(len(docs)) if d != s and exact_containment(sets[s], sets[d]) >= share]
        assert set(holding) <= set(found.tolist())
        assert np.all(bound[np.isin(found, holding)] >= share)


def test_query_of_an_outside_page_and_of_unrelated_text(fp, corpus):
    sets = [fp.shingles(t) for t in corpus[:60]]
    bloom = PseudoMatrixBloom(BloomParams())
    for d, s in enumerate(sets):
        bloom.insert(d, s)
    page = fp.shingles(corpus[120][:200] + corpus[7][50:150])   # not in the filter; quotes article 7
    found, _ = bloom.query(page, 0.3)
    assert 7 in found.tolist()
    unrelated = fp.shingles(corpus[130])
    found, _ = bloom.query(unrelated, 0.05)
    # each row holds ~1 % false positives of the query: far below 5 %
    assert found.tolist() == []
    with pytest.raises(ValueError, match="min_share"):
        bloom.query(unrelated, 0.0)


def test_query_excluding_the_source_returns_its_row_mates_but_not_itself(fp, corpus):
    sets = [fp.shingles(t) for t in corpus[:40]]
    bloom = PseudoMatrixBloom(BloomParams())
    for d, s in enumerate(sets):
        bloom.insert(d, s)
    mates = {p.doc for r in bloom.doc_rows[3] for p in bloom.parts[r]} - {3}
    found, bound = bloom.query(sets[3], 0.05, exclude=3)
    assert 3 not in found.tolist()
    assert mates <= set(found.tolist())
    assert np.all(bound[np.isin(found, list(mates))] == 1.0)
    # without exclusion the source finds itself
    assert 3 in bloom.query(sets[3], 0.99)[0].tolist()


def test_same_operations_give_the_same_bits(fp, corpus):
    def build():
        bloom = PseudoMatrixBloom(BloomParams(row_bits=1 << 14, hashes=5, target_fp=0.02))
        sets = [fp.shingles(t) for t in corpus[:30]]
        for d, s in enumerate(sets):
            bloom.insert(d, s)
        bloom.delete(4, sets.__getitem__)
        return bloom

    a, b = build(), build()
    assert np.array_equal(a.bits, b.bits) and a.fill == b.fill


def test_many_rows_across_word_boundaries():
    """More than 64 rows: the bit-sliced words grow and rows past 64 answer correctly."""
    rng = np.random.default_rng(4)
    params = BloomParams(row_bits=1024, hashes=3, target_fp=0.05)
    bloom = PseudoMatrixBloom(params)
    docs = [random_keys(rng, params.capacity) for _ in range(150)]
    for d, keys in enumerate(docs):
        assert bloom.insert(d, keys) == [d]
    for d in itertools.chain(range(0, 150, 13), [63, 64, 127, 128, 149]):
        found, bound = bloom.query(docs[d], 0.9)
        assert d in found.tolist()


def test_containment_shares_are_exact():
    rng = np.random.default_rng(8)
    source = random_keys(rng, 200)
    others = [np.concatenate([source[:k], random_keys(rng, 50)]) for k in (0, 10, 100, 200)] + [np.empty(0, np.uint64)]
    shares = containment_shares(source, others)
    assert shares.tolist() == [exact_containment(source, o) for o in others] == [0.0, 0.05, 0.5, 1.0, 0.0]
    assert containment_shares(np.empty(0, np.uint64), others).tolist() == [0.0] * 5


def test_frequent_shingles_are_those_in_more_than_the_limit():
    a, b, c = (np.array(x, dtype=np.uint64) for x in ([1, 2, 3], [2, 3, 4], [3, 5]))
    assert frequent_shingles([a, b, c], 1).tolist() == [2, 3]
    assert frequent_shingles([a, b, c], 2).tolist() == [3]
    assert frequent_shingles([], 2).tolist() == []
