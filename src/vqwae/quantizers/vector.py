"""VQ-VAE's quantizer (van den Oord et al. 2017), the baseline.

Loss (the VQ-VAE objective as the paper writes it, Sec. 1):

    "codebook":   ||sg(z) - z_q||^2                  (moves codewords to their latents)
    "commitment": beta * ||z - sg(z_q)||^2,  beta = 0.25   (keeps the encoder close to its codes)

Both are means over all latent elements. ``legacy_beta=True`` reproduces the authors' code, which puts beta
on the codebook term instead (the well-known misplacement). ``ema=True`` replaces the codebook loss with
exponential-moving-average codebook updates (van den Oord et al. 2017, App. A.1), statistics summed over
DDP ranks so every rank keeps an identical codebook.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from vqwae.distributed import is_distributed
from vqwae.options import check_fields, option
from vqwae.ot.histogram import code_histogram
from vqwae.quantizers.base import LatentShape, Quantizer, QuantizerOutput, fp32, masked_mse


@dataclass(frozen=True)
class VectorOptions:
    """VQ-VAE's options (a training config's ``vqvae`` section)."""

    beta: float = option(0.25, "vqvae: commitment weight beta", min=0)
    legacy_beta: bool = option(False, "vqvae: beta on the codebook term, as in the authors' code",
                               negative="paper-beta")
    ema: bool = option(False, "vqvae: EMA codebook updates instead of the codebook loss")
    decay: float = option(0.99, "vqvae --ema: EMA decay", min=0, below=1, flat="vq_decay")
    ema_epsilon: float = option(1e-5, "vqvae --ema: Laplace smoothing of the EMA cluster sizes", min=0,
                                flat="vq_ema_epsilon")

    def __post_init__(self):
        check_fields(self)


@dataclass(frozen=True)
class VectorConfig(VectorOptions, LatentShape):
    """Everything a ``VectorQuantizer`` is built from."""

    def __post_init__(self):
        LatentShape.__post_init__(self)
        VectorOptions.__post_init__(self)


class VectorQuantizer(Quantizer):
    kind = "vector"
    config_class = VectorConfig

    def __init__(self, config: VectorConfig | None = None, **options):
        super().__init__(config, **options)
        cfg = self.config
        num_codes, dim = cfg.num_codes, cfg.dim
        self.embedding = nn.Parameter(torch.randn(num_codes, dim), requires_grad=not cfg.ema)  # N(0, 1)
        self.register_buffer("ema_cluster_size", torch.zeros(num_codes))
        self.register_buffer("ema_embed_sum", self.embedding.detach().clone())

    @property
    def codebook(self) -> torch.Tensor:
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

    @fp32
    def forward(self, z: torch.Tensor, mask: torch.Tensor | None = None, *,
                compute_loss: bool | None = None) -> QuantizerOutput:
        """Quantize z (either layout); ``mask`` (B, *positions), True = a real latent: masked latents are
        quantized but left out of the loss terms, the EMA update and the perplexity."""
        self.check_input(z, mask)
        cfg = self.config
        flat = self.flatten(z)  # (B, M, D)
        indices = self.nearest(flat)
        z_q = F.embedding(indices, self.embedding)
        losses = {}
        if self.training if compute_loss is None else compute_loss:
            # the mask as weights, not an index: boolean indexing has a data-dependent size (a host read)
            keep = None if mask is None else mask.reshape(flat.shape[:2])
            commit_w = 1.0 if cfg.legacy_beta else cfg.beta
            losses["commitment"] = commit_w * masked_mse(flat, z_q.detach(), keep)
            if not cfg.ema:
                losses["codebook"] = (cfg.beta if cfg.legacy_beta else 1.0) * masked_mse(z_q, flat.detach(), keep)
            elif self.training:
                self._ema_update(flat.detach(), indices, keep)
        return self._output(z, self.straight_through(flat, z_q), indices, losses, mask)
