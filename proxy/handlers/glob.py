"""Elasticsearch's simple wildcard match: ``*`` matches any run of characters, nothing else is special."""

from __future__ import annotations

import re
from functools import lru_cache


@lru_cache(maxsize=4096)
def _compiled(pattern: str) -> re.Pattern[str]:
    return re.compile(".*".join(re.escape(part) for part in pattern.split("*")), re.S)


def glob_match(pattern: str, text: str) -> bool:
    """``Regex.simpleMatch`` / ``Glob.globMatch``: ``*`` is the only wildcard, the match is whole."""
    if "*" not in pattern:
        return pattern == text
    return _compiled(pattern).fullmatch(text) is not None
