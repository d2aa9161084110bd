"""The lookup features (``vqwae.quantizers.Lookup``): a low-dimensional search through learned projections, and
l2-normalised codes whose squared Euclidean cost is the cosine cost (ViT-VQGAN's factorized and l2-normalized codes)."""
import pytest
import torch
import torch.nn.functional as F

from vqwae.models import NetworkConfig, VQAutoencoder
from vqwae.models.networks import build_networks
from vqwae.quantizers import Lookup, VectorQuantizer, WassersteinQuantizer


def _wasserstein(d=4, k=16, **o):
    return WassersteinQuantizer(num_codes=k, dim=d, channel_last=True, **o)


def test_the_search_runs_in_d_dimensions_and_the_decoder_gets_d_features_back():
    torch.manual_seed(0)
    q = Lookup(_wasserstein(d=4), dim=32)
    z = torch.randn(6, 20, 32, requires_grad=True)
    out = q(z)
    assert q.codebook.shape == (16, 4) and out.quantized.shape == (6, 20, 32) and out.indices.shape == (6, 20)
    (out.loss + out.quantized.square().mean()).backward()
    # the decoder's gradient and the WS term both reach the latents (through project_in) and both projections learn
    assert z.grad.abs().sum() > 0
    assert q.project_in.weight.grad.abs().sum() > 0 and q.project_out.weight.grad.abs().sum() > 0
    q.eval()
    with torch.no_grad():
        out = q(z)
    torch.testing.assert_close(q.indices_to_latents(out.indices), out.quantized)


def test_the_indices_are_the_nearest_codes_of_the_projected_latents():
    torch.manual_seed(1)
    q = Lookup(VectorQuantizer(num_codes=8, dim=3, channel_last=True), dim=12).eval()
    z = torch.randn(4, 10, 12)
    with torch.no_grad():
        out = q(z)
        h = q.project_in(z)
    expected = torch.cdist(h.reshape(-1, 3), q.codebook).argmin(1).view(4, 10)
    assert torch.equal(out.indices, expected)


def test_cosine_codes_and_latents_lie_on_the_sphere_and_the_nearest_code_is_the_most_similar():
    torch.manual_seed(2)
    q = Lookup(_wasserstein(d=8, k=32), dim=8, cosine=True)  # cosine alone: no projection
    assert isinstance(q.project_in, torch.nn.Identity)
    opt = torch.optim.Adam(q.parameters(), lr=1e-2)
    for _ in range(5):  # training moves the codes to barycentres inside the ball; each call puts them back
        out = q(torch.randn(16, 30, 8) * 3)
        opt.zero_grad()
        out.loss.backward()
        opt.step()
    q.eval()
    z = torch.randn(16, 30, 8) * 3
    with torch.no_grad():
        out = q(z)
    torch.testing.assert_close(q.q.codebook.norm(dim=-1), torch.ones(32))
    torch.testing.assert_close(out.quantized.norm(dim=-1), torch.ones(16, 30))
    similarity = F.normalize(z, dim=-1) @ q.codebook.t()
    assert torch.equal(out.indices, similarity.argmax(-1))


def test_a_gradient_trained_codebook_is_projected_back_onto_the_sphere():
    torch.manual_seed(3)
    q = Lookup(VectorQuantizer(num_codes=8, dim=4, channel_last=True), dim=16, cosine=True)
    opt = torch.optim.SGD(q.parameters(), lr=0.5)
    for _ in range(3):
        out = q(torch.randn(4, 10, 16))
        opt.zero_grad()
        out.loss.backward()
        opt.step()  # leaves the sphere
    assert not torch.allclose(q.q.codebook.norm(dim=-1), torch.ones(8))
    q(torch.randn(4, 10, 16))
    torch.testing.assert_close(q.q.codebook.norm(dim=-1), torch.ones(8))


def test_channel_first_latents_and_a_mask_go_through_as_the_inner_quantizer_takes_them():
    torch.manual_seed(4)
    q = Lookup(WassersteinQuantizer(num_codes=16, dim=4), dim=24)  # channel-first (B, D, H, W)
    out = q(torch.randn(3, 24, 5, 5))
    assert out.quantized.shape == (3, 24, 5, 5) and out.indices.shape == (3, 5, 5)
    assert q.indices_to_latents(out.indices).shape == (3, 24, 5, 5)
    seq = Lookup(_wasserstein(d=4), dim=24)
    mask = torch.rand(3, 7) > 0.3
    assert seq(torch.randn(3, 7, 24), mask).quantized.shape == (3, 7, 24)


def test_bad_input_is_refused_in_one_line():
    with pytest.raises(ValueError, match="dim must be an int >= the quantizer's dim"):
        Lookup(_wasserstein(d=8), dim=4)
    with pytest.raises(TypeError, match="vqwae quantizer"):
        Lookup(torch.nn.Linear(2, 2), dim=4)
    with pytest.raises(ValueError, match="have 16 features, but the lookup takes dim = 32"):
        Lookup(_wasserstein(d=4), dim=32)(torch.randn(2, 5, 16))


def test_an_autoencoder_with_a_lookup_saves_and_loads_bit_identically(tmp_path):
    torch.manual_seed(5)
    network = NetworkConfig(in_channels=1)
    enc, dec = build_networks(network)
    q = Lookup(WassersteinQuantizer(num_codes=16, dim=16), dim=network.latent_dim, cosine=True)
    model = VQAutoencoder(enc, q, dec, network)
    model(torch.rand(4, 1, 32, 32))  # one training call: the data start and a transport step
    model.save_pretrained(tmp_path)
    loaded = VQAutoencoder.from_pretrained(tmp_path)
    assert isinstance(loaded.quantizer, Lookup) and loaded.quantizer.cosine
    for k, v in model.state_dict().items():
        assert torch.equal(v, loaded.state_dict()[k]), k


def test_each_gradient_lands_where_its_term_says():
    """The quantizer's loss alone (the WS term and the KL, on the projected latents) reaches the latents, project_in
    and pi's logits, never project_out or the codebook (placed by transport); the decoder's term alone reaches
    project_out, project_in and the latents (straight-through), not pi."""
    torch.manual_seed(6)
    q = Lookup(_wasserstein(d=4), dim=32, cosine=True)
    z = torch.randn(6, 20, 32, requires_grad=True)
    for _ in range(3):  # the potential starts at 0 and pi uniform: pi's gradient is 0 on the first call
        q(z.detach())
    q(z).loss.backward()
    assert z.grad.abs().sum() > 0 and q.project_in.weight.grad.abs().sum() > 0 and q.q.beta.grad.abs().sum() > 0
    assert q.project_out.weight.grad is None and q.q.codebook.grad is None
    q.zero_grad(set_to_none=True)
    z.grad = None
    q(z).quantized.square().mean().backward()
    assert z.grad.abs().sum() > 0 and q.project_in.weight.grad.abs().sum() > 0
    assert q.project_out.weight.grad.abs().sum() > 0 and q.q.beta.grad is None
