"""The paper's entropic semi-dual with a Kantorovich potential network (Sec. 2.2, Eq. (6); App. B).

For each group m (a latent position), with latents z_i (weights 1/N), codewords c_k (weights pi_k):

    S^m(phi) = sum_k pi_k phi(c_k) - eps/N sum_i log sum_k pi_k exp((phi(c_k) - ||z_i - c_k||^2) / eps)

Any phi gives a lower bound of the entropic OT value W_eps (weak duality); the maximum equals it. phi^m is
a small MLP on the codeword (D -> hidden -> 1), one per group, all groups batched in one einsum.
:class:`DualSolver` holds the potentials and, per training step, ascends them, then evaluates S as the WS term,
as the authors' code runs it: eps absolute (0.01 on CIFAR-10, 0.1 on MNIST: ``catalog.authors_dual_epsilon``) and
phi's values held in the outer loss (their ``.detach()``). Where their dual form (not a report row) departs from this
one, each left as the paper writes it: they solve one global OT over every position (here one per position, Eq. 7's
sum over m), divide its value by the batch (here the mean over latents), add the transposed problem (a potential on
the latents), and train phi with Adam(amsgrad=True, weight_decay=0.1) (here plain Adam at ``phi_lr``).
"""
from __future__ import annotations

import math

import torch
from torch import nn

from vqwae.ot.catalog import authors_dual_epsilon
from vqwae.ot.cost import squared_distances
from vqwae.ot.transport import Solver, Transport, positions_as_groups


def semi_dual(cost: torch.Tensor, log_pi: torch.Tensor, phi: torch.Tensor, eps: float | torch.Tensor) -> torch.Tensor:
    """S per group (G,) for cost (G, N, K), log_pi (G, K) and potential values phi (G, K)."""
    inner = torch.logsumexp(log_pi.unsqueeze(1) + (phi.unsqueeze(1) - cost) / eps, dim=2)  # (G, N)
    return (log_pi.exp() * phi).sum(-1) - eps * inner.mean(-1)


class KantorovichPotential(nn.Module):
    """G independent MLPs phi^g: R^D -> R (D -> hidden -> 1, ReLU), evaluated on all K codewords at once.

    Its parameters are trained only by its own inner ascent (``ascend``), never by the model's optimiser:
    they are registered with requires_grad=False and switched on only inside the inner loop. The inner Adam
    is written out here (a few lines) so that its moments live in registered buffers: state_dict round-trips
    and a resumed run continues bit-exactly.
    """

    def __init__(self, groups: int, dim: int, hidden: int = 64, lr: float = 1e-3, betas=(0.9, 0.999)):
        super().__init__()
        bound1, bound2 = 1.0 / math.sqrt(dim), 1.0 / math.sqrt(hidden)
        self.w1 = nn.Parameter(torch.empty(groups, dim, hidden).uniform_(-bound1, bound1), requires_grad=False)
        self.b1 = nn.Parameter(torch.zeros(groups, hidden), requires_grad=False)
        self.w2 = nn.Parameter(torch.empty(groups, hidden).uniform_(-bound2, bound2), requires_grad=False)
        self.b2 = nn.Parameter(torch.zeros(groups), requires_grad=False)
        self.lr, self.betas, self.adam_eps = lr, betas, 1e-8
        for name, p in self._potential_params():
            self.register_buffer(f"exp_avg_{name}", torch.zeros_like(p))
            self.register_buffer(f"exp_avg_sq_{name}", torch.zeros_like(p))
        self.register_buffer("adam_step", torch.zeros((), dtype=torch.long))

    def _potential_params(self):
        return [("w1", self.w1), ("b1", self.b1), ("w2", self.w2), ("b2", self.b2)]

    def forward(self, codebook: torch.Tensor) -> torch.Tensor:
        """phi^g(c_k) for codebook (K, D) -> (G, K)."""
        h = torch.relu(torch.einsum("kd,gdh->gkh", codebook, self.w1) + self.b1.unsqueeze(1))  # (G, K, H)
        return torch.einsum("gkh,gh->gk", h, self.w2) + self.b2.unsqueeze(1)

    @torch.no_grad()
    def ascend(self, cost: torch.Tensor, log_pi: torch.Tensor, codebook: torch.Tensor, eps, iterations: int,
               reduce=None) -> None:
        """``iterations`` Adam steps maximising sum_g S^g with the cost, pi and codebook held fixed. ``reduce``
        averages the gradients over DDP ranks (each has its own batch), so every rank keeps the same network."""
        cost, log_pi, codebook = cost.detach(), log_pi.detach(), codebook.detach()
        params = self._potential_params()
        b1, b2 = self.betas
        for _ in range(iterations):
            with torch.enable_grad():
                for _, p in params:
                    p.requires_grad_(True)
                objective = semi_dual(cost, log_pi, self(codebook), eps).sum()
                grads = torch.autograd.grad(objective, [p for _, p in params])
            for _, p in params:
                p.requires_grad_(False)
            if reduce is not None:  # one all-reduce of all the gradients, packed
                packed = reduce(torch.cat([g.reshape(-1) for g in grads]))
                grads = [t.view_as(g) for t, g in zip(packed.split([g.numel() for g in grads]), grads)]
            finite = torch.stack([torch.isfinite(g).all() for g in grads]).all()  # on the device: no host read
            grads = [torch.where(finite, g, torch.zeros_like(g)) for g in grads]  # a NaN step moves nothing
            self.adam_step += 1
            t = self.adam_step.double()  # Adam's bias correction, on the device (no host read of the step count)
            step = (self.lr * torch.sqrt(1 - b2**t) / (1 - b1**t)).to(self.w1.dtype)
            for (name, p), grad in zip(params, grads):
                m, v = getattr(self, f"exp_avg_{name}"), getattr(self, f"exp_avg_sq_{name}")
                m.mul_(b1).add_(grad, alpha=1 - b1)
                v.mul_(b2).addcmul_(grad, grad, value=1 - b2)
                p.addcdiv_(m * step, v.sqrt().add_(self.adam_eps))  # ascent: + lr * m / sqrt(v), bias-corrected


class DualSolver(Solver):
    """The paper's semi-dual (Eq. (6)) with one Kantorovich potential network per group."""

    def __init__(self, groups: int, num_codes: int, shared: bool, global_batch: bool = False, *, dim: int,
                 epsilon: float = authors_dual_epsilon(None), iterations: int = 5, hidden: int = 64,
                 lr: float = 1e-3):
        super().__init__(groups, num_codes, shared, global_batch)
        self.epsilon, self.iterations = epsilon, iterations
        self.phi = KantorovichPotential(groups, dim, hidden, lr)

    def forward(self, flat, codebook, log_pi, *, update) -> Transport:
        """S at the ascended potential, as the authors run it: eps absolute (their 0.01 on CIFAR-10, 0.1 on MNIST),
        and phi's values held (detached) in the outer loss, so the codebook moves through the cost only, pi through
        pi_k phi(c_k) and the logsumexp, the latents through the cost."""
        x = positions_as_groups(flat, self.shared)  # (G, N, D)
        cost = squared_distances(x, codebook)  # (G, N, K), differentiable
        if update:
            self.phi.ascend(cost, log_pi, codebook, self.epsilon, self.iterations, reduce=self.all_reduce_mean)
        return Transport(value=semi_dual(cost, log_pi, self.phi(codebook).detach(), self.epsilon).sum())
