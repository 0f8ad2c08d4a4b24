"""Canonical text: from a raw string to the word tokens that shingles are made of.

The steps, in this order (each switchable in :class:`~neardup.fingerprint.params.FingerprintParams`
where noted), are part of the scheme and pinned by the golden test:

1. **HTML** (``strip_html``). If the text contains markup — a closing tag (``</x>``), a
   comment, a doctype, or a start tag of a common HTML element (:data:`HTML_ELEMENTS`,
   lowercase, with ``=``-attributes or none: ``<p>``, ``<br/>``, ``<a href="…">``) — it is
   parsed with selectolax (lexbor); ``<script>`` and ``<style>`` elements are dropped and the
   text nodes are joined with a space (so ``a<b>c</b>`` gives "a c"; block boundaries never
   glue words). Entities are decoded by the parser. Text without markup only has its
   entities decoded (:func:`html.unescape`): angle brackets that are not HTML, like the
   Reuters ticker notes ``<Rollins Inc>`` or ``<I>``, stay text. With ``strip_html`` off,
   the text is taken literally. Long texts are cut into pieces first (:func:`plain_pieces`).
2. **Unicode**: NFKC, then :meth:`str.casefold`, then ``ё`` → ``е``. Combining grave and acute
   accents (Russian stress marks), soft hyphens and zero-width characters are removed, so
   "моло\u0301ко" and "моло\u00adко" are "молоко".
3. **Tokens**: maximal runs of Unicode letters and digits (:meth:`str.isalnum`, the same
   characters as ``[^\\W_]`` in Python's ``re``): Cyrillic, Latin, digits and any other
   script. Everything else (punctuation, ``_``, hyphens, apostrophes, NUL, lone surrogates)
   separates tokens: "кто-то" → "кто", "то"; "don't" → "don", "t". Steps 2 and 3 run on a
   NumPy array of code points (one table lookup per character, see :func:`canonical_codes`;
   only words holding a character that NFKC or casefolding could change go through
   :mod:`unicodedata` as strings), not a regex. Character classes and NFKC come from
   Python's Unicode database (``unicodedata``), pinned by the Python version; the golden
   test catches a change.
4. **Language** (``language``): ``auto`` decides per document from the first
   :data:`DETECT_CHARS` characters of the canonical text (of the first piece, for texts
   long enough to be cut): ``ru`` if they hold at least as many Cyrillic letters as Latin
   ones (and at least one), ``en`` if more Latin letters, else ``none``. The caller can
   override it per document.
5. **Words** (``drop_stopwords``, ``lemmatize``), by language:

   * ``ru``: a token containing Cyrillic is parsed with pymorphy3 (first, most probable
     parse). It is dropped if its part of speech is a function word (:data:`RU_DROP_POS`:
     prepositions, conjunctions, particles, interjections, pronouns-nouns) or it is a
     pronoun-like adjective (grammeme ``Apro``: этот, свой, весь, который), or if the token
     or its lemma is in a stop list. Otherwise it becomes its lemma (normal form,
     ``ё`` → ``е``). Tokens without Cyrillic (Latin words, numbers) are kept as they are
     unless they are in a stop list.
   * ``en``: a token in a stop list is dropped; the rest are stemmed with the Snowball
     English stemmer (PyStemmer), which leaves non-Latin words as they are.
   * ``none``: tokens are kept as they are.

   The stop lists of both languages apply in ``ru`` and ``en``
   (:mod:`neardup.fingerprint.stopwords`; they cannot collide, and quoted English in Russian
   text loses its function words too).

   With ``lemmatize`` off, words are not lemmatised / stemmed; with ``drop_stopwords`` off,
   nothing is dropped (neither by list nor by part of speech).

The word-level step (5) is a pure function of (language, token); it is cached per process
in bounded caches (:class:`WordNormaliser` for strings, :mod:`neardup.fingerprint.wordcache` for the
fingerprint path), because word frequencies are Zipfian: once the frequent words are in,
almost every token is a cache hit.
"""

from __future__ import annotations

import html
import itertools
import re
import threading
import unicodedata
from collections.abc import Callable, Iterator
from functools import lru_cache
from typing import Literal

import numpy as np

from neardup.fingerprint import stopwords
from neardup.fingerprint.params import FingerprintParams

