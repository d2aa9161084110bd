"""The quantizer contract (README's API) and the paper's central claim on a toy problem."""
import pytest
import torch

from vqwae.quantizers import (PaperWassersteinQuantizer, QuantizerOutput, StochasticQuantizer, VectorQuantizer,
                              WassersteinQuantizer)

from tests.helpers import DIM, mixture, train_codebook_only

ALL = [
    lambda: PaperWassersteinQuantizer(num_codes=32, dim=8, num_positions=16, solver="exact"),
    lambda: PaperWassersteinQuantizer(num_codes=32, dim=8, num_positions=16, solver="sinkhorn"),
    lambda: PaperWassersteinQuantizer(num_codes=32, dim=8, num_positions=16, solver="dual"),
    lambda: PaperWassersteinQuantizer(num_codes=32, dim=8, num_positions=None, solver="sinkhorn"),
    lambda: WassersteinQuantizer(num_codes=32, dim=8, num_positions=16),  # the defaults
    lambda: WassersteinQuantizer(num_codes=32, dim=8),  # a shared pi
    lambda: PaperWassersteinQuantizer(num_codes=32, dim=8, num_positions=16, codebook_init="normal"),
    lambda: VectorQuantizer(num_codes=32, dim=8),
    lambda: VectorQuantizer(num_codes=32, dim=8, ema=True),
    lambda: StochasticQuantizer(num_codes=32, dim=8),
]


@pytest.mark.parametrize("make", ALL)
def test_output_contract(make):
    q = make()
    z = torch.randn(6, 8, 4, 4, requires_grad=True)
    out = q(z)
    assert isinstance(out, QuantizerOutput)
    assert out.quantized.shape == z.shape and out.indices.shape == (6, 4, 4) and out.indices.dtype == torch.long
    assert out.loss.dim() == 0 and out.losses
    assert torch.allclose(out.loss, sum(out.losses.values()))
    assert 1.0 <= float(out.perplexity) <= 32
    assert q.codebook.shape == (32, 8)
    out.loss.backward()
    assert z.grad is not None and torch.isfinite(z.grad).all()
    # eval: the decoder input is exactly the codewords of the indices
    q.eval()
    with torch.no_grad():
        out = q(z)
    assert torch.equal(q.indices_to_latents(out.indices), out.quantized)
    # nearest code
    flat = z.detach().permute(0, 2, 3, 1).reshape(-1, 8)
    assert torch.equal(out.indices.reshape(-1), torch.cdist(flat, q.codebook.detach()).argmin(-1))


@pytest.mark.parametrize("make", ALL)
def test_state_dict_round_trip(make):
    torch.manual_seed(1)
    q = make()
    q(torch.randn(4, 8, 4, 4))  # one training step of state (EMA, warm start, potential, temperature)
    torch.manual_seed(2)
    r = make()
    r.load_state_dict(q.state_dict())
    q.eval(), r.eval()
    z = torch.randn(4, 8, 4, 4)
    assert torch.equal(q(z, compute_loss=True).loss, r(z, compute_loss=True).loss)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("make", [ALL[i] for i in (0, 2, 4, 7, 9)])  # exact, dual, default, VQ, SQ
def test_autocast_keeps_quantization_in_float32(make, dtype):
    q = make().eval()  # eval: no codebook update between the two calls compared
    z = torch.randn(4, 8, 4, 4).to(dtype)
    with torch.autocast("cpu", dtype=dtype):
        out = q(z, compute_loss=True)
    assert out.quantized.dtype == dtype and out.quantized.shape == z.shape
    assert out.loss.dtype == torch.float32 and torch.isfinite(out.loss)
    ref = q(z.float(), compute_loss=True)
    assert torch.equal(out.indices, ref.indices)


def test_bad_input_messages():
    q = WassersteinQuantizer(num_codes=16, dim=8, num_positions=4)
    with pytest.raises(ValueError, match=r"shape \(B, D, \*positions\), got shape \(2, 8\)"):
        q(torch.randn(2, 8))
    with pytest.raises(ValueError, match="5 features on their second .* codebook dim is 8"):
        q(torch.randn(2, 5, 2, 2))
    with pytest.raises(ValueError, match="NaN or Inf"):
        q(torch.full((2, 8, 2, 2), float("nan")))
    with pytest.raises(ValueError, match="9 positions .* num_positions=4"):
        q(torch.randn(2, 8, 3, 3))
    with pytest.raises(ValueError, match="'exact', 'sinkhorn', 'dual'"):
        PaperWassersteinQuantizer(num_codes=16, dim=8, solver="emd")
    with pytest.raises(ValueError, match="'uniform', 'peaked', 'gaussian'"):
        WassersteinQuantizer(num_codes=16, dim=8, pi_init="flat")
    with pytest.raises(ValueError, match=r"\[0, 16\)"):
        q.indices_to_latents(torch.full((1, 2, 2), 16))


