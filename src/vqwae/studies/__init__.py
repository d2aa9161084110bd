"""Representation studies on a frozen autoencoder: linear probe and t-SNE with a silhouette score."""
from typing import TYPE_CHECKING

from vqwae.lazy import attach

if TYPE_CHECKING:  # the exports, imported on first use (vqwae.lazy)
    from vqwae.studies.probe import (FEATURE_KINDS, ProbeResult, Standardizer, extract_features, linear_probe,
                                     probe_autoencoder)
    from vqwae.studies.tsne import TSNEResult, plot_embedding, silhouette_2d, tsne_embed, tsne_plot

__all__ = [
    "FEATURE_KINDS",
    "ProbeResult",
    "Standardizer",
    "TSNEResult",
    "extract_features",
    "linear_probe",
    "plot_embedding",
    "probe_autoencoder",
    "silhouette_2d",
    "tsne_embed",
    "tsne_plot",
]
__getattr__, __dir__ = attach(__name__)
