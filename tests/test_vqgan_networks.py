"""The taming encoder / decoder and the PatchGAN discriminator: shapes, the patch each logit sees, errors."""
import pytest
import torch

from vqwae.models.discriminator import PatchDiscriminator, receptive_field
from vqwae.models.networks import NetworkConfig, build_networks
from vqwae.models.vqgan import AttnBlock, VQGANDecoder, VQGANEncoder

SMALL = dict(ch=32, ch_mult=(1, 2, 2, 4), num_res_blocks=1, attn_resolutions=(8,), z_channels=32, latent_dim=16)


@pytest.mark.parametrize("resolution", [32, 64])
def test_encoder_decoder_shapes_follow_the_image_size(resolution):
    torch.manual_seed(0)
    enc = VQGANEncoder(3, resolution=resolution, **SMALL)
    dec = VQGANDecoder(3, resolution=resolution, **SMALL)
    x = torch.rand(2, 3, resolution, resolution)
    z = enc(x)
    assert z.shape == (2, 16, resolution // 8, resolution // 8)  # f = 2^(4 - 1)
    assert dec(z).shape == x.shape
    assert dec.last_layer is dec.conv_out.weight
    n_attn = sum(isinstance(m, AttnBlock) for m in enc.modules())
    assert n_attn == 2  # one at the level of side 8, one in the middle block


def test_paper_network_maps_256_to_16x16_and_builds_from_its_config():
    cfg = NetworkConfig(arch="vqgan", in_channels=3, latent_dim=256, image_size=256)
    enc, dec = build_networks(cfg)
    assert cfg.factor == 16 and cfg.latent_side(256) == 16
    with torch.no_grad():
        z = enc(torch.rand(1, 3, 256, 256))
        assert z.shape == (1, 256, 16, 16) and dec(z).shape == (1, 3, 256, 256)
    # taming-transformers' Encoder + quant_conv and post_quant_conv + Decoder at these sizes, counted from its code
    assert sum(p.numel() for p in enc.parameters()) == 29_363_968
    assert sum(p.numel() for p in dec.parameters()) == 42_515_587


def test_network_errors_are_one_line_and_name_the_problem():
    with pytest.raises(ValueError, match="not divisible by GroupNorm"):
        VQGANEncoder(3, ch=48, ch_mult=(1, 2), resolution=32, attn_resolutions=())
    with pytest.raises(ValueError, match="image size 60 is not divisible by the network's factor 8"):
        VQGANEncoder(3, resolution=60, **SMALL)
    with pytest.raises(ValueError, match=r"attn_resolutions \[5\]"):
        VQGANDecoder(3, resolution=32, **dict(SMALL, attn_resolutions=(5,)))


@pytest.mark.parametrize("layers", [1, 2, 3])
def test_discriminator_receptive_field_measured_by_gradient(layers):
    """The input pixels one central logit depends on form a square of receptive_field(layers) (70 for 3)."""
    torch.manual_seed(0)
    disc = PatchDiscriminator(3, 8, layers).eval()  # eval: BatchNorm does not mix positions through batch stats
    side = 160
    x = torch.rand(1, 3, side, side, requires_grad=True)
    out = disc(x)
    i, j = out.shape[-2] // 2, out.shape[-1] // 2
    out[0, 0, i, j].backward()
    touched = x.grad.abs().sum(dim=(0, 1)) > 0
    rows, cols = touched.any(1).nonzero().squeeze(1), touched.any(0).nonzero().squeeze(1)
    assert int(rows[-1] - rows[0] + 1) == receptive_field(layers)
    assert int(cols[-1] - cols[0] + 1) == receptive_field(layers)
    assert receptive_field(3) == 70


def test_discriminator_shape_and_init():
    torch.manual_seed(0)
    disc = PatchDiscriminator(3, 64, 3)
    assert disc(torch.rand(2, 3, 256, 256)).shape == (2, 1, 30, 30)  # pix2pix's 30x30 patch map at 256px
    convs = [m for m in disc.modules() if isinstance(m, torch.nn.Conv2d)]
    assert [c.out_channels for c in convs] == [64, 128, 256, 512, 1]
    assert [c.stride[0] for c in convs] == [2, 2, 2, 1, 1]
    assert all(c.bias is None for c in convs[1:4])
    w = torch.cat([c.weight.detach().flatten() for c in convs])
    assert abs(float(w.mean())) < 1e-3 and float(w.std()) == pytest.approx(0.02, rel=0.05)
    bn = [m for m in disc.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    assert all(float(b.bias.detach().abs().max()) == 0 for b in bn)
    assert float(torch.cat([b.weight.detach() for b in bn]).mean()) == pytest.approx(1.0, abs=0.01)
