"""The stored field layout: to_source / from_source round trip, strict validation, ES mapping."""

from __future__ import annotations

import base64
import copy
import json

import numpy as np
import pytest

from neardup.fingerprint import (
    FIELD,
    RETIRED_KEYS,
    Fingerprint,
    Fingerprinter,
    FingerprintFormatError,
    FingerprintParams,
    es_mapping,
)
from neardup.fingerprint.hashing import megashingles

#: The format tests name concrete sizes (6 supershingles, 15 megashingles, 5-word shingles).
FORMAT_PARAMS = FingerprintParams(shingle_size=5, groups=6, rows=14)


@pytest.fixture(scope="module")
def source() -> dict:
    return Fingerprinter(FORMAT_PARAMS).fingerprint(
        "Crude oil prices rose sharply on Monday after the producers agreed").to_source()


def test_field_and_mapping() -> None:
    assert FIELD == "neardup"
    assert es_mapping() == {"properties": {"neardup": {"properties": {
        "v": {"type": "keyword"},
        "sig": {"type": "binary", "doc_values": False},
        "n": {"type": "integer"},
        "super": {"type": "keyword", "doc_values": False},
        "mega": {"type": "keyword", "index": False, "doc_values": False},
    }}}}


def test_source_layout(source: dict) -> None:
    assert list(source) == ["v", "sig", "n", "super"]
    assert source["v"] == Fingerprinter(FORMAT_PARAMS).version
    raw = base64.b64decode(source["sig"], validate=True)
    assert len(raw) == 84 * 8
    assert isinstance(source["n"], int) and source["n"] == 4  # 8 words left, 4 windows of 5
    assert len(source["super"]) == 6
    assert all(len(h) == 16 and h == h.lower() and int(h, 16) >= 0 for h in source["super"])
    f = Fingerprint.from_source(source)
    assert np.array_equal(np.frombuffer(raw, "<u8"), f.signature)
    assert [int(h, 16) for h in source["super"]] == f.supershingles.tolist()


@pytest.mark.parametrize("params", [FingerprintParams(), FORMAT_PARAMS,
                                    FingerprintParams(num_perm=8, groups=1, rows=8)])
@pytest.mark.parametrize("text", ["", "one", "Crude oil prices rose sharply on Monday", "и в на"])
def test_round_trip_through_json(params: FingerprintParams, text: str) -> None:
    f = Fingerprinter(params).fingerprint(text)
    stored = json.loads(json.dumps(f.to_source()))
    back = Fingerprint.from_source(stored, groups=params.groups if f.shingle_count else None,
                                   num_perm=params.num_perm)
    assert back == f and back.to_source() == stored
    assert back.signature.dtype == np.uint64 and not back.signature.flags.writeable


def _with(source: dict, **changes: object) -> dict:
    broken = copy.deepcopy(source)
    for key, value in changes.items():
        if value is _DELETE:
            del broken[key]
        else:
            broken[key] = value
    return broken


_DELETE = object()


