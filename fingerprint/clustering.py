"""Single-link clustering of N signatures at a threshold, in near-linear time, with LSH.

**What is computed.** Two documents are *linked* when their estimated resemblance
``Ĵ = m / K`` (m equal minhash slots of K) is at least the threshold t; clusters are the
connected components of the link graph (single link: a chain of links joins a cluster).
Empty documents (shingle count 0) are never linked. Exact single-link would compare all
N(N-1)/2 pairs; here only *candidate* pairs are compared: pairs that share a band key or an
extra supershingle key of :class:`~neardup.fingerprint.lsh.Banding`. Every candidate is
verified on the full signatures, so no false link is ever made; a true link is missed only
when the pair shares no key, which for Ĵ ≥ t has probability ``1 - P(candidate | m)``
(≈ 2·10^-6 at t = 0.8, K = 84, r = 5, b = 16; see :mod:`neardup.fingerprint.lsh`). Since
single link needs only *one* path between two members, a cluster is split only if every path
is missed.

**Iterative scheme**: rounds lowering the rows per band. Round k uses bands of ``r_k`` rows,
``r_1 > r_2 > … > r_final`` (:func:`~neardup.fingerprint.lsh.round_rows`), and the labels
(clusters) found so far. In each bucket (documents with an equal key) only
pairs of documents of *different* current clusters are compared: pairs inside one cluster
are already connected, so skipping them does not change the components. Early rounds (many
rows) find the near-identical documents with very few candidates; they merge into clusters,
and later rounds, whose buckets are larger, compare only across clusters. Because the bands
are nested, every candidate of an early round is also a candidate of the final round: the
result equals the components of the final round's verified candidates, whatever the rounds
before it did (they only save work).

**Shortcuts that do not change the result.** Documents with identical signatures (Ĵ = 1)
are joined first, by sorting a hash of the whole signature, without comparing pairs. A
bucket with more cross-cluster pairs than ``STAR_FACTOR`` per member (many near-identical
documents, typical of the first round) is first compared star-wise: its first member with
every member of another cluster; the links found merge clusters, and only the cross-cluster
pairs left are then compared. Both only add verified links and skip pairs whose clusters are
already joined.

**Large buckets.** A bucket whose cross-cluster pairs exceed ``max_pairs_per_bucket`` (a
key shared by very many documents: boilerplate, empty-ish texts) is *capped*: one
representative per current cluster (its smallest document index) is kept and each is
compared with the next ``window`` representatives in document order (the sorted-
neighbourhood method). This bounds the work at ``window`` comparisons per member; links
only reachable through such a bucket may be missed. Capped buckets are counted.

**Verification hook** (``verify``, see :mod:`neardup.fingerprint.verify`). By default a candidate is
linked when its estimate is at least t. With a hook, the candidates whose estimate is at least
``t - margin`` (:attr:`ClusterParams.margin`; the banding should then be chosen for
``t - margin``) are passed to ``verify(i, j, equal_slots)``, which returns their similarity
(e.g. the exact resemblance of the shingle sets); a pair is linked when that similarity is at
least t. Identical signatures are verified too (they are joined only if the hook links them).
Skipping pairs already in one cluster is still exact: clusters are then components of the
links the hook accepted, so the result equals the components of the final round's candidates
that pass the estimate floor and the hook. The function stays pure as long as the hook is.

**Labels.** ``labels[d]`` is the smallest document index in d's cluster (so a document
without links is its own label), as :func:`neardup.fingerprint.group_labels` gives.

Memory: the signatures, one round's keys (N × bands × 8 bytes) and a bounded chunk of
candidate pairs at a time (``chunk_pairs``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field

import numpy as np

from neardup.fingerprint.lsh import Banding, needed_matches, round_rows
from neardup.fingerprint.similarity import group_labels, identical_rows

#: Candidate pairs generated and verified at once (bounds memory: ~K·16 bytes per pair).
CHUNK_PAIRS = 1 << 18
MAX_PAIRS_PER_BUCKET = 500_000
#: Buckets with more cross-cluster pairs than this many per member are linked star-wise first.
STAR_FACTOR = 4
WINDOW = 50
#: Candidates rejected within this much below the threshold are kept as near misses.
NEAR_MARGIN = 0.1
#: Most near-threshold pairs kept (accepted and rejected, each) for the report.
SAMPLE = 2000
#: Tolerance of ``similarity ≥ threshold`` for similarities returned by a verification hook.
VERIFY_EPS = 1e-12

#: ``verify(i, j, equal_slots) -> similarity`` of candidate pairs (see the module docstring).
PairVerifier = Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]


@dataclass(frozen=True)
class ClusterParams:
    """Threshold, banding, and the limits above. ``rounds=False``: one round at the final rows.
    ``margin``: with a verification hook, candidates whose estimate is at least
    ``threshold - margin`` are verified by the hook (without a hook it is not used)."""

    threshold: float
    banding: Banding
    rounds: bool = True
    max_pairs_per_bucket: int = MAX_PAIRS_PER_BUCKET
    window: int = WINDOW
    chunk_pairs: int = CHUNK_PAIRS
    margin: float = 0.0

    def __post_init__(self) -> None:
        if not 0.0 <= self.threshold <= 1.0:
            raise ValueError(f"threshold = {self.threshold!r}: must be from 0 to 1")
        if not 0.0 <= self.margin <= 1.0:
            raise ValueError(f"margin = {self.margin!r}: must be from 0 to 1")
        if self.max_pairs_per_bucket < 1 or self.window < 1 or self.chunk_pairs < 1:
            raise ValueError("max_pairs_per_bucket, window and chunk_pairs must be positive")

    def round_bandings(self) -> list[Banding]:
        """The banding of each round; the last is :attr:`banding` itself (with its extra keys)."""
        if not self.rounds:
            return [self.banding]
        rows = round_rows(self.banding.rows, self.banding.num_perm)
        return [self.banding.with_rows(r) for r in rows[:-1]] + [self.banding]


@dataclass
class RoundStats:
    rows: int
    keys: int                 # keys per document
    buckets: int = 0          # keys shared by ≥ 2 documents of different clusters
    candidates: int = 0       # pairs compared
    linked: int = 0           # of those, at or above the threshold
    verified: int = 0         # of those, passed to the verification hook (estimate ≥ t - margin)
    merges: int = 0           # clusters that disappeared by merging in this round
    capped_buckets: int = 0


@dataclass
class PairSample:
    """Up to :data:`SAMPLE` pairs ``(i, j, sim)``."""

    i: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    j: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    sim: np.ndarray = field(default_factory=lambda: np.empty(0, np.float64))

    def add(self, i: np.ndarray, j: np.ndarray, sim: np.ndarray, limit: int = SAMPLE) -> None:
        room = limit - len(self.i)
        if room <= 0 or len(i) == 0:
            return
        self.i = np.concatenate((self.i, i[:room]))
        self.j = np.concatenate((self.j, j[:room]))
        self.sim = np.concatenate((self.sim, sim[:room]))


@dataclass
class Clustering:
    labels: np.ndarray
    rounds: list[RoundStats]
    #: linked pairs with sim < threshold + NEAR_MARGIN, and rejected candidates with
    #: sim ≥ threshold - NEAR_MARGIN: pairs near the threshold, for judging it by eye.
    near_linked: PairSample
    near_rejected: PairSample

    @property
    def clusters(self) -> int:
        return int(np.count_nonzero(self.labels == np.arange(len(self.labels))))

    @property
    def candidates(self) -> int:
        return sum(r.candidates for r in self.rounds)

    @property
    def capped_buckets(self) -> int:
        return sum(r.capped_buckets for r in self.rounds)


# --- pairs inside buckets ----------------------------------------------------------------------

def _ramp(counts: np.ndarray) -> np.ndarray:
    """Concatenation of ``arange(c)`` for each count c."""
    total = int(counts.sum())
    starts = np.cumsum(counts) - counts
    return np.arange(total, dtype=np.int64) - np.repeat(starts, counts)


def _runs(sorted_values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Start and length of every run of equal consecutive values."""
    if len(sorted_values) == 0:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    change = np.flatnonzero(sorted_values[1:] != sorted_values[:-1]) + 1
    starts = np.concatenate(([0], change)).astype(np.int64)
    return starts, np.diff(np.append(starts, len(sorted_values)))


