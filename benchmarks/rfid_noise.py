"""How noisy is one rFID number? The same weights on disjoint 1,000-image test subsets, and two training seeds.

The report (``vqwae reproduce``) measures rFID on the first 1,000 test images of one run per cell and calls a
claim "within noise" when its margin is under ``claims.SEED_SPREAD`` (7%, measured on test MSE). This script
measures rFID's own spread, for the claims that an rFID decides:

- **subset spread**: one run's rFID on ``--subsets`` disjoint slices of ``--size`` test images (the images'
  share of the noise);
- **seed spread**: the first slice's rFID of every run given (pass runs that differ only in their seed).

    python benchmarks/rfid_noise.py RUN_A RUN_B ... --data-root ../shared/data --subsets 4 --size 1000 \\
        --out benchmarks/results/rfid_noise_mnist.json

The real images' features are computed once per slice and serve every run (same split, same images).
Results are written after every run, so a killed command keeps what it measured.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import DataLoader, Subset

from vqwae.files import atomic_write_text
from vqwae.metrics.fid import fid_from_features, load_inception
from vqwae.runs import layout


def features(inception, data, indices, batch_size: int, model=None) -> torch.Tensor:
    """Inception features (N, 2048) of the test images at ``indices``, or of their reconstructions by ``model``."""
    out = []
    with torch.no_grad():
        for x, _ in DataLoader(Subset(data, indices), batch_size=batch_size, shuffle=False):
            out.append(inception(x if model is None else model(x)[0].clamp(0, 1)))
    return torch.cat(out)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", type=Path, help="run folders made by `vqwae train`, one dataset")
    ap.add_argument("--data-root", default=None)
    ap.add_argument("--subsets", type=int, default=4, help="disjoint test slices per run")
    ap.add_argument("--size", type=int, default=1000, help="images per slice (the report's 1,000)")
    ap.add_argument("--subset-runs", type=int, default=1, help="the first N runs get every slice, the rest the first")
    ap.add_argument("--inception-weights", default=None, help="default: $VQWAE_INCEPTION_WEIGHTS")
    ap.add_argument("--batch-size", type=int, default=50)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)

    inception, why = load_inception(args.inception_weights, download=False, num_threads=args.threads)
    if inception is None:
        raise SystemExit(f"rfid_noise: {why}")
    slices = [range(i * args.size, (i + 1) * args.size) for i in range(args.subsets)]
    real_cache: dict[int, torch.Tensor] = {}
    result = {"size": args.size, "subsets": args.subsets, "runs": {}}
    for r, run in enumerate(args.runs):
        cfg = layout.read_config(run)
        model = layout.load_model(run, torch.device("cpu")).eval()
        data, _ = layout.load_run_split(run, "test", limit=None, data_root=layout.data_root_of(cfg, args.data_root),
                                        cfg=cfg)
        if len(data) < args.subsets * args.size:
            raise SystemExit(f"rfid_noise: {run} has {len(data)} test images, fewer than {args.subsets} x {args.size}")
        t0 = time.perf_counter()
        fids = []
        for s, idx in enumerate(slices if r < args.subset_runs else slices[:1]):
            if s not in real_cache:  # the same images for every run: computed once
                real_cache[s] = features(inception, data, list(idx), args.batch_size)
            fids.append(fid_from_features(real_cache[s], features(inception, data, list(idx), args.batch_size, model)))
        result["runs"][str(run)] = {"dataset": cfg.data.dataset, "seed": cfg.run.seed, "rfid_by_slice": fids,
                                    "seconds": time.perf_counter() - t0}
        print(f"{run}: rFID by slice {[round(f, 2) for f in fids]}", flush=True)
        first = [v["rfid_by_slice"][0] for v in result["runs"].values()]
        subset = [v["rfid_by_slice"] for v in result["runs"].values() if len(v["rfid_by_slice"]) > 1]
        result["summary"] = {
            "subset_spread_relative": [float((max(f) - min(f)) / np.mean(f)) for f in subset],
            "first_slice_by_run": first,
            "run_spread_relative": float((max(first) - min(first)) / np.mean(first)) if len(first) > 1 else None,
        }
        args.out.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(args.out, json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
