"""Edited copies of real articles: the designed near-duplicates of the Russian corpus.

Each copy applies one kind of edit to one original, with a strength drawn at random, all from
one seeded ``numpy.random.Generator`` so the same seed gives the same corpus:

* ``delete`` / ``insert`` / ``replace``: that share of the words is deleted, or gets a word
  from another article inserted after it, or is replaced by such a word;
* ``mixed``: all three at a third of the strength each;
* ``swap``: two or more paragraphs change places (the words stay the same);
* ``boilerplate``: site furniture (subscription calls, cookie notes, "read also" links) added
  at the top and/or the bottom;
* ``quoted``: the article, whole, is quoted inside another, longer article.

Word edits keep the paragraph structure; a "word" is a whitespace-separated piece of text.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

EDIT_KINDS = ("delete", "insert", "replace", "mixed", "swap", "boilerplate", "quoted")

BOILERPLATE_RU = (
    "Подписывайтесь на наш канал в Telegram, чтобы первыми узнавать о главных событиях дня.",
    "Мы используем файлы cookie. Продолжая пользоваться сайтом, вы соглашаетесь с их использованием.",
    "Читайте также: главные новости за неделю в нашем еженедельном обзоре.",
    "Все права защищены. Полное или частичное копирование материалов запрещено без согласия редакции.",
    "Если вы заметили ошибку в тексте, выделите её и нажмите Ctrl+Enter.",
    "Реклама. Скидки до 50 процентов на всё только до конца месяца, подробности на сайте партнёра.",
    "Оставайтесь с нами: новости, аналитика и мнения экспертов круглосуточно.",
    "Материал подготовлен при участии корреспондентов регионального бюро.",
)


@dataclass(frozen=True)
class Edit:
    original: int         # index of the edited article in the originals
    kind: str
    strength: float       # share of words edited, paragraphs moved, boilerplate words / text words
    host: int = -1        # for "quoted": the article quoting the original


def _paragraphs(text: str) -> list[str]:
    return [p for p in text.split("\n") if p.strip()]


def _word_edit(text: str, rate_delete: float, rate_insert: float, rate_replace: float,
               donor_words: Sequence[str], rng: np.random.Generator) -> str:
    out_paragraphs = []
    for paragraph in _paragraphs(text):
        words = paragraph.split()
        draw = rng.random((len(words), 3))
        kept: list[str] = []
        for w, (d, ins, rep) in zip(words, draw):
            if d < rate_delete:
                continue
            if rep < rate_replace and donor_words:
                w = donor_words[int(rng.integers(len(donor_words)))]
            kept.append(w)
            if ins < rate_insert and donor_words:
                kept.append(donor_words[int(rng.integers(len(donor_words)))])
        if kept:
            out_paragraphs.append(" ".join(kept))
    return "\n".join(out_paragraphs)


def _swap(text: str, strength: float, rng: np.random.Generator) -> str:
    paragraphs = _paragraphs(text)
    if len(paragraphs) < 2:
        sentences = [s for s in text.replace("\n", " ").split(". ") if s]
        paragraphs = sentences if len(sentences) >= 2 else paragraphs
    if len(paragraphs) < 2:
        return text
    swaps = max(1, int(round(strength * len(paragraphs))))
    for _ in range(swaps):
        a, b = rng.choice(len(paragraphs), size=2, replace=False)
        paragraphs[a], paragraphs[b] = paragraphs[b], paragraphs[a]
    return "\n".join(paragraphs)


def _boilerplate(text: str, strength: float, rng: np.random.Generator) -> str:
    words = len(text.split())
    target = max(10, int(strength * words))
    lines: list[str] = []
    while sum(len(line.split()) for line in lines) < target:
        lines.append(BOILERPLATE_RU[int(rng.integers(len(BOILERPLATE_RU)))])
    where = rng.integers(3)            # 0: top, 1: bottom, 2: both
    if where == 0:
        return "\n".join(lines + [text])
    if where == 1:
        return "\n".join([text] + lines)
    half = len(lines) // 2
    return "\n".join(lines[:half] + [text] + lines[half:])


def _quoted(text: str, host_text: str, rng: np.random.Generator) -> str:
    host = _paragraphs(host_text)
    at = int(rng.integers(len(host) + 1)) if host else 0
    return "\n".join(host[:at] + ["«" + text.strip() + "»"] + host[at:])


def plan_edits(n_originals: int, n_copies: int, lengths: Sequence[int],
               rng: np.random.Generator) -> list[Edit]:
    """Which original gets which edit, how strong, and (for ``quoted``) which longer host."""
    lengths = np.asarray(lengths)
    chosen = rng.choice(n_originals, size=min(n_copies, n_originals), replace=False)
    edits = []
    for k, original in enumerate(chosen):
        kind = EDIT_KINDS[k % len(EDIT_KINDS)]
        if kind in ("delete", "insert", "replace", "mixed"):
            strength = float(rng.uniform(0.0, 0.3))
        elif kind == "swap":
            strength = float(rng.uniform(0.05, 0.5))
        elif kind == "boilerplate":
            strength = float(rng.uniform(0.05, 0.5))
        else:
            strength = 1.0
        host = -1
        if kind == "quoted":
            longer = np.flatnonzero(lengths > 2 * lengths[original])
            longer = longer[longer != original]
            if len(longer) == 0:
                kind, strength = "swap", 0.2
            else:
                host = int(longer[rng.integers(len(longer))])
        edits.append(Edit(original=int(original), kind=kind, strength=strength, host=host))
    return edits


def apply_edit(edit: Edit, texts: Sequence[str], rng: np.random.Generator) -> str:
    """The edited text of ``texts[edit.original]``."""
    text = texts[edit.original]
    if edit.kind in ("delete", "insert", "replace", "mixed"):
        donor = texts[int(rng.integers(len(texts)))].split()
        s = edit.strength
        rates = {"delete": (s, 0, 0), "insert": (0, s, 0), "replace": (0, 0, s),
                 "mixed": (s / 3, s / 3, s / 3)}[edit.kind]
        return _word_edit(text, *rates, donor_words=donor, rng=rng)
    if edit.kind == "swap":
        return _swap(text, edit.strength, rng)
    if edit.kind == "boilerplate":
        return _boilerplate(text, edit.strength, rng)
    if edit.kind == "quoted":
        return _quoted(text, texts[edit.host], rng)
    raise ValueError(f"unknown edit kind: {edit.kind}")


def edited_copies(texts: Sequence[str], n_copies: int, seed: int) -> tuple[list[str], list[Edit]]:
    """``n_copies`` edited copies of distinct originals among ``texts``, reproducible by seed."""
    rng = np.random.default_rng(seed)
    edits = plan_edits(len(texts), n_copies, [len(t.split()) for t in texts], rng)
    return [apply_edit(e, texts, rng) for e in edits], edits
