"""Mass per code: the histogram of code indices and its perplexity, without host synchronisation.

It lives in ``ot/`` because the solvers need it (the semi-discrete solver's assignment mass) and every layer
above (quantizers, metrics) shares it from here.
"""
from __future__ import annotations

import torch


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
