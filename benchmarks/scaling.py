"""Benchmark 2: scaling of the default quantizer (solver "semidiscrete") in K and in latents per batch.

For K in {512, 2048, 8192, 16384} and latents per batch N in {2048, 16384, 65536} (B = N / 64 images of
8 x 8 latent positions, D = 64, one pi per position), one training-mode forward + backward of the quantizer
alone: median time over repeats, and peak memory. Each configuration runs in a fresh subprocess; peak
memory is the process's peak resident set growth during the timed calls on CPU (ru_maxrss), or
torch.cuda.max_memory_allocated minus the inputs on GPU. The (N, K) distances are built in chunks of at
most ``chunk_entries`` (2**24 = 64 MiB of float32), so memory stays bounded while time grows ~ N x K.

    .venv/bin/python benchmarks/scaling.py --out benchmarks/results/scaling.json --plot benchmarks/scaling.png

``--peers NAMES`` measures instead the peak memory of one training step at large K (issue #67): does a quantizer's
memory grow with N x K? Each named quantizer of the host zoo (``hosts.py``'s factories, the same constructors) runs
alone in a fresh process: built, then five training steps on N random channel-last latents of dimension 64
(forward, backward, Adam). The figure is the growth of the process's peak resident memory over its value before the
first step (what the steps allocate beyond the quantizer's state: the (N, K) distances and their kin, and the first
step's start), and the median time of the last three steps; an out-of-memory child (10 GB cap) is recorded as its
row. The result file is rewritten after each cell:

    .venv/bin/python benchmarks/scaling.py --peers "VQ-WAE,VQ kmeans+expiry,FSQ" --ks 16384,65536 --ns 2048,8192 --out benchmarks/results/large_k_memory.json
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

from vqwae.files import atomic_write_text
from vqwae.provenance import provenance

HERE = os.path.dirname(os.path.abspath(__file__))
KS = (512, 2048, 8192, 16384)
NS = (2048, 16384, 65536)
POSITIONS = 64
DIM = 64


def one(k: int, n: int, device: str, repeats: int, kind: str) -> dict:
    from vqwae.quantizers import VectorQuantizer

    sys.path.insert(0, HERE)
    from common import build_quantizer  # the benchmarks' shared module

    dev = torch.device(device)
    torch.manual_seed(0)
    b = n // POSITIONS
    if kind == "vqvae":
        q = VectorQuantizer(num_codes=k, dim=DIM).to(dev).train()
    else:
        q = build_quantizer("semidiscrete", k, DIM, num_positions=POSITIONS).to(dev).train()
    z = torch.randn(b, DIM, 8, 8, device=dev).requires_grad_(True)

    def call():
        out = q(z)
        out.loss.backward()
        if dev.type == "cuda":
            torch.cuda.synchronize()

    call()  # warm-up (allocator, first step of the potential)
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        call()
        times.append(time.perf_counter() - t0)
    if dev.type == "cuda":
        peak = torch.cuda.max_memory_allocated() - base
    else:
        peak = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0) * 1024  # KiB on Linux
    return dict(kind=kind, K=k, latents=n, batch=b, median_ms=1e3 * statistics.median(times),
                min_ms=1e3 * min(times), peak_mib=peak / 2**20, repeats=repeats)


#: each child's address space: a quantizer that needs more fails with an out-of-memory error, recorded as its row,
#: instead of taking the machine's memory from the runs beside it
LIMIT = 10 * 2**30

CHILD = r"""
import json, resource, statistics, sys, time
import torch
sys.path.insert(0, {here!r})
from hosts import quantizer_factories
torch.manual_seed(0); torch.set_num_threads(1)
name, k, n, d = {name!r}, {k}, {n}, {d}
q = quantizer_factories(k, d, 64, residual=False)[name]()
params = [p for p in q.parameters() if p.requires_grad]
opt = torch.optim.Adam(params, lr=1e-3) if params else None
state_mb = sum(t.numel() * t.element_size() for t in [*q.parameters(), *q.buffers()]) / 2**20
def step():
    z = torch.randn(n // 64, 64, d, requires_grad=True)
    quantized, idx, loss = q(z, None)
    (quantized.square().mean() + loss).backward()
    if opt is not None:
        opt.step(); opt.zero_grad(set_to_none=True)
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
for _ in range(2):
    step()
times = []
for _ in range(3):
    t0 = time.perf_counter(); step(); times.append(time.perf_counter() - t0)
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps(dict(step_growth_mb=(peak - base) / 1024, peak_rss_mb=peak / 1024, state_mb=state_mb,
                      ms_per_step=1000 * statistics.median(times))))