def test_pi_shapes_init_and_fixed():
    assert WassersteinQuantizer(num_codes=16, dim=4, num_positions=9).pi.shape == (9, 16)
    shared = WassersteinQuantizer(num_codes=16, dim=4, num_positions=None)
    assert shared.pi.shape == (1, 16)
    assert torch.allclose(shared.pi, torch.full((1, 16), 1 / 16))
    peaked = WassersteinQuantizer(num_codes=16, dim=4, pi_init="peaked", learn_pi=False)
    assert "beta" not in dict(peaked.named_parameters()) and "beta" in dict(peaked.named_buffers())
    assert peaked.pi[0].argmax() in (7, 8) and peaked.pi[0].max() > 4 * peaked.pi[0].min()
    out = peaked(torch.randn(4, 4, 8, 8))
    assert "kl" not in out.losses


def test_vector_quantizer_beta_placement():
    z = torch.randn(4, 8, 2, 2)
    paper = VectorQuantizer(num_codes=16, dim=8)
    legacy = VectorQuantizer(num_codes=16, dim=8, legacy_beta=True)
    legacy.load_state_dict(paper.state_dict())
    a, b = paper(z).losses, legacy(z).losses
    assert torch.allclose(a["commitment"], 0.25 * b["commitment"])
    assert torch.allclose(b["codebook"], 0.25 * a["codebook"])


def test_stochastic_quantizer_temperature_and_eval_argmax():
    q = StochasticQuantizer(num_codes=16, dim=8, temperature_decay=0.1)
    z = torch.randn(2, 8, 2, 2)
    t0 = q.temperature
    q(z)
    assert q.temperature < t0
    q.eval()
    out = q(z)
    assert torch.equal(out.quantized, q.indices_to_latents(out.indices))


# ---- the paper's central claim on a toy problem ------------------------------------------------------
# Latents are fixed, drawn from a Gaussian mixture in R^8 whose components overlap, offset from the origin
# where the N(0, 1) codebook starts (as encoder outputs usually are); only the quantizer's parameters learn.
# Measured limits: with tight, far-apart clusters and a very sharp pi, nearest-code (Voronoi) cells differ
# from the OT cells and usage follows pi less closely (correlation 0.42 in 2-D, clusters std 0.6 at distance
# 8, Laplace pi of scale K/16); in 2-D plain VQ leaves no code dead, collapse needs higher dimension.

# The paper's mechanism: an N(0, 1) codebook learned by gradient steps on the WS term (PaperWassersteinQuantizer).
PAPER_CODEBOOK = dict(codebook_init="normal")


def perplexity(usage):
    p = usage[usage > 0] / usage.sum()
    return float(torch.exp(-(p * p.log()).sum()))


@pytest.mark.parametrize("pi_init", ["peaked", "gaussian"])
def test_fixed_pi_controls_code_usage(pi_init):
    torch.manual_seed(0)
    q = PaperWassersteinQuantizer(num_codes=16, dim=DIM, num_positions=1, solver="exact", ws_weight=1.0,
                                  pi_init=pi_init, learn_pi=False, **PAPER_CODEBOOK)
    usage = train_codebook_only(q)
    corr = torch.corrcoef(torch.stack([usage / usage.sum(), q.pi[0]]))[0, 1]
    assert corr >= 0.9, (corr, usage, q.pi[0])  # measured: 0.911 peaked, 0.929 gaussian


