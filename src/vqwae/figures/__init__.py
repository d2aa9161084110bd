"""Figures (matplotlib, Agg canvas, PNG at 120 dpi); no pyplot global state is touched.

* :func:`reconstruction_grid` -- originals above their reconstructions.
* :func:`usage_histogram` -- code-usage frequency with the learned pi overlaid (the paper's
  "latent distribution over the codebook"), perplexity and codes used in the title.
* :func:`side_by_side_usage` -- usage histograms of several models.
* :func:`reconstruction_rows` -- the same images as several models reconstruct them, a labelled strip each.
* :func:`training_curves` -- every numeric key of a metrics.jsonl log, grouped in panels.
* :func:`learning_curves` -- perplexity and MSE against steps, a line per model, reference values as marks.
"""
from typing import TYPE_CHECKING

from vqwae.lazy import attach

if TYPE_CHECKING:  # the exports, imported on first use (vqwae.lazy)
    from vqwae.figures.curves import learning_curves, read_metrics_jsonl, training_curves
    from vqwae.figures.reconstructions import reconstruction_grid, reconstruction_rows
    from vqwae.figures.usage import side_by_side_usage, usage_histogram, usage_summary

__all__ = [
    "reconstruction_grid",
    "reconstruction_rows",
    "learning_curves",
    "usage_histogram",
    "side_by_side_usage",
    "usage_summary",
    "training_curves",
    "read_metrics_jsonl",
]
__getattr__, __dir__ = attach(__name__)
