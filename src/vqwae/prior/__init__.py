"""Stage two: a gated PixelCNN prior over the frozen autoencoder's code grids, its training and sampling."""
from typing import TYPE_CHECKING

from vqwae.lazy import attach

if TYPE_CHECKING:  # the exports, imported on first use (vqwae.lazy)
    from vqwae.prior.pixelcnn import GatedMaskedLayer, GatedPixelCNN, PixelCNNConfig
    from vqwae.prior.sampling import sample
    from vqwae.prior.train import (PriorTrainResult, cached_codes, evaluate_bpc, extract_codes, train_prior,
                                   weights_fingerprint)

__all__ = [
    "GatedMaskedLayer",
    "GatedPixelCNN",
    "PixelCNNConfig",
    "PriorTrainResult",
    "cached_codes",
    "evaluate_bpc",
    "extract_codes",
    "sample",
    "train_prior",
    "weights_fingerprint",
]
__getattr__, __dir__ = attach(__name__)
