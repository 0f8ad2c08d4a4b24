"""JSON lines in and out, and ``neardup enrich``.

Input is read as bytes and decoded line by line, so one line that is not UTF-8 is reported
with its number instead of stopping the stream. Blank lines are passed through untouched.

``neardup enrich`` writes exactly one output line per input line, in order:

* a document with text: the same line with ``neardup`` added (spliced in, so every other
  byte is unchanged; see :mod:`indexer.enrich`);
* a document without text (no field, non-string, blank): unchanged, and counted;
* a bad line (not UTF-8, not JSON, not an object): unchanged, and reported on stderr with
  its line number; the exit status is then 1.

Keeping the line count lets a pipeline match output line N to input line N.
"""

from __future__ import annotations

import itertools
import sys
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import IO, Any, BinaryIO

from neardup.fingerprint import Fingerprinter
from neardup.indexer.enrich import EnrichedLine, enrich_line

#: Bad lines reported one by one on stderr before the rest are only counted.
REPORTED_BAD_LINES = 20


@dataclass(frozen=True)
class Line:
    number: int  # 1-based
    raw: bytes  # as read, without the line break
    text: str | None  # decoded, or None if not UTF-8
    error: str = ""


def read_lines(stream: BinaryIO) -> Iterator[Line]:
    for number, raw in enumerate(stream, start=1):
        raw = raw.rstrip(b"\r\n")
        try:
            yield Line(number, raw, raw.decode("utf-8"))
        except UnicodeDecodeError as exc:
            yield Line(number, raw, None, f"not UTF-8 ({exc.reason} at byte {exc.start})")


def open_input(path: str | None) -> BinaryIO:
    """The file at ``path``, or stdin for ``None`` / ``-`` (binary)."""
    if path in (None, "-"):
        return sys.stdin.buffer
    try:
        return open(path, "rb")  # noqa: SIM115 - closed by the caller
    except OSError as exc:
        from neardup.indexer.errors import UsageError

        raise UsageError(f"cannot read {path}: {exc.strerror}") from None


def parse(line: Line, fields: Sequence[str], fingerprinter: Fingerprinter) -> EnrichedLine:
    if line.text is None:
        return EnrichedLine("bad", "", error=line.error)
    return enrich_line(line.text, fields, fingerprinter)


@dataclass
class LineCounts:
    """What happened to the lines of a stream."""

    lines: int = 0
    blank: int = 0
    outcomes: Counter = field(default_factory=Counter)
    bad: list[tuple[int, str]] = field(default_factory=list)

    def add_bad(self, number: int, error: str, errors: IO[str]) -> None:
        self.bad.append((number, error))
        if len(self.bad) <= REPORTED_BAD_LINES:
            print(f"neardup: line {number}: {error}", file=errors)

    def describe(self) -> str:
        o = self.outcomes
        text = (f"{self.lines} lines: {o['ok']} fingerprinted, "
                f"{o['no_field'] + o['non_string'] + o['empty']} without text (no text field "
                f"{o['no_field']}, non-string {o['non_string']}, empty {o['empty']}), "
                f"{len(self.bad)} bad")
        if self.bad:
            text += " (lines " + ", ".join(str(n) for n, _ in self.bad[:10]) + (
                ", ..." if len(self.bad) > 10 else "") + ")"
        return text


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
                parsed = parse(line, fields, fingerprinter)
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
