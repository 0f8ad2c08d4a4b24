"""Shingles, MinHash, supershingles and megashingles: the math against a pure-Python reference,
short and empty documents, determinism, and the golden fingerprints."""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import struct
from pathlib import Path

import mmh3
import numpy as np
import pytest

from neardup.corpora import reuters_documents
from neardup.fingerprint import (
    ALGORITHM_VERSION,
    Fingerprint,
    Fingerprinter,
    FingerprintParams,
    estimated_containment,
    estimated_resemblance,
    scheme_version,
)
from neardup.fingerprint.hashing import (
    FMIX_C1,
    GOLDEN,
    MASK64,
    MEGA_SEED,
    SUPER_SEED,
    fmix64_int,
    minhash,
    multipliers,
    shingle_hashes,
    splitmix64,
)

GOLDEN_FILE = Path(__file__).parent / "golden" / "fingerprints.json"


# ---- a pure-Python reference of the documented math (fingerprint/hashing.py) -----------

def reference_fingerprint(tokens: list[str], params: FingerprintParams) -> dict:
    """The fingerprint as the docstrings of :mod:`neardup.fingerprint.hashing` define it, in
    Python ints."""
    seed, n = params.seed, params.shingle_size
    token_hashes = [mmh3.hash64(t.encode("utf-8"), seed, signed=False)[0] for t in tokens]
    windows = [token_hashes[i:i + n] for i in range(len(token_hashes) - n + 1)] or (
        [token_hashes] if token_hashes else [])
    shingles = set()
    for window in windows:
        h = (seed ^ (len(window) * GOLDEN)) & MASK64
        for t in window:
            h = ((h ^ t) * FMIX_C1) & MASK64
        shingles.add(fmix64_int(h) or 1)
    multipliers_ = [v | 1 for v in splitmix64(seed ^ 0x6A09E667F3BCC909, params.num_perm)]
    if not shingles:
        return {"sig": [MASK64] * params.num_perm, "n": 0, "super": [], "mega": []}
    sig = [min((a * x) & MASK64 for x in shingles) for a in multipliers_]
    rows = params.rows
    supers = [mmh3.hash64(struct.pack(f"<{rows}Q", *sig[g * rows:(g + 1) * rows]), SUPER_SEED + g, signed=False)[0]
              for g in range(params.groups)]
    megas = [mmh3.hash64(struct.pack("<2Q", supers[i], supers[j]), MEGA_SEED, signed=False)[0]
             for i, j in itertools.combinations(range(params.groups), 2)]
    return {"sig": sig, "n": len(shingles), "super": supers, "mega": megas}


@pytest.mark.parametrize("params", [
    FingerprintParams(),
    FingerprintParams(shingle_size=3, num_perm=84, groups=14, rows=6, seed=42),
    FingerprintParams(shingle_size=1, num_perm=12, groups=3, rows=4, seed=0),
])
def test_numpy_pipeline_equals_pure_python_reference(params: FingerprintParams) -> None:
    fp = Fingerprinter(params)
    stories = [d["body"] for d in itertools.islice(reuters_documents(with_body_only=True), 15)]
    for text in stories + ["one", "two words", ""]:
        tokens = fp.canonical_tokens(text)
        ours = fp.fingerprint(text)
        expected = reference_fingerprint(tokens, params)
        assert ours.signature.tolist() == expected["sig"]
        assert ours.shingle_count == expected["n"]
        assert ours.supershingles.tolist() == expected["super"]
        assert ours.megashingles.tolist() == expected["mega"]


def test_short_document_is_one_shingle_of_all_its_tokens() -> None:
    fp = Fingerprinter()
    assert len(fp.shingles(["a", "b", "c"])) == 1
    assert fp.fingerprint("oil prices").shingle_count == 1
    # the short shingle differs from any real 5-shingle and from its reordering
    long_doc = fp.shingles(["oil", "price", "x", "y", "z"])
    assert not set(fp.shingles(["oil", "price"])) & set(long_doc)
    assert not np.array_equal(fp.shingles(["a", "b"]), fp.shingles(["b", "a"]))
    # two short documents with the same words are identical, with other words unrelated
    assert estimated_resemblance(fp.fingerprint("oil prices"), fp.fingerprint("Oil price!")) == 1.0
    assert estimated_resemblance(fp.fingerprint("oil prices"), fp.fingerprint("gold prices")) < 0.2


def test_shingles_are_order_sensitive_windows() -> None:
    fp = Fingerprinter(FingerprintParams(shingle_size=2, language="none"))
    tokens = "a b c a b".split()
    hashes = fp.shingles(tokens)
    assert len(hashes) == 3  # ab, bc, ca (ab twice)
    assert np.array_equal(hashes, np.unique(hashes))
    assert len(fp.shingles(["b", "a"])) == 1 and not set(fp.shingles(["b", "a"])) & set(hashes)


