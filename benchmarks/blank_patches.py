"""What a run's codes do on blank image patches, and what their faint decodings cost SSIM and rFID.

MNIST's 32x32 images are 76% exact-zero pixels and 58% of their 4x4 patches (one latent each in the paper's
network) are blank. A blank patch's latent differs only by what the encoder's receptive field sees around it, so a
quantizer that gives the blank crowd many codes (a balanced transport does: every code gets its share of the mass)
decodes the same black background slightly differently from patch to patch. MSE hardly sees it; SSIM (whose
structure term is sensitive to any variance where the target is flat) and rFID do. This script measures, on a run's
first ``--limit`` test images:

- the share of blank patches, the codes their latents take (number, perplexity) and the codes of the other patches;
- the background's share of the squared error and the reconstructions' mean there;
- SSIM at 256 (as the report) and rFID, as evaluated and with every reconstructed pixel below ``--floor`` set to 0
  (which removes the faint background and little else: the MSE is reported for both);
- with ``--generation N``: the generation FID of N images sampled from the run's unconditional prior (RUN/prior, as
  the report trains it; seed 0 as the report samples), as decoded and floored.

    python benchmarks/blank_patches.py RUN [RUN ...] --data-root ../shared/data --out benchmarks/results/blank_patches.json
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from torch.utils.data import DataLoader

from vqwae.files import atomic_write_text
from vqwae.metrics.fid import feature_statistics, fid_against_statistics, load_inception
from vqwae.metrics.fid_cache import FIDStatsCache
from vqwae.metrics.image import ssim
from vqwae.runs import layout
from vqwae.runs.generation import real_stats_key
from vqwae.runs.prior import generate

BLANK = 1 / 255  # a pixel below this is background (MNIST's are exactly 0)


def perplexity(counts: torch.Tensor) -> float:
    p = counts[counts > 0].double() / counts.sum()
    return float(torch.exp(-(p * p.log()).sum()))


def batched_ssim(a: torch.Tensor, b: torch.Tensor, chunk: int = 50) -> float:
    """SSIM at 256 over all images, in chunks (the 256x256 windows of 1,000 images at once need gigabytes)."""
    return sum(ssim(a[i:i + chunk], b[i:i + chunk], resolution=256) * len(a[i:i + chunk])
               for i in range(0, len(a), chunk)) / len(a)


def floored(images: torch.Tensor, floor: float) -> torch.Tensor:
    """``images`` with every pixel below ``floor`` set to 0 (the decoder's faint background removed)."""
    return images.masked_fill(images < floor, 0.0)


def measure(run: Path, data_root: str | None, limit: int, floor: float, inception, generation: int = 0,
            rfid: bool = True) -> dict:
    cfg = layout.read_config(run)
    model = layout.load_model(run, torch.device("cpu")).eval()
    root = layout.data_root_of(cfg, data_root)
    data, _ = layout.load_run_split(run, "test", limit=limit, data_root=root, cfg=cfg)
    xs, ys, codes = [], [], []
    with torch.no_grad():
        for x, _ in DataLoader(data, batch_size=100):
            y, out = model(x)
            xs.append(x), ys.append(y.clamp(0, 1)), codes.append(out.indices)
    x, y, idx = torch.cat(xs), torch.cat(ys), torch.cat(codes)  # (N, C, H, W) x 2, (N, h, w)
    k = model.quantizer.num_codes
    h, w = idx.shape[-2:]
    fh, fw = x.shape[-2] // h, x.shape[-1] // w
    blank = x.reshape(x.shape[0], x.shape[1], h, fh, w, fw).amax(dim=(1, 3, 5)) < BLANK  # (N, h, w)
    on_blank = torch.bincount(idx[blank], minlength=k)
    on_other = torch.bincount(idx[~blank], minlength=k)
    background = x < BLANK
    se = (y - x) ** 2
    y_floored = floored(y, floor)
    result = dict(
        run=str(run), dataset=cfg.data.dataset, model=cfg.model, images=len(x),
        blank_patch_share=float(blank.float().mean()),
        codes_on_blank=int((on_blank > 0).sum()), perplexity_on_blank=perplexity(on_blank),
        codes_on_other=int((on_other > 0).sum()), perplexity_on_other=perplexity(on_other),
        perplexity_all=perplexity(on_blank + on_other),
        background_pixel_share=float(background.float().mean()),
        background_share_of_squared_error=float(se[background].sum() / se.sum()),
        background_mean_reconstruction=float(y[background].mean()),
        mse=float(se.mean()), ssim_256=batched_ssim(y, x),
        floor=floor, mse_floored=float(((y_floored - x) ** 2).mean()), ssim_256_floored=batched_ssim(y_floored, x),
    )
    if inception is not None:  # the real images' statistics: the report's cache entry when it has one
        key = real_stats_key(cfg, "test", limit, data, root)
        cache = FIDStatsCache()
        real = cache.lookup(key, inception.identity, len(x))
        if real is None:
            real = feature_statistics(inception(x))
        if rfid:
            result.update(rfid=fid_against_statistics(*real, inception(y)),
                          rfid_floored=fid_against_statistics(*real, inception(y_floored)))
        if generation:
            samples = generate(run, generation, conditional=False, seed=0)[0]
            result.update(generated=generation, gfid_uncond=fid_against_statistics(*real, inception(samples)),
                          gfid_uncond_floored=fid_against_statistics(*real, inception(floored(samples, floor))),
                          generated_below_floor_mean=float(samples[samples < floor].mean()))
    return result


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", type=Path, help="run folders made by `vqwae train`")
    ap.add_argument("--data-root", default=None)
    ap.add_argument("--limit", type=int, default=1000, help="the first N test images (the report's 1,000)")
    ap.add_argument("--floor", type=float, default=0.05, help="reconstructed pixels below this set to 0")
    ap.add_argument("--rfid", action=argparse.BooleanOptionalAction, default=True,
                    help="also rFID, as evaluated and floored (Inception: $VQWAE_INCEPTION_WEIGHTS)")
    ap.add_argument("--generation", type=int, default=0, help="also the unconditional generation FID of this many "
                    "samples from RUN/prior, as decoded and floored (0: none)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    inception = None
    if args.rfid or args.generation:
        inception, why = load_inception(download=False, num_threads=args.threads)
        if inception is None:
            raise SystemExit(f"blank_patches: {why}")
    results = []
    for run in args.runs:
        results.append(measure(run, args.data_root, args.limit, args.floor, inception, args.generation,
                               args.rfid))
        print(json.dumps(results[-1], indent=1), flush=True)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(args.out, json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
