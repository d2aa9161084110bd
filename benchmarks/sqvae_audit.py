"""Is SQ-VAE's weak CIFAR-10 result a budget effect or a defect? Its training curve, three ways, on the same batches.

Rows (all interleaved on identical batches, batch 32, Adam 1e-3, K 512, D 64, as benchmarks/peer_comparison.py):

- "VQ-VAE": the reference baseline in the paper's 32x32 network.
- "SQ-VAE as sony/sqvae": `StochasticQuantizer(latent_scale="none")`, sony/sqvae's Gaussian quantizer exactly,
  in the paper's 32x32 network (what `vqwae` ran before BENCHMARKS.md section 10).
- "SQ-VAE default": the shipped `StochasticQuantizer()` in the same network (latent_scale="batch" since
  BENCHMARKS.md section 10b; "data" before).
- "SQ-VAE fixed gain" / "SQ-VAE batch scale": latent_scale="data" / "batch", whatever the default is.
- "SQ-VAE in sony's network": the same quantizer as the second row inside the network sony/sqvae trains it in
  for CIFAR-10 (their `net_32` with `num_rb 2`: batch norm after every convolution, the encoder ending in a
  residual block so its latents have unit scale, a sigmoid output; conv weights N(0, 0.02), BN weights
  N(1, 0.02)), rebuilt here from that description: the reference curve for what their code does.

Every ``--eval-every`` steps: test MSE and perplexity (argmax codes, one histogram over the test images), and the
quantities that explain them: the mean of each loss term over the last steps, tau, sigma^2, the RMS of the
latents the quantizer sees, and the mean entropy of the code posterior / log K (1 = uniform).

    .venv/bin/python benchmarks/sqvae_audit.py --dataset cifar10 --data-root ../shared/data --steps 3000 --threads 1

Writes benchmarks/results/sqvae_audit_<dataset>_<steps>.json and .png.
"""
from __future__ import annotations

import argparse
import json
import math
import platform
import sys
from collections import defaultdict
from datetime import datetime, timezone
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
# the peer table's batches, test protocol and per-model RNG
from peer_comparison import OwnRandomness, evaluate, training_batches  # noqa: E402

from vqwae.data import load_splits
from vqwae.models import NetworkConfig, VQAutoencoder
from vqwae.models.networks import build_networks
from vqwae.ot.cost import squared_distances
from vqwae.quantizers import StochasticQuantizer, build_quantizer
from vqwae.quantizers.stochastic import initial_log_var

HERE = Path(__file__).resolve().parent


class SonyResBlock(nn.Module):
    """x + [ReLU, conv 3x3, BN, ReLU, conv 1x1, BN] (sony/sqvae networks/util.py, described)."""

    def __init__(self, c: int):
        super().__init__()
        self.block = nn.Sequential(nn.ReLU(), nn.Conv2d(c, c, 3, 1, 1), nn.BatchNorm2d(c), nn.ReLU(),
                                   nn.Conv2d(c, c, 1), nn.BatchNorm2d(c))

    def forward(self, x):
        return x + self.block(x)


