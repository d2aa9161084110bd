"""Evaluation metrics.

* :mod:`~vqwae.metrics.usage`: code-usage histogram, perplexity, codes used.
* :mod:`~vqwae.metrics.image`: per-image PSNR / SSIM (uniform 11x11 window), ``resolution`` option.
* :mod:`~vqwae.metrics.lpips`: LPIPS (AlexNet or VGG16, v0.1 heads) from local weight files.
* :mod:`~vqwae.metrics.fid`: InceptionV3 features, Frechet distance, real-statistics cache.
* :mod:`~vqwae.metrics.evaluate`: :func:`evaluate_reconstructions`, all of the above over a split.

Names are imported on first use (``vqwae.lazy``): ``from vqwae.metrics import load_lpips`` imports no
torchmetrics / torchvision until it is asked for, and a missing one is a line naming its ``pip install``.
"""
from typing import TYPE_CHECKING

from vqwae.lazy import attach

if TYPE_CHECKING:  # the exports, imported on first use (vqwae.lazy)
    from vqwae.metrics.usage import CodeUsage, code_histogram, perplexity_from_counts
    from vqwae.metrics.image import psnr, ssim, psnr_per_image, ssim_per_image, prepare_images
    from vqwae.metrics.lpips import LPIPS, load_lpips
    from vqwae.metrics.fid import (InceptionFeatures, feature_statistics, fid_from_features, frechet_distance,
                                   load_inception)
    from vqwae.metrics.fid_cache import FIDStatsCache, StatsKey, dataset_fingerprint
    from vqwae.metrics.evaluate import evaluate_reconstructions

__all__ = [
    "CodeUsage",
    "FIDStatsCache",
    "InceptionFeatures",
    "LPIPS",
    "StatsKey",
    "code_histogram",
    "dataset_fingerprint",
    "evaluate_reconstructions",
    "feature_statistics",
    "fid_from_features",
    "frechet_distance",
    "load_inception",
    "load_lpips",
    "perplexity_from_counts",
    "prepare_images",
    "psnr",
    "psnr_per_image",
    "ssim",
    "ssim_per_image",
]
__getattr__, __dir__ = attach(__name__)