"""


def peers_memory(names: list[str], ks: list[int], ns: list[int], out: str | None) -> None:
    """``--peers``: each zoo quantizer's step memory in a fresh process, per K and N."""
    rows = []
    meta = provenance("scaling", torch.device("cpu"), command="python benchmarks/scaling.py " + " ".join(sys.argv[1:]),
                      note="one thread per process; resident memory, MB")
    for k in ks:
        for n in ns:
            for name in names:
                code = CHILD.format(here=str(HERE), name=name, k=k, n=n, d=DIM)
                res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=3600,
                                     preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (LIMIT, LIMIT)))
                row = dict(quantizer=name, num_codes=k, latents=n, dim=DIM)
                if res.returncode == 0:
                    row.update(json.loads(res.stdout.strip().splitlines()[-1]))
                else:
                    row["error"] = (res.stderr.strip().splitlines() or ["?"])[-1]
                rows.append(row)
                print(json.dumps(row), flush=True)
                if out:  # rewritten after every row, whole or not at all: a killed run keeps the rows it measured
                    atomic_write_text(Path(out), json.dumps(dict(meta=meta, rows=rows), indent=1))


def plot(rows, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    for n in sorted({r["latents"] for r in rows}):
        sub = sorted((r for r in rows if r["latents"] == n), key=lambda r: r["K"])
        ax.loglog([r["K"] * n for r in sub], [r["median_ms"] for r in sub], "o-", label=f"{n} latents")
        ax2.semilogx([r["K"] for r in sub], [r["peak_mib"] for r in sub], "o-", label=f"{n} latents")
    xs = sorted(r["K"] * r["latents"] for r in rows)
    ref = rows[-1]
    ax.loglog(xs, [ref["median_ms"] * x / (ref["K"] * ref["latents"]) for x in xs], "k--", lw=0.8, label="linear in K x N")
    ax.set_xlabel("K x latents per batch")
    ax.set_ylabel("forward + backward (ms)")
    ax.set_title("VQ-WAE quantizer (semidiscrete) time")
    ax.legend(fontsize=8)
    ax2.set_xlabel("K")
    ax2.set_ylabel("peak memory growth (MiB)")
    ax2.set_title("peak memory (chunked distances)")
    ax2.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads (1 is steadier on a loaded machine)")
    ap.add_argument("--kind", default="semidiscrete", help="semidiscrete | vqvae")
    ap.add_argument("--ks", default=",".join(map(str, KS)))
    ap.add_argument("--ns", default=",".join(map(str, NS)))
    ap.add_argument("--out", default=None, help="JSON results")
    ap.add_argument("--plot", default=None, help="log-log PNG")
    ap.add_argument("--one", default=None, help=argparse.SUPPRESS)  # K,N: run one configuration, print JSON
    ap.add_argument("--peers", default=None, help="comma-separated zoo quantizers: their step memory at large K "
                    "(each in a fresh process, one thread)")
    a = ap.parse_args(argv)
    if a.threads:
        torch.set_num_threads(a.threads)
    if a.peers:
        return peers_memory([m.strip() for m in a.peers.split(",")], [int(v) for v in a.ks.split(",")],
                            [int(v) for v in a.ns.split(",")], a.out)
    if a.one:
        k, n = map(int, a.one.split(","))
        print(json.dumps(one(k, n, a.device, a.repeats, a.kind)))
        return
    rows = []
    load0 = " ".join(f"{v:.2f}" for v in os.getloadavg())
    for n in map(int, a.ns.split(",")):
        for k in map(int, a.ks.split(",")):
            cmd = [sys.executable, __file__, "--one", f"{k},{n}", "--device", a.device, "--repeats", str(a.repeats),
                   "--kind", a.kind] + (["--threads", str(a.threads)] if a.threads else [])
            res = subprocess.run(cmd, capture_output=True, text=True, check=True)
            row = json.loads(res.stdout.strip().splitlines()[-1])
            rows.append(row)
            print(f"K {k:6d}  latents {n:6d}  {row['median_ms']:9.1f} ms  peak {row['peak_mib']:7.1f} MiB", flush=True)
    info = provenance("scaling", torch.device(a.device), cpus=os.cpu_count(), threads=a.threads or torch.get_num_threads(),
                      load_before=load0, load_after=" ".join(f"{v:.2f}" for v in os.getloadavg()),
                      command="python " + " ".join(sys.argv))
    print("| latents \\ K | " + " | ".join(str(k) for k in sorted({r['K'] for r in rows})) + " |")
    for n in sorted({r["latents"] for r in rows}):
        cells = [f"{r['median_ms']:.1f} ms / {r['peak_mib']:.0f} MiB" for r in sorted(rows, key=lambda r: r["K"]) if r["latents"] == n]
        print(f"| {n} | " + " | ".join(cells) + " |")
    if a.out:
        os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
        atomic_write_text(Path(a.out), json.dumps(dict(info=info, rows=rows), indent=2))
    if a.plot:
        plot(rows, a.plot)


if __name__ == "__main__":
    main()
