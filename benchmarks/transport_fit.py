"""What ``fit_transport`` (the ``fit_steps`` option) does to trained runs: the transport map solved on the training
latents with the network held still (issues #34, #35; BENCHMARKS.md section 29).

For each run folder (trained with ``quantize="transport"``, whose decoder reads the map): the usage of the decoder's
code on the first 1,000 test images against the run's fixed pi (Pearson correlation, total variation, as the
report's controllability table), the test MSE, and the cells' TV on the training latents, before and after
``fit_transport`` on the latents ``vqwae train`` fits on (``fit_latents``: the first 20,000 training images). The
run folder is not changed.

    .venv/bin/python benchmarks/transport_fit.py RUN_DIR [RUN_DIR ...] [--steps 1000] [--data-root ../shared/data]

Writes benchmarks/results/transport_fit[_TAG].json.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

from vqwae.data import load_splits
from vqwae.models import VQAutoencoder
from vqwae.quantizers.wasserstein import initial_pi
from vqwae.reproduce.claims import usage_against_pi
from vqwae.training.trainer import FIT_IMAGES, fit_latents

HERE = Path(__file__).resolve().parent


def images(split, n: int) -> torch.Tensor:
    return torch.stack([split[i][0] for i in range(min(n, len(split)))])


@torch.no_grad()
def test_figures(model: VQAutoencoder, x: torch.Tensor, pi: np.ndarray) -> dict:
    recon, idx = [], []
    for i in range(0, len(x), 250):
        r, out = model(x[i:i + 250])
        recon.append(r)
        idx.append(out.indices.reshape(-1))
    usage = np.bincount(torch.cat(idx).numpy(), minlength=len(pi)).astype(float)
    corr, tv = usage_against_pi(usage, pi)
    return dict(corr=corr, tv=tv, mse=float((torch.cat(recon) - x).pow(2).mean()))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+")
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--data-root", default="../shared/data")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--tag", default="")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    rows = []
    for run in args.runs:
        cfg = json.loads((Path(run) / "config.json").read_text())
        vq = cfg["quantizer"]["vqwae"]
        model = VQAutoencoder.from_pretrained(run)
        splits = load_splits(cfg["data"]["dataset"], args.data_root, train_limit=FIT_IMAGES, eval_limit=1000)
        test = images(splits.test, 1000)
        pi = initial_pi(vq["pi_init"], 1, model.quantizer.num_codes)[0].numpy()
        before = test_figures(model, test, pi)
        z, _ = fit_latents(model, splits.train)  # the latents vqwae train fits on
        t0 = time.perf_counter()
        fit = model.quantizer.fit_transport(z, args.steps, generator=torch.Generator().manual_seed(0))
        seconds = time.perf_counter() - t0
        after = test_figures(model, test, pi)
        row = dict(run=str(run), dataset=cfg["data"]["dataset"], pi=vq["pi_init"], shared_pi=cfg["quantizer"]["shared_pi"],
                   settings={k: vq.get(k) for k in ("quantize", "pull", "codebook_decay", "ws_weight", "codebook_update")},
                   before=before, after=after, train_cells_tv=[fit["tv_before"], fit["tv_after"]], seconds=seconds,
                   steps=args.steps)
        rows.append(row)
        print(f"{run} ({row['dataset']}, {row['pi']}): corr {before['corr']:.3f} -> {after['corr']:.3f}, test TV "
              f"{before['tv']:.3f} -> {after['tv']:.3f}, test MSE {before['mse']:.6f} -> {after['mse']:.6f}, train "
              f"cells TV {fit['tv_before']:.3f} -> {fit['tv_after']:.3f} ({seconds:.0f} s)", flush=True)
        out = HERE / "results" / ("transport_fit" + (f"_{args.tag}" if args.tag else "") + ".json")
        out.write_text(json.dumps(dict(command="python benchmarks/transport_fit.py " + " ".join(sys.argv[1:]),
                                       rows=rows), indent=1))


if __name__ == "__main__":
    main()
