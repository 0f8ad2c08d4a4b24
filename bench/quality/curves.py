"""Observed candidate probability against exact resemblance, next to the theoretical curves.

A pair with exact resemblance ``s`` shares one given minhash slot with probability ``s``; with
``G`` groups of ``R`` slots it shares at least one supershingle with probability
``1-(1-s^R)^G`` and at least one megashingle (two supershingles) with probability
``1-(1-p)^G-G p (1-p)^(G-1)``, ``p = s^R``. Pairs are binned by ``s``; in each bin the observed
share of candidates ``k/n`` gets a Wilson 95 % interval, and the expected value is the mean of
the theoretical curve over the pairs of that bin (the curve is not linear within a bin). A bin
"agrees" when the expected value lies inside the interval; about 95 % of bins should.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from quality.metrics import wilson_interval


@dataclass(frozen=True)
class BinnedRate:
    centre: np.ndarray
    n: np.ndarray
    k: np.ndarray
    expected: np.ndarray
    low: np.ndarray
    high: np.ndarray

    @property
    def observed(self) -> np.ndarray:
        with np.errstate(invalid="ignore", divide="ignore"):
            return self.k / self.n

    @property
    def agrees(self) -> np.ndarray:
        """Per non-empty bin: expected value inside the 95 % interval."""
        ok = self.n > 0
        return (self.expected[ok] >= self.low[ok] - 1e-12) & (self.expected[ok] <= self.high[ok] + 1e-12)


def binned_rate(similarity: np.ndarray, candidate: np.ndarray, expected: np.ndarray,
                edges: np.ndarray) -> BinnedRate:
    """Candidate share per similarity bin with Wilson intervals and the mean expected value."""
    which = np.clip(np.digitize(similarity, edges) - 1, 0, len(edges) - 2)
    inside = (similarity >= edges[0]) & (similarity <= edges[-1])
    bins = len(edges) - 1
    n = np.bincount(which[inside], minlength=bins)
    k = np.bincount(which[inside], weights=candidate[inside].astype(np.float64), minlength=bins)
    total = np.bincount(which[inside], weights=expected[inside], minlength=bins)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_expected = total / n
    low, high = wilson_interval(k, n)
    return BinnedRate(centre=(edges[:-1] + edges[1:]) / 2, n=n, k=k, expected=mean_expected,
                      low=low, high=high)


def _unit_axis(ax) -> None:
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)


def _finish(fig, legend_ax, loc: str, path: str, dpi: int) -> None:
    import matplotlib.pyplot as plt

    legend_ax.legend(fontsize=7, loc=loc)
    fig.tight_layout()
    save_small_png(fig, path, dpi=dpi)
    plt.close(fig)


def save_small_png(fig, path: str, dpi: int) -> None:
    """Save a figure as a palette PNG (64 colours): a line plot loses nothing visible and the
    file is a fraction of the size of a true-colour one."""
    import io

    from PIL import Image

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi)
    buffer.seek(0)
    with Image.open(buffer) as image:
        image.convert("RGB").quantize(colors=64).save(path, optimize=True)


def plot_candidate_probability(path: str, panels: list[tuple[str, dict[str, tuple[BinnedRate, callable]]]]) -> None:
    """One panel per corpus; per scheme the observed points with intervals and its curve."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(panels), figsize=(5.2 * len(panels), 4.2), squeeze=False)
    grid = np.linspace(0, 1, 201)
    colours = ["tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple"]
    for ax, (title, schemes) in zip(axes[0], panels):
        for colour, (label, (rate, curve)) in zip(colours, schemes.items()):
            ax.plot(grid, curve(grid), color=colour, lw=1.2, label=f"{label}: theory")
            ok = rate.n > 0
            err = np.clip(np.vstack([rate.observed[ok] - rate.low[ok], rate.high[ok] - rate.observed[ok]]), 0, None)
            ax.errorbar(rate.centre[ok], rate.observed[ok], yerr=err, fmt="o", ms=3, color=colour,
                        capsize=2, lw=0.8, label=f"{label}: observed (95 % CI)")
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("exact resemblance s")
        ax.set_ylabel("P(pair is a candidate)")
        ax.set_xlim(0, 1)
        _unit_axis(ax)
    _finish(fig, axes[0][0], "upper left", path, dpi=90)


def plot_scores(path: str, panels: list[tuple[str, dict[str, dict[str, list[float]]]]],
                thresholds: list[float]) -> None:
    """Precision, recall, F1 against threshold: one row per corpus, one column per score."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(panels), 3, figsize=(14, 3.6 * len(panels)), squeeze=False)
    for row, (title, methods) in zip(axes, panels):
        for col, score in enumerate(("precision", "recall", "f1")):
            ax = row[col]
            for name, scores in methods.items():
                style = "-" if "neardup" in name else "--"
                ax.plot(thresholds, scores[score], style, marker=".", lw=1.2, label=name)
            ax.set_title(f"{title}: {score}", fontsize=10)
            ax.set_xlabel("threshold t (exact resemblance ≥ t is a true pair)")
            _unit_axis(ax)
    _finish(fig, axes[0][2], "lower left", path, dpi=80)
