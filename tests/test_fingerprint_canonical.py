"""Canonical text: HTML, Unicode, tokens, language detection, stop-words, Russian lemmas, English stems."""

from __future__ import annotations

import itertools
import re
import sys
import unicodedata

import numpy as np
import pytest

from neardup.corpora import ru_news_documents
from neardup.fingerprint import Fingerprinter, FingerprintParams, estimated_resemblance, exact_resemblance
from neardup.fingerprint.canonical import canonical_codes, detect_language, split_codes, strip_markup, token_spans, tokenise


@pytest.fixture(scope="module")
def fp() -> Fingerprinter:
    return Fingerprinter()


def test_html_is_stripped_with_scripts_styles_and_entities(fp: Fingerprinter) -> None:
    html = ("<html><head><title>Oil</title><style>p {color: red}</style></head><body>"
            "<p>Crude&nbsp;prices <b>rose</b></p><script>var secret = 1;</script>"
            "<div>sharply &amp; quickly</div><!-- hidden comment --></body></html>")
    assert strip_markup(html).split() == ["Oil", "Crude", "prices", "rose", "sharply", "&", "quickly"]
    assert fp.canonical_tokens(html, language="none") == ["oil", "crude", "prices", "rose", "sharply", "quickly"]


def test_text_without_markup_only_has_entities_decoded() -> None:
    assert strip_markup("a < b &amp; c") == "a < b & c"
    assert strip_markup("plain") == "plain"


def test_html_switch_off_keeps_tags_as_words() -> None:
    fp = Fingerprinter(FingerprintParams(strip_html=False, language="none"))
    assert fp.canonical_tokens("<b>bold</b>") == ["b", "bold", "b"]


def test_unicode_normalisation_casefold_yo_and_invisible_characters(fp: Fingerprinter) -> None:
    assert tokenise("Ёлка ЁЖ") == ["елка", "еж"]
    assert tokenise("Straße ﬁsh 𝐀𝐁𝐂 Ⅻ") == ["strasse", "fish", "abc", "xii"]
    assert tokenise("моло\u0301ко по\u00adезд zero\u200bwidth") == ["молоко", "поезд", "zerowidth"]
    assert tokenise("\uff21\uff22\uff23") == ["abc"]  # full-width letters


def test_tokens_are_runs_of_letters_and_digits() -> None:
    assert tokenise("кто-то don't e-mail x_y 3.14 №5 COVID-19") == [
        "кто", "то", "don", "t", "e", "mail", "x", "y", "3", "14", "no5", "covid", "19"]
    assert tokenise("汉字 and ελληνικά") == ["汉字", "and", "ελληνικά"]
    assert tokenise("a\x00b\ud800c\udfffd") == ["a", "b", "c", "d"]
    assert tokenise("") == [] and tokenise(" \n\t.,;") == []


def test_tokeniser_matches_python_word_characters_on_every_code_point() -> None:
    """The NumPy character table is exactly ``[^\\W_]+`` of Python's re, surrogates included."""
    everything = "".join(map(chr, range(0x110000)))
    reference = re.findall(r"[^\W_]+", unicodedata.normalize("NFKC", everything).casefold()
                           .replace("ё", "е"))
    ours = split_codes(canonical_codes(everything))
    # the only differences are characters we delete on purpose (stress marks etc. join words)
    assert "".join(ours) == "".join(reference).replace("\u0300", "").replace("\u0301", "")


def test_token_spans_agree_with_split() -> None:
    codes = canonical_codes("  Hello, wörld!  x ")
    starts, ends = token_spans(codes)
    text = codes.tobytes().decode("utf-32-le")
    assert [text[s:e] for s, e in zip(starts, ends)] == split_codes(codes) == ["hello", "wörld", "x"]