def test_empty_fingerprint_is_defined_and_never_similar() -> None:
    fp = Fingerprinter()
    empty = fp.fingerprint("")
    assert empty.is_empty and empty.shingle_count == 0
    assert np.all(empty.signature == np.uint64(2**64 - 1)) and empty.signature.shape == (84,)
    assert empty.supershingles.size == 0 and empty.megashingles.size == 0
    for text in [" ", "...!!!", "и в на не", "the of and to", "\x00\x01"]:
        assert fp.fingerprint(text) == empty
    other = fp.fingerprint("real words about crude oil prices rising fast")
    for a, b in [(empty, other), (other, empty), (empty, empty)]:
        assert estimated_resemblance(a, b) == 0.0
        assert estimated_containment(a, b) == 0.0


def test_minhash_in_blocks_equals_one_pass() -> None:
    a = multipliers(1, 84)
    values = np.random.default_rng(3).integers(0, 2**64 - 1, 5000, dtype=np.uint64)
    one_pass = np.min(values[:, None] * a[None, :], axis=0)
    assert np.array_equal(minhash(values, a), one_pass)


def test_batch_apis_equal_one_by_one() -> None:
    """signatures() and fingerprint_many() (one vectorised pass) == fingerprint_tokens / fingerprint."""
    rng = np.random.default_rng(4)
    stories = [d["title"] + "\n" + d["body"] for d in itertools.islice(reuters_documents(), 400)]
    texts = stories + ["", "one", "two words", "и в на", "x " * 3000] + [stories[0]] * 3
    order = rng.permutation(len(texts))
    texts = [texts[k] for k in order]
    for params in (FingerprintParams(), FingerprintParams(shingle_size=2, num_perm=12, groups=3, rows=4)):
        fp = Fingerprinter(params)
        one_by_one = [fp.fingerprint(t) for t in texts]
        assert fp.fingerprint_many(texts) == one_by_one
        signatures = fp.signatures([fp.canonical_tokens(t) for t in texts])
        assert np.array_equal(signatures, np.stack([f.signature for f in one_by_one]))
    assert Fingerprinter().fingerprint_many([]) == []
    assert Fingerprinter().signatures([]).shape == (0, 84)


def test_signatures_in_several_batches_and_odd_tokens(monkeypatch: pytest.MonkeyPatch) -> None:
    import neardup.fingerprint.fingerprinter as module

    monkeypatch.setattr(module, "BATCH_TOKENS", 50)
    fp = Fingerprinter()
    token_lists = [fp.canonical_tokens(d["body"]) for d in itertools.islice(reuters_documents(), 30)]
    token_lists += [[], ["x"], ["a b", "c"], ["", "d", "e"], ["ё", "𝐀", "\ud800"]]  # spaces / empty: slow path
    expected = np.stack([fp.fingerprint_tokens(t).signature for t in token_lists])
    assert np.array_equal(fp.signatures(token_lists), expected)


def test_permutations_are_fixed_forever() -> None:
    """SplitMix64 is implemented here, so the permutations cannot move with NumPy releases."""
    a = multipliers(1, 84)
    assert splitmix64(1234567, 3) == [6457827717110365317, 3203168211198807973, 9817491932198370423]
    assert np.all(a % np.uint64(2) == 1)
    assert a.tolist() == [v | 1 for v in splitmix64(1 ^ 0x6A09E667F3BCC909, 84)]
    assert len(set(a.tolist())) == 84 and not a.flags.writeable


def test_shingle_hash_fold_matches_definition() -> None:
    tokens = np.array([1, 2, 3, 2**64 - 1], dtype=np.uint64)
    got = shingle_hashes(tokens, 3, 9).tolist()
    expected = []
    for i in range(2):
        h = (9 ^ (3 * GOLDEN)) & MASK64
        for t in tokens[i:i + 3].tolist():
            h = ((h ^ t) * FMIX_C1) & MASK64
        expected.append(fmix64_int(h) or 1)
    assert got == expected


def test_same_text_same_fingerprint_across_instances_and_orders() -> None:
    texts = [d["body"] for d in itertools.islice(reuters_documents(with_body_only=True), 30)]
    first = [Fingerprinter().fingerprint(t) for t in texts]
    shared = Fingerprinter()
    second = [shared.fingerprint(t) for t in reversed(texts)][::-1]
    assert first == second


def test_scheme_version_changes_with_every_parameter() -> None:
    base = FingerprintParams()
    changes = dict(shingle_size=4, num_perm=84 * 2, groups=12, rows=7, seed=2, language="en",
                   strip_html=False, drop_stopwords=False, lemmatize=False)
    versions = {scheme_version(base)}
    for key, value in changes.items():
        if key == "num_perm":
            params = dataclasses.replace(base, num_perm=2 * base.num_perm, rows=2 * base.rows)
        elif key in ("groups", "rows"):
            params = dataclasses.replace(base, groups=12, rows=7)
        else:
            params = dataclasses.replace(base, **{key: value})
        versions.add(scheme_version(params))
    assert len(versions) == 1 + len(changes) - 1  # groups and rows give the same params
    assert scheme_version(base).startswith(f"{ALGORITHM_VERSION}-")
    assert Fingerprinter(base).version == scheme_version(base) == Fingerprinter().fingerprint("x y").version


