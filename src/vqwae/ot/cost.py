"""Squared-Euclidean costs between latents and codewords, and the chunked nearest-code search.

The cost rho_z(z, c) = ||z - c||^2 is the paper's latent metric (unnormalised, as in the authors' code).
"""
from __future__ import annotations

import torch

# Largest number of (latent, code) distance entries materialised at once by the nearest-code search:
# 2**24 float32 entries = 64 MiB, whatever K and the number of latents.
SEARCH_CHUNK_ENTRIES = 1 << 24
# On a CPU the passes over the distances (min, argmin) run at cache speed when a chunk fits in the cache, and at
# memory speed when it does not: 2**19 entries (2 MiB) per chunk made the search at K = 8,192 over 2,048 latents
# 1.5x faster on one core than one 64 MiB chunk, and changed nothing at K = 512 (BENCHMARKS.md section 13h).
CPU_CHUNK_ENTRIES = 1 << 19


def chunk_rows(chunk_entries: int, per_row: int, device: torch.device) -> int:
    """Rows of latents per chunk: at most ``chunk_entries`` distances (``per_row`` each) at once, and on a CPU at
    most a cache-sized chunk."""
    if device.type == "cpu":
        chunk_entries = min(chunk_entries, CPU_CHUNK_ENTRIES)
    return max(1, chunk_entries // max(1, per_row))


def squared_distances(x: torch.Tensor, codebook: torch.Tensor) -> torch.Tensor:
    """||x_i - c_k||^2 for x (..., N, D) and codebook (K, D) -> (..., N, K), clamped at 0."""
    x2 = x.pow(2).sum(-1, keepdim=True)  # (..., N, 1)
    c2 = codebook.pow(2).sum(-1)  # (K,)
    return (x2 - 2.0 * x @ codebook.t() + c2).clamp_min_(0.0)


@torch.no_grad()
def nearest_code(x: torch.Tensor, codebook: torch.Tensor, chunk_entries: int = SEARCH_CHUNK_ENTRIES) -> torch.Tensor:
    """Index of the nearest codeword for each row of x (N, D), computed in chunks of rows so that at most
    ``chunk_entries`` distances exist at once (bounded memory for K up to 16k and 65k+ latents)."""
    n = x.shape[0]
    rows = chunk_rows(chunk_entries, codebook.shape[0], x.device)
    c2 = codebook.pow(2).sum(-1)
    out = torch.empty(n, dtype=torch.long, device=x.device)
    for start in range(0, n, rows):
        xs = x[start : start + rows]
        # ||x||^2 is constant per row, so it does not change the argmin.
        out[start : start + rows] = torch.addmm(c2, xs, codebook.t(), alpha=-2.0).argmin(-1)
    return out


def transport_cost(plan: torch.Tensor, x: torch.Tensor, codebook: torch.Tensor) -> torch.Tensor:
    """sum_g sum_ik P_gik ||x_gi - c_k||^2 for a FIXED plan P (G, N, K), latents x (G, N, D), codebook (K, D).

    Expanded as sum_i r_i||x_i||^2 + sum_k s_k||c_k||^2 - 2 sum_k (P^T x)_k . c_k with r, s the plan's
    marginals, so gradients reach x and the codebook (the envelope theorem: dW/dC = P at the optimum)
    without building a differentiable (G, N, K) cost tensor.
    """
    plan = plan.detach()
    r = plan.sum(-1)  # (G, N)
    s = plan.sum(-2)  # (G, K)
    px = plan.transpose(-1, -2) @ x  # (G, K, D)
    return (
        (r * x.pow(2).sum(-1)).sum()
        + (s * codebook.pow(2).sum(-1)).sum()
        - 2.0 * (px * codebook).sum()
    )
