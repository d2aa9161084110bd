"""Batched ancestral (autoregressive) sampling of code grids from a trained PixelCNN prior.

Positions are filled in raster order. Because the network never looks down (see
:mod:`vqwae.prior.pixelcnn`), the logits of row i are computed from the first i+1 rows only, which
makes sampling a grid of H rows cost about (H+1)/(2H) of H*W full forward passes.
"""
from __future__ import annotations

import torch
from vqwae.progress import progress_bar

from vqwae.prior.pixelcnn import GatedPixelCNN


def _labels_for(prior: GatedPixelCNN, labels, n: int) -> torch.Tensor | None:
    if prior.config.num_classes is None:
        if labels is not None:
            raise ValueError("labels given to an unconditional prior")
        return None
    if labels is None:
        raise ValueError("this prior is class-conditional: pass labels (an int or n class ids)")
    labels = torch.as_tensor(labels).long().reshape(-1)
    if labels.numel() == 1:
        labels = labels.expand(n)
    if labels.numel() != n:
        raise ValueError(f"expected 1 or {n} labels, got {labels.numel()}")
    if labels.min() < 0 or labels.max() >= prior.config.num_classes:
        raise ValueError(f"labels must lie in [0, {prior.config.num_classes})")
    return labels


@torch.no_grad()
def sample(
    prior: GatedPixelCNN,
    n: int,
    shape: tuple[int, int],
    *,
    labels: torch.Tensor | int | None = None,
    temperature: float = 1.0,
    batch_size: int = 256,
    progress: bool = True,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Draw ``n`` code grids of ``shape`` (H, W) from ``prior``; returns a (n, H, W) long tensor on the CPU.

    labels: required for a class-conditional prior: one int for all samples or a (n,) tensor.
    temperature: logits are divided by it before the softmax; 1.0 samples the model, < 1 sharpens,
        > 1 flattens, and 0 takes the argmax (greedy decoding, no randomness).
    batch_size: grids sampled in parallel (a memory/speed trade-off; with a fixed generator the draws
        also depend on it through the order random numbers are consumed, so keep it fixed to reproduce).
    generator: a torch.Generator for reproducible draws; sampling runs on the generator's device.
    The model is put in eval mode for sampling and restored afterwards.
    """
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    H, W = (int(s) for s in shape)
    if H < 1 or W < 1:
        raise ValueError(f"shape must be positive, got {shape}")
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {temperature}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    labels = _labels_for(prior, labels, n)
    device = prior.device
    out = torch.zeros(n, H, W, dtype=torch.long)
    was_training = prior.training
    prior.eval()
    try:
        starts = range(0, n, batch_size)
        with progress_bar(total=len(starts) * H * W, desc="sampling codes" if progress else None,
                          unit="pos") as bar:
            for s in starts:
                b = min(batch_size, n - s)
                codes = torch.zeros(b, H, W, dtype=torch.long, device=device)
                lab = labels[s:s + b].to(device) if labels is not None else None
                for i in range(H):
                    for j in range(W):
                        logits = prior(codes[:, : i + 1], lab)[:, :, i, j].float()  # (b, K)
                        if temperature == 0:
                            nxt = logits.argmax(dim=1)
                        else:
                            probs = torch.softmax(logits / temperature, dim=1)
                            if generator is not None:
                                probs = probs.to(generator.device)
                            nxt = torch.multinomial(probs, 1, generator=generator).squeeze(1)
                        codes[:, i, j] = nxt.to(device)
                        bar.update(1)
                out[s:s + b] = codes.cpu()
    finally:
        prior.train(was_training)
    return out
