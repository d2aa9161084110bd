"""Evaluation metrics.

* :mod:`~vqwae.metrics.usage`: code-usage histogram, perplexity, codes used.
* :mod:`~vqwae.metrics.image`: per-image PSNR / SSIM (uniform 11x11 window), ``resolution`` option.
* :mod:`~vqwae.metrics.lpips`: LPIPS (AlexNet or VGG16, v0.1 heads) from local weight files.
* :mod:`~vqwae.metrics.fid`: InceptionV3 features, Frechet distance, real-statistics cache.
* :mod:`~vqwae.metrics.evaluate`: :func:`evaluate_reconstructions`, all of the above over a split.

Names are imported lazily (``from vqwae.metrics import load_lpips`` works without importing
torchmetrics / torchvision until first use).
"""
from __future__ import annotations

import importlib

_EXPORTS = {
    "CodeUsage": "usage",
    "code_histogram": "usage",
    "perplexity_from_counts": "usage",
    "psnr": "image",
    "ssim": "image",
    "psnr_per_image": "image",
    "ssim_per_image": "image",
    "prepare_images": "image",
    "LPIPS": "lpips",
    "load_lpips": "lpips",
    "InceptionFeatures": "fid",
    "load_inception": "fid",
    "feature_statistics": "fid",
    "frechet_distance": "fid",
    "fid_from_features": "fid",
    "FIDStatsCache": "fid_cache",
    "StatsKey": "fid_cache",
    "dataset_fingerprint": "fid_cache",
    "evaluate_reconstructions": "evaluate",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
