"""VQ-WAE's codebook update by the transport plan (``codebook_update="transport"``) and the split of dead transport
cells (``split_dead``): the part of ``WassersteinQuantizer`` that moves the codewords, kept beside it as a mixin.

Both read the quantizer's buffers (``embedding``, ``transport_mass``, ``transport_sum``, ``transport_steps``), its
config and its solver, and run on the device without a host read; under DDP every rank makes the same move.
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from vqwae.fused import fused_update
from vqwae.ot.histogram import code_histogram

#: split_dead: the most pairs of cells split in one step (K / 2 below K = 512; beyond, dead codes queue a few steps).
SPLITS_PER_STEP = 256


class TransportCodebook:
    """Mixin of ``WassersteinQuantizer``: ``_transport_update`` (the Lloyd step with the transport plan) and
    ``_split_dead_cells`` (the LBG split of the cells the transport stopped reaching)."""

    @fused_update
    def _transport_update(self, x: torch.Tensor, assigned: torch.Tensor | None, counts: torch.Tensor | None,
                          keep: torch.Tensor | None, plan: torch.Tensor | None,
                          nearest: torch.Tensor | None = None) -> None:
        """codebook_update="transport": move every code to the (EMA) barycentre of the latents transported to it.

        For a fixed plan P, argmin_C sum_ik P_ik ||z_i - c_k||^2 is c_k = sum_i P_ik z_i / sum_i P_ik: this is the
        exact minimisation of the WS term over the codebook (a Lloyd step with the transport plan in place of
        the nearest-code assignment), smoothed over steps by an EMA of the plan's counts and sums, as VQ-VAE's
        EMA variant does with nearest codes. Because the plan sends every code its share pi_k of each position's
        latents, no code is left without data (VQ-VAE's EMA starves codes no latent is nearest to).

        The fields of a ``Transport`` (tensors, so that the update can be replayed as a CUDA graph): either the
        assignment (N, G) of the latents x (N, G, D) under the transport map with its counts (G, K) (semidiscrete;
        ``keep`` (N, G) the real latents or None), or the plan (G, N, K) between x (G, N, D) and the codebook (rows
        sum to 1/N). ``nearest`` (N, G): the latents' nearest codes, which split_unused tracks (semidiscrete).
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
        if self.config.splits_unused_cells:  # semidiscrete: the nearest codes come with the assignment
            self._track_nearest(x, assigned, nearest, keep, decay)
            self._split_unused_cells(live)
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
        ratio = self._share_over_pi(self.transport_mass)
        # the i-th least served code pairs with the i-th most
        lo = torch.topk(ratio, self._pairs_per_step, largest=False).indices
        hi = torch.topk(ratio, self._pairs_per_step).indices
        split = (ratio[lo] < self.config.split_dead) & (ratio[hi] > 1)  # (m,)
        self._split_pairs(lo, hi, self._when_ready(split, live))

    @property
    def _pairs_per_step(self) -> int:
        """At most SPLITS_PER_STEP pairs a step (the rest wait for the next steps), so that the splits' gathers stay
        small at large K."""
        return min(self.num_codes // 2, SPLITS_PER_STEP)

    def _share_over_pi(self, mass: torch.Tensor) -> torch.Tensor:
        """Each code's share of ``mass`` (K,) over its share of pi: 1 where a code receives exactly its share."""
        tiny = torch.finfo(mass.dtype).tiny
        return mass / mass.sum().clamp_min(tiny) / self.pi.mean(0).clamp_min(tiny)

    def _when_ready(self, split: torch.Tensor, live: torch.Tensor | None) -> torch.Tensor:
        """``split`` where the EMAs have filled since the codebook was drawn and (under DDP or a mask, ``live``) some
        rank saw a real latent this step: a step without latents splits nothing."""
        split = split & (self.transport_steps > int(1 / (1 - self.config.codebook_decay)))
        return split if live is None else split & live

    @torch.no_grad()
    def _split_pairs(self, lo: torch.Tensor, hi: torch.Tensor, split: torch.Tensor) -> None:
        """Move code lo[i] next to hi[i] where split[i]: the two share hi's EMAs (and split_unused's nearest-code EMAs)
        and its potential, displaced by +-0.1 of a cell's radius, so that hi's cell is halved along the bisector."""
        tiny = torch.finfo(self.transport_mass.dtype).tiny
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
        if self.config.splits_unused_cells:
            for stat in (self.nearest_mass, self.nearest_error):
                half = stat[hi] / 2
                stat[lo] = torch.where(split, half, stat[lo])
                stat[hi] = torch.where(split, half, stat[hi])

    def _track_nearest(self, x: torch.Tensor, assigned: torch.Tensor, nearest: torch.Tensor,
                       keep: torch.Tensor | None, decay: torch.Tensor | float) -> None:
        """split_unused's statistics: EMAs of each code's nearest-code count and of the squared error of the latents
        it is the nearest code of (x (N*G, D) with a mask's padding zeroed, as ``_transport_update`` holds it), and
        for each code the most used nearest code of the latents transported to it this step (identical on every DDP
        rank; kept from earlier steps for a code that received none)."""
        idx, to = nearest.reshape(-1), assigned.reshape(-1)
        # for each code, the most used (by the nearest-code EMA) of its transported latents' nearest codes: a crowd's
        # codes all find the crowd's one used code (two scatters: the largest usage, then a code that has it)
        usage = self.nearest_mass[idx] if keep is None else torch.where(keep.reshape(-1), self.nearest_mass[idx], -1.0)
        best = torch.full_like(self.nearest_mass, -1.0).scatter_reduce_(0, to, usage, "amax")
        host = torch.full_like(self.nearest_of, -1).scatter_reduce_(
            0, to, torch.where((usage == best[to]) & (usage >= 0), idx, -1), "amax")
        err = (x - self.embedding[idx]).pow(2).sum(-1)  # x's padding is zeroed, not its error: weighted below
        if keep is not None:
            err = err * keep.reshape(-1).to(x.dtype)
        counts = code_histogram(idx, self.num_codes, x.dtype, keep=keep)
        errors = torch.zeros_like(counts).index_add_(0, idx, err)
        if self.solver.per_rank_batches():  # every rank makes the same moves (and the same change to pi)
            packed = torch.stack([counts, errors])
            dist.all_reduce(packed)
            counts, errors = packed.unbind()
            dist.all_reduce(host, op=dist.ReduceOp.MAX)
        self.nearest_of.copy_(torch.where(host >= 0, host, self.nearest_of))
        self.nearest_mass.mul_(decay).add_(counts * (1 - decay))
        self.nearest_error.mul_(decay).add_(errors * (1 - decay))

    @torch.no_grad()
    def _split_unused_cells(self, live: torch.Tensor | None = None) -> None:
        """split_unused: a code that the decoder receives for less than split_unused x pi_k of the latents (the EMA of
        its nearest-code share) moves to split the nearest-code cell with the largest summed quantization error
        among those above the mean (the LBG split on the distortion the decoder sees). A crowd of identical latents
        (the blank patches of a sequence) holds pi's share of codes that all transport it at no cost, but only one
        of them is anybody's nearest: W cannot move the others out (BENCHMARKS.md 28, 32); this does, and a learned
        pi then takes the mass of the codes that left from the crowd's remaining ones."""
        ratio = self._share_over_pi(self.nearest_mass)
        lo = torch.topk(ratio, self._pairs_per_step, largest=False).indices
        hi = torch.topk(self.nearest_error, self._pairs_per_step).indices
        heavy = self.nearest_error[hi] > self.nearest_error.mean()
        split = self._when_ready((ratio[lo] < self.config.split_unused) & heavy, live)
        self._move_pi(lo, hi, split)
        self._split_pairs(lo, hi, split)

    def _move_pi(self, lo: torch.Tensor, hi: torch.Tensor, split: torch.Tensor) -> None:
        """The learned pi of split_unused's moves: a moved code's mass goes to the code its transported latents are
        nearest to (a crowd's one used code, which thus takes the crowd's mass at once instead of through the
        optimiser's small steps on beta), and the moved code and its partner share the partner's."""
        beta = self.beta  # (G, K), pi = softmax(beta)
        top = beta.max(-1, keepdim=True).values
        w = (beta - top).exp()
        target = self.nearest_of[lo]
        target = torch.where(target >= 0, target, lo)
        w.index_add_(1, target, torch.where(split, w[:, lo], 0.0))
        half = w[:, hi] / 2
        w[:, lo] = torch.where(split, half, w[:, lo])
        w[:, hi] = torch.where(split, half, w[:, hi])
        beta.copy_(w.clamp_min(torch.finfo(w.dtype).tiny).log() + top)
