"""Inside VQGAN, what does the quantizer cost? Step time of VQ against VQ-WAE, interleaved, and peak memory.

Step time: one full VQGAN training step (encoder, quantizer, decoder, L1 + LPIPS-VGG, the adaptive-weight
generator loss, the backward, Adam, then the discriminator's step), the two models built from the same
weights and trained in turns on the same batches, so load on a shared machine hits them alike. Reported: the
median of each model's steps and the median of the per-step ratios (WAE / VQ) with its interquartile range.

Peak memory: one forward and backward of the paper's FFHQ network (ch 128, ch_mult 1,1,2,2,4, attention at
16, K 1024 x D 256) at 256x256, batch 4, each model in its own subprocess: the peak CUDA allocation on a GPU,
the growth of the process's peak resident set on the CPU.

    .venv/bin/python benchmarks/vqgan_speed.py --steps 30 --num-codes 1024,16384 --lpips-weights ../shared/weights/lpips
    .venv/bin/python benchmarks/vqgan_speed.py --memory-only --lpips-weights ../shared/weights/lpips
"""
from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

from vqwae.metrics.lpips import require_lpips
from vqwae.models import VQAutoencoder
from vqwae.models.networks import NetworkConfig, build_networks
from vqwae.files import atomic_write_text
from vqwae.provenance import provenance
from vqwae.quantizers import build_quantizer
from vqwae.training.adversarial import BETAS, AdversarialLoss, AdversarialOptions

HERE = Path(__file__).resolve().parent
SMALL = dict(ch=32, ch_mult="1,2,2,4", num_res_blocks=1, attn_resolutions="8", z_channels=64)  # f = 8 at 64x64
PAPER = dict(ch=128, ch_mult="1,1,2,2,4", num_res_blocks=2, attn_resolutions="16", z_channels=256)  # f = 16


def build(model: str, num_codes: int, dim: int, size: int, sizes: dict, seed: int = 0) -> VQAutoencoder:
    net = NetworkConfig(arch="vqgan", in_channels=3, latent_dim=dim, image_size=size, **sizes)
    torch.manual_seed(seed)  # the same encoder / decoder weights for both models
    enc, dec = build_networks(net)
    if model == "vq":
        q = build_quantizer("vector", num_codes=num_codes, dim=dim, beta=0.25)
    else:
        q = build_quantizer("wasserstein", num_codes=num_codes, dim=dim, num_positions=net.latent_side(size) ** 2)
    return VQAutoencoder(enc, q, dec, net)


class Stepper:
    """One model's VQGAN training step, the discriminator on from the first step."""

    def __init__(self, model: VQAutoencoder, perceptual, lr: float = 1e-4):
        self.model = model.train()
        self.opt = torch.optim.Adam(model.parameters(), lr=lr, betas=BETAS)
        self.gan = AdversarialLoss(AdversarialOptions(disc_start=0), 3, perceptual, lr)

    def __call__(self, x: torch.Tensor, step: int) -> None:
        x_hat, out = self.model(x)
        rec, _ = self.gan.generator_terms(x, x_hat, self.model.decoder.last_layer, step)
        loss = rec + out.loss
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        self.gan.discriminator_step(x, x_hat.detach(), step)


