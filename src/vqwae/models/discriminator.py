"""VQGAN's patch discriminator: pix2pix's NLayerDiscriminator (Isola et al. 2017), as taming-transformers uses it.

    conv 4x4 stride 2 -> LeakyReLU(0.2)
    (num_layers - 1) x [conv 4x4 stride 2, no bias -> BatchNorm -> LeakyReLU(0.2)]   widths x2, capped at 8x
    conv 4x4 stride 1, no bias -> BatchNorm -> LeakyReLU(0.2)
    conv 4x4 stride 1 -> 1 logit per patch

Each logit sees a square patch of the image, ``receptive_field(num_layers)`` pixels wide (70 for 3 layers:
the "70x70 PatchGAN"). Convolution weights start from N(0, 0.02), BatchNorm scales from N(1, 0.02).
Images enter in [0, 1] and are mapped to taming's [-1, 1].
"""
from __future__ import annotations

import torch
from torch import nn


def receptive_field(num_layers: int) -> int:
    """Side of the input patch one output logit sees: all kernels 4, num_layers stride-2 convs, then two
    stride-1 convs, so RF = 1 + 3 * (1 + 2 + ... + 2^(n-1)) + 2 * 3 * 2^n = 9 * 2^n - 2."""
    return 9 * 2 ** num_layers - 2


class PatchDiscriminator(nn.Module):
    def __init__(self, in_channels: int = 3, base_channels: int = 64, num_layers: int = 3):
        super().__init__()
        if num_layers < 1:
            raise ValueError(f"the discriminator needs at least 1 strided layer, got {num_layers}")
        layers: list[nn.Module] = [nn.Conv2d(in_channels, base_channels, 4, stride=2, padding=1),
                                   nn.LeakyReLU(0.2, True)]
        width = base_channels
        for n in range(1, num_layers + 1):
            stride = 2 if n < num_layers else 1  # the last of these keeps the resolution
            out = base_channels * min(2 ** n, 8)
            layers += [nn.Conv2d(width, out, 4, stride=stride, padding=1, bias=False), nn.BatchNorm2d(out),
                       nn.LeakyReLU(0.2, True)]
            width = out
        layers.append(nn.Conv2d(width, 1, 4, stride=1, padding=1))
        self.main = nn.Sequential(*layers)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.normal_(m.weight, 0.0, 0.02)
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.normal_(m.weight, 1.0, 0.02)
                nn.init.zeros_(m.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(B, C, H, W) in [0, 1] -> (B, 1, H', W') patch logits."""
        return self.main(2 * x - 1)