@pytest.mark.parametrize("pi_init", ["peaked", "gaussian"])
def test_quantize_transport_makes_usage_follow_a_fixed_pi_with_the_shipped_solver(pi_init):
    """quantize="transport": each latent gets its code under the semidiscrete map, argmin ||z - c_k||^2 - g_k, so
    the usage is the transport cells' masses, pi at the potential's optimum; the nearest code's usage lags."""
    corr = {}
    for quantize in ("nearest", "transport"):
        torch.manual_seed(0)
        q = WassersteinQuantizer(num_codes=16, dim=DIM, num_positions=1, pi_init=pi_init, learn_pi=False,
                                 quantize=quantize)
        usage = train_codebook_only(q)
        corr[quantize] = float(torch.corrcoef(torch.stack([usage / usage.sum(), q.pi[0]]))[0, 1])
    # measured, nearest / transport: peaked 0.836 / 0.992, gaussian 0.829 / 0.963
    assert corr["transport"] >= 0.95 and corr["transport"] > corr["nearest"] + 0.05, corr


def test_quantize_transport_uses_the_solvers_map_in_training_and_at_eval():
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    q = WassersteinQuantizer(num_codes=16, dim=DIM, pi_init="peaked", learn_pi=False, quantize="transport",
                             channel_last=True)
    for _ in range(5):
        q(mixture(256, gen)[:, None])  # the codebook drawn, the potential stepped
    x = mixture(64, gen)[:, None]  # (B, 1, D)

    def power_cells():
        costs = torch.cdist(x[:, 0], q.embedding).pow(2) - q.solver.code_potential()
        return costs.argmin(-1)[:, None]

    assert q.solver.code_potential().abs().sum() > 0
    expected = power_cells()  # training: the map of the potential before this step's ascent
    assert torch.equal(q(x).indices, expected)
    q.eval()
    out = q(x)
    assert torch.equal(out.indices, power_cells()) and not torch.equal(out.indices, q.nearest(x))
    assert torch.equal(out.quantized, q.indices_to_latents(out.indices))
    with pytest.raises(ValueError, match="quantize='transport' needs solver='semidiscrete'"):
        PaperWassersteinQuantizer(num_codes=16, dim=DIM, quantize="transport", solver="exact")


@pytest.mark.parametrize("positions", [None, 4])
def test_fit_transport_converges_the_map_to_pi_with_the_latents_held(positions):
    # a codebook drawn from the data and a potential barely stepped; fit_transport then solves the map on the held
    # latents: its cells' masses approach pi, on those latents and on fresh ones from the same distribution
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    m = positions or 1
    q = WassersteinQuantizer(num_codes=16, dim=DIM, pi_init="gaussian", learn_pi=False, quantize="transport",
                             channel_last=True, num_positions=positions)
    q(mixture(64 * m, gen).view(64, m, DIM))  # draws the codebook from the data; one ascent step
    held = mixture(4000 * m, gen).view(4000, m, DIM)
    fresh = mixture(4000 * m, gen).view(4000, m, DIM)

    def tv(z):
        mass = torch.bincount(q.transport_map(z).reshape(-1), minlength=16) / z[..., 0].numel()
        return float(0.5 * (mass - q.pi[0]).abs().sum())

    before_fresh = tv(fresh)
    fit = q.fit_transport(held, 300, generator=torch.Generator().manual_seed(0))
    assert fit["steps"] == 300 and fit["latents"] == 4000 * m
    assert fit["tv_before"] > 0.15 and fit["tv_after"] < 0.05, fit  # measured: 0.36 -> 0.028 (shared), 0.23 -> 0.020 (4 positions)
    assert tv(fresh) < 0.06 < before_fresh, (tv(fresh), before_fresh)


def test_fit_steps_needs_the_semidiscrete_solver():
    from vqwae.quantizers import VQWAEOptions

    with pytest.raises(ValueError, match="fit_steps needs solver='semidiscrete'"):
        VQWAEOptions(fit_steps=10, solver="exact", codebook_update="gradient")
    with pytest.raises(ValueError, match="fit_transport needs solver='semidiscrete'"):
        PaperWassersteinQuantizer(num_codes=16, dim=DIM, solver="exact").fit_transport(torch.randn(8, DIM, 2, 2), 5)


def test_uniform_pi_uses_the_whole_codebook_where_vq_vae_leaves_dead_codes():
    torch.manual_seed(0)
    wae = PaperWassersteinQuantizer(num_codes=16, dim=DIM, num_positions=1, solver="exact", ws_weight=1.0,
                                    **PAPER_CODEBOOK)
    assert perplexity(train_codebook_only(wae)) >= 0.8 * 16  # measured: 14.67

    torch.manual_seed(0)
    usage_vq = train_codebook_only(VectorQuantizer(num_codes=16, dim=DIM))
    assert int((usage_vq == 0).sum()) >= 3, usage_vq  # measured: 4 dead codes, perplexity 11.2


