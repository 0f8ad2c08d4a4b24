"""The :class:`Fingerprinter`: text → canonical tokens → shingle hashes → :class:`Fingerprint`.

The pipeline (details in :mod:`fingerprint.canonical` and :mod:`fingerprint.hashing`):

1. canonical tokens (HTML stripped, NFKC, casefolded, stop-words dropped, lemmatised);
2. token hashes (mmh3, cached per distinct word) → shingle hashes for every window of
   ``shingle_size`` tokens (a document with fewer tokens gets one shingle of all of them; a
   document with none gets the empty fingerprint);
3. the set of distinct shingle hashes A, ``shingle_count = |A|``;
4. ``signature[k] = min_{x∈A} π_k(x)``, K = ``num_perm``;
5. ``groups`` supershingles of ``rows`` minhashes each, and one megashingle per pair of
   supershingles.

Memory: text longer than :data:`PIECE_CHARS` characters is processed piece by piece (cut at
whitespace), so the working set is bounded by the piece size plus 8 bytes per distinct
shingle (needed for the exact ``shingle_count``) and the input itself. Shingles run across
piece boundaries, so the result equals that of the unsplit text.
"""

from __future__ import annotations

import re
from typing import Iterable

import numpy as np

from fingerprint.canonical import DETECT_TOKENS, Lang, WordNormaliser, detect_language, normalise, strip_markup, tokenise
from fingerprint.hashing import (DROPPED, megashingles, minhash, permutations, shingle_hashes,
                                 supershingles, token_hash)
from fingerprint.model import Fingerprint, empty_fingerprint, make_fingerprint
from fingerprint.params import FingerprintParams, scheme_version

#: Longer texts are canonicalised in pieces of about this many characters.
PIECE_CHARS = 1 << 20
_LANGUAGES = ("auto", "ru", "en", "none")
_LAST_SPACE = re.compile(r"\s(?=\S*\Z)")


def _pieces(text: str) -> Iterable[str]:
    """Cut ``text`` into pieces of at most ~:data:`PIECE_CHARS` characters at whitespace.

    NFKC never composes across whitespace and tokens never contain it, so cutting there
    changes nothing. A stretch of 4096 characters without whitespace is cut where it is.
    """
    start = 0
    while len(text) - start > PIECE_CHARS:
        end = start + PIECE_CHARS
        match = _LAST_SPACE.search(text, end - 4096, end)
        cut = match.start() + 1 if match else end
        yield text[start:cut]
        start = cut
    yield text[start:]


def _with_last(items: Iterable[str]) -> Iterable[tuple[str, bool]]:
    """``(item, is_last)`` pairs."""
    iterator = iter(items)
    try:
        current = next(iterator)
    except StopIteration:
        return
    for following in iterator:
        yield current, False
        current = following
    yield current, True


