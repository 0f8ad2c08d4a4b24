"""Which text of a document is fingerprinted (pure functions).

The configured fields are read in order; a dotted name (``content.body``) is looked up as
a literal key first, then as a path through nested objects. A value is text when it is a
string or a list of strings (list items are joined with newlines, in order).

Outcome for one document:

* ``ok``: at least one field holds non-blank text; the texts are fingerprinted together.
  Fields that are missing, null or not text are left out (counted as ignored values).
* ``no_field``: none of the fields is present (or all are null or empty lists, which
  Elasticsearch treats as no value).
* ``non_string``: a field is present but none holds text (a number, an object, ...).
* ``empty``: the fields hold text, but all of it is blank.

Documents that are not ``ok`` get no fingerprint; they are reported, never altered.

The text fingerprinted is the texts of an ``ok`` document joined by newlines
(:func:`document_text`); :func:`compute_fingerprint` is what the indexer writes and what the
proxy computes for a hit that has no stored fingerprint, so both give the same value.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from neardup.fingerprint.fingerprinter import Fingerprinter
from neardup.fingerprint.model import Fingerprint

Outcome = Literal["ok", "no_field", "non_string", "empty"]

_MISSING = object()


@dataclass(frozen=True)
class Texts:
    outcome: Outcome
    texts: tuple[str, ...] = ()
    #: present, non-null field values that are not text (left out of an ``ok`` document)
    ignored_values: int = 0


def field_value(source: Mapping[str, Any], name: str) -> Any:
    """The value at ``name`` (literal key, else dotted path), or ``_MISSING``."""
    if name in source:
        return source[name]
    node: Any = source
    for part in name.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return _MISSING
        node = node[part]
    return node


def as_text(value: Any) -> str | None:
    """A string, or a list of strings joined by newlines; ``None`` for anything else."""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and value and all(isinstance(item, str) for item in value):
        return "\n".join(value)
    return None


def document_texts(source: Mapping[str, Any], fields: Sequence[str]) -> Texts:
    """Classify a ``_source`` and collect the texts to fingerprint, in field order."""
    present = 0
    texts: list[str] = []
    ignored = 0
    for name in fields:
        value = field_value(source, name)
        if value is _MISSING or value is None or value == []:
            continue
        present += 1
        text = as_text(value)
        if text is None:
            ignored += 1
        else:
            texts.append(text)
    if present == 0:
        return Texts("no_field")
    if not texts:
        return Texts("non_string", ignored_values=ignored)
    if not any(text.strip() for text in texts):
        return Texts("empty", ignored_values=ignored)
    return Texts("ok", tuple(texts), ignored)


def document_text(source: Mapping[str, Any], fields: Sequence[str]) -> tuple[Outcome, str | None]:
    """The outcome for ``source`` and, when it is ``ok``, the text fingerprinted: its texts
    joined by newlines, in field order."""
    texts = document_texts(source, fields)
    return texts.outcome, "\n".join(texts.texts) if texts.outcome == "ok" else None


def compute_fingerprint(source: Mapping[str, Any], fields: Sequence[str],
                        fingerprinter: Fingerprinter) -> tuple[Outcome, Fingerprint | None]:
    """The outcome for ``source`` and, when it holds text, its fingerprint."""
    outcome, text = document_text(source, fields)
    return outcome, None if text is None else fingerprinter.fingerprint(text)