def test_no_code_is_left_dead_where_vq_vae_ema_starves_codes():
    # The transport codebook on the same toy problem, from the same N(0, 1) codebook offset from the mixture: VQ-VAE's
    # EMA moves only codes that are nearest to some latent; the transport map feeds every code its share.
    torch.manual_seed(0)
    wae = WassersteinQuantizer(num_codes=16, dim=DIM, num_positions=1)
    wae.set_codebook(torch.randn(16, DIM))
    usage = train_codebook_only(wae)
    assert int((usage == 0).sum()) == 0 and perplexity(usage) >= 0.9 * 16, usage

    torch.manual_seed(0)
    usage_vq = train_codebook_only(VectorQuantizer(num_codes=16, dim=DIM, ema=True))
    # measured: 6 dead codes (14 before the counts started at 1, issue #64: then an unused code was thrown to ~1e5)
    assert int((usage_vq == 0).sum()) >= 4, usage_vq


def test_pull_scales_only_the_ws_gradient_on_the_latents():
    """pull weighs what the WS term sends to the latents (the encoder); the loss's value, the gradient on pi and the
    straight-through path to the decoder are those of pull 1, and so is every state the step moves."""
    grads = {}
    for pull in (1.0, 0.1):
        torch.manual_seed(0)
        q = WassersteinQuantizer(num_codes=16, dim=8, num_positions=4, pull=pull).train()
        z = torch.randn(6, 8, 2, 2, requires_grad=True)
        out = q(z)
        out.losses["ws"].backward()
        grads[pull] = (out.losses["ws"].detach(), z.grad.clone(), q.beta.grad.clone(), q.embedding.detach().clone())
        z2 = z.detach().clone().requires_grad_(True)
        q(z2).quantized.sum().backward()
        assert torch.equal(z2.grad, torch.ones_like(z2))
    (v1, z1, b1, c1), (v2, z2_, b2, c2) = grads[1.0], grads[0.1]
    assert torch.equal(v1, v2) and z1.abs().sum() > 0
    assert torch.allclose(z2_, 0.1 * z1, rtol=1e-5, atol=1e-10)
    assert torch.allclose(b1, b2) and torch.equal(c1, c2)


@pytest.mark.parametrize("images, codes, expected", [(32, 64, 1.0), (16, 64, 1.0), (8, 256, 0.02 ** 0.6),
                                                     (2, 256, 0.02), (1, 256, 0.02)])
def test_pull_none_follows_the_latents_per_code(images, codes, expected):
    """pull=None: from the step's latents per code r (16 latents per image here): 1 from r = 4, 0.02 from r = 1/8
    down, log-log straight between (r = 1/2, three fifths of the way down in log r: 0.02^0.6), and the WS gradient on the
    latents is that of the same explicit pull."""
    from vqwae.quantizers.wasserstein_options import latents_per_code_pull

    assert latents_per_code_pull(16 * images, codes) == pytest.approx(expected)
    grads = []
    for pull in (None, expected):
        torch.manual_seed(0)
        q = WassersteinQuantizer(num_codes=codes, dim=4, pull=pull, channel_last=False).train()
        z = torch.randn(images, 4, 4, 4, requires_grad=True)
        q(z)  # the data start
        q(z).losses["ws"].backward()
        grads.append(z.grad.clone())
    assert grads[0].abs().sum() > 0 and torch.allclose(grads[0], grads[1], rtol=1e-6, atol=0)


def test_pull_none_counts_the_latents_of_every_rank_under_ddp(monkeypatch):
    """Under DDP with per-rank batches the codebook's update sees every rank's latents, so the rule reads this rank's
    count times the world size (no collective): 64 latents at K = 256 pull at r = 1/4 alone and at r = 4 (full) as
    one rank of 16."""
    import torch.distributed as dist
    from vqwae.quantizers.wasserstein_options import latents_per_code_pull

    q = WassersteinQuantizer(num_codes=256, dim=4, channel_last=True)  # pull=None, the default
    flat = torch.randn(4, 16, 4)

    def pulled():
        z = flat.clone().requires_grad_(True)
        q._pulled(z, None).sum().backward()
        return z.grad.unique().item()

    assert pulled() == pytest.approx(latents_per_code_pull(64, 256)) and pulled() < 0.05
    monkeypatch.setattr(q.solver, "per_rank_batches", lambda: True)
    monkeypatch.setattr(dist, "get_world_size", lambda *a, **k: 16)
    assert pulled() == 1.0


