"""Shared fixtures that load the real corpora into Elasticsearch through the indexer.

Owned by the indexer area; empty until its fixtures land.
"""
