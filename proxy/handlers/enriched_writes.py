"""Writes that get their fingerprint in the same request (``[enrich]``; I/O).

For an index matching ``enrich.indices``, each document of a ``_bulk`` ``index``/``create`` item,
of ``_doc`` and of ``_create`` gets the ``neardup`` object ``neardup index`` would store, spliced
into the client's bytes (:mod:`neardup.proxy.handlers.bulk_body`). An update (a ``_bulk``
``update`` item, ``_update``) is never checked for duplicates: its ``upsert`` gets the
fingerprint of its text, and so does its ``doc`` when that holds every ``indexer.fields`` key (the
cluster keys of the old fingerprint cleared); a ``doc`` that changes some of the text but not all
gets ``"neardup": null`` and an inline painless script starts by removing ``neardup``, so that
``neardup index`` (``--follow``) fingerprints the stored result again. For the others:

1. the texts of the documents (``indexer.fields``), fingerprinted on the worker's
   fingerprinting thread (never on the event loop), all of them, without a CPU bound;
2. with ``on_duplicate`` ``tag`` or ``reject``: the candidates of each document in the index
   (one ``_msearch`` with the client's own headers) and among the earlier documents of the same
   request, verified at the index's ``[collapse]`` threshold and mode, by the decision
   ``neardup load --on-duplicate`` makes (:mod:`neardup.fingerprint.matching`);
3. ``tag`` adds ``neardup.duplicate_of`` (``{id, similarity}``; an index that maps it the older
   way, as a keyword, gets the item refused 400 :data:`MAPPING_ERROR` instead); ``reject`` leaves
   the item out of the request sent upstream and answers it 409 ``neardup_duplicate_exception``
   in its place among the engine's own results. A document of the same request that a later
   one duplicates and that has no ``_id`` is given one, so that it can be named.

Each document is counted in ``neardup_proxy_enriched_documents_total`` by outcome.

A body of another type than JSON (NDJSON for ``_bulk``; YAML, CBOR, SMILE), a document that is
no JSON object, that has no text in the fields, or that holds a ``neardup`` key already is sent
as it came (the engine answers for the first kind; ``neardup index`` handles
the last). A request with nothing to change is forwarded byte for byte.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import parse_qsl, quote

from aiohttp import web

from neardup.config import EnrichIndex, collapse_settings_for, enrich_settings_for
from neardup.fingerprint import FIELD, Fingerprint, matching
from neardup.fingerprint.matching import Match, RunIndex
from neardup.fingerprint.texts import document_text
from neardup.proxy.grouping.query_fingerprints import whole_in_thread
from neardup.proxy.handlers import bulk_body, exchange, filter_path
from neardup.proxy.handlers.context import OUTCOME, Incoming, ProxyState, receive
from neardup.proxy.handlers.forward import forward, stream_back
from neardup.proxy.handlers.missing_fingerprints import fingerprinting
from neardup.proxy.handlers.params import join_query, split_query
from neardup.proxy.handlers.write_routes import Write
from neardup.proxy.transport import errors, framing, jsonio
from neardup.proxy.transport.engine import ENGINE

#: Candidates fetched from the index per new document (as ``neardup load``).
MAX_CANDIDATES = 50
#: The error of a tagged document whose index maps ``neardup.duplicate_of`` as a keyword.
MAPPING_ERROR = "neardup_mapping_exception"
#: The counter of enriched documents, by ``outcome``: ``fingerprinted``, ``tagged``, ``rejected``,
#: ``without_text`` (no text in the fields: written as sent), ``fingerprint_removed`` (an update
#: whose text ``neardup index`` fingerprints again).
METRIC = "neardup_proxy_enriched_documents_total"


@dataclass
class Doc:
    """One document of the request that is fingerprinted."""

    position: int            # its item's position in the request
    index: str
    id: str | None
    doc: dict[str, Any]
    text: str
    settings: EnrichIndex
    fingerprint: Fingerprint | None = None
    match: Match | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    refusal: errors.ProxyError | None = None    # not written: a near-duplicate, or a tag the mapping cannot hold


async def write(state: ProxyState, request: web.Request, raw_path: str, query: str,
                target: Write) -> web.StreamResponse:
    """Answer the write ``target``: enriched where ``[enrich]`` says so, else forwarded unchanged."""
    config = state.config.enrich
    content_type = request.headers.get("Content-Type")
    single = target.kind != "bulk"
    if not (framing.is_json(content_type) if single else framing.is_ndjson(content_type)) \
            or (single and (target.index is None or enrich_settings_for(config, target.index) is None)):
        return await forward(request, raw_path, query)
    incoming = await receive(request, raw_path, query, state.config.proxy.max_body_bytes)
    if target.kind == "doc":
        return await _one(state, incoming, target)
    if target.kind == "update":
        return await _update(state, incoming, target)
    return await _bulk(state, incoming, target)


async def _one(state: ProxyState, incoming: Incoming, target: Write) -> web.StreamResponse:
    assert target.index is not None
    request, body = incoming.request, incoming.body
    settings = enrich_settings_for(state.config.enrich, target.index)
    doc = bulk_body.parse_object(body)
    found = _document(state, 0, target.index, target.id, doc, settings)
    if found is None:
        return await forward(request, incoming.raw_path, incoming.query, body=incoming.raw_body)
    await _decide(state, request, [found])
    _count(state, [found])
    if found.refusal is not None:
        request[OUTCOME] = "enriched:rejected"
        raise found.refusal
    return await _send(state, incoming, _spliced(body, found))


async def _update(state: ProxyState, incoming: Incoming, target: Write) -> web.StreamResponse:
    """``_update/<id>``: its body treated as the source line of a ``_bulk`` ``update`` item."""
    assert target.index is not None
    parts = _update_parts(state, 0, target.index, incoming.body, enrich_settings_for(state.config.enrich, target.index))
    if not parts:
        return await forward(incoming.request, incoming.raw_path, incoming.query, body=incoming.raw_body)
    return await _send(state, incoming, (await _updated(state, {0: incoming.body}, parts))[0])


async def _bulk(state: ProxyState, incoming: Incoming, target: Write) -> web.StreamResponse:
    request, body = incoming.request, incoming.body
    parsed = bulk_body.parse_bulk(body)
    docs: list[Doc] = []
    parts: list[UpdatePart] = []
    for position, item in enumerate(parsed.items):
        index = item.index(target.index)
        settings = enrich_settings_for(state.config.enrich, index) if index is not None else None
        if item.source is None or index is None or settings is None:
            continue
        start, end = item.source
        if item.action == "update":
            parts += _update_parts(state, position, index, body[start:end], settings)
            continue
        found = _document(state, position, index, item.id, bulk_body.parse_object(body[start:end]), settings)
        if found is not None:
            docs.append(found)
    if not docs and not parts:
        return await forward(request, incoming.raw_path, incoming.query, body=incoming.raw_body)
    named = await _decide(state, request, docs) if docs else {}
    _count(state, docs)
    sources = await _updated(state, {part.position: body[slice(*parsed.items[part.position].source or (0, 0))]
                                     for part in parts}, parts)
    actions: dict[int, bytes] = {}
    for position, doc_id in named.items():
        item = parsed.items[position]
        actions[position] = bulk_body.action_line(item.action, {**item.meta, "_id": doc_id})
    rejected: dict[int, dict[str, Any]] = {}
    for doc in docs:
        if doc.refusal is not None:
            rejected[doc.position] = bulk_body.rejected_item(parsed.items[doc.position].action, doc.index, doc.id,
                                                             doc.refusal.reason, doc.refusal.status, doc.refusal.type)
            continue
        start, end = parsed.items[doc.position].source or (0, 0)
        sources[doc.position] = _spliced(body[start:end], doc)
    new_body = bulk_body.rebuild(parsed, sources, actions, set(rejected))
    if not rejected:
        return await _send(state, incoming, new_body)
    request[OUTCOME] = "enriched:rejected"
    return await _merged(state, incoming, new_body, rejected, len(parsed.items))


async def _merged(state: ProxyState, incoming: Incoming, body: bytes, rejected: dict[int, dict[str, Any]],
                  count: int) -> web.StreamResponse:
    """Send the ``_bulk`` ``body`` left after the ``rejected`` items; answer the engine's result
    with theirs merged back. The client's ``filter_path`` is applied to the merged answer (the
    engine gets the request without it: filtered, its ``items`` could not be matched to
    positions); one the proxy cannot apply exactly goes to the engine as it came."""
    request = incoming.request
    pretty = _pretty(incoming.query)
    params = split_query(incoming.query)
    try:
        client_filter = filter_path.parse(next((v for n, v, _ in params if n == "filter_path"), ""),
                                          drop_empty=state.upstream.engine.is_opensearch)
        kept = join_query([param for param in params if param[0] != "filter_path"])
        path_qs = incoming.raw_path + ("?" + kept if kept else "")
    except filter_path.UnsupportedFilterPath:
        client_filter, path_qs = None, incoming.path_qs

    def filtered(value: Any) -> Any:
        return client_filter.apply(value) if client_filter is not None else value

    if not body.strip():
        return exchange.respond(incoming, 200, {"Content-Type": errors.JSON_CONTENT_TYPE},
                                filtered(bulk_body.all_rejected(list(rejected.values()))), pretty)
    reply = await state.upstream.exchange(request.method, path_qs, _headers(request), body)
    try:
        answer = jsonio.loads(framing.gunzip_response(reply.body, reply.headers.get("Content-Encoding")))
    except (OSError, EOFError, ValueError):
        answer = None
    merged = bulk_body.merge_items(answer, rejected, count)
    if merged is None or merged is answer:   # not the engine's usual answer: passed on as it came
        response = web.Response(status=reply.status, body=reply.body)
        for name, value in framing.response_headers(reply.headers):
            response.headers.add(name, value)
        return response
    return exchange.respond(incoming, reply.status, reply.headers, filtered(merged), pretty)


@dataclass(frozen=True)
class UpdatePart:
    """A value of an update's body that the proxy changes: ``upsert`` (the whole document when
    none exists: its fingerprint), ``doc`` holding every ``indexer.fields`` key (the updated
    document's text is its text: its fingerprint, the cluster keys of the old one cleared),
    ``stale`` (a ``doc`` changing part of the text: ``neardup`` null) or ``script`` (the source
    string of an inline painless script: the removal of ``neardup`` put first)."""

    position: int
    span: tuple[int, int]    # of the value within the update's body
    kind: Literal["upsert", "doc", "stale", "script"]
    doc: dict[str, Any] = field(default_factory=dict)
    text: str = ""


def _update_parts(state: ProxyState, position: int, index: str, source: bytes,
                  settings: EnrichIndex | None) -> list[UpdatePart]:
    """The values of an update's body (a ``_bulk`` source line, an ``_update`` body) to change."""
    spans = bulk_body.value_spans(source)
    update = bulk_body.parse_object(source) if spans is not None else None
    if update is None or spans is None or settings is None:
        return []
    fields = state.config.indexer.fields
    parts = []
    doc = update.get("doc")
    if isinstance(doc, dict) and bulk_body.spliceable(doc) and bulk_body.touches(doc, fields):
        _, text = document_text(doc, fields)
        whole = text is not None and all(name in doc for name in fields)
        parts.append(UpdatePart(position, spans["doc"], "doc" if whole else "stale", doc, text or ""))
    upsert = update.get("upsert")
    found = _document(state, position, index, None, upsert if isinstance(upsert, dict) else None, settings)
    if found is not None:
        parts.append(UpdatePart(position, spans["upsert"], "upsert", found.doc, found.text))
    script = bulk_body.inline_script_span(source, update, spans)
    if script is not None:
        parts.append(UpdatePart(position, script, "script"))
    return parts


async def _updated(state: ProxyState, sources: dict[int, bytes], parts: Sequence[UpdatePart]) -> dict[int, bytes]:
    """The update bodies ``sources`` (by position) with their ``parts`` changed."""
    if not parts:
        return {}
    fingerprinted = [part for part in parts if part.kind in ("doc", "upsert")]
    loop = asyncio.get_running_loop()
    fingerprints = await loop.run_in_executor(fingerprinting(state).executor(), whole_in_thread,
                                              [part.text for part in fingerprinted])
    values = {id(part): fingerprint.to_source() for part, fingerprint in zip(fingerprinted, fingerprints)}
    replacements: dict[int, dict[tuple[int, int], bytes]] = {}
    for part in parts:
        source = sources[part.position]
        old = source[part.span[0]:part.span[1]]
        if part.kind == "script":
            new = bulk_body.prepend_to_string(old, bulk_body.REMOVE_FINGERPRINT)
        elif part.kind == "stale":
            new = bulk_body.splice(old, part.doc, None)
        else:
            value = values[id(part)]
            if part.kind == "doc":
                value.update(dict.fromkeys(bulk_body.CLEARED_KEYS))
            new = bulk_body.splice(old, part.doc, value)
        replacements.setdefault(part.position, {})[part.span] = new
        outcome = "fingerprinted" if part.kind in ("doc", "upsert") else "fingerprint_removed"
        state.metrics.inc(METRIC, outcome=outcome)
    return {position: bulk_body.replace_spans(sources[position], spans) for position, spans in replacements.items()}


def _document(state: ProxyState, position: int, index: str, doc_id: str | None, doc: dict[str, Any] | None,
              settings: EnrichIndex | None) -> Doc | None:
    """The document to fingerprint, or None: not enriched, no JSON object, no text, or its own ``neardup``."""
    if settings is None or doc is None or not bulk_body.spliceable(doc):
        return None
    _, text = document_text(doc, state.config.indexer.fields)
    if text is None:
        state.metrics.inc(METRIC, outcome="without_text")
        return None
    return Doc(position, index, doc_id, doc, text, settings)


def _count(state: ProxyState, docs: Sequence[Doc]) -> None:
    """Count the decided ``docs`` by outcome."""
    for doc in docs:
        outcome = "rejected" if doc.refusal is not None else "tagged" if doc.extra else "fingerprinted"
        state.metrics.inc(METRIC, outcome=outcome)


async def _decide(state: ProxyState, request: web.Request, docs: Sequence[Doc]) -> dict[int, str]:
    """Fingerprint ``docs``, then find the duplicates where asked; returns the ``_id`` given to
    each document of the request that a later one duplicates and that had none, by position."""
    worker = fingerprinting(state)
    loop = asyncio.get_running_loop()
    fingerprints = await loop.run_in_executor(worker.executor(), whole_in_thread, [d.text for d in docs])
    for doc, fingerprint in zip(docs, fingerprints):
        doc.fingerprint = fingerprint
    checked = [d for d, fingerprint in zip(docs, fingerprints)
               if d.settings.on_duplicate != "allow" and not fingerprint.is_empty]
    if not checked:
        return {}
    from_index = await _candidates(state, request, checked, worker.version)
    runs: dict[str, RunIndex] = {}
    unnamed: dict[str, Doc] = {}     # run-index key of a document without _id → the document
    named: dict[int, str] = {}
    for doc in checked:
        assert doc.fingerprint is not None
        _, threshold, mode = collapse_settings_for(state.config.collapse, doc.index)
        run = runs.setdefault(doc.index, RunIndex())
        match = matching.find_duplicate(doc.fingerprint, from_index.get(doc.position, []), run, threshold, mode,
                               exclude_id=doc.id)
        if match is not None and match.id in unnamed:
            earlier = unnamed.pop(match.id)
            earlier.id = named[earlier.position] = _new_id()
            match = Match(earlier.id, match.similarity, doc.index)
            run.ids[run.ids.index(f"\0{earlier.position}")] = earlier.id
        if match is not None and doc.settings.on_duplicate == "tag":
            doc.extra[matching.DUPLICATE_OF] = matching.duplicate_of(match)
        elif match is not None:
            doc.refusal = errors.ProxyError(409, bulk_body.DUPLICATE_ERROR, matching.duplicate_reason(match))
        doc.match = match
        if match is None or doc.settings.on_duplicate == "tag":
            key = doc.id if doc.id is not None else f"\0{doc.position}"
            if doc.id is None:
                unnamed[key] = doc
            run.add(key, doc.fingerprint)
    await _check_tag_mappings(state, request, [doc for doc in checked if doc.extra])
    return named


async def _check_tag_mappings(state: ProxyState, request: web.Request, tagged: Sequence[Doc]) -> None:
    """Refuse the ``tagged`` documents of an index that maps ``neardup.duplicate_of`` other than
    as an object (the keyword of older versions): the engine would refuse the object, or a
    dynamic mapping would store it as something else. One field-mapping lookup per index."""
    path = f"{FIELD}.{matching.DUPLICATE_OF}"
    for index in sorted({doc.index for doc in tagged}):
        reply = await state.upstream.exchange(
            "GET", f"/{quote(index, safe=',*')}/_mapping/field/{path}?ignore_unavailable=true",
            exchange.json_headers(request))
        try:
            answer = jsonio.loads(framing.gunzip_response(reply.body, reply.headers.get("Content-Encoding")))
        except (OSError, EOFError, ValueError):
            answer = None
        if reply.status != 200 or not isinstance(answer, dict):
            raise errors.ProxyError(reply.status if reply.status >= 400 else 502, "neardup_mapping_lookup_exception",
                                    "reading the mapping of " + path + " failed: "
                                    + reply.body[:300].decode("utf-8", "replace"))
        mapped = sorted({str(definition.get("type", "object"))
                         for value in answer.values() if isinstance(value, dict)
                         for entry in (value.get("mappings") or {}).values() if isinstance(entry, dict)
                         for definition in (entry.get("mapping") or {}).values() if isinstance(definition, dict)})
        if not mapped:
            continue
        refusal = errors.ProxyError(
            400, MAPPING_ERROR,
            f"[{path}] is mapped as [{', '.join(mapped)}] in [{index}]; on_duplicate tag writes an object "
            f"{{id, similarity}}: map {path} as {json.dumps(matching.DUPLICATE_OF_MAPPING)} "
            "(a new index, then reindex) or set on_duplicate to allow or reject")
        for doc in tagged:
            if doc.index == index:
                doc.refusal = refusal


async def _candidates(state: ProxyState, request: web.Request, docs: Sequence[Doc],
                      version: str) -> dict[int, list[tuple[str, str, Fingerprint]]]:
    """The candidates of each document in its index, by position (one ``_msearch``). An index
    that does not exist yet has none; any other failure of the lookup fails the write."""
    lines = []
    for doc in docs:
        assert doc.fingerprint is not None
        lines.append(json.dumps({"index": doc.index}))
        lines.append(json.dumps(matching.candidate_search(doc.fingerprint.to_source(), version, MAX_CANDIDATES,
                                                 exclude_id=doc.id)))
    body = ("\n".join(lines) + "\n").encode("utf-8")
    headers = exchange.upstream_headers(request, framing.ndjson_content_type_for(
        request.headers.get("Accept"), request.app[ENGINE].reads_compatible_with))
    reply = await state.upstream.exchange("POST", "/_msearch", headers, body)
    try:
        answer = jsonio.loads(framing.gunzip_response(reply.body, reply.headers.get("Content-Encoding")))
    except (OSError, EOFError, ValueError):
        answer = None
    responses = answer.get("responses") if isinstance(answer, dict) else None
    if reply.status != 200 or not isinstance(responses, list) or len(responses) != len(docs):
        raise errors.ProxyError(reply.status if reply.status >= 400 else 502, "neardup_duplicate_lookup_exception",
                                "looking up near-duplicates failed: " + reply.body[:300].decode("utf-8", "replace"))
    found: dict[int, list[tuple[str, str, Fingerprint]]] = {}
    for doc, response in zip(docs, responses):
        error = response.get("error") if isinstance(response, dict) else None
        if error is not None:
            kind = error.get("type") if isinstance(error, dict) else None
            if kind == "index_not_found_exception":
                continue
            raise errors.ProxyError(int(response.get("status", 502)), str(kind or "exception"),
                                    f"looking up near-duplicates in [{doc.index}] failed: {error}")
        found[doc.position] = matching.candidates_from_hits(response["hits"]["hits"])
    return found


def _spliced(source: bytes, doc: Doc) -> bytes:
    assert doc.fingerprint is not None
    return bulk_body.splice(source, doc.doc, {**doc.fingerprint.to_source(), **doc.extra})


def _new_id() -> str:
    return uuid.uuid4().hex


def _headers(request: web.Request) -> list[tuple[str, str]]:
    """The client's headers for the body the proxy rewrote (sent decoded, of the client's type)."""
    return framing.request_headers(request.headers, drop=("content-length", "content-encoding"))


def _pretty(query: str) -> bool:
    return any(name == "pretty" and value.lower() != "false"
               for name, value in parse_qsl(query, keep_blank_values=True))


async def _send(state: ProxyState, incoming: Incoming, body: bytes) -> web.StreamResponse:
    """The rewritten request sent upstream, the engine's answer streamed back unchanged."""
    incoming.request[OUTCOME] = "enriched"
    upstream = await state.upstream.send(incoming.request.method, incoming.path_qs,
                                         _headers(incoming.request), body)
    return await stream_back(incoming.request, upstream, [])
