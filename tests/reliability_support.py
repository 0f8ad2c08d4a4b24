"""Helpers of the reliability tests (tests/test_faults*.py, tests/test_hostile*.py, tests/test_security.py).

* :func:`fetch`: one HTTP/1.1 request with :mod:`http.client`, telling a complete response
  apart from one that broke off (the property the proxy must keep: a client can always tell).
* :func:`raw_exchange`: arbitrary request bytes over a socket (invalid UTF-8, bad framing).
* :func:`es_error`: the ``(type, reason)`` of an Elasticsearch-style error body, or None.
* :class:`LogCapture`: every log record of the process while active, formatted as the JSON
  log lines the proxy writes (message, extra fields, stack traces).
* :func:`fuzz_examples` / :data:`FUZZ_COUNTS`: hypothesis example budgets (bounded by default,
  ``NEARDUP_FUZZ_LONG=1`` for the long run) and the count of cases run, printed at the end of
  the session.
"""

from __future__ import annotations

import collections
import gzip
import http.client
import json
import logging
import os
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import pytest

from neardup.logs import JsonFormatter


@dataclass
class Outcome:
    """What a client saw: a complete response (``status`` set) or a failure (``error``)."""

    status: int | None = None
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    error: str | None = None       # exception type name when no complete response arrived
    got_status_line: bool = False  # the failure came after the status line (a broken-off body)
    started: float = 0.0
    elapsed: float = 0.0

    @property
    def complete(self) -> bool:
        return self.error is None

    @property
    def content(self) -> bytes:
        """The body with its ``Content-Encoding`` (gzip) undone, as a client reads it; the bytes
        as received when they are not what the header says."""
        if self.headers.get("content-encoding", "").lower() in ("gzip", "x-gzip"):
            try:
                return gzip.decompress(self.body)
            except (OSError, EOFError):
                return self.body
        return self.body

    def json(self) -> Any:
        return json.loads(self.content)


def fetch(url: str, method: str, path: str, body: bytes | None = None,
          headers: dict[str, str] | None = None, timeout: float = 60.0) -> Outcome:
    """Send one request on a fresh connection; never raises for network trouble."""
    parts = urlsplit(url)
    outcome = Outcome(started=time.monotonic())
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)
    try:
        connection.request(method, path, body=body, headers=headers or {})
        response = connection.getresponse()
        outcome.got_status_line = True
        outcome.status = response.status
        outcome.headers = {k.lower(): v for k, v in response.getheaders()}
        outcome.body = response.read()
    except (OSError, http.client.HTTPException) as exc:
        outcome.error = type(exc).__name__
        outcome.status = outcome.status if outcome.got_status_line else None
    finally:
        connection.close()
        outcome.elapsed = time.monotonic() - outcome.started
    return outcome


def raw_exchange(url: str, data: bytes, timeout: float = 30.0) -> bytes:
    """Send ``data`` as is and return everything the server sends until it closes (or times out)."""
    parts = urlsplit(url)
    with socket.create_connection((parts.hostname, parts.port), timeout=timeout) as sock:
        sock.sendall(data)
        chunks = []
        try:
            while chunk := sock.recv(65536):
                chunks.append(chunk)
        except (TimeoutError, ConnectionResetError):
            pass
    return b"".join(chunks)


def parse_raw_response(data: bytes) -> tuple[int, dict[str, str], bytes]:
    """Status, headers (lower-case names) and body of one raw HTTP/1.x response (Content-Length)."""
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    if "content-length" in headers:
        body = body[:int(headers["content-length"])]
    return status, headers, body


def es_error(body: bytes) -> tuple[str, str] | None:
    """``(type, reason)`` when ``body`` is an Elasticsearch error object, else None."""
    try:
        value = json.loads(body)
    except (ValueError, RecursionError):
        return None
    if not isinstance(value, dict) or not isinstance(value.get("error"), dict):
        return None
    error = value["error"]
    if not isinstance(error.get("root_cause"), list) or not isinstance(value.get("status"), int):
        return None
    return str(error.get("type")), str(error.get("reason"))


def es_error_type(outcome: Outcome) -> str | None:
    found = es_error(outcome.content)
    return found[0] if found else None


PROXY_FIELDS = ("neardup.group", "neardup.similarity")


