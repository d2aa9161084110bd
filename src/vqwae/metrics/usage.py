"""Codebook usage: histograms, perplexity and codes used.

Perplexity is exp(entropy) of the code-usage distribution, at most K (the paper's Sec. 4.1 definition).
Averaging per-batch perplexities is biased low, so evaluation accumulates ONE histogram over the whole
split and every latent position (:class:`CodeUsage`) and takes the perplexity of that.
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from vqwae.distributed import is_distributed


def code_histogram(indices: torch.Tensor, num_codes: int, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """Counts of each code in ``indices`` (any shape), as a (K,) tensor of ``dtype``.

    ``index_add_``, not ``bincount``: on CUDA bincount reads the input's maximum back to the host, and the
    quantizers call this every training step."""
    flat = indices.reshape(-1)
    counts = torch.zeros(num_codes, dtype=dtype, device=flat.device)
    return counts.index_add_(0, flat, torch.ones(flat.shape[0], dtype=dtype, device=flat.device))


def perplexity_from_counts(counts: torch.Tensor) -> torch.Tensor:
    """exp(-sum p log p) of a usage histogram; 0 for an empty histogram."""
    total = counts.sum()
    p = counts / total.clamp_min(torch.finfo(counts.dtype).tiny)
    entropy = -(p * torch.log(p.clamp_min(1e-30))).sum()
    return torch.where(total > 0, torch.exp(entropy), torch.zeros_like(entropy))  # no host read of total


class CodeUsage:
    """Accumulates one usage histogram over many batches (and, under DDP, over all ranks)."""

    def __init__(self, num_codes: int, device: torch.device | str = "cpu"):
        self.num_codes = num_codes
        self.counts = torch.zeros(num_codes, dtype=torch.float64, device=device)

    def update(self, indices: torch.Tensor) -> None:
        self.counts += code_histogram(indices.to(self.counts.device), self.num_codes)

    def reduce(self) -> "CodeUsage":
        """Sum the histogram over DDP ranks (no-op outside torch.distributed)."""
        if is_distributed():
            dist.all_reduce(self.counts)
        return self

    @property
    def perplexity(self) -> float:
        return float(perplexity_from_counts(self.counts))

    @property
    def codes_used(self) -> int:
        return int((self.counts > 0).sum())

    @property
    def probabilities(self) -> torch.Tensor:
        total = self.counts.sum()
        return self.counts / total if total > 0 else self.counts.clone()
