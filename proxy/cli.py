"""Subcommands of this module (filled in by its issue)."""

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add this module's subcommands to the ``neardup`` parser."""
