""":func:`proxy.grouping.fingerprints.window_pairs` finds exactly what
:func:`fingerprint.similar_pairs` finds: the same pairs, order, estimates and dtypes."""

from __future__ import annotations

import numpy as np
import pytest

from neardup.fingerprint import Fingerprinter, FingerprintParams, similar_pairs
from neardup.proxy.grouping import fingerprints
from neardup.proxy.grouping.fingerprints import window_pairs
from tests.compiled_support import require_built


def _same(expected: tuple[np.ndarray, ...], got: tuple[np.ndarray, ...]) -> None:
    for want, have in zip(expected, got, strict=True):
        assert have.dtype == want.dtype
        assert np.array_equal(have, want)


def _window(rng: np.random.Generator, n: int, k: int, alphabet: int) -> tuple[np.ndarray, np.ndarray]:
    """``n`` signatures, about 40% of them edited copies of an earlier one, and some empty."""
    signatures = rng.integers(0, alphabet, size=(n, k), dtype=np.uint64)
    for row in range(1, n):
        if rng.random() < 0.4:
            signatures[row] = signatures[int(rng.integers(0, row))]
            edited = rng.random(k) < rng.random() * 0.4
            signatures[row, edited] = rng.integers(0, 2**63, size=int(edited.sum()), dtype=np.uint64)
    return signatures, rng.integers(0, 4, size=n)


@pytest.mark.parametrize("seed", range(6))
def test_random_windows_match_similar_pairs(seed: int) -> None:
    rng = np.random.default_rng(seed)
    for trial in range(300):
        n = int(rng.integers(0, fingerprints.WINDOW_ROWS + 8))
        k = int(rng.choice([84, 128, 16, 5]))
        signatures, counts = _window(rng, n, k, 4 if trial % 3 == 0 else 2**63)
        for threshold in (0.5, 0.75, 0.8, 0.9, 0.95, 1.0):
            _same(similar_pairs(signatures, counts, threshold, "resemblance"),
                  window_pairs(signatures, counts, threshold, "resemblance"))


def test_real_fingerprints_and_other_modes() -> None:
    fingerprinter = Fingerprinter(FingerprintParams())
    words = "oil price rise opec output quota crude barrel market trade bank rate cut wheat".split()
    rng = np.random.default_rng(7)
    texts = [" ".join(rng.choice(words, 60)) for _ in range(12)]
    texts += [text + " export" for text in texts[:4]]     # near-duplicates
    prints = [fingerprinter.fingerprint(text) for text in texts]
    signatures = np.vstack([p.signature for p in prints]).astype(np.uint64)
    counts = np.asarray([p.shingle_count for p in prints])
    for mode in ("resemblance", "containment"):
        for threshold in (0.3, 0.8, 0.9):
            found = window_pairs(signatures, counts, threshold, mode)
            _same(similar_pairs(signatures, counts, threshold, mode), found)
    assert window_pairs(signatures, counts, 0.8)[0].size   # the copies are found


def test_refuses_what_similar_pairs_refuses() -> None:
    with pytest.raises(ValueError):
        window_pairs(np.zeros((3, 4), dtype=np.int64), np.ones(3), 0.8)
    with pytest.raises(ValueError):
        window_pairs(np.zeros((3, 4), dtype=np.uint64), np.ones(2), 0.8)


def _compiled_pairs() -> None:
    require_built(fingerprints.COMPILED_PAIRS, "neardup.proxy.grouping._compiled")


def test_the_compiled_pair_search_is_built() -> None:
    _compiled_pairs()


@pytest.mark.parametrize("seed", range(4))
def test_the_compiled_search_finds_what_its_reference_finds(seed: int) -> None:
    _compiled_pairs()
    rng = np.random.default_rng(100 + seed)
    for trial in range(300):
        n = int(rng.integers(2, fingerprints.WINDOW_ROWS + 1))
        k = int(rng.choice([84, 128, 16, 5, 1]))
        signatures, counts = _window(rng, n, k, 4 if trial % 3 == 0 else 2**63)
        for threshold in (0.01, 0.3, 0.5, 0.75, 0.8, 0.9, 1.0):
            _same(fingerprints.band_key_pairs(signatures, counts, threshold),
                  window_pairs(signatures, counts, threshold, "resemblance"))


def test_the_compiled_search_refuses_what_it_cannot_read() -> None:
    _compiled_pairs()
    from neardup.proxy.grouping import _compiled

    for signatures, counts, k, need in ((b"\0" * 16, b"\0" * 8, 2, 3), (b"\0" * 16, b"\0" * 8, 2, 0),
                                        (b"\0" * 15, b"\0" * 8, 2, 1), (b"\0" * 16, b"\0" * 7, 2, 1),
                                        (b"", b"", 0, 1)):
        with pytest.raises(ValueError):
            _compiled.equal_slot_pairs(signatures, counts, k, need)
