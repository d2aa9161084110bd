"""2-D t-SNE of latent features coloured by class (the paper's Fig. on MNIST), with a silhouette score.

The silhouette score (scikit-learn, Euclidean) of the class labels in the 2-D embedding summarises the
picture in one number: near 1 when each class forms one compact, well separated cluster, near 0 or below
when classes overlap or split. It depends on the t-SNE run (seed, perplexity), so compare models at
equal settings. High-dimensional features are first reduced with PCA (``pca_dim``, 50 by default, the
usual t-SNE practice) for speed.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from vqwae.extras import require

# scikit-learn (~1.6 s) and matplotlib (~0.9 s) are imported inside the functions that use them: every
# vqwae command imports this module, few of them draw a t-SNE.


@dataclass
class TSNEResult:
    embedding: np.ndarray  # (n, 2)
    labels: np.ndarray  # (n,) the labels of the embedded points (after any subsampling)
    indices: np.ndarray  # (n,) rows of the input features that were embedded
    silhouette: float  # of `labels` in the 2-D embedding; nan with fewer than 2 classes
    png_path: Path | None


def _to_numpy(x) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        return x.detach().cpu().numpy()
    return np.asarray(x)


def silhouette_2d(embedding, labels) -> float:
    """sklearn's silhouette score of ``labels`` in ``embedding``; nan when it is undefined."""
    silhouette_score = require("sklearn.metrics").silhouette_score

    labels = _to_numpy(labels).reshape(-1)
    n_labels = len(np.unique(labels))
    if n_labels < 2 or n_labels >= len(labels):
        return float("nan")
    return float(silhouette_score(_to_numpy(embedding), labels))


def tsne_embed(features, *, perplexity: float = 30.0, pca_dim: int | None = 50, seed: int = 0,
               max_iter: int = 1000) -> np.ndarray:
    """(n, F) features -> (n, 2) t-SNE embedding (PCA to ``pca_dim`` first when F is larger).

    The perplexity is capped at (n - 1) / 3 so tiny sets still work."""
    PCA = require("sklearn.decomposition").PCA
    TSNE = require("sklearn.manifold").TSNE

    x = _to_numpy(features).reshape(len(features), -1).astype(np.float32)
    n = x.shape[0]
    if n < 3:
        raise ValueError(f"t-SNE needs at least 3 points, got {n}")
    if pca_dim is not None and x.shape[1] > pca_dim and n > pca_dim:
        x = PCA(n_components=pca_dim, random_state=seed).fit_transform(x)
    # scikit-learn's Barnes-Hut tree crashes the process (segfault) on coincident points, which a collapsed
    # codebook produces (many images with identical quantized latents). Separate exact duplicates by a
    # deterministic jitter far below the data's scale, and use the exact method on small sets.
    if len(np.unique(x, axis=0)) < n:
        scale = float(x.std()) or 1.0
        x = x + np.random.default_rng(seed).normal(0.0, 1e-4 * scale, size=x.shape).astype(np.float32)
    perplexity = float(min(perplexity, max((n - 1) / 3.0, 1.0)))
    kwargs = dict(n_components=2, perplexity=perplexity, init="pca", learning_rate="auto", random_state=seed,
                  method="exact" if n <= 500 else "barnes_hut")
    # scikit-learn renamed n_iter to max_iter in 1.5
    params = inspect.signature(TSNE.__init__).parameters
    kwargs["max_iter" if "max_iter" in params else "n_iter"] = max_iter
    return TSNE(**kwargs).fit_transform(x).astype(np.float64)


def plot_embedding(embedding, labels, out_png: str | Path, *, title: str = "t-SNE",
                   class_names: list[str] | None = None, point_size: float | None = None) -> Path:
    """Scatter of a 2-D embedding coloured by class with a legend, saved as PNG (Agg backend).

    point_size: marker area; None picks one from the number of points (larger for small sets)."""
    matplotlib = require("matplotlib")
    FigureCanvasAgg = require("matplotlib.backends.backend_agg").FigureCanvasAgg
    Figure = require("matplotlib.figure").Figure  # no pyplot: no global state, no GUI backend

    emb = _to_numpy(embedding)
    labels = _to_numpy(labels).reshape(-1)
    if point_size is None:
        point_size = 10.0 if len(labels) <= 1000 else 4.0 if len(labels) <= 5000 else 2.0
    classes = np.unique(labels)
    cmap = matplotlib.colormaps["tab10" if len(classes) <= 10 else "tab20" if len(classes) <= 20 else "turbo"]
    fig = Figure(figsize=(6.4, 5.6), dpi=120)
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    for i, c in enumerate(classes):
        m = labels == c
        color = cmap(i % cmap.N) if len(classes) <= 20 else cmap(i / max(len(classes) - 1, 1))
        name = class_names[int(c)] if class_names is not None else str(c)
        ax.scatter(emb[m, 0], emb[m, 1], s=point_size, color=color, label=name, alpha=0.8, linewidths=0)
    ax.set_xlabel("t-SNE 1")
    ax.set_ylabel("t-SNE 2")
    ax.set_title(title)
    ax.legend(title="class", markerscale=max(12.0 / point_size, 1.0), fontsize="small",
              loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
    fig.tight_layout()
    out_png = Path(out_png)
    out_png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out_png, bbox_inches="tight")
    return out_png


def tsne_plot(
    features,
    labels,
    *,
    out_png: str | Path | None = None,
    title: str = "t-SNE",
    class_names: list[str] | None = None,
    perplexity: float = 30.0,
    pca_dim: int | None = 50,
    max_points: int | None = None,
    seed: int = 0,
    max_iter: int = 1000,
) -> TSNEResult:
    """t-SNE of (n, ...) features, silhouette of the class labels in 2-D, and (if ``out_png``) a PNG.

    max_points: embed a random (seeded) subset of at most this many points (t-SNE is O(n log n) but slow
    on CPU beyond ~10k points). The PNG title gets the silhouette appended."""
    x = _to_numpy(features)
    y = _to_numpy(labels).reshape(-1)
    if len(x) != len(y):
        raise ValueError(f"{len(x)} feature rows but {len(y)} labels")
    idx = np.arange(len(x))
    if max_points is not None and len(x) > max_points:
        idx = np.sort(np.random.default_rng(seed).choice(len(x), size=max_points, replace=False))
    x, y = x[idx], y[idx]
    emb = tsne_embed(x, perplexity=perplexity, pca_dim=pca_dim, seed=seed, max_iter=max_iter)
    sil = silhouette_2d(emb, y)
    png = None
    if out_png is not None:
        png = plot_embedding(emb, y, out_png, title=f"{title} (silhouette {sil:.3f})", class_names=class_names)
    return TSNEResult(embedding=emb, labels=y, indices=idx, silhouette=sil, png_path=png)
