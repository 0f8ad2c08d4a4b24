"""neardup: near-duplicate collapsing for Elasticsearch: the fingerprint core, the indexer, the proxy and their CLI."""

__version__ = "0.1.0"
