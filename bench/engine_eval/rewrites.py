"""Rewrites of real articles that keep the content but not the word sequence.

All from one seeded ``numpy.random.Generator`` (same seed, same copies):

* ``sentences``: the sentences of the article in a random order (paragraphs dissolved);
* ``word order``: in every sentence, each pair of neighbouring words is swapped with
  probability ``strength`` (0.1–0.5), in one left-to-right pass;
* ``synonyms``: every word whose lemma belongs to a synonym group (single-word entries of
  the list) is replaced, with probability ``strength`` (0.5–1.0), by another member of its
  group, inflected by pymorphy3 to the original's case and number (or tense, person and gender)
  where pymorphy3 can;
* ``rewrite``: what a rewriter does, all at once: synonyms (0.7), word order (0.2), sentence
  order shuffled, and 10 % of the words deleted, inserted or replaced (a third each) with words
  of another article.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

REWRITE_KINDS = ("sentences", "word order", "synonyms", "rewrite")

_SENTENCE_END = re.compile(r"(?<=[.!?…])\s+")
_WORD_CORE = re.compile(r"^(\W*)([^\W\d_]+)(\W*)$")


@dataclass(frozen=True)
class Rewrite:
    original: int
    kind: str
    strength: float


def sentences(text: str) -> list[str]:
    return [s for p in text.split("\n") for s in _SENTENCE_END.split(p.strip()) if s.strip()]


def shuffle_sentences(text: str, rng: np.random.Generator) -> str:
    parts = sentences(text)
    return " ".join(parts[k] for k in rng.permutation(len(parts)))


def swap_words(text: str, rate: float, rng: np.random.Generator) -> str:
    out = []
    for paragraph in text.split("\n"):
        moved = []
        for sentence in _SENTENCE_END.split(paragraph.strip()):
            words = sentence.split()
            for p in range(len(words) - 1):
                if rng.random() < rate:
                    words[p], words[p + 1] = words[p + 1], words[p]
            moved.append(" ".join(words))
        out.append(" ".join(moved))
    return "\n".join(out)


class SynonymSwapper:
    """Replaces words by other members of their synonym group (single-word entries)."""

    def __init__(self, groups: Sequence[Sequence[str]], canonical: Callable[[str], list[str]]) -> None:
        from neardup.fingerprint.canonical import morph_analyzer

        self.morph = morph_analyzer()
        self.members: dict[str, list[str]] = {}          # lemma -> other single-word members
        for group in groups:
            single = [e for e in group if len(e.split()) == 1]
            lemmas = [canonical(e) for e in single]
            for entry, lemma in zip(single, lemmas):
                if len(lemma) == 1:
                    self.members[lemma[0]] = [e for e in single if e != entry]

    def _inflected(self, word: str, like) -> str:
        parse = self.morph.parse(word)[0]
        wanted = {g for g in (like.case, like.number, like.tense, like.person, like.gender) if g}
        for attempt in (wanted, {g for g in (like.case, like.number) if g}):
            if attempt:
                try:
                    form = parse.inflect(attempt)
                except ValueError:
                    form = None
                if form is not None:
                    return form.word
        return word.lower()

    def swap(self, text: str, rate: float, rng: np.random.Generator) -> str:
        out_lines = []
        for line in text.split("\n"):
            words = line.split(" ")
            for p, raw in enumerate(words):
                match = _WORD_CORE.match(raw)
                if not match:
                    continue
                head, core, tail = match.groups()
                parse = self.morph.parse(core)[0]
                lemma = parse.normal_form.replace("ё", "е")
                others = self.members.get(lemma)
                if not others or rng.random() >= rate:
                    continue
                choice = others[int(rng.integers(len(others)))]
                if core.isupper() and len(core) > 1 or choice.isupper():
                    new = choice if choice.isupper() else self._inflected(choice, parse.tag)
                else:
                    new = self._inflected(choice, parse.tag)
                    if core[:1].isupper():
                        new = new[:1].upper() + new[1:]
                words[p] = head + new + tail
            out_lines.append(" ".join(words))
        return "\n".join(out_lines)


def word_edits(text: str, rate: float, donor: Sequence[str], rng: np.random.Generator) -> str:
    """Delete, insert and replace words (rate/3 each), keeping the line structure."""
    out = []
    for line in text.split("\n"):
        kept = []
        for word in line.split():
            r = rng.random()
            if r < rate / 3:
                continue
            if r < 2 * rate / 3:
                kept.append(donor[int(rng.integers(len(donor)))])
            elif r < rate:
                kept += [word, donor[int(rng.integers(len(donor)))]]
            else:
                kept.append(word)
        out.append(" ".join(kept))
    return "\n".join(out)


def rewritten_copies(texts: Sequence[str], n_copies: int, seed: int, swapper: SynonymSwapper,
                     avoid: Sequence[int] = ()) -> tuple[list[str], list[Rewrite]]:
    """``n_copies`` rewrites of distinct originals (not in ``avoid``), kinds in turn."""
    rng = np.random.default_rng(seed)
    pool = np.setdiff1d(np.arange(len(texts)), np.asarray(avoid, dtype=np.int64))
    chosen = rng.choice(pool, size=min(n_copies, len(pool)), replace=False)
    copies, plans = [], []
    for k, original in enumerate(chosen.tolist()):
        kind = REWRITE_KINDS[k % len(REWRITE_KINDS)]
        text = texts[original]
        if kind == "sentences":
            strength, copy = 1.0, shuffle_sentences(text, rng)
        elif kind == "word order":
            strength = float(rng.uniform(0.1, 0.5))
            copy = swap_words(text, strength, rng)
        elif kind == "synonyms":
            strength = float(rng.uniform(0.5, 1.0))
            copy = swapper.swap(text, strength, rng)
        else:
            strength = 0.1
            donor = texts[int(rng.integers(len(texts)))].split() or ["слово"]
            copy = swapper.swap(text, 0.7, rng)
            copy = shuffle_sentences(swap_words(copy, 0.2, rng), rng)
            copy = word_edits(copy, strength, donor, rng)
        copies.append(copy)
        plans.append(Rewrite(original=int(original), kind=kind, strength=strength))
    return copies, plans
