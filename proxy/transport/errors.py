"""The engine's error bodies for the answers the proxy gives itself.

Elasticsearch and OpenSearch answer every failure with::

    {"error": {"root_cause": [{"type": T, "reason": R}], "type": T, "reason": R}, "status": N}

Clients (the official ones included) parse that shape to raise typed exceptions, so every error
the proxy produces, from a bad ``neardup_threshold`` to an unreachable upstream, uses it too,
with the headers the upstream's engine puts on its answers
(:meth:`~neardup.proxy.transport.engine.Engine.answer_headers`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import (
    BadHttpMethod,
    BadStatusLine,
    ContentLengthError,
    HttpProcessingError,
    InvalidHeader,
    InvalidURLError,
    LineTooLong,
    TransferEncodingError,
)

from neardup.proxy.transport import jsonio
from neardup.proxy.transport.engine import ELASTICSEARCH, Engine

JSON_CONTENT_TYPE = "application/json; charset=UTF-8"


@dataclass(frozen=True)
class ProxyError(Exception):
    """A failure the proxy answers itself, with an HTTP status and an Elasticsearch error type."""

    status: int
    type: str
    reason: str

    def __str__(self) -> str:
        return f"{self.status} {self.type}: {self.reason}"

    def body(self) -> dict[str, Any]:
        return error_body(self.status, self.type, self.reason)


def error_body(status: int, error_type: str, reason: str) -> dict[str, Any]:
    """The JSON value of an Elasticsearch error response."""
    cause = {"type": error_type, "reason": reason}
    return {"error": {"root_cause": [cause], **cause}, "status": status}


def error_bytes(status: int, error_type: str, reason: str) -> bytes:
    return jsonio.dumps(error_body(status, error_type, reason))


def illegal_argument(reason: str) -> ProxyError:
    """HTTP 400 ``illegal_argument_exception``, what Elasticsearch answers for a bad parameter."""
    return ProxyError(400, "illegal_argument_exception", reason)


def collapsed_window_too_large(wanted: int, groups: int, hits: int, bound: str) -> ProxyError:
    """HTTP 400 ``illegal_argument_exception`` for a page of near-duplicate groups that the
    result window cannot fill: the first ``hits`` hits (the most ``bound`` allows) hold only
    ``groups`` groups, fewer than ``from + size`` = ``wanted``. Worded as Elasticsearch's own
    refusal of a ``from + size`` over ``index.max_result_window``, with what to do instead."""
    if bound == "index.max_result_window":
        raise_it = "raise the [index.max_result_window] index level setting"
    else:
        raise_it = f'raise [{bound}] or set [collapse.deep_pages] to "extend"'
    return illegal_argument(
        f"Result window is too large for collapsed near-duplicates, from + size must be less than or "
        f"equal to: [{groups}] but was [{wanted}]. The first [{hits}] hits, the most [{bound}] allows, "
        f"hold [{groups}] groups. Lower from + size, page on with search_after (not collapsed), "
        f"{raise_it}, or run `neardup cluster` on the index so that the engine collapses at any depth.")


def body_too_large(size: int | None, limit: int) -> ProxyError:
    seen = f"{size} bytes" if size is not None else f"more than {limit} bytes"
    return ProxyError(413, "content_too_long_exception",
                      f"request body is too large: {seen}, the limit is {limit} bytes "
                      "(proxy.max_body_bytes)")


def check_declared_length(declared: int | None, limit: int) -> None:
    """Raise :func:`body_too_large` when a request declares (``Content-Length``) more than
    ``limit`` bytes of body, before any of it is read."""
    if declared is not None and declared > limit:
        raise body_too_large(declared, limit)


def client_closed() -> ProxyError:
    """The client closed its connection before the whole request body arrived. Nobody reads
    the answer; the 400 keeps it out of the 500s in the metrics and the access log."""
    return illegal_argument("the connection closed before the whole request body arrived")


def rejected(limit: int, engine: Engine | None = None) -> ProxyError:
    """HTTP 429 ``es_rejected_execution_exception`` (OpenSearch: ``rejected_execution_exception``):
    what the engine answers when a thread pool queue is full, so clients back off and retry it
    (the official ones do by default)."""
    return ProxyError(429, (engine or Engine()).rejected_type,
                      f"rejected execution: this proxy worker already handles {limit} requests "
                      f"(proxy.max_in_flight = {limit}); retry later")


#: aiohttp's C parser describes a problem in a few plain words ("Invalid header value char");
#: its pure-Python parser (``AIOHTTP_NO_EXTENSIONS=1``, or no compiled extension) quotes the
#: offending line or value, which may hold a credential. Only plain words are passed on.
_PLAIN_WORDS = re.compile(r"[A-Za-z](?:[A-Za-z0-9 ,.()-]|(?<=[A-Za-z])'(?=[a-z])){0,100}")  # "can't", not "'GET …'"
#: What to say instead, by the exception's class (the first that matches).
_PROBLEM_BY_CLASS: tuple[tuple[type[BaseException], str], ...] = (
    (BadHttpMethod, "invalid method"), (BadStatusLine, "bad request line"),
    (InvalidURLError, "invalid URL"), (InvalidHeader, "invalid header"),
    (ContentLengthError, "invalid Content-Length"), (TransferEncodingError, "invalid transfer encoding"),
)


def malformed_problem(exc: BaseException) -> str:
    """One line naming what is wrong with a request aiohttp could not parse, without the
    offending bytes (they may hold a credential): "Invalid header token", "Invalid method
    encountered", "a request line or header is longer than 8190 bytes"..."""
    if isinstance(exc, LineTooLong):
        return f"a request line or header is longer than {exc.args[1]} bytes"
    text = str(exc.message) if isinstance(exc, HttpProcessingError) and exc.message else ""
    first = text.strip().splitlines()[0].rstrip(": ") if text.strip() else ""
    if first and _PLAIN_WORDS.fullmatch(first):
        return first
    return next((problem for kind, problem in _PROBLEM_BY_CLASS if isinstance(exc, kind)), type(exc).__name__)


