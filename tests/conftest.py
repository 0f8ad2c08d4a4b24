"""Fixtures shared by the whole suite live in tests/plugins/ (one module per kind of fixture)."""

import importlib.abc
import logging
import sys
from collections.abc import Iterator, Sequence
from types import ModuleType

import pytest


class _SubPackagesOnlyThroughNeardup(importlib.abc.MetaPathFinder):
    """``fingerprint/``, ``indexer/`` and ``proxy/`` are neardup's sub-packages. The checkout's
    root is on ``sys.path`` during tests, so ``import proxy`` would load a second copy that an
    installed neardup does not have: refuse it, so such a name fails here and not at a user's."""

    def find_spec(self, fullname: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> None:
        if fullname.partition(".")[0] in ("fingerprint", "indexer", "proxy"):
            raise ModuleNotFoundError(f"import neardup.{fullname}, not {fullname}", name=fullname)
        return None


sys.meta_path.insert(0, _SubPackagesOnlyThroughNeardup())

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