Lang = Literal["ru", "en", "none"]

#: Canonical characters looked at by automatic language detection (a prefix, so a huge
#: document does not need two passes and the decision does not depend on how it is cut).
DETECT_CHARS = 1 << 16

#: pymorphy3 parts of speech that are function words.
RU_DROP_POS = frozenset({"PREP", "CONJ", "PRCL", "INTJ", "NPRO"})
#: pymorphy3 grammemes that mark pronoun-like words under another part of speech.
RU_DROP_GRAMMEMES = frozenset({"Apro"})

#: Lowercase names of common HTML elements (a start tag of one of them marks markup).
HTML_ELEMENTS = ("html|head|body|p|div|span|br|hr|a|b|i|u|s|em|strong|small|big|sub|sup|table|thead|tbody|tr|"
                 "td|th|ul|ol|li|dl|dt|dd|h[1-6]|img|script|style|meta|link|title|pre|code|blockquote|font|"
                 "center|section|article|header|footer|nav|main|aside|figure|figcaption|iframe|form|input|"
                 "button|label|select|option|textarea|noscript|svg|wbr|q|cite|abbr|time|mark")
_MARKUP = re.compile(rf"</[A-Za-z][A-Za-z0-9]*\s*>|<!--|<!doctype|<!DOCTYPE|<\?xml"
                     rf"|<(?:{HTML_ELEMENTS})(?:\s[^<>]*=[^<>]*)?\s*/?>")
_WHITESPACE = re.compile(r"\s(?=\S*\Z)")  # the last whitespace character of the window
_TAG_START = re.compile(r"<(?=[^<]*\Z)")  # the last "<" of the window
_HIDDEN = re.compile(r"<(script|style)\b[^>]*>(?:.*?</\1\s*>|.*\Z)|<!--(?:.*?-->|.*\Z)", re.S | re.I)

#: Texts longer than this many characters are canonicalised piece by piece (bounded memory).
PIECE_CHARS = 1 << 20
_SURROGATE = re.compile("[\ud800-\udfff]")
_CYRILLIC = re.compile("[\u0400-\u04ff]")

#: Removed after casefolding (not separators): combining grave and acute accents (Russian
#: stress marks), soft hyphen, zero-width space / non-joiner / joiner, word joiner, BOM.
INVISIBLE = "\u0300\u0301\u00ad\u200b\u200c\u200d\u2060\ufeff"
_SPACE = 0x20
_DELETE = 0


def strip_markup(text: str) -> str:
    """Visible text of an HTML document or fragment (step 1 of the module docstring)."""
    if not _MARKUP.search(text):
        return html.unescape(text) if "&" in text else text
    return _html_text(text)


def _html_text(text: str) -> str:
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


def _cut(text: str, limit: int, *boundaries: re.Pattern[str]) -> Iterator[str]:
    """Pieces of at most ``limit`` characters. Each ends just before the last match, in the
    final 64 Ki characters of its window, of the first of ``boundaries`` that matches there
    (or at the limit if none does)."""
    start = 0
    while len(text) - start > limit:
        end = start + limit
        cut = end
        for boundary in boundaries:
            match = boundary.search(text, max(start + 1, end - 65536), end)
            if match:
                cut = match.start()
                break
        yield text[start:cut]
        start = cut
    yield text[start:]


def plain_pieces(text: str, strip_html: bool = True) -> Iterator[str]:
    """Steps 1 and the cutting of long texts: plain text in pieces of at most
    :data:`PIECE_CHARS` characters whose concatenated tokens are the tokens of the whole.

    * Text without markup (or with ``strip_html`` off) is cut at whitespace (the last
      whitespace character starts the next piece). NFKC, casefolding, entity decoding and
      tokens never reach across whitespace, so the pieces give the same tokens as the whole.
    * Markup longer than :data:`PIECE_CHARS` first loses its ``<script>``/``<style>`` elements
      and comments (by regular expression, an unclosed one up to the end of the text), then
      is cut just before a tag (``<``) and each piece is parsed on its own: a tag boundary is a
      token boundary in the parsed text as well, so nothing is glued or split. A window
      without any ``<`` lies inside one text node and is cut at whitespace instead. (Shorter
      markup is parsed whole, with script and style dropped by the parser.)

    A window of 64 Ki characters without a boundary is cut where it is: the only case where
    a token can be split.
    """
    if not strip_html:
        yield from _cut(text, PIECE_CHARS, _WHITESPACE)
    elif not _MARKUP.search(text):
        for piece in _cut(text, PIECE_CHARS, _WHITESPACE):
            yield html.unescape(piece) if "&" in piece else piece
    elif len(text) <= PIECE_CHARS:
        yield _html_text(text)
    else:
        for piece in _cut(_HIDDEN.sub(" ", text), PIECE_CHARS, _TAG_START, _WHITESPACE):
            yield _html_text(piece)


