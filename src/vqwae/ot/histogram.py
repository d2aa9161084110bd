"""Mass per code: the histogram of code indices and its perplexity, without host synchronisation.

It lives in ``ot/`` because the solvers need it (the semi-discrete solver's assignment mass) and every layer
above (quantizers, metrics) shares it from here.
"""
from __future__ import annotations

import torch


def code_histogram(indices: torch.Tensor, num_codes: int, dtype: torch.dtype = torch.float64,
                   keep: torch.Tensor | None = None) -> torch.Tensor:
    """Counts of each code in ``indices`` (any shape), as a (K,) tensor of ``dtype``; with ``keep`` (a bool
    mask of ``indices``' shape), only the kept indices count.

    ``index_add_``, not ``bincount``: on CUDA bincount reads the input's maximum back to the host, and the
    quantizers call this every training step. A mask is applied as 0 / 1 weights, not by indexing with it,
    for the same reason (``indices[keep]`` has a data-dependent size)."""
    flat = indices.reshape(-1)
    counts = torch.zeros(num_codes, dtype=dtype, device=flat.device)
    weights = (torch.ones(flat.shape[0], dtype=dtype, device=flat.device) if keep is None
               else keep.reshape(-1).to(dtype))
    return counts.index_add_(0, flat, weights)


def perplexity_from_counts(counts: torch.Tensor) -> torch.Tensor:
    """exp(-sum p log p) of a usage histogram; 0 for an empty histogram."""
    total = counts.sum()
    p = counts / total.clamp_min(torch.finfo(counts.dtype).tiny)
    entropy = -(p * torch.log(p.clamp_min(1e-30))).sum()
    return torch.where(total > 0, torch.exp(entropy), torch.zeros_like(entropy))  # no host read of total
