"""The figures of an epoch's line of metrics.jsonl (``vqwae.training.trainer``): the training terms' sums, kept on the
device through the epoch, and the validation pass."""
from __future__ import annotations

from collections import defaultdict

import torch
from torch.utils.data import DataLoader

from vqwae import distributed
from vqwae.metrics.usage import CodeUsage
from vqwae.models import VQAutoencoder


class TermSums:
    """The epoch's sums of the logged terms (each x the batch's images), on the device: a step's terms are stacked
    and added in one launch; a term that appears later (VQGAN's adversary at disc_start) gets its sum from then."""

    def __init__(self, device: torch.device):
        self.device = device
        self.names: tuple = ()  # the terms of the open stack
        self.open: torch.Tensor | None = None  # their sums (float64)
        self.closed: dict = {}  # the sums of stacks closed when the set of terms changed

    def add(self, terms: dict, images: int) -> None:
        names = tuple(terms)
        if names != self.names:
            self.closed, self.names = self.as_dict(), names
            self.open = torch.zeros(len(names), dtype=torch.float64, device=self.device)
        self.open += torch.stack([v.detach().reshape(()).float() for v in terms.values()]) * images

    def as_dict(self) -> dict:
        """{name: sum} (0-d float64 tensors), in the order the terms first appeared."""
        out = dict(self.closed)
        for name, value in zip(self.names, self.open if self.open is not None else ()):
            out[name] = out[name] + value if name in out else value.clone()
        return out


@torch.no_grad()
def validate(model: VQAutoencoder, loader: DataLoader, device: torch.device, autocast) -> dict:
    """Validation MSE, loss terms and ONE code-usage histogram over the whole split (all ranks)."""
    model.eval()
    usage = CodeUsage(model.quantizer.num_codes, device=device)
    sums = defaultdict(float)
    count = 0
    for x, _ in loader:
        x = x.to(device, non_blocking=True)
        with autocast():
            z = model.encoder(x)
        out = model.quantizer(z, compute_loss=True)
        with autocast():
            x_hat = model.decoder(out.quantized)
        b = x.shape[0]
        sums["mse"] += float(torch.nn.functional.mse_loss(x_hat.float(), x)) * b
        for name, value in out.losses.items():
            sums[name] += float(value.detach()) * b
        usage.update(out.indices)
        count += b
    totals = torch.tensor([count, *sums.values()], dtype=torch.float64, device=device)
    distributed.all_reduce_sum(totals)
    usage.reduce()
    result = {f"val/{k}": float(v / totals[0]) for k, v in zip(sums, totals[1:])}
    result.update({"val/perplexity": usage.perplexity, "val/codes_used": usage.codes_used})
    model.train()
    return result
