"""Canonical text: from a raw string to the word tokens that shingles are made of.

The steps, in this order (each switchable in :class:`~fingerprint.params.FingerprintParams`
where noted), are part of the scheme and pinned by the golden test:

1. **HTML** (``strip_html``). If the text contains something that looks like markup
   (``<`` followed by a letter, ``/``, ``!`` or ``?``), it is parsed with selectolax (lexbor);
   ``<script>`` and ``<style>`` elements are dropped and the text nodes are joined with a
   space (so ``a<b>c</b>`` gives "a c"; block boundaries never glue words). Entities are
   decoded by the parser. Text without markup only has its entities decoded
   (:func:`html.unescape`). With ``strip_html`` off, the text is taken literally.
2. **Unicode**: NFKC, then :meth:`str.casefold`, then ``ё`` → ``е``. Combining grave and acute
   accents (Russian stress marks), soft hyphens and zero-width characters are removed, so
   "моло\u0301ко" and "моло\u00adко" are "молоко".
3. **Tokens**: maximal runs of Unicode letters and digits (``[^\\W_]+``): Cyrillic, Latin,
   digits and any other script. Everything else (punctuation, ``_``, hyphens, apostrophes,
   NUL, lone surrogates) separates tokens: "кто-то" → "кто", "то"; "don't" → "don", "t".
4. **Language** (``language``): ``auto`` decides per document from the first
   :data:`DETECT_TOKENS` tokens: ``ru`` if they hold at least as many Cyrillic letters as
   Latin ones (and at least one), ``en`` if more Latin letters, else ``none``. The caller can
   override it per document.
5. **Words** (``drop_stopwords``, ``lemmatize``), by language:

   * ``ru``: a token containing Cyrillic is parsed with pymorphy3 (first, most probable
     parse). It is dropped if its part of speech is a function word (:data:`RU_DROP_POS`:
     prepositions, conjunctions, particles, interjections, pronouns-nouns) or it is a
     pronoun-like adjective (grammeme ``Apro``: этот, свой, весь, который), or if the token
     or its lemma is in the Russian stop list. Otherwise it becomes its lemma (normal
     form, ``ё`` → ``е``). Tokens without Cyrillic (Latin words, numbers) are kept as they are
     unless they are in the stop list.
   * ``en``: a token in the English stop list is dropped; the rest are stemmed with the
     Snowball English stemmer (PyStemmer).
   * ``none``: tokens are kept as they are.

   With ``lemmatize`` off, words are not lemmatised / stemmed; with ``drop_stopwords`` off,
   nothing is dropped (neither by list nor by part of speech).

The word-level step (5) is a pure function of (language, token); :class:`WordNormaliser`
caches it per process in a bounded dict, because word frequencies are Zipfian: after the
first few thousand documents almost every token is a cache hit.
"""

from __future__ import annotations

import html
import re
import threading
import unicodedata
from typing import Callable, Iterable, Literal

import numpy as np

from fingerprint import stopwords
from fingerprint.params import FingerprintParams

Lang = Literal["ru", "en", "none"]

#: Tokens looked at by automatic language detection (a prefix, so a huge document does
#: not need two passes and the decision does not depend on how it is chunked).
DETECT_TOKENS = 4096

#: pymorphy3 parts of speech that are function words.
RU_DROP_POS = frozenset({"PREP", "CONJ", "PRCL", "INTJ", "NPRO"})
#: pymorphy3 grammemes that mark pronoun-like words under another part of speech.
RU_DROP_GRAMMEMES = frozenset({"Apro"})

_MARKUP = re.compile(r"<[A-Za-z/!?]")
_TOKEN = re.compile(r"[^\W_]+")
# Removed after NFKC: combining grave/acute (stress marks), soft hyphen, zero-width
# space/joiners, word joiner, BOM.
_INVISIBLE = re.compile("[\u0300\u0301\u00ad\u200b\u200c\u200d\u2060\ufeff]")
_INVISIBLE_CHARS = "\u0300\u0301\u00ad\u200b\u200c\u200d\u2060\ufeff"
_SURROGATE = re.compile("[\ud800-\udfff]")


def strip_markup(text: str) -> str:
    """Visible text of an HTML document or fragment (step 1 of the module docstring)."""
    if not _MARKUP.search(text):
        return html.unescape(text) if "&" in text else text
    from selectolax.lexbor import LexborHTMLParser

    # lexbor works on UTF-8: lone surrogates cannot be encoded, and are not text anyway.
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = _SURROGATE.sub(" ", text)
    tree = LexborHTMLParser(text)
    tree.strip_tags(["script", "style"])
    root = tree.root
    return root.text(separator=" ") if root is not None else ""


def normalise(text: str) -> str:
    """NFKC, casefold, ё→е, invisible characters removed (step 2)."""
    text = unicodedata.normalize("NFKC", text).casefold().replace("ё", "е")
    if any(ch in text for ch in _INVISIBLE_CHARS):
        text = _INVISIBLE.sub("", text)
    return text


