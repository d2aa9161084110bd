"""The taming-transformers encoder and decoder (Esser et al. 2021), the network of the paper's FFHQ row.

Read top to bottom: the blocks (GroupNorm + Swish residual blocks, one-head self-attention, down / up
sampling), then the encoder and the decoder. With the paper's sizes (ch 128, ch_mult 1,1,2,2,4, two residual
blocks per level, attention at side 16, z_channels 256) a 256x256 image becomes a 16x16 grid of D-vectors,
f = 2^(levels - 1) = 16. Any image side that f divides works; the latent grid follows from it.

Images enter and leave in [0, 1], the convention of every network in vqwae; inside, as in taming, they are
on [-1, 1]. Weights keep PyTorch's default initialisation, as taming does. Written here rather than imported
because taming-transformers is not a pip-installable library (it pins old PyTorch Lightning).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

GROUPS = 32  # taming's GroupNorm(num_groups=32, eps=1e-6)


def _norm(channels: int) -> nn.GroupNorm:
    return nn.GroupNorm(GROUPS, channels, eps=1e-6, affine=True)


class ResnetBlock(nn.Module):
    """x + conv(swish(norm(conv(swish(norm(x)))))), with a 1x1 shortcut when the width changes."""

    def __init__(self, in_channels: int, out_channels: int, dropout: float = 0.0):
        super().__init__()
        self.norm1, self.conv1 = _norm(in_channels), nn.Conv2d(in_channels, out_channels, 3, padding=1)
        self.norm2, self.conv2 = _norm(out_channels), nn.Conv2d(out_channels, out_channels, 3, padding=1)
        self.dropout = nn.Dropout(dropout)
        self.shortcut = nn.Conv2d(in_channels, out_channels, 1) if in_channels != out_channels else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.conv1(F.silu(self.norm1(x)))
        h = self.conv2(self.dropout(F.silu(self.norm2(h))))
        return self.shortcut(x) + h


class AttnBlock(nn.Module):
    """Single-head self-attention over the H*W positions of a feature map, with a residual connection."""

    def __init__(self, channels: int):
        super().__init__()
        self.norm = _norm(channels)
        self.qkv = nn.Conv2d(channels, 3 * channels, 1)  # taming's q, k, v 1x1 convolutions, fused
        self.proj_out = nn.Conv2d(channels, channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, c, h, w = x.shape
        q, k, v = self.qkv(self.norm(x)).reshape(b, 3, c, h * w).transpose(-1, -2).unbind(1)  # each (B, HW, C)
        out = F.scaled_dot_product_attention(q.unsqueeze(1), k.unsqueeze(1), v.unsqueeze(1)).squeeze(1)
        return x + self.proj_out(out.transpose(-1, -2).reshape(b, c, h, w))


class Downsample(nn.Module):
    """3x3 convolution with stride 2 after padding one pixel right and bottom only (taming's asymmetric pad)."""

    def __init__(self, channels: int):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3, stride=2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(F.pad(x, (0, 1, 0, 1)))


class Upsample(nn.Module):
    """Nearest-neighbour 2x upsampling followed by a 3x3 convolution."""

    def __init__(self, channels: int):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(F.interpolate(x, scale_factor=2.0, mode="nearest"))


def check_sizes(ch: int, ch_mult: tuple[int, ...], resolution: int, attn_resolutions: tuple[int, ...]) -> list[int]:
    """The feature-map side at each level; a one-line error for sizes the network cannot take."""
    if not ch_mult:
        raise ValueError("vqgan: ch_mult needs at least one level")
    for m in ch_mult:
        if (ch * m) % GROUPS:
            raise ValueError(f"vqgan: ch {ch} x ch_mult {m} = {ch * m} channels is not divisible by "
                             f"GroupNorm's {GROUPS} groups")
    factor = 2 ** (len(ch_mult) - 1)
    if resolution % factor:
        raise ValueError(f"vqgan: image size {resolution} is not divisible by the network's factor {factor}")
    sides = [resolution // 2 ** i for i in range(len(ch_mult))]
    unknown = sorted(set(attn_resolutions) - set(sides))
    if unknown:
        raise ValueError(f"vqgan: attn_resolutions {unknown} are not feature-map sides of a {resolution}px "
                         f"image (those are {sides})")
    return sides


class VQGANEncoder(nn.Module):
    """(B, C, R, R) in [0, 1] -> (B, D, R/f, R/f): conv_in, per level residual blocks (+ attention) and a
    downsample except at the last, a middle block (res, attn, res), norm, swish, conv to z_channels, 1x1 to D."""

    def __init__(self, in_channels: int, *, ch: int = 128, ch_mult: tuple[int, ...] = (1, 1, 2, 2, 4),
                 num_res_blocks: int = 2, attn_resolutions: tuple[int, ...] = (16,), resolution: int = 256,
                 z_channels: int = 256, latent_dim: int = 256, dropout: float = 0.0):
        super().__init__()
        sides = check_sizes(ch, ch_mult, resolution, attn_resolutions)
        self.conv_in = nn.Conv2d(in_channels, ch, 3, padding=1)
        widths = [ch] + [ch * m for m in ch_mult]  # width entering level i is widths[i], leaving widths[i + 1]
        self.down = nn.ModuleList()
        for i, side in enumerate(sides):
            blocks, c = [], widths[i]
            for _ in range(num_res_blocks):
                blocks.append(ResnetBlock(c, widths[i + 1], dropout))
                c = widths[i + 1]
                if side in attn_resolutions:
                    blocks.append(AttnBlock(c))
            if i < len(sides) - 1:
                blocks.append(Downsample(c))
            self.down.append(nn.Sequential(*blocks))
        c = widths[-1]
        self.mid = nn.Sequential(ResnetBlock(c, c, dropout), AttnBlock(c), ResnetBlock(c, c, dropout))
        self.norm_out = _norm(c)
        self.conv_out = nn.Conv2d(c, z_channels, 3, padding=1)
        self.quant_conv = nn.Conv2d(z_channels, latent_dim, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.conv_in(2 * x - 1)  # [0, 1] -> taming's [-1, 1]
        for level in self.down:
            h = level(h)
        h = self.conv_out(F.silu(self.norm_out(self.mid(h))))  # (B, z_channels, R/f, R/f)
        return self.quant_conv(h)  # (B, D, R/f, R/f)


class VQGANDecoder(nn.Module):
    """(B, D, R/f, R/f) -> (B, C, R, R) in [0, 1]-ish: the encoder mirrored, with num_res_blocks + 1 residual
    blocks per level and nearest upsampling. ``last_layer`` is the weight VQGAN's adaptive weight uses."""

    def __init__(self, out_channels: int, *, ch: int = 128, ch_mult: tuple[int, ...] = (1, 1, 2, 2, 4),
                 num_res_blocks: int = 2, attn_resolutions: tuple[int, ...] = (16,), resolution: int = 256,
                 z_channels: int = 256, latent_dim: int = 256, dropout: float = 0.0):
        super().__init__()
        sides = check_sizes(ch, ch_mult, resolution, attn_resolutions)
        self.post_quant_conv = nn.Conv2d(latent_dim, z_channels, 1)
        c = ch * ch_mult[-1]
        self.conv_in = nn.Conv2d(z_channels, c, 3, padding=1)
        self.mid = nn.Sequential(ResnetBlock(c, c, dropout), AttnBlock(c), ResnetBlock(c, c, dropout))
        self.up = nn.ModuleList()
        for i in reversed(range(len(ch_mult))):  # from the coarsest level to the finest
            blocks = []
            for _ in range(num_res_blocks + 1):
                blocks.append(ResnetBlock(c, ch * ch_mult[i], dropout))
                c = ch * ch_mult[i]
                if sides[i] in attn_resolutions:
                    blocks.append(AttnBlock(c))
            if i > 0:
                blocks.append(Upsample(c))
            self.up.append(nn.Sequential(*blocks))
        self.norm_out = _norm(c)
        self.conv_out = nn.Conv2d(c, out_channels, 3, padding=1)

    @property
    def last_layer(self) -> torch.Tensor:
        return self.conv_out.weight

    def forward(self, z_q: torch.Tensor) -> torch.Tensor:
        h = self.mid(self.conv_in(self.post_quant_conv(z_q)))
        for level in self.up:
            h = level(h)
        y = self.conv_out(F.silu(self.norm_out(h)))  # taming's output, on [-1, 1]
        return (y + 1) / 2
