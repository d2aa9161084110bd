"""What every quantizer shares: the output type, input checks, nearest-code search, the straight-through
estimator and batch code usage. Concrete quantizers add their loss terms."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from torch import nn

from vqwae.distributed import is_distributed
from vqwae.ot.histogram import code_histogram, perplexity_from_counts
from vqwae.options import check_fields, option
from vqwae.ot.cost import nearest_code


@dataclass
class QuantizerOutput:
    """What a quantizer returns for latents z of shape (B, D, H, W)."""

    quantized: torch.Tensor  # (B, D, H, W): the decoder's input (straight-through where the method says so)
    indices: torch.Tensor  # (B, H, W) long: nearest codeword of each latent
    loss: torch.Tensor  # scalar: the quantizer's whole contribution to the training loss
    losses: dict[str, torch.Tensor] = field(default_factory=dict)  # named, already weighted; sum to `loss`
    perplexity: torch.Tensor | None = None  # exp(entropy) of this batch's code usage (all ranks under DDP)


def _choice(name: str, value, valid) -> None:
    if value not in valid:
        raise ValueError(f"unknown {name} {value!r}; valid: {', '.join(map(repr, valid))}")


@dataclass(frozen=True)
class CodebookShape:
    """The codebook's size, shared by every quantizer's config (the method's own options come from a
    second base class, e.g. ``WassersteinOptions``, which is what a training config holds)."""

    num_codes: int = option(512, "K, the number of codewords", min=1)
    dim: int = option(64, "D, the codeword (and latent) dimension", min=1)

    def __post_init__(self):
        check_fields(self)


class Quantizer(nn.Module):
    """Base class. A quantizer is built from its frozen config, or from keyword options of that config:

        WassersteinQuantizer(num_codes=512, dim=64)          # drop-in
        WassersteinQuantizer(WassersteinConfig(...))         # from a config object (what training does)
    """

    kind: str = ""  # registry name, set by subclasses
    config_class: type = CodebookShape  # set by subclasses

    def __init__(self, config=None, **options):
        super().__init__()
        if config is None:
            config = self.config_class(**options)
        elif not isinstance(config, self.config_class):
            raise TypeError(f"{type(self).__name__} takes a {self.config_class.__name__}, got {type(config).__name__}")
        elif options:
            config = dataclasses.replace(config, **options)
        self.config = config
        self.num_codes, self.dim = config.num_codes, config.dim

    # ---- to be provided by subclasses -------------------------------------------------------------
    @property
    def codebook(self) -> torch.Tensor:  # (K, D)
        raise NotImplementedError

    def reconstruction_loss(self, x_hat: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """The data term d_x the method pairs with this quantizer (mean squared error unless overridden)."""
        return torch.nn.functional.mse_loss(x_hat, x)

    # ---- shared machinery -----------------------------------------------------------------------
    def config_dict(self) -> dict:
        return {"kind": self.kind, **dataclasses.asdict(self.config)}

    def check_input(self, z: torch.Tensor) -> None:
        if not isinstance(z, torch.Tensor):
            raise TypeError(f"expected a tensor of latents, got {type(z).__name__}")
        if z.dim() != 4:
            raise ValueError(f"expected latents of shape (B, D, H, W), got rank {z.dim()} shape {tuple(z.shape)}")
        if not z.is_floating_point():
            raise TypeError(f"latents must be floating point, got {z.dtype}")
        if z.shape[1] != self.dim:
            raise ValueError(f"latents have {z.shape[1]} channels but the codebook dim is {self.dim}")
        if z.numel() == 0:
            raise ValueError(f"latents of shape {tuple(z.shape)} are empty: nothing to quantize")
        if not torch.isfinite(z).all():
            raise ValueError("latents contain NaN or Inf (check the encoder and the learning rate)")

    @staticmethod
    def flatten(z: torch.Tensor) -> torch.Tensor:
        """(B, D, H, W) -> (B, H*W, D), float32."""
        b, d, h, w = z.shape
        return z.float().permute(0, 2, 3, 1).reshape(b, h * w, d)

    def nearest(self, flat: torch.Tensor) -> torch.Tensor:
        """(B, M, D) -> (B, M) indices of the nearest codewords."""
        b, m, d = flat.shape
        return nearest_code(flat.detach().reshape(b * m, d), self.codebook.detach().float()).view(b, m)

    def indices_to_latents(self, indices: torch.Tensor) -> torch.Tensor:
        """(B, H, W) long -> (B, D, H, W): the codewords, equal to ``quantized`` at eval time."""
        if indices.dtype != torch.long:
            raise TypeError(f"indices must be int64, got {indices.dtype}")
        if indices.numel() and (indices.min() < 0 or indices.max() >= self.num_codes):
            raise ValueError(f"indices must lie in [0, {self.num_codes}), got [{int(indices.min())}, {int(indices.max())}]")
        return self.codebook[indices].permute(0, 3, 1, 2).contiguous()

    def batch_perplexity(self, indices: torch.Tensor) -> torch.Tensor:
        """Perplexity of this batch's usage histogram, summed over DDP ranks when running distributed."""
        counts = code_histogram(indices.detach(), self.num_codes)
        if is_distributed():
            dist.all_reduce(counts)
        return perplexity_from_counts(counts).float()

    @staticmethod
    def straight_through(z: torch.Tensor, z_q: torch.Tensor) -> torch.Tensor:
        """Forward value z_q, gradient of the identity to z (the copy-gradient trick, van den Oord et al. 2017).

        Written as z_q + (z - sg(z)) rather than z + sg(z_q - z): z - sg(z) is exactly 0 in floating point,
        so the value is bit-identical to the codewords (``indices_to_latents`` matches ``quantized``)."""
        return z_q + (z - z.detach())

    def _output(self, z, flat_q, indices, losses) -> QuantizerOutput:
        b, d, h, w = z.shape
        quantized = flat_q.view(b, h, w, d).permute(0, 3, 1, 2)
        loss = sum(losses.values()) if losses else quantized.new_zeros(())
        return QuantizerOutput(
            quantized=quantized.to(z.dtype) if z.dtype != torch.float32 else quantized,
            indices=indices.view(b, h, w),
            loss=loss,
            losses=losses,
            perplexity=self.batch_perplexity(indices),
        )


def fp32(fn):
    """Run a quantizer's forward in float32 even inside a bf16/fp16 autocast region."""

    def wrapper(self, z, *args, **kwargs):
        with torch.autocast(device_type=z.device.type, enabled=False):
            return fn(self, z, *args, **kwargs)

    wrapper.__doc__, wrapper.__name__ = fn.__doc__, fn.__name__
    return wrapper
