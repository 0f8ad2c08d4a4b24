"""The HTML report of ``neardup cluster --report FILE``: judge the threshold by eye.

One self-contained page (inline CSS, no script, no external resource), every text taken from
the index escaped with :func:`html.escape`:

* the run: index, threshold, LSH bands × rows and their S-curve, document and cluster counts;
* the cluster size distribution (clusters and documents per size class, with bars);
* the largest clusters with the titles of their first members;
* pairs near the threshold with their estimated resemblance: linked pairs just above it and
  compared-but-rejected pairs just below it, each with both documents' titles and openings.

:func:`render_report` is pure (data in, HTML out); :func:`write_report` fetches the titles.
"""

from __future__ import annotations

import datetime
import html
import os
import tempfile
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from neardup.fingerprint.clustering import PairSample
from neardup.fingerprint.texts import as_text, field_value
from neardup.indexer.cluster.job import Job

#: Size classes of the distribution: (label, smallest, largest).
SIZE_CLASSES = [("1", 1, 1), ("2", 2, 2), ("3", 3, 3), ("4–5", 4, 5), ("6–10", 6, 10), ("11–20", 11, 20),
                ("21–50", 21, 50), ("51–100", 51, 100), ("101–1,000", 101, 1000), ("> 1,000", 1001, 10**18)]
LARGEST = 20
MEMBERS_SHOWN = 8
PAIRS_SHOWN = 25
SNIPPET = 320


@dataclass
class ReportInput:
    """What a strategy hands the report besides titles: every document's cluster id and the
    pairs compared near the threshold."""

    ids: list[str]                   # cluster id per document key below
    keys: list[str]
    near_linked: list[tuple[str, str, float]]
    near_rejected: list[tuple[str, str, float]]
    singletons_outside: int = 0      # documents not listed in ``keys`` (aggregate: no candidate)


def pair_keys(sample: PairSample, keys: Sequence[str]) -> list[tuple[str, str, float]]:
    return [(keys[i], keys[j], float(s)) for i, j, s in zip(sample.i.tolist(), sample.j.tolist(), sample.sim.tolist())]


@dataclass(frozen=True)
class Doc:
    key: str
    title: str = ""
    snippet: str = ""


@dataclass
class ReportData:
    index: str
    threshold: float
    lsh: Mapping[str, Any]
    figures: Mapping[str, Any]
    #: (size class label, clusters, documents)
    distribution: list[tuple[str, int, int]]
    #: (cluster id, size, first members)
    largest: list[tuple[str, int, list[Doc]]]
    near_linked: list[tuple[float, Doc, Doc]]
    near_rejected: list[tuple[float, Doc, Doc]]
    s_curve: list[tuple[float, float]] = field(default_factory=list)
    generated: str = ""
    #: what the pairs' similarity is (``neardup cluster --verify``)
    measure: str = "estimated resemblance"


def size_distribution(cluster_sizes: Sequence[int], singletons_outside: int = 0) -> list[tuple[str, int, int]]:
    """Clusters and documents per size class (``singletons_outside`` more clusters of one)."""
    counts = Counter(cluster_sizes)
    counts[1] += singletons_outside
    rows = []
    for label, low, high in SIZE_CLASSES:
        clusters = sum(c for size, c in counts.items() if low <= size <= high)
        documents = sum(size * c for size, c in counts.items() if low <= size <= high)
        if clusters:
            rows.append((label, clusters, documents))
    return rows


def group_members(keys: Sequence[str], ids: Sequence[str]) -> dict[str, list[str]]:
    """Members (keys, sorted) of every cluster id."""
    members: dict[str, list[str]] = {}
    for key, cluster in zip(keys, ids):
        members.setdefault(cluster, []).append(key)
    for values in members.values():
        values.sort()
    return members


def near_pairs(pairs: Sequence[tuple[str, str, float]], threshold: float, count: int) -> list[tuple[str, str, float]]:
    """The ``count`` distinct pairs closest to the threshold."""
    unique = {(min(a, b), max(a, b)): s for a, b, s in pairs}
    ranked = sorted(unique.items(), key=lambda item: (abs(item[1] - threshold), item[0]))
    return [(a, b, s) for (a, b), s in ranked[:count]]


# --- HTML ----------------------------------------------------------------------------------------

_CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:2em auto;max-width:70em;color:#222;padding:0 1em}
h1{font-size:1.6em;margin-bottom:.2em} h2{margin-top:2em;border-bottom:1px solid #ddd;padding-bottom:.2em}
table{border-collapse:collapse;width:100%;margin:.5em 0} th,td{padding:.3em .6em;border-bottom:1px solid #eee;
text-align:left;vertical-align:top} th{background:#f6f6f6} td.n{text-align:right;font-variant-numeric:tabular-nums}
.bar{background:#4a7bd0;height:.9em;display:inline-block;min-width:1px} .muted{color:#777}
.sim{font-weight:bold;font-variant-numeric:tabular-nums} .snip{color:#555;font-size:.92em;white-space:pre-wrap}
dl.figs{display:grid;grid-template-columns:max-content auto;gap:.2em 1.2em} dl.figs dt{color:#555} dl.figs dd{margin:0}
ol.members{margin:.2em 0;padding-left:1.4em} code{background:#f3f3f3;padding:0 .25em}
"""


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _doc_cell(doc: Doc) -> str:
    title = _e(doc.title) if doc.title else '<span class="muted">(no title)</span>'
    return (f'<div><code>{_e(doc.key)}</code> {title}</div>'
            f'<div class="snip">{_e(doc.snippet)}</div>')


def _pairs_table(pairs: Sequence[tuple[float, Doc, Doc]], empty: str,
                 measure: str = "estimated resemblance") -> str:
    if not pairs:
        return f'<p class="muted">{_e(empty)}</p>'
    rows = "".join(f'<tr><td class="sim">{s:.3f}</td><td>{_doc_cell(a)}</td><td>{_doc_cell(b)}</td></tr>'
                   for s, a, b in pairs)
    return (f'<table class="pairs"><tr><th>{_e(measure)}</th><th>document</th><th>document</th></tr>'
            f"{rows}</table>")


def render_report(data: ReportData) -> str:
    """The report as one HTML document (everything from the index escaped)."""
    figs = "".join(f"<dt>{_e(name)}</dt><dd>{_e(value)}</dd>" for name, value in data.figures.items())
    widest = max((c for _, c, _ in data.distribution), default=1) or 1
    distribution = "".join(
        f'<tr><td>{_e(label)}</td><td class="n">{clusters:,}</td><td class="n">{documents:,}</td>'
        f'<td><span class="bar" style="width:{max(0.2, 100 * clusters / widest):.1f}%"></span></td></tr>'
        for label, clusters, documents in data.distribution)
    largest = "".join(
        f'<tr><td><code>{_e(cluster)}</code></td><td class="n">{size:,}</td><td><ol class="members">'
        + "".join(f"<li>{_e(d.title) if d.title else '<span class=muted>(no title)</span>'} "
                  f'<span class="muted">{_e(d.key)}</span></li>' for d in members)
        + "</ol>" + (f'<span class="muted">… and {size - len(members):,} more</span>' if size > len(members) else "")
        + "</td></tr>"
        for cluster, size, members in data.largest)
    curve = "".join(f'<tr><td class="n">{s:.2f}</td><td class="n">{p:.4f}</td></tr>' for s, p in data.s_curve)
    lsh = data.lsh
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>neardup clusters of {_e(data.index)} at {data.threshold:g}</title>
<style>{_CSS}</style></head>
<body>
<h1>Near-duplicate clusters of <code>{_e(data.index)}</code></h1>
<p class="muted">Single-link clusters at {_e(data.measure)} ≥ {data.threshold:g}, generated {_e(data.generated)}.</p>
<dl class="figs">{figs}</dl>

<h2>Cluster sizes</h2>
<table id="sizes"><tr><th>size</th><th>clusters</th><th>documents</th><th></th></tr>{distribution}</table>

<h2>Largest clusters</h2>
<table id="largest"><tr><th>cluster id</th><th>size</th><th>members (first {MEMBERS_SHOWN}, by key)</th></tr>{largest}</table>

<h2>Pairs just above the threshold (linked)</h2>
<p>If these do not look like the same text, raise the threshold.</p>
{_pairs_table(data.near_linked, "No linked pair within 0.1 above the threshold.", data.measure)}

<h2>Pairs just below the threshold (compared, not linked)</h2>
<p>If these look like the same text, lower the threshold.</p>
{_pairs_table(data.near_rejected, "No compared pair within 0.1 below the threshold.", data.measure)}

<h2>Candidate probability</h2>
<p>LSH with {_e(lsh.get("bands"))} bands of {_e(lsh.get("rows"))} minhashes (of {_e(lsh.get("num_perm"))}):
a pair of true resemblance s is compared with probability 1 − (1 − s<sup>r</sup>)<sup>b</sup>.</p>
<table id="curve" style="width:auto"><tr><th>s</th><th>P(compared)</th></tr>{curve}</table>
</body></html>
"""


# --- assembling ------------------------------------------------------------------------------------

def snippet(source: Mapping[str, Any], fields: Sequence[str]) -> tuple[str, str]:
    """(title, opening of the other text fields) of a ``_source``."""
    texts = []
    for name in fields:
        value = field_value(source, name)
        text = as_text(value) if value is not None else None
        texts.append(" ".join(text.split()) if text else "")
    title = texts[0] if texts else ""
    rest = " ".join(t for t in texts[1:] if t)
    return title[:300], rest[:SNIPPET] + ("…" if len(rest) > SNIPPET else "")


def build_report_data(job: Job, report: ReportInput, sources: Mapping[str, Mapping[str, Any]]) -> ReportData:
    """From a finished job and its :class:`ReportInput`; ``sources`` maps
    keys to the ``_source`` (title fields) of the documents shown."""
    result = job.result
    fields = job.options.title_fields
    members = group_members(report.keys, report.ids)
    sizes = [len(v) for v in members.values()]
    biggest = sorted(members.items(), key=lambda kv: (-len(kv[1]), kv[0]))[:LARGEST]

    def doc(key: str) -> Doc:
        title, text = snippet(sources.get(key, {}), fields)
        return Doc(key, title, text)

    threshold = job.params.threshold
    banding = job.params.banding
    figures = {
        "documents": f"{result.documents:,}",
        "with a usable fingerprint": f"{result.fingerprinted:,}",
        "clusters of 2 or more": f"{result.clusters:,} holding {result.in_clusters:,} documents",
        "largest cluster": f"{result.largest:,}",
        "pairs compared": f"{result.candidates:,}, of which {result.linked:,} at or above the threshold",
        "scheme version": job.settings.version,
        "strategy": result.strategy,
    }
    return ReportData(
        index=job.options.index, threshold=threshold, lsh=banding.describe(), figures=figures,
        distribution=size_distribution([s for s in sizes if s > 1], report.singletons_outside
                                       + sum(1 for s in sizes if s == 1)),
        largest=[(cluster, len(keys), [doc(k) for k in keys[:MEMBERS_SHOWN]]) for cluster, keys in biggest if len(keys) > 1],
        near_linked=[(s, doc(a), doc(b)) for a, b, s in near_pairs(report.near_linked, threshold, PAIRS_SHOWN)],
        near_rejected=[(s, doc(a), doc(b)) for a, b, s in near_pairs(report.near_rejected, threshold, PAIRS_SHOWN)],
        s_curve=[(s, float(banding.probability(s))) for s in (0.3, 0.5, 0.6, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95)],
        generated=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        measure=("resemblance (exact, from the texts)" if getattr(job.settings, "verification", "") == "text"
                 else "estimated resemblance"))


def needed_keys(report: ReportInput, threshold: float) -> list[str]:
    """Keys of the documents the report shows: the first members of the largest clusters and
    both documents of the pairs shown."""
    members = group_members(report.keys, report.ids)
    biggest = sorted(members.items(), key=lambda kv: (-len(kv[1]), kv[0]))[:LARGEST]
    keys = {k for _, values in biggest if len(values) > 1 for k in values[:MEMBERS_SHOWN]}
    for pairs in (report.near_linked, report.near_rejected):
        for a, b, _ in near_pairs(pairs, threshold, PAIRS_SHOWN):
            keys.update((a, b))
    return sorted(keys)


def write_report(job: Job, report: ReportInput, path: str) -> None:
    """Fetch the titles of the documents shown, render, write ``path`` atomically."""
    sources: dict[str, Mapping[str, Any]] = {}
    keys = needed_keys(report, job.params.threshold)
    for start in range(0, len(keys), 500):
        chunk = keys[start:start + 500]
        docs = [dict(zip(("_index", "_id"), job.split(key))) for key in chunk]
        response = job.retrier.call("reading titles for the report", lambda: job.client.mget(
            docs=docs, source=list(job.options.title_fields)))
        for key, found in zip(chunk, response["docs"]):
            if found.get("found"):
                sources[key] = found.get("_source") or {}
    page = render_report(build_report_data(job, report, sources))
    folder = os.path.dirname(os.path.abspath(path))
    handle, temporary = tempfile.mkstemp(prefix=".neardup-report-", suffix=".html", dir=folder)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(page)
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise
