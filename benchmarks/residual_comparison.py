"""Residual quantization: vqwae's ResidualQuantizer of Wasserstein levels against vector-quantize-pytorch's
ResidualVQ (k-means init, dead-code expiry), in the paper's 32x32 network, at equal steps, on the same batches.

Both stacks have L levels of K codes on the encoder's 64-dim latents (8 x 8 positions). Every model starts from
the same encoder/decoder weights and sees the same batches (interleaved). Every ``--eval-every`` steps each
is evaluated on the first ``--test-images`` test images: the test MSE and, per level, one usage histogram over
all test latents (perplexity, codes used).

    pip install -e ".[bench]"
    .venv/bin/python benchmarks/residual_comparison.py --dataset cifar10 --data-root ../shared/data --steps 1500

Writes benchmarks/results/residual_<dataset>_<steps>.json and a plot of each level's perplexity and the MSE.
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from datetime import datetime, timezone
from pathlib import Path

import torch
from torch import nn

from vqwae.data import load_splits
from vqwae.metrics.usage import CodeUsage
from vqwae.models import NetworkConfig
from vqwae.models.networks import build_networks
from vqwae.quantizers import ResidualQuantizer, WassersteinQuantizer

HERE = Path(__file__).resolve().parent


class PeerResidual(nn.Module):
    """vector-quantize-pytorch's ResidualVQ on channel-first latents (benchmark only)."""

    def __init__(self, levels: int, num_codes: int, dim: int):
        super().__init__()
        from vector_quantize_pytorch import ResidualVQ

        self.rvq = ResidualVQ(dim=dim, num_quantizers=levels, codebook_size=num_codes, decay=0.99, kmeans_init=True,
                              threshold_ema_dead_code=2, commitment_weight=0.25)

    def forward(self, z):
        b, d, h, w = z.shape
        q, idx, losses = self.rvq(z.flatten(2).transpose(1, 2))  # (B, N, D) in, (B, N, L) indices
        return q.transpose(1, 2).reshape(b, d, h, w), idx.reshape(b, h, w, -1), losses.sum()


class Ours(nn.Module):
    def __init__(self, levels: int, num_codes: int, dim: int, **options):
        super().__init__()
        self.rq = ResidualQuantizer(lambda: WassersteinQuantizer(num_codes=num_codes, dim=dim, **options), levels)

    def forward(self, z):
        out = self.rq(z)
        return out.quantized, out.indices, out.loss


class Autoencoder(nn.Module):
    def __init__(self, quantizer: nn.Module, channels: int, seed: int):
        super().__init__()
        torch.manual_seed(seed)
        self.encoder, self.decoder = build_networks(NetworkConfig(in_channels=channels))  # identical start
        self.quantizer = quantizer

    def forward(self, x):
        q, idx, loss = self.quantizer(self.encoder(x))
        return self.decoder(q), idx, loss


