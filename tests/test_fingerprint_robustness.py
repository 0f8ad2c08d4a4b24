"""Bad input gets a defined result or a clear error: odd strings, non-strings, huge documents."""

from __future__ import annotations

import itertools
import tracemalloc

import numpy as np
import pytest

import neardup.fingerprint.canonical as canonical
from neardup.corpora import reuters_documents, ru_news_documents
from neardup.fingerprint import Fingerprinter, FingerprintParams, estimated_containment, estimated_resemblance


@pytest.fixture(scope="module")
def fp() -> Fingerprinter:
    return Fingerprinter()


@pytest.mark.parametrize("text", [
    "", " ", "\n\t", "...!!!???", "\x00" * 100, "\x00\x01\x02\x7f\x80\x9f",
    "\ud800", "\udfff\ud800 \ud83d", "a\ud800b", "😀" * 50, "\ufeff\u200b\u00ad",
    "<", "<>", "</", "<p", "<!--", "<script>alert(1)", "<![CDATA[x]]>", "&", "&#0;", "&#xD800;", "&#99999999;",
    "\u0301\u0301", "ё" * 10, "x" * 100_000, "<p>" * 10_000, "a" * 5000 + "<b>" + "b" * 5000,
    bytes(range(256)).decode("latin-1"), "\ud7ff\ue000\uffff\U0010ffff",
])
def test_any_string_gets_a_fingerprint(fp: Fingerprinter, text: str) -> None:
    f = fp.fingerprint(text)
    assert f.signature.shape == (84,) and f.version == fp.version
    assert f.shingle_count >= 0
    assert isinstance(fp.canonical_tokens(text), list)
    if f.shingle_count:
        g = fp.params.groups
        assert f.supershingles.shape == (g,) and f.megashingles.shape == (g * (g - 1) // 2,)


@pytest.mark.parametrize("language", ["ru", "en", "none", "auto"])
def test_only_stop_words_give_the_empty_fingerprint(fp: Fingerprinter, language: str) -> None:
    text = "и в на не что он the of and to a is" if language != "none" else ""
    assert fp.fingerprint(text, language=language).is_empty


def test_non_text_input_is_a_clear_type_error(fp: Fingerprinter) -> None:
    for value in (b"bytes", None, 42, ["list"]):
        with pytest.raises(TypeError, match="text must be a str"):
            fp.fingerprint(value)  # type: ignore[arg-type]
    assert fp.fingerprint_fields([None, 42, "Crude oil", b"x", "prices rose"]) == fp.fingerprint("Crude oil\nprices rose")
    assert fp.fingerprint_fields([]).is_empty


def test_fields_are_joined_in_order(fp: Fingerprinter) -> None:
    title, body = "Oil prices climb", "Crude oil prices rose sharply on Monday in heavy trading"
    assert fp.fingerprint_fields([title, body]) == fp.fingerprint(title + "\n" + body)
    assert fp.fingerprint_fields([title, body]) != fp.fingerprint_fields([body, title])


def test_invalid_language_argument(fp: Fingerprinter) -> None:
    with pytest.raises(ValueError, match="language = 'de'"):
        fp.fingerprint("text", language="de")


@pytest.mark.parametrize("kind", ["plain", "html", "russian", "no-whitespace"])
def test_long_texts_cut_into_pieces_give_the_same_fingerprint(monkeypatch: pytest.MonkeyPatch, kind: str) -> None:
    """Pieces (used above 1 Mi characters) are exercised here with a tiny piece size."""
    stories = [d["body"] for d in itertools.islice(reuters_documents(with_body_only=True), 60)]
    if kind == "plain":
        text = "\n".join(stories)
    elif kind == "html":
        text = "<html><body>" + "".join(
            f"<p class=\"x\">{s.replace('&', '&amp;')}</p><script>var s = '<p>zzscript words</p>';</script>"
            "<!-- zzcomment with <b>tags</b> --><style>p { color: zzstyle }</style>" for s in stories) + "</body></html>"
    elif kind == "russian":
        text = "\n".join(d["body"] for d in itertools.islice(ru_news_documents(), 15))
    else:
        text = "-".join(" ".join(stories[:20]).split())
    whole = Fingerprinter()
    expected, expected_tokens = whole.fingerprint(text), whole.canonical_tokens(text)
    monkeypatch.setattr(canonical, "PIECE_CHARS", 3000)
    monkeypatch.setattr(canonical, "DETECT_CHARS", 1000)
    cut = Fingerprinter()
    assert len(list(canonical.plain_pieces(text))) > 5
    if kind != "no-whitespace":  # without any whitespace a cut can split a token: documented
        assert cut.canonical_tokens(text) == expected_tokens
        assert cut.fingerprint(text) == expected
    else:
        assert estimated_resemblance(cut.fingerprint(text), expected) > 0.9
    assert not {"zzscript", "zzcomment", "zzstyle"} & set(expected_tokens)


def test_batch_of_texts_with_some_cut_into_pieces(monkeypatch: pytest.MonkeyPatch) -> None:
    stories = [d["body"] for d in itertools.islice(reuters_documents(with_body_only=True), 40)]
    texts = stories[:10] + ["\n".join(stories[10:30])] + stories[30:] + ["<p>" + "\n".join(stories) + "</p>"]
    monkeypatch.setattr(canonical, "PIECE_CHARS", 3000)
    fp = Fingerprinter()
    assert fp.fingerprint_many(texts) == [fp.fingerprint(t) for t in texts]


def test_fifty_megabyte_document_with_bounded_memory(fp: Fingerprinter) -> None:
    """50 MB of text (real stories, HTML-wrapped, repeated with variations): the traced peak
    stays far below what holding its tokens as strings would take (~10 × the text)."""
    stories = [d["body"] for d in itertools.islice(reuters_documents(with_body_only=True), 400)]
    block = "".join(f"<p>{s}</p>\n" for s in stories)
    copies = 50_000_000 // len(block) + 1
    text = "".join(block.replace("said", f"said{k % 7}" if k % 7 else "said") for k in range(copies))[:50_000_000]
    assert len(text) == 50_000_000
    small = fp.fingerprint(block)
    tracemalloc.start()
    try:
        big = fp.fingerprint(text)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert big.shingle_count >= small.shingle_count
    assert estimated_containment(small, big) > 0.9  # the same stories, repeated
    print(f"peak traced memory {peak / 1e6:.1f} MB")
    assert peak < 60_000_000, peak  # the text itself is 50 MB and not counted (allocated before)


def test_random_bytes_decoded_any_way_never_raise(fp: Fingerprinter) -> None:
    rng = np.random.default_rng(0)
    for _ in range(40):
        raw = rng.integers(0, 256, int(rng.integers(0, 3000)), dtype=np.uint8).tobytes()
        for text in (raw.decode("latin-1"), raw.decode("utf-8", "replace"), raw.decode("utf-8", "surrogateescape"),
                     raw.decode("utf-16-le", "surrogatepass") if len(raw) % 2 == 0 else ""):
            fp.fingerprint(text)
            fp.fingerprint("<p>" + text + "</p>")


def test_params_from_every_switch_combination_work() -> None:
    text = "<p>Министры иностранных дел провели переговоры</p> and the talks went well"
    for html, drop, lemma in itertools.product([True, False], repeat=3):
        params = FingerprintParams(strip_html=html, drop_stopwords=drop, lemmatize=lemma)
        f = Fingerprinter(params).fingerprint(text)
        assert f.shingle_count > 0 and f.version == Fingerprinter(params).version
