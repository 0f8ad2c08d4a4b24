"""Cluster *seeds*: the values a singleton gets from ``neardup cluster``, written at index time.

Most documents are singletons, whose cluster id is their own key
(:func:`neardup.fingerprint.clustering.assign_ids`) and whose LSH keys depend on the signature alone.
``neardup index`` and ``neardup load`` write those values (``cluster`` = the document's key,
:func:`neardup.indexer.cluster.documents.doc_key`; ``bands`` = its keys for the default banding,
:func:`neardup.indexer.cluster.options.cluster_params`, or ``[]`` without words) in the request that
writes the fingerprint, so the first cluster run only rewrites the members that join another
member's cluster. Seeds are written only while the index has never been clustered, and every
seeded request is checked after its acknowledgement (:class:`Seeder`, which also gives the
argument why no seed can stand for "clustered" unless a cluster run saw the document).
"""

from __future__ import annotations

import base64
import binascii
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import numpy as np

from neardup.fingerprint import BANDS_KEY, CLUSTER_KEY, CLUSTER_KEYS, FIELD, FingerprintParams, scheme_version
from neardup.fingerprint.lsh import Banding, choose_banding, key_strings
from neardup.indexer.client import Client
from neardup.indexer.cluster.documents import CLUSTER_MAPPING, doc_key
from neardup.indexer.cluster.meta import META_KEY
from neardup.indexer.docversion import DocVersion
from neardup.indexer.errors import ClusterApiError, JobError, error_type_and_reason
from neardup.indexer.mapping import MappingPlan, plan_neardup_mapping
from neardup.indexer.retry import TRANSIENT_STATUSES, Retrier
from neardup.indexer.stats import Failures

log = logging.getLogger(__name__)

#: ``filter_path`` of the ``_meta`` check: empty answer = no clusters recorded.
META_FILTER = f"*.mappings._meta.{META_KEY}.state"
WITHDRAWN: dict[str, None] = dict.fromkeys(CLUSTER_KEYS)
_FILTER = ["items.*.status", "items.*.result", "items.*.error.type", "items.*.error.reason",
           "items.*._seq_no", "items.*._primary_term"]


def clusters_recorded(root_mappings: Mapping[str, Any]) -> bool:
    """Whether any concrete index (``index -> mappings``) has clusters in its ``_meta``."""
    return any(isinstance((m.get("_meta") or {}).get(META_KEY), Mapping) for m in root_mappings.values())


def plan_mapping_with_seeds(client: Client, retrier: Retrier, index: str, *,
                            extra: Mapping[str, Any] | None = None, with_duplicate_of: bool = False
                            ) -> tuple[MappingPlan, bool]:
    """The mapping plan with ``neardup.cluster``/``neardup.bands`` (keywords, for seeds), and
    whether seeds can be written: not if those two sub-fields are mapped in a way that
    conflicts (the plan is then made without them, as before seeds existed)."""
    try:
        return plan_neardup_mapping(client, retrier, index, with_duplicate_of=with_duplicate_of,
                                    extra={**CLUSTER_MAPPING, **(extra or {})}), True
    except JobError:
        plan = plan_neardup_mapping(client, retrier, index, with_duplicate_of=with_duplicate_of, extra=extra)
        log.warning("neardup.cluster or neardup.bands of %s is mapped in a way neardup cluster cannot "
                    "use: no cluster seeds are written", index)
        return plan, False


def seed_plan(index: str, threshold: float, fingerprint: FingerprintParams,
              root_mappings: Mapping[str, Any]) -> SeedPlan | None:
    """How a writer to ``index`` (concrete indices: the keys of ``root_mappings``) seeds, or
    None when it writes no seeds because the index has clusters already."""
    if not root_mappings or clusters_recorded(root_mappings):
        return None
    return SeedPlan.for_target(index, threshold, fingerprint, sorted(root_mappings))


