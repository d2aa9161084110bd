"""Code-usage histograms: the paper's "latent distribution over the codebook" figure."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Mapping

import numpy as np

from vqwae.figures._common import PathLike, new_figure, save_png, to_numpy_1d

__all__ = ["usage_histogram", "side_by_side_usage", "usage_summary"]


def usage_summary(counts) -> tuple[np.ndarray, float, int]:
    """(frequencies summing to 1, perplexity = exp(entropy), codes used) of a usage histogram."""
    c = to_numpy_1d(counts)
    if (c < 0).any():
        raise ValueError("counts must be non-negative")
    total = c.sum()
    if total <= 0:
        return np.zeros_like(c), 0.0, 0
    p = c / total
    nz = p[p > 0]
    return p, float(math.exp(-(nz * np.log(nz)).sum())), int((c > 0).sum())


def _draw(ax, counts, *, pi=None, sort: bool, color: str = "tab:blue", show_legend: bool = True) -> tuple[float, int, int, float]:
    """Draw one usage panel; returns (perplexity, codes used, K, highest value drawn)."""
    freq, ppl, used = usage_summary(counts)
    k = freq.size
    order = np.argsort(-freq, kind="stable") if sort else np.arange(k)
    x = np.arange(k)
    top = max(float(freq.max()) if k else 0.0, 1.0 / k)
    # One filled step outline, not K bars: the same picture, drawn in constant time (65,536 bars took ~30 s).
    ax.stairs(freq[order], np.arange(k + 1) - 0.5, fill=True, color=color, alpha=0.75, linewidth=0,
              label="code usage (frequency)")
    ax.axhline(1.0 / k, color="gray", linestyle="--", linewidth=1, label=f"uniform 1/K = {1.0 / k:.2g}")
    if pi is not None:
        pi_v = to_numpy_1d(pi)
        if pi_v.size != k:
            raise ValueError(f"pi has {pi_v.size} entries, counts have {k}")
        ax.plot(x, pi_v[order], color="tab:red", linewidth=1.3, label="learned π (mean over positions)")
        top = max(top, float(pi_v.max()))
    ax.set_xlim(-0.5, k - 0.5)
    ax.set_ylim(0, 1.08 * top)
    ax.set_xlabel("code (sorted by usage)" if sort else "code index")
    ax.set_ylabel("frequency")
    ax.grid(axis="y", alpha=0.3)
    if show_legend:
        ax.legend(loc="upper right", fontsize=8, framealpha=0.9)
    return ppl, used, k, top


def usage_histogram(
    counts,
    path: PathLike,
    pi=None,
    title: str = "Latent distribution over the codebook",
    *,
    sort: bool = False,
) -> Path:
    """Bar chart of code-usage frequency (by code index, or sorted with ``sort=True``).

    ``counts``: (K,) usage histogram (e.g. ``evaluate_reconstructions(...)["code_counts"]``).
    ``pi``: optional learned code distribution (K,), mean over latent positions, drawn as a line.
    The title gets the perplexity and the number of codes used.
    """
    fig = new_figure(9.0, 4.0)
    ax = fig.add_subplot(1, 1, 1)
    ppl, used, k, _ = _draw(ax, counts, pi=pi, sort=sort)
    ax.set_title(f"{title}\nperplexity {ppl:.1f} of K = {k}, codes used {used}/{k}", fontsize=11)
    return save_png(fig, path)


def side_by_side_usage(
    counts_by_model: Mapping[str, object],
    path: PathLike,
    *,
    sort: bool = True,
    title: str | None = "Code usage by model",
    ncols: int | None = None,
) -> Path:
    """One usage panel per model, sorted by usage by default for comparing shapes. Each panel has its own y
    scale: a collapsed codebook's one tall bar would flatten a fully used one to a line on a shared scale."""
    if not counts_by_model:
        raise ValueError("no models to plot")
    names = list(counts_by_model)
    n = len(names)
    ncols = ncols or (n if n <= 3 else math.ceil(math.sqrt(n)))
    nrows = math.ceil(n / ncols)
    fig = new_figure(4.6 * ncols, 3.4 * nrows + 0.5)
    axes = fig.subplots(nrows, ncols, squeeze=False)
    colors = ["tab:blue", "tab:orange", "tab:green", "tab:purple", "tab:brown", "tab:cyan"]
    for i, name in enumerate(names):
        ax = axes[i // ncols][i % ncols]
        ppl, used, k, top = _draw(ax, counts_by_model[name], sort=sort, color=colors[i % len(colors)], show_legend=(i == 0))
        ax.set_ylim(0, 1.08 * top)
        ax.set_title(f"{name}\nperplexity {ppl:.1f}, used {used}/{k}", fontsize=10)
    for j in range(n, nrows * ncols):
        axes[j // ncols][j % ncols].set_visible(False)
    if title:
        fig.suptitle(title, fontsize=12)
    fig.tight_layout()
    return save_png(fig, path)
