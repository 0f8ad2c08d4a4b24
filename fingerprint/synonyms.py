"""Synonym lists: a plain-text file of synonym groups, and the mapping applied to canonical tokens.

Before TF-IDF weighting every member of a synonym group becomes one term (the group's first
entry), so a rewrite that swaps "заявил" for "сообщил" keeps its terms. Entries are canonicalised
with the same function as documents (``Fingerprinter.canonical_tokens``), so they match in any
inflection; an entry may be a phrase of several words (matched longest first). Pure: the shell
reads the file and passes its text.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass


class SynonymFormatError(ValueError):
    """A synonym list is malformed (the message names the line)."""


_COMMENT = re.compile(r"(^|\s)#.*$")


def parse_synonyms(text: str) -> list[tuple[str, ...]]:
    """Synonym groups from the plain-text format, one group a line::

        # comment lines and trailing "  # comments" are ignored, as are blank lines
        США, Соединённые Штаты, Америка
        заявить, сообщить, отметить

    Entries are separated by commas; an entry may be several words. The first entry names the
    group: every entry is replaced by it. A group needs at least two entries.
    Raises :class:`SynonymFormatError` naming the line.
    """
    return [entries for _, entries in _numbered_groups(text)]


def _numbered_groups(text: str) -> list[tuple[int, tuple[str, ...]]]:
    if not isinstance(text, str):
        raise TypeError(f"synonym list must be a str, got {type(text).__name__}")
    groups = []
    for number, line in enumerate(text.splitlines(), 1):
        line = _COMMENT.sub("", line).strip()
        if not line:
            continue
        entries = tuple(" ".join(e.split()) for e in line.split(","))
        if any(not e for e in entries):
            raise SynonymFormatError(f"synonyms line {number}: empty entry in {line!r}")
        if len(entries) < 2:
            raise SynonymFormatError(f"synonyms line {number}: a group needs at least two entries, got {line!r}")
        groups.append((number, entries))
    return groups


@dataclass(frozen=True)
class SynonymMap:
    """Canonical token sequence → the group's term. Built by :meth:`build`.

    ``phrases`` maps a tuple of canonical tokens (one or more) to the canonical tokens of its
    group's first entry joined by a space (one term, even for a phrase). Applied to a token
    list left to right, longest match first.
    """

    phrases: Mapping[tuple[str, ...], str]

    @classmethod
    def build(cls, groups: Sequence[Sequence[str]], canonical: Callable[[str], list[str]],
              lines: Sequence[int] | None = None) -> SynonymMap:
        """Canonicalise every entry with ``canonical`` (use ``Fingerprinter.canonical_tokens``, so
        entries are matched as lemmas in any inflection). :class:`SynonymFormatError` if an entry
        has no canonical token (only stop-words) or belongs to two groups with different names."""
        phrases: dict[tuple[str, ...], str] = {}
        for number, group in enumerate(groups, 1):
            where = f"synonyms line {lines[number - 1]}" if lines is not None else f"synonym group {number}"
            canon = [tuple(canonical(entry)) for entry in group]
            for entry, tokens in zip(group, canon):
                if not tokens:
                    raise SynonymFormatError(f"{where}: {entry!r} has no words left after "
                                             "stop-words are dropped")
            name = " ".join(canon[0])
            for entry, tokens in zip(group, canon):
                if phrases.get(tokens, name) != name:
                    raise SynonymFormatError(f"{where}: {entry!r} already belongs to the group "
                                             f"{phrases[tokens]!r}")
                phrases[tokens] = name
        return cls(phrases)

    @classmethod
    def from_text(cls, text: str, canonical: Callable[[str], list[str]]) -> SynonymMap:
        numbered = _numbered_groups(text)
        return cls.build([g for _, g in numbered], canonical, [n for n, _ in numbered])

    def __len__(self) -> int:
        return len(self.phrases)

    def digest(self) -> str:
        """SHA-256 of the sorted mapping: equal for equal mappings, whatever the file's layout."""
        items = sorted((" ".join(k), v) for k, v in self.phrases.items())
        return hashlib.sha256(json.dumps(items, ensure_ascii=False).encode("utf-8")).hexdigest()

    def apply(self, tokens: Sequence[str]) -> list[str]:
        """The tokens with every synonym replaced by its group's term (longest match first)."""
        phrases = self.phrases
        longest = max((len(k) for k in phrases), default=0)
        if longest <= 1:
            return [phrases.get((t,), t) for t in tokens]
        out: list[str] = []
        p, n = 0, len(tokens)
        while p < n:
            for size in range(min(longest, n - p), 0, -1):
                name = phrases.get(tuple(tokens[p:p + size]))
                if name is not None:
                    out.append(name)
                    p += size
                    break
            else:
                out.append(tokens[p])
                p += 1
        return out
