"""The text log format: the same lines as :class:`logging.Formatter`, timestamps made once a second."""

from __future__ import annotations

import logging

from neardup.logs import TextFormatter

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def record(created: float) -> logging.LogRecord:
    entry = logging.LogRecord("neardup.proxy.access", logging.INFO, __file__, 1, "%s %s", ("GET", "/"), None)
    entry.created = created
    entry.msecs = (created - int(created)) * 1000
    return entry


def test_text_lines_are_the_standard_formatters_across_seconds() -> None:
    ours, standard = TextFormatter(FORMAT), logging.Formatter(FORMAT)
    for created in (1_700_000_000.0, 1_700_000_000.25, 1_700_000_000.999, 1_700_000_001.5,
                    1_700_000_000.5, 1_700_086_400.001):
        assert ours.format(record(created)) == standard.format(record(created))


def test_an_own_date_format_is_the_standard_formatters() -> None:
    ours, standard = TextFormatter(FORMAT, "%H:%M"), logging.Formatter(FORMAT, "%H:%M")
    assert ours.format(record(1_700_000_000.5)) == standard.format(record(1_700_000_000.5))
