"""JSON in and out: orjson when it can, the standard library when orjson refuses.

orjson rejects a few things Elasticsearch may legally send (integers beyond 64 bits, escaped lone
surrogates); the standard library reads and writes those, so nothing fails only for speed's sake.
Both keep object key order, and both write compact JSON like Elasticsearch does.
"""

from __future__ import annotations

import json
from typing import Any

import orjson


def loads(data: bytes | str) -> Any:
    """Parse JSON; raises ``ValueError`` if it is not JSON (or nested deeper than either
    parser allows: orjson stops at 1024 levels, the standard library at the recursion limit)."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        try:
            return json.loads(data)
        except RecursionError:
            raise ValueError("JSON nested too deeply") from None


def dumps(value: Any, pretty: bool = False) -> bytes:
    """Serialise to UTF-8 JSON bytes; ``pretty`` indents by two spaces."""
    try:
        return orjson.dumps(value, option=orjson.OPT_INDENT_2 if pretty else 0)
    except (TypeError, orjson.JSONEncodeError):
        text = json.dumps(value, indent=2 if pretty else None,
                          separators=None if pretty else (",", ":"))
        return text.encode("ascii")