def tokenise(text: str) -> list[str]:
    """Maximal runs of Unicode letters and digits (step 3). ``text`` is already normalised."""
    return _TOKEN.findall(text)


def detect_language(tokens: list[str]) -> Lang:
    """``ru``/``en``/``none`` from the letters of the first :data:`DETECT_TOKENS` tokens.

    Counts Cyrillic letters (U+0400–U+04FF) and Latin letters (a–z after casefolding, plus
    U+00C0–U+024F). ``ru`` if Cyrillic ≥ Latin and Cyrillic > 0; ``en`` if Latin > Cyrillic;
    ``none`` if neither occurs (digits only, other scripts).
    """
    if not tokens:
        return "none"
    sample = "".join(tokens[:DETECT_TOKENS]).encode("utf-16-le", "surrogatepass")
    codes = np.frombuffer(sample, dtype=np.uint16)
    cyrillic = int(np.count_nonzero((codes >= 0x0400) & (codes <= 0x04FF)))
    latin = int(np.count_nonzero(((codes >= 0x61) & (codes <= 0x7A)) | ((codes >= 0xC0) & (codes <= 0x24F))))
    if cyrillic and cyrillic >= latin:
        return "ru"
    if latin:
        return "en"
    return "none"


_CYRILLIC = re.compile("[\u0400-\u04ff]")

_morph = None
_morph_lock = threading.Lock()


def morph_analyzer():  # -> pymorphy3.MorphAnalyzer
    """The process-wide pymorphy3 analyser, created on first use (loading takes ~0.2 s)."""
    global _morph
    if _morph is None:
        with _morph_lock:
            if _morph is None:
                import pymorphy3

                _morph = pymorphy3.MorphAnalyzer()
    return _morph


def _english_stemmer() -> Callable[[list[str]], list[str]]:
    import Stemmer

    return Stemmer.Stemmer("english").stemWords


class WordNormaliser:
    """Step 5 of the module docstring for one language: token → canonical word or ``None``.

    ``normalise_words(tokens)`` maps a list of tokens, consulting a cache first; the cache is
    bounded by ``cache_size`` entries (when full it is cleared and refills with the words in
    use, which keeps memory bounded and costs little because frequent words come back
    first).
    """

    def __init__(self, language: Lang, params: FingerprintParams, cache_size: int = 300_000) -> None:
        self.language = language
        self.drop = params.drop_stopwords
        self.lemmatize = params.lemmatize
        self.cache_size = cache_size
        self.cache: dict[str, str | None] = {}
        self._stem: Callable[[list[str]], list[str]] | None = None
        self.stoplist = {"ru": stopwords.RUSSIAN, "en": stopwords.ENGLISH}.get(language, frozenset())

    @property
    def trivial(self) -> bool:
        """True when every token maps to itself (no list, no morphology)."""
        return self.language == "none" or not (self.drop or self.lemmatize)

    def normalise_words(self, tokens: list[str]) -> list[str | None]:
        """Canonical word for each token (``None`` = dropped), same length as ``tokens``."""
        if self.trivial:
            return list(tokens)
        cache = self.cache
        missing = [w for w in set(tokens) if w not in cache]
        if missing:
            self.learn(missing)
        return [cache[w] for w in tokens]

    def learn(self, words: Iterable[str]) -> None:
        """Compute and cache the canonical form of words not seen before."""
        words = list(words)
        if len(self.cache) + len(words) > self.cache_size:
            self.cache.clear()
        self.cache.update(zip(words, self.compute(words)))

    def compute(self, words: list[str]) -> list[str | None]:
        """The uncached word step (pure function of language, params and word)."""
        if self.trivial:
            return list(words)
        if self.language == "en":
            return self._english(words)
        return [self._russian(w) for w in words]

    def _english(self, words: list[str]) -> list[str | None]:
        keep = [w for w in words if not (self.drop and w in self.stoplist)]
        if self.lemmatize:
            if self._stem is None:
                self._stem = _english_stemmer()
            stems = dict(zip(keep, self._stem(keep)))
        else:
            stems = {w: w for w in keep}
        return [stems.get(w) for w in words]

    def _russian(self, word: str) -> str | None:
        stop = self.drop
        if stop and word in self.stoplist:
            return None
        if not _CYRILLIC.search(word):
            return word
        if not (self.lemmatize or stop):
            return word
        parse = morph_analyzer().parse(word)[0]
        if stop:
            tag = parse.tag
            if tag.POS in RU_DROP_POS or any(g in tag for g in RU_DROP_GRAMMEMES):
                return None
        if not self.lemmatize:
            return word
        lemma = parse.normal_form.replace("ё", "е")
        if stop and lemma in self.stoplist:
            return None
        return lemma
