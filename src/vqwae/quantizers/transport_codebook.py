"""The product quantizer's codebook update: the codewords move to the barycentres of the latents the transport map
sends them (a Lloyd step with the transport plan), codes the transport stops reaching are re-seeded by splitting the
most overloaded cells (``split_dead``; each code judged by its own record since it was last placed), and, with
``split_unused``, codes no latent is nearest to split the cells with the largest error.

``TransportCodebook`` owns the EMAs this needs and takes everything else (the codebook, the solver's potential and
cost scale, pi) as arguments. It runs on the device without a host read; under DDP every rank makes the same move.
"""
from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from vqwae.ot.histogram import code_histogram

#: The most pairs of cells split in one step (K / 2 below K = 512; beyond, dead codes queue a few steps).
SPLITS_PER_STEP = 256
#: A code whose transported share falls below this fraction of pi_k is dead and is re-seeded
#: (docs/lab/09-16.md#host-zoo).
SPLIT_DEAD = 0.1
#: A code is judged (dead or not) once its own record covers this share of an EMA horizon since it was placed (the
#: record's EMA then holds 1 - 1/e of its steady value: about 1 / (1 - decay) steps, 100 at the default 0.99).
JUDGED_FROM = 1 - 1 / 2.718281828459045


class TransportCodebook(nn.Module):
    """EMAs of the transport map's counts and sums per code (which place the codes), and of each code's nearest-code
    count and error (which ``split_unused`` reads). Every buffer exists whatever the options (shapes K and D)."""

    def __init__(self, num_codes: int, dim: int):
        super().__init__()
        self.num_codes, self.dim = num_codes, dim
        # Zero-initialised: their ratio, the codeword, needs no debiasing. `steps`: updates since the codebook was
        # drawn (the splits wait for the EMAs to fill).
        self.register_buffer("mass", torch.zeros(num_codes))
        self.register_buffer("sum", torch.zeros(num_codes, dim))
        self.register_buffer("steps", torch.zeros((), dtype=torch.long))
        # split_unused: EMAs of each code's nearest-code count and of its nearest-code cell's squared error, and the
        # most used nearest code of the latents transported to each code
        self.register_buffer("nearest_mass", torch.zeros(num_codes))
        self.register_buffer("nearest_error", torch.zeros(num_codes))
        self.register_buffer("nearest_of", torch.full((num_codes,), -1, dtype=torch.long))
        # The dead-code test's record (issue #81): EMAs, at the codebook's decay, of the latents the map sent each
        # code and of those its share pi_k would have sent, both zeroed where a split places a code, so that their
        # ratio is the code's own record since then, not the EMA mass the split handed it, which hid dead codes for
        # ~200 steps at K = 16,384 (docs/lab/48-.md#collapse-cause)
        self.register_buffer("earned", torch.zeros(num_codes))
        self.register_buffer("expected", torch.zeros(num_codes))
        # the codes moved by a split since construction (dead and unused alike): a diagnostic, not saved
        self.register_buffer("splits", torch.zeros((), dtype=torch.long), persistent=False)

    @torch.no_grad()
    def reset(self) -> None:
        """Forget every statistic (the codebook was drawn anew)."""
        for t in (self.mass, self.sum, self.steps, self.nearest_mass, self.nearest_error, self.earned, self.expected):
            t.zero_()
        self.nearest_of.fill_(-1)

    @torch.no_grad()
    def update(self, codebook: torch.Tensor, x: torch.Tensor, assigned: torch.Tensor, counts: torch.Tensor,
               keep: torch.Tensor | None, nearest: torch.Tensor, *, decay: float, potential: torch.Tensor,
               scale: torch.Tensor, pi: torch.Tensor, beta: torch.Tensor, split_unused: float,
               all_reduce: bool) -> None:
        """Move every code of ``codebook`` (K, D), in place, to the EMA barycentre of the latents transported to it.

        For a fixed plan P, argmin_C sum_ik P_ik ||z_i - c_k||^2 is c_k = sum_i P_ik z_i / sum_i P_ik: the exact
        minimisation of the WS term over the codebook, smoothed over steps by an EMA of the map's counts and sums, as
        VQ-VAE's EMA variant does with nearest codes. Because the map sends every code its share pi_k of the
        latents, no code is left without data (VQ-VAE's EMA starves codes no latent is nearest to).

        x (N, G, D) the latents, ``assigned`` and ``nearest`` (N, G) their codes under the transport map and nearest,
        ``counts`` (G, K) the map's latents per code, ``keep`` (N, G) the real latents or None. ``potential`` (G, K)
        and ``scale`` are the solver's (a split shares a cell's potential), ``pi`` (G, K) the weights, ``beta`` pi's
        logits (split_unused moves their mass, in place), ``all_reduce``: sum the statistics over DDP ranks."""
        k, ready_after = self.num_codes, int(1 / (1 - decay))  # split_unused waits for its EMAs to fill
        live = None  # under DDP or a mask: whether any real latent was seen (a tensor: no host read)
        x = x.reshape(-1, self.dim)
        mass = counts.sum(0).to(x.dtype)  # latents per code, over the groups (a mask's real ones)
        if keep is not None:  # the padding weighted 0, not indexed out (which would read the host)
            x = x * keep.reshape(-1, 1).to(x.dtype)
        sums = torch.zeros(k, self.dim, dtype=x.dtype, device=x.device).index_add_(0, assigned.reshape(-1), x)
        gated = keep is not None  # a masked batch may hold only padding
        if all_reduce:
            packed = torch.cat([mass[:, None], sums], dim=1)  # one all-reduce: every rank keeps the same codebook
            dist.all_reduce(packed)
            mass, sums = packed[:, 0], packed[:, 1:]
            gated = True  # a rank may hold only padding
        if gated:  # when no real latent was seen anywhere, nothing may move (told on the device: no host read)
            live = mass.sum() > 0
            decay = torch.where(live, decay, 1.0)
            self.mass.mul_(decay).add_(mass * (1 - decay))
            self.sum.mul_(decay).add_(sums * (1 - decay))
        else:
            self.mass.mul_(decay).add_(mass, alpha=1 - decay)
            self.sum.mul_(decay).add_(sums, alpha=1 - decay)
        due = mass.sum() * pi.mean(0)  # the latents each code's share would have brought this step
        self.earned.mul_(decay).add_(mass * (1 - decay))
        self.expected.mul_(decay).add_(due * (1 - decay))
        self.steps += 1 if live is None else live.long()
        self._split_dead(codebook, potential, scale, pi, due, bool(split_unused))
        if split_unused:
            ready = self.steps > ready_after
            if live is not None:  # a step without real latents splits nothing
                ready = ready & live
            self._track_nearest(codebook, x, assigned, nearest, keep, decay, all_reduce)
            self._split_unused(codebook, potential, scale, pi, beta, split_unused, ready)
        seen = self.mass > 0  # a code the map never reached keeps its place
        centroid = self.sum / self.mass.clamp_min(torch.finfo(x.dtype).tiny).unsqueeze(1)
        codebook.copy_(torch.where(seen.unsqueeze(1), centroid, codebook))

    def served(self, due: torch.Tensor) -> torch.Tensor:
        """Each code's own record since it was placed: the latents the map sent it over those its share would have
        (``earned / expected``), where ``due`` (K,) holds the latents each code's share brings in one step; inf for a
        code not yet judged (less than JUDGED_FROM of an EMA horizon since it was placed, or no share due: a step
        without real latents judges nothing). Below SPLIT_DEAD the code is dead."""
        judged = (self.expected >= JUDGED_FROM * due) & (due > 0)
        return torch.where(judged, self.earned / self.expected.clamp_min(torch.finfo(self.expected.dtype).tiny),
                           torch.inf)

    def _split_dead(self, codebook, potential, scale, pi, due, tracked: bool) -> None:
        """Re-seed the codes the transport has stopped reaching by splitting the most overloaded cells.

        The transport map gives every code its share pi_k only at the optimum of the potential g, which one ascent
        step per batch reaches slowly, and not at all for a code left outside the latents' cloud (the encoder
        shrinks or moves its latents faster than the codebook's EMA follows): to win one latent such a code needs
        a g_k far above the distances the ascent crosses in thousands of steps. Each step, the codes whose
        transported share is below SPLIT_DEAD x pi_k are paired with as many of the most overloaded codes (share /
        pi_k largest, above 1): the dead code moves next to its partner, the two split the partner's EMAs and share
        its potential, so the power cell is halved at once along the bisector (the LBG splitting step of vector
        quantisation, applied to the transport cells). Dead codes are found relative to pi, so a fixed, non-uniform
        pi keeps its control.

        A code is judged by its own record since it was placed (``served``); the overloaded partners by the EMA mass
        that places them."""
        served = self.served(due)
        ratio = self._share_over_pi(self.mass, pi)
        # the i-th least served code pairs with the i-th most loaded
        lo = torch.topk(served, self._pairs_per_step, largest=False).indices
        hi = torch.topk(ratio, self._pairs_per_step).indices
        split = (served[lo] < SPLIT_DEAD) & (ratio[hi] > 1)
        self._split_pairs(codebook, potential, scale, lo, hi, split, tracked)

    @property
    def _pairs_per_step(self) -> int:
        """At most SPLITS_PER_STEP pairs a step (the rest wait), so that the splits' gathers stay small at large K."""
        return min(self.num_codes // 2, SPLITS_PER_STEP)

    @staticmethod
    def _share_over_pi(mass: torch.Tensor, pi: torch.Tensor) -> torch.Tensor:
        """Each code's share of ``mass`` (K,) over its share of pi: 1 where a code receives exactly its share."""
        tiny = torch.finfo(mass.dtype).tiny
        return mass / mass.sum().clamp_min(tiny) / pi.mean(0).clamp_min(tiny)

    def _split_pairs(self, codebook, potential, scale, lo, hi, split, tracked: bool) -> None:
        """Move code lo[i] next to hi[i] where split[i]: the two share hi's EMAs (with ``tracked``, split_unused's
        nearest-code EMAs too) and its potential, displaced by +-0.1 of a cell's radius, so that hi's cell is halved
        along the bisector."""
        tiny = torch.finfo(self.mass.dtype).tiny
        c = codebook
        away = c[lo] - c[hi]
        # 0.1 of a cell's radius, sqrt(scale) = sqrt(D) x the per-dimension spread (scale: the solver's EMA of the
        # quantization error), towards the dead code's old place
        radius = (scale / self.dim).sqrt()
        u = 0.1 * radius * away / away.norm(dim=1, keepdim=True).clamp_min(tiny) * self.dim ** 0.5
        self.splits += split.sum()
        # the moved code starts its own record; its partner keeps its record, its cell halved
        self.earned[lo] = torch.where(split, 0.0, self.earned[lo])
        self.expected[lo] = torch.where(split, 0.0, self.expected[lo])
        self.earned[hi] = torch.where(split, self.earned[hi] / 2, self.earned[hi])
        half = self.mass[hi] / 2
        self.mass[lo] = torch.where(split, half, self.mass[lo])
        self.mass[hi] = torch.where(split, half, self.mass[hi])
        self.sum[lo] = torch.where(split[:, None], (c[hi] + u) * half[:, None], self.sum[lo])
        self.sum[hi] = torch.where(split[:, None], (c[hi] - u) * half[:, None], self.sum[hi])
        potential[:, lo] = torch.where(split, potential[:, hi], potential[:, lo])
        for stat in (self.nearest_mass, self.nearest_error) if tracked else ():  # zero, and untouched, without it
            half = stat[hi] / 2
            stat[lo] = torch.where(split, half, stat[lo])
            stat[hi] = torch.where(split, half, stat[hi])

    def _track_nearest(self, codebook, x, assigned, nearest, keep, decay, all_reduce) -> None:
        """split_unused's statistics: EMAs of each code's nearest-code count and of the squared error of the latents
        it is the nearest code of (x (N*G, D) with a mask's padding zeroed), and for each code the most used nearest
        code of the latents transported to it this step (kept from earlier steps for a code that received none)."""
        idx, to = nearest.reshape(-1), assigned.reshape(-1)
        # for each code, the most used (by the nearest-code EMA) of its transported latents' nearest codes: a crowd's
        # codes all find the crowd's one used code (two scatters: the largest usage, then a code that has it)
        usage = self.nearest_mass[idx] if keep is None else torch.where(keep.reshape(-1), self.nearest_mass[idx], -1.0)
        best = torch.full_like(self.nearest_mass, -1.0).scatter_reduce_(0, to, usage, "amax")
        host = torch.full_like(self.nearest_of, -1).scatter_reduce_(
            0, to, torch.where((usage == best[to]) & (usage >= 0), idx, -1), "amax")
        err = (x - codebook[idx]).pow(2).sum(-1)  # x's padding is zeroed, not its error: weighted below
        if keep is not None:
            err = err * keep.reshape(-1).to(x.dtype)
        counts = code_histogram(idx, self.num_codes, x.dtype, keep=keep)
        errors = torch.zeros_like(counts).index_add_(0, idx, err)
        if all_reduce:  # every rank makes the same moves (and the same change to pi)
            packed = torch.stack([counts, errors])
            dist.all_reduce(packed)
            counts, errors = packed.unbind()
            dist.all_reduce(host, op=dist.ReduceOp.MAX)
        self.nearest_of.copy_(torch.where(host >= 0, host, self.nearest_of))
        self.nearest_mass.mul_(decay).add_(counts * (1 - decay))
        self.nearest_error.mul_(decay).add_(errors * (1 - decay))

    def _split_unused(self, codebook, potential, scale, pi, beta, threshold, ready) -> None:
        """A code that the decoder receives for less than ``threshold`` x pi_k of the latents (the EMA of its
        nearest-code share) moves to split the nearest-code cell with the largest summed error among those above the
        mean (the LBG split on the distortion the decoder sees). A crowd of identical latents (the blank patches of a
        sequence) holds pi's share of codes that all transport it at no cost, but only one of them is anybody's
        nearest: W cannot move the others out (docs/lab/17-29.md#sequence-blank-patches,
        docs/lab/30-39.md#sequence-kl-weight); this does, and pi's mass moves with them."""
        ratio = self._share_over_pi(self.nearest_mass, pi)
        lo = torch.topk(ratio, self._pairs_per_step, largest=False).indices
        hi = torch.topk(self.nearest_error, self._pairs_per_step).indices
        heavy = self.nearest_error[hi] > self.nearest_error.mean()
        split = (ratio[lo] < threshold) & heavy & ready
        self._move_pi(beta, lo, hi, split)
        self._split_pairs(codebook, potential, scale, lo, hi, split, True)

    def _move_pi(self, beta, lo, hi, split) -> None:
        """A moved code's mass goes to the code its transported latents are nearest to (a crowd's one used code, which
        thus takes the crowd's mass at once instead of through the optimiser's small steps on beta), and the moved
        code and its partner share the partner's. ``beta`` (G, K): pi = softmax(beta), changed in place."""
        top = beta.max(-1, keepdim=True).values
        w = (beta - top).exp()
        target = self.nearest_of[lo]
        target = torch.where(target >= 0, target, lo)
        w.index_add_(1, target, torch.where(split, w[:, lo], 0.0))
        half = w[:, hi] / 2
        w[:, lo] = torch.where(split, half, w[:, lo])
        w[:, hi] = torch.where(split, half, w[:, hi])
        beta.copy_(w.clamp_min(torch.finfo(w.dtype).tiny).log() + top)