def test_with_a_fixed_pi_the_quantizer_is_scale_equivariant():
    """Latents c times larger (a host whose encoder ends c times larger) give the same codes, a codebook c times
    larger and a WS gradient on the latents c times larger, at every step of training (data start, potential,
    transport codebook): so inside such a host, whose decoder's gradient is c times smaller, the pull on the
    encoder weighs c^2 times more against the reconstruction (docs/lab/40-47.md#sequence-3000-pull-rms)."""
    c = 10.0
    qs = {}
    for scale in (1.0, c):
        torch.manual_seed(0)
        qs[scale] = WassersteinQuantizer(num_codes=32, dim=8, channel_last=True, learn_pi=False).train()
    g = torch.Generator().manual_seed(1)
    for step in range(30):
        z = torch.randn(8, 16, 8, generator=g) * (1 + step / 10)  # latents that grow: the codebook follows
        outs, grads = {}, {}
        for scale, q in qs.items():
            torch.manual_seed(step)  # the same random draws (the data start, dead cells' splits)
            zz = (scale * z).requires_grad_(True)
            outs[scale] = q(zz)
            outs[scale].loss.backward()
            grads[scale] = zz.grad
        assert torch.equal(outs[1.0].indices, outs[c].indices), step
        torch.testing.assert_close(grads[c], c * grads[1.0], rtol=1e-4, atol=1e-5 * c * grads[1.0].abs().max().item())
    torch.testing.assert_close(qs[c].embedding, c * qs[1.0].embedding, rtol=1e-4, atol=1e-7)



def test_diagnostics_read_the_transport_against_pi_and_its_sampling_floor():
    """diagnostics(): after fit_transport the map's cells hold pi as closely as the sample can tell (within 2x the
    floor of exact draws from pi), its W estimate is a lower bound of exact OT's near its value, and a uniform pi
    leaves no code dead; a solver without a map reports no transport fields."""
    from vqwae.quantizers import diagnostics

    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    q = WassersteinQuantizer(num_codes=16, dim=DIM, channel_last=True)
    q(mixture(512, gen)[:, None])  # the data start
    held = mixture(4000, gen)[:, None]
    q.fit_transport(held, 300, generator=torch.Generator().manual_seed(0))
    d = diagnostics(q.eval(), held, generator=torch.Generator().manual_seed(1))
    assert d.tv_cells <= 2 * d.tv_floor, d
    assert 0.9 < d.w_ratio <= 1.0 + 1e-6 and d.dead_codes == 0 and d.perplexity > 0.8 * 16, d
    assert 0 <= d.cells_disagree < 0.5
    paper = PaperWassersteinQuantizer(num_codes=16, dim=DIM, channel_last=True, solver="exact")
    p = diagnostics(paper, held)
    assert p.tv_cells is None and p.w_ratio is None and p.cells_disagree is None and p.tv_nearest > 0


def test_a_shared_pis_ws_term_is_the_batchs_w_times_the_positions_of_a_sample():
    """The convention of ``ws_weight`` with one shared pi (issue #82): the same latents as B samples of M positions
    or as B x M samples of one position pose the same transport problem (pooled latents against pi), and the WS term
    of the first is M times the second's, so lambda means what it means with one pi per position (sum over m). The
    authors' global exact form takes the batch's W once (x1) and their dual form W / B."""
    import copy

    from vqwae.quantizers import WassersteinQuantizer

    b, d, m = 4, 8, 16
    z = torch.randn(b, d, m)
    torch.manual_seed(0)
    q = WassersteinQuantizer(num_codes=32, dim=d).train()
    q(torch.randn(b, d, m))  # the data start, so both see the same codebook and potential
    one = copy.deepcopy(q)
    as_positions = q(z).losses["ws"]
    as_samples = one(z.permute(0, 2, 1).reshape(b * m, d, 1)).losses["ws"]
    assert torch.allclose(as_positions, m * as_samples, rtol=1e-5), (as_positions, as_samples)
