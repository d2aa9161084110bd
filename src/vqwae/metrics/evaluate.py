"""Reconstruction metrics of a frozen autoencoder over a data split.

:func:`evaluate_reconstructions` runs ``x_hat, out = model(x)`` over a DataLoader of (images,
labels) with images in [0, 1], clamps the reconstructions to [0, 1] and accumulates:

* ``mse``: mean squared error over all pixels, always at the **native** resolution (the paper's
  "test MSE");
* ``psnr``, ``ssim``, ``lpips`` (AlexNet) and, when asked for, ``lpips_vgg`` (VGG16): per image,
  averaged over images, at ``resolution`` (``"native"`` or ``256``: bilinear upsampling first, as
  the authors do for 32x32 images) -- see :mod:`vqwae.metrics.image` and :mod:`vqwae.metrics.lpips`;
* ``rfid``: FID between the real images and their reconstructions (InceptionV3 pool3 features at
  299x299 from the native images, :mod:`vqwae.metrics.fid`); the real statistics come from the
  :class:`~vqwae.metrics.fid.FIDStatsCache` when ``real_stats_cache_key`` is given (and are stored
  there after a miss);
* code usage: ONE histogram of ``out.indices`` over the whole split and all latent positions
  (:class:`vqwae.metrics.usage.CodeUsage`) -> ``perplexity`` (exp entropy, at most K),
  ``codes_used`` and ``code_counts`` (a list of K ints, for plotting).

A metric whose network is unavailable is ``None`` with a ``"<metric>_skipped"`` reason; the other
metrics are still computed.
"""
from __future__ import annotations

import contextlib
import time
from typing import Any, Iterable, Mapping

import torch

from vqwae.progress import progress_bar
from vqwae.metrics.fid import (
    FIDStatsCache,
    InceptionFeatures,
    StatsKey,
    feature_statistics,
    fid_from_features,
    frechet_distance,
    load_inception,
)
from vqwae.metrics.image import Resolution, check_resolution, prepare_images, psnr_per_image, ssim_per_image
from vqwae.metrics.lpips import LPIPS, load_lpips
from vqwae.metrics.usage import CodeUsage
from vqwae.threads import cpu_threads

__all__ = ["evaluate_reconstructions"]

_AUTO = "auto"


def _indices_of(out: Any) -> torch.Tensor:
    idx = out.get("indices") if isinstance(out, Mapping) else getattr(out, "indices", None)
    if idx is None:
        raise TypeError("model(x) must return (x_hat, out) with out.indices of shape (B, h, w)")
    return idx


