"""What every OT solver shares: the ``Transport`` it returns, the grouping of latents, the base class.

The WS term of VQ-WAE (the paper's Eq. (7)) is, for each group g (a latent position m; or one group of all
positions when pi is shared), the Wasserstein distance between the group's N latents (weights 1/N) and the
codebook weighted by pi^g. A solver is a small module holding its own state (a warm-started potential, a
potential network) and is called once per training step:

    transport = solver(flat, codebook, log_pi, update=model.training)
    transport.value          # sum_g W^g estimate, differentiable w.r.t. latents, codebook and log_pi
    transport.plan / .assigned   # where the latents go
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn

from vqwae.distributed import is_distributed
from vqwae.ot.cost import transport_cost


@dataclass
class Transport:
    """One step's optimal transport between the latents and the weighted codebook."""

    value: torch.Tensor  # () sum over groups of the W estimate, differentiable
    plan: torch.Tensor | None = None  # (G, N, K) for the latents as (G, N, D) groups; rows sum to 1/N (exact, sinkhorn)
    assigned: torch.Tensor | None = None  # (N, G) each latent's code under the transport map (semidiscrete)


def positions_as_groups(flat: torch.Tensor, shared: bool) -> torch.Tensor:
    """(B, M, D) -> (G, N, D): the B latents of each position as a group, or one group of B*M latents."""
    b, m, d = flat.shape
    return flat.reshape(1, b * m, d) if shared else flat.transpose(0, 1)


def latents_by_group(flat: torch.Tensor, shared: bool) -> torch.Tensor:
    """(B, M, D) -> (N, G, D) without copying: rows of a group are its latents."""
    b, m, d = flat.shape
    return flat.reshape(b * m, 1, d) if shared else flat


def keep_by_group(keep: torch.Tensor | None, shared: bool) -> torch.Tensor | None:
    """A (B, M) mask of the real latents in the layout of :func:`latents_by_group`: (N, G)."""
    return None if keep is None else keep.reshape(-1, 1) if shared else keep


def plan_value(plan: torch.Tensor, potential: torch.Tensor, x: torch.Tensor, codebook: torch.Tensor,
               log_pi: torch.Tensor) -> torch.Tensor:
    """<P, C> for a fixed optimal plan P with the gradients of W: P to the latents and the codebook (the envelope
    theorem, dW/dC = P) and the centred code potential v to pi (value unchanged: v.pi - sg(v.pi))."""
    pi = log_pi.exp()
    potential_term = (pi * potential).sum()
    return transport_cost(plan, x, codebook) + potential_term - potential_term.detach()


class Solver(nn.Module):
    """Base class of the OT solvers; subclasses implement ``forward`` and, if they keep state, ``reset``."""

    def __init__(self, groups: int, num_codes: int, shared: bool, global_batch: bool = False):
        super().__init__()
        self.groups, self.num_codes, self.shared, self.global_batch = groups, num_codes, shared, global_batch

    def per_rank_batches(self) -> bool:
        """Under DDP without a global batch each rank sees its own latents: statistics are all-reduced."""
        return is_distributed() and not self.global_batch

    def all_reduce_mean(self, t: torch.Tensor) -> torch.Tensor:
        """``t`` averaged over the ranks when each has its own batch (so every rank keeps the same state)."""
        if self.per_rank_batches():
            dist.all_reduce(t)
            t /= dist.get_world_size()
        return t

    def forward(self, flat: torch.Tensor, codebook: torch.Tensor, log_pi: torch.Tensor, *, update: bool) -> Transport:
        """Latents flat (B, M, D), codebook (K, D), log_pi (G, K); ``update``: take this step's ascent on the
        solver's state (training)."""
        raise NotImplementedError

    @torch.no_grad()
    def reset(self) -> None:
        """Forget the state (the codebook was re-initialised)."""
