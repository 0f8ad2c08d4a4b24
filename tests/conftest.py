"""Fixtures shared by the whole suite live in tests/plugins/ (one module per kind of fixture)."""

import logging
from collections.abc import Iterator

import pytest

pytest_plugins = ["tests.plugins.elasticsearch", "tests.plugins.corpora"]


@pytest.fixture(autouse=True)
def _restore_root_logging() -> Iterator[None]:
    """Tests that run ``neardup.cli.main`` in-process call ``logging.basicConfig(force=True)``,
    which leaves a root handler writing to that test's captured (later closed) stderr; put the
    root logger back so later tests, and proxy threads that outlive a test, log cleanly."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for handler in list(root.handlers):
        if handler not in handlers:
            root.removeHandler(handler)
    for handler in handlers:
        if handler not in root.handlers:
            root.addHandler(handler)
    root.setLevel(level)
