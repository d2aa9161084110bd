"""The codebook's start from the data, which both VQ-WAE quantizers use (the reference one with
``codebook_init="data"``): the codewords become latents drawn from the first training batches.

With the N(0, 1) codebook and near-zero initial latents, usage starts at one code; drawn from the data, every code
starts where latents are."""
from __future__ import annotations

import torch
import torch.distributed as dist

from vqwae.distributed import is_distributed


@torch.no_grad()
def draw_codebook(codebook: torch.Tensor, codes_drawn: torch.Tensor, flat: torch.Tensor,
                  keep: torch.Tensor | None = None) -> int:
    """Draw the next codewords of ``codebook`` (K, D), in place, from the latents ``flat`` (B, M, D) (``keep`` (B, M):
    only the real ones); ``codes_drawn`` (a saved 0-dim count) says how many have been drawn so far, and is advanced.
    Returns how many codes this batch drew (0: it held no real latent).

    The first batch fills the codebook: K of its latents, or, when it holds N < K latents, all of them and K - N
    copies with a little noise. Each of the next batches then replaces N of those copies with its own latents, until
    all K codes are distinct latents (ceil(K / N) batches). Why not copies alone: a copy and its original share one
    transport cell, and the plan splits that cell between them only as fast as the potential learns to, which took
    about 2,500 steps to spread 8,192 codes drawn from one batch of 2,048 latents
    (docs/lab/08.md#k8192-rotation-off, docs/lab/08.md#k8192-codes-from-batches). Under DDP
    rank 0's batch decides: its count and its choice are broadcast, so ranks whose masks hold other counts draw in
    step."""
    dim = codebook.shape[1]
    x = flat.detach().reshape(-1, dim)
    if keep is not None:
        x = x[keep.reshape(-1)]  # a host read, only while the codebook is being drawn
    n, k = x.shape[0], codebook.shape[0]
    drawing = not is_distributed() or dist.get_rank() == 0
    if is_distributed():  # rank 0's batch decides for every rank (ranks with masks hold different counts)
        size = torch.tensor([n], device=x.device)
        dist.broadcast(size, src=0)
        n = int(size)
    if n == 0:
        return 0
    start = int(codes_drawn)  # a host read, only while the codebook is being drawn
    count = min(n, k - start)
    rows = k if start == 0 and count < k else count
    if drawing:
        chosen = x[torch.randperm(n, device=x.device)[:count]]
        if rows > count:  # the first batch: fill the rest with noisy copies, replaced later
            copies = x[torch.randint(0, n, (k - count,), device=x.device)]
            chosen = torch.cat([chosen, copies + 0.01 * x.std() * torch.randn_like(copies)])
    else:
        chosen = x.new_empty(rows, dim)
    if is_distributed():
        dist.broadcast(chosen, src=0)
    codebook[start:start + chosen.shape[0]] = chosen
    codes_drawn.fill_(start + count)
    return count
