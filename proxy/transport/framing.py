"""HTTP details of a transparent proxy: hop-by-hop headers, content types, gzip.

Hop-by-hop headers (RFC 9110 §7.6.1: ``Connection`` and the headers it names, ``Keep-Alive``,
``Proxy-*``, ``TE``, ``Trailer``, ``Transfer-Encoding``, ``Upgrade``) describe one connection
and are never forwarded; ``Host`` is the upstream's, and ``Expect: 100-continue`` is answered by
the proxy's own server (the body is then sent upstream complete). The proxy's own control
headers (``X-Neardup*``) are read by it and never forwarded. Everything else passes unchanged.
"""

from __future__ import annotations

import functools
import gzip
import re
import zlib
from collections.abc import Callable, Iterable, Mapping

from aiohttp import web
from isal import isal_zlib

from neardup.proxy.transport import errors
from neardup.proxy.transport.engine import engine_of_request

HOP_BY_HOP = frozenset({"connection", "keep-alive", "proxy-authenticate", "proxy-authorization",
                        "proxy-connection", "te", "trailer", "trailers", "transfer-encoding",
                        "upgrade", "host", "expect"})
#: The proxy's own request headers (``X-Neardup``, ``X-Neardup-Threshold``...): read by the
#: proxy, never forwarded.
CONTROL_HEADER_PREFIX = "x-neardup"
_COMPAT = re.compile(r"compatible-with\s*=\s*(\d+)", re.I)


def is_control_header(name: str) -> bool:
    return name.lower().startswith(CONTROL_HEADER_PREFIX)


def _connection_tokens(headers: Mapping[str, str]) -> set[str]:
    tokens: set[str] = set()
    for value in headers.getall("Connection", []) if hasattr(headers, "getall") else []:
        tokens.update(t.strip().lower() for t in value.split(",") if t.strip())
    return tokens


def _not_forwarded(headers: Mapping[str, str], drop: Iterable[str]) -> frozenset[str] | set[str]:
    """Lower-case names of the headers that stay behind: hop-by-hop, those ``Connection``
    names, and ``drop`` (one pass over ``Connection`` only when there is one)."""
    drop = tuple(drop)
    if "Connection" not in headers:
        return _hop_by_hop_and(drop)
    return HOP_BY_HOP | _connection_tokens(headers) | {d.lower() for d in drop}


@functools.lru_cache(maxsize=64)
def _hop_by_hop_and(drop: tuple[str, ...]) -> frozenset[str]:
    return HOP_BY_HOP | {d.lower() for d in drop}


def request_headers(headers: Mapping[str, str], drop: Iterable[str] = ()) -> list[tuple[str, str]]:
    """The client's headers to send upstream, in order, duplicates kept."""
    dropped = _not_forwarded(headers, drop)
    return [(name, value) for name, value in headers.items()
            if (lower := name.lower()) not in dropped and not lower.startswith(CONTROL_HEADER_PREFIX)]


def response_headers(headers: Mapping[str, str], drop: Iterable[str] = ()) -> list[tuple[str, str]]:
    """The upstream's response headers to send to the client."""
    dropped = _not_forwarded(headers, drop)
    return [(name, value) for name, value in headers.items() if name.lower() not in dropped]


def is_json(content_type: str | None) -> bool:
    """``application/json`` or ``application/vnd.elasticsearch+json`` (any parameters)."""
    if not content_type:
        return False
    media = content_type.split(";", 1)[0].strip().lower()
    return media in ("application/json", "application/vnd.elasticsearch+json")


def is_ndjson(content_type: str | None) -> bool:
    if not content_type:
        return False
    media = content_type.split(";", 1)[0].strip().lower()
    return media in ("application/x-ndjson", "application/vnd.elasticsearch+x-ndjson",
                     "application/json", "application/vnd.elasticsearch+json")


def json_content_type_for(accept: str | None, compatible: bool = True) -> str:
    """Content-Type for a JSON body the proxy writes upstream, matching the client's Accept.

    Elasticsearch wants the same ``compatible-with`` version on Accept and Content-Type; an
    engine that does not read them (``compatible`` false: OpenSearch) gets plain JSON.
    """
    match = _COMPAT.search(accept or "") if compatible else None
    if match:
        return f"application/vnd.elasticsearch+json; compatible-with={match.group(1)}"
    return "application/json"


def ndjson_content_type_for(accept: str | None, compatible: bool = True) -> str:
    """Content-Type for an NDJSON body the proxy writes upstream (``_msearch``); plain NDJSON
    for an engine that does not read ``compatible-with`` (``compatible`` false)."""
    match = _COMPAT.search(accept or "") if compatible else None
    if match:
        return f"application/vnd.elasticsearch+x-ndjson; compatible-with={match.group(1)}"
    return "application/x-ndjson"


