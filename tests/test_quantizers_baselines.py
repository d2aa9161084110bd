"""The baselines' quantizers as the report runs them: SQ-VAE's latent scale (StochasticQuantizer) and the field's
VQ (VectorQuantizer with the k-means start, dead-code expiry and the rotation trick)."""
import pytest
import torch

from tests.helpers import DIM, NoHostSync, train_codebook_only
from vqwae.quantizers import StochasticQuantizer, VectorQuantizer

# ---- SQ-VAE: the latent scale its posterior assumes --------------------------------------------------


def test_stochastic_latent_gain_makes_the_quantizer_blind_to_the_encoders_scale():
    # sigma^2 >= 1 in latent units: at the paper's network's starting scale (~0.002) every posterior is uniform
    # and one code is everyone's nearest. latent_scale="data" fixes g = 1 / RMS on the first training batch.
    z = torch.randn(8, 8, 4, 4)
    outs = []
    for scale in (1.0, 0.002):
        torch.manual_seed(0)
        q = StochasticQuantizer(num_codes=32, dim=8, latent_scale="data").train()
        outs.append(q(z * scale))
        assert float(q.latent_gain) == pytest.approx(1 / (scale * float(z.pow(2).mean().sqrt())), rel=1e-5)
        q(z)  # fixed after the first batch
        assert float(q.latent_gain) == pytest.approx(1 / (scale * float(z.pow(2).mean().sqrt())), rel=1e-5)
    assert torch.allclose(outs[0].quantized * 0.002, outs[1].quantized, atol=1e-7)  # returned in z's units
    assert torch.equal(outs[0].indices, outs[1].indices)
    torch.manual_seed(0)
    raw = StochasticQuantizer(num_codes=32, dim=8, latent_scale="none").train()
    assert raw(z * 0.002).indices.unique().numel() == 1  # the failure the gain removes
    assert float(raw.latent_gain) == 1.0


def test_stochastic_gain_is_saved_and_old_checkpoints_load_as_before():
    q = StochasticQuantizer(num_codes=16, dim=8, latent_scale="data").train()
    q.eval()(torch.randn(2, 8, 2, 2) * 5)  # evaluation never sets the gain
    assert not bool(q.gain_initialized)
    q.train()(torch.randn(2, 8, 2, 2) * 5)
    fresh = StochasticQuantizer(num_codes=16, dim=8, latent_scale="data")
    fresh.load_state_dict(q.state_dict())
    assert float(fresh.latent_gain) == float(q.latent_gain) and bool(fresh.gain_initialized)
    old = {k: v for k, v in q.state_dict().items() if k not in ("latent_gain", "gain_initialized")}
    fresh = StochasticQuantizer(num_codes=16, dim=8, latent_scale="data")
    fresh.load_state_dict(old)  # saved before latent_scale existed: z quantized as it is
    assert float(fresh.latent_gain) == 1.0 and bool(fresh.gain_initialized)
    fresh.train()(torch.randn(2, 8, 2, 2) * 5)
    assert float(fresh.latent_gain) == 1.0  # and stays so


def test_stochastic_batch_scale_is_blind_to_the_encoders_scale_at_every_step():
    # latent_scale="batch": like batch norm, each training batch is quantized at unit RMS, so an encoder that
    # shrinks or grows its latents after the first batch changes nothing the method sees. Under a gain fixed on
    # the first batch ("data") shrunken latents sit at the codebook's centre: one code is everyone's nearest.
    first, later = torch.randn(8, 8, 4, 4), torch.randn(8, 8, 4, 4)
    runs = {}
    for scale in (1.0, 0.01, 100.0):
        torch.manual_seed(0)
        q = StochasticQuantizer(num_codes=32, dim=8, latent_scale="batch").train()
        q(first)
        torch.manual_seed(1)
        runs[scale] = q(later * scale)
    for scale in (0.01, 100.0):
        a, b = runs[1.0], runs[scale]
        assert torch.equal(a.indices, b.indices)
        assert torch.allclose(a.quantized * scale, b.quantized, rtol=1e-4, atol=1e-7)  # returned in z's units
        assert all(torch.allclose(a.losses[k], b.losses[k], rtol=1e-4) for k in a.losses)
    fixed = StochasticQuantizer(num_codes=32, dim=8, latent_scale="data").train()
    fixed(first)
    assert fixed(later * 0.01).indices.unique().numel() == 1
    assert runs[0.01].indices.unique().numel() > 8


def test_stochastic_batch_scale_evaluates_with_the_running_rms():
    q = StochasticQuantizer(num_codes=16, dim=8, latent_scale="batch").train()
    z = torch.randn(64, 8, 4, 4) * 3.0
    for _ in range(60):
        q(z)
    assert float(q.latent_gain) == pytest.approx(1 / float(z.pow(2).mean().sqrt()), rel=1e-4)
    q.eval()
    out = q(z)  # evaluation: the running gain, the nearest code in z's units
    assert torch.equal(out.indices, torch.cdist(q.flatten(z).reshape(-1, 8), q.codebook).argmin(-1).view(64, 4, 4))
    fresh = StochasticQuantizer(num_codes=16, dim=8, latent_scale="batch")
    fresh.load_state_dict(q.state_dict())
    assert torch.equal(fresh.eval()(z).indices, out.indices)