@dataclass
class Buckets:
    """Documents sharing a key, in bucket order; within a bucket sorted by (label, document).

    ``docs`` are the members of every bucket with members of at least two clusters, one
    after the other; ``bucket_start``/``bucket_size`` delimit the buckets; ``group_end[p]`` is
    the end (exclusive) of the run of p's cluster inside its bucket.
    """

    docs: np.ndarray
    labels: np.ndarray
    bucket_start: np.ndarray
    bucket_size: np.ndarray
    group_end: np.ndarray

    @property
    def cross_pairs(self) -> np.ndarray:
        """Pairs of members of different clusters, per bucket."""
        bucket_end = np.repeat(self.bucket_start + self.bucket_size, self.bucket_size)
        per_member = bucket_end - self.group_end
        return np.add.reduceat(per_member, self.bucket_start) if len(per_member) else per_member


def shared_buckets(keys: np.ndarray, docs: np.ndarray, labels: np.ndarray) -> Buckets:
    """The buckets of ``keys`` (one key per entry; ``docs[e]`` owns entry e) holding documents
    of at least two different clusters (``labels`` per document)."""
    order = np.argsort(keys)
    keys, docs = keys[order], docs[order]
    starts, sizes = _runs(keys)
    multi = sizes > 1
    starts, sizes = starts[multi], sizes[multi]
    members = np.repeat(starts, sizes) + _ramp(sizes)
    bucket = np.repeat(np.arange(len(starts)), sizes)
    docs = docs[members]
    member_labels = labels[docs]
    # sort members of each bucket by (label, doc); buckets stay in key order
    order = np.lexsort((docs, member_labels, bucket))
    docs, member_labels, bucket = docs[order], member_labels[order], bucket[order]
    # keep buckets with at least two labels
    first = np.cumsum(sizes) - sizes
    mixed = member_labels[first] != member_labels[first + sizes - 1]
    keep = mixed[bucket]
    docs, member_labels, bucket = docs[keep], member_labels[keep], bucket[keep]
    sizes = sizes[mixed]
    bucket_start = np.cumsum(sizes) - sizes
    group_starts, group_sizes = _runs(_group_codes(bucket, member_labels))
    group_end = np.repeat(group_starts + group_sizes, group_sizes)
    return Buckets(docs, member_labels, bucket_start.astype(np.int64), sizes.astype(np.int64), group_end)