@torch.no_grad()
def evaluate(model, test_x, levels: int, num_codes: int, batch: int = 500) -> dict:
    model.eval()
    usage = [CodeUsage(num_codes) for _ in range(levels)]
    se = 0.0
    for x in test_x.split(batch):
        x_hat, idx, _ = model(x)
        for level in range(levels):
            usage[level].update(idx[..., level])
        se += float(((x_hat.clamp(0, 1) - x) ** 2).mean()) * len(x)
    model.train()
    return {"mse": se / len(test_x), "perplexity": [u.perplexity for u in usage],
            "codes_used": [u.codes_used for u in usage]}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", default="cifar10")
    ap.add_argument("--data-root", default="../shared/data")
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--eval-every", type=int, default=500)
    ap.add_argument("--test-images", type=int, default=2000)
    ap.add_argument("--levels", type=int, default=4)
    ap.add_argument("--num-codes", type=int, default=256)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--vqwae", default="", metavar="KEY=VALUE,...",
                    help="options of every Wasserstein level, e.g. 'num_positions=64' (one pi per position)")
    ap.add_argument("--tag", default="", help="suffix of the result files")
    args = ap.parse_args()
    from common import parse_settings  # the same 'a=1,b=x' syntax as its --variant

    level_options = parse_settings(args.vqwae)
    torch.set_num_threads(args.threads)
    splits = load_splits(args.dataset, args.data_root, train_limit=args.steps * 32, eval_limit=args.test_images)
    test_x = torch.stack([splits.test[i][0] for i in range(len(splits.test))])
    channels, dim = test_x.shape[1], 64
    L, K = args.levels, args.num_codes
    quantizers = {
        "vqwae ResidualQuantizer (Wasserstein levels)": lambda: Ours(L, K, dim, **level_options),
        "vector-quantize-pytorch ResidualVQ (k-means, dead-code expiry)": lambda: PeerResidual(L, K, dim),
    }
    models = {}
    for name, make in quantizers.items():
        torch.manual_seed(args.seed + 1)
        models[name] = Autoencoder(make(), channels, args.seed)
    opts = {n: torch.optim.Adam([p for p in m.parameters() if p.requires_grad], lr=1e-3) for n, m in models.items()}
    times = {n: [] for n in models}
    curves = {n: [] for n in models}
    gen = torch.Generator().manual_seed(args.seed)
    perm = torch.randperm(len(splits.train), generator=gen)
    for step in range(1, args.steps + 1):
        idx = perm[((step - 1) * 32) % len(perm):][:32]
        if len(idx) < 32:
            perm = torch.randperm(len(splits.train), generator=gen)
            idx = perm[:32]
        x = torch.stack([splits.train[int(i)][0] for i in idx])
        for name, model in models.items():  # interleaved: every model trains on this batch before the next
            t0 = time.perf_counter()
            x_hat, _, qloss = model(x)
            loss = nn.functional.mse_loss(x_hat, x) + qloss
            opts[name].zero_grad(set_to_none=True)
            loss.backward()
            opts[name].step()
            times[name].append(time.perf_counter() - t0)
        if step % args.eval_every == 0 or step == args.steps:
            for name, model in models.items():
                curves[name].append(dict(step=step, **evaluate(model, test_x, L, K)))
            print(f"step {step}: " + "; ".join(
                f"{n.split(' ')[0]}: mse {c[-1]['mse']:.5f} ppl " + "/".join(f"{p:.0f}" for p in c[-1]["perplexity"])
                for n, c in curves.items()), flush=True)
    rows = [dict(model=n, ms_per_step=1000 * statistics.median(times[n]), **curves[n][-1]) for n in models]
    meta = dict(dataset=args.dataset, steps=args.steps, levels=L, num_codes=K, test_images=len(test_x),
                date=datetime.now(timezone.utc).isoformat(), torch=torch.__version__,
                machine=f"{platform.machine()} {torch.get_num_threads()} threads",
                command="python benchmarks/residual_comparison.py " + " ".join(
                    f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items()))
    out = HERE / "results" / f"residual_{args.dataset}_{args.steps}{'_' + args.tag if args.tag else ''}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(dict(meta=meta, rows=rows, curves=curves), indent=2))
    plot(curves, out.with_suffix(".png"), args.dataset, K)
    print(f"\n| model | ms/step | test MSE | perplexity per level (of {K}) | codes used per level |\n|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['model']} | {r['ms_per_step']:.0f} | {r['mse']:.5f} | "
              + " / ".join(f"{p:.1f}" for p in r["perplexity"]) + " | "
              + " / ".join(str(c) for c in r["codes_used"]) + " |")
    print(f"\n{meta['command']}\n-> {out}")


def plot(curves: dict, path: Path, dataset: str, num_codes: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for (name, c), color in zip(curves.items(), ("tab:blue", "tab:orange")):
        steps = [p["step"] for p in c]
        for level in range(len(c[0]["perplexity"])):
            axes[0].plot(steps, [p["perplexity"][level] for p in c], color=color, marker="o", alpha=1 - 0.2 * level,
                         label=f"{name.split(' (')[0]}, level {level + 1}")
        axes[1].plot(steps, [p["mse"] for p in c], color=color, marker="o", label=name.split(" (")[0])
    axes[0].set(xlabel="training step", ylabel=f"test perplexity (max {num_codes})", title=f"{dataset}: use per level")
    axes[1].set(xlabel="training step", ylabel="test MSE", yscale="log", title=f"{dataset}: reconstruction")
    for a in axes:
        a.grid(alpha=0.3)
        a.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    main()