@pytest.mark.parametrize("latent_scale", ["data", "batch"])
def test_stochastic_training_step_never_syncs_with_the_host(monkeypatch, latent_scale):
    # The input check is an asynchronous device assert off the CPU (check_finite); on the CPU it reads.
    monkeypatch.setattr(StochasticQuantizer, "check_finite", staticmethod(lambda z: None))
    q = StochasticQuantizer(num_codes=16, dim=8, latent_scale=latent_scale).train()
    q(torch.randn(4, 8, 2, 2))  # "data": the first batch sets the gain (one host read)
    z = torch.randn(4, 8, 2, 2, requires_grad=True)
    with NoHostSync():
        out = q(z)
        out.loss.backward()
    assert z.grad is not None and q.embedding.grad is not None and q.log_var.grad is not None
    assert int(q.step) == 2 and q.temperature == pytest.approx(float(torch.exp(torch.tensor(-2e-5))))


# ---- the field's VQ: k-means start and dead-code expiry (VectorQuantizer(ema=True, init="kmeans", ...)) ----------
def test_kmeans_init_starts_the_codebook_at_the_first_batchs_clusters():
    torch.manual_seed(0)
    centres = torch.randn(8, DIM) * 4
    x = (centres[torch.randint(0, 8, (512,))] + 0.1 * torch.randn(512, DIM)).view(512, DIM, 1, 1)
    q = VectorQuantizer(num_codes=16, dim=DIM, ema=True, init="kmeans").train()  # 2 codes per cluster: no local optimum
    q(x)
    error = torch.cdist(centres, q.embedding.detach()).min(1).values  # every true centre found by some code
    assert error.max() < 1.0, error
    assert bool(q.codebook_initialized) and torch.allclose(q.ema_cluster_size.sum(), torch.tensor(512.0), atol=1e-3)
    before = q.embedding.detach().clone()
    q.train()(x)  # later batches do not redo the k-means (only the EMA moves the codes)
    assert torch.allclose(q.embedding, before, atol=0.1)


def test_a_dead_code_is_replaced_by_a_live_latent():
    torch.manual_seed(0)
    q = VectorQuantizer(num_codes=16, dim=DIM, ema=True, init="kmeans", dead_code_threshold=2).train()
    x = torch.randn(64, DIM, 1, 1)
    q(x)
    with torch.no_grad():  # starve code 3: far from every latent, no EMA count
        q.embedding[3] = 100.0
        q.ema_embed_sum[3] = 100.0 * 1e-3
        q.ema_cluster_size[3] = 1e-3
    q(x)
    latents = x.view(64, DIM)
    assert torch.cdist(q.embedding[3:4].detach(), latents).min() < 1e-5  # now one of the batch's latents
    assert q.ema_cluster_size[3] >= 2 - 1e-6


def test_the_fields_vq_leaves_no_dead_code_where_the_plain_ema_starves_them():
    torch.manual_seed(0)
    usage = train_codebook_only(VectorQuantizer(num_codes=16, dim=DIM, ema=True, init="kmeans",
                                                dead_code_threshold=2))
    assert int((usage == 0).sum()) == 0, usage


def test_expiry_needs_the_ema_codebook():
    with pytest.raises(ValueError, match="dead_code_threshold needs ema=True"):
        VectorQuantizer(num_codes=16, dim=DIM, dead_code_threshold=2)


def test_rotation_trick_keeps_the_codes_and_rotates_the_gradient_onto_the_latent():
    """The rotation trick (Fifty et al. 2025): the value is the codeword exactly; the decoder's gradient g reaches the
    latent z as R^T g, R the rotation of z's direction onto the code's scaled by ||q|| / ||z||: a gradient along the
    code's direction arrives along z's, scaled, where the copy-gradient trick hands it over unchanged."""
    torch.manual_seed(0)
    q = VectorQuantizer(num_codes=8, dim=DIM, ema=True, rotation_trick=True).train()
    z = torch.randn(4, DIM, 3, 3, requires_grad=True)
    before = q.embedding.detach().clone()  # the step's EMA moves the codebook after quantizing
    out = q(z)
    assert torch.equal(out.quantized, before[out.indices].movedim(-1, 1))
    codes = out.quantized.detach()
    (out.quantized * codes).sum().backward()  # the gradient on each quantized vector is its own code
    z_flat, code_flat, grad_flat = (t.movedim(1, -1).reshape(-1, DIM) for t in (z.detach(), codes, z.grad))
    expected = code_flat.norm(dim=-1, keepdim=True) ** 2 / z_flat.norm(dim=-1, keepdim=True) ** 2 * z_flat
    assert torch.allclose(grad_flat, expected, rtol=1e-4, atol=1e-5)
    copied = VectorQuantizer(num_codes=8, dim=DIM, ema=True).train()
    copied.load_state_dict(q.state_dict())
    z2 = z.detach().clone().requires_grad_(True)
    (copied(z2).quantized * codes).sum().backward()
    assert torch.allclose(z2.grad, codes)  # the copy: the code itself, whatever z's direction
