"""``neardup enrich``: JSON lines in, the same lines with their fingerprints out.

Exactly one output line per input line, in order, so a pipeline can match output line N to
input line N:

* a document with text: the same line with ``neardup`` added (spliced in, so every other
  byte is unchanged; see :mod:`neardup.indexer.enrich`);
* a document without text (no field, non-string, blank): unchanged, and counted;
* a bad line (not UTF-8, not JSON, not an object): unchanged, and reported on stderr with
  its line number; the exit status is then 1.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import IO, Any, BinaryIO

from neardup.fingerprint import Fingerprinter
from neardup.indexer.enrich import EnrichedLine, enrich_read_line
from neardup.indexer.jsonlines import LineCounts, read_lines

#: ``extras(parsed lines of a chunk) -> extra neardup keys of each`` (the TF-IDF vectors).
Extras = Callable[[Sequence[EnrichedLine]], list[dict[str, Any]]]


def enrich_stream(source: BinaryIO, out: BinaryIO, errors: IO[str], fields: Sequence[str],
                  fingerprinter: Fingerprinter, extras: Extras | None = None,
                  chunk_size: int = 500) -> LineCounts:
    """``neardup enrich``: one output line per input line (see the module docstring).

    With ``extras``, lines are handled ``chunk_size`` at a time and the keys it gives each
    fingerprinted line are added to its ``neardup`` object.
    """
    counts = LineCounts()
    lines = read_lines(source)
    while chunk := list(itertools.islice(lines, chunk_size if extras is not None else 1)):
        parsed_lines: list[EnrichedLine | None] = []
        for line in chunk:
            counts.lines += 1
            parsed = None
            if line.text is not None and not line.text.strip():
                counts.blank += 1
            else:
                parsed = enrich_read_line(line, fields, fingerprinter)
                if parsed.outcome == "bad":
                    counts.add_bad(line.number, parsed.error, errors)
                    parsed = None
                else:
                    counts.outcomes[parsed.outcome] += 1
            parsed_lines.append(parsed)
        usable = [p for p in parsed_lines if p is not None]
        added = iter(extras(usable) if extras is not None and usable else [{} for _ in usable])
        for line, parsed in zip(chunk, parsed_lines):
            out.write((line.raw if parsed is None else parsed.render(next(added)).encode("utf-8")) + b"\n")
    out.flush()
    return counts