@pytest.mark.parametrize(("change", "message"), [
    (lambda s: [s], "expected an object, got list"),
    (lambda s: None, "expected an object, got NoneType"),
    (lambda s: _with(s, v=_DELETE), "missing field(s) v"),
    (lambda s: _with(s, v=1), "v = 1"),
    (lambda s: _with(s, v="2-XYZ"), "v = '2-XYZ'"),
    (lambda s: _with(s, n=-1), "n = -1"),
    (lambda s: _with(s, n=True), "n = True"),
    (lambda s: _with(s, n=1.0), "n = 1.0"),
    (lambda s: _with(s, n=2**31), "n = 2147483648"),
    (lambda s: _with(s, sig=123), "sig: must be a base64 string"),
    (lambda s: _with(s, sig="not base64!"), "sig: not valid base64"),
    (lambda s: _with(s, sig="ключ"), "sig: not valid base64"),
    (lambda s: _with(s, sig=base64.b64encode(b"1234567").decode()), "sig: 7 bytes"),
    (lambda s: _with(s, sig=""), "sig: 0 bytes"),
    (lambda s: _with(s, super="abc"), "super: must be a list"),
    (lambda s: _with(s, super=s["super"][:-1] + ["XYZ"]), "super: 'XYZ' is not"),
    (lambda s: _with(s, super=s["super"][:-1] + [s["super"][-1].upper()]), "is not a 16-digit lowercase hex"),
    (lambda s: _with(s, super=s["super"][:-1] + [1]), "super: 1 is not"),
    (lambda s: _with(s, super=s["super"][:5]), "5 supershingles do not divide 84"),
    (lambda s: _with(s, super=[s["super"][1], s["super"][0]] + s["super"][2:]), "super: does not match sig"),
    (lambda s: _with(s, n=0), "n = 0 (empty document) needs"),
    (lambda s: _with(s, super=[]), "0 supershingles do not divide"),
])
def test_malformed_sources_are_rejected(source: dict, change, message: str) -> None:
    with pytest.raises(FingerprintFormatError) as info:
        Fingerprint.from_source(change(source))
    assert message in str(info.value)
    assert str(info.value).startswith("invalid neardup fingerprint: ")
    assert isinstance(info.value, ValueError)


def test_keys_of_other_features_are_ignored(source: dict) -> None:
    """The ``neardup`` object also holds ``cluster``, ``duplicate_of``...: not part of the fingerprint."""
    plain = Fingerprint.from_source(source)
    shared = Fingerprint.from_source({**source, "cluster": "c-1", "duplicate_of": "42"})
    assert shared == plain
    assert shared.to_source() == source


def test_megashingles_are_computed_from_the_supershingles_not_stored(source: dict) -> None:
    f = Fingerprint.from_source(source)
    written = Fingerprinter(FORMAT_PARAMS).fingerprint("Crude oil prices rose sharply on Monday after the producers agreed")
    assert "megashingles" not in vars(f) and "megashingles" not in vars(written)   # not computed until used
    assert "mega" not in source and f.megashingles.shape == (15,) and not f.megashingles.flags.writeable
    assert f.megashingles.tolist() == megashingles(f.supershingles).tolist()
    assert f == written


@pytest.mark.parametrize("mega", ["as written", "stale", None, "not a list"])
def test_a_retired_mega_of_earlier_versions_is_not_read(source: dict, mega: object) -> None:
    """Documents enriched before hold ``mega``; it is ignored, whatever it holds, and never written."""
    plain = Fingerprint.from_source(source)
    stored = {"as written": [f"{int(v):016x}" for v in plain.megashingles],
              "stale": ["0" * 16] * 15}.get(mega, mega)  # type: ignore[call-overload]
    earlier = {**source, "mega": stored}
    assert RETIRED_KEYS == ("mega",)
    back = Fingerprint.from_source(earlier)
    assert back == plain and back.to_source() == source


def test_scheme_shape_checks(source: dict) -> None:
    with pytest.raises(FingerprintFormatError, match="sig: 84 minhashes, the scheme has 128"):
        Fingerprint.from_source(source, num_perm=128)
    with pytest.raises(FingerprintFormatError, match="super: 6 supershingles, the scheme has 14"):
        Fingerprint.from_source(source, groups=14)


def test_corrupted_signature_is_caught(source: dict) -> None:
    raw = bytearray(base64.b64decode(source["sig"]))
    raw[100] ^= 1
    with pytest.raises(FingerprintFormatError, match="does not match sig"):
        Fingerprint.from_source(_with(source, sig=base64.b64encode(bytes(raw)).decode()))


def test_fingerprint_value_semantics() -> None:
    fp = Fingerprinter(FORMAT_PARAMS)
    a, b = fp.fingerprint("crude oil prices rose"), fp.fingerprint("crude oil prices rose")
    assert a == b and a != fp.fingerprint("gold prices fell")
    assert "shingle_count=1" in repr(a)
    with pytest.raises(ValueError):
        a.signature[0] = 1
    with pytest.raises(TypeError):
        hash(a)
