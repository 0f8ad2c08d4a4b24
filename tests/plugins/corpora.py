"""Shared fixtures that load the real corpora into the cluster (Elasticsearch or OpenSearch) through the indexer.

Fixtures (session scoped):

* ``reuters_docs``: all 21,578 Reuters-21578 stories as dicts (``neardup.corpora.reuters_documents``),
  read once per session. Treat as read-only.
* ``reuters_index``: the name of an index holding every story (``_id`` = the story's NEWID,
  ``_source`` = the dict of ``reuters_docs``), enriched by the real ``neardup index`` command
  (a subprocess, 2 workers) and refreshed. Deleted at the end of the session.
* ``reuters_index_summary``: the JSON summary ``neardup index --json`` printed for it.

Helpers for tests: :func:`neardup_env` (environment pointing the CLI at a node) and
:func:`run_neardup` (run ``python -m neardup`` as a subprocess).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from neardup.corpora import reuters_documents
from tests.engine_support import bulk_load, create_index, delete_index

ROOT = Path(__file__).resolve().parents[2]

#: How long one ``neardup`` command may take in a test before it is considered hung.
COMMAND_TIMEOUT = 900

_SUMMARIES: dict[str, dict[str, Any]] = {}


def neardup_env(es_url: str, **overrides: str) -> dict[str, str]:
    """The current environment with the CLI pointed at ``es_url`` (no other NEARDUP_ overrides)."""
    env = {k: v for k, v in os.environ.items() if not (k.startswith("NEARDUP_") and "__" in k)}
    env.pop("NEARDUP_CONFIG", None)
    env["NEARDUP_UPSTREAM__URLS"] = es_url
    env["NEARDUP_LOGGING__LEVEL"] = "WARNING"
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.update(overrides)
    return env


def run_neardup(args: Sequence[str], es_url: str, *, input: bytes | None = None,
                timeout: float = COMMAND_TIMEOUT, **env_overrides: str) -> subprocess.CompletedProcess[bytes]:
    """Run ``python -m neardup ARGS`` against ``es_url``; output is captured (bytes)."""
    return subprocess.run([sys.executable, "-m", "neardup", *args], input=input, capture_output=True,
                          timeout=timeout, env=neardup_env(es_url, **env_overrides), cwd=ROOT, check=False)


def neardup_json(es: Any, es_url: str, *args: str) -> dict[str, Any]:
    """Run a ``neardup`` command with ``--json`` (it must succeed), refresh its ``--index``
    (``neardup index`` leaves that to the index) and return the parsed summary."""
    result = run_neardup([*args, "--json"], es_url)
    assert result.returncode == 0, result.stderr.decode(errors="replace")
    es.indices.refresh(index=args[args.index("--index") + 1])
    return json.loads(result.stdout)


@pytest.fixture(scope="session")
def reuters_docs() -> list[dict[str, Any]]:
    return list(reuters_documents())


@pytest.fixture(scope="session")
def reuters_index(es: Any, es_url: str, reuters_docs: list[dict[str, Any]]) -> Iterator[str]:
    name = f"indexer-reuters-{uuid.uuid4().hex[:8]}"
    create_index(es, name, settings={"number_of_shards": 2, "number_of_replicas": 0})
    try:
        bulk_load(es, name, reuters_docs)
        result = run_neardup(["index", "--index", name, "--workers", "2", "--json"], es_url)
        if result.returncode != 0:
            pytest.fail(f"neardup index on {name} failed (exit {result.returncode}):\n"
                        f"{result.stdout.decode(errors='replace')}\n{result.stderr.decode(errors='replace')}",
                        pytrace=False)
        _SUMMARIES[name] = json.loads(result.stdout)
        es.indices.refresh(index=name)
        yield name
    finally:
        delete_index(es, name)


@pytest.fixture(scope="session")
def reuters_index_summary(reuters_index: str) -> dict[str, Any]:
    return _SUMMARIES[reuters_index]


def with_seed(value: dict[str, Any], doc_id: str) -> dict[str, Any]:
    """``value`` (a fingerprint's ``neardup`` object) with the cluster seed ``neardup index`` and
    ``neardup load`` write while the index has never been clustered (:mod:`indexer.cluster.seeds`:
    ``cluster`` = the ``_id``, ``bands`` = the LSH keys of the default threshold 0.8)."""
    from neardup.fingerprint import FingerprintParams
    from neardup.indexer.cluster.seeds import SeedPlan

    plan = SeedPlan.for_target("any", 0.8, FingerprintParams(), ["any"])
    return {**value, **plan.values([("any", doc_id, value)])[0]}