@pytest.mark.parametrize(("changes", "message"), [
    ({"shingle_size": 0}, "shingle_size = 0: must be a whole number from 1 to 32"),
    ({"shingle_size": True}, "shingle_size = True: must be a whole number"),
    ({"shingle_size": 2.5}, "shingle_size = 2.5"),
    ({"num_perm": 85}, "num_perm = 85: must be groups × rows = 14 × 6 = 84"),
    ({"groups": 0, "num_perm": 0}, "num_perm = 0"),
    ({"seed": -1}, "seed = -1: must be a whole number from 0 to 4294967295"),
    ({"seed": 2**32}, "seed = 4294967296"),
    ({"language": "fr"}, "language = 'fr': must be one of 'auto', 'ru', 'en', 'none'"),
    ({"lemmatize": "yes"}, "lemmatize = 'yes': must be true or false"),
])
def test_invalid_params_are_rejected_with_a_clear_message(changes: dict, message: str) -> None:
    with pytest.raises(ValueError) as info:
        FingerprintParams(**changes)
    assert message in str(info.value)


# ---- golden fingerprints ----------------------------------------------------------

GOLDEN_TEXTS = {
    "en": ("<html><body><h1>Oil prices climb</h1><p>Crude oil prices rose sharply on Monday after the "
           "producers&#39; group agreed to extend its output cuts into next year, traders said. "
           "Brent crude futures were up 2.3 percent at $64.10 a barrel by 1400 GMT.</p>"
           "<script>track('x')</script><p>Analysts expect the market to remain tight.</p></body></html>"),
    "ru": ("Министры иностранных дел России и Китая провели переговоры в Москве. Стороны обсудили "
           "торговое сотрудничество, энергетические проекты и ситуацию в регионе. По словам министра, "
           "встреча прошла в конструктивной атмосфере; следующий раунд переговоров состоится осенью. "
           "Ёлки, ёжики и моло\u0301ко — тоже слова."),
    "short": "Курс рубля",
    "empty": "<p> &nbsp; — </p>",
}
GOLDEN_PARAMS = {
    "default": FingerprintParams(),
    # The defaults before the quality evaluation changed them: pinned explicitly.
    "shingle5-6x14": FingerprintParams(shingle_size=5, groups=6, rows=14),
    "14x6-shingle3-seed42": FingerprintParams(shingle_size=3, groups=14, rows=6, seed=42),
    "no-lemmas-no-stopwords": FingerprintParams(shingle_size=5, groups=6, rows=14,
                                                drop_stopwords=False, lemmatize=False),
}


def golden_cases() -> list[dict]:
    cases = []
    for params_name, params in GOLDEN_PARAMS.items():
        fp = Fingerprinter(params)
        for text_name, text in GOLDEN_TEXTS.items():
            fingerprint = fp.fingerprint(text)
            cases.append({"name": f"{text_name}/{params_name}", "params": params.as_dict(), "text": text,
                          "tokens": fp.canonical_tokens(text), "source": fingerprint.to_source(),
                          "mega": [f"{int(v):016x}" for v in fingerprint.megashingles]})
    return cases


def test_golden_fingerprints_are_byte_identical() -> None:
    """Fixed texts and parameters give exactly the committed fingerprints.

    A failure means the scheme changed (canonicalisation, hashing, permutations, grouping,
    or a dependency: pymorphy3 dictionaries, Snowball, unicodedata). If the change is
    intended, bump ``ALGORITHM_VERSION`` and regenerate with
    ``NEARDUP_REGENERATE_GOLDEN=1 pytest tests/test_fingerprint_core.py -k golden``.
    """
    cases = golden_cases()
    if os.environ.get("NEARDUP_REGENERATE_GOLDEN") == "1":
        GOLDEN_FILE.parent.mkdir(exist_ok=True)
        GOLDEN_FILE.write_text(json.dumps({"algorithm_version": ALGORITHM_VERSION, "cases": cases},
                                          ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    expected = json.loads(GOLDEN_FILE.read_text(encoding="utf-8"))
    assert expected["algorithm_version"] == ALGORITHM_VERSION
    assert [c["name"] for c in cases] == [c["name"] for c in expected["cases"]]
    for ours, theirs in zip(cases, expected["cases"]):
        assert ours["text"] == theirs["text"] and ours["params"] == theirs["params"]
        assert ours["tokens"] == theirs["tokens"], ours["name"]
        assert ours["source"] == theirs["source"], ours["name"]
        assert ours["mega"] == theirs["mega"], ours["name"]
        assert Fingerprint.from_source(theirs["source"]).to_source() == theirs["source"]
    names = {c["name"]: c for c in expected["cases"]}
    assert names["empty/default"]["source"]["n"] == 0
    assert names["short/default"]["source"]["n"] == 1
    assert names["ru/default"]["tokens"][:4] == ["министр", "иностранный", "дело", "россия"]
