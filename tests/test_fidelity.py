"""Fidelity to the paper and the authors' code (issue #64): which parameter receives which gradient, term by term,
and the starts of the EMA codebook. Each test fails on the code before the fix it names."""
import pytest
import torch

from vqwae.ot.dual import DualSolver, semi_dual
from vqwae.ot.cost import squared_distances
from vqwae.quantizers import PaperWassersteinQuantizer, VectorQuantizer, WassersteinQuantizer
from vqwae.training import TrainConfig

DIM = 4


def _latents(b=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(b, DIM, 2, 2, generator=g).requires_grad_(True)


GRADIENT_CODEBOOKS = {
    "vqvae": lambda: VectorQuantizer(num_codes=8, dim=DIM),
    "paper-exact": lambda: PaperWassersteinQuantizer(num_codes=8, dim=DIM, num_positions=4, solver="exact",
                                                     codebook_init="normal"),
    "paper-semidiscrete": lambda: PaperWassersteinQuantizer(num_codes=8, dim=DIM, solver="semidiscrete"),
}


@pytest.mark.parametrize("name", list(GRADIENT_CODEBOOKS))
def test_the_decoders_gradient_never_reaches_a_gradient_trained_codebook(name):
    """z + sg(z_q - z): a backward of the decoder's input alone gives z the identity's gradient and the codebook none;
    the value is still the codewords exactly."""
    torch.manual_seed(0)
    q = GRADIENT_CODEBOOKS[name]().train()
    z = _latents()
    out = q(z)
    assert torch.equal(out.quantized, q.indices_to_latents(out.indices))
    out.quantized.pow(2).sum().backward()  # the decoder's loss, alone
    assert q.embedding.grad is None
    assert torch.allclose(z.grad, 2 * out.quantized.detach())


def test_vq_vaes_terms_each_move_only_their_own_parameter():
    """Backed up alone: the codebook term moves the codebook only, the commitment the latents only (beta = 0.25)."""
    q = VectorQuantizer(num_codes=8, dim=DIM).train()
    z = _latents()
    losses = q(z).losses
    losses["codebook"].backward(retain_graph=True)
    assert z.grad is None and q.embedding.grad.abs().sum() > 0
    q.embedding.grad = None
    losses["commitment"].backward()
    assert q.embedding.grad is None and z.grad.abs().sum() > 0


@pytest.mark.parametrize("solver", ["exact", "semidiscrete", "sinkhorn", "dual"])
def test_the_paper_quantizers_terms_each_move_what_the_paper_says(solver):
    """W (Eq. 7's second term) moves the latents, the codebook and pi; KL(pi || U) (its third) moves pi only."""
    torch.manual_seed(0)
    q = PaperWassersteinQuantizer(num_codes=8, dim=DIM, num_positions=4, solver=solver,
                                  codebook_init="normal").train()
    with torch.no_grad():
        q.beta.copy_(torch.randn_like(q.beta))  # a non-uniform pi: the KL has a gradient
    for seed in (1, 2):  # the potential's first steps (the semidiscrete one starts at 0: no pi gradient yet)
        q(_latents(seed=seed))
    z = _latents()
    losses = q(z).losses
    losses["ws"].backward(retain_graph=True)
    assert z.grad.abs().sum() > 0 and q.embedding.grad.abs().sum() > 0 and q.beta.grad.abs().sum() > 0
    z.grad = q.embedding.grad = q.beta.grad = None
    losses["kl"].backward()
    assert z.grad is None and q.embedding.grad is None and q.beta.grad.abs().sum() > 0


def test_the_shipped_quantizers_terms_each_move_what_they_say():
    """Backed up alone: W (the semi-dual, ``ws``) moves the latents and pi's logits, KL(pi || U) pi's logits only;
    the codebook is placed by the transport, never by a gradient."""
    torch.manual_seed(0)
    q = WassersteinQuantizer(num_codes=8, dim=DIM).train()
    with torch.no_grad():
        q.beta.copy_(torch.randn_like(q.beta))  # a non-uniform pi: the KL has a gradient
    for seed in (1, 2):  # the data start, then the potential's first step (it starts at 0: no pi gradient yet)
        q(_latents(seed=seed))
    z = _latents()
    losses = q(z).losses
    losses["ws"].backward(retain_graph=True)
    assert z.grad.abs().sum() > 0 and q.beta.grad.abs().sum() > 0 and q.embedding.grad is None
    z.grad = q.beta.grad = None
    losses["kl"].backward()
    assert z.grad is None and q.embedding.grad is None and q.beta.grad.abs().sum() > 0


def test_the_shipped_quantizers_codebook_takes_no_gradient_at_all():
    q = WassersteinQuantizer(num_codes=8, dim=DIM).train()
    out = q(_latents())
    (out.loss + out.quantized.sum()).backward()
    assert q.embedding.grad is None and not q.embedding.requires_grad


# ---- the EMA codebook's start ---------------------------------------------------------------------------------------
def test_an_unused_code_of_the_ema_codebook_keeps_its_place():
    """From the N(0, 1) start, a code no latent chose stays where it was after an update (counts start at 1 with the
    codeword as the sum; with a count of 0 it was divided by epsilon, to norms of ~1e5)."""
    torch.manual_seed(0)
    q = VectorQuantizer(num_codes=64, dim=DIM, ema=True).train()
    before = q.embedding.detach().clone()
    out = q(torch.randn(2, DIM, 1, 1) * 0.01)  # two latents: at most two codes used
    unused = torch.ones(64, dtype=torch.bool)
    unused[out.indices.flatten()] = False
    assert unused.sum() >= 62
    assert torch.allclose(q.embedding[unused], before[unused], rtol=1e-3, atol=1e-4)
    assert q.embedding.norm(dim=1).max() < 10


def test_kmeans_empty_clusters_keep_their_codeword_with_count_one():
    """Four distinct latents into eight clusters: the empty clusters keep a codeword (a latent) at count 1 and stay
    there through the next update instead of jumping to the origin."""
    torch.manual_seed(0)
    points = torch.randn(4, DIM) * 3
    x = points.repeat(8, 1).view(32, DIM, 1, 1)
    q = VectorQuantizer(num_codes=8, dim=DIM, ema=True, init="kmeans").train()
    q(x)  # the k-means start, then one EMA update (decay 0.99) in which the empty clusters hold no latent
    assert torch.allclose(q.ema_cluster_size.min(), torch.tensor(0.99))
    q(x)
    nearest_point = torch.cdist(q.embedding.detach(), points).min(1).values
    assert nearest_point.max() < 1e-3, nearest_point  # every code at one of the latents, none at the origin


# ---- the dual form as the authors run it -----------------------------------------------------------------------------
def test_the_dual_form_takes_eps_absolute_and_holds_phi_in_the_outer_loss():
    """S with eps as given (not relative to the batch's cost), and the codebook's gradient through the cost only:
    phi(c_k)'s values are held, as the authors' ``.detach()``."""
    torch.manual_seed(0)
    solver = DualSolver(groups=1, num_codes=8, shared=True, dim=DIM, epsilon=0.1)
    flat = torch.randn(16, 1, DIM)
    codebook = torch.randn(8, DIM, requires_grad=True)
    log_pi = torch.full((1, 8), -torch.log(torch.tensor(8.0)))
    value = solver(flat, codebook, log_pi, update=False).value
    value.backward()
    c = codebook.detach().clone().requires_grad_(True)
    cost = squared_distances(flat.transpose(0, 1), c)
    expected = semi_dual(cost, log_pi, solver.phi(codebook.detach()), 0.1).sum()
    expected.backward()
    assert torch.allclose(value, expected)
    assert torch.allclose(codebook.grad, c.grad, atol=1e-6)


def test_the_dual_forms_eps_defaults_to_the_authors_per_dataset():
    for dataset, eps in (("mnist", 0.1), ("cifar10", 0.01)):
        cfg = TrainConfig.resolve(preset="paper", solver="dual", dataset=dataset)
        assert cfg.quantizer_config(64)[1].dual_epsilon == eps
    with pytest.raises(ValueError, match="dual_epsilon must be > 0"):
        PaperWassersteinQuantizer(num_codes=8, dim=DIM, solver="dual", dual_epsilon=0.0)
