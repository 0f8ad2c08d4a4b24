"""Shared pytest fixtures, loaded by tests/conftest.py through ``pytest_plugins``."""