def malformed_request(status: int, exc: BaseException | None) -> ProxyError:
    """What the proxy answers to bytes that are not a valid HTTP request (aiohttp's parser
    refused them; ``status`` is the one it chose): ``illegal_argument_exception``, as
    Elasticsearch answers a request it cannot read."""
    problem = malformed_problem(exc) if exc is not None else "malformed"
    return ProxyError(status, "illegal_argument_exception", f"malformed HTTP request: {problem}")


def upstream_unreachable(detail: str, engine: str = ELASTICSEARCH) -> ProxyError:
    return ProxyError(502, "neardup_upstream_unreachable_exception",
                      f"no {engine} node could be reached: {detail}")


def upstream_timeout(seconds: float, engine: str = ELASTICSEARCH) -> ProxyError:
    return ProxyError(504, "neardup_upstream_timeout_exception",
                      f"{engine} did not answer within {seconds:g} s "
                      "(upstream.request_timeout)")


def upstream_broken(detail: str, engine: str = ELASTICSEARCH) -> ProxyError:
    return ProxyError(502, "neardup_upstream_exception",
                      f"the connection to {engine} failed during the request: {detail}")


def internal(detail: str) -> ProxyError:
    return ProxyError(500, "neardup_proxy_exception", f"the proxy failed to handle the request: {detail}")


def error_response(error: ProxyError, pretty: bool = False, engine: Engine | None = None) -> web.Response:
    """The HTTP answer carrying ``error`` in the engine's format, with the headers it puts on
    its answers (Elasticsearch's product header; none of it on OpenSearch); Elasticsearch's
    while the engine is unknown."""
    return web.Response(status=error.status, body=jsonio.dumps(error.body(), pretty=pretty),
                        headers={"Content-Type": JSON_CONTENT_TYPE, **(engine or Engine()).answer_headers()})
