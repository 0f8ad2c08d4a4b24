"""Which engine the upstream is, Elasticsearch or OpenSearch, as far as the proxy has learned it.

The proxy answers some requests itself (its own errors) and writes some request bodies itself
(the collapsed searches); both must look as the engine's own would:

* Elasticsearch sends ``X-elastic-product: Elasticsearch`` on every answer; OpenSearch never
  does (3.x sends ``X-OpenSearch-Version`` instead, repeated here on the proxy's own answers).
* Elasticsearch's thread pools reject with ``es_rejected_execution_exception``, OpenSearch's
  with ``rejected_execution_exception``.
* Elasticsearch reads ``application/vnd.elasticsearch+json; compatible-with=N`` request bodies;
  OpenSearch ignores the ``Accept`` of that kind and refuses such a ``Content-Type`` (406), so
  a body the proxy writes goes to OpenSearch as plain ``application/json``.

The engine is learned from the upstream itself: ``GET /`` (``version.distribution`` is
``opensearch`` on OpenSearch, see :func:`neardup.upstream.engine_of`) at start-up and, while it
is unknown, again on a later request (:meth:`Upstream.learn_engine
<neardup.proxy.transport.upstream.Upstream.learn_engine>`); and from the headers of any upstream
answer (:meth:`Engine.note_headers`). Until then the proxy answers as Elasticsearch does.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from neardup.upstream import engine_of

ELASTICSEARCH, OPENSEARCH = "Elasticsearch", "OpenSearch"
PRODUCT_HEADER = "X-elastic-product"
OPENSEARCH_VERSION_HEADER = "X-OpenSearch-Version"


@dataclass
class Engine:
    """The upstream's engine: ``name`` is Elasticsearch's until ``known``."""

    name: str = ELASTICSEARCH
    known: bool = False
    #: OpenSearch's ``X-OpenSearch-Version`` value, as the upstream sends it (3.x), else None.
    version_header: str | None = None

    @property
    def is_opensearch(self) -> bool:
        return self.name == OPENSEARCH

    def note_root(self, body: Any) -> bool:
        """Learn the engine from the answer to ``GET /``; whether it said."""
        version = body.get("version") if isinstance(body, dict) else None
        if not isinstance(version, dict) or not version.get("number"):
            return False
        self.name = OPENSEARCH if engine_of(version) == OPENSEARCH else ELASTICSEARCH
        self.known = True
        return True

    def note_headers(self, headers: Mapping[str, str]) -> None:
        """Learn what an upstream answer's headers tell: each engine marks its answers."""
        if self.known and (self.version_header is not None or not self.is_opensearch):
            return   # nothing more to learn (on the search path's every round)
        opensearch = headers.get(OPENSEARCH_VERSION_HEADER)
        if opensearch is not None:
            self.name, self.known, self.version_header = OPENSEARCH, True, opensearch
        elif not self.known and headers.get(PRODUCT_HEADER) == ELASTICSEARCH:
            self.name, self.known = ELASTICSEARCH, True

    def answer_headers(self) -> dict[str, str]:
        """The headers the engine puts on every answer, for the proxy's own answers."""
        if self.is_opensearch:
            return {OPENSEARCH_VERSION_HEADER: self.version_header} if self.version_header else {}
        return {PRODUCT_HEADER: ELASTICSEARCH}

    @property
    def rejected_type(self) -> str:
        """The error type of a full thread pool queue (the class name less the engine's prefix)."""
        return "rejected_execution_exception" if self.is_opensearch else "es_rejected_execution_exception"

    @property
    def reads_compatible_with(self) -> bool:
        """Whether the engine reads ``application/vnd.elasticsearch+json; compatible-with=N``."""
        return not self.is_opensearch


#: The application's :class:`Engine` (the upstream's, shared by the main and the ops application).
ENGINE: web.AppKey[Engine] = web.AppKey("neardup_engine", Engine)


def engine_of_request(request: web.BaseRequest) -> Engine | None:
    """The :class:`Engine` of the application ``request`` reached, if it reached one."""
    try:
        app = request.app if isinstance(request, web.Request) else None
    except (AttributeError, RuntimeError):   # no route matched yet
        app = None
    return app.get(ENGINE) if app is not None else None
