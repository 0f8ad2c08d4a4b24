"""Retrying transient failures of the cluster with exponential backoff and jitter.

Transient: connection refused or reset, timeouts, and the statuses 429 (too many requests,
also bulk rejections), 502, 503 and 504. Anything else (400, 401, 403, 404, 409 ...) is a
real answer and is raised at once.

The wait before retry ``k`` (0-based) is drawn uniformly from ``[d/2, d]`` with
``d = min(cap, base · 2^k)``: exponential growth, with jitter so that several workers hit
by the same outage do not retry in lockstep. After ``max_retries`` retries the call raises
:class:`~neardup.indexer.errors.Unreachable` whose message says how to resume.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from neardup.indexer.errors import (
    ClusterApiError,
    ClusterConnectionError,
    ClusterTlsError,
    Unreachable,
    unreachable_message,
)

log = logging.getLogger(__name__)

T = TypeVar("T")

TRANSIENT_STATUSES = frozenset({429, 502, 503, 504})


def is_transient(exc: BaseException) -> bool:
    """Worth retrying: the cluster may answer normally a little later."""
    if isinstance(exc, ClusterApiError):
        return exc.status in TRANSIENT_STATUSES
    if isinstance(exc, ClusterTlsError):
        return False  # a certificate problem does not heal by waiting
    return isinstance(exc, ClusterConnectionError)


def backoff_delay(attempt: int, base: float, cap: float, rng: random.Random) -> float:
    """Seconds to wait before retry ``attempt`` (0-based): uniform in ``[d/2, d]``, ``d = min(cap, base·2^attempt)``."""
    ceiling = min(cap, base * (2 ** attempt))
    return rng.uniform(ceiling / 2, ceiling)


@dataclass
class Retrier:
    """Calls a function, retrying transient failures; counts the retries it made."""

    url: str
    max_retries: int
    base_delay: float = 0.5
    max_delay: float = 30.0
    sleep: Callable[[float], None] = time.sleep
    rng: random.Random = field(default_factory=random.Random)
    retries: int = 0
    #: level of the line logged before each retry (a follower reports outages itself)
    log_level: int = logging.WARNING

    def call(self, what: str, fn: Callable[[], T]) -> T:
        """``fn()``; transient failures are retried, a lasting one raises :class:`Unreachable`."""
        attempt = 0
        while True:
            try:
                return fn()
            except Exception as exc:  # noqa: BLE001 - classified right below
                if not is_transient(exc):
                    raise
                if attempt >= self.max_retries:
                    raise Unreachable(unreachable_message(
                        self.url, f"{what} failed {attempt + 1} times, last: {short_cause(exc)}")) from None
                delay = self.wait(attempt)
                log.log(self.log_level, "%s: %s; retry %d of %d in %.1fs", what, short_cause(exc),
                        attempt + 1, self.max_retries, delay)
                attempt += 1

    def wait(self, attempt: int) -> float:
        """Sleep before retry ``attempt`` and return how long it was."""
        delay = backoff_delay(attempt, self.base_delay, self.max_delay, self.rng)
        self.retries += 1
        self.sleep(delay)
        return delay


def short_cause(exc: BaseException) -> str:
    if isinstance(exc, ClusterApiError):
        return f"{exc.status} {exc.error_type}: {exc.reason}"[:300]
    if isinstance(exc, ClusterConnectionError):
        return f"{type(exc).__name__}: {exc.message}"[:300]
    return f"{type(exc).__name__}: {exc}"[:300]
