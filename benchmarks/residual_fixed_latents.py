"""Residual stacks on fixed vectors: is the `residual` host's gap (BENCHMARKS.md 13, 16) the quantizer's own, or
the encoder's?

No encoder and no decoder: every stack (4 levels x 256 codes) quantizes the same stream of fixed vectors, the
4x4x3 patches of CIFAR-10 training images (48-D, centred and scaled to unit RMS over the training patches), given
as a host gives them: channel-last tokens (32 images, 64 patches, 48). Each stack learns only its own codebooks
(and, for VQ-WAE, pi by Adam 1e-3 on its loss); the stacks see identical batches, interleaved. Every
``--eval-every`` steps, on the patches of the first 500 test images: the relative squared error
||z - z_q||^2 / ||z||^2 after 1, 2, 3 and 4 levels (vqwae's stacks; the peer's with all 4) and each level's
perplexity.

    pip install -e ".[bench]"     # vector-quantize-pytorch 1.32.0
    .venv/bin/python benchmarks/residual_fixed_latents.py --steps 1500 [--variant "LABEL:KEY=VALUE,..."]

Writes benchmarks/results/residual_fixed_latents_<steps>_seed<S>[_<tag>].json.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from hosts import Peer, quantizer_factories  # noqa: E402
from peer_comparison import parse_settings  # noqa: E402

from vqwae.data import load_splits  # noqa: E402
from vqwae.ot.histogram import code_histogram, perplexity_from_counts  # noqa: E402

HERE = Path(__file__).resolve().parent
LEVELS, K, PATCH = 4, 256, 4


def patches(images: torch.Tensor) -> torch.Tensor:
    """(N, 3, 32, 32) -> (N, 64, 48): each image's 4x4x3 patches in raster order."""
    n = images.shape[0]
    p = images.unfold(2, PATCH, PATCH).unfold(3, PATCH, PATCH)  # (N, 3, 8, 8, 4, 4)
    return p.permute(0, 2, 3, 1, 4, 5).reshape(n, 64, 3 * PATCH * PATCH)


def load(data_root: str, train: int, test: int) -> tuple[torch.Tensor, torch.Tensor]:
    splits = load_splits("cifar10", data_root, train_limit=train, eval_limit=test)
    tr = patches(torch.stack([splits.train[i][0] for i in range(len(splits.train))]))
    te = patches(torch.stack([splits.test[i][0] for i in range(len(splits.test))]))
    mean = tr.mean((0, 1))
    rms = (tr - mean).pow(2).mean().sqrt()
    return (tr - mean) / rms, (te - mean) / rms


def stacks(dim: int, variants: list[str]) -> dict:
    """name -> a function building that stack: the `residual` host's own (``hosts.quantizer_factories``), and a
    VQ-WAE stack per variant (its settings go to every level)."""
    factories = quantizer_factories(K, dim, positions=64, residual=True)
    made = {name: factories[name] for name in ("ResidualVQ kmeans+expiry", "vqwae VQ kmeans+expiry", "VQ-WAE")}
    for spec in variants:
        label, _, settings = spec.partition(":")
        made[label] = lambda o=parse_settings(settings): factories["VQ-WAE"](**o)
    return made


@torch.no_grad()
def errors(model: nn.Module, z: torch.Tensor) -> tuple[list, torch.Tensor]:
    """The relative squared error after 1..4 levels (the peer's after all 4 only) and the indices (..., L)."""
    if isinstance(model, Peer):
        q, idx, _ = model(z, None)
        return [None] * (LEVELS - 1) + [float((z - q).pow(2).sum() / z.pow(2).sum())], idx
    errs = [float((z - model.q(z, num_levels=n).quantized).pow(2).sum() / z.pow(2).sum())
            for n in range(1, LEVELS + 1)]
    return errs, model.q(z).indices


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-root", default="../shared/data")
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--eval-every", type=int, default=250)
    ap.add_argument("--variant", action="append", default=[], metavar="LABEL:KEY=VALUE,...")
    ap.add_argument("--models", default="", help="comma-separated (default: all)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tag", default="")
    args = ap.parse_args()
    torch.set_num_threads(1)
    train, test = load(args.data_root, 20_000, 500)
    test = test.reshape(1, -1, train.shape[-1])  # one batch of every test patch
    made = stacks(train.shape[-1], args.variant)
    names = [n for n in made if not args.models or n in args.models.split(",")]
    models, opts = {}, {}
    for name in names:
        torch.manual_seed(args.seed)
        models[name] = made[name]().train()
        params = [p for p in models[name].parameters() if p.requires_grad]
        opts[name] = torch.optim.Adam(params, lr=1e-3) if params else None
    gen = torch.Generator().manual_seed(args.seed)
    curves = {n: [] for n in names}
    for step in range(1, args.steps + 1):
        z = train[torch.randint(0, train.shape[0], (32,), generator=gen)]
        for name in names:
            _, _, loss = models[name](z, None)
            if opts[name] is not None:
                opts[name].zero_grad(set_to_none=True)
                loss.backward()
                opts[name].step()
        if step % args.eval_every == 0 or step == args.steps:
            for name in names:
                m = models[name].eval()
                errs, idx = errors(m, test)
                ppl = [float(perplexity_from_counts(code_histogram(idx[..., level], K))) for level in range(LEVELS)]
                curves[name].append(dict(step=step, rel_err=errs, perplexity=ppl))
                m.train()
                print(f"step {step:5d}  {name:28s} rel. error by levels "
                      + " / ".join("-" if e is None else f"{e:.4f}" for e in errs)
                      + "  perplexity " + " / ".join(f"{p:.0f}" for p in ppl), flush=True)
    out = HERE / "results" / (f"residual_fixed_latents_{args.steps}_seed{args.seed}" + (f"_{args.tag}" if args.tag else "")
                              + ".json")
    out.write_text(json.dumps(dict(command=" ".join(sys.argv), variants=args.variant, curves=curves), indent=1))
    print(f"-> {out}")


if __name__ == "__main__":
    main()
