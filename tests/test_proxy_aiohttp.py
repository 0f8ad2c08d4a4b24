"""The aiohttp internals behind the proxy's Elasticsearch error bodies, and the fallback.

:mod:`neardup.proxy.server` checks at import that aiohttp's connection handler has what its
overrides use. Where it does not, the proxy serves as plain aiohttp does: everything works, and
a request aiohttp cannot parse gets aiohttp's own plain-text 400 instead of an Elasticsearch
error body. Here the check is forced off to see that fallback serve.
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
from collections.abc import Iterator

import aiohttp
import pytest
from aiohttp import web_protocol
from elasticsearch import Elasticsearch

from neardup.proxy import server
from tests.reliability_support import LogCapture, es_error, parse_raw_response, raw_exchange
from tests.test_proxy_support import ProxyThread, make_config

#: A header line without a colon: aiohttp cannot parse the request and answers it itself.
UNPARSABLE = b"GET /_search HTTP/1.1\r\nHost: localhost\r\nnot a header\r\n\r\n"


def test_the_installed_aiohttp_has_what_the_overrides_use(caplog: pytest.LogCaptureFixture) -> None:
    assert server.MISSING_INTERNALS == ()
    assert server.ELASTIC_ERRORS
    server.warn_plain_errors()
    assert not caplog.records


@dataclasses.dataclass
class OtherErrInfo:
    """A record of a parse failure in another shape than aiohttp's ``_ErrInfo``."""

    status: int
    error: BaseException


def test_internals_in_another_shape_are_found_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(server, "_ErrInfo", OtherErrInfo)
    assert server._missing_internals() == ("web_protocol._ErrInfo(status, exc, message)",
                                          "web_protocol._MsgType (message or _ErrInfo, StreamReader)")
    monkeypatch.undo()
    monkeypatch.delattr(web_protocol, "_MsgType")
    monkeypatch.delattr(web_protocol.RequestHandler, "_current_request")
    assert server._missing_internals() == ("web_protocol._MsgType (message or _ErrInfo, StreamReader)",
                                          "RequestHandler._current_request")


def test_the_fallback_is_announced_once_with_the_aiohttp_version(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(server, "MISSING_INTERNALS", ("RequestHandler._messages",))
    monkeypatch.setattr(server, "ELASTIC_ERRORS", False)
    server.warn_plain_errors()
    [record] = caplog.records
    assert record.levelno == logging.WARNING and record.name == "neardup.proxy"
    assert f"aiohttp {aiohttp.__version__}" in record.getMessage()
    assert "RequestHandler._messages" in record.getMessage()


@pytest.fixture(scope="module")
def index(es: Elasticsearch) -> Iterator[str]:
    name = f"aiohttp-fallback-{uuid.uuid4().hex[:8]}"
    es.index(index=name, id="1", document={"title": "wheat exports rise"}, refresh=True)
    yield name
    es.options(ignore_status=404).indices.delete(index=name)


@pytest.mark.parametrize("elastic_errors", [True, False], ids=["overrides", "fallback"])
def test_the_proxy_serves_with_or_without_the_overrides(
        monkeypatch: pytest.MonkeyPatch, es_url: str, index: str, elastic_errors: bool) -> None:
    monkeypatch.setattr(server, "ELASTIC_ERRORS", elastic_errors)
    with LogCapture() as logs, ProxyThread(make_config(es_url)) as proxy:
        client = proxy.client()
        try:
            assert client.search(index=index, query={"match": {"title": "wheat"}})["hits"]["total"]["value"] == 1
            status, headers, body = parse_raw_response(raw_exchange(proxy.url, UNPARSABLE, timeout=10))
            assert status == 400
            if elastic_errors:
                assert es_error(body) is not None and es_error(body)[0] == "illegal_argument_exception"
            else:   # aiohttp's own answer
                assert headers["content-type"].startswith("text/plain") and es_error(body) is None
            assert client.search(index=index, query={"match": {"title": "wheat"}})["hits"]["total"]["value"] == 1
        finally:
            client.close()
    # Only aiohttp's record of the request it refused: nothing unhandled (asyncio's handler).
    assert all(record.name == "aiohttp.server" for record in logs.errors()), logs.text()