def sony_networks(channels: int, d: int = 64, num_rb: int = 2) -> tuple[nn.Module, nn.Module]:
    """sony/sqvae's 32x32 encoder / decoder (net_32.py), described: D = dim_z channels throughout."""
    def conv_bn_relu(conv, c):
        return [conv, nn.BatchNorm2d(c), nn.ReLU()]

    enc = nn.Sequential(*conv_bn_relu(nn.Conv2d(channels, d // 2, 4, 2, 1), d // 2),
                        *conv_bn_relu(nn.Conv2d(d // 2, d, 4, 2, 1), d),
                        *conv_bn_relu(nn.Conv2d(d, d, 3, 1, 1), d),
                        *[SonyResBlock(d) for _ in range(num_rb - 1)], SonyResBlock(d))
    dec = nn.Sequential(*[SonyResBlock(d) for _ in range(num_rb)],
                        *conv_bn_relu(nn.ConvTranspose2d(d, d, 3, 1, 1), d),
                        *conv_bn_relu(nn.ConvTranspose2d(d, d // 2, 4, 2, 1), d // 2),
                        nn.ConvTranspose2d(d // 2, channels, 4, 2, 1), nn.Sigmoid())
    for m in [*enc.modules(), *dec.modules()]:
        if isinstance(m, (nn.Conv2d, nn.ConvTranspose2d)):
            nn.init.normal_(m.weight, 0.0, 0.02)
        elif isinstance(m, nn.BatchNorm2d):
            nn.init.normal_(m.weight, 1.0, 0.02)
            nn.init.zeros_(m.bias)
    return enc, dec


# name -> (network, quantizer kind, quantizer options)
ROWS = {
    "VQ-VAE": ("paper", "vector", {}),
    "SQ-VAE as sony/sqvae": ("paper", "stochastic", dict(latent_scale="none")),
    "SQ-VAE default": ("paper", "stochastic", {}),
    "SQ-VAE fixed gain": ("paper", "stochastic", dict(latent_scale="data")),
    "SQ-VAE batch scale": ("paper", "stochastic", dict(latent_scale="batch")),
    "SQ-VAE in sony's network": ("sony", "stochastic", dict(latent_scale="none")),
}


def build(name: str, channels: int, dataset: str, seed: int) -> VQAutoencoder:
    net, kind, opts = ROWS[name]
    torch.manual_seed(seed)
    enc, dec = sony_networks(channels) if net == "sony" else build_networks(NetworkConfig(in_channels=channels))
    torch.manual_seed(seed + 1)
    if kind == "stochastic":
        opts = dict(log_var_init=initial_log_var(dataset), **opts)
    return VQAutoencoder(enc, build_quantizer(kind, num_codes=512, dim=64, **opts), dec)


@torch.no_grad()
def probe(model: VQAutoencoder, x: torch.Tensor) -> dict:
    """What the quantizer sees on a test batch: latent RMS (after the gain) and posterior entropy / log K."""
    model.eval()
    q = model.quantizer
    flat = q.flatten(model.encoder(x))
    out = {"latent_rms": float(flat.pow(2).mean().sqrt())}
    if isinstance(q, StochasticQuantizer):
        flat = flat * q.latent_gain
        logits = -squared_distances(flat, q.embedding) / (2 * q.variance)  # the quantizer's own posterior
        logp = logits.log_softmax(-1)
        out.update(latent_rms=float(flat.pow(2).mean().sqrt()),
                   posterior_entropy=float(-(logp.exp() * logp).sum(-1).mean() / math.log(q.num_codes)),
                   sigma2=float(q.variance), tau=q.temperature, gain=float(q.latent_gain))
    model.train()
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", default="cifar10")
    ap.add_argument("--data-root", default="../shared/data")
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--eval-every", type=int, default=250)
    ap.add_argument("--train-images", type=int, default=20000)
    ap.add_argument("--test-images", type=int, default=1000)
    ap.add_argument("--models", default=",".join(ROWS), help=f"comma-separated, from: {', '.join(ROWS)}")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    names = [n.strip() for n in args.models.split(",") if n.strip()]
    splits = load_splits(args.dataset, args.data_root, train_limit=args.train_images, eval_limit=args.test_images)
    test_x = torch.stack([splits.test[i][0] for i in range(len(splits.test))])
    models = {n: build(n, test_x.shape[1], args.dataset, args.seed) for n in names}
    opts = {n: torch.optim.Adam([p for p in m.parameters() if p.requires_grad], lr=1e-3) for n, m in models.items()}
    curves = {n: [] for n in names}
    rngs = {n: OwnRandomness(args.seed, n) for n in names}  # each model's Gumbel draws independent of the others'
    terms = {n: defaultdict(float) for n in names}
    seen = 0
    stem = f"sqvae_audit_{args.dataset}_{args.steps}"
    out_path = HERE / "results" / f"{stem}.json"
    out_path.parent.mkdir(exist_ok=True)
    meta = dict(dataset=args.dataset, steps=args.steps, train_images=len(splits.train), test_images=len(test_x),
                date=datetime.now(timezone.utc).isoformat(), torch=torch.__version__,
                machine=f"{platform.machine()} {torch.get_num_threads()} threads",
                command="python benchmarks/sqvae_audit.py " + " ".join(
                    f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items() if v is not None))
    for step, x in training_batches(splits.train, args.steps, args.seed):
        for n in names:  # interleaved: every model trains on this batch before the next batch
            m, opt = models[n], opts[n]
            with rngs[n]:
                x_hat, out = m(x)
                recon = m.reconstruction_loss(x_hat, x)
                loss = recon + out.loss
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
            terms[n]["reconstruction"] += float(recon.detach())
            terms[n]["train_mse"] += float(nn.functional.mse_loss(x_hat.detach(), x))
            for k, v in out.losses.items():
                terms[n][k] += float(v.detach())
        seen += 1
        if step % args.eval_every == 0 or step == args.steps:
            for n in names:
                means = {k: v / seen for k, v in terms[n].items()}
                terms[n].clear()
                curves[n].append(dict(step=step, **evaluate(models[n], test_x), **means,
                                      **probe(models[n], test_x[:256])))
            seen = 0
            print(f"step {step}: " + "; ".join(
                f"{n}: mse {curves[n][-1]['mse']:.5f} ppl {curves[n][-1]['perplexity']:.1f}"
                + (f" s2 {curves[n][-1]['sigma2']:.2f} H {curves[n][-1]['posterior_entropy']:.2f}"
                   if "sigma2" in curves[n][-1] else "") for n in names), flush=True)
            out_path.write_text(json.dumps(dict(meta=meta, curves=curves), indent=2))  # as results come
    plot(curves, out_path.with_suffix(".png"), args.dataset)
    print("\n| model | test MSE | test perplexity | sigma^2 | posterior entropy / log K | latent RMS |\n|---|---|---|---|---|---|")
    for n in names:
        c = curves[n][-1]
        print(f"| {n} | {c['mse']:.5f} | {c['perplexity']:.1f} | {c.get('sigma2', float('nan')):.3g} | "
              f"{c.get('posterior_entropy', float('nan')):.3f} | {c['latent_rms']:.3g} |")
    print(f"\n{meta['command']}\n-> {out_path}")


def plot(curves: dict, path: Path, dataset: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [("mse", "test MSE", True), ("perplexity", "test perplexity", False),
              ("sigma2", "sigma^2", True), ("posterior_entropy", "posterior entropy / log K", False)]
    fig, axes = plt.subplots(1, 4, figsize=(18, 4))
    for ax, (key, title, log) in zip(axes, panels):
        for i, (n, c) in enumerate(curves.items()):
            pts = [(p["step"], p[key]) for p in c if key in p]
            if pts:  # one colour per model in every panel (VQ-VAE has no sigma^2 or posterior)
                ax.plot(*zip(*pts), marker="o", label=n, color=f"C{i}")
        ax.set_title(f"{dataset}: {title}")
        ax.set_xlabel("step")
        if log:
            ax.set_yscale("log")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main()