@lru_cache(maxsize=1)
def _bmp_map() -> np.ndarray:
    """Code point → canonical code point for the Basic Multilingual Plane.

    Letters and digits (``str.isalnum``, exactly the ``[^\\W_]`` of Python's ``re``) map to
    themselves, except ``ё`` → ``е``; :data:`INVISIBLE` characters map to 0 (deleted); every
    other code point maps to a space. Built once per process.
    """
    table = np.array([c if chr(c).isalnum() else _SPACE for c in range(0x10000)], dtype=np.uint32)
    table[ord("ё")] = ord("е")
    for ch in INVISIBLE:
        table[ord(ch)] = _DELETE
    table.setflags(write=False)
    return table


def _map_folded(folded: str) -> np.ndarray:
    """:func:`_bmp_map` (and its rule for astral code points) applied to already NFKC-casefolded
    text, with deleted characters removed."""
    codes = np.frombuffer(folded.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    mapped = _bmp_map()[np.minimum(codes, 0xFFFF)]  # U+FFFF is a non-character: a space
    astral = np.flatnonzero(codes > 0xFFFF)
    if astral.size:
        mapped[astral] = [c if chr(c).isalnum() else _SPACE for c in codes[astral].tolist()]
    if np.count_nonzero(mapped == _DELETE):
        mapped = mapped[mapped != _DELETE]
    return mapped


def canonical_codes_reference(text: str) -> np.ndarray:
    """Steps 2 and 3 by definition: NFKC and casefold of the whole text, then the table."""
    return _map_folded(unicodedata.normalize("NFKC", text).casefold())


@lru_cache(maxsize=1)
def _fast_tables() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(stable, fold, space) tables over the Basic Multilingual Plane.

    A code point is *stable* when NFKC leaves it alone wherever it stands and casefolding maps
    it to one code point: NFKC(c) = c, canonical combining class 0, not the second element of
    any canonical composition (so it never merges with what precedes it), casefold(c) one
    character, and not one of :data:`INVISIBLE`. ``fold[c]`` is then the final canonical code
    (``_bmp_map[casefold(c)]``). ``space`` marks whitespace. Built once per process.
    """
    # Hangul composes algorithmically (not in the decomposition data): L+V → LV, LV+T → LVT.
    second = set(range(0x1161, 0x1176)) | set(range(0x11A8, 0x11C3))
    for c in range(0x20000):  # canonical pairs exist only in planes 0 and 1
        parts = unicodedata.decomposition(chr(c)).split()
        if len(parts) == 2 and not parts[0].startswith("<"):
            second.add(int(parts[1], 16))
    table = _bmp_map()
    stable = np.zeros(0x10000, dtype=bool)
    fold = np.full(0x10000, _SPACE, dtype=np.uint32)
    for c in range(0x10000):
        ch = chr(c)
        if 0xD800 <= c <= 0xDFFF or c in second or ch in INVISIBLE or unicodedata.combining(ch):
            continue
        if unicodedata.normalize("NFKC", ch) != ch:
            continue
        folded = ch.casefold()
        if len(folded) == 1:
            stable[c] = True
            fold[c] = table[ord(folded)]
    space = np.array([chr(c).isspace() for c in range(0x10000)], dtype=bool)
    for array in (stable, fold, space):
        array.setflags(write=False)
    return stable, fold, space


def canonical_codes(text: str) -> np.ndarray:
    """Steps 2 and 3 as an array: the NFKC-casefolded text as ``uint32`` code points with
    ё → е, invisible characters removed and every non-word character replaced by a space.

    Equal to :func:`canonical_codes_reference`, but NFKC and casefolding (string operations,
    the slow part) run only on the whitespace-delimited words that contain a code point that is
    not stable (see :func:`_fast_tables`); every other code point goes through one table lookup.
    (Text with many unstable code points is normalised whole.) This is exact: NFKC and
    casefolding never act across whitespace (a whitespace character is a starter that composes
    with nothing), and a stable code point is unchanged by NFKC next to other stable ones.
    """
    stable, fold, space = _fast_tables()
    codes = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    clipped = np.minimum(codes, 0xFFFF)
    unstable = ~stable[clipped]
    unstable[codes > 0xFFFF] = True
    mapped = fold[clipped]
    unstable_count = int(np.count_nonzero(unstable))
    if unstable_count == 0:
        return mapped
    if unstable_count > 64 + len(codes) // 64:  # e.g. a script written with combining marks
        return canonical_codes_reference(text)
    # Words (maximal runs without whitespace) holding an unstable code point, and unstable
    # whitespace characters on their own, are normalised as strings.
    is_space = space[clipped] & (codes <= 0xFFFF)
    bounds = np.concatenate(([-1], np.flatnonzero(is_space), [len(codes)]))
    where = np.flatnonzero(unstable)
    at = np.searchsorted(bounds, where)  # bounds[at - 1] < where <= bounds[at]
    alone = is_space[where]
    starts = np.where(alone, where, bounds[at - 1] + 1)
    ends = np.where(alone, where + 1, bounds[at])
    starts, first = np.unique(starts, return_index=True)
    ends = ends[first]
    pieces = []
    done = 0
    for start, end in zip(starts.tolist(), ends.tolist()):
        pieces.append(mapped[done:start])
        pieces.append(_map_folded(unicodedata.normalize("NFKC", text[start:end]).casefold()))
        done = end
    pieces.append(mapped[done:])
    return np.concatenate(pieces)


def split_codes(codes: np.ndarray) -> list[str]:
    """The tokens of :func:`canonical_codes` output (runs of non-space code points)."""
    return codes.tobytes().decode("utf-32-le").split()


def token_spans(codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(starts, ends) of the tokens of :func:`canonical_codes` output (end exclusive)."""
    word = np.zeros(len(codes) + 2, dtype=bool)
    np.not_equal(codes, _SPACE, out=word[1:-1])
    edges = np.flatnonzero(word[1:] != word[:-1])  # alternately a start and an end
    return edges[0::2], edges[1::2]


def tokenise(text: str) -> list[str]:
    """Steps 2 and 3: the word tokens of ``text`` (not yet HTML-stripped or filtered)."""
    return split_codes(canonical_codes(text))


def detect_language(codes: np.ndarray) -> Lang:
    """``ru``/``en``/``none`` from the first :data:`DETECT_CHARS` canonical code points.

    Counts Cyrillic letters (U+0400–U+04FF) and Latin letters (a–z, U+00C0–U+024F). ``ru``
    if Cyrillic ≥ Latin and Cyrillic > 0; ``en`` if Latin > Cyrillic; ``none`` if neither
    occurs (digits only, other scripts).
    """
    sample = codes[:DETECT_CHARS]
    cyrillic = int(np.count_nonzero((sample >= 0x0400) & (sample <= 0x04FF)))
    latin = int(np.count_nonzero(((sample >= 0x61) & (sample <= 0x7A)) | ((sample >= 0xC0) & (sample <= 0x24F))))
    if cyrillic and cyrillic >= latin:
        return "ru"
    if latin:
        return "en"
    return "none"


_morph = None
_morph_lock = threading.Lock()


def morph_analyzer():  # -> pymorphy3.MorphAnalyzer
    """The process-wide pymorphy3 analyser, created on first use (it loads its dictionaries)."""
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
        # Both lists in both languages: they cannot collide (different scripts), and quoted
        # English in Russian text (or the reverse) loses its function words too.
        self.stoplist = stopwords.RUSSIAN | stopwords.ENGLISH if language in ("ru", "en") else frozenset()

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
        new = dict(zip(missing, self.compute(missing)))
        result = [new[w] if w in new else cache[w] for w in tokens]
        if len(cache) + len(new) > self.cache_size:
            cache.clear()
        cache.update(itertools.islice(new.items(), self.cache_size - len(cache)))
        return result

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
