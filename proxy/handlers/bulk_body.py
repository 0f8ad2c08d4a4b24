"""Write bodies for enriched writes: items read, fingerprints spliced in, answers merged (pure).

A ``_bulk`` body is newline-delimited JSON: an action line (``{"index": {...}}``, ``create``,
``update`` or ``delete``), then, but for ``delete``, a source line. :func:`parse_bulk` reads the
items up to the first line it cannot read as an action; from there on the body is sent as it
came and the engine answers for it. Each item keeps the byte spans of its lines, so the body
sent upstream (:func:`rebuild`) is the client's bytes with only the spliced source lines, the
action lines given an ``_id``, and the rejected items changed.

:func:`splice` inserts ``"neardup":{...}`` before the final ``}`` of a document; every other
byte stays as the client sent it. A document that holds ``neardup`` already (or a dotted
``neardup.*`` key) is never spliced (:func:`spliceable`). In an ``update`` item the objects
``upsert`` and ``doc`` are spliced in place (:func:`value_spans`, :func:`replace_spans`); a
partial ``doc`` that :func:`touches` the text gets ``"neardup":null`` (partial updates merge, so
null replaces the stored object), and an inline painless script gets :data:`REMOVE_FINGERPRINT`
before its source (:func:`inline_script_span`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from neardup.fingerprint import CLUSTER_KEYS, FIELD, RETIRED_KEYS
from neardup.fingerprint.splice import value_spans as value_spans  # shared with the indexer

#: The action names of a bulk body.
ACTIONS = frozenset({"index", "create", "update", "delete"})
#: The actions whose source line is the whole document.
WRITES = frozenset({"index", "create"})
#: What a partial update that writes a new fingerprint clears (stored as null, indexed as no
#: value): the keys ``neardup cluster`` derived from the old one, and the retired fingerprint keys.
CLEARED_KEYS = CLUSTER_KEYS + RETIRED_KEYS
#: The per-item error type of a refused near-duplicate.
DUPLICATE_ERROR = "neardup_duplicate_exception"
#: Put before the source of an update's inline painless script: the text it may change loses
#: its stale fingerprint (the JSON string needs no escape for it).
REMOVE_FINGERPRINT = f"ctx._source.remove('{FIELD}');".encode()


@dataclass(frozen=True)
class BulkItem:
    """One action of a bulk body and where its lines are."""

    action: str
    meta: Mapping[str, Any]
    start: int                          # first byte of the action line
    action_end: int                     # end of the action line (its newline excluded)
    end: int                            # after the item's last line and its newline
    source: tuple[int, int] | None = None   # the source line (newline excluded)

    def index(self, default: str | None) -> str | None:
        value = self.meta.get("_index", default)
        return value if isinstance(value, str) and value else None

    @property
    def id(self) -> str | None:
        value = self.meta.get("_id")
        return value if isinstance(value, str) and value else None


@dataclass(frozen=True)
class BulkBody:
    data: bytes
    items: tuple[BulkItem, ...]
    rest: int       # the body from here on is not read: sent as it came


def _line(data: bytes, offset: int) -> tuple[int, int]:
    """(end of the line at ``offset`` without its newline, start of the next line)."""
    end = data.find(b"\n", offset)
    return (len(data), len(data)) if end < 0 else (end, end + 1)


def parse_action(line: bytes) -> tuple[str, dict[str, Any]] | None:
    """``(action, metadata)`` of an action line, or None if it is not one."""
    value = parse_object(line)
    if value is None or len(value) != 1:
        return None
    (name, meta), = value.items()
    return (name, meta) if name in ACTIONS and isinstance(meta, dict) else None


def parse_object(text: bytes) -> dict[str, Any] | None:
    """The JSON object ``text`` (UTF-8), or None if it is anything else or no valid JSON."""
    try:
        value = json.loads(text.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def parse_bulk(data: bytes) -> BulkBody:
    """The items of a bulk body, up to the first line that is not an action (or lacks its source)."""
    items: list[BulkItem] = []
    offset = 0
    while offset < len(data):
        action_end, following = _line(data, offset)
        action = parse_action(data[offset:action_end])
        if action is None:
            break
        name, meta = action
        if name == "delete":
            items.append(BulkItem(name, meta, offset, action_end, following))
            offset = following
            continue
        if following >= len(data):
            break
        source_end, after = _line(data, following)
        items.append(BulkItem(name, meta, offset, action_end, after, (following, source_end)))
        offset = after
    return BulkBody(data, tuple(items), offset)


def spliceable(doc: Mapping[str, Any]) -> bool:
    """Whether ``neardup`` may be spliced into ``doc``: it has no ``neardup`` key of any spelling."""
    return not any(key == FIELD or key.startswith(FIELD + ".") for key in doc)


def touches(doc: Mapping[str, Any], fields: Sequence[str]) -> bool:
    """Whether merging the partial document ``doc`` may change any of ``fields``: it sets one,
    an object above one (``meta`` of ``meta.title``) or a dotted key below one."""
    return any(key == name or name.startswith(key + ".") or key.startswith(name + ".")
               for key in doc for name in fields)


def splice(source: bytes, doc: Mapping[str, Any], value: Mapping[str, Any] | None) -> bytes:
    """``source`` (the JSON text of ``doc``) with ``"neardup": value`` before its final ``}``."""
    brace = len(source.rstrip()) - 1
    if brace < 0 or source[brace:brace + 1] != b"}":
        raise ValueError("a JSON object ends with }")
    field = json.dumps({FIELD: value}, ensure_ascii=False, separators=(",", ":")).encode("utf-8")[1:-1]
    return source[:brace] + (b"," if doc else b"") + field + source[brace:]


def splice_inner(source: bytes, span: tuple[int, int], doc: Mapping[str, Any], value: Mapping[str, Any]) -> bytes:
    """``source`` with :func:`splice` applied to the object at ``span`` (one of its values)."""
    start, end = span
    return replace_spans(source, {span: splice(source[start:end], doc, value)})


def replace_spans(source: bytes, replacements: Mapping[tuple[int, int], bytes]) -> bytes:
    """``source`` with each span (of values that do not overlap) replaced by its new bytes."""
    out = source
    for (start, end), value in sorted(replacements.items(), reverse=True):   # right to left: spans stay valid
        out = out[:start] + value + out[end:]
    return out


def inline_script_span(source: bytes, update: Mapping[str, Any],
                       spans: Mapping[str, tuple[int, int]]) -> tuple[int, int] | None:
    """The span of the source string of the update's inline painless script (``"script": "..."``
    or ``{"source": "...", "lang": "painless"}``, lang left out or painless); None for a stored
    script (``id``), another language or no script."""
    script = update.get("script")
    if isinstance(script, str):
        return spans["script"]
    if not isinstance(script, dict) or not isinstance(script.get("source"), str) \
            or script.get("lang", "painless") != "painless" or "id" in script:
        return None
    start, end = spans["script"]
    inner = value_spans(source[start:end])
    if inner is None:
        return None
    return start + inner["source"][0], start + inner["source"][1]


def prepend_to_string(string: bytes, prefix: bytes) -> bytes:
    """The JSON string ``string`` with ``prefix`` (needing no escape) before its first character."""
    return string[:1] + prefix + string[1:]


def action_line(action: str, meta: Mapping[str, Any]) -> bytes:
    """An action line written by the proxy (when it gives the item an ``_id``)."""
    return json.dumps({action: dict(meta)}, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def rebuild(body: BulkBody, sources: Mapping[int, bytes], actions: Mapping[int, bytes],
            dropped: frozenset[int] | set[int]) -> bytes:
    """The body with item ``k``'s source line replaced by ``sources[k]``, its action line by
    ``actions[k]``, and the items ``dropped`` left out; every other byte as it was."""
    data = body.data
    out = bytearray()
    for position, item in enumerate(body.items):
        if position in dropped:
            continue
        out += actions.get(position, data[item.start:item.action_end])
        if item.source is None:
            out += data[item.action_end:item.end]
            continue
        start, end = item.source
        out += data[item.action_end:start]
        out += sources.get(position, data[start:end])
        out += data[end:item.end]
    out += data[body.rest:]
    return bytes(out)


def rejected_item(action: str, index: str, doc_id: str | None, reason: str,
                  status: int = 409, kind: str = DUPLICATE_ERROR) -> dict[str, Any]:
    """A per-item result in the engine's shape: by default status 409, :data:`DUPLICATE_ERROR`."""
    result: dict[str, Any] = {"_index": index}
    if doc_id is not None:
        result["_id"] = doc_id
    result["status"] = status
    result["error"] = {"type": kind, "reason": reason, "index": index}
    return {action: result}


def merge_items(answer: Any, rejected: Mapping[int, dict[str, Any]], count: int) -> Any:
    """The engine's answer to the body without the ``rejected`` items, with their results put
    back at their positions among the ``count`` items read (items of the unread rest follow).
    An answer without an ``items`` list (the whole request failed) is returned as it is."""
    items = answer.get("items") if isinstance(answer, dict) else None
    if not isinstance(items, list):
        return answer
    upstream = iter(items)
    merged: list[Any] = []
    for position in range(count):
        if position in rejected:
            merged.append(rejected[position])
            continue
        item = next(upstream, None)
        if item is None:
            break
        merged.append(item)
    merged.extend(upstream)
    result = dict(answer)
    result["errors"] = bool(rejected) or bool(answer.get("errors"))
    result["items"] = merged
    return result


def all_rejected(rejected: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The answer to a bulk body whose every item was refused (nothing goes upstream)."""
    return {"errors": True, "took": 0, "items": list(rejected)}
