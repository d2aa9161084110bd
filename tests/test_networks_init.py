"""The paper's networks start as the authors' code starts them (``weights_init`` in their ``model.py``, applied to
the whole model after the encoder and decoder are built): (transposed) convolution weights N(0, 0.02), their biases
left at PyTorch's U(-1/sqrt(fan_in), 1/sqrt(fan_in)), batch norm's scale N(1, 0.02) and shift 0."""
import math

import pytest
import torch
from torch import nn

from vqwae.models import NetworkConfig, build_networks
from vqwae.models.networks import Decoder, Encoder


def authors_build(cfg: NetworkConfig, seed: int) -> tuple[nn.Module, nn.Module]:
    """The same modules built the authors' way: PyTorch's constructors, then their rule applied by class name."""
    torch.manual_seed(seed)
    enc, dec = Encoder(cfg), Decoder(cfg)
    for m in [*enc.modules(), *dec.modules()]:
        name = type(m).__name__
        if "Conv" in name:
            nn.init.normal_(m.weight, 0.0, 0.02)
        elif "BatchNorm" in name:
            nn.init.normal_(m.weight, 1.0, 0.02)
            nn.init.constant_(m.bias, 0.0)
    return enc, dec


def ours(cfg: NetworkConfig, seed: int) -> tuple[nn.Module, nn.Module]:
    torch.manual_seed(seed)
    return build_networks(cfg)


def convs(module: nn.Module):
    return [m for m in module.modules() if isinstance(m, (nn.Conv2d, nn.ConvTranspose2d))]


def fan_in(conv: nn.Module) -> int:
    return nn.init._calculate_fan_in_and_fan_out(conv.weight)[0]


@pytest.mark.parametrize("cfg", [NetworkConfig(), NetworkConfig(in_channels=1),
                                 NetworkConfig(arch="conv64", num_res_layers=6)], ids=["cifar10", "mnist", "celeba"])
def test_the_networks_equal_the_authors_build_on_the_same_seed(cfg):
    for seed in (0, 1):
        a, b = ours(cfg, seed), authors_build(cfg, seed)
        for mine, theirs in zip(a, b):
            s, t = mine.state_dict(), theirs.state_dict()
            assert s.keys() == t.keys()
            assert all(torch.equal(s[k], t[k]) for k in s), [k for k in s if not torch.equal(s[k], t[k])]


def test_every_conv_bias_is_pytorchs_uniform_draw_and_every_weight_is_n0_002():
    """Per layer, not one value: each bias lies inside its own bound 1/sqrt(fan_in) and spreads over it as a
    uniform draw does (mean |b| / bound = 1/2, max near the bound); each weight's std is 0.02."""
    enc, dec = ours(NetworkConfig(), 0)
    layers = convs(enc) + convs(dec)
    with_bias = [c for c in layers if c.bias is not None]
    assert len(with_bias) == 7  # encoder: 3 strided / 3x3 + the 1x1 projection; decoder: 3 transposed
    for c in with_bias:
        bound = 1 / math.sqrt(fan_in(c))
        b = c.bias.detach().abs() / bound
        assert b.max() <= 1.0
        n = b.numel()  # the mean of n U(0, 1): 1/2 +- 1/sqrt(12 n); 4 sigma
        assert abs(b.mean().item() - 0.5) < 4 / math.sqrt(12 * n), (c, n, b.mean())
        if n >= 64:
            assert b.max() > 0.9
    for c in layers:
        std = c.weight.detach().std().item()
        assert abs(std - 0.02) < 0.1 * 0.02, (c, std)


def test_batch_norm_starts_as_the_authors_scale_n1_002_shift_0():
    enc, _ = ours(NetworkConfig(arch="conv64", num_res_layers=6), 0)
    norms = [m for m in enc.modules() if isinstance(m, nn.BatchNorm2d)]
    assert norms
    scale = torch.cat([m.weight.detach() for m in norms])
    assert not torch.equal(scale, torch.ones_like(scale))  # drawn, not PyTorch's 1
    assert abs(scale.mean().item() - 1) < 0.005 and abs(scale.std().item() - 0.02) < 0.004
    assert all(torch.equal(m.bias.detach(), torch.zeros_like(m.bias)) for m in norms)


@pytest.mark.parametrize("channels", [3, 1])
def test_the_latents_start_at_the_authors_scale_not_the_zero_bias_one(channels):
    """The biases set the latents' size at the start (their weights are small): against the same network with its
    biases zeroed (vqwae before the fix) the latents are an order of magnitude larger, and they match the authors'
    build on every seed."""
    cfg = NetworkConfig(in_channels=channels)
    x = torch.rand(16, channels, 32, 32, generator=torch.Generator().manual_seed(0))
    for seed in (0, 1, 2):
        enc, _ = ours(cfg, seed)
        ref, _ = authors_build(cfg, seed)
        with torch.no_grad():
            rms = enc(x).pow(2).mean().sqrt().item()
            assert rms == pytest.approx(ref(x).pow(2).mean().sqrt().item(), rel=1e-6)
            for c in convs(enc):
                if c.bias is not None:
                    c.bias.zero_()
            zero_bias = enc(x).pow(2).mean().sqrt().item()
        assert 0.02 < rms < 0.2, rms
        assert rms > 10 * zero_bias, (rms, zero_bias)
