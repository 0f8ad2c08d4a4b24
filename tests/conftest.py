"""Fixtures shared by the whole suite live in tests/plugins/ (one module per area)."""

pytest_plugins = ["tests.plugins.elasticsearch", "tests.plugins.corpora"]
