"""Where a quantizer's time goes: torch.profiler over training-mode forward + backward of the quantizer alone
(B 32, 8 x 8 positions, K 512, D 64), for VQ-VAE and for VQ-WAE with each solver.

    .venv/bin/python benchmarks/profile_quantizer.py --solvers vqvae,semidiscrete,sinkhorn --rows 8
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch.profiler import ProfilerActivity, profile

from vqwae.quantizers import VectorQuantizer, WassersteinQuantizer


def build(name, k):
    if name == "vqvae":
        return VectorQuantizer(num_codes=k, dim=64)
    kw = dict(solver=name)
    if name == "semidiscrete":
        kw["codebook_init"] = "data"
    return WassersteinQuantizer(num_codes=k, dim=64, num_positions=64, **kw)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--solvers", default="vqvae,semidiscrete,sinkhorn,dual,exact")
    ap.add_argument("--num-codes", type=int, default=512)
    ap.add_argument("--rows", type=int, default=8)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--repeats", type=int, default=20)
    a = ap.parse_args(argv)
    if a.threads:
        torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    z = (0.1 * torch.randn(32, 64, 8, 8)).requires_grad_(True)
    for name in a.solvers.split(","):
        q = build(name, a.num_codes).train()
        for _ in range(3):
            q(z).loss.backward()
        times = []
        for _ in range(a.repeats):
            t0 = time.perf_counter()
            q(z).loss.backward()
            times.append(time.perf_counter() - t0)
        print(f"== {name}: quantizer forward+backward median {1e3 * statistics.median(times):.2f} ms")
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(5):
                q(z).loss.backward()
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=a.rows))


if __name__ == "__main__":
    main()
