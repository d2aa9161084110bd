"""With a fixed pi, does the code usage follow pi? Nearest-code usage against the transport map's, on trained runs.

The reproduction report's controllability table (fig:init as a number) measures the usage of the *nearest*
codeword, the quantization the decoder sees, and finds it follows a fixed pi only loosely at the `cpu` budget.
The WS term does not train on that assignment: the semi-discrete solver sends each latent to
argmin_k ||z - c_k||^2 - g_k, the power-diagram cell of its learned code potential g, whose masses are pi at the
optimum. This script measures both histograms on the same test latents of runs that `vqwae reproduce` trained
(`paper-fast`, so a semidiscrete solver with a saved potential), so the gap between "the transport follows pi"
and "the codebook has followed it" is a number rather than a guess.

A third histogram separates the solver from the codebook: the transport map of a potential refitted to the
trained codebook (``--refit-steps`` full-batch ascent steps of ``ot.semidiscrete.fit_potential`` on the latents of
the first ``--refit-images`` training images, from the saved potential). If the refitted map realises pi while
the saved one does not, the potential the run trained with had not converged.

    .venv/bin/python benchmarks/controllability_transport.py --data-root ../shared/data --limit 1000 \\
        runs/reproduce/runs/mnist/vqwae-32f34fd876 runs/reproduce/runs/mnist/vqwae-4fbff8c7fc \\
        runs/reproduce/runs/mnist/vqwae-23265aba3f runs/reproduce/runs/cifar10/vqwae-4e48896bbb \\
        runs/reproduce/runs/cifar10/vqwae-4a3347578a runs/reproduce/runs/cifar10/vqwae-bf2ee31f46

Writes benchmarks/results/controllability_transport.json. Each run's pi is read from its weights; the
histograms are pooled over latent positions and compared with the positions' mean pi (as the report does).
"""
from __future__ import annotations

import argparse
import json
import platform
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import torch

from vqwae.data.registry import load_split
from vqwae.models.autoencoder import VQAutoencoder
from vqwae.ot.histogram import code_histogram, perplexity_from_counts
from vqwae.ot.semidiscrete import assign, fit_potential
from vqwae.reproduce.analyses import usage_against_pi
from vqwae.runs import layout


def latents(model: VQAutoencoder, dataset: str, root: str | None, split: str, limit: int,
            batch_size: int) -> torch.Tensor:
    """(N, M, D) encoder latents of the first ``limit`` images of a split."""
    data, _ = load_split(dataset, root, split, limit=limit)
    images = torch.stack([data[i][0] for i in range(len(data))])
    with torch.inference_mode():
        return torch.cat([model.quantizer.flatten(model.encoder(images[i:i + batch_size]))
                          for i in range(0, len(images), batch_size)])


def histograms(model: VQAutoencoder, x: torch.Tensor, potential: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(nearest-code counts, transport-assignment counts under ``potential`` (M, K)), each (K,), over x."""
    q = model.quantizer
    nearest, assigned, _ = assign(x, q.codebook.detach(), potential)
    return code_histogram(nearest, q.num_codes), code_histogram(assigned, q.num_codes)


def compare(counts: torch.Tensor, pi: np.ndarray) -> dict:
    corr, tv = usage_against_pi(counts.numpy(), pi)  # the report's controllability measures
    return {"corr": corr, "total_variation": tv, "perplexity": float(perplexity_from_counts(counts))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("runs", nargs="+", type=Path, help="VQ-WAE run folders (semidiscrete solver)")
    ap.add_argument("--data-root", default=None)
    ap.add_argument("--limit", type=int, default=1000, help="first N test images (the report's 1,000)")
    ap.add_argument("--batch-size", type=int, default=250)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--refit-steps", type=int, default=100, help="0: no refitted potential")
    ap.add_argument("--refit-images", type=int, default=2000)
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "controllability_transport.json")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    rows = []
    fmt = lambda v: "-" if v is None else f"{v:.3f}"  # noqa: E731
    for run in args.runs:
        cfg = layout.read_config(run)
        w = cfg.quantizer.vqwae
        model = VQAutoencoder.from_pretrained(run).eval()
        q = model.quantizer
        if not hasattr(getattr(q, "solver", None), "potential"):
            raise SystemExit(f"{run}: needs a VQ-WAE run with the semidiscrete solver (a learned code potential)")
        root = args.data_root or cfg.data.data_root
        x = latents(model, cfg.data.dataset, root, "test", args.limit, args.batch_size)
        pi_groups = q.pi.detach().reshape(-1, q.num_codes)  # (M, K): one pi per position (or one shared)
        pi = pi_groups.mean(0).double().numpy()
        saved = q.solver.code_potential()
        nearest, transport = histograms(model, x, saved)
        row = {"run": str(run), "dataset": cfg.data.dataset, "pi_init": w.pi_init, "learn_pi": w.learn_pi,
               "solver": w.solver, "test_images": args.limit,
               "nearest": compare(nearest, pi), "transport": compare(transport, pi)}
        if args.refit_steps:
            train = latents(model, cfg.data.dataset, root, "train", args.refit_images, args.batch_size)
            refit = fit_potential(train, q.codebook.detach(), pi_groups, args.refit_steps, lr=1.0,
                                  potential=saved.clone())
            row["transport_refit"] = compare(histograms(model, x, refit)[1], pi)
            row.update(refit_steps=args.refit_steps, refit_images=args.refit_images)
        rows.append(row)
        print(f"{row['dataset']:8s} {w.pi_init:9s} learn_pi={w.learn_pi!s:5s}", "  ".join(
            f"{k}: corr {fmt(row[k]['corr'])} TV {row[k]['total_variation']:.3f} ppl {row[k]['perplexity']:.0f}"
            for k in ("nearest", "transport", "transport_refit") if k in row), flush=True)

    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "machine": platform.machine(),
        "torch": torch.__version__, "threads": args.threads, "rows": rows}, indent=1))
    print(f"-> {args.out}")


if __name__ == "__main__":
    main()