@pytest.mark.parametrize(("text", "language"), [
    ("Президент России провёл встречу", "ru"),
    ("The president held a meeting", "en"),
    ("Apple выпустила новый iPhone", "ru"),
    ("Moscow (Москва) is the capital of Russia", "en"),
    ("12345 678", "none"),
    ("", "none"),
    ("汉字汉字", "none"),
])
def test_language_detection(fp: Fingerprinter, text: str, language: str) -> None:
    assert detect_language(canonical_codes(text)) == language
    assert fp.detect_language(text) == language


def test_language_override(fp: Fingerprinter) -> None:
    text = "The companies were running"
    assert fp.canonical_tokens(text) == ["compani", "run"]
    assert fp.canonical_tokens(text, language="none") == ["the", "companies", "were", "running"]
    assert fp.canonical_tokens(text, language="ru") == ["companies", "running"]  # Latin: not stemmed
    with pytest.raises(ValueError, match="language = 'fr'"):
        fp.canonical_tokens(text, language="fr")


def test_english_stop_words_and_stems(fp: Fingerprinter) -> None:
    assert fp.canonical_tokens("They don't think the markets are falling, said analysts.") == [
        "think", "market", "fall", "said", "analyst"]


def test_russian_function_words_dropped_by_part_of_speech(fp: Fingerprinter) -> None:
    tokens = fp.canonical_tokens("Он сказал, что в этом году они, конечно, не будут строить свой завод ах")
    assert tokens == ["сказать", "год", "строить", "завод"]


@pytest.mark.parametrize("forms", [
    ["кошка", "кошки", "кошке", "кошку", "кошкой", "кошками", "кошках"],
    ["красивый", "красивая", "красивого", "красивыми", "красивую"],
    ["бежать", "бежит", "бежал", "бежала", "бегут"],
    ["министр", "министра", "министров", "министрам"],
    ["ёлка", "елке", "ёлкой", "ЁЛКИ"],
])
def test_russian_inflections_give_one_lemma(fp: Fingerprinter, forms: list[str]) -> None:
    lemmas = {tuple(fp.canonical_tokens(form)) for form in forms}
    assert len(lemmas) == 1, lemmas


def test_switches_turn_steps_off() -> None:
    text = "Министры провели встречи в Москве"
    assert Fingerprinter(FingerprintParams(lemmatize=False)).canonical_tokens(text) == [
        "министры", "провели", "встречи", "москве"]
    assert Fingerprinter(FingerprintParams(drop_stopwords=False)).canonical_tokens(text) == [
        "министр", "провести", "встреча", "в", "москва"]
    assert Fingerprinter(FingerprintParams(drop_stopwords=False, lemmatize=False)).canonical_tokens(text) == [
        "министры", "провели", "встречи", "в", "москве"]


def test_word_cache_is_bounded_and_does_not_change_results() -> None:
    texts = [d["body"] for d in itertools.islice(ru_news_documents(), 12)]
    small = Fingerprinter(cache_size=500)
    large = Fingerprinter()
    for text in texts:
        assert small.fingerprint(text) == large.fingerprint(text)
        assert small.canonical_tokens(text) == large.canonical_tokens(text)
        assert len(small.word_cache("ru")) <= 500
        assert len(small.normaliser("ru").cache) <= 500


_NAMES = {"Name", "Surn", "Patr", "Geox", "Orgn", "Trad", "Abbr"}


def _reinflect(text: str) -> str:
    """Every dictionary noun and adjective (not a name) put into another case, every verb into
    another number: the same words in other forms."""
    from neardup.fingerprint.canonical import morph_analyzer

    morph = morph_analyzer()
    out = []
    for word in text.split():
        core = word.strip(".,:;!?«»\"()")
        changed = None
        if re.fullmatch(r"[а-яё]+", core or "-") and morph.word_is_known(core):
            parse = morph.parse(core)[0]
            if not _NAMES & set(parse.tag.grammemes):
                if parse.tag.POS in {"NOUN", "ADJF"}:
                    changed = parse.inflect({"datv"}) or parse.inflect({"gent"})
                elif parse.tag.POS == "VERB":
                    changed = parse.inflect({"plur"}) or parse.inflect({"sing"})
        out.append(word.replace(core, changed.word) if changed else word)
    return " ".join(out)


