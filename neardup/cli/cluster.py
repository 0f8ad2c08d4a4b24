"""``neardup cluster``: the near-duplicate clusters of a whole index (:mod:`neardup.indexer.cluster`).

Exit status as for the other jobs (:mod:`neardup.cli.options`): 0 done; 1 some documents could not be written
(the clusters stay marked as building, so the proxy does not rely on them); 2 bad options;
3 the job could not start or had to stop.
"""

from __future__ import annotations

import argparse
import json
import os

from neardup.cli.options import (
    Subparsers,
    add_field_option,
    add_index_job_options,
    clear_errors,
    fail,
    positive,
    threshold,
    with_cluster,
    with_flags,
)
from neardup.config import Config, collapse_settings_for
from neardup.indexer.cluster.options import ClusterOptions
from neardup.indexer.cluster.result import format_result
from neardup.indexer.cluster.run import run_cluster
from neardup.indexer.errors import EXIT_DOCUMENTS_FAILED, EXIT_OK, EXIT_USAGE
from neardup.upstream import check_upstream


@clear_errors
def cluster_command(args: argparse.Namespace, config: Config) -> int:
    _, default_threshold, _ = collapse_settings_for(config.collapse, args.index)
    if args.report:
        folder = os.path.dirname(os.path.abspath(args.report))
        if not os.path.isdir(folder):
            return fail(f"--report {args.report}: no such folder {folder}", EXIT_USAGE)
    config = with_flags(args, config)
    job = config.indexer
    options = ClusterOptions(
        index=args.index, threshold=args.threshold if args.threshold is not None else default_threshold,
        mode=args.mode, incremental=args.incremental, report=args.report, title_fields=tuple(job.fields),
        workers=job.workers, batch_size=job.batch_size, memory_limit_mb=args.memory_limit,
        supershingles=not args.no_supershingles, rounds=not args.single_round, verify=args.verify)
    cluster = check_upstream(config)
    result = run_cluster(config, options)
    print(json.dumps(with_cluster(result.to_dict(), cluster)) if args.json else format_result(result, cluster))
    return EXIT_DOCUMENTS_FAILED if result.stats.failed else EXIT_OK


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "cluster", help="find the near-duplicate clusters of a whole index and store their ids",
        description="Cluster the documents of an index by their stored fingerprints: single-link "
        "clusters at a resemblance threshold, found with LSH bands of the signatures (iteratively, "
        "from many rows per band to few) and verified by the exact resemblance of their texts (memory "
        "strategy, see --verify) or by the signatures. Every document gets a "
        "stable neardup.cluster id (a cluster keeps its id while its founding member stays in it; "
        "when clusters merge, the larger one's id survives) and, if it has a fingerprint, its LSH "
        "keys in neardup.bands. Only values that change are written, with partial updates "
        "conditional on each document's _seq_no. Run `neardup index` first.")
    add_index_job_options(parser, "cluster", workers="point-in-time slices read in parallel",
                          pages="documents per page and per bulk request")
    parser.add_argument("--threshold", type=threshold, metavar="T",
                        help="estimated resemblance at or above which two documents are linked "
                        "(default: collapse.threshold for the index, so the proxy can collapse on the "
                        "clusters natively)")
    parser.add_argument("--mode", choices=["auto", "memory", "aggregate"], default="auto",
                        help="memory: read all fingerprints and cluster in memory; aggregate: let "
                        "Elasticsearch find the shared keys (composite aggregation) for indices larger than "
                        "memory; auto (default): memory unless --memory-limit would be exceeded")
    parser.add_argument("--incremental", action="store_true",
                        help="only place documents without a cluster (new or newly fingerprinted): "
                        "they join the clusters they link to; needs an earlier full run with the same "
                        "threshold")
    parser.add_argument("--report", metavar="FILE",
                        help="also write an HTML report: cluster sizes, the largest clusters with "
                        "titles, and pairs near the threshold with their similarity")
    add_field_option(parser, help="text field, repeat for several: the fields `neardup index` fingerprinted, "
                      "in the same order; read back by --verify text, and shown in the report (the first "
                      "as the title) (default: indexer.fields of the configuration)")
    parser.add_argument("--memory-limit", type=positive, default=2048, metavar="MB",
                        help="with --mode auto, the memory strategy is used while the fingerprints "
                        "fit in about this many MB (default: 2048)")
    parser.add_argument("--no-supershingles", action="store_true",
                        help="candidates from the LSH bands only, not also from supershingle groups "
                        "that contain no whole band")
    parser.add_argument("--single-round", action="store_true",
                        help="one LSH round at the final rows per band instead of the iterative "
                        "rounds (same clusters, more comparisons)")
    parser.add_argument("--verify", choices=["text", "signature"], default="text",
                        help="how candidate pairs are verified by the memory strategy: text (default): "
                        "exact resemblance of the shingle sets, from the --field texts read back for the "
                        "candidates (candidates with an estimate down to 5 standard errors below the "
                        "threshold; a document whose text no longer gives its stored fingerprint is "
                        "verified by its estimate), so the clusters are those of exact single-link; "
                        "signature: the estimate of the stored signatures (no texts read). --mode aggregate "
                        "and --incremental always verify on the signatures")
    parser.set_defaults(handler=cluster_command)
