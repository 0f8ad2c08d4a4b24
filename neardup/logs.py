"""Log formats: structured JSON lines for machines that collect logs, and the text lines."""

from __future__ import annotations

import json
import logging
import time


class JsonFormatter(logging.Formatter):
    """One JSON object per record; extra fields passed as ``extra={"fields": {...}}`` are merged."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "@timestamp": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "log.level": record.levelname,
            "log.logger": record.name,
            "message": record.getMessage(),
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            entry.update(fields)
        if record.exc_info:
            entry["error.stack_trace"] = self.formatException(record.exc_info)
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
        second = self._second
        if second[0] != int(record.created):
            text = time.strftime(self.default_time_format, self.converter(record.created))
            second = self._second = (int(record.created), text)
        return self.default_msec_format % (second[1], record.msecs)
