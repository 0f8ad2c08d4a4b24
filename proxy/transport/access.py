"""Which requests the proxy lets through to the upstream: read-only mode and path allow-list.

The rules' grammar is :mod:`neardup.access_rules`. **Read-only mode** admits the requests that
only read (:func:`~neardup.access_rules.is_read`). With both set, a request must pass both.
What they cannot see: the bodies of ``_msearch``, ``_mget``, ``_sql`` or ``_query`` may name
other indices than the path; use Elasticsearch's own security for index-level isolation.

A refused request is answered 403 with Elasticsearch's ``security_exception``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from neardup.access_rules import Rule, is_read, parse_rule, path_segments
from neardup.proxy.transport.errors import ProxyError


@dataclass(frozen=True)
class Policy:
    read_only: bool
    rules: tuple[Rule, ...]

    @property
    def open(self) -> bool:
        return not self.read_only and not self.rules

    def refusal(self, method: str, raw_path: str) -> ProxyError | None:
        """None when the request may go upstream, else the 403 to answer."""
        if self.open:
            return None
        if self.read_only and not is_read(method, raw_path):
            return forbidden(method, raw_path, "the proxy is read-only (proxy.read_only)")
        if self.rules:
            segments = path_segments(raw_path)
            if segments is None or not any(rule.matches(method, segments) for rule in self.rules):
                return forbidden(method, raw_path, "the path is not in proxy.allowed_paths")
        return None


def forbidden(method: str, raw_path: str, why: str) -> ProxyError:
    shown = raw_path if len(raw_path) <= 200 else raw_path[:200] + "..."
    return ProxyError(403, "security_exception",
                      f"action [{method} {shown}] is not allowed through the neardup proxy: {why}")


@functools.lru_cache(maxsize=8)
def policy(read_only: bool, allowed_paths: tuple[str, ...]) -> Policy:
    """The compiled policy of a configuration (cached: the configuration is immutable)."""
    return Policy(read_only, tuple(parse_rule(text) for text in allowed_paths))