def _without_proxy_additions(hit: Any) -> str:
    """A hit as the upstream sent it: the proxy's group key, similarity and ``inner_hits.neardup``
    taken out (and ``fields`` / ``inner_hits`` dropped when that leaves them empty)."""
    if not isinstance(hit, dict):
        return json.dumps(hit, sort_keys=True)
    hit = dict(hit)
    for key, added in (("fields", PROXY_FIELDS), ("inner_hits", ("neardup",))):
        if isinstance(hit.get(key), dict):
            rest = {k: v for k, v in hit[key].items() if k not in added}
            if rest:
                hit[key] = rest
            else:
                del hit[key]
    return json.dumps(hit, sort_keys=True)


def assert_faithful_collapse(collapsed: Any, upstream: Any) -> None:
    """``collapsed`` (a search response the proxy built) shows nothing the upstream search
    response did not hold: the same metadata, and hits that are upstream hits, each once, the
    kept ones in upstream order, the others under a kept one."""
    assert isinstance(collapsed, dict) and isinstance(upstream, dict)
    summary = collapsed["neardup"]
    assert isinstance(summary, dict) and summary["groups"] == len(collapsed["hits"]["hits"])
    for key, value in upstream.items():
        if key not in ("took", "hits"):
            assert collapsed[key] == value, key
    assert {k: v for k, v in collapsed["hits"].items() if k != "hits"} == \
        {k: v for k, v in upstream["hits"].items() if k != "hits"}
    original = [_without_proxy_additions(h) for h in upstream["hits"]["hits"]]
    remaining = list(original)
    last_kept = -1
    for kept in collapsed["hits"]["hits"]:
        shown = _without_proxy_additions(kept)
        position = original.index(shown)       # a kept hit is an upstream hit ...
        assert position > last_kept or original.count(shown) > 1   # ... in upstream order
        last_kept = position
        for hit in [kept] + kept["inner_hits"]["neardup"]["hits"]["hits"]:
            remaining.remove(_without_proxy_additions(hit))   # ValueError: invented or repeated


class LogCapture(logging.Handler):
    """All records of the process (any thread) while installed, as JSON log lines."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []
        self.formatter_ = JsonFormatter()
        self._lock2 = threading.Lock()
        self._levels: dict[str, int] = {}

    def emit(self, record: logging.LogRecord) -> None:
        with self._lock2:
            self.records.append(record)

    def text(self) -> str:
        with self._lock2:
            return "\n".join(self.formatter_.format(r) for r in self.records)

    def errors(self) -> list[logging.LogRecord]:
        with self._lock2:
            return [r for r in self.records if r.levelno >= logging.ERROR]

    def clear(self) -> None:
        with self._lock2:
            self.records.clear()

    def __enter__(self) -> LogCapture:
        root = logging.getLogger()
        root.addHandler(self)
        for name in ("", "neardup", "neardup.proxy", "neardup.proxy.access", "aiohttp"):
            logger = logging.getLogger(name)
            self._levels[name] = logger.level
            logger.setLevel(logging.DEBUG)
        return self

    def __exit__(self, *exc: object) -> None:
        logging.getLogger().removeHandler(self)
        for name, level in self._levels.items():
            logging.getLogger(name).setLevel(level)


# -- fuzzing budgets and the printed count of cases -------------------------------------------
FUZZ_LONG = os.environ.get("NEARDUP_FUZZ_LONG", "") not in ("", "0")
FUZZ_COUNTS: collections.Counter[str] = collections.Counter()


def fuzz_examples(default: int) -> int:
    """Examples per fuzz test: ``default`` (bounded CI run), 20× with ``NEARDUP_FUZZ_LONG=1``,
    or exactly ``NEARDUP_FUZZ_EXAMPLES``."""
    given = os.environ.get("NEARDUP_FUZZ_EXAMPLES", "").strip()
    if given:
        return int(given)
    return default * 20 if FUZZ_LONG else default


class _FuzzSummary:
    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if not FUZZ_COUNTS:
            return
        terminalreporter.section("neardup fuzzing")
        for name, count in sorted(FUZZ_COUNTS.items()):
            terminalreporter.write_line(f"{name}: {count} cases")
        terminalreporter.write_line(f"total: {sum(FUZZ_COUNTS.values())} fuzz cases "
                                    f"({'long' if FUZZ_LONG else 'bounded'} run)")


@pytest.fixture(scope="session")
def fuzz_counts(pytestconfig: pytest.Config) -> Iterator[collections.Counter[str]]:
    """The session's fuzz case counter; a summary of it is printed at the end of the run."""
    if not pytestconfig.pluginmanager.has_plugin("neardup-fuzz-summary"):
        pytestconfig.pluginmanager.register(_FuzzSummary(), "neardup-fuzz-summary")
    yield FUZZ_COUNTS
