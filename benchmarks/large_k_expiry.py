"""How much of VectorQuantize's codebook its dead-code expiry re-seeds from the batch each step, by K.

hosts.py's field VQ (k-means start, EMA decay 0.99, ``threshold_ema_dead_code=2``) at K = 16,384 sees 2,048 latents a
step: 0.125 a code, so a code's EMA count settles far below the threshold of 2 and almost every code is "dead". This
trains the quantizer alone on shrinking Gaussian latents (the hosts' latents shrink over training, lab 52d) and counts
the codes that leave a step equal to one of that step's latents (re-seeded by expiry; a re-seeded code's count restarts at
the threshold), and the codes under it at the end.
A toy, not a host: it names the mechanism, the hosts measure its effect.

    .venv/bin/python benchmarks/large_k_expiry.py --num-codes 512,16384
"""
from __future__ import annotations

import argparse
import json
import os

import torch


def probe(num_codes: int, steps: int, latents: int, dim: int, seed: int, shrink: float) -> dict:
    import vector_quantize_pytorch as vqp

    torch.manual_seed(seed)
    q = vqp.VectorQuantize(dim=dim, codebook_size=num_codes, decay=0.99, kmeans_init=True, threshold_ema_dead_code=2,
                           commitment_weight=0.25, rotation_trick=False).train()
    reseeded = []
    for step in range(steps):
        x = torch.randn(1, latents, dim) * (0.2 * shrink ** step)
        q(x)
        codes = q._codebook.embed.reshape(-1, dim)
        reseeded.append(int((torch.cdist(codes, x[0]).min(1).values < 1e-6).sum()))
    last = reseeded[steps // 2:]
    return dict(num_codes=num_codes, latents_per_step=latents, latents_per_code=latents / num_codes,
                reseeded_per_step_mean=sum(last) / len(last), reseeded_share=sum(last) / len(last) / num_codes,
                below_threshold=int((q._codebook.cluster_size < 2).sum()), steps=steps, shrink=shrink)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--num-codes", default="512,16384")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--latents", type=int, default=2048)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--shrink", default="1.0,0.98", help="the latents' scale is multiplied by this each step")
    args = ap.parse_args()
    torch.set_num_threads(1)
    rows = [probe(int(k), args.steps, args.latents, args.dim, args.seed, float(s))
            for s in args.shrink.split(",") for k in args.num_codes.split(",")]
    for r in rows:
        print(f"shrink {r['shrink']}, K {r['num_codes']:>6}: {r['latents_per_code']:.3f} latents a code a step; re-seeded a step "
              f"{r['reseeded_per_step_mean']:.0f} ({r['reseeded_share']:.1%} of K); under the threshold "
              f"{r['below_threshold']} of {r['num_codes']}")
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "large_k_expiry.json")
    with open(out, "w") as f:
        json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
