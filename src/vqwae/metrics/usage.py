"""Codebook usage: histograms, perplexity and codes used.

Perplexity is exp(entropy) of the code-usage distribution, at most K (the paper's Sec. 4.1 definition).
Averaging per-batch perplexities is biased low, so evaluation accumulates ONE histogram over the whole
split and every latent position (:class:`CodeUsage`) and takes the perplexity of that.
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from vqwae.distributed import is_distributed
from vqwae.ot.histogram import code_histogram, perplexity_from_counts

__all__ = ["CodeUsage", "code_histogram", "perplexity_from_counts"]


class CodeUsage:
    """Accumulates one usage histogram over many batches (and, under DDP, over all ranks)."""

    def __init__(self, num_codes: int, device: torch.device | str = "cpu"):
        self.num_codes = num_codes
        self.counts = torch.zeros(num_codes, dtype=torch.float64, device=device)

    def update(self, indices: torch.Tensor) -> None:
        """Add a batch's code indices (any shape, values in [0, K)) to the histogram."""
        self.counts += code_histogram(indices.to(self.counts.device), self.num_codes)

    def reduce(self) -> "CodeUsage":
        """Sum the histogram over DDP ranks (no-op outside torch.distributed)."""
        if is_distributed():
            dist.all_reduce(self.counts)
        return self

    @property
    def perplexity(self) -> float:
        """exp of the usage's entropy: K when every code is used equally, 1 when one code takes everything."""
        return float(perplexity_from_counts(self.counts))

    @property
    def codes_used(self) -> int:
        """The number of codes chosen at least once."""
        return int((self.counts > 0).sum())

    @property
    def probabilities(self) -> torch.Tensor:
        """The usage as a distribution over the K codes (zeros before any update)."""
        total = self.counts.sum()
        return self.counts / total if total > 0 else self.counts.clone()
