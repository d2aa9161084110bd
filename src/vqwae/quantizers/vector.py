"""VQ-VAE's quantizer (van den Oord et al. 2017), the baseline.

Loss (the VQ-VAE objective as the paper writes it, Sec. 1):

    "codebook":   ||sg(z) - z_q||^2                  (moves codewords to their latents)
    "commitment": beta * ||z - sg(z_q)||^2,  beta = 0.25   (keeps the encoder close to its codes)

Both are means over all latent elements. ``legacy_beta=True`` reproduces the authors' code, which puts beta
on the codebook term instead (the well-known misplacement). ``ema=True`` replaces the codebook loss with
exponential-moving-average codebook updates (van den Oord et al. 2017, App. A.1), statistics summed over
DDP ranks so every rank keeps an identical codebook.

The field's VQ (SoundStream, EnCodec, vector-quantize-pytorch's ``VectorQuantize(kmeans_init=True,
threshold_ema_dead_code=2)``): ``VectorQuantizer(ema=True, init="kmeans", dead_code_threshold=2)``.
``init="uniform"`` starts it in (-1/K, 1/K), as taming's VQGAN (whose quantizer also puts beta on the codebook term:
``legacy_beta=True``; the ``ffhq`` preset sets both). ``init="kmeans"`` starts the codebook at k-means (10 Lloyd
iterations) of the first training batch's latents;
``dead_code_threshold`` replaces, after each EMA update, every code whose EMA count fell below it by a latent of
the current batch. Both run on rank 0's choice under DDP (broadcast), and the expiry reads nothing back to
the host (a select over all codes, every step).
"""
from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from vqwae.distributed import is_distributed
from vqwae.ot.cost import nearest_code
from vqwae.ot.histogram import code_histogram
from vqwae.quantizers.base import Quantizer, QuantizerOutput, fp32, masked_mse, rotation_trick
from vqwae.quantizers.vector_options import VectorConfig
from vqwae.quantizers.vector_options import INITS, VectorOptions  # noqa: F401 (their home before)


def _draw(n: int, k: int, device) -> torch.Tensor:
    """k row indices of n rows: distinct when n >= k, with replacement otherwise."""
    return torch.randperm(n, device=device)[:k] if n >= k else torch.randint(0, n, (k,), device=device)


