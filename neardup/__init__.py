"""neardup: near-duplicate collapsing for Elasticsearch (CLI and configuration shell)."""

__version__ = "0.1.0"
