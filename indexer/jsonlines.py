"""JSON lines read as bytes: one :class:`Line` a line, and the count of what became of them.

Input is decoded line by line, so one line that is not UTF-8 is reported with its number
instead of stopping the stream; the raw bytes are kept, so a line can be written or loaded
exactly as it came in.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO, BinaryIO

from neardup.indexer.errors import UsageError

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
        raise UsageError(f"cannot read {path}: {exc.strerror}") from None


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
