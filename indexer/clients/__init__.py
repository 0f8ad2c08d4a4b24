"""The implementations of :class:`neardup.indexer.client.Client`, one an engine, each on that
engine's official client: :mod:`.elasticsearch` (elasticsearch-py) and :mod:`.opensearch`
(opensearch-py, the ``neardup[opensearch]`` extra)."""
