"""The index-time jobs: fingerprint documents (``index``, ``enrich``, ``load``), find their
near-duplicates (``duplicates``), cluster a whole index (:mod:`.cluster`) and find copied
fragments (``copies``). The command line is :mod:`neardup.cli`."""
