"""Where a quantizer's time goes: torch.profiler over training-mode forward + backward of the quantizer alone
(B 32, 8 x 8 positions, K 512, D 64), for VQ-VAE and for VQ-WAE with each solver.

    .venv/bin/python benchmarks/profile_quantizer.py --solvers vqvae,semidiscrete,sinkhorn --rows 8
    .venv/bin/python benchmarks/profile_quantizer.py --solvers vqvae,semidiscrete-shared,semidiscrete-shared-eager-update --rows 0 --device cuda

Besides the time, it counts the operators one step dispatches eagerly (views and allocations left out: on a GPU
each of the others is a kernel launch, the cost of a small step; docs/lab/30-39.md#gpu-launch-bound) and, on a GPU, the kernels the
profiler saw with their summed device time, and the launches the host issued (a replayed CUDA graph is one launch
for all its kernels: ``graph_update``, docs/lab/40-47.md#gpu-cuda-graph).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import torch
from torch.profiler import ProfilerActivity, profile
from torch.utils._python_dispatch import TorchDispatchMode

from vqwae.quantizers import VectorQuantizer, WassersteinQuantizer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import build_quantizer  # noqa: E402  (the benchmarks' shared module)


#: operators that launch no kernel (views, allocations, metadata)
NO_KERNEL = {"view", "_unsafe_view", "expand", "t", "transpose", "permute", "slice", "select", "unsqueeze", "squeeze",
             "alias", "detach", "as_strided", "_reshape_alias", "unbind", "split", "lift_fresh", "empty",
             "empty_strided", "empty_like", "reshape", "view_as", "_local_scalar_dense"}


#: the CUDA runtime / driver calls that start work on the device (the profiler's host-side events)
LAUNCHES = ("cudaLaunchKernel", "cuLaunchKernel", "cudaGraphLaunch", "cudaMemcpyAsync", "cudaMemsetAsync")


class CountOps(TorchDispatchMode):
    """Counts the dispatched operators that may launch a kernel."""

    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.count += func.__name__.split(".")[0] not in NO_KERNEL
        return func(*args, **(kwargs or {}))


#: the cases fed padded sequences with a mask instead of a (B, D, 8, 8) batch
MASKED = ("vqvae-masked", "semidiscrete-shared-masked", "semidiscrete-shared-masked-pull")


def build(name, k):
    if name == "vqvae":
        return VectorQuantizer(num_codes=k, dim=64)
    if name == "semidiscrete-shared":  # the drop-in default: one shared pi
        return WassersteinQuantizer(num_codes=k, dim=64)
    if name == "semidiscrete-shared-compiled-update":  # its own update fused (compile_update, docs/lab/30-39.md#gpu-launch-bound)
        return build_quantizer("semidiscrete-compiled-update", k, 64)
    if name == "semidiscrete-shared-eager-update":  # its own update launched op by op (graph_update off, docs/lab/40-47.md#gpu-cuda-graph)
        return build_quantizer("semidiscrete-eager-update", k, 64)
    if name == "semidiscrete-shared-pull":  # pull=None: the latents-per-code pull (0.1 at K = 8,192, 2,048 latents)
        return WassersteinQuantizer(num_codes=k, dim=64, pull=None)
    if name == "semidiscrete-shared-masked-pull":  # and its mask's count on the device
        return WassersteinQuantizer(num_codes=k, dim=64, channel_last=True, pull=None)
    if name in MASKED:  # padded sequences: channel-last (B, 64, 64) tokens under a mask of random lengths
        return (VectorQuantizer(num_codes=k, dim=64, channel_last=True) if name == "vqvae-masked" else
                WassersteinQuantizer(num_codes=k, dim=64, channel_last=True))
    return build_quantizer(name, k, 64, num_positions=64)  # one pi per position: semidiscrete or a paper solver


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--solvers", default="vqvae,semidiscrete,sinkhorn,dual,exact")
    ap.add_argument("--num-codes", type=int, default=512)
    ap.add_argument("--rows", type=int, default=8)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--device", default="cpu")
    a = ap.parse_args(argv)
    if a.threads:
        torch.set_num_threads(a.threads)
    device = torch.device(a.device)
    cuda = device.type == "cuda"
    torch.manual_seed(0)
    z = (0.1 * torch.randn(32, 64, 8, 8, device=device)).requires_grad_(True)
    tokens = z.detach().flatten(2).transpose(1, 2).clone().requires_grad_(True)  # (B, 64 positions, 64 channels)
    mask = torch.arange(64, device=device) < torch.randint(16, 65, (32, 1), device=device)

    def step(q):
        out = q(tokens, mask) if q.config.channel_last else q(z)
        (out.loss + out.quantized.sum()).backward()  # the decoder's gradient too, as in a host

    for name in a.solvers.split(","):
        q = build(name, a.num_codes).to(device).train()
        for _ in range(3):
            step(q)
        times = []
        for _ in range(a.repeats):
            if cuda:
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            step(q)
            if cuda:
                torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
        with profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])) as prof:
            for _ in range(5):
                step(q)
            if cuda:
                torch.cuda.synchronize()
        # last: under a dispatch mode dynamo runs compiled code eagerly (the count is the eager update's)
        with CountOps() as ops:
            step(q)
        line = (f"== {name}: quantizer forward+backward median {1e3 * statistics.median(times):.2f} ms, "
                f"{ops.count} operators dispatched (eagerly)")
        if cuda:
            kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
            busy = sum(e.device_time for e in kernels) / 5
            # what the host issues: each kernel launch, copy, memset, or CUDA graph (one launch for all its kernels)
            launches = [e for e in prof.events() if e.name.startswith(LAUNCHES)]
            graphs = sum(e.name.startswith("cudaGraphLaunch") for e in launches)
            line += (f"; {len(kernels) / 5:.0f} kernels, {busy / 1e3:.2f} ms of kernel time per step; the host issues "
                     f"{len(launches) / 5:.0f} launches ({graphs / 5:.0f} of them CUDA graphs)")
        print(line)
        if a.rows:
            print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=a.rows))


if __name__ == "__main__":
    main()
