"""Per-image PSNR and SSIM (data_range 1, images clamped to [0, 1]), averaged over images.

Conventions (those of the VQ-WAE evaluation, see the notes on the official implementation):

* Both images are clamped to [0, 1]; ``data_range`` is 1.
* Every metric is computed per image and then averaged over images (not over the pooled pixels).
* ``resolution``: ``"native"`` uses the images as they are; ``256`` first upsamples both images to
  256x256 with bilinear interpolation (``align_corners=False``, no antialiasing), as the authors do
  for their 32x32 images before PSNR / SSIM / LPIPS. Always report which one you used.
* PSNR = 10 log10(1 / MSE) with the MSE over the image's C*H*W values; an exact match (MSE 0) would
  be +inf, so the MSE is floored at 1e-10 (PSNR at most 100 dB) to keep averages finite.
* SSIM uses the authors' **uniform 11x11 window** (not the Gaussian one), K1 = 0.01, K2 = 0.03 and
  population (biased) local variances. It is computed with
  ``torchmetrics.functional.structural_similarity_index_measure(gaussian_kernel=False,
  kernel_size=11, data_range=1.0)`` -- verified: that call builds a ones(11, 11)/121 kernel -- and
  then averaged over the **valid** window positions only (the 5-pixel border, where the window
  would hang over the edge, is dropped), per channel and then over channels. This is the MATLAB
  reference / scikit-image convention (``skimage.metrics.structural_similarity(win_size=11,
  data_range=1, channel_axis=0, use_sample_covariance=False)`` agrees to 1e-12) and what
  torchmetrics itself returned before 1.5. torchmetrics >= 1.5 (PR #2721) instead averages over
  the whole reflect-padded image; on 32x32 images more than half of the window positions are
  border ones, so the two differ noticeably at native resolution. Taking the full SSIM map from
  torchmetrics and cropping it ourselves gives the same number with every torchmetrics version.
  (scikit-image's default ``use_sample_covariance=True`` scales the local variances by 121/120;
  the difference is about 1e-5.)
"""
from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F

from vqwae.extras import require

__all__ = [
    "Resolution",
    "SSIM_WINDOW",
    "check_resolution",
    "prepare_images",
    "psnr_per_image",
    "ssim_per_image",
    "psnr",
    "ssim",
]

Resolution = Literal["native"] | int
SSIM_WINDOW = 11
_MSE_FLOOR = 1e-10


def check_resolution(resolution: Resolution) -> Resolution:
    """Validate a ``resolution`` option: ``"native"`` or a positive int (the paper uses 256)."""
    if resolution == "native":
        return "native"
    if isinstance(resolution, str) and resolution.isdigit():
        resolution = int(resolution)
    if isinstance(resolution, int) and not isinstance(resolution, bool) and resolution > 0:
        return resolution
    raise ValueError(f"resolution must be 'native' or a positive int such as 256, got {resolution!r}")


def prepare_images(images: torch.Tensor, resolution: Resolution = "native") -> torch.Tensor:
    """Clamp (B, C, H, W) images to [0, 1] as float32 (float64 kept) and resize to ``resolution``.

    ``resolution=256`` upsamples bilinearly (align_corners=False) to 256x256, as the authors do
    before PSNR / SSIM / LPIPS; a convex combination, so the result stays in [0, 1].
    """
    if images.ndim != 4:
        raise ValueError(f"expected images of shape (B, C, H, W), got {tuple(images.shape)}")
    resolution = check_resolution(resolution)
    x = images if images.dtype in (torch.float32, torch.float64) else images.float()
    x = x.clamp(0.0, 1.0)
    if resolution != "native" and tuple(x.shape[-2:]) != (resolution, resolution):
        x = F.interpolate(x, size=(resolution, resolution), mode="bilinear", align_corners=False)
        x = x.clamp(0.0, 1.0)
    return x


def _pair(a: torch.Tensor, b: torch.Tensor, resolution: Resolution) -> tuple[torch.Tensor, torch.Tensor]:
    if a.shape != b.shape:
        raise ValueError(f"image shapes differ: {tuple(a.shape)} vs {tuple(b.shape)}")
    return prepare_images(a, resolution), prepare_images(b, resolution)


def psnr_per_image(
    reconstructions: torch.Tensor, targets: torch.Tensor, *, resolution: Resolution = "native"
) -> torch.Tensor:
    """PSNR in dB of each image pair, data_range 1: (B, C, H, W) x 2 -> (B,)."""
    x, y = _pair(reconstructions, targets, resolution)
    mse = (x - y).pow(2).flatten(1).mean(1)
    return 10.0 * torch.log10(1.0 / mse.clamp_min(_MSE_FLOOR))


def ssim_per_image(
    reconstructions: torch.Tensor, targets: torch.Tensor, *, resolution: Resolution = "native"
) -> torch.Tensor:
    """SSIM of each image pair (uniform 11x11 window, data_range 1, valid region): -> (B,).

    See the module docstring for the exact convention. Images must be at least 11x11 (after
    resizing).
    """
    structural_similarity_index_measure = require("torchmetrics.functional.image").structural_similarity_index_measure

    x, y = _pair(reconstructions, targets, resolution)
    h, w = x.shape[-2:]
    if h < SSIM_WINDOW or w < SSIM_WINDOW:
        raise ValueError(f"SSIM with an {SSIM_WINDOW}x{SSIM_WINDOW} window needs images of at least that size, got {h}x{w}")
    _, full = structural_similarity_index_measure(
        x,
        y,
        gaussian_kernel=False,
        kernel_size=SSIM_WINDOW,
        data_range=1.0,
        reduction="none",
        return_full_image=True,
    )
    pad = (SSIM_WINDOW - 1) // 2
    valid = full[..., pad : h - pad, pad : w - pad]
    return valid.flatten(1).mean(1)


def psnr(reconstructions: torch.Tensor, targets: torch.Tensor, *, resolution: Resolution = "native") -> float:
    """Mean over images of the per-image PSNR (dB)."""
    return float(psnr_per_image(reconstructions, targets, resolution=resolution).mean())


def ssim(reconstructions: torch.Tensor, targets: torch.Tensor, *, resolution: Resolution = "native") -> float:
    """Mean over images of the per-image SSIM."""
    return float(ssim_per_image(reconstructions, targets, resolution=resolution).mean())
