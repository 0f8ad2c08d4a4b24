"""``neardup cluster``: collection-wide near-duplicate clusters, stored in every document.

Every document gets ``neardup.cluster``, the id of its cluster: the single-link clusters of the
documents' fingerprints at a resemblance threshold t. Candidate pairs come from LSH bands of
the MinHash signatures (``b`` bands of ``r`` rows find a pair of resemblance ``s`` with
probability ``1 - (1 - s^r)^b``; :mod:`neardup.fingerprint.lsh`), and a pair is linked when its
resemblance, exact from the texts or estimated from the signatures, is at least t. Ids stay
stable across runs (:func:`neardup.fingerprint.clustering.assign_ids`: a cluster keeps its id while the
member it is named after stays in it; when clusters merge, the larger one's id survives).
Documents with a usable fingerprint also get ``neardup.bands``, their LSH keys, so later runs
find candidates through Elasticsearch itself; documents without one are clusters of their own.

Modules, by role:

* what a run is asked and records: :mod:`.options`, :mod:`.meta` (``_meta.neardup_clusters``,
  ``building`` then ``ready``), :mod:`.result`;
* what it reads and writes per document: :mod:`.documents`, :mod:`.queries`, :mod:`.updates`;
* the run: :mod:`.job` (shared reading and writing), the strategies :mod:`.memory`,
  :mod:`.aggregate` and :mod:`.incremental`, :mod:`.verification` (exact verification of
  candidate pairs), :mod:`.report` (the HTML report), and :mod:`.run`, the entry point;
* the values written at index time and their safety: :mod:`.seeds`, :mod:`.backstop`.
"""
