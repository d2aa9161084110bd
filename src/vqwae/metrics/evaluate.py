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
  :class:`~vqwae.metrics.fid_cache.FIDStatsCache` when ``real_stats_cache_key`` is given (and are stored
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
from vqwae.metrics.fid import InceptionFeatures, feature_statistics, fid_against_statistics, fid_from_features, load_inception
from vqwae.metrics.fid_cache import FIDStatsCache, StatsKey
from vqwae.metrics.image import Resolution, check_resolution, prepare_images, psnr_per_image, ssim_per_image
from vqwae.metrics.lpips import LPIPS, load_lpips
from vqwae.metrics.usage import CodeUsage
from vqwae.threads import cpu_threads

__all__ = ["evaluate_reconstructions", "load_metric_networks", "METRIC_NETWORKS"]

_AUTO = "auto"


def _indices_of(out: Any) -> torch.Tensor:
    idx = out.get("indices") if isinstance(out, Mapping) else getattr(out, "indices", None)
    if idx is None:
        raise TypeError("model(x) must return (x_hat, out) with out.indices of shape (B, h, w)")
    return idx


METRIC_NETWORKS = ("lpips", "lpips_vgg", "rfid")  # the metrics that need a network with weights


def load_metric_networks(names, *, lpips_weights=None, inception_weights=None, device="cpu",
                         download: bool = False) -> tuple[dict, dict]:
    """The one way vqwae loads the networks of the metrics ``names`` (of METRIC_NETWORKS): ``({name: network or
    None}, {name: one-line reason it is None})``; weights resolve as ``load_lpips`` / ``load_inception`` say (from
    their usual places on the network only with ``download``)."""
    unknown = set(names) - set(METRIC_NETWORKS)
    if unknown:
        raise ValueError(f"unknown metric network(s) {sorted(unknown)}; known: {', '.join(METRIC_NETWORKS)}")
    loaders = {"lpips": lambda: load_lpips(lpips_weights, device=device, download=download),
               "lpips_vgg": lambda: load_lpips(lpips_weights, net="vgg", device=device, download=download),
               "rfid": lambda: load_inception(inception_weights, device=device, download=download)}
    nets, reasons = {}, {}
    for name in names:
        nets[name], why = loaders[name]()
        if why:
            reasons[name] = why
    return nets, reasons


def _expected_images(loader, limit: int | None) -> int | None:
    """How many images a DataLoader over a sized data set yields (capped by ``limit``), or None where that
    cannot be known before iterating (then the real statistics are computed, not read from the cache)."""
    from torch.utils.data import BatchSampler, DataLoader

    if not isinstance(loader, DataLoader) or loader.drop_last or not isinstance(loader.batch_sampler, BatchSampler):
        return None
    try:
        n = len(loader.batch_sampler.sampler)
    except TypeError:
        return None
    return n if limit is None else min(n, limit)


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
            ``stats_cache`` (default :class:`~vqwae.metrics.fid_cache.FIDStatsCache` at ``~/.cache/vqwae/fid``)
            under this key and the Inception weights' identity; the key must describe the same images (and
            ``limit``) this loader yields. Read only from a DataLoader, whose image count is known up front.
        limit: evaluate at most this many images.
        progress: show a progress bar on stderr (``vqwae.progress``).
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

    given = dict(lpips=lpips_net, lpips_vgg=lpips_vgg_net, rfid=inception)
    for (name, value), arg in zip(given.items(), ("lpips_net", "lpips_vgg_net", "inception")):
        if isinstance(value, str) and value != _AUTO:
            raise ValueError(f"{arg} must be a network, 'auto' or None, got {value!r}")
    auto = [name for name, value in given.items() if value == _AUTO]
    if auto:
        loaded, why = load_metric_networks(auto, device=device)
        given.update(loaded)
        reasons.update(why)
    lpips_net, lpips_vgg_net, inception = given["lpips"], given["lpips_vgg"], given["rfid"]
    if lpips_net is not None:
        lpips_net = lpips_net.to(device).eval()
    if lpips_vgg_net is not None:
        lpips_vgg_net = lpips_vgg_net.to(device).eval()
    if inception is not None:
        inception.to(device)

    real_stats, expected = None, _expected_images(loader, limit)
    if inception is not None and real_stats_cache_key is not None:
        stats_cache = stats_cache or FIDStatsCache()
        if expected is not None:  # the cache's rule: statistics of exactly the images compared
            real_stats = stats_cache.lookup(real_stats_cache_key, inception.identity, expected)
    if inception is not None:
        result["rfid_real_stats"] = "cache" if real_stats is not None else "computed"

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
            if n_images != expected:
                raise RuntimeError(f"the loader yielded {n_images} images, not the {expected} its length promised")
            result["rfid"] = fid_against_statistics(*real_stats, fake)  # exact sample-space form when N < 2048

    result.update(
        perplexity=usage.perplexity,
        codes_used=usage.codes_used,
        num_codes=num_codes,
        code_counts=[int(c) for c in usage.counts.round().to(torch.int64).cpu().tolist()],
        seconds=time.perf_counter() - start,
    )
    return result
