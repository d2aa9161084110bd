"""Entropic optimal transport in the log domain, all groups batched on the tensors' device.

Solves, for each group g, min_P <P, C> + eps KL(P || a x b) with a uniform over the N latents and b = pi
over the K codes, by alternating exact dual updates (log-domain Sinkhorn; Cuturi 2013, Peyre & Cuturi
2019 Sec. 4.4). No host round trip unless a convergence tolerance is checked.

:class:`SinkhornSolver` runs it once per training step for the WS term, with eps relative to the batch's
mean cost and the code-side potential kept as a buffer to warm-start the next step.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from vqwae.ot.cost import squared_distances
from vqwae.ot.transport import Solver, Transport, plan_value, positions_as_groups


@dataclass
class SinkhornResult:
    """The entropic plans of a batch, one per group, and the potentials that give them."""

    f: torch.Tensor  # (G, N) latent-side potential
    g: torch.Tensor  # (G, K) code-side potential
    plan: torch.Tensor  # (G, N, K)
    iterations: int
    marginal_error: float | None  # max |P^T 1 - b|_1 over groups at the end, if it was checked


@torch.no_grad()
def sinkhorn_log(
    cost: torch.Tensor,
    log_b: torch.Tensor,
    eps: float | torch.Tensor,
    *,
    max_iter: int = 100,
    tol: float = 1e-4,
    check_every: int = 10,
    init_g: torch.Tensor | None = None,
) -> SinkhornResult:
    """Log-domain Sinkhorn between uniform weights on N latents and weights exp(log_b) on K codes.

    Args:
        cost: (G, N, K). log_b: (G, K) log code weights. eps: absolute entropic regularisation.
        max_iter: iteration cap. tol: stop when the code-side marginal error is below it (0 disables the
        check, and with it every host synchronisation). init_g: warm start for the code-side potential.
    """
    g_, n, k = cost.shape
    log_a = -math.log(n)
    g = torch.zeros(g_, k, device=cost.device, dtype=cost.dtype) if init_g is None else init_g.clone()
    neg_c = -cost / eps  # (G, N, K)
    err = None
    it = 0
    for it in range(1, max_iter + 1):
        # f_i = -eps log sum_k b_k exp((g_k - C_ik)/eps)
        f = -eps * torch.logsumexp(neg_c + (g / eps + log_b).unsqueeze(1), dim=2)
        # g_k = -eps log sum_i a_i exp((f_i - C_ik)/eps)
        log_col = torch.logsumexp(neg_c + (f / eps).unsqueeze(2), dim=1) + log_a  # (G, K)
        g = -eps * log_col
        if tol > 0 and (it % check_every == 0 or it == max_iter):
            # After the g-update the code marginal is exact; measure the latent marginal instead.
            log_p = neg_c + (f / eps).unsqueeze(2) + (g / eps + log_b).unsqueeze(1) + log_a
            row = torch.logsumexp(log_p, dim=2).exp()  # (G, N), target 1/N
            err = float((row - 1.0 / n).abs().sum(-1).max())
            if err < tol:
                break
    log_p = neg_c + (f / eps).unsqueeze(2) + (g / eps + log_b).unsqueeze(1) + log_a
    return SinkhornResult(f=f, g=g, plan=log_p.exp(), iterations=it, marginal_error=err)


def entropic_ot_value(cost: torch.Tensor, log_b: torch.Tensor, eps: float, **kw) -> torch.Tensor:
    """The entropic OT value W_eps = <P,C> + eps KL(P || a x b) per group, (G,), equal at the optimum to
    the dual <f, a> + <g, b> (Genevay et al. 2016, the paper's Eq. (apd:entropic_dual_form))."""
    res = sinkhorn_log(cost, log_b, eps, **kw)
    return res.f.mean(-1) + (res.g * log_b.exp()).sum(-1)


#: The smallest mean cost eps is relative to (a constant batch has zero cost): the sinkhorn and dual solvers' floor.
EPS_FLOOR = 1e-12


class SinkhornSolver(Solver):
    """Entropic OT per group, batched; the plan's transport cost is the WS estimate (see ``plan_value``)."""

    def __init__(self, groups: int, num_codes: int, shared: bool, global_batch: bool = False, *,
                 epsilon: float = 0.05, iterations: int = 50, tol: float = 1e-3, warm_start: bool = True):
        super().__init__(groups, num_codes, shared, global_batch)
        self.epsilon, self.iterations, self.tol, self.warm_start = epsilon, iterations, tol, warm_start
        self.register_buffer("potential", torch.zeros(groups, num_codes))  # code-side g, absolute cost units

    def forward(self, flat, codebook, log_pi, *, update) -> Transport:
        """As ``Solver.forward``: the entropic plan per group, warm-started from the previous step's potential
        (kept when ``update``)."""
        x = positions_as_groups(flat, self.shared)  # (G, N, D)
        with torch.no_grad():
            cost = squared_distances(x.detach(), codebook.detach())
            # floored: latents all on one code (a constant batch) have zero cost, and eps 0 would make the plan NaN
            eps = self.epsilon * cost.mean().clamp_min(EPS_FLOOR)
            init = self.potential if self.warm_start else None
            res = sinkhorn_log(cost, log_pi, eps, max_iter=self.iterations, tol=self.tol, init_g=init)
            plan, v = res.plan, res.g - res.g.mean(-1, keepdim=True)
            if update and self.warm_start:  # the ranks' mean under DDP: every rank warm-starts alike
                g = self.all_reduce_mean(res.g.clone())
                self.potential.copy_(torch.where(torch.isfinite(g).all(), g, self.potential))  # never a NaN state
        return Transport(value=plan_value(plan, v, x, codebook, log_pi), plan=plan)

    @torch.no_grad()
    def reset(self) -> None:
        """Forget the warm start's potential (the codebook was re-initialised)."""
        self.potential.zero_()
