"""Benchmark 1: training-step time of VQ-VAE vs VQ-WAE (each solver) and SQ-VAE, interleaved in one run.

Same network (the paper's conv32, 3 channels, latent 64 x 8 x 8), batch 32, K 512, Adam 1e-3; one step =
encode, quantize (with the loss terms), decode, MSE + quantizer loss, backward, optimiser step -- the
trainer's step. The models take turns (a block of steps each, round after round) so that load on a shared
machine hits them alike; the figure is each model's median step time over VQ-VAE's.

    .venv/bin/python benchmarks/step_time.py                       # all models, CPU
    .venv/bin/python benchmarks/step_time.py --models vqvae,semidiscrete --rounds 40 --device cuda
    .venv/bin/python benchmarks/step_time.py --models vqvae,semidiscrete,vqvae+compile,semidiscrete+compile --device cuda

``--arch conv64 --hidden 256 --batch-size 128`` times a host whose GPU work outweighs its kernel launches (64x64
images: CIFAR-10 upsampled, 16x16 latent positions).

A name ending in "+compile" is that model under ``torch.compile(model)`` (inductor, ``--compile-mode``; the optimiser
step stays eager), compiled during the warm-up (the compile time is reported, not timed as steps).

``--denormals`` times instead what flushing subnormal floats saves on the CPU (issue #65): an Adam step on 500k
parameters whose moments have decayed into the subnormal range (below 1.2e-38, as a long run's rarely-touched
weights do), with ``torch.set_flush_denormal`` off and on, the two settings taking turns each round (the trainer
flushes them: ``vqwae.threads.flush_denormals``):

    .venv/bin/python benchmarks/step_time.py --denormals --rounds 10 --threads 1
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch

from vqwae.models import NetworkConfig
from vqwae.files import atomic_write_text
from vqwae.provenance import provenance

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import CONFIGURATIONS, build_autoencoder, loadavg, sync  # noqa: E402  (the benchmarks' shared module)

MODELS = CONFIGURATIONS  # each name may end in +compile: the whole model through torch.compile


def load_batches(n: int, batch: int, data_root: str | None, seed: int = 0, size: int = 32) -> list[torch.Tensor]:
    """Real CIFAR-10 images when available (the exact solver's time depends on the data; resized to ``size``),
    else noise."""
    if data_root:
        try:
            from vqwae.data import load_splits

            train = load_splits("cifar10", data_root, train_limit=n * batch, eval_limit=256).train
            x = torch.stack([train[i][0] for i in range(n * batch)])
            if size != 32:
                x = torch.nn.functional.interpolate(x, size=(size, size), mode="bilinear", align_corners=False)
            return list(x.split(batch))
        except Exception as e:  # noqa: BLE001 - fall back to noise, say so
            print(f"(no CIFAR-10 at {data_root}: {e}; using uniform noise)", file=sys.stderr)
    g = torch.Generator().manual_seed(seed)
    return list(torch.rand(n * batch, 3, size, size, generator=g).split(batch))


def make(name: str, k: int, device: torch.device, seed: int, compile_mode: str = "default", arch: str = "conv32",
         hidden: int = 128):
    base, compiled = name.removesuffix("+compile"), name.endswith("+compile")
    if base not in MODELS:
        raise SystemExit(f"error: unknown model {name!r}; choose from {', '.join(MODELS)} (each may end in +compile)")
    torch.manual_seed(seed)
    net = NetworkConfig(arch=arch, in_channels=3, num_res_layers=2, latent_dim=64, hidden=hidden)
    model = build_autoencoder(base, net, num_codes=k).to(device).train()
    opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    if compiled:
        model = torch.compile(model, mode=None if compile_mode == "default" else compile_mode)
    return model, opt


def step(model, opt, x):
    x_hat, out = model(x)
    loss = model.reconstruction_loss(x_hat, x) + out.loss
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return loss


def adam_on_subnormal_moments(n: int) -> torch.optim.Adam:
    p = torch.nn.Parameter(torch.randn(n))
    opt = torch.optim.Adam([p], lr=1e-3)
    p.grad = torch.full((n,), 1e-22)  # its square is subnormal
    opt.step()
    opt.state[p]["exp_avg_sq"].fill_(1e-40)  # subnormal, as after many steps of tiny gradients
    opt.state[p]["exp_avg"].fill_(1e-40)
    return opt


def time_denormals(params: int, rounds: int, steps: int) -> None:
    """``--denormals``: the Adam step with subnormal moments, flush off and on, interleaved."""
    times = {False: [], True: []}
    for r in range(rounds):
        for flush in ((False, True) if r % 2 == 0 else (True, False)):
            torch.set_flush_denormal(flush)
            opt = adam_on_subnormal_moments(params)
            for _ in range(steps):
                t0 = time.perf_counter()
                opt.step()
                times[flush].append((time.perf_counter() - t0) * 1e3)
    torch.set_flush_denormal(False)
    q = {k: statistics.quantiles(v, n=4) for k, v in times.items()}
    print(f"Adam step on {params:,} parameters with subnormal moments ({torch.get_num_threads()} thread(s), "
          f"{rounds} rounds x {steps} steps)")
    median = {k: statistics.median(v) for k, v in times.items()}
    for flush in (False, True):
        print(f"  flush {'on' if flush else 'off'}: median {median[flush]:.2f} ms "
              f"(IQR {q[flush][0]:.2f}-{q[flush][2]:.2f})")
    print(f"  ratio off / on: {median[False] / median[True]:.1f}x")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="vqvae,semidiscrete,sinkhorn,dual,exact,sqvae")
    ap.add_argument("--rounds", type=int, default=30, help="rounds of interleaving")
    ap.add_argument("--steps", type=int, default=5, help="timed steps per model per round")
    ap.add_argument("--warmup", type=int, default=20, help="untimed steps per model first")
    ap.add_argument("--num-codes", type=int, default=512)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--arch", default="conv32", choices=("conv32", "conv64"), help="the host network (conv64: 64x64)")
    ap.add_argument("--hidden", type=int, default=128, help="the host's trunk channels")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--data-root", default=os.environ.get("VQWAE_DATA", "/work/shared/data"))
    ap.add_argument("--compile-mode", default="default",
                    choices=("default", "reduce-overhead", "max-autotune-no-cudagraphs"),
                    help="torch.compile mode of the +compile models (reduce-overhead: CUDA graphs)")
    ap.add_argument("--json", default=None, help="write the results here")
    ap.add_argument("--denormals", action="store_true", help="time the Adam step on subnormal moments instead")
    a = ap.parse_args(argv)
    if a.threads:
        torch.set_num_threads(a.threads)
    if a.denormals:
        return time_denormals(500_000, a.rounds, a.steps)
    device = torch.device(a.device)
    names = [n.strip() for n in a.models.split(",") if n.strip()]
    size = NetworkConfig(arch=a.arch).image_side
    batches = [b.to(device) for b in load_batches(16, a.batch_size, a.data_root, size=size)]
    runs = {n: make(n, a.num_codes, device, seed=0, compile_mode=a.compile_mode, arch=a.arch, hidden=a.hidden)
            for n in names}
    times = {n: [] for n in names}
    warmup_s = {}
    load_before = loadavg()
    for n in names:  # warm-up: allocator, the potentials, the first OT problems (and compiling)
        t0 = time.perf_counter()
        for i in range(a.warmup):
            step(*runs[n], batches[i % len(batches)])
        sync(device)
        warmup_s[n] = time.perf_counter() - t0
    it = 0
    for r in range(a.rounds):
        order = names if r % 2 == 0 else names[::-1]  # alternate the order too
        for n in order:
            model, opt = runs[n]
            for _ in range(a.steps):
                x = batches[it % len(batches)]
                it += 1
                sync(device)
                t0 = time.perf_counter()
                step(model, opt, x)
                sync(device)
                times[n].append(time.perf_counter() - t0)
    load_after = loadavg()
    base = statistics.median(times["vqvae"]) if "vqvae" in times else None
    rows = []
    for n in names:
        t = sorted(times[n])
        q = statistics.quantiles(t, n=4)
        med = statistics.median(t)
        rows.append(dict(model=n, median_ms=1e3 * med, p25_ms=1e3 * q[0], p75_ms=1e3 * q[2],
                         ratio=(med / base) if base else None, steps=len(t), warmup_s=warmup_s[n]))
    info = provenance("step_time", device, cpus=os.cpu_count(), threads=torch.get_num_threads(),
                      load_before=load_before, load_after=load_after, command="python " + " ".join(sys.argv),
                      batch_size=a.batch_size, num_codes=a.num_codes, compile_mode=a.compile_mode, arch=a.arch,
                      hidden=a.hidden)
    print(f"# {info['date']}  {info['device']}  threads {info['threads']}  load {load_before} -> {load_after}")
    print("| model | median ms/step | IQR (ms) | ratio to VQ-VAE | warm-up s |")
    print("| --- | --- | --- | --- | --- |")
    for r in rows:
        ratio = f"{r['ratio']:.3f}" if r["ratio"] is not None else "-"
        print(f"| {r['model']} | {r['median_ms']:.1f} | {r['p25_ms']:.1f}-{r['p75_ms']:.1f} | {ratio} | "
              f"{r['warmup_s']:.1f} |")
    if a.json:
        atomic_write_text(Path(a.json), json.dumps(dict(info=info, rows=rows), indent=2))
    return rows


if __name__ == "__main__":
    main()
