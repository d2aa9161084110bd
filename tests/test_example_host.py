"""The zoo's ``example`` host (``benchmarks/host_networks.ExampleHost``) is vector-quantize-pytorch's own example as
its ``examples/autoencoder.py`` builds and trains it: the same layers and parameter count, 28x28 images to 7 x 7
latents of 32, the output clamped to [-1, 1], the L1 error in [-1, 1] units plus 10x the quantizer's loss, AdamW 3e-4,
batch 256; its squared error is in the other hosts' [0, 1] units."""
from __future__ import annotations

import sys
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from host_networks import ExampleHost, build_host  # noqa: E402
from hosts import build_model, quantizer_factories  # noqa: E402


def test_the_example_network_layer_by_layer():
    host = build_host("example", 1)
    kinds = [type(m) for m in host.encoder] + [type(m) for m in host.decoder]
    assert kinds == [nn.Conv2d, nn.MaxPool2d, nn.GELU, nn.Conv2d, nn.MaxPool2d,
                     nn.Upsample, nn.Conv2d, nn.GELU, nn.Upsample, nn.Conv2d]
    convs = [m for m in list(host.encoder) + list(host.decoder) if isinstance(m, nn.Conv2d)]
    assert [(c.in_channels, c.out_channels, c.kernel_size, c.padding) for c in convs] == [
        (1, 16, (3, 3), (1, 1)), (16, 32, (3, 3), (1, 1)), (32, 16, (3, 3), (1, 1)), (16, 1, (3, 3), (1, 1))]
    assert sum(p.numel() for p in host.parameters()) == 160 + 4640 + 4624 + 145
    assert (host.side, host.batch, host.quantizer_weight) == (28, 256, 10.0)


def test_tokens_output_range_and_the_two_error_units():
    torch.manual_seed(0)
    host = ExampleHost(1)
    x = torch.rand(3, 1, 28, 28)
    with torch.no_grad():
        z, mask = host.encode(x)
        out = host.decode(z * 100, x)
    assert z.shape == (3, 49, 32) and mask is None
    assert out.shape == x.shape and float(out.abs().max()) <= 1.0
    # a perfect output (in [-1, 1] units) has no error in either unit; a mid-grey output is 0.5 off a white image
    assert float(host.train_loss(2 * x - 1, x, None)) == 0.0 and float(host.sq_error(2 * x - 1, x, None)[0]) == 0.0
    white, grey = torch.ones(1, 1, 28, 28), torch.zeros(1, 1, 28, 28)
    se, n = host.sq_error(grey, white, None)
    assert abs(float(se) / n - 0.25) < 1e-7 and abs(float(host.train_loss(grey, white, None)) - 1.0) < 1e-7
    assert abs(float(host.abs_error(grey, white)[0]) / n - 1.0) < 1e-7


def test_the_example_trains_with_adamw_and_ten_times_the_quantizer_loss():
    make = quantizer_factories(256, 32, 49, residual=False)["VQ-WAE"]
    model, opt = build_model("example", 1, make, seed=0)
    assert isinstance(opt, torch.optim.AdamW) and opt.defaults["lr"] == 3e-4
    x = torch.rand(4, 1, 28, 28)
    _, _, _, qloss, out = model(x, None)
    torch.testing.assert_close(model.loss(x, None), model.host.train_loss(out, x, None) + 10.0 * qloss)
    _, adam = build_model("paper", 1, make, seed=0)
    assert type(adam) is torch.optim.Adam and adam.defaults["lr"] == 1e-3