@dataclass(frozen=True)
class SeedPlan:
    """How seeds are computed for one index expression (picklable: sent to worker processes)."""

    index: str
    version: str
    num_perm: int
    banding: Banding
    with_index: bool

    @classmethod
    def for_target(cls, index: str, threshold: float, fingerprint: FingerprintParams,
                   indices: Sequence[str]) -> SeedPlan:
        """The plan for the cluster job's defaults on ``index`` (``threshold``: the collapse
        threshold for it), whose concrete indices are ``indices``."""
        return cls(index, scheme_version(fingerprint), fingerprint.num_perm,
                   choose_banding(threshold, fingerprint.num_perm, fingerprint.groups), len(indices) > 1)

    def values(self, docs: Sequence[tuple[str, str, Mapping[str, Any]]]) -> list[dict[str, Any] | None]:
        """The seed of each ``(index, _id, neardup value)``: ``{"cluster", "bands"}``, or None
        for a value that is not a usable fingerprint of this scheme (never expected)."""
        out: list[dict[str, Any] | None] = [None] * len(docs)
        rows, raws, counts = [], [], []
        for row, (_, _, value) in enumerate(docs):
            raw, count = _signature(value, self.version, self.num_perm)
            if raw is not None:
                rows.append(row)
                raws.append(raw)
                counts.append(count)
        if not rows:
            return out
        signatures = np.frombuffer(b"".join(raws), dtype="<u8").astype(np.uint64).reshape(len(rows), self.num_perm)
        linked = [k for k, count in enumerate(counts) if count > 0]
        keys: list[list[str]] = [[] for _ in rows]
        if linked:
            for k, strings in zip(linked, key_strings(self.banding.keys(signatures[linked]))):
                keys[k] = strings
        for k, row in enumerate(rows):
            index, doc_id, _ = docs[row]
            out[row] = {CLUSTER_KEY: doc_key(index, doc_id, self.with_index), BANDS_KEY: keys[k]}
        return out


def _signature(value: Mapping[str, Any], version: str, num_perm: int) -> tuple[bytes | None, int]:
    """As :func:`neardup.indexer.cluster.documents.usable_signature`, for a value about to be written."""
    count = value.get("n")
    if value.get("v") != version or not isinstance(value.get("sig"), str):
        return None, 0
    if not isinstance(count, int) or isinstance(count, bool) or count < 0:
        return None, 0
    try:
        raw = base64.b64decode(value["sig"].encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError, ValueError):
        return None, 0
    return (raw, count) if len(raw) == 8 * num_perm else (None, 0)


@dataclass
class SeededWrite(DocVersion):
    """A document acknowledged with a seed, at the version of that write."""

    seed: dict[str, Any]
    attempts: int = 0


class Withdrawable(Protocol):
    """A document at a version (:class:`DocVersion`) with a count of withdrawal attempts."""

    id: str
    attempts: int

    def update_meta(self) -> dict[str, Any]: ...


W = TypeVar("W", bound=Withdrawable)


def withdraw_values(client: Client, retrier: Retrier, items: Sequence[W], max_retries: int, *,
                    what: str, judge_again: Callable[[list[W]], list[W]],
                    fail: Callable[[str, W], None]) -> int:
    """Set ``cluster`` and ``bands`` to null on each document, conditional on its version, in one
    bulk request sent with ``refresh=true`` (a value made searchable by a refresh since it was
    written must not stay visible until the next one). A conflict goes to ``judge_again`` (read
    again: those still to withdraw, at their new version); 429/5xx are sent again; a document
    deleted meanwhile needs nothing. Returns how many were withdrawn; ``fail(reason, item)`` for
    the rest."""
    withdrawn = 0
    pending = list(items)
    while pending:
        operations: list[dict[str, Any]] = []
        for item in pending:
            operations += [item.update_meta(), {"doc": {FIELD: dict(WITHDRAWN)}}]
        response = retrier.call(what, lambda: client.bulk(operations=operations, filter_path=_FILTER, refresh=True))
        answers = response.get("items", [])
        if len(answers) != len(pending):
            raise RuntimeError(f"bulk answered {len(answers)} items for {len(pending)} actions")
        conflicted: list[W] = []
        again: list[W] = []
        for item, answer in zip(pending, answers):
            result = answer.get("update", {})
            status = int(result.get("status", 0))
            if 200 <= status < 300:
                withdrawn += 1
                continue
            kind, reason = error_type_and_reason(result.get("error", {}))
            if status == 404 and kind == "document_missing_exception":
                continue  # deleted meanwhile: nothing left to withdraw
            item.attempts += 1
            if item.attempts > max_retries:
                fail(f"{status} {kind} (after {max_retries} retries)", item)
            elif status == 409:
                conflicted.append(item)
            elif status in TRANSIENT_STATUSES:
                again.append(item)
            else:
                fail(f"{status} {kind}: {reason}"[:200], item)
        if again:
            retrier.wait(max(i.attempts for i in again) - 1)
        pending = again + (judge_again(conflicted) if conflicted else [])
    return withdrawn


