"""Peak memory of one training step at large K (issue #67): does a quantizer's memory grow with N x K?

Each quantizer of the host zoo (``hosts.py``'s factories, the same constructors) runs alone in a fresh process: it is
built, then takes five training steps on N random channel-last latents of dimension D (forward, backward, Adam);
the figure is the growth of the process's peak resident memory over its value before the first step, i.e. what the
steps allocate beyond the quantizer's own state (the (N, K) distance matrix and its kin, and the first step's start:
k-means or the data start), and the median time of the last three steps. The CPU has no allocator statistics, so resident memory (``ru_maxrss``) stands in for them; the figures are
MB, rounded, with the state (codebook, EMAs) reported apart.

    .venv/bin/python benchmarks/large_k_memory.py --num-codes 16384,65536 --latents 2048,16384

Writes benchmarks/results/large_k_memory.json (rewritten after each cell: a killed run keeps what it measured).
"""
from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parent
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


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--num-codes", default="16384,65536")
    ap.add_argument("--latents", default="2048,16384", help="N, latents per step (the zoo's batch: 32 x 64 = 2048)")
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--models", default="VQ-WAE,VQ kmeans+expiry,VQ kmeans+expiry+rotation,SimVQ,FSQ,LFQ")
    args = ap.parse_args()
    out = HERE / "results" / "large_k_memory.json"
    rows = []
    for k in (int(v) for v in args.num_codes.split(",")):
        for n in (int(v) for v in args.latents.split(",")):
            for name in (m.strip() for m in args.models.split(",")):
                code = CHILD.format(here=str(HERE), name=name, k=k, n=n, d=args.dim)
                res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=3600,
                                     preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (LIMIT, LIMIT)))
                row = dict(quantizer=name, num_codes=k, latents=n, dim=args.dim)
                if res.returncode == 0:
                    row.update(json.loads(res.stdout.strip().splitlines()[-1]))
                else:
                    row["error"] = (res.stderr.strip().splitlines() or ["?"])[-1]
                rows.append(row)
                print(json.dumps(row), flush=True)
                meta = dict(date=datetime.now(timezone.utc).isoformat(), command="python benchmarks/large_k_memory.py "
                            + " ".join(sys.argv[1:]), note="one thread per process; resident memory, MB")
                out.write_text(json.dumps(dict(meta=meta, rows=rows), indent=1))


if __name__ == "__main__":
    main()
