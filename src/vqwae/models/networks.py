"""The paper's convolutional encoders and decoders (App. D; the authors' code for the details).

32x32 inputs (MNIST, CIFAR-10, SVHN): two 4x4 stride-2 convolutions, a 3x3 convolution, a residual stack,
a 1x1 projection to D channels -> latent D x 8 x 8. The decoder mirrors it with transposed convolutions.
64x64 inputs (CelebA): the same trunk with batch norm and 6 residual blocks -> latent D x 16 x 16.
Inputs are in [0, 1] with no normalisation; the start is the authors' ``weights_init`` (see :func:`init_weights`).
``arch="vqgan"``: the taming-transformers encoder / decoder (:mod:`vqwae.models.vqgan`), any image size that
its downsampling factor divides, for the paper's FFHQ row.
"""
from __future__ import annotations

import torch
from torch import nn

from vqwae.models.network_options import NetworkConfig, int_list
from vqwae.models.network_options import ARCHITECTURES, NetworkOptions, VQGANSizes  # noqa: F401 (their home before)


class Residual(nn.Module):
    """x + F(x), F = ReLU, conv3x3 (C -> R, no bias), [BN], ReLU, conv1x1 (R -> C, no bias), [BN]."""

    def __init__(self, channels: int, hidden: int, batch_norm: bool = False, quirk_inplace: bool = False):
        super().__init__()
        norm = (lambda c: nn.BatchNorm2d(c)) if batch_norm else (lambda c: nn.Identity())
        self.quirk_inplace = quirk_inplace
        self.block = nn.Sequential(
            nn.ReLU(),
            nn.Conv2d(channels, hidden, 3, padding=1, bias=False),
            norm(hidden),
            nn.ReLU(),
            nn.Conv2d(hidden, channels, 1, bias=False),
            norm(channels),
        )

    def forward(self, x):
        """x + F(x) (with the authors' quirk: ReLU(x) + F(ReLU(x)))."""
        if self.quirk_inplace:  # the authors' in-place ReLU: computes ReLU(x) + F(ReLU(x))
            x = torch.relu(x)
        return x + self.block(x)


class ResidualStack(nn.Module):
    def __init__(self, channels, hidden, layers, batch_norm=False, shared=False, quirk_inplace=False):
        super().__init__()
        if shared:  # the authors' code repeats ONE residual layer `layers` times
            one = Residual(channels, hidden, batch_norm, quirk_inplace)
            self.layers = nn.ModuleList([one] * layers)
        else:
            self.layers = nn.ModuleList(Residual(channels, hidden, batch_norm, quirk_inplace) for _ in range(layers))

    def forward(self, x):
        """The residual layers in turn, then a ReLU."""
        for layer in self.layers:
            x = layer(x)
        return torch.relu(x)


def _bn(c: int, on: bool) -> nn.Module:
    return nn.BatchNorm2d(c) if on else nn.Identity()


class Encoder(nn.Module):
    """(B, C, S, S) in [0, 1] -> (B, D, S/4, S/4)."""

    def __init__(self, cfg: NetworkConfig):
        super().__init__()
        h, bn = cfg.hidden, cfg.arch == "conv64"
        first = h // 4 if bn else h // 2  # conv64: 3 -> 32 -> 64 channels; conv32: C -> 64 -> 128
        second = h // 2 if bn else h
        self.net = nn.Sequential(
            nn.Conv2d(cfg.in_channels, first, 4, stride=2, padding=1), _bn(first, bn), nn.ReLU(),
            nn.Conv2d(first, second, 4, stride=2, padding=1), _bn(second, bn), nn.ReLU(),
            nn.Conv2d(second, h, 3, padding=1),
            ResidualStack(h, cfg.res_hidden, cfg.num_res_layers, bn, cfg.authors_quirks, cfg.authors_quirks),
            nn.Conv2d(h, cfg.latent_dim, 1),
        )

    def forward(self, x):
        """Images (B, C, S, S) -> latents (B, D, S/4, S/4)."""
        return self.net(x)


class Decoder(nn.Module):
    """(B, D, S/4, S/4) -> (B, C, S, S). conv32 has no output activation (as the authors); conv64 ends in a sigmoid."""

    def __init__(self, cfg: NetworkConfig):
        super().__init__()
        h, bn = cfg.hidden, cfg.arch == "conv64"
        mid = h // 2
        self.net = nn.Sequential(
            nn.ConvTranspose2d(cfg.latent_dim, h, 3, padding=1),
            ResidualStack(h, cfg.res_hidden, cfg.num_res_layers, bn, cfg.authors_quirks, cfg.authors_quirks),
            nn.ConvTranspose2d(h, mid, 4, stride=2, padding=1), _bn(mid, bn), nn.ReLU(),
            nn.ConvTranspose2d(mid, cfg.in_channels, 4, stride=2, padding=1),
            nn.Sigmoid() if bn else nn.Identity(),
        )

    def forward(self, z):
        """Latents (B, D, S/4, S/4) -> images (B, C, S, S)."""
        return self.net(z)


def init_weights(module: nn.Module) -> None:
    """The authors' start (``weights_init`` in their ``model.py``, applied to the whole model).

    Every (transposed) convolution's weight is drawn from N(0, 0.02) and its bias is left where PyTorch put it,
    U(-1/sqrt(fan_in), 1/sqrt(fan_in)); batch norm's scale is drawn from N(1, 0.02) and its shift set to 0.
    The biases matter: at this scale of weights they set the latents' size at the start (RMS ~0.05 on CIFAR-10
    against ~0.0025 with zero biases, ``tests/test_networks_init.py``).
    """
    for m in module.modules():
        if isinstance(m, (nn.Conv2d, nn.ConvTranspose2d)):
            nn.init.normal_(m.weight, 0.0, 0.02)
        elif isinstance(m, nn.BatchNorm2d):
            nn.init.normal_(m.weight, 1.0, 0.02)
            nn.init.zeros_(m.bias)


def build_networks(cfg: NetworkConfig) -> tuple[nn.Module, nn.Module]:
    """(encoder, decoder) of the architecture ``cfg.arch`` names: the paper's conv32 / conv64 or VQGAN's."""
    if cfg.arch == "vqgan":
        from vqwae.models.vqgan import VQGANDecoder, VQGANEncoder

        sizes = dict(ch=cfg.ch, ch_mult=int_list(cfg.ch_mult, "ch_mult"), num_res_blocks=cfg.num_res_blocks,
                     attn_resolutions=int_list(cfg.attn_resolutions, "attn_resolutions"),
                     resolution=cfg.image_size, z_channels=cfg.z_channels, latent_dim=cfg.latent_dim)
        return VQGANEncoder(cfg.in_channels, **sizes), VQGANDecoder(cfg.in_channels, **sizes)  # taming's init
    enc, dec = Encoder(cfg), Decoder(cfg)
    init_weights(enc)
    init_weights(dec)
    return enc, dec
