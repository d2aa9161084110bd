"""Does the semi-discrete potential's ascent balance the transport cells when the latents crowd? (issue #34, 13f)

A fixed codebook (K = 512, D = 32, uniform pi) and a stream of batches of 1,280 latents (the `sequence` host's
32 rows x ~40 real tokens), 70% of them in a tight cluster (s.d. 0.03 per dimension) and 30% spread (s.d. 1): the
background patches and the strokes of MNIST. The potential takes one ascent step per batch; the figure is the total
variation between pi and the cells' masses on 40,000 held-out latents (the sampling floor is ~0.046) at steps
100 / 300 / 1,000 / 1,500. Step rules:

* ``global``: vqwae's (``SemiDiscreteSolver``): lr * K * (pi - mass) * (EMA of the quantization error);
* ``margin``: the same times each code's (EMA of its latents' mean margin: second-lowest power cost minus the
  lowest) over the quantization error: a per-code step that is small among crowded codes (section 17);
* ``averaged``: the global step, with the cells measured at the EMA of the potential's iterates (decay 0.9 or
  0.99; ``potential_average``: averaged SGD, Genevay et al. 2016's estimate), the ascent at the iterate.

    .venv/bin/python benchmarks/transport_multiscale.py                 # codes drawn from the latents
    .venv/bin/python benchmarks/transport_multiscale.py --codes lagging # half the codes in the cluster
    .venv/bin/python benchmarks/transport_multiscale.py --dense 0       # no cluster: one scale
    .venv/bin/python benchmarks/transport_multiscale.py --rules averaged # only the averaged potential's rows
"""
from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import torch

from vqwae.ot.semidiscrete import ascend_potential

D, K, B = 32, 512, 1280
HERE = Path(__file__).resolve().parent
ALL_RULES = "global,margin,averaged"


def sample(n: int, dense: float, g: torch.Generator) -> torch.Tensor:
    x = torch.randn(n, D, generator=g)
    crowd = torch.rand(n, generator=g) < dense
    x[crowd] = 0.03 * torch.randn(int(crowd.sum()), D, generator=g) + 3.0 / math.sqrt(D)
    return x


def run(rule: str, lr: float, codes: torch.Tensor, dense: float, steps: int, seed: int, average: float = 0.0
        ) -> list[float]:
    g = torch.Generator().manual_seed(seed)
    held = sample(40000, dense, g)
    pi = torch.full((1, K), 1 / K)
    c2 = codes.pow(2).sum(-1)
    dist = lambda x: x.pow(2).sum(-1, keepdim=True) - 2 * x @ codes.t() + c2  # noqa: E731
    pot, margin, scale = torch.zeros(1, K), torch.zeros(K), None
    avg = torch.zeros(1, K)  # EMA of the iterates (averaged SGD)
    out = []
    for t in range(1, steps + 1):
        d = dist(sample(B, dense, g))
        err = d.min(-1).values.clamp_min(0).mean()
        scale = err if scale is None else 0.9 * scale + 0.1 * err
        power = d - pot[0]
        low, idx = power.topk(2, dim=-1, largest=False)
        a = idx[:, 0]
        mass = torch.bincount(a, minlength=K).float()[None] / B
        step = torch.tensor(lr)
        if rule == "margin":
            counts = torch.bincount(a, minlength=K).float()
            m = torch.zeros(K).index_add_(0, a, low[:, 1] - low[:, 0]) / counts.clamp_min(1)
            margin = torch.where(counts > 0, torch.where(margin > 0, 0.9 * margin + 0.1 * m, m), margin)
            step = lr * torch.where(margin > 0, margin / scale, torch.ones(K))
        ascend_potential(pot, None, pi, step * scale, pooling=0.0, mass=mass)  # g in cost units
        avg.lerp_(pot, 1 - average)  # average 0: the iterate itself
        if t in (100, 300, 1000, steps):
            cells = torch.bincount((dist(held) - avg[0]).argmin(-1), minlength=K).double() / len(held)
            out.append(round(0.5 * float((cells - pi[0]).abs().sum()), 3))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dense", type=float, default=0.7, help="fraction of latents in the tight cluster")
    ap.add_argument("--codes", choices=("data", "lagging"), default="data")
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--rules", default=ALL_RULES, help="which step rules to run (comma-separated)")
    args = ap.parse_args()
    g = torch.Generator().manual_seed(args.seed + 100)
    codes = sample(K, args.dense, g) if args.codes == "data" else torch.cat(
        [0.03 * torch.randn(K // 2, D, generator=g) + 3.0 / math.sqrt(D), torch.randn(K // 2, D, generator=g)])
    rows = {}
    zero = run("global", 0.0, codes, args.dense, 1, args.seed)[0]
    print(f"dense {args.dense}, codes {args.codes}: TV at g = 0: {zero}")
    rules = (("global", 0.01, 0), ("global", 0.003, 0), ("global", 0.001, 0), ("margin", 0.03, 0), ("margin", 0.1, 0),
             ("averaged", 0.01, 0.9), ("averaged", 0.01, 0.99), ("averaged", 0.001, 0.99))
    for rule, lr, average in (r for r in rules if r[0] in args.rules.split(",")):
        name = f"{rule} {lr}" + (f" (decay {average})" if average else "")
        rows[name] = run(rule, lr, codes, args.dense, args.steps, args.seed, average)
        print(f"{name}: TV at steps 100 / 300 / 1000 / {args.steps}: {rows[name]}", flush=True)
    only = "" if args.rules == ALL_RULES else "_" + args.rules.replace(",", "+")
    out = HERE / "results" / f"transport_multiscale_dense{args.dense}_{args.codes}{only}.json"
    out.write_text(json.dumps(dict(args=vars(args), tv_at_zero_potential=zero, tv=rows), indent=1))


if __name__ == "__main__":
    main()
