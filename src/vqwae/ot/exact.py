"""Exact optimal transport with POT's network simplex (``ot.emd``), one problem per group.

This is how the authors run VQ-WAE by default: for every latent position m, the exact earth mover's
distance between the B latents of the batch (uniform weights 1/B) and the K codewords weighted by pi^m.
It runs on the host in float64, one solve per group: faithful, but the slowest solver here.
:class:`ExactSolver` is it as the WS term's solver (no state).
"""
from __future__ import annotations

import numpy as np
import torch

from vqwae.extras import require
from vqwae.ot.cost import squared_distances
from vqwae.ot.transport import Solver, Transport, plan_value, positions_as_groups


@torch.no_grad()
def exact_plans(cost: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Optimal plans and centred codebook-side dual potentials.

    Args:
        cost: (G, N, K) cost matrices.
        b: (G, K) code weights pi (each row sums to 1). The latent side has uniform weights 1/N.

    Returns:
        plan (G, N, K) and potential v (G, K) with sum_k v_k = 0, on cost's device and dtype. The gradient of
        the OT value w.r.t. b along the simplex is v (POT's convention for ``ot.emd2``).
    """
    ot = require("ot")  # POT (vqwae[paper]), here rather than at the top: it costs ~1.7 s at import (scikit-learn with it), and only
    #            the exact solver needs it

    g, n, k = cost.shape
    cost64 = cost.detach().to("cpu", torch.float64).numpy()
    if not np.isfinite(cost64).all():
        raise ValueError("exact OT: the latents' squared distances to the codes are not finite (latents of size ~1e19 "
                         "or more overflow float32); scale the latents")
    b64 = b.detach().to("cpu", torch.float64).numpy()
    a = np.full(n, 1.0 / n)
    plans = np.empty((g, n, k))
    potentials = np.empty((g, k))
    for i in range(g):
        bi = b64[i] / b64[i].sum()  # the simplex solver needs equal total masses to the last bit
        plan, log = ot.emd(a, bi, np.ascontiguousarray(cost64[i]), numItermax=1_000_000, log=True)
        if log.get("warning"):
            raise RuntimeError(f"exact OT did not converge for group {i}: {log['warning']}")
        plans[i] = plan
        potentials[i] = log["v"] - log["v"].mean()
    to = dict(device=cost.device, dtype=cost.dtype)
    return torch.from_numpy(plans).to(**to), torch.from_numpy(potentials).to(**to)


class ExactSolver(Solver):
    """The exact plan per group (POT's network simplex); its transport cost is the WS term."""

    def forward(self, flat, codebook, log_pi, *, update) -> Transport:
        """As ``Solver.forward``: the exact plan per group; it keeps no state, so ``update`` changes nothing."""
        x = positions_as_groups(flat, self.shared)  # (G, N, D)
        with torch.no_grad():
            plan, v = exact_plans(squared_distances(x.detach(), codebook.detach()), log_pi.exp())
        return Transport(value=plan_value(plan, v, x, codebook, log_pi), plan=plan)