def step_times(args, perceptual) -> list[dict]:
    rows = []
    for k in args.num_codes:
        models = {"VQ (VQGAN)": build("vq", k, args.dim, args.size, SMALL),
                  "VQ-WAE (VQGAN)": build("wae", k, args.dim, args.size, SMALL)}
        steppers = {n: Stepper(m, perceptual) for n, m in models.items()}
        times = {n: [] for n in models}
        gen = torch.Generator().manual_seed(0)
        for step in range(args.warmup + args.steps):
            x = torch.rand(args.batch, 3, args.size, args.size, generator=gen)
            order = list(steppers.items()) if step % 2 == 0 else list(reversed(steppers.items()))
            for n, s in order:  # alternate who goes first: neither always gets the warm cache
                t = time.perf_counter()
                s(x, step)
                if torch.cuda.is_available():
                    torch.cuda.synchronize()
                if step >= args.warmup:
                    times[n].append(time.perf_counter() - t)
        ratios = [w / v for v, w in zip(times["VQ (VQGAN)"], times["VQ-WAE (VQGAN)"])]
        q = statistics.quantiles(ratios, n=4)
        row = dict(num_codes=k, vq_ms=1e3 * statistics.median(times["VQ (VQGAN)"]),
                   wae_ms=1e3 * statistics.median(times["VQ-WAE (VQGAN)"]),
                   ratio=statistics.median(ratios), ratio_iqr=[q[0], q[2]])
        print(f"K {k}: VQ {row['vq_ms']:.0f} ms, VQ-WAE {row['wae_ms']:.0f} ms, ratio {row['ratio']:.3f} "
              f"(IQR {q[0]:.3f}-{q[2]:.3f}) over {args.steps} steps", flush=True)
        rows.append(row)
    return rows


def peak_memory_child(model: str, lpips_weights: str | None) -> None:
    """Runs in a fresh process: one forward + backward of the paper network at 256x256, batch 4."""
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    perceptual = require_lpips(lpips_weights, net="vgg", download=False, device=device)
    m = build(model, 1024, 256, 256, PAPER).to(device)
    gan = AdversarialLoss(AdversarialOptions(disc_start=0), 3, perceptual, 1e-4).to(device)
    x = torch.rand(4, 3, 256, 256, device=device)
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    t = time.perf_counter()
    x_hat, out = m(x)
    rec, _ = gan.generator_terms(x, x_hat, m.decoder.last_layer, 0)
    (rec + out.loss).backward()
    seconds = time.perf_counter() - t
    if device.type == "cuda":
        peak = torch.cuda.max_memory_allocated() / 2**20
    else:
        peak = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) / 1024  # KiB -> MiB on Linux
    print(json.dumps(dict(model=model, device=device.type, peak_mib=peak, seconds=seconds)))


def peak_memory(lpips_weights: str | None) -> list[dict]:
    rows = []
    for model in ("vq", "wae"):
        cmd = [sys.executable, __file__, "--memory-child", model] + (["--lpips-weights", lpips_weights] if lpips_weights else [])
        res = subprocess.run(cmd, capture_output=True, text=True, check=True)
        row = json.loads(res.stdout.strip().splitlines()[-1])
        print(f"256x256, batch 4, {model}: peak {row['peak_mib']:.0f} MiB ({row['device']}), "
              f"forward + backward {row['seconds']:.1f} s", flush=True)
        rows.append(row)
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--size", type=int, default=64)
    p.add_argument("--dim", type=int, default=256)
    p.add_argument("--num-codes", default="1024,16384", type=lambda s: [int(v) for v in s.split(",")])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--lpips-weights", default=None, help="folder with vgg16_features.pth (else $VQWAE_LPIPS_WEIGHTS)")
    p.add_argument("--memory-only", action="store_true")
    p.add_argument("--memory-child", choices=("vq", "wae"), help=argparse.SUPPRESS)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    if args.memory_child:
        return peak_memory_child(args.memory_child, args.lpips_weights)
    result = provenance("vqgan_speed", torch.device("cuda" if torch.cuda.is_available() else "cpu"),
                        command="python benchmarks/vqgan_speed.py " + " ".join(sys.argv[1:]))
    if not args.memory_only:
        perceptual = require_lpips(args.lpips_weights, net="vgg", download=False)
        result["step_time"] = step_times(args, perceptual)
    result["peak_memory_256_batch4"] = peak_memory(args.lpips_weights)
    out = HERE / "results" / ("vqgan_memory.json" if args.memory_only else "vqgan_speed.json")
    atomic_write_text(out, json.dumps(result, indent=2))
    print(f"-> {out}")


if __name__ == "__main__":
    main()
