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
# 1.5x faster on one core than one 64 MiB chunk, and changed nothing at K = 512
# (docs/lab/09-16.md#groupnorm-host-cheaper-split).
CPU_CHUNK_ENTRIES = 1 << 19


def chunk_rows(chunk_entries: int, per_row: int, device: torch.device) -> int:
    """Rows of latents per chunk: at most ``chunk_entries`` distances (``per_row`` each) at once, and on a CPU at
    most a cache-sized chunk."""
    if device.type == "cpu":
        chunk_entries = min(chunk_entries, CPU_CHUNK_ENTRIES)
    return max(1, chunk_entries // max(1, per_row))


#: min_rows' block: the codes are reduced in blocks of this many (a CPU only, K a multiple of it, >= 4 blocks)
MIN_BLOCK = 64


def min_rows(dist: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``dist.min(-1)`` (values, first index of the minimum) of a contiguous (..., K) tensor, exactly.

    Written by hand because PyTorch's CPU reduction with an index runs one lane at a time: at K = 8,192 it took
    14 ms over 2,048 rows where ``amin`` took 2.8 ms (one core; docs/lab/40-47.md#cpu-search-blocks). On a CPU the
    codes are
    reduced in blocks instead: the block minima by ``amin`` (vectorised), the first block holding the row's minimum,
    then the first index inside that block, 3x faster at K = 8,192 and 2x at K = 512 with the same values and the
    same indices, ties included (the first block with the minimum, then its first index). Elsewhere (a GPU's
    reduction is one fused kernel) and for K not a multiple of ``MIN_BLOCK``: ``dist.min(-1)``."""
    k = dist.shape[-1]
    if dist.device.type != "cpu" or k % MIN_BLOCK or k < 4 * MIN_BLOCK or not dist.is_contiguous():
        return dist.min(-1)
    rows = dist.reshape(-1, k // MIN_BLOCK, MIN_BLOCK)  # (R, K / b, b)
    vals, block = rows.amin(-1).min(-1)  # (R,): the minimum and the first block that holds it
    inner = rows[torch.arange(rows.shape[0], device=dist.device), block].argmin(-1)  # (R,) first index in the block
    return vals.view(dist.shape[:-1]), (block * MIN_BLOCK + inner).view(dist.shape[:-1])


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
    buffer = x.new_empty(min(rows, n), codebook.shape[0])  # one chunk's distances, reused (fresh pages fault)
    for start in range(0, n, rows):
        xs = x[start : start + rows]
        # ||x||^2 is constant per row, so it does not change the argmin.
        dist = torch.addmm(c2, xs, codebook.t(), alpha=-2.0, out=buffer[: xs.shape[0]])
        out[start : start + rows] = min_rows(dist)[1]
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
