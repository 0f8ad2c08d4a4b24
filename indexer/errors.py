"""Errors that stop an indexer command, each with one clear message for the user.

:class:`JobError` is what a command prints (without a traceback) before exiting non-zero.
:func:`explain` turns an exception of the Elasticsearch client into such a message: missing
index, bad credentials, unreachable cluster, TLS trouble, or Elasticsearch's own error text.
"""

from __future__ import annotations

from typing import Any

import elastic_transport
from elasticsearch import ApiError

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
    """Elasticsearch stayed unreachable (or overloaded) through every retry."""


def resume_hint() -> str:
    return ("run the same command again to resume "
            "(already-enriched documents are skipped)")


def unreachable_message(url: str, cause: str) -> str:
    return f"Elasticsearch at {url} unreachable ({cause}); {resume_hint()}"


def error_type_and_reason(body: Any) -> tuple[str, str]:
    """``(type, reason)`` of an Elasticsearch error body, or of a bulk item's ``error``."""
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
    """One line saying what went wrong talking to Elasticsearch at ``url``."""
    if isinstance(exc, ApiError):
        status = exc.meta.status
        kind, reason = error_type_and_reason(exc.body)
        if status == 401:
            return (f"Elasticsearch at {url} rejected the credentials (401 {kind}); set "
                    "upstream.username/upstream.password or upstream.api_key "
                    "(NEARDUP_UPSTREAM__USERNAME, ...)")
        if status == 403:
            return (f"Elasticsearch at {url} denied access (403 {kind}: {reason}); the user needs "
                    "the read, write and manage privileges on the index")
        if kind == "index_not_found_exception":
            name = index or (exc.body.get("error", {}).get("index") if isinstance(exc.body, dict) else "")
            return f"no such index: {name} (at {url})"
        return f"Elasticsearch at {url} answered {status} {kind}: {reason}"
    if isinstance(exc, elastic_transport.TlsError):
        return (f"TLS connection to Elasticsearch at {url} failed ({exc}); check upstream.ca_certs "
                "and upstream.verify_certs")
    if isinstance(exc, elastic_transport.TransportError):
        return unreachable_message(url, type(exc).__name__ + (f": {exc.message}" if exc.message else ""))
    return f"{type(exc).__name__}: {exc}"
