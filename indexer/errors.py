"""Errors that stop an indexer command, each with one clear message for the user.

:class:`JobError` is what a command prints (without a traceback) before exiting non-zero.

The cluster's own failures reach the indexer as :class:`ClusterError`, whatever client talked to
it (:mod:`neardup.indexer.client`): :class:`ClusterApiError` carries the status and the error body
the cluster answered, :class:`ClusterConnectionError` (and its :class:`ClusterTimeout` and
:class:`ClusterTlsError`) says no answer came. :func:`explain` turns one into such a message:
missing index, bad credentials, unreachable cluster, TLS trouble, or the cluster's own error text.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

#: Exit statuses of the indexer commands.
EXIT_OK = 0
EXIT_DOCUMENTS_FAILED = 1  # the job ran; some documents could not be written
EXIT_USAGE = 2  # bad options or configuration
EXIT_STOPPED = 3  # the job could not start or had to stop (see the message)


class JobError(Exception):
    """A condition that stops the command; ``str(exc)`` is the whole message for the user."""

    exit_status = EXIT_STOPPED


class UsageError(JobError):
    """Bad command-line input (exit status 2)."""

    exit_status = EXIT_USAGE


class Unreachable(JobError):
    """The cluster stayed unreachable (or overloaded) through every retry."""


class ClusterError(Exception):
    """A request to the cluster failed (raised by every client of :mod:`neardup.indexer.client`)."""


class ClusterApiError(ClusterError):
    """The cluster answered with an error status; ``body`` is its parsed error answer."""

    def __init__(self, status: int, body: Any) -> None:
        self.status = status
        self.body = body
        self.error_type, self.reason = error_type_and_reason(body)
        super().__init__(f"{status} {self.error_type}: {self.reason}")


class ClusterConnectionError(ClusterError):
    """No answer: connection refused or reset, DNS failure, ..."""

    def __init__(self, message: str) -> None:
        self.message = message
        super().__init__(message)


class ClusterTimeout(ClusterConnectionError):
    """No answer within the request timeout."""


class ClusterTlsError(ClusterConnectionError):
    """The TLS handshake failed (certificate, CA bundle, protocol)."""


@contextmanager
def raising_cluster_errors(translate: Callable[[Exception], ClusterError | None]) -> Iterator[None]:
    """Re-raise an exception of an engine's client as the indexer's error ``translate`` makes of it
    (``translate`` answers None for exceptions that are not the client's: those pass unchanged)."""
    try:
        yield
    except Exception as exc:
        error = translate(exc)
        if error is None:
            raise
        raise error from exc


def resume_hint() -> str:
    return ("run the same command again to resume "
            "(already-enriched documents are skipped)")


def unreachable_message(url: str, cause: str) -> str:
    return f"the cluster at {url} is unreachable ({cause}); {resume_hint()}"


def error_type_and_reason(body: Any) -> tuple[str, str]:
    """``(type, reason)`` of a cluster's error body, or of a bulk item's ``error``."""
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict):
            caused = error.get("caused_by")
            reason = str(error.get("reason") or "")
            cause = str(caused.get("reason") or "") if isinstance(caused, dict) else ""
            if cause and cause not in reason:
                reason = f"{reason}: {cause}" if reason else cause
            return str(error.get("type") or "error"), reason
        if isinstance(error, str):
            return "error", error
    return "error", str(body)


def explain(exc: BaseException, url: str, index: str | None = None) -> str:
    """One line saying what went wrong talking to the cluster at ``url``."""
    if isinstance(exc, ClusterApiError):
        status, kind, reason = exc.status, exc.error_type, exc.reason
        if status == 401:
            return (f"the cluster at {url} rejected the credentials (401 {kind}); set "
                    "upstream.username/upstream.password or upstream.api_key "
                    "(NEARDUP_UPSTREAM__USERNAME, ...)")
        if status == 403:
            return (f"the cluster at {url} denied access (403 {kind}: {reason}); the user needs "
                    "the read, write and manage privileges on the index")
        if kind == "index_not_found_exception":
            error = exc.body.get("error") if isinstance(exc.body, dict) else None
            name = index or (error.get("index") if isinstance(error, dict) else "")
            return f"no such index: {name} (at {url})"
        return f"the cluster at {url} answered {status} {kind}: {reason}"
    if isinstance(exc, ClusterTlsError):
        return (f"TLS connection to the cluster at {url} failed ({exc}); check upstream.ca_certs "
                "and upstream.verify_certs")
    if isinstance(exc, ClusterConnectionError):
        return unreachable_message(url, type(exc).__name__ + (f": {exc.message}" if exc.message else ""))
    if isinstance(exc, ClusterError):
        return f"the cluster at {url}: {exc}"
    return f"{type(exc).__name__}: {exc}"
