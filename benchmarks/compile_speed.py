"""torch.compile on the whole training step: the paper's 32x32 network with the default VQ-WAE quantizer (as
`vqwae train` builds it), eager against ``torch.compile(model)`` (inductor), on the same batches, interleaved.

    .venv/bin/python benchmarks/compile_speed.py --threads 1 --steps 200

Prints the graph breaks of the model's forward (torch._dynamo.explain), the compile time (the first compiled
steps) and the median step time of each with its IQR, and writes benchmarks/results/compile_<device>.json.
"""
from __future__ import annotations

import argparse
import copy
import json
import platform
import statistics
import time
from datetime import datetime, timezone
from pathlib import Path

import torch

from vqwae.training import TrainConfig, build_model

HERE = Path(__file__).resolve().parent


def step(model, opt, x):
    x_hat, out = model(x)
    loss = torch.nn.functional.mse_loss(x_hat, x) + out.loss
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return loss.detach()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--batch-size", type=int, default=32)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    torch.manual_seed(0)
    eager = build_model(TrainConfig.resolve(dataset="cifar10"), 3, 32).to(device).train()
    batches = torch.rand(8, args.batch_size, 3, 32, 32, device=device)
    step(eager, torch.optim.Adam(eager.parameters(), lr=1e-3), batches[0])  # the codebook's start, as step 1
    twin = copy.deepcopy(eager)
    explain = torch._dynamo.explain(twin)(batches[1])
    breaks = [str(b.reason).splitlines()[0] for b in explain.break_reasons]
    print(f"graphs {explain.graph_count}, graph breaks {explain.graph_break_count}: {breaks}")
    compiled = torch.compile(twin)
    opt_e = torch.optim.Adam([p for p in eager.parameters() if p.requires_grad], lr=1e-3)
    opt_c = torch.optim.Adam([p for p in twin.parameters() if p.requires_grad], lr=1e-3)
    t0 = time.perf_counter()
    for i in range(args.warmup):
        step(compiled, opt_c, batches[i % 8])
    compile_s = time.perf_counter() - t0
    for i in range(args.warmup):
        step(eager, opt_e, batches[i % 8])
    times = {"eager": [], "compiled": []}
    for i in range(args.steps):
        order = [("eager", eager, opt_e), ("compiled", compiled, opt_c)]
        for name, model, opt in (order if i % 2 == 0 else order[::-1]):  # alternate who goes first
            x = batches[i % 8]
            if device.type == "cuda":
                torch.cuda.synchronize()
            t = time.perf_counter()
            step(model, opt, x)
            if device.type == "cuda":
                torch.cuda.synchronize()
            times[name].append(time.perf_counter() - t)
    rows = {}
    for name, ts in times.items():
        q = statistics.quantiles(ts, n=4)
        rows[name] = dict(median_ms=1000 * statistics.median(ts), iqr_ms=(1000 * q[0], 1000 * q[2]))
    ratio = rows["eager"]["median_ms"] / rows["compiled"]["median_ms"]
    meta = dict(date=datetime.now(timezone.utc).isoformat(), torch=torch.__version__, device=str(device),
                machine=f"{platform.machine()} {torch.get_num_threads()} threads", steps=args.steps,
                load=open("/proc/loadavg").read().split()[:3] if Path("/proc/loadavg").exists() else None)
    result = dict(meta=meta, graph_breaks=breaks, graphs=explain.graph_count, compile_seconds=compile_s,
                  rows=rows, speedup=ratio)
    out = HERE / "results" / f"compile_{device.type}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    for name, r in rows.items():
        print(f"{name:>9}: median {r['median_ms']:.1f} ms/step (IQR {r['iqr_ms'][0]:.1f}-{r['iqr_ms'][1]:.1f})")
    print(f"compile (first {args.warmup} steps): {compile_s:.1f} s; speed-up eager/compiled {ratio:.2f}x -> {out}")


if __name__ == "__main__":
    main()