@dataclass
class Seeder:
    """Per job (or worker): whether seeds are written now, and the check after each request.

    **Staleness.** A document without ``neardup.cluster`` means "not clustered yet": the proxy
    refuses push-down while one exists (:func:`neardup.proxy.handlers.native_collapse.missing_clusters_query`) and
    ``neardup cluster --incremental`` places exactly those. A seed is a value, so it must never
    stand for "clustered" unless a cluster run saw the document. The rule:

    * Seeds are written only while the index has never been clustered: no concrete index behind
      the expression has ``_meta.neardup_clusters`` (any state). Once it has, the indexer keeps
      the old behaviour: a new document gets no cluster value, a changed fingerprint clears the
      values (:func:`neardup.indexer.enrich.cleared_keys`), and the document waits for the next
      cluster run.
    * A full cluster run puts ``_meta.neardup_clusters`` (``state: building``) *before* its
      refresh and point in time (:func:`neardup.indexer.cluster.run.run_cluster`).
    * After every bulk request that carried seeds is acknowledged, the writer reads the ``_meta``
      again (:meth:`Seeder.confirm`). If clusters are recorded by then, it withdraws the seeds of
      that request (:meth:`Seeder.withdraw`: a partial update setting both values to null,
      conditional on the ``_seq_no`` its own write got, sent with ``refresh=true`` so that a
      seed some refresh made searchable meanwhile does not stay visible), and writes no more seeds.

    Why that is enough. Take a seeded write acknowledged at time *a*, and the ``_meta`` read that
    follows it at time *c > a*. If that read shows no clusters, the put-mapping of every cluster
    run that has started is acknowledged after *c* (a put-mapping is acknowledged once every node
    applied the new cluster state, so later reads on any node see it), and the run's refresh
    comes after that: its refresh starts after the write was acknowledged, so its point in time
    holds the seeded document, which it clusters like any other, and writes where the seed is not
    its value. If the read shows clusters, a run may have opened its point in time before the
    write, so the seed is withdrawn: the document counts as new (no value), as without seeds.
    Withdrawing is always safe (at worst a document a run did see waits for the next
    ``--incremental``), so it is done for every item of the request that may hold the seed. A
    request whose attempt timed out on the client is sent again (:meth:`neardup.indexer.retry.Retrier.call`)
    although the first attempt may have been applied: a conditional update (``neardup index``)
    applied by then answers **409** (its ``if_seq_no`` is outdated), not ``noop``, and an item may
    also fail after an earlier attempt applied it. So the check after the acknowledgement covers
    every item sent with a seed that did not end in a success too (``uncertain`` of
    :meth:`Seeder.confirm`; in the writer, every item ever sent with a seed, also when a later
    resend carried none): if clusters are recorded, each is read again (real time) and withdrawn
    at the ``_seq_no`` read if it still holds exactly the seed. ``noop`` answers are covered as
    successes (their value may come from an attempt that timed out and was retried).
    If the conditional withdrawal conflicts, the document is read again (real time): if it still
    holds exactly the seed, it is withdrawn at the new ``_seq_no``; if it holds another value, a
    cluster run wrote it (so it saw the document) or another writer replaced it (and runs the same
    protocol), and it is left alone. A document whose seed cannot be withdrawn is a failure of the
    job, named in its summary (a full ``neardup cluster`` run fixes it).

    **Backstop in the cluster run.** The check runs in the writer: a worker killed between a
    request's acknowledgement and its check (or whose check fails, the node unreachable) leaves
    its seeds. So every full cluster run, before it marks ``ready``, finds the documents changed
    after what it read (per shard, ``_seq_no`` above a checkpoint taken before its refresh) and
    withdraws the cluster values it cannot vouch for (:mod:`neardup.indexer.cluster.backstop`). Not
    covered: a seeded request the node applies only after that search.

    The check before a request is the answer of the previous check (one ``GET _mapping`` per
    seeded request, filtered to ``_meta.neardup_clusters.state``): correctness rests on the check
    after the acknowledgement only. A caller not allowed to read the mapping writes no seeds.
    """

    client: Client
    retrier: Retrier
    plan: SeedPlan
    max_retries: int
    failures: Failures = field(default_factory=Failures)
    #: The answer of the last check: no clusters recorded (the caller checked before starting).
    seeding: bool = True
    withdrawn: int = 0
    checks: int = 0

    def values(self, docs: Sequence[tuple[str, str, Mapping[str, Any]]]) -> list[dict[str, Any] | None]:
        return self.plan.values(docs)

    def clusters_recorded(self) -> bool:
        """Read the ``_meta`` of every index behind the expression (one filtered request)."""
        self.checks += 1
        try:
            body = self.retrier.call("checking for clusters in _meta", lambda: self.client.indices.get_mapping(
                index=self.plan.index, filter_path=META_FILTER))
        except ClusterApiError as exc:
            if exc.status in (401, 403):
                log.warning("cannot read the mapping of %s (%s): no cluster seeds are written",
                            self.plan.index, exc.status)
                return True
            raise
        return bool(body)

    def confirm(self, written: Sequence[SeededWrite], uncertain: Sequence[SeededWrite] = ()) -> None:
        """After a request that wrote ``written`` was acknowledged: withdraw the seeds if
        clusters are recorded now (and write no more).

        ``uncertain``: items of the request sent with a seed whose answer was not a success
        (a 409 conflict, a failure), so that an earlier attempt of the request, timed out on
        the client and retried, may have applied the seed (:func:`uncertain_write`; no
        ``_seq_no`` known). If clusters are recorded they are read again and withdrawn where
        they still hold exactly the seed."""
        if not written and not uncertain:
            return
        if self.seeding and not self.clusters_recorded():
            return
        if self.seeding:
            log.info("clusters appeared in the _meta of %s: cluster seeds are no longer written", self.plan.index)
        self.seeding = False
        before = self.withdrawn
        self.withdraw(written)
        self.withdraw(self._still_seeded(uncertain))
        log.info("withdrew the cluster seeds of %d documents of %s (clusters appeared meanwhile): they "
                 "wait for the next `neardup cluster`", self.withdrawn - before, self.plan.index)

    def withdraw(self, written: Sequence[SeededWrite]) -> None:
        """Set ``cluster`` and ``bands`` to null where the document still holds the seed."""
        self.withdrawn += withdraw_values(self.client, self.retrier, written, self.max_retries,
                                          what="withdrawing cluster seeds", judge_again=self._still_seeded,
                                          fail=self._fail)

    def _still_seeded(self, conflicted: Sequence[SeededWrite]) -> list[SeededWrite]:
        """Of the documents changed since the seed was written, those still holding it."""
        if not conflicted:
            return []
        response = self.retrier.call("re-reading seeded documents", lambda: self.client.mget(
            docs=[c.get_ref() for c in conflicted], source=[f"{FIELD}.{CLUSTER_KEY}", f"{FIELD}.{BANDS_KEY}"], realtime=True))
        out = []
        for item, doc in zip(conflicted, response["docs"]):
            if "error" in doc:
                kind, reason = error_type_and_reason(doc)
                self._fail(f"re-reading failed: {kind}: {reason}"[:200], item)
            elif doc.get("found"):
                node = (doc.get("_source") or {}).get(FIELD) or {}
                if node.get(CLUSTER_KEY) == item.seed[CLUSTER_KEY] and (node.get(BANDS_KEY) or []) == item.seed[BANDS_KEY]:
                    out.append(SeededWrite.of(doc, item.seed, item.attempts))
        return out

    def _fail(self, reason: str, item: SeededWrite) -> None:
        self.failures.add(f"cluster seed not withdrawn ({reason}); run a full `neardup cluster`", item.id)


def seeded_write(index: str, doc_id: str, routing: str | None, answer: Mapping[str, Any],
                 seed: dict[str, Any]) -> SeededWrite | None:
    """The :class:`SeededWrite` of a successful bulk item ``answer`` (None if it failed)."""
    status = int(answer.get("status", 0))
    if not 200 <= status < 300 or "_seq_no" not in answer:
        return None
    return SeededWrite(answer.get("_index", index), doc_id, routing, int(answer["_seq_no"]),
                       int(answer["_primary_term"]), seed)


def uncertain_write(index: str, doc_id: str, routing: str | None, seed: dict[str, Any]) -> SeededWrite:
    """A document sent with ``seed`` whose answer did not say the seed was written (409, failure):
    for :meth:`Seeder.confirm` to read again (its ``_seq_no`` is not known: -1)."""
    return SeededWrite(index, doc_id, routing, -1, -1, seed)
