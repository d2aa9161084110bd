"""The host zoo's networks (``benchmarks/hosts.py``): every one takes 32x32 images and hands its quantizer
channel-last tokens (B, N, D), with a mask where it has padding, so one adapter serves every quantizer in every host.

* ``paper``: the paper's 32x32 network as vqwae ships it (the authors' start), latent 64 x 8 x 8;
* ``default-init``: the same layers with PyTorch's default initialisation, weights too (its latents start at the
  ``paper`` host's RMS since the authors' start, 0.05-0.06 on 32 CIFAR-10 images; ~25x above the zero-bias start);
* ``groupnorm``: a GroupNorm / SiLU ResNet autoencoder (VQGAN-style blocks) with a narrow latent, 16 x 8 x 8;
* ``sequence``: a transformer over the image's 64 patches of 4x4 pixels, each row a random number (16-64) of real
  tokens and the rest padding;
* ``residual``: ``default-init``, for 4 residual levels of codes;
* ``example``: vector-quantize-pytorch's own example network and training (``ExampleHost``), 28x28 FashionMNIST,
  batch 256 of 7 x 7 positions: 12,544 latents a step, many latents per code at its K = 256.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from vqwae.models import NetworkConfig
from vqwae.models.networks import build_networks

SIDE, PATCH = 32, 4  # images are 32x32; the sequence host's tokens are 4x4 patches
TOKENS = (SIDE // PATCH) ** 2  # 64 = the image hosts' 8 x 8 positions


def _default_init(module: nn.Module) -> nn.Module:
    """PyTorch's own initialisation for every layer that has one (undoes vqwae's N(0, 0.02))."""
    for m in module.modules():
        if m is not module and hasattr(m, "reset_parameters"):
            m.reset_parameters()
    return module


class ImageHost(nn.Module):
    """encoder (B, C, 32, 32) -> (B, D, 8, 8) -> tokens (B, 64, D) -> quantizer -> decoder."""

    def __init__(self, encoder: nn.Module, decoder: nn.Module, dim: int):
        super().__init__()
        self.encoder, self.decoder, self.dim = encoder, decoder, dim

    def encode(self, x, mask=None):
        z = self.encoder(x)
        return z.flatten(2).transpose(1, 2), None  # (B, 64, D), no padding

    def decode(self, q, x, mask=None):
        b, n, d = q.shape
        side = math.isqrt(n)
        return self.decoder(q.transpose(1, 2).reshape(b, d, side, side))

    def sq_error(self, x_hat, x, mask):  # (sum of squared errors, number of values)
        return ((x_hat.clamp(0, 1) - x) ** 2).sum(), x.numel()

    def train_loss(self, x_hat, x, mask):  # the unclamped MSE trains (the evaluation clamps to the image range)
        return F.mse_loss(x_hat, x)


class ExampleHost(ImageHost):
    """vector-quantize-pytorch 1.32's own example (``examples/autoencoder.py``, its ``SimpleVQAutoEncoder``): two
    3x3 convolutions with 2x2 max pooling (16 then 32 channels, GELU between) down to 32 x 7 x 7 on 28x28 images,
    nearest upsampling and two 3x3 convolutions back; trained as the example trains it: images in [-1, 1], the
    output clamped to [-1, 1], the L1 error plus 10x the quantizer's loss (``alpha``), AdamW at 3e-4, batch 256.
    The data stay in [0, 1] outside (``encode`` maps them), so ``sq_error`` is the MSE in the other hosts' units;
    ``abs_error`` is the example's L1, in its [-1, 1] units. Written from the example's source (read for facts)."""

    side, batch, quantizer_weight, train_limit = 28, 256, 10.0, None

    def __init__(self, channels: int, dim: int = 32):
        enc = nn.Sequential(nn.Conv2d(channels, 16, 3, padding=1), nn.MaxPool2d(2), nn.GELU(),
                            nn.Conv2d(16, dim, 3, padding=1), nn.MaxPool2d(2))
        dec = nn.Sequential(nn.Upsample(scale_factor=2, mode="nearest"), nn.Conv2d(dim, 16, 3, padding=1), nn.GELU(),
                            nn.Upsample(scale_factor=2, mode="nearest"), nn.Conv2d(16, channels, 3, padding=1))
        super().__init__(enc, dec, dim)

    def encode(self, x, mask=None):
        return super().encode(2 * x - 1, mask)

    def decode(self, q, x, mask=None):  # in the example's [-1, 1] units
        return super().decode(q, x, mask).clamp(-1, 1)

    def sq_error(self, x_hat, x, mask):
        return (((x_hat + 1) / 2 - x) ** 2).sum(), x.numel()

    def abs_error(self, x_hat, x):  # the example's test L1
        return (x_hat - (2 * x - 1)).abs().sum(), x.numel()

    def train_loss(self, x_hat, x, mask):
        return (x_hat - (2 * x - 1)).abs().mean()

    @staticmethod
    def optimizer(params):
        return torch.optim.AdamW(params, lr=3e-4)


class GNBlock(nn.Module):
    """x + conv(SiLU(GN(conv(SiLU(GN(x)))))), the VQGAN / diffusion ResNet block."""

    def __init__(self, c: int):
        super().__init__()
        self.f = nn.Sequential(nn.GroupNorm(8, c), nn.SiLU(), nn.Conv2d(c, c, 3, padding=1),
                               nn.GroupNorm(8, c), nn.SiLU(), nn.Conv2d(c, c, 3, padding=1))

    def forward(self, x):
        return x + self.f(x)


def groupnorm_host(channels: int, dim: int = 16, width: int = 64) -> ImageHost:
    enc = nn.Sequential(nn.Conv2d(channels, width // 2, 3, padding=1), GNBlock(width // 2),
                        nn.Conv2d(width // 2, width, 4, stride=2, padding=1), GNBlock(width),
                        nn.Conv2d(width, width, 4, stride=2, padding=1), GNBlock(width),
                        nn.GroupNorm(8, width), nn.SiLU(), nn.Conv2d(width, dim, 1))
    dec = nn.Sequential(nn.Conv2d(dim, width, 3, padding=1), GNBlock(width),
                        nn.ConvTranspose2d(width, width, 4, stride=2, padding=1), GNBlock(width),
                        nn.ConvTranspose2d(width, width // 2, 4, stride=2, padding=1), GNBlock(width // 2),
                        nn.GroupNorm(8, width // 2), nn.SiLU(), nn.Conv2d(width // 2, channels, 3, padding=1))
    return ImageHost(enc, dec, dim)


class SequenceHost(nn.Module):
    """A transformer autoencoder over 4x4 patches: (B, C, 32, 32) -> 64 tokens, of which the first L (16 <= L <= 64,
    drawn per row) are real and the rest padding; tokens (B, 64, D) with a mask (B, 64) go to the quantizer.
    The padding tokens are zeroed before the encoder and never attended to, and the loss covers real patches."""

    def __init__(self, channels: int, dim: int = 32, width: int = 128, layers: int = 2):
        super().__init__()
        self.dim, self.patch_values = dim, channels * PATCH * PATCH
        self.embed = nn.Linear(self.patch_values, width)
        self.pos_in = nn.Parameter(torch.randn(TOKENS, width) * 0.02)
        self.pos_out = nn.Parameter(torch.randn(TOKENS, width) * 0.02)

        def trunk():
            layer = nn.TransformerEncoderLayer(width, 4, 2 * width, dropout=0.0, batch_first=True, norm_first=True)
            return nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)

        self.enc, self.dec = trunk(), trunk()
        self.to_latent, self.from_latent = nn.Linear(width, dim), nn.Linear(dim, width)
        self.to_patch = nn.Linear(width, self.patch_values)

    @staticmethod
    def patches(x):  # (B, C, 32, 32) -> (B, 64, C*16)
        return F.unfold(x, PATCH, stride=PATCH).transpose(1, 2)

    def encode(self, x, mask):
        p = self.patches(x) * mask.unsqueeze(-1)
        h = self.enc(self.embed(p) + self.pos_in, src_key_padding_mask=~mask)
        return self.to_latent(h), mask

    def decode(self, q, x, mask):
        h = self.dec(self.from_latent(q) + self.pos_out, src_key_padding_mask=~mask)
        return self.to_patch(h)  # (B, 64, C*16) patches

    def sq_error(self, p_hat, x, mask, clamp: bool = True):  # over the real patches
        keep = mask.unsqueeze(-1).to(p_hat.dtype)
        p_hat = p_hat.clamp(0, 1) if clamp else p_hat
        return (((p_hat - self.patches(x)) ** 2) * keep).sum(), keep.sum() * self.patch_values

    def train_loss(self, p_hat, x, mask):  # the unclamped MSE over the real patches
        total, count = self.sq_error(p_hat, x, mask, clamp=False)
        return total / count


def random_mask(batch: int, generator: torch.Generator) -> torch.Tensor:
    """(B, 64) bool: row b keeps its first L_b tokens, L_b uniform in 16..64."""
    lengths = torch.randint(16, TOKENS + 1, (batch, 1), generator=generator)
    return torch.arange(TOKENS) < lengths


def blank_bound(x: torch.Tensor, mask: torch.Tensor, num_codes: int) -> dict:
    """The share of the real test tokens whose 4x4 patch is blank, and the highest test perplexity a tokenizer can
    have if it gives every blank patch one code (the same input, one token): the blank share on one code and the
    rest spread evenly over the other K - 1 (exp of that distribution's entropy)."""
    blank = float((SequenceHost.patches(x).amax(-1) == 0)[mask].double().mean())
    entropy = -blank * math.log(blank) - (1 - blank) * math.log((1 - blank) / (num_codes - 1))
    return dict(blank_share=blank, perplexity_bound_one_blank_code=math.exp(entropy))


HOSTS = ("paper", "default-init", "groupnorm", "sequence", "residual", "example")


def build_host(host: str, channels: int) -> nn.Module:
    if host in ("paper", "default-init", "residual"):
        enc, dec = build_networks(NetworkConfig(in_channels=channels))  # the authors' start, as vqwae ships it
        if host != "paper":
            enc, dec = _default_init(enc), _default_init(dec)
        return ImageHost(enc, dec, 64)
    if host == "groupnorm":
        return groupnorm_host(channels)
    if host == "sequence":
        return SequenceHost(channels)
    if host == "example":
        return ExampleHost(channels)
    raise SystemExit(f"error: unknown host {host!r}; known: {', '.join(HOSTS)}")