def evaluate_reconstructions(
    model: torch.nn.Module,
    loader: Iterable,
    *,
    num_codes: int,
    device: str | torch.device,
    resolution: Resolution = "native",
    lpips_net: LPIPS | str | None = None,
    lpips_vgg_net: LPIPS | str | None = None,
    inception: InceptionFeatures | str | None = None,
    real_stats_cache_key: StatsKey | None = None,
    limit: int | None = None,
    progress: bool = True,
    stats_cache: FIDStatsCache | None = None,
    skip_reasons: Mapping[str, str] | None = None,
    num_threads: int | None = None,
) -> dict:
    """Evaluate reconstructions of ``model`` over ``loader``; returns a dict of plain Python values.

    Args:
        model: autoencoder with ``x_hat, out = model(x)``; ``out.indices`` (B, h, w) long. It is
            put in eval mode for the evaluation (its previous mode is restored afterwards).
        loader: iterable of ``(images, labels)`` (or bare image tensors), images (B, C, H, W) in [0, 1].
        num_codes: codebook size K (length of ``code_counts``).
        device: where the images are sent and the metric networks run; the model must already be there.
        resolution: ``"native"`` or ``256`` for PSNR / SSIM / LPIPS (MSE is always native).
        lpips_net: an :class:`~vqwae.metrics.lpips.LPIPS`, ``"auto"`` (:func:`load_lpips` with its
            default resolution: ``$VQWAE_LPIPS_WEIGHTS``, then download) or None (skip LPIPS).
        lpips_vgg_net: the same for LPIPS-VGG (``load_lpips(net="vgg")``); None leaves ``lpips_vgg``
            out of the result unless ``skip_reasons`` has a reason for it.
        inception: an :class:`~vqwae.metrics.fid.InceptionFeatures`, ``"auto"`` or None (skip rFID).
        real_stats_cache_key: if given, the real-image statistics are read from / written to
            ``stats_cache`` (default :class:`FIDStatsCache` at ``~/.cache/vqwae/fid``) under this key
            and the Inception weights' identity; the key must describe the same images (and
            ``limit``) this loader yields.
        limit: evaluate at most this many images.
        progress: show a tqdm progress bar on stderr.
        skip_reasons: reasons to report for metrics whose network is None, e.g. the reason
            returned by :func:`load_lpips` (``{"lpips": why, "lpips_vgg": why, "rfid": why}``).
        num_threads: torch CPU threads during the evaluation when ``device`` is the CPU (default:
            :func:`~vqwae.threads.default_num_threads`); restored afterwards.

    Returns keys ``num_images, resolution, mse, psnr, ssim, lpips, rfid, perplexity, codes_used,
    num_codes, code_counts, seconds`` (+ ``lpips_skipped`` / ``rfid_skipped``, + ``rfid_real_stats``:
    "cache" or "computed"; + ``lpips_vgg`` when asked for: its value, or None and ``lpips_vgg_skipped``).
    """
    resolution = check_resolution(resolution)
    device = torch.device(device)
    reasons = dict(skip_reasons or {})
    result: dict[str, Any] = {}

    if isinstance(lpips_net, str):
        if lpips_net != _AUTO:
            raise ValueError(f"lpips_net must be an LPIPS module, 'auto' or None, got {lpips_net!r}")
        lpips_net, why = load_lpips(device=device)
        if why:
            reasons["lpips"] = why
    if isinstance(lpips_vgg_net, str):
        if lpips_vgg_net != _AUTO:
            raise ValueError(f"lpips_vgg_net must be an LPIPS module, 'auto' or None, got {lpips_vgg_net!r}")
        lpips_vgg_net, why = load_lpips(net="vgg", device=device)
        if why:
            reasons["lpips_vgg"] = why
    if isinstance(inception, str):
        if inception != _AUTO:
            raise ValueError(f"inception must be an InceptionFeatures, 'auto' or None, got {inception!r}")
        inception, why = load_inception(device=device)
        if why:
            reasons["rfid"] = why
    if lpips_net is not None:
        lpips_net = lpips_net.to(device).eval()
    if lpips_vgg_net is not None:
        lpips_vgg_net = lpips_vgg_net.to(device).eval()
    if inception is not None:
        inception.to(device)

    real_stats = None
    if inception is not None and real_stats_cache_key is not None:
        stats_cache = stats_cache or FIDStatsCache()
        hit = stats_cache.load_with_count(real_stats_cache_key, inception.identity)
        real_stats, cached_count = (hit[:2], hit[2]) if hit is not None else (None, None)
        result["rfid_real_stats"] = "cache" if real_stats is not None else "computed"
    elif inception is not None:
        result["rfid_real_stats"] = "computed"

    usage = CodeUsage(num_codes, device=device)
    n_images = 0
    sq_err_sum, n_values = 0.0, 0
    psnr_sum = ssim_sum = lpips_sum = lpips_vgg_sum = 0.0
    real_feats: list[torch.Tensor] = []
    fake_feats: list[torch.Tensor] = []

    was_training = model.training
    model.eval()
    start = time.perf_counter()
    try:
        total = len(loader) if hasattr(loader, "__len__") else None
    except TypeError:
        total = None
    threads = cpu_threads(num_threads) if device.type == "cpu" else contextlib.nullcontext()
    try:
        with threads, torch.inference_mode():
            for batch in progress_bar(loader, total=total, desc="evaluate" if progress else None, unit="batch"):
                if limit is not None and n_images >= limit:
                    break
                images = batch[0] if isinstance(batch, (tuple, list)) else batch
                if limit is not None:
                    images = images[: limit - n_images]
                x = images.to(device=device, dtype=torch.float32).clamp(0.0, 1.0)
                x_hat, out = model(x)
                x_hat = x_hat.float().clamp(0.0, 1.0)
                if x_hat.shape != x.shape:
                    raise ValueError(f"reconstruction shape {tuple(x_hat.shape)} != input shape {tuple(x.shape)}")
                usage.update(_indices_of(out).detach())

                sq_err_sum += float((x_hat - x).double().pow(2).sum())
                n_values += x.numel()
                a, b = prepare_images(x_hat, resolution), prepare_images(x, resolution)
                psnr_sum += float(psnr_per_image(a, b).double().sum())
                ssim_sum += float(ssim_per_image(a, b).double().sum())
                if lpips_net is not None:
                    lpips_sum += float(lpips_net(a, b, normalize=True).double().sum())
                if lpips_vgg_net is not None:
                    lpips_vgg_sum += float(lpips_vgg_net(a, b, normalize=True).double().sum())
                if inception is not None:
                    if real_stats is None:
                        real_feats.append(inception(x))
                    fake_feats.append(inception(x_hat))
                n_images += x.shape[0]
    finally:
        model.train(was_training)

    if n_images == 0:
        raise ValueError("the loader yielded no images")

    result.update(
        num_images=n_images,
        resolution=resolution,
        mse=sq_err_sum / n_values,
        psnr=psnr_sum / n_images,
        ssim=ssim_sum / n_images,
        lpips=lpips_sum / n_images if lpips_net is not None else None,
    )
    if lpips_net is None:
        result["lpips_skipped"] = reasons.get("lpips", "no LPIPS network given (see vqwae.metrics.lpips.load_lpips)")
    if lpips_vgg_net is not None:
        result["lpips_vgg"] = lpips_vgg_sum / n_images
    elif "lpips_vgg" in reasons:
        result.update(lpips_vgg=None, lpips_vgg_skipped=reasons["lpips_vgg"])

    if inception is None:
        result["rfid"] = None
        result["rfid_skipped"] = reasons.get("rfid", "no Inception network given (see vqwae.metrics.fid.load_inception)")
    elif n_images < 2:
        result["rfid"] = None
        result["rfid_skipped"] = "rFID needs at least 2 images"
    else:
        fake = torch.cat(fake_feats)
        if real_stats is None:
            real = torch.cat(real_feats)
            if real_stats_cache_key is not None:
                stats_cache.save(real_stats_cache_key, inception.identity, *feature_statistics(real), num_images=n_images)
            result["rfid"] = fid_from_features(real, fake)  # exact sample-space form when N < 2048
        else:
            if cached_count is not None and cached_count != n_images:
                raise ValueError(
                    f"the cached real-image FID statistics for {real_stats_cache_key} were computed on "
                    f"{cached_count} images but this run evaluated {n_images}: the cache key does not "
                    "describe this loader (check its limit and fingerprint)"
                )
            result["rfid"] = frechet_distance(*real_stats, *feature_statistics(fake))

    result.update(
        perplexity=usage.perplexity,
        codes_used=usage.codes_used,
        num_codes=num_codes,
        code_counts=[int(c) for c in usage.counts.round().to(torch.int64).cpu().tolist()],
        seconds=time.perf_counter() - start,
    )
    return result
