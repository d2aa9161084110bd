"""Why a reproduction row never leaves its start (issue #64): the scale of the encoder's latents against the
codebook's, and how many codes the latents' nearest-code assignment reaches, at initialisation (seed 0, before any
step, as the trainer builds the model) and in trained run folders.

    .venv/bin/python benchmarks/start_diagnosis.py --data-root ../shared/data                # every report row at init
    .venv/bin/python benchmarks/start_diagnosis.py --data-root ../shared/data --runs RUN_DIR ...   # trained runs

For each configuration: the latents' RMS (per element), the codewords' RMS, their ratio, the distance from the
latents' mean to its nearest codeword against the codebook's spread, and the codes used and perplexity of the
nearest-code assignment of 1,024 training images' latents (64 positions each), with the mean RMS of the codes it
reaches and of those it does not. A data or k-means start replaces the
codebook on the first training batch: those rows are measured as the trainer starts them, after that batch.
Writes benchmarks/results/start_diagnosis[_runs].json.
"""
from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import torch

from vqwae.data import load_split
from vqwae.ot.cost import nearest_code
from vqwae.reproduce.grid import BUDGETS, ROWS, VQGAN_AT_BUDGET, row_spec, spec
from vqwae.runs import layout
from vqwae.training import TrainConfig
from vqwae.training.trainer import build_model

IMAGES = 1024


def latent_statistics(model, images: torch.Tensor) -> dict:
    """Scales and the nearest-code assignment of the encoder's latents for ``images`` (model in eval mode)."""
    q = model.quantizer
    with torch.no_grad():
        z = torch.cat([model.encoder(images[i:i + 256]) for i in range(0, len(images), 256)])
        flat = q.flatten(z).reshape(-1, q.dim)
        codes = q.codebook.detach()
        idx = nearest_code(flat, codes)
    counts = torch.bincount(idx, minlength=q.num_codes).double()
    p = counts[counts > 0] / counts.sum()
    centre = flat.mean(0)
    z_rms, c_rms = float(flat.pow(2).mean().sqrt()), float(codes.pow(2).mean().sqrt())
    used = counts > 0
    rms = codes.pow(2).mean(1).sqrt()  # each codeword's RMS: do the codes no latent reaches sit elsewhere?
    return dict(latent_rms=z_rms, codebook_rms=c_rms, codebook_over_latent=c_rms / max(z_rms, 1e-30),
                latent_spread=float((flat - centre).pow(2).sum(1).mean().sqrt()),
                codebook_spread=float((codes - codes.mean(0)).pow(2).sum(1).mean().sqrt()),
                centre_to_nearest_code=float(torch.cdist(centre[None], codes).min()),
                codes_used=int(used.sum()), perplexity=float(torch.exp(-(p * p.log()).sum())),
                used_codes_rms=float(rms[used].mean()),
                unused_codes_rms=float(rms[~used].mean()) if (~used).any() else None,
                num_codes=q.num_codes, latents=int(flat.shape[0]))


def at_init(cfg: TrainConfig, data_root: str) -> dict:
    """The model as the trainer builds it (seed 0); a data or k-means start is made on the first training batch."""
    data, _ = load_split(cfg.data.dataset, data_root, "train", limit=IMAGES, image_size=cfg.data.image_size)
    images = torch.stack([data[i][0] for i in range(len(data))])
    torch.manual_seed(cfg.run.seed)
    model = build_model(cfg, images.shape[1], images.shape[-1])
    model.train()
    with torch.no_grad():  # the first training batch: a data / k-means start happens here (nothing else is stepped)
        model.quantizer(model.encoder(images[:cfg.optim.batch_size]))
    return latent_statistics(model.eval(), images)


def trained(run_dir: Path, data_root: str) -> dict:
    cfg = layout.read_config(run_dir)
    data, _ = layout.load_run_split(run_dir, "train", limit=IMAGES, data_root=data_root, cfg=cfg)
    images = torch.stack([data[i][0] for i in range(len(data))])
    model = layout.load_model(run_dir, torch.device("cpu")).eval()
    stats = latent_statistics(model, images)
    history = layout.read_metrics(run_dir)
    return dict(stats, step=history[-1]["step"] if history else None, model=cfg.model,
                preset=cfg.run.preset, dataset=cfg.data.dataset)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-root", default="../shared/data")
    ap.add_argument("--datasets", default="mnist,cifar10")
    ap.add_argument("--runs", nargs="*", help="trained run folders to diagnose instead of the rows at init")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    results = {}
    if args.runs:
        for r in args.runs:
            results[str(Path(r).relative_to(Path(r).parents[2]))] = trained(Path(r), args.data_root)
    else:
        cpu = BUDGETS["cpu"]
        cases = {f"{d}/{row}": row_spec(d, row) for d in args.datasets.split(",") for row in ROWS}
        for init in ("normal", "uniform"):  # the VQGAN stand-in's VQ-VAE row, from N(0, 1) and from taming's start
            cases[f"cifar10/vqgan-stand-in/vq_init={init}"] = spec("cifar10", "vqvae", preset="ffhq",
                                                                   **VQGAN_AT_BUDGET["cpu"], vq_init=init)
        for name, s in cases.items():
            values = s.config_values(cpu, args.data_root)
            results[name] = at_init(TrainConfig.from_dict(values), args.data_root)
    for name, r in results.items():
        print(f"{name:45s} latent RMS {r['latent_rms']:.3g}  codebook RMS {r['codebook_rms']:.3g} "
              f"(x{r['codebook_over_latent']:.3g})  centre->nearest code {r['centre_to_nearest_code']:.3g} "
              f"(codebook spread {r['codebook_spread']:.3g}, latents' {r['latent_spread']:.3g})  "
              f"codes used {r['codes_used']}/{r['num_codes']}  perplexity {r['perplexity']:.1f}", flush=True)
    out = Path(__file__).parent / "results" / ("start_diagnosis_runs.json" if args.runs else "start_diagnosis.json")
    out.write_text(json.dumps({k: {kk: (round(v, 6) if isinstance(v, float) and math.isfinite(v) else v)
                                   for kk, v in r.items()} for k, r in results.items()}, indent=1) + "\n")
    print(f"-> {out}")


if __name__ == "__main__":
    main()
