"""``neardup cluster``: collection-wide near-duplicate clusters, stored in every document.

Every document of the index gets ``neardup.cluster``, a keyword naming its cluster: the
single-link clusters of the documents' fingerprints at a resemblance threshold, found with
LSH (:mod:`fingerprint.clustering`), with ids that stay stable across runs
(:func:`fingerprint.clustering.assign_ids`). Documents with a usable fingerprint also get
``neardup.bands``, their LSH keys (:mod:`fingerprint.lsh`), so that later runs can find
candidates through Elasticsearch itself. Documents without a usable fingerprint are clusters
of their own (every document needs a value: native ``collapse`` would put all documents
without one into a single group).

Strategies (``--mode``):

* ``memory``: read ``v``, ``sig``, ``n`` and the stored cluster values of every document
  (point in time, one slice per worker thread, ``_source`` filtered to ``neardup.*``), cluster
  in memory, write what changed. About K·8 + 300 bytes of memory per document. Candidate pairs
  are verified on the exact resemblance of the documents' texts, read back for the candidates
  only (``--verify text``, the default; :mod:`indexer.cluster.verification`), or on the signatures
  (``--verify signature``). The other strategies verify on the signatures.
* ``aggregate`` (:mod:`indexer.cluster.aggregate`): for indices larger than one machine holds.
  The band keys are written first, then a ``composite`` aggregation over ``neardup.bands``
  (computed by the cluster across its shards) lists the keys held by more than one document;
  the job fetches those buckets' members a batch at a time, verifies and merges. Memory: one
  batch of fingerprints plus an id and a link for each document that has a candidate.
* ``auto`` (default): ``memory`` unless the index is larger than ``--memory-limit`` allows.

``--incremental``: only documents without a cluster (new ones, or newly fingerprinted) are
read; their candidates are looked up by their band keys (a ``terms`` query on
``neardup.bands``), and they join the cluster of the documents they link to, merging clusters
they bridge (the id of the larger survives; the other members are rewritten). Clusters not
touched are not read or written. Needs a complete earlier full run with the same threshold
and scheme (recorded in the index mapping's ``_meta``).

Writes are the indexer's conditional partial updates (:mod:`indexer.writer`): only
``neardup.cluster`` and ``neardup.bands`` change, only where they differ from what is stored,
each conditional on the ``_seq_no`` read. A document changed meanwhile is re-read: if its
fingerprint is the same, the update is retried; if not, it is left for the next run.

Seeds: until an index is first clustered, the indexer (``neardup index``, ``neardup load``)
writes with every fingerprint the values a singleton gets here (``cluster`` = the document's
key, ``bands`` = its keys for the default threshold; :mod:`indexer.cluster.seeds`). The first
full run (no index had ``_meta.neardup_clusters`` when it started) takes no stored value as a
previous id (:meth:`Job.previous_ids`), so its ids are those of a first run without seeds (the
smallest member key), also when only some documents have a seed; it compares what it computed
with what is stored as always, so it writes only what differs: the members that join another
member's cluster (475 of 19,043 stories on Reuters, instead of all of them), and documents
without a seed (loaded by another program, fingerprinted by ``neardup enrich``, or without a
fingerprint).

The index mapping's ``_meta.neardup_clusters`` records the threshold, mode, scheme version and
LSH parameters the clusters were built for, and ``state``: ``building`` from the start of a full
run (put together with the missing ``neardup`` sub-fields, in one put-mapping request *before*
the run's refresh and point in time: from then on the indexer writes no seeds, and withdraws
the seeds it wrote that this run may not have seen; see :mod:`indexer.cluster.seeds`), ``ready``
when every document holds its value (put after the final refresh, so that whoever reads
``ready`` also finds the values searchable; an incremental run skips it when nothing was written).
The proxy collapses natively on ``neardup.cluster`` only when the state is ``ready``, the
threshold and scheme match, and no document lacks a value. Before ``ready``, a full run
withdraws the cluster values of documents changed after its reading that it cannot vouch for
(seeds of an indexer worker that died before its check, say; :mod:`indexer.cluster.backstop`):
they count as new, for the next ``--incremental``.
"""