class VectorQuantizer(Quantizer):
    """VQ-VAE's nearest-code quantizer, and with three options the field's VQ; the same layouts as
    ``WassersteinQuantizer`` (channel-first (B, D, *positions), or ``channel_last=True``).

    >>> vq = VectorQuantizer(num_codes=512, dim=64)                                   # VQ-VAE, the paper's baseline
    >>> field = VectorQuantizer(num_codes=512, dim=64, ema=True, init="kmeans", dead_code_threshold=2)
    >>> out = field(torch.randn(32, 64, 8, 8)); out.loss.backward()

    Args:
        num_codes: K, the number of codewords.
        dim: D, the latents' and codewords' dimension.
        channel_last: latents are (B, *positions, D) instead of (B, D, *positions).
        beta: the commitment's weight.
        legacy_beta: beta on the codebook term instead, as the authors' code and taming's VQGAN.
        ema: move the codewords by exponential moving averages instead of the codebook loss.
        decay: the EMA's decay.
        ema_epsilon: Laplace smoothing of the EMA counts.
        init: the codebook's start: normal (N(0, 1)), kmeans (of the first training batch) or uniform (-1/K, 1/K).
        kmeans_iters: Lloyd iterations of the k-means start.
        dead_code_threshold: with ema, a code whose EMA count falls below this is replaced by a latent of the batch.
        rotation_trick: rotate the decoder's gradient onto the latent instead of copying it (Fifty et al. 2025).
    """

    kind = "vector"
    config_class = VectorConfig

    def __init__(self, config: VectorConfig | None = None, **options):
        super().__init__(config, **options)
        cfg = self.config
        num_codes, dim = cfg.num_codes, cfg.dim
        start = torch.empty(num_codes, dim).uniform_(-1 / num_codes, 1 / num_codes) if cfg.init == "uniform" else \
            torch.randn(num_codes, dim)  # N(0, 1); a k-means start replaces it on the first training batch
        self.embedding = nn.Parameter(start, requires_grad=not cfg.ema)
        # Each code starts as if it had held one latent, itself (vector-quantize-pytorch starts its counts at 1 too):
        # with a count of 0 the first update divides a code no latent chose by the smoothing epsilon (x ~1e5).
        self.register_buffer("ema_cluster_size", torch.ones(num_codes))
        self.register_buffer("ema_embed_sum", self.embedding.detach().clone())
        if cfg.init == "kmeans":  # set once the k-means start is done (saved: a resumed run keeps its codebook)
            self.register_buffer("codebook_initialized", torch.zeros((), dtype=torch.bool))

    @property
    def codebook(self) -> torch.Tensor:
        """The codewords (K, D)."""
        return self.embedding

    @torch.no_grad()
    def _ema_update(self, flat: torch.Tensor, indices: torch.Tensor, keep: torch.Tensor | None) -> None:
        """Moving averages of each code's count and latent sum (the real latents', ``keep`` (B, M) bool)."""
        cfg = self.config
        x = flat.reshape(-1, self.dim)
        idx = indices.reshape(-1)
        counts = code_histogram(idx, self.num_codes, torch.float32, keep)  # no host read, unlike bincount
        if keep is not None:
            x = x * keep.reshape(-1, 1)
        sums = torch.zeros_like(self.ema_embed_sum).index_add_(0, idx, x)
        if is_distributed():
            dist.all_reduce(counts)
            dist.all_reduce(sums)
        old = None if keep is None else (self.ema_cluster_size.clone(), self.ema_embed_sum.clone(),
                                         self.embedding.clone())
        self.ema_cluster_size.mul_(cfg.decay).add_(counts, alpha=1 - cfg.decay)
        self.ema_embed_sum.mul_(cfg.decay).add_(sums, alpha=1 - cfg.decay)
        n = self.ema_cluster_size.sum()
        smoothed = (self.ema_cluster_size + cfg.ema_epsilon) / (n + self.num_codes * cfg.ema_epsilon) * n
        self.embedding.copy_(self.ema_embed_sum / smoothed.unsqueeze(1))
        if old is not None:  # a batch of padding only (on every rank) moves nothing (a select: no host read)
            live = counts.sum() > 0
            for buffer, previous in zip((self.ema_cluster_size, self.ema_embed_sum, self.embedding), old):
                buffer.copy_(torch.where(live, buffer, previous))

    @torch.no_grad()
    def _kmeans_init(self, flat: torch.Tensor, keep: torch.Tensor | None) -> bool:
        """init="kmeans": the codebook becomes k-means (Lloyd, ``kmeans_iters`` iterations) of this batch's real
        latents, started from K of them (drawn with replacement when the batch holds fewer than K); the EMA
        statistics start at the clusters' counts and sums, an empty cluster's at count 1 and its codeword (it keeps
        its place rather than jumping to the origin at the next update). Rank 0's result is broadcast under DDP.
        Returns False (try the next batch) when the batch holds no real latent."""
        x = flat.reshape(-1, self.dim) if keep is None else flat[keep]  # a host read, on the first step only
        n, k = x.shape[0], self.num_codes
        if is_distributed():  # every rank follows rank 0, which must hold latents
            n0 = torch.tensor([float(n)], device=x.device)
            dist.broadcast(n0, src=0)
            if float(n0) == 0:
                return False
            if n == 0:  # this rank's result is replaced by rank 0's below
                x, n = torch.zeros(1, self.dim, device=x.device), 1
        elif n == 0:
            return False
        means = x[_draw(n, k, x.device)]
        counts = torch.zeros(k, device=x.device)
        for _ in range(self.config.kmeans_iters):
            idx = nearest_code(x, means)
            counts = code_histogram(idx, k, x.dtype)
            sums = torch.zeros_like(means).index_add_(0, idx, x)
            means = torch.where(counts[:, None] > 0, sums / counts.clamp_min(1)[:, None], means)  # empty: stays
        if is_distributed():
            packed = torch.cat([means, counts[:, None]], dim=1)
            dist.broadcast(packed, src=0)
            means, counts = packed[:, :-1], packed[:, -1]
        counts = counts.clamp_min(1)  # an empty cluster: its codeword, held by one latent
        self.embedding.copy_(means)
        self.ema_cluster_size.copy_(counts)
        self.ema_embed_sum.copy_(means * counts[:, None])
        return True

    @torch.no_grad()
    def _expire_dead_codes(self, flat: torch.Tensor, keep: torch.Tensor | None) -> None:
        """dead_code_threshold: every code whose EMA count is below the threshold becomes a latent of this batch
        (distinct latents when the batch holds at least K and has no padding), its EMA count the threshold. All
        codes are selected every step (no host read of how many died); rank 0's draw is broadcast under DDP, with
        whether rank 0 held a real latent to draw (a batch of padding only replaces nothing, on every rank)."""
        x = flat.reshape(-1, self.dim)
        k, threshold = self.num_codes, self.config.dead_code_threshold
        if keep is None:
            candidates, drawn = x[_draw(x.shape[0], k, x.device)], x.new_ones(())
        else:  # real latents only; the weights keep padding out (with replacement: no count of them on the host)
            weights = keep.reshape(-1).to(x.dtype) + torch.finfo(x.dtype).tiny
            candidates, drawn = x[torch.multinomial(weights, k, replacement=True)], keep.any().to(x.dtype)
        if is_distributed():
            packed = torch.cat([candidates, drawn.expand(k, 1)], dim=1)  # one broadcast: draws and their validity
            dist.broadcast(packed, src=0)
            candidates, drawn = packed[:, :-1], packed[0, -1]
        dead = (self.ema_cluster_size < threshold) & (drawn > 0)
        self.embedding.copy_(torch.where(dead[:, None], candidates, self.embedding))
        self.ema_cluster_size.copy_(torch.where(dead, threshold, self.ema_cluster_size))
        self.ema_embed_sum.copy_(torch.where(dead[:, None], candidates * threshold, self.ema_embed_sum))

    @fp32
    def forward(self, z: torch.Tensor, mask: torch.Tensor | None = None, *,
                compute_loss: bool | None = None) -> QuantizerOutput:
        """Quantize z (either layout); ``mask`` (B, *positions), True = a real latent: masked latents are
        quantized but left out of the loss terms, the EMA update and the perplexity."""
        self.check_input(z, mask)
        cfg = self.config
        flat = self.flatten(z)  # (B, M, D)
        keep = None if mask is None else mask.reshape(flat.shape[:2])
        if self.training and cfg.init == "kmeans":
            self._once_per_run("codebook_initialized", self._kmeans_init, flat.detach(), keep)
        indices = self.nearest(flat)
        z_q = F.embedding(indices, self.embedding)
        losses = {}
        if self.training if compute_loss is None else compute_loss:
            # the mask as weights, not an index: boolean indexing has a data-dependent size (a host read)
            commit_w = 1.0 if cfg.legacy_beta else cfg.beta
            losses["commitment"] = commit_w * masked_mse(flat, z_q.detach(), keep)
            if not cfg.ema:
                losses["codebook"] = (cfg.beta if cfg.legacy_beta else 1.0) * masked_mse(z_q, flat.detach(), keep)
            elif self.training:
                self._ema_update(flat.detach(), indices, keep)
                if cfg.dead_code_threshold:
                    self._expire_dead_codes(flat.detach(), keep)
        through = rotation_trick(flat, z_q) if cfg.rotation_trick else self.straight_through(flat, z_q)
        return self._output(z, through, indices, losses, mask)
