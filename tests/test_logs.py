"""The text log format: the same lines as :class:`logging.Formatter`, timestamps made once a second;
lines written without a LogRecord are the lines logging writes."""

from __future__ import annotations

import io
import logging
import time

import pytest

from neardup.logs import JsonFormatter, TextFormatter, direct_handler, format_direct, write_direct

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


# -- lines written without a LogRecord ------------------------------------------------------------
def _logger(formatter: logging.Formatter, stream: io.StringIO) -> tuple[logging.Logger, logging.StreamHandler]:
    logger = logging.getLogger(f"neardup.test_direct.{id(stream)}")
    logger.handlers.clear()
    logger.propagate = False
    logger.setLevel(logging.INFO)
    handler = logging.StreamHandler(stream)
    handler.setFormatter(formatter)
    logger.addHandler(handler)
    return logger, handler


@pytest.mark.parametrize("formatter", [TextFormatter(FORMAT), JsonFormatter()], ids=["text", "json"])
@pytest.mark.parametrize("created", [1_700_000_000.0, 1_700_000_000.25, 1_700_000_000.9996, 1_700_086_401.5])
def test_a_direct_line_is_the_line_logging_writes(formatter: logging.Formatter, created: float,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(time, "time", lambda: created)
    fields = {"event": "access", "url.path": "/i/_search", "url.query_params": ["neardup"], "neardup.outcome": None}
    direct, logged = io.StringIO(), io.StringIO()
    logger, handler = _logger(formatter, direct)
    assert direct_handler(logger, logging.INFO) is handler
    assert write_direct(handler, format_direct(handler, logging.INFO, logger.name, "GET /i/_search 200 1.2ms ",
                                               lambda: fields))
    other, _ = _logger(formatter, logged)
    other.info("%s %s %s %.1fms %s", "GET", "/i/_search", 200, 1.234, "", extra={"fields": fields})
    assert direct.getvalue() == logged.getvalue().replace(other.name, logger.name)


def test_any_other_configuration_is_left_to_logging() -> None:
    logger, handler = _logger(TextFormatter(FORMAT), io.StringIO())
    assert direct_handler(logger, logging.DEBUG) is None                   # below the level
    logger.addFilter(logging.Filter("x"))
    assert direct_handler(logger, logging.INFO) is None                    # a filter on the logger
    logger.filters.clear()
    handler.addFilter(logging.Filter("x"))
    assert direct_handler(logger, logging.INFO) is None                    # a filter on the handler
    handler.filters.clear()
    logger.addHandler(logging.StreamHandler(io.StringIO()))
    assert direct_handler(logger, logging.INFO) is None                    # a second handler
    for formatter in (TextFormatter("%(message)s"), TextFormatter(FORMAT, "%H:%M"), logging.Formatter(FORMAT)):
        other, handler = _logger(formatter, io.StringIO())
        assert direct_handler(other, logging.INFO) is None                 # another line
    other, _ = _logger(JsonFormatter(), io.StringIO())
    other.disabled = True
    assert direct_handler(other, logging.INFO) is None                     # switched off
