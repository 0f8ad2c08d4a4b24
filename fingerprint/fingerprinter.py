"""The :class:`Fingerprinter`: text → canonical tokens → shingle hashes → :class:`Fingerprint`.

The pipeline (details in :mod:`neardup.fingerprint.canonical` and
:mod:`neardup.fingerprint.hashing`):

1. canonical tokens (HTML stripped, NFKC, casefolded, stop-words dropped, lemmatised);
2. token hashes (mmh3, cached per distinct word) → shingle hashes for every window of
   ``shingle_size`` tokens (a document with fewer tokens gets one shingle of all of them; a
   document with none gets the empty fingerprint);
3. the set of distinct shingle hashes A, ``shingle_count = |A|``;
4. ``signature[k] = min_{x∈A} π_k(x)``, K = ``num_perm``;
5. ``groups`` supershingles of ``rows`` minhashes each, and one megashingle per pair of
   supershingles.

Memory: text longer than :data:`~neardup.fingerprint.canonical.PIECE_CHARS` characters is
processed piece by piece (see :func:`neardup.fingerprint.canonical.plain_pieces`), so the
working set is bounded by the piece size plus 8 bytes per distinct shingle (needed for the
exact ``shingle_count``) and the input itself. Shingles run across piece boundaries.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Sequence

import numpy as np

from neardup.fingerprint import canonical
from neardup.fingerprint.canonical import Lang, WordNormaliser, canonical_codes, detect_language, plain_pieces, split_codes
from neardup.fingerprint.hashing import (
    DROPPED,
    U64_MAX,
    minhash,
    minhash_batch,
    multipliers,
    shingle_hashes,
    shingle_hashes_batch,
    signatures_from_token_hashes,
    spans_and_ids,
    supershingles,
    token_hash,
)
from neardup.fingerprint.model import Fingerprint, empty_fingerprint, make_fingerprint
from neardup.fingerprint.params import FingerprintParams, scheme_version
from neardup.fingerprint.wordcache import WordHashCache

_LANGUAGES = ("auto", "ru", "en", "none")


#: :meth:`Fingerprinter.signatures` works on batches of about this many tokens.
BATCH_TOKENS = 1 << 17


def _batches(token_lists: Sequence[Sequence[str]]) -> Iterator[int]:
    """End indices of consecutive batches of token lists of about BATCH_TOKENS tokens each."""
    total = end = 0
    for index, tokens in enumerate(token_lists):
        total += len(tokens)
        if total >= BATCH_TOKENS:
            yield index + 1
            total, end = 0, index + 1
    if end < len(token_lists):
        yield len(token_lists)


def _unique(values: np.ndarray) -> np.ndarray:
    """Sorted distinct values (sorts ``values`` in place)."""
    values.sort()
    if values.size < 2:
        return values
    keep = np.empty(values.size, dtype=bool)
    keep[0] = True
    np.not_equal(values[1:], values[:-1], out=keep[1:])
    return values[keep]


class Fingerprinter:
    """Fingerprints texts under one scheme. Caches permutations and word → token-hash maps.

    ``cache_size`` bounds each per-language word cache (entries). Create one per thread
    or process (the caches are not locked); the pymorphy3 analyser is shared per process.
    """

    def __init__(self, params: FingerprintParams | None = None, cache_size: int = 300_000) -> None:
        self.params = params or FingerprintParams()
        self.version = scheme_version(self.params)
        self.cache_size = cache_size
        self._a = multipliers(self.params.seed, self.params.num_perm)
        self._normalisers: dict[str, WordNormaliser] = {}
        self._word_caches: dict[str, WordHashCache] = {}
        self._token_cache: dict[str, int] = {}
        self._token_ids: WordHashCache | None = None

    # ---- canonical text -------------------------------------------------------------

    def _language(self, language: str | None) -> str:
        chosen = self.params.language if language is None else language
        if chosen not in _LANGUAGES:
            raise ValueError(f"language = {chosen!r}: must be one of 'auto', 'ru', 'en', 'none'")
        return chosen

    def normaliser(self, language: Lang) -> WordNormaliser:
        """The (cached) word step for one language."""
        found = self._normalisers.get(language)
        if found is None:
            found = self._normalisers[language] = WordNormaliser(language, self.params, self.cache_size)
        return found

    def _plain_pieces(self, text: str) -> Iterator[str]:
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        return plain_pieces(text, self.params.strip_html)

    def _canonical_pieces(self, text: str, language: str | None) -> Iterator[tuple[np.ndarray, Lang]]:
        """(canonical code points, language) for each piece of ``text`` (steps 1–4)."""
        chosen = self._language(language)
        lang: Lang | None = None if chosen == "auto" else chosen  # type: ignore[assignment]
        for piece in self._plain_pieces(text):
            codes = canonical_codes(piece)
            if lang is None:
                lang = detect_language(codes)
            yield codes, lang

    def canonical_tokens(self, text: str, language: str | None = None) -> list[str]:
        """The canonical words of ``text`` in order (see :mod:`neardup.fingerprint.canonical`)."""
        out: list[str] = []
        for codes, lang in self._canonical_pieces(text, language):
            words = self.normaliser(lang).normalise_words(split_codes(codes))
            out += [w for w in words if w is not None]
        return out

    def detect_language(self, text: str) -> Lang:
        """The language ``auto`` would choose for ``text``."""
        return detect_language(canonical_codes(next(self._plain_pieces(text))))

    # ---- hashing ----------------------------------------------------------------------

    def word_cache(self, language: Lang) -> WordHashCache:
        """The cache word id → token hash for one language."""
        found = self._word_caches.get(language)
        if found is None:
            found = WordHashCache(self.normaliser(language).compute, self.params.seed, self.cache_size)
            self._word_caches[language] = found
        return found

    def _piece_token_hashes(self, codes: np.ndarray, language: Lang) -> np.ndarray:
        """uint64 token hashes of one piece's canonical code points, dropped words removed.

        Equal to mmh3 of each of ``canonical_tokens`` (same word step), but without a
        Python string per token: see :mod:`neardup.fingerprint.wordcache`.
        """
        starts, ends, ids = spans_and_ids(codes)
        if starts.size == 0:
            return np.empty(0, dtype=np.uint64)
        hashes = self.word_cache(language).token_hashes(codes, starts, ends, ids)
        if self.params.drop_stopwords:
            hashes = hashes[hashes != DROPPED]
        return hashes.view(np.uint64)

    def token_hashes(self, tokens: Sequence[str]) -> np.ndarray:
        """uint64 mmh3 hashes of already canonical tokens (no word processing), cached per token."""
        cache = self._token_cache
        values = list(map(cache.get, tokens))
        if None in values:
            seed = self.params.seed
            learned = {t: token_hash(t, seed) for t in {t for t, v in zip(tokens, values) if v is None}}
            values = [learned[t] if v is None else v for t, v in zip(tokens, values)]
            if len(cache) + len(learned) > self.cache_size:
                cache.clear()
            cache.update(itertools.islice(learned.items(), self.cache_size - len(cache)))
        return np.array(values, dtype=np.int64).view(np.uint64)

    def shingles(self, tokens: list[str]) -> np.ndarray:
        """Unique sorted 64-bit shingle hashes of a canonical token list."""
        return _unique(shingle_hashes(self.token_hashes(tokens), self.params.shingle_size, self.params.seed))

    # ---- fingerprints -----------------------------------------------------------------

    def fingerprint(self, text: str, language: str | None = None) -> Fingerprint:
        """The fingerprint of ``text``. Never raises for a ``str`` (TypeError otherwise).

        Long texts are processed piece by piece (see the module docstring): the token
        hashes of each piece, with the last ``shingle_size - 1`` of the previous one
        prepended, give exactly the windows of the whole text; the running minimum of
        the piece signatures is the signature of the union; distinct shingles are kept
        (deduplicated as they come) only to count them.
        """
        size, seed = self.params.shingle_size, self.params.seed
        signature = np.full(self.params.num_perm, U64_MAX, dtype=np.uint64)
        distinct: list[np.ndarray] = []
        held = 0
        carry = np.empty(0, dtype=np.uint64)  # the last size-1 token hashes so far
        for codes, lang in self._canonical_pieces(text, language):
            hashes = self._piece_token_hashes(codes, lang)
            if carry.size:
                hashes = np.concatenate((carry, hashes))
            if len(hashes) >= size:
                new = _unique(shingle_hashes(hashes, size, seed))
                np.minimum(signature, minhash(new, self._a), out=signature)
                distinct.append(new)
                held += len(new)
                if len(distinct) > 1 and held > 2 * len(distinct[0]) + (1 << 20):
                    distinct = [_unique(np.concatenate(distinct))]
                    held = len(distinct[0])
                carry = hashes[len(hashes) - size + 1:]
            else:
                carry = hashes
        if not distinct:  # fewer than shingle_size tokens in all: one shingle, or none
            return self.fingerprint_shingles(shingle_hashes(carry, size, seed))
        count = len(distinct[0]) if len(distinct) == 1 else len(_unique(np.concatenate(distinct)))
        return self._assemble(signature, count)

    def fingerprint_fields(self, fields: Iterable[object], language: str | None = None) -> Fingerprint:
        """Fingerprint of several text fields joined in order by a newline (non-str skipped)."""
        return self.fingerprint("\n".join(f for f in fields if isinstance(f, str)), language)

    def fingerprint_tokens(self, tokens: list[str]) -> Fingerprint:
        """Fingerprint of an already canonical token list."""
        size, seed = self.params.shingle_size, self.params.seed
        return self.fingerprint_shingles(shingle_hashes(self.token_hashes(tokens), size, seed))

    def fingerprint_shingles(self, hashes: np.ndarray) -> Fingerprint:
        """Fingerprint of a set (or multiset) of 64-bit shingle hashes."""
        unique = _unique(np.array(hashes, dtype=np.uint64))
        if unique.size == 0:
            return empty_fingerprint(self.version, self.params.num_perm)
        return self._assemble(minhash(unique, self._a), unique.size)

    # ---- many at once -----------------------------------------------------------------

    def signatures(self, token_lists: Sequence[Sequence[str]]) -> np.ndarray:
        """(N, K) MinHash signatures of N canonical token lists, in few vectorised passes.

        The same values as :meth:`fingerprint_tokens` gives one by one (its ``signature``),
        computed on the concatenation of about :data:`BATCH_TOKENS` tokens at a time: the
        per-document overhead is paid once per batch, and with the compiled kernels
        (:mod:`neardup.fingerprint.jit`) the shingle fold and the MinHash are one pass over the
        token hashes. Shingle counts are not computed (they need a sort of all shingles);
        :meth:`fingerprint_many` has them.
        """
        out = np.empty((len(token_lists), self.params.num_perm), dtype=np.uint64)
        first = 0
        for last in _batches(token_lists):
            chunk = token_lists[first:last]
            offsets = np.zeros(len(chunk) + 1, dtype=np.int64)
            np.cumsum(np.fromiter(map(len, chunk), dtype=np.int64, count=len(chunk)), out=offsets[1:])
            hashes = self._joined_token_hashes(chunk, offsets)
            out[first:last] = signatures_from_token_hashes(hashes, offsets, self.params.shingle_size,
                                                           self.params.seed, self._a)
            first = last
        return out

    def _joined_token_hashes(self, token_lists: Sequence[Sequence[str]], offsets: np.ndarray) -> np.ndarray:
        """:meth:`token_hashes` of all tokens of ``token_lists`` (list d holds tokens
        ``offsets[d]`` … ``offsets[d + 1] - 1``, ``count = offsets[-1]`` in all) through word
        ids: the tokens joined by spaces into one array of code points, identified with
        :func:`~neardup.fingerprint.hashing.spans_and_ids` and looked up in an id cache (no
        Python work per token). Falls back to :meth:`token_hashes` for tokens that are empty or
        contain a space (never the case for canonical tokens): then the spaces are not exactly
        the ``count - 1`` separators or the runs between them are not ``count``."""
        count = int(offsets[-1])
        if not count:
            return np.empty(0, dtype=np.uint64)
        # two levels, per document and then the documents, so the output being written stays
        # in cache; empty lists add no space
        joined = " ".join([" ".join(tokens) for tokens in token_lists if tokens])
        codes = np.frombuffer(joined.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
        starts, ends, ids = spans_and_ids(codes)
        if len(starts) != count or len(codes) - int((ends - starts).sum()) != count - 1:
            return self.token_hashes(list(itertools.chain.from_iterable(token_lists)))
        if self._token_ids is None:
            self._token_ids = WordHashCache(list, self.params.seed, self.cache_size)

        def words(indices: np.ndarray) -> list[str]:  # the tokens at these positions of the batch
            docs = np.searchsorted(offsets, indices, side="right") - 1
            return [token_lists[d][p] for d, p in zip(docs.tolist(), (indices - offsets[docs]).tolist())]

        return self._token_ids.token_hashes(codes, starts, ends, ids, words).view(np.uint64)

    def fingerprint_many(self, texts: Sequence[str], language: str | None = None) -> list[Fingerprint]:
        """``[self.fingerprint(t, language) for t in texts]``, with shingling and MinHash of
        all texts done in one pass (texts long enough to be cut into pieces go one by one)."""
        hashes: list[np.ndarray] = []
        for text in texts:
            if isinstance(text, str) and len(text) > canonical.PIECE_CHARS:
                hashes.append(np.empty(0, np.uint64))  # done one by one below
            else:
                (codes, lang), = self._canonical_pieces(text, language)
                hashes.append(self._piece_token_hashes(codes, lang))
        lengths = np.array([len(h) for h in hashes], dtype=np.int64)
        signatures, counts = self._batch(np.concatenate(hashes) if hashes else np.empty(0, np.uint64), lengths)
        out = []
        for k, text in enumerate(texts):
            if len(text) > canonical.PIECE_CHARS:
                out.append(self.fingerprint(text, language))
            elif counts[k] == 0:
                out.append(empty_fingerprint(self.version, self.params.num_perm))
            else:
                out.append(self._assemble(signatures[k], int(counts[k])))
        return out

    def _batch(self, token_hashes: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Signatures and shingle counts of documents whose token hashes are concatenated."""
        offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        shingles, owner = shingle_hashes_batch(token_hashes, offsets, self.params.shingle_size, self.params.seed)
        # Distinct shingles per document: after a stable sort by hash, equal hashes keep their
        # document order, so a repeat within one document sits right after its first occurrence.
        order = np.argsort(shingles, kind="stable")
        values, owners = shingles[order], owner[order]
        repeats = owners[1:][(values[1:] == values[:-1]) & (owners[1:] == owners[:-1])]
        counts = np.bincount(owner, minlength=len(lengths)) - np.bincount(repeats, minlength=len(lengths))
        return minhash_batch(shingles, owner, len(lengths), self._a), counts

    def _assemble(self, signature: np.ndarray, count: int) -> Fingerprint:
        supers = supershingles(signature, self.params.groups)
        return make_fingerprint(self.version, signature, supers, count)
