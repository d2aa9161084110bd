"""Evaluate a run folder: reconstruction metrics on a split, code usage, pictures; results into eval.json.

Used by ``vqwae eval RUN_DIR`` and by ``vqwae reproduce``.
"""
from __future__ import annotations

import functools
import json
import os
import time
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import DataLoader

from vqwae.files import atomic_path, atomic_write_text
from vqwae.distributed import resolve_device
from vqwae.figures import reconstruction_grid, training_curves, usage_histogram
from vqwae.metrics.evaluate import evaluate_reconstructions, load_metric_networks
from vqwae.metrics.fid_cache import FIDStatsCache
from vqwae.provenance import provenance
from vqwae.runs import layout
from vqwae.runs.generation import real_stats_key

SSIM_WINDOW = "uniform 11x11 (valid region), data_range 1"


@functools.lru_cache(maxsize=4)
def _metric_networks(inception_weights, lpips_weights, device: str, fid: bool, lpips: bool, lpips_vgg: bool,
                     download: bool = False):
    """Load the LPIPS, LPIPS-VGG and Inception networks once per process (reproduce evaluates dozens of runs)."""
    wanted = [name for name, on in (("lpips", lpips), ("lpips_vgg", lpips_vgg), ("rfid", fid)) if on]
    nets, reasons = load_metric_networks(wanted, lpips_weights=lpips_weights, inception_weights=inception_weights,
                                         device=device, download=download)
    if not lpips:
        reasons["lpips"] = "not asked for (--no-lpips)"
    if not fid:  # lpips_vgg is off by default: no key, no message
        reasons["rfid"] = "not asked for (--no-fid)"
    return nets.get("lpips"), nets.get("lpips_vgg"), nets.get("rfid"), reasons


def evaluate_run(
    run_dir: str | os.PathLike,
    *,
    split: str = "test",
    limit: int | None = None,
    batch_size: int = 100,
    resolution: str | int = "native",
    inception_weights: str | None = None,
    lpips_weights: str | None = None,
    fid: bool = True,
    lpips: bool = True,
    lpips_vgg: bool = False,
    device: str = "auto",
    data_root: str | None = None,
    progress: bool = True,
    pictures: bool = True,
    threads: int | None = None,
    download_weights: bool = False,
) -> dict:
    """Compute mse, psnr, ssim, lpips (+ lpips_vgg when asked), rfid, perplexity and codes used on ``split``; write
    eval.json (merged), the reconstruction grid, the usage histogram (with pi for VQ-WAE) and the training curves.
    The metric networks' weights are local (arguments, environment); ``download_weights`` fetches missing ones."""
    run_dir = Path(run_dir)
    if split not in ("val", "test"):
        raise ValueError(f"unknown split {split!r}; valid: 'val', 'test'")
    cfg = layout.read_config(run_dir)
    dev = resolve_device(device)
    model = layout.load_model(run_dir, dev)
    root = layout.data_root_of(cfg, data_root)
    data, _ = layout.load_run_split(run_dir, split, limit=limit, data_root=root, cfg=cfg)
    loader = DataLoader(data, batch_size=batch_size, shuffle=False)

    lpips_net, lpips_vgg_net, inception, reasons = _metric_networks(inception_weights, lpips_weights, str(dev), fid,
                                                                     lpips, lpips_vgg, download_weights)
    reasons = dict(reasons)
    asked = {"lpips": lpips, "lpips_vgg": lpips_vgg, "rfid": fid}
    for metric, why in reasons.items():
        if asked[metric]:  # a metric the caller turned off needs no word
            print(f"skipping {metric}: {why}", flush=True)
    key = None
    if inception is not None:
        key = real_stats_key(cfg, split, limit, data, root)
    t0 = time.perf_counter()
    result = evaluate_reconstructions(model, loader, num_codes=model.quantizer.num_codes, device=dev,
                                      resolution=resolution, lpips_net=lpips_net, lpips_vgg_net=lpips_vgg_net,
                                      inception=inception,
                                      real_stats_cache_key=key, progress=progress, skip_reasons=reasons,
                                      stats_cache=FIDStatsCache() if key else None, num_threads=threads)
    counts = result.pop("code_counts")
    history = layout.read_metrics(run_dir)
    # what the numbers were measured on: the weights (best by validation MSE, as saved) and the run's progress
    result.update(split=split, limit=limit, model=cfg.model, dataset=cfg.data.dataset, ssim_window=SSIM_WINDOW,
                  weights_fingerprint=layout.model_fingerprint(run_dir),
                  trained_steps=history[-1].get("step") if history else None, seconds=time.perf_counter() - t0)
    result["resolution_note"] = (f"psnr/ssim/lpips at {result['resolution']}; mse always native; "
                                 "rfid from native images resized to 299")
    atomic_write_text(layout.code_usage_json(run_dir, split), json.dumps(counts))
    # an earlier evaluation's optional metrics and skip notes do not describe this one's images or weights
    merged = layout.update_eval(run_dir, result, drop=("lpips_vgg", "lpips_vgg_skipped", "lpips_skipped",
                                                       "rfid_skipped", "rfid_real_stats"))
    x, x_hat = _first_reconstructions(model, data, dev)
    pixels = (x_hat[:layout.RECONSTRUCTION_SAMPLES] * 255).round().to(torch.uint8).permute(0, 2, 3, 1).numpy()
    with atomic_path(layout.reconstructions_npz(run_dir, split)) as tmp:  # a report's grid, from the record alone
        with open(tmp, "wb") as f:
            np.savez_compressed(f, reconstructions=pixels, indices=np.arange(len(pixels)))
    layout.append_provenance(run_dir, provenance("eval", dev, split=split, limit=limit,
                                                 weights_fingerprint=result["weights_fingerprint"]))
    if pictures:
        _pictures(run_dir, model, x, x_hat, counts, split)
    return merged


@torch.no_grad()
def _first_reconstructions(model, data, device) -> tuple[torch.Tensor, torch.Tensor]:
    """The split's first images and their reconstructions in [0, 1], on the CPU: 32 of small images, 16 of 128 px and
    more (16 pairs of 256x256 images are already a 2k x 2k grid); what the kept samples and the grid both show."""
    side = data[0][0].shape[-1]
    n = min(max(32 if side < 128 else 16, layout.RECONSTRUCTION_SAMPLES), len(data))
    x = torch.stack([data[i][0] for i in range(n)]).to(device)
    return x.cpu(), model(x)[0].clamp(0, 1).cpu()


def _pictures(run_dir: Path, model, x, x_hat, counts, split: str) -> None:
    reconstruction_grid(x, x_hat, layout.reconstructions_png(run_dir, split),
                        title=f"{run_dir.name}, {split} split")
    pi = getattr(model.quantizer, "pi", None)
    usage_histogram(counts, layout.code_usage_png(run_dir, split),
                    pi=None if pi is None else pi.mean(0).cpu(),
                    title=f"{run_dir.name}: latent distribution over the codebook ({split})")
    if (run_dir / layout.METRICS).is_file():
        training_curves(run_dir / layout.METRICS, run_dir / layout.TRAINING_CURVES, title=run_dir.name)