def test_russian_texts_differing_only_in_word_forms_are_near_duplicates(fp: Fingerprinter) -> None:
    raw = Fingerprinter(FingerprintParams(lemmatize=False))
    articles = [d["body"] for d in itertools.islice(ru_news_documents(), 200) if len(d["body"]) > 1500][:12]
    assert len(articles) == 12
    for article in articles:
        article = article[:3000]
        other = _reinflect(article)
        assert other != article
        a, b = fp.fingerprint(article), fp.fingerprint(other)
        exact = exact_resemblance(fp.shingles(fp.canonical_tokens(article)), fp.shingles(fp.canonical_tokens(other)))
        without_lemmas = estimated_resemblance(raw.fingerprint(article), raw.fingerprint(other))
        assert exact >= 0.8, exact
        assert estimated_resemblance(a, b) >= 0.7
        assert without_lemmas < 0.3  # the forms really differ: only lemmas make them near-duplicates


def test_canonicalisation_pins_python_unicode_version() -> None:
    """Tokenising and NFKC come from unicodedata: a new Unicode version can move fingerprints
    (the golden test would then fail); this records the version they were made with."""
    assert sys.version_info[:2] == (3, 11) and unicodedata.unidata_version == "14.0.0"


def test_fingerprint_path_equals_canonical_token_path(fp: Fingerprinter) -> None:
    """fingerprint(text) (word ids, no strings) == fingerprint_tokens(canonical_tokens(text))."""
    texts = [d["title"] + "\n" + d["body"] for d in itertools.islice(ru_news_documents(), 25)]
    texts += ["", "и", "one two", "<p>x</p>", "a\x00b\ud800c", "Ёж ёж ЁЖ", "汉字 ok"]
    other = Fingerprinter()
    for text in texts:
        assert fp.fingerprint(text) == other.fingerprint_tokens(other.canonical_tokens(text))
    assert np.array_equal(other.shingles(["a", "b"]), other.shingles(["a", "b"]))


def test_fast_canonical_codes_equal_nfkc_casefold_of_the_whole_text() -> None:
    """canonical_codes (table lookups; NFKC only on words holding unstable characters) ==
    NFKC + casefold of the whole text, on real text, random mixtures of tricky characters
    and every BMP character next to combining marks and Hangul jamo."""
    from neardup.fingerprint.canonical import canonical_codes_reference

    texts = [d["body"] for d in itertools.islice(ru_news_documents(), 100)]
    rng = np.random.default_rng(9)
    tricky = list("abcАБВёЁе ßﬁ…№\u00a0\u0301\u0308\u00ad\u200b\t\n한\u1161\u11a8가각𝐀😀ΣσςİI\u0345\u0399K\u212a"
                  "\u2126\uff21Å\u212b\u0b47\u0b3e\u0dd9\u0dcf\u1100\u3000\u2028\x85\x00\ud800\u0f71\u0f73"
                  "\u0627\u0653\u05d0\u05b7\u0915\u093c\u3099\u304b\u309a")
    texts += ["".join(rng.choice(tricky, int(rng.integers(0, 40)))) for _ in range(2000)]
    characters = [chr(c) for c in range(0x10000) if not 0xD800 <= c <= 0xDFFF]
    texts += [" ".join(context.format(c) for c in characters[k:k + 60])  # few unstable words each
              for context in ("a{}\u00a0", "{}\u0301", "가{}\u1161", "e{}\u0308")
              for k in range(0, len(characters), 60)]
    for text in texts:
        assert np.array_equal(canonical_codes(text), canonical_codes_reference(text)), repr(text[:80])