def accepts_gzip(accept_encoding: str | None) -> bool:
    """Whether ``Accept-Encoding`` allows gzip, with the precedence of Elasticsearch's HTTP
    layer (Netty's ``HttpContentCompressor``): the quality of an explicit ``gzip``/``x-gzip``
    entry (the highest), else that of ``*``; allowed when above 0 (a malformed ``q`` counts as
    0). The proxy writes gzip or nothing: where Netty would pick deflate or snappy, or parses a
    header more loosely, the client gets identity or gzip, both of which it accepts."""
    explicit: float | None = None
    star: float | None = None
    for item in (accept_encoding or "").split(","):
        coding, _, params = item.strip().partition(";")
        coding = coding.strip().lower()
        if coding in ("gzip", "x-gzip"):
            explicit = max(explicit or 0.0, _quality(params))
        elif coding == "*":
            star = _quality(params)
    chosen = explicit if explicit is not None else star
    return chosen is not None and chosen > 0


def _quality(params: str) -> float:
    params = params.replace(" ", "").lower()
    if not params.startswith("q="):
        return 1.0
    try:
        return float(params[2:])
    except ValueError:
        return 0.0


def decode_body(data: bytes, content_encoding: str | None, limit: int) -> bytes:
    """Undo gzip/deflate request encoding, refusing more than ``limit`` bytes once decoded."""
    coding = (content_encoding or "").strip().lower()
    if coding in ("", "identity"):
        return data
    if coding not in ("gzip", "x-gzip", "deflate"):
        raise errors.illegal_argument(f"unsupported Content-Encoding [{content_encoding}]")
    wbits = 16 + zlib.MAX_WBITS if coding != "deflate" else zlib.MAX_WBITS
    decoder = zlib.decompressobj(wbits)
    try:
        out = decoder.decompress(data, limit + 1)
    except zlib.error as exc:
        raise errors.illegal_argument(f"request body is not valid {coding}: {exc}") from None
    if len(out) > limit or decoder.unconsumed_tail:
        raise errors.body_too_large(None, limit)
    return out


#: The gzip level of the answers the proxy writes itself (collapsed pages, its own errors);
#: what it passes through keeps Elasticsearch's own compressed bytes. ISA-L's level 1 (of 0-3)
#: rather than zlib at Elasticsearch's default ``http.compression_level`` 3: on search answers,
#: mostly base64 signatures and text, it compresses about as well for a fraction of the CPU, and
#: compressing is most of what a gzip client costs the proxy (docs/benchmarks.md, "Proxy").
GZIP_LEVEL = 1


def gzip_bytes(data: bytes) -> bytes:
    """``data`` gzipped by ISA-L at :data:`GZIP_LEVEL` (no file name, modification time 0)."""
    return isal_zlib.compress(data, GZIP_LEVEL, wbits=16 + zlib.MAX_WBITS)


def encoded_for(request: web.BaseRequest, response: web.Response) -> web.Response:
    """``response`` (a whole body the proxy wrote itself) gzipped when the client accepts gzip,
    as Elasticsearch compresses every answer then, errors included."""
    if accepts_gzip(request.headers.get("Accept-Encoding")) and isinstance(response.body, bytes):
        response.body = gzip_bytes(response.body)
        response.headers["Content-Encoding"] = "gzip"
    return response


def gunzip_response(data: bytes, content_encoding: str | None) -> bytes:
    coding = (content_encoding or "").strip().lower()
    if coding in ("gzip", "x-gzip"):
        return gzip.decompress(data)
    if coding == "deflate":
        return zlib.decompress(data)
    return data


#: The app's ``proxy.max_body_bytes``, for :func:`expect_continue` (set by ``create_app``).
MAX_BODY_BYTES = web.AppKey("max_body_bytes", int)
#: Called with each request whose ``Expect`` :func:`expect_continue` refuses, and the refusal:
#: the app's metrics and access log (set by ``create_app``; aiohttp answers before middleware).
EXPECT_REFUSED: web.AppKey[Callable[[web.Request, web.StreamResponse], None]] = web.AppKey("expect_refused")


async def expect_continue(request: web.BaseRequest) -> web.StreamResponse | None:
    """The ``Expect`` header, as aiohttp's default handles it (``100-continue`` on HTTP/1.1 gets
    the interim answer), except that any other expectation gets Elasticsearch's error format:
    aiohttp runs this before the middleware, and its default answers a plain-text 417."""
    expect = request.headers.get("Expect", "")
    if request.version != (1, 1):
        return None
    if expect.lower() == "100-continue":
        limit = request.app.get(MAX_BODY_BYTES) if isinstance(request, web.Request) else None
        try:
            if limit is not None:
                errors.check_declared_length(request.content_length, limit)
        except errors.ProxyError as too_large:
            # As Elasticsearch does: 413 instead of 100, so the client never sends a body that
            # would be refused.
            return _refuse_expectation(request, too_large)
        await request.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        request.writer.output_size = 0   # the body's answer has not started yet
        return None
    return _refuse_expectation(request, errors.ProxyError(
        417, "illegal_argument_exception", "unsupported Expect header: only 100-continue is accepted"))


def _refuse_expectation(request: web.BaseRequest, error: errors.ProxyError) -> web.StreamResponse:
    response = encoded_for(request, errors.error_response(error, engine=engine_of_request(request)))
    response.force_close()   # the client may send the body anyway: do not read it as a request
    if isinstance(request, web.Request):
        hook = request.app.get(EXPECT_REFUSED)
        if hook is not None:
            hook(request, response)
    return response

