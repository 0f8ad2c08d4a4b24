"""Log formats: structured JSON lines for machines that collect logs, and the text lines.

:func:`direct_handler`, :func:`format_direct` and :func:`write_direct` write a line the way ``logger.info`` would,
without making a :class:`logging.LogRecord` (its caller lookup, its many attributes): for a
line per request, when the logger's configuration is the plain one the CLI sets up.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from typing import Any

#: The text line of the CLI's logging configuration.
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class JsonFormatter(logging.Formatter):
    """One JSON object per record; extra fields passed as ``extra={"fields": {...}}`` are merged."""

    def format(self, record: logging.LogRecord) -> str:
        fields = getattr(record, "fields", None)
        return self.line(record.created, record.msecs, record.levelname, record.name, record.getMessage(),
                         fields if isinstance(fields, dict) else None,
                         self.formatException(record.exc_info) if record.exc_info else None)

    @staticmethod
    def line(created: float, msecs: float, level: str, name: str, message: str,
             fields: dict[str, Any] | None, stack_trace: str | None = None) -> str:
        """The line of a record made at ``created`` (``msecs``: its milliseconds, as a record's)."""
        entry = {
            "@timestamp": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(created)) + f".{int(msecs):03d}Z",
            "log.level": level,
            "log.logger": name,
            "message": message,
        }
        if fields:
            entry.update(fields)
        if stack_trace:
            entry["error.stack_trace"] = stack_trace
        return json.dumps(entry, ensure_ascii=False, default=str)


class TextFormatter(logging.Formatter):
    """:class:`logging.Formatter` with a timestamp string made once a second: the proxy logs a
    line per request, and ``time.strftime`` of every record's second is most of a line's format.
    The lines are the same as the base class's."""

    def __init__(self, fmt: str | None = None, datefmt: str | None = None) -> None:
        super().__init__(fmt, datefmt)
        self._second: tuple[int, str] = (-1, "")   # one tuple: threads see both parts or neither

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:  # noqa: N802
        if datefmt is not None or self.default_msec_format is None:
            return super().formatTime(record, datefmt)
        return self.stamp(record.created, record.msecs)

    def stamp(self, created: float, msecs: float) -> str:
        """The default ``asctime`` of a record made at ``created`` (``msecs``: its milliseconds)."""
        second = self._second
        if second[0] != int(created):
            text = time.strftime(self.default_time_format, self.converter(created))
            second = self._second = (int(created), text)
        return self.default_msec_format % (second[1], msecs)   # type: ignore[operator]


def direct_handler(logger: logging.Logger, level: int) -> logging.StreamHandler[Any] | None:
    """The one handler a record of ``level`` from ``logger`` reaches, when that is a plain
    :class:`logging.StreamHandler` with :class:`JsonFormatter`, or :class:`TextFormatter` in
    :data:`TEXT_FORMAT`, and nothing else could see the record (no filter, no other handler):
    then :func:`format_direct` writes what ``logger.log`` would. None otherwise (for example
    while a test captures the logs)."""
    if logger.disabled or logger.filters or not logger.isEnabledFor(level):
        return None
    found: logging.Handler | None = None
    current: logging.Logger | None = logger
    while current is not None:
        for handler in current.handlers:
            if found is not None:
                return None
            found = handler
        current = current.parent if current.propagate else None
    if type(found) is not logging.StreamHandler or found.filters or found.level > level:
        return None
    formatter = found.formatter
    if type(formatter) is JsonFormatter or (type(formatter) is TextFormatter and formatter.datefmt is None
                                            and formatter._fmt == TEXT_FORMAT):
        return found
    return None


def format_direct(handler: logging.StreamHandler[Any], level: int, name: str, message: str,
                  fields: Callable[[], dict[str, Any]]) -> str:
    """The line ``handler`` (one :func:`direct_handler` found) writes for a record of ``level``
    from logger ``name`` with ``message`` and ``extra={"fields": fields()}``, made now (the text
    line has no fields: ``fields`` is called for a JSON line only)."""
    created = time.time()
    msecs = int((created - int(created)) * 1000) + 0.0   # as logging.LogRecord
    formatter = handler.formatter
    levelname = logging.getLevelName(level)
    if isinstance(formatter, TextFormatter):
        return f"{formatter.stamp(created, msecs)} {levelname} {name}: {message}"
    return JsonFormatter.line(created, msecs, levelname, name, message, fields())


def write_direct(handler: logging.StreamHandler[Any], line: str) -> bool:
    """Write ``line`` as ``handler`` emits a record's; False if that failed (then log the record
    the usual way, which reports the failure as logging does)."""
    handler.acquire()
    try:
        handler.stream.write(line + handler.terminator)
        handler.flush()
    except Exception:  # noqa: BLE001 - reported by the record logged instead
        return False
    finally:
        handler.release()
    return True
