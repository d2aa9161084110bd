"""VQ-WAE's codebook update by the transport plan (``codebook_update="transport"``) and the split of dead transport
cells (``split_dead``): the part of ``WassersteinQuantizer`` that moves the codewords, kept beside it as a mixin.

Both read the quantizer's buffers (``embedding``, ``transport_mass``, ``transport_sum``, ``transport_steps``), its
config and its solver, and run on the device without a host read; under DDP every rank makes the same move.
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from vqwae.fused import fused_update

#: split_dead: the most pairs of cells split in one step (K / 2 below K = 512; beyond, dead codes queue a few steps).
SPLITS_PER_STEP = 256


class TransportCodebook:
    """Mixin of ``WassersteinQuantizer``: ``_transport_update`` (the Lloyd step with the transport plan) and
    ``_split_dead_cells`` (the LBG split of the cells the transport stopped reaching)."""

    @fused_update
    def _transport_update(self, x: torch.Tensor, assigned: torch.Tensor | None, counts: torch.Tensor | None,
                          keep: torch.Tensor | None, plan: torch.Tensor | None) -> None:
        """codebook_update="transport": move every code to the (EMA) barycentre of the latents transported to it.

        For a fixed plan P, argmin_C sum_ik P_ik ||z_i - c_k||^2 is c_k = sum_i P_ik z_i / sum_i P_ik: this is the
        exact minimisation of the WS term over the codebook (a Lloyd step with the transport plan in place of
        the nearest-code assignment), smoothed over steps by an EMA of the plan's counts and sums, as VQ-VAE's
        EMA variant does with nearest codes. Because the plan sends every code its share pi_k of each position's
        latents, no code is left without data (VQ-VAE's EMA starves codes no latent is nearest to).

        The fields of a ``Transport`` (tensors, so that the update can be replayed as a CUDA graph): either the
        assignment (N, G) of the latents x (N, G, D) under the transport map with its counts (G, K) (semidiscrete;
        ``keep`` (N, G) the real latents or None), or the plan (G, N, K) between x (G, N, D) and the codebook (rows
        sum to 1/N).
        """
        k, decay = self.num_codes, self.config.codebook_decay
        live = None  # under DDP or a mask: whether any real latent was seen (a tensor: no host read)
        if plan is None:
            x = x.reshape(-1, self.dim)
            mass = counts.sum(0).to(x.dtype)  # latents per code, over the groups (a mask's real ones)
            if keep is not None:  # the padding weighted 0, not indexed out (which would read the host)
                x = x * keep.reshape(-1, 1).to(x.dtype)
            sums = torch.zeros(k, self.dim, dtype=x.dtype, device=x.device).index_add_(0, assigned.reshape(-1), x)
        else:
            n = plan.shape[1]  # latents per group: counts in units of latents, as the assignment's
            mass = plan.sum((0, 1)) * n
            sums = torch.einsum("gnk,gnd->kd", plan.to(x.dtype), x) * n
        gated = keep is not None  # a masked batch may hold only padding
        if self.solver.per_rank_batches():
            packed = torch.cat([mass[:, None], sums], dim=1)  # one all-reduce: every rank keeps the same codebook
            dist.all_reduce(packed)
            mass, sums = packed[:, 0], packed[:, 1:]
            gated = True  # a rank may hold only padding
        if gated:  # when no real latent was seen anywhere, nothing may move (told on the device: no host read)
            live = mass.sum() > 0
            decay = torch.where(live, decay, 1.0)
            self.transport_mass.mul_(decay).add_(mass * (1 - decay))
            self.transport_sum.mul_(decay).add_(sums * (1 - decay))
        else:  # a batch without latents never gets here (_padding_only, or a mask above)
            self.transport_mass.mul_(decay).add_(mass, alpha=1 - decay)
            self.transport_sum.mul_(decay).add_(sums, alpha=1 - decay)
        self.transport_steps += 1 if live is None else live.long()
        if self.config.splits_dead_cells:
            self._split_dead_cells(live)
        seen = self.transport_mass > 0  # a code the plan never reached keeps its place
        centroid = self.transport_sum / self.transport_mass.clamp_min(torch.finfo(x.dtype).tiny).unsqueeze(1)
        self.embedding.copy_(torch.where(seen.unsqueeze(1), centroid, self.embedding))

    @torch.no_grad()
    def _split_dead_cells(self, live: torch.Tensor | None = None) -> None:
        """split_dead: re-seed the codes the transport has stopped reaching by splitting the most overloaded cells.

        The transport map gives every code its share pi_k only at the optimum of the potential g, which one ascent
        step per batch reaches slowly, and not at all for a code left outside the latents' cloud (the encoder
        shrinks or moves its latents faster than the codebook's EMA follows): to win one latent such a code needs
        a g_k far above the distances the ascent crosses in thousands of steps. Each step, the codes whose
        transported share (the EMA of the plan's counts, relative to their total) is below split_dead x pi_k are
        paired with as many of the most overloaded codes (share / pi_k largest, above 1): the dead code moves next
        to its partner, the two split the partner's EMA mass and sum, are displaced by +-0.1 of the cell's
        radius, and share its potential, so the power cell is halved at once along the bisector (the LBG
        splitting step of vector quantisation, applied to the transport cells). Dead codes are found relative to
        pi, so a fixed, non-uniform pi keeps its control. On device, no host read; under DDP every rank holds the
        same all-reduced statistics and makes the same choice."""
        k, tiny = self.num_codes, torch.finfo(self.transport_mass.dtype).tiny
        share = self.transport_mass / self.transport_mass.sum().clamp_min(tiny)
        ratio = share / self.pi.mean(0).clamp_min(tiny)  # 1: the code receives exactly its share
        # the i-th least served code pairs with the i-th most; at most SPLITS_PER_STEP pairs a step (the rest wait
        # for the next steps), so that the gathers below stay small at large K
        m = min(k // 2, SPLITS_PER_STEP)
        lo = torch.topk(ratio, m, largest=False).indices
        hi = torch.topk(ratio, m).indices
        warm = self.transport_steps > int(1 / (1 - self.config.codebook_decay))  # the EMAs have filled
        split = (ratio[lo] < self.config.split_dead) & (ratio[hi] > 1) & warm  # (m,)
        if live is not None:  # under DDP, a step without latents on any rank splits nothing
            split &= live
        c = self.embedding
        away = c[lo] - c[hi]
        # 0.1 of a cell's radius, sqrt(scale) = sqrt(D) x the per-dimension spread (scale: the solver's EMA of the
        # quantization error), towards the dead code's old place
        radius = (self.solver.scale / self.dim).sqrt()
        u = 0.1 * radius * away / away.norm(dim=1, keepdim=True).clamp_min(tiny) * self.dim ** 0.5
        half = self.transport_mass[hi] / 2
        self.transport_mass[lo] = torch.where(split, half, self.transport_mass[lo])
        self.transport_mass[hi] = torch.where(split, half, self.transport_mass[hi])
        self.transport_sum[lo] = torch.where(split[:, None], (c[hi] + u) * half[:, None], self.transport_sum[lo])
        self.transport_sum[hi] = torch.where(split[:, None], (c[hi] - u) * half[:, None], self.transport_sum[hi])
        potential = self.solver.potential  # (G, K)
        potential[:, lo] = torch.where(split, potential[:, hi], potential[:, lo])
