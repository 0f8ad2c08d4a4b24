"""The tests of the proxy's compiled parts (Rust extensions built at install where cargo is)."""

from __future__ import annotations

import os

import pytest


def require_built(built: bool, module: str) -> None:
    """A skip when ``module`` is not built: a failure under CI, whose machine has cargo to build it."""
    if not built:
        message = f"{module} is not built: install cargo, then `make install`"
        if os.environ.get("CI"):
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