class Fingerprinter:
    """Fingerprints texts under one scheme. Caches permutations and word → token-hash maps.

    ``cache_size`` bounds each per-language word cache (entries). Create one per thread
    or process (the caches are not locked); the pymorphy3 analyser is shared per process.
    """

    def __init__(self, params: FingerprintParams | None = None, cache_size: int = 300_000) -> None:
        self.params = params or FingerprintParams()
        self.version = scheme_version(self.params)
        self.cache_size = cache_size
        self._a, self._b = permutations(self.params.seed, self.params.num_perm)
        self._normalisers: dict[str, WordNormaliser] = {}
        self._hash_caches: dict[str, dict[str, int]] = {}

    # ---- canonical text -------------------------------------------------------------

    def _language(self, language: str | None) -> str:
        chosen = self.params.language if language is None else language
        if chosen not in _LANGUAGES:
            raise ValueError(f"language = {chosen!r}: must be one of 'auto', 'ru', 'en', 'none'")
        return chosen

    def normaliser(self, language: Lang) -> WordNormaliser:
        found = self._normalisers.get(language)
        if found is None:
            found = self._normalisers[language] = WordNormaliser(language, self.params, self.cache_size)
        return found

    def _plain(self, text: str) -> str:
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        return strip_markup(text) if self.params.strip_html else text

    def canonical_tokens(self, text: str, language: str | None = None) -> list[str]:
        """The canonical words of ``text`` in order (see :mod:`fingerprint.canonical`)."""
        chosen = self._language(language)
        words: list[str] = []
        for piece in _pieces(self._plain(text)):
            words += tokenise(normalise(piece))
        lang: Lang = detect_language(words) if chosen == "auto" else chosen  # type: ignore[assignment]
        return [w for w in self.normaliser(lang).normalise_words(words) if w is not None]

    def detect_language(self, text: str) -> Lang:
        """The language ``auto`` would choose for ``text``."""
        return detect_language(tokenise(normalise(next(iter(_pieces(self._plain(text)))))))

    # ---- hashing ----------------------------------------------------------------------

    def _token_hashes(self, words: list[str], language: Lang) -> np.ndarray:
        """uint64 hashes of the canonical forms of ``words``, dropped words removed."""
        cache = self._hash_caches.get(language)
        if cache is None:
            cache = self._hash_caches[language] = {}
        try:
            values = [cache[w] for w in words]
        except KeyError:
            known = {w: cache.get(w) for w in set(words)}
            missing = [w for w, h in known.items() if h is None]
            seed = self.params.seed
            canonical = self.normaliser(language).compute(missing)
            learned = {w: DROPPED if c is None else token_hash(c, seed) for w, c in zip(missing, canonical)}
            if len(cache) + len(learned) > self.cache_size:
                cache.clear()
            cache.update(learned)
            known.update(learned)
            values = [known[w] for w in words]
        hashes = np.array(values, dtype=np.int64)
        if self.params.drop_stopwords:
            hashes = hashes[hashes != DROPPED]
        return hashes.view(np.uint64)

    def token_hashes(self, tokens: list[str]) -> np.ndarray:
        """uint64 mmh3 hashes of already canonical tokens (no word processing)."""
        seed = self.params.seed
        return np.array([token_hash(t, seed) for t in tokens], dtype=np.int64).view(np.uint64)

    def shingles(self, tokens: list[str]) -> np.ndarray:
        """Unique sorted 64-bit shingle hashes of a canonical token list."""
        return np.unique(shingle_hashes(self.token_hashes(tokens), self.params.shingle_size, self.params.seed))

    # ---- fingerprints -----------------------------------------------------------------

    def fingerprint(self, text: str, language: str | None = None) -> Fingerprint:
        """The fingerprint of ``text``. Never raises for a ``str`` (TypeError otherwise)."""
        chosen = self._language(language)
        plain = self._plain(text)
        size, seed = self.params.shingle_size, self.params.seed
        if len(plain) <= PIECE_CHARS:
            words = tokenise(normalise(plain))
            lang: Lang = detect_language(words) if chosen == "auto" else chosen  # type: ignore[assignment]
            return self.fingerprint_shingles(shingle_hashes(self._token_hashes(words, lang), size, seed))
        return self._fingerprint_pieces(plain, chosen)

    def _fingerprint_pieces(self, plain: str, chosen: str) -> Fingerprint:
        """:meth:`fingerprint` for long text, piece by piece (same result, bounded memory)."""
        size, seed = self.params.shingle_size, self.params.seed
        lang: Lang | None = None if chosen == "auto" else chosen  # type: ignore[assignment]
        signature = np.full(self.params.num_perm, np.uint64(2**64 - 1), dtype=np.uint64)
        distinct: list[np.ndarray] = []
        held = 0
        carry = np.empty(0, dtype=np.uint64)  # last size-1 token hashes of the text so far
        total_tokens = 0
        pending: list[str] = []  # tokens held back until the language is decided
        for piece, last in _with_last(_pieces(plain)):
            words = tokenise(normalise(piece))
            if lang is None:
                pending += words
                if len(pending) < DETECT_TOKENS and not last:
                    continue
                lang, words, pending = detect_language(pending), pending, []
            hashes = np.concatenate((carry, self._token_hashes(words, lang)))
            total_tokens += len(hashes) - len(carry)
            if len(hashes) >= size:
                new = np.unique(shingle_hashes(hashes, size, seed))
                np.minimum(signature, minhash(new, self._a, self._b), out=signature)
                distinct.append(new)
                held += len(new)
                if len(distinct) > 1 and held > 4 * len(distinct[0]) + (1 << 20):
                    distinct = [np.unique(np.concatenate(distinct))]
                    held = len(distinct[0])
            carry = hashes[len(hashes) - (size - 1):] if size > 1 else hashes[:0]
        if total_tokens < size:  # the whole text is shorter than one shingle
            return self.fingerprint_shingles(shingle_hashes(carry, size, seed))
        merged = np.concatenate(distinct)
        merged.sort()
        count = int(np.count_nonzero(merged[1:] != merged[:-1])) + 1
        return self._assemble(signature, count)

    def fingerprint_fields(self, fields: Iterable[object], language: str | None = None) -> Fingerprint:
        """Fingerprint of several text fields joined in order by a newline (non-str skipped)."""
        return self.fingerprint("\n".join(f for f in fields if isinstance(f, str)), language)

    def fingerprint_tokens(self, tokens: list[str]) -> Fingerprint:
        """Fingerprint of an already canonical token list."""
        size, seed = self.params.shingle_size, self.params.seed
        return self.fingerprint_shingles(shingle_hashes(self.token_hashes(tokens), size, seed))

    def fingerprint_shingles(self, shingle_hashes_: np.ndarray) -> Fingerprint:
        """Fingerprint of a set (or multiset) of 64-bit shingle hashes."""
        unique = np.unique(np.asarray(shingle_hashes_, dtype=np.uint64))
        if unique.size == 0:
            return empty_fingerprint(self.version, self.params.num_perm)
        return self._assemble(minhash(unique, self._a, self._b), unique.size)

    def _assemble(self, signature: np.ndarray, count: int) -> Fingerprint:
        supers = supershingles(signature, self.params.groups)
        return make_fingerprint(self.version, signature, supers, megashingles(supers), count)
