"""Issue #66 goal 3: how hard the WS term pulls the encoder, per latent shape, against the field's commitment
(vector-quantize-pytorch's ``commitment_weight=1`` on the mean squared error) and against a reconstruction gradient.

For each shape, latents z ~ N(0, 1) of (B, positions, D), channel-last; ``WassersteinQuantizer`` at its defaults
starts its codebook from a first batch, then on a second batch the gradient norms on z of: the WS term as trained
(ws_weight x sum over positions); the commitment 1 x mean((z - sg(q))^2); and the MSE of a random linear decoder's
output of the straight-through codes against a random target (a reconstruction gradient of a typical size).

    .venv/bin/python benchmarks/pull_per_shape.py
"""
from __future__ import annotations

import json
import sys

import torch
import torch.nn.functional as F

from vqwae.quantizers import WassersteinQuantizer

SHAPES = {  # name: (batch, positions, D, K)
    "image latents 8x8x64 (the paper's)": (32, 64, 64, 512),
    "tokens 1,024 x 256": (8, 1024, 256, 8192),
    "audio frames 150 x 128": (16, 150, 128, 1024),
}


def pulls(b: int, n: int, d: int, k: int, seed: int = 0) -> dict:
    torch.manual_seed(seed)
    q = WassersteinQuantizer(num_codes=k, dim=d, channel_last=True).train()
    q(torch.randn(b, n, d))  # the data start
    z = torch.randn(b, n, d, requires_grad=True)
    out = q(z)
    ws = torch.autograd.grad(out.losses["ws"], z, retain_graph=True)[0].norm()
    commit = torch.autograd.grad(F.mse_loss(z, out.quantized.detach()), z)[0].norm()
    dec = torch.nn.Linear(d, d)
    target = torch.randn(b, n, d)
    recon = torch.autograd.grad(F.mse_loss(dec(out.quantized), target), z)[0].norm()
    return dict(ws=float(ws), commitment=float(commit), reconstruction=float(recon),
                ws_over_commitment=float(ws / commit), ws_over_reconstruction=float(ws / recon))


def main() -> None:
    rows = {}
    for name, shape in SHAPES.items():
        runs = [pulls(*shape, seed=s) for s in range(3)]
        rows[name] = {key: sum(r[key] for r in runs) / len(runs) for key in runs[0]}
        r = rows[name]
        print(f"{name:38s} WS / commitment {r['ws_over_commitment']:8.1f}   WS / reconstruction "
              f"{r['ws_over_reconstruction']:8.1f}", flush=True)
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w") as f:
            json.dump(rows, f, indent=2)


if __name__ == "__main__":
    main()