def _group_codes(bucket: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """A value that changes exactly where (bucket, label) changes along the sorted members."""
    change = np.ones(len(bucket), dtype=bool)
    if len(bucket) > 1:
        change[1:] = (bucket[1:] != bucket[:-1]) | (labels[1:] != labels[:-1])
    return np.cumsum(change)


def cross_pairs(buckets: Buckets, selected: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every pair of members of different clusters in the selected buckets (indices into
    ``buckets.bucket_start``), as document indices (i < j not guaranteed)."""
    starts, sizes = buckets.bucket_start[selected], buckets.bucket_size[selected]
    positions = np.repeat(starts, sizes) + _ramp(sizes)
    ends = np.repeat(starts + sizes, sizes)
    partners = ends - buckets.group_end[positions]
    left = np.repeat(positions, partners)
    right = np.repeat(buckets.group_end[positions], partners) + _ramp(partners)
    return buckets.docs[left], buckets.docs[right]


def star_pairs(buckets: Buckets, selected: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The first member of each selected bucket paired with every member of another cluster."""
    starts, sizes = buckets.bucket_start[selected], buckets.bucket_size[selected]
    others_from = buckets.group_end[starts]
    others = starts + sizes - others_from
    left = np.repeat(buckets.docs[starts], others)
    right = buckets.docs[np.repeat(others_from, others) + _ramp(others)]
    return left, right


def window_pairs(buckets: Buckets, selected: np.ndarray, window: int) -> tuple[np.ndarray, np.ndarray]:
    """For capped buckets: one representative per cluster (its first, i.e. smallest,
    member), each paired with the next ``window`` representatives in document order."""
    i_parts, j_parts = [], []
    for b in selected.tolist():
        start, size = int(buckets.bucket_start[b]), int(buckets.bucket_size[b])
        labels = buckets.labels[start:start + size]
        first = np.concatenate(([True], labels[1:] != labels[:-1]))
        reps = np.sort(buckets.docs[start:start + size][first])
        for d in range(1, min(window, len(reps) - 1) + 1):
            i_parts.append(reps[:-d])
            j_parts.append(reps[d:])
    if not i_parts:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    return np.concatenate(i_parts), np.concatenate(j_parts)


def _chunks(weights: np.ndarray, limit: int) -> list[np.ndarray]:
    """Consecutive index ranges whose weights sum to about ``limit`` (at least one each)."""
    if len(weights) == 0:
        return []
    total = np.cumsum(weights)
    chunks, first = [], 0
    while first < len(weights):
        base = total[first - 1] if first else 0
        last = max(first + 1, int(np.searchsorted(total, base + limit, side="right")))
        chunks.append(np.arange(first, min(last, len(weights))))
        first = last
    return chunks


# --- verification ------------------------------------------------------------------------------

def equal_slots(signatures: np.ndarray, i: np.ndarray, j: np.ndarray, block: int = 65536) -> np.ndarray:
    """Number of equal minhash slots of each pair (i[p], j[p]), in blocks of pairs."""
    out = np.empty(len(i), dtype=np.int64)
    for start in range(0, len(i), block):
        a, b = i[start:start + block], j[start:start + block]
        out[start:start + block] = np.count_nonzero(signatures[a] == signatures[b], axis=1)
    return out


def unique_pairs(i: np.ndarray, j: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Distinct unordered pairs, as (min, max), sorted."""
    lo, hi = np.minimum(i, j).astype(np.int64), np.maximum(i, j).astype(np.int64)
    codes = np.unique(lo * n + hi)
    return codes // n, codes % n


# --- the clustering ------------------------------------------------------------------------------

def merge_identical(signatures: np.ndarray, rows: np.ndarray, labels: np.ndarray,
                    link: Callable[[np.ndarray, np.ndarray], np.ndarray] | None = None) -> tuple[np.ndarray, int]:
    """Join the rows with identical signatures (Ĵ = 1: linked at any threshold) without
    comparing them pairwise; returns the labels and how many rows joined another.
    ``link(members, firsts)`` (optional): which of the pairs (member, first row of its
    signature) to join; by default all. Rows are grouped by
    :func:`~neardup.fingerprint.similarity.identical_rows` (checked against the rows; in the
    2^-64 event of a key collision nothing is joined here and the banding rounds link the
    copies instead)."""
    group = identical_rows(signatures[rows])       # numbered in the order of their first row
    _, first = np.unique(group, return_index=True)
    firsts = rows[first[group]]
    copy = rows != firsts
    members, firsts = rows[copy], firsts[copy]
    if link is not None and len(members):
        joined = np.asarray(link(members, firsts), dtype=bool)
        members, firsts = members[joined], firsts[joined]
    if len(members) == 0:
        return labels, 0
    merged = group_labels(len(labels), labels[members], labels[firsts])
    return merged[labels], len(members)


def cluster_signatures(signatures: np.ndarray, counts: np.ndarray, params: ClusterParams,
                       labels: np.ndarray | None = None, verify: PairVerifier | None = None) -> Clustering:
    """Single-link clusters of the signatures at ``params.threshold`` (module docstring).

    ``labels`` (optional): clusters known beforehand (each label a member index of its
    cluster), e.g. from an earlier run; they are kept together and refined by merging only.
    ``verify`` (optional): the verification hook (module docstring,
    :mod:`neardup.fingerprint.verify`); the near-threshold samples then hold the similarities
    it returned.
    """
    signatures = np.asarray(signatures)
    counts = np.asarray(counts)
    n = len(signatures)
    if counts.shape != (n,):
        raise ValueError(f"counts must have shape ({n},), got {counts.shape}")
    k = params.banding.num_perm
    if signatures.ndim != 2 or signatures.shape[1] != k or signatures.dtype != np.uint64:
        raise ValueError(f"signatures must be an (N, {k}) uint64 array, got {signatures.dtype} {signatures.shape}")
    labels = np.arange(n, dtype=np.int64) if labels is None else _canonical(np.asarray(labels, dtype=np.int64))
    need = needed_matches(params.threshold, k)
    near_floor = max(1, needed_matches(max(params.threshold - NEAR_MARGIN, 0.0), k))
    near_top = needed_matches(min(params.threshold + NEAR_MARGIN, 1.0), k)
    rows = np.flatnonzero(counts > 0)
    result = Clustering(labels, [], PairSample(), PairSample())
    if len(rows) < 2:
        return result
    floor = needed_matches(max(params.threshold - params.margin, 0.0), k) if verify is not None else need
    identical = RoundStats(k, 1)

    def hook(i: np.ndarray, j: np.ndarray, equal: np.ndarray, stats: RoundStats) -> np.ndarray:
        """The hook's similarities of pairs passing the estimate floor (others: their estimate)."""
        sim = equal / k
        passed = equal >= floor
        stats.verified += int(np.count_nonzero(passed))
        if passed.any():
            found = np.asarray(verify(i[passed], j[passed], equal[passed]), dtype=np.float64)  # type: ignore[misc]
            if found.shape != (int(np.count_nonzero(passed)),):
                raise ValueError(f"verify returned shape {found.shape}, expected one value per pair")
            sim[passed] = found
        return sim

    def link_identical(members: np.ndarray, firsts: np.ndarray) -> np.ndarray:
        sim = hook(members, firsts, np.full(len(members), k, dtype=np.int64), identical)
        identical.candidates += len(members)
        return sim >= params.threshold - VERIFY_EPS

    labels, joined = merge_identical(signatures, rows, labels, link_identical if verify is not None else None)
    identical.linked = identical.merges = joined
    result.rounds.append(identical)
    sigs = signatures[rows]

    def verify_pairs(i: np.ndarray, j: np.ndarray, stats: RoundStats) -> tuple[np.ndarray, np.ndarray]:
        i, j = unique_pairs(i, j, n)
        stats.candidates += len(i)
        equal = equal_slots(signatures, i, j)
        if verify is None:
            linked = equal >= need
            close = linked & (equal < near_top)
            missed = ~linked & (equal >= near_floor)
            sim = equal / k
        else:
            sim = hook(i, j, equal, stats)
            linked = (equal >= floor) & (sim >= params.threshold - VERIFY_EPS)
            close = linked & (sim < params.threshold + NEAR_MARGIN)
            missed = ~linked & (sim >= params.threshold - NEAR_MARGIN) & (sim > 0)
        stats.linked += int(np.count_nonzero(linked))
        result.near_linked.add(i[close], j[close], sim[close])
        result.near_rejected.add(i[missed], j[missed], sim[missed])
        return i[linked], j[linked]

    def merge(li: list[np.ndarray], lj: list[np.ndarray], labels: np.ndarray) -> np.ndarray:
        if not li:
            return labels
        i, j = np.concatenate(li), np.concatenate(lj)
        return group_labels(n, labels[i], labels[j])[labels] if len(i) else labels

    for banding in params.round_bandings():
        stats = RoundStats(banding.rows, banding.key_count)
        before = int(np.count_nonzero(labels == np.arange(n)))
        keys = banding.keys(sigs).ravel()
        owners = np.repeat(rows, banding.key_count)
        buckets = shared_buckets(keys, owners, labels)
        pair_counts = buckets.cross_pairs
        crowded = np.flatnonzero(pair_counts > STAR_FACTOR * buckets.bucket_size)
        if len(crowded):
            # large buckets of mostly similar documents: link each to the bucket's first member
            # first, so that the cross-cluster pairs left to compare are few
            li, lj = [], []
            for part in _chunks(buckets.bucket_size[crowded], params.chunk_pairs):
                i, j = verify_pairs(*star_pairs(buckets, crowded[part]), stats)
                li.append(i)
                lj.append(j)
            labels = merge(li, lj, labels)
            buckets = shared_buckets(keys, owners, labels)
            pair_counts = buckets.cross_pairs
        del keys, owners
        stats.buckets = len(buckets.bucket_start)
        capped = np.flatnonzero(pair_counts > params.max_pairs_per_bucket)
        stats.capped_buckets = len(capped)
        plain = np.flatnonzero(pair_counts <= params.max_pairs_per_bucket)
        link_i, link_j = [], []
        work = [("all", part) for part in _chunks(pair_counts[plain], params.chunk_pairs)]
        work += [("window", part) for part in np.array_split(capped, max(1, len(capped) // 64))] if len(capped) else []
        for kind, part in work:
            pairs = cross_pairs(buckets, plain[part]) if kind == "all" else window_pairs(buckets, part, params.window)
            i, j = verify_pairs(*pairs, stats)
            link_i.append(i)
            link_j.append(j)
        labels = merge(link_i, link_j, labels)
        stats.merges = before - int(np.count_nonzero(labels == np.arange(n)))
        result.rounds.append(stats)
    result.labels = labels
    return result


def _canonical(labels: np.ndarray) -> np.ndarray:
    """Relabel so that each cluster's label is its smallest member index."""
    n = len(labels)
    smallest = np.full(n, n, dtype=np.int64)
    np.minimum.at(smallest, labels, np.arange(n, dtype=np.int64))
    return smallest[labels]


def linked_pairs_exact(signatures: np.ndarray, counts: np.ndarray, threshold: float) -> tuple[np.ndarray, np.ndarray]:
    """All pairs with Ĵ ≥ threshold by an exact all-pairs comparison of the estimates
    (:func:`neardup.fingerprint.similar_pairs`): the reference the LSH clustering approximates."""
    from neardup.fingerprint.similarity import similar_pairs

    i, j, _ = similar_pairs(np.asarray(signatures), np.asarray(counts), threshold, "resemblance")
    return i, j


def single_link_exact(signatures: np.ndarray, counts: np.ndarray, threshold: float) -> np.ndarray:
    """Labels of exact single-link clusters of the estimates (every pair considered)."""
    i, j = linked_pairs_exact(signatures, counts, threshold)
    return group_labels(len(signatures), i, j)


# --- stable cluster ids ----------------------------------------------------------------------------

def assign_ids(keys: Sequence[str], labels: np.ndarray, previous: Sequence[str | None],
               sizes: Mapping[str, int] | None = None, taken: AbstractSet[str] = frozenset()) -> list[str]:
    """A stable id for each document's cluster.

    ``keys[d]``: document d's unique key (its ``_id``); ``labels``: clusters (any member index
    per cluster); ``previous[d]``: the cluster id d carried before, or None.

    **Full run** (``sizes`` None). Every cluster id is the key of one of the cluster's
    members (its *founder*), so ids are unique by construction (a document is in one cluster).
    A cluster keeps a previous id X if X is the key of one of its current members; if several
    qualify, the one most members carried wins (ties: the smallest). Otherwise its id is the
    smallest member key. Consequences: a cluster whose membership did not change keeps its id;
    when clusters merge, the id of the one with more members survives; when a cluster splits,
    the part holding the founder keeps the id and the other parts get new ones; a cluster
    whose founder was deleted gets a new id.

    **Incremental** (``sizes`` given: the whole-index size of every previous id). Documents
    carrying the same previous id must have the same label (their cluster is whole, even if
    only some members are present). A cluster keeps the previous id of its largest previous
    cluster (ties: the smallest id); clusters of new documents only get the smallest key of
    their members that is not in ``taken`` (ids already used in the index).
    """
    n = len(keys)
    labels = np.asarray(labels, dtype=np.int64)
    if labels.shape != (n,) or len(previous) != n:
        raise ValueError("keys, labels and previous must have the same length")
    rank = np.empty(n, dtype=np.int64)
    rank[np.argsort(np.asarray(keys, dtype=object), kind="stable")] = np.arange(n)
    best: dict[int, tuple[int, str]] = {}  # label -> (-votes, id)
    if sizes is None:
        position = {key: d for d, key in enumerate(keys)}
        votes: dict[tuple[int, str], int] = {}
        for d, old in enumerate(previous):
            if old is None:
                continue
            founder = position.get(old)
            if founder is not None and labels[founder] == labels[d]:
                votes[(int(labels[d]), old)] = votes.get((int(labels[d]), old), 0) + 1
        for (label, old), count in votes.items():
            if (-count, old) < best.get(label, (1, "")):
                best[label] = (-count, old)
    else:
        for d, old in enumerate(previous):
            if old is None:
                continue
            label = int(labels[d])
            candidate = (-int(sizes.get(old, 0)), old)
            if candidate < best.get(label, (1, "")):
                best[label] = candidate
    # fresh ids: the smallest member key (not taken), for clusters without a surviving id
    order = np.lexsort((rank, labels))
    ids_by_label: dict[int, str] = {label: old for label, (_, old) in best.items()}
    for d in order.tolist():
        label = int(labels[d])
        if label not in ids_by_label and keys[d] not in taken:
            ids_by_label[label] = keys[d]
    for d in order.tolist():  # every member key taken: derive one
        label = int(labels[d])
        if label not in ids_by_label:
            suffix = 1
            while f"{keys[d]}~{suffix}" in taken:
                suffix += 1
            ids_by_label[label] = f"{keys[d]}~{suffix}"
    return [ids_by_label[int(label)] for label in labels]
