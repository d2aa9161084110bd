"""The controllability toy (issue #35): does the usage of the code the decoder receives follow a fixed pi when
everything learns?

8-D data from a mixture of 6 Gaussians; an MLP encoder (8 -> 64 -> 64 -> 8), a ``WassersteinQuantizer`` (K = 16
codes, one position), an MLP decoder; encoder, decoder and quantizer learn together for 1,500 steps of 256 samples
with Adam 3e-3 and the MSE. Then, on 10,000 fresh samples: the usage of the codes against pi (Pearson correlation,
total variation) for a fixed peaked and a fixed gaussian pi, and the usage's perplexity for a learned pi that starts
uniform. Seconds per run on one CPU core. ``benchmarks/controllability_toy.py`` runs it over seeds and options;
``tests/test_controllability_toy.py`` holds the paper's property with it.
"""
from __future__ import annotations

import torch
from torch import nn

from vqwae.quantizers import WassersteinQuantizer

K, DIM = 16, 8


def mixture(n: int, gen: torch.Generator) -> torch.Tensor:
    """n samples of the fixed 6-component mixture (its means drawn once from seed 0)."""
    means = torch.randn(6, DIM, generator=torch.Generator().manual_seed(0)) * 2.0
    comp = torch.randint(0, 6, (n,), generator=gen)
    return means[comp] + 0.5 * torch.randn(n, DIM, generator=gen)


def mlp(i: int, o: int) -> nn.Module:
    return nn.Sequential(nn.Linear(i, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, o))


def run(pi_form: str, seed: int, steps: int = 1500, options: dict | None = None, fit_steps: int = 0) -> dict:
    """One toy run: ``pi_form`` "peaked" or "gaussian" (a fixed pi) or "uniform (learned)"; ``options`` the
    quantizer's; ``fit_steps``: solve the transport map on 20,000 fresh training samples' latents after training (as
    ``vqwae train --fit-steps`` does). Returns tv, mse, perplexity and, for a fixed pi, corr (usage against pi) and
    corr_transport_map (the map's cells against pi)."""
    options = dict(options or {})
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    enc, dec = mlp(DIM, DIM), mlp(DIM, DIM)
    fixed = pi_form != "uniform (learned)"
    q = WassersteinQuantizer(num_codes=K, dim=DIM, channel_last=True, learn_pi=not fixed,
                             pi_init=pi_form if fixed else "uniform", **options)
    params = [p for m in (enc, dec, q) for p in m.parameters() if p.requires_grad]
    opt = torch.optim.Adam(params, lr=3e-3)
    for _ in range(steps):
        x = mixture(256, gen)
        out = q(enc(x)[:, None])  # (B, 1, D): one position
        loss = nn.functional.mse_loss(dec(out.quantized[:, 0]), x) + out.loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    q.eval()
    with torch.no_grad():
        if fit_steps:  # as vqwae train does: the map solved on training latents, the network held still
            fit_gen = torch.Generator().manual_seed(10_000 + seed)  # apart from gen: the test samples stay the same
            q.fit_transport(enc(mixture(20_000, fit_gen))[:, None], fit_steps, generator=fit_gen)
        x = mixture(10_000, gen)
        z = enc(x)[:, None]
        idx = q(z).indices.reshape(-1)
        mse = float(nn.functional.mse_loss(dec(q.indices_to_latents(idx[:, None])[:, 0]), x))
        # the trained transport map's cells (semidiscrete: the power diagram of its potential), for comparison
        cells = q.transport_map(q.flatten(z)).reshape(-1)
    usage = torch.bincount(idx, minlength=K).double() / len(idx)
    pi = q.pi[0].double()
    row = dict(tv=float(0.5 * (usage - pi).abs().sum()), mse=mse,
               perplexity=float(torch.exp(-(usage * usage.clamp_min(1e-30).log()).sum())))
    if fixed:
        row["corr"] = float(torch.corrcoef(torch.stack([usage, pi]))[0, 1])
        mass = torch.bincount(cells, minlength=K).double() / len(cells)
        row["corr_transport_map"] = float(torch.corrcoef(torch.stack([mass, pi]))[0, 1])
    return row
