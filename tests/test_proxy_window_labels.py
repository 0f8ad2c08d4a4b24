""":func:`proxy.grouping.fingerprints.window_labels` gives exactly the labels of
:func:`fingerprint.group_labels`, and grouping a window with it gives the same groups."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from neardup.fingerprint import FingerprintParams, group_labels
from neardup.proxy.grouping import collapse, fingerprints
from neardup.proxy.grouping.fingerprints import default_algorithms, window_labels


def _same(n: int, i: np.ndarray, j: np.ndarray) -> None:
    want, have = group_labels(n, i, j), window_labels(n, i, j)
    assert have.dtype == want.dtype
    assert np.array_equal(have, want)


@pytest.mark.parametrize("seed", range(4))
def test_random_graphs_match_group_labels(seed: int) -> None:
    rng = np.random.default_rng(seed)
    for _ in range(400):
        n = int(rng.integers(1, 80))
        pairs = int(rng.choice([0, 1, 2, 5, 20, fingerprints.WINDOW_PAIRS, fingerprints.WINDOW_PAIRS + 40]))
        i = rng.integers(0, n, size=pairs).astype(np.int64)
        j = rng.integers(0, n, size=pairs).astype(np.int64)
        _same(n, i, j)
        _same(n, np.minimum(i, j), np.maximum(i, j))   # as pair finders give them: lo < hi, sorted
        _same(n, j[::-1].copy(), i[::-1].copy())       # any order, either direction


def test_chains_join_through_later_pairs() -> None:
    # 4-3, 3-2, 2-1, 1-0: each union meets a root found through the earlier ones.
    i, j = np.array([3, 2, 1, 0], dtype=np.int64), np.array([4, 3, 2, 1], dtype=np.int64)
    assert window_labels(6, i, j).tolist() == [0, 0, 0, 0, 0, 5]
    _same(6, i, j)
    _same(7, np.array([5, 1, 5, 3], dtype=np.int64), np.array([6, 2, 2, 4], dtype=np.int64))


def test_refuses_what_group_labels_refuses() -> None:
    cases = [(3, np.array([0, 3]), np.array([1, 1])),               # beyond n
             (3, np.array([-1]), np.array([1])),                     # negative
             (3, np.array([0, 1]), np.array([1])),                   # shapes differ
             (3, np.array([0], dtype=np.int32), np.array([5], dtype=np.int32))]
    for n, i, j in cases:
        with pytest.raises(ValueError) as expected:
            group_labels(n, i, j)
        with pytest.raises(ValueError) as got:
            window_labels(n, i, j)
        assert str(got.value) == str(expected.value)


def test_grouping_with_it_matches_grouping_with_group_labels() -> None:
    rng = np.random.default_rng(11)
    algorithms = default_algorithms(FingerprintParams())
    reference = dataclasses.replace(algorithms, group_labels=group_labels)
    version = "1-0123456789"
    for _ in range(60):
        n = int(rng.integers(1, 40))
        signatures = rng.integers(0, 4, size=(n, 4), dtype=np.uint64)

        def read(objects: list[object], signatures: np.ndarray = signatures) -> collapse.Signatures:
            usable = np.array([k for k, value in enumerate(objects) if value is not None], dtype=np.int64)
            return usable, signatures[usable], np.ones(len(usable), dtype=np.int64)

        hits = [{"_id": str(k), "_source": {"neardup": {"v": version}} if rng.random() < 0.8 else {}}
                for k in range(n)]
        for threshold in (0.5, 0.75, 1.0):
            got = collapse.group(hits, "_source", threshold, "resemblance", dataclasses.replace(algorithms, read=read))
            want = collapse.group(hits, "_source", threshold, "resemblance", dataclasses.replace(reference, read=read))
            assert got == want
            assert sorted(p for members in got[0] for p in members) == list(range(n))
