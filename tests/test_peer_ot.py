"""The two optimal-transport peers of ``benchmarks/peer_ot.py`` do what their papers say, on toys: OptVQ (Zhang et
al. 2024) assigns a batch by Sinkhorn with uniform marginals, so it uses every code and escapes a start where the
nearest-code VQ collapses; Wasserstein VQ (Fang et al. 2025) adds the closed-form Gaussian W2 between a queue of
latents and the codebook, which pulls the codebook's mean and covariance onto the latents'. The toys train the
codebook alone (Adam on the quantizer's loss, the latents fixed). A few seconds in all, on one thread."""
from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from peer_ot import OptVQ, WassersteinVQ, gaussian_w2_squared  # noqa: E402

K, D, N = 64, 8, 2048


def _train_codebook(q: torch.nn.Module, z: torch.Tensor, steps: int, lr: float = 3e-2) -> torch.Tensor:
    """Codebook-only training on fixed latents; the indices of the last step."""
    opt = torch.optim.Adam(q.parameters(), lr=lr)
    for _ in range(steps):
        _, idx, loss = q(z)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return idx


def _nearest_usage(codebook: torch.Tensor, z: torch.Tensor) -> int:
    with torch.no_grad():
        return int(torch.cdist(z.reshape(-1, z.shape[-1]), codebook).argmin(1).unique().numel())


def _gaussian_latents(seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(1, N, D, generator=g)


def _shifted_codebook(seed: int = 1, offset: float = 5.0) -> torch.Tensor:
    """A bad start: every code in a tight cluster far from the data."""
    g = torch.Generator().manual_seed(seed)
    return 0.1 * torch.randn(K, D, generator=g) + offset


def _set_optvq_codes(q: OptVQ, codes: torch.Tensor) -> None:
    with torch.no_grad():
        q.proj.weight.copy_(torch.eye(q.code_dim))
        q.proj.bias.zero_()
        q.embedding.copy_(codes)


# --------------------------------------------------------------------------------------------- both modules
@pytest.mark.parametrize("make", [lambda: OptVQ(K, D), lambda: WassersteinVQ(K, D)], ids=["OptVQ", "WassersteinVQ"])
def test_shapes_and_the_straight_through_gradient(make):
    torch.manual_seed(0)
    q = make()
    z = torch.randn(3, 10, D, requires_grad=True)
    out, idx, loss = q(z)
    assert out.shape == z.shape and out.dtype == torch.float32
    assert idx.shape == (3, 10) and idx.dtype == torch.long and 0 <= int(idx.min()) and int(idx.max()) < K
    assert loss.dim() == 0 and q.num_codes == K and q.codebook.shape == (K, D)
    assert torch.allclose(out, q.codebook[idx].detach(), atol=1e-6)  # the forward value is the chosen code
    upstream = torch.randn_like(z)
    (grad,) = torch.autograd.grad((out * upstream).sum(), z)
    assert torch.equal(grad, upstream)  # straight-through: the decoder's gradient reaches z unchanged
    loss.backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in q.parameters())


@pytest.mark.parametrize("make", [lambda: OptVQ(K, D), lambda: WassersteinVQ(K, D)], ids=["OptVQ", "WassersteinVQ"])
def test_padding_changes_nothing_about_the_real_tokens(make):
    """A (B, N) mask: the padded batch gives the real tokens the codes, outputs and loss of the real tokens alone
    (OptVQ: no transport mass on padding; Wasserstein VQ: no queue weight), however large the padding."""
    torch.manual_seed(0)
    padded, alone = make(), make()
    alone.load_state_dict(padded.state_dict())
    z = torch.randn(4, 12, D)
    mask = torch.rand(4, 12) < 0.6
    z = torch.where(mask[..., None], z, 100.0 * torch.randn_like(z))
    out_p, idx_p, loss_p = padded(z, mask)
    out_a, idx_a, loss_a = alone(z[mask][None])
    assert torch.equal(idx_p[mask], idx_a[0])
    assert torch.allclose(out_p[mask], out_a[0]) and torch.allclose(loss_p, loss_a, rtol=1e-5)


# ------------------------------------------------------------------------------------------------------ OptVQ
def test_optvq_plan_has_uniform_marginals():
    """Sinkhorn-Knopp with uniform marginals: each real latent's row sums to 1/N exactly (the last step), the codes'
    columns approach 1/K as the iterations grow (the paper's 5 already within a factor 2)."""
    torch.manual_seed(0)
    q = OptVQ(K, D)
    z = _gaussian_latents()
    spread = {}
    for iters in (5, 20, 100):
        q.n_iters = iters
        plan = q.plan(z)
        assert torch.allclose(plan.sum(1), torch.full((N,), 1.0 / N), rtol=1e-4)
        cols = plan.sum(0) * K  # 1 where uniform
        spread[iters] = (float(cols.min()), float(cols.max()))
    assert 0.5 < spread[5][0] and spread[5][1] < 2.0, spread
    assert 0.95 < spread[20][0] and spread[20][1] < 1.05 and 0.999 < spread[100][0] and spread[100][1] < 1.001, spread


def test_optvq_plan_is_the_log_domain_sinkhorn_of_the_normalised_distances():
    """The kernel-domain iterations (row-stabilised, as fast as the authors') give the plan of Sinkhorn-Knopp
    written plainly in float64 log-domain on the same normalised distances, padding included."""
    torch.manual_seed(0)
    q = OptVQ(K, D, n_iters=7)
    z = _gaussian_latents()[:, :256]
    mask = torch.rand(1, 256) < 0.7
    plan = q.plan(z, mask).double()
    flat, real = z.reshape(-1, D).double(), mask.reshape(-1)
    codes = q.codebook.detach().double()
    dist = torch.cdist(flat[real], codes)
    cost = (dist - dist.mean()) / dist.std()
    log_kernel = -q.epsilon * (cost - cost.min())
    log_u, log_v = torch.zeros(int(real.sum()), dtype=torch.float64), torch.zeros(K, dtype=torch.float64)
    for _ in range(q.n_iters):
        log_v = -math.log(K) - torch.logsumexp(log_kernel + log_u[:, None], 0)
        log_u = -math.log(len(log_u)) - torch.logsumexp(log_kernel + log_v[None, :], 1)
    expected = (log_kernel + log_u[:, None] + log_v[None, :]).exp()
    assert torch.equal(plan[~real], torch.zeros_like(plan[~real]))
    torch.testing.assert_close(plan[real], expected, rtol=1e-3, atol=1e-9)


def test_optvq_uses_every_code_after_codebook_training():
    """On Gaussian latents the transport assignment uses (nearly) every code, its plan's code marginals stay near
    uniform, and the trained codebook serves most codes even by nearest code."""
    torch.manual_seed(0)
    q = OptVQ(K, D)
    z = _gaussian_latents()
    idx = _train_codebook(q, z, steps=120)
    assert idx.unique().numel() >= K - 1
    cols = q.plan(z).sum(0) * K
    assert float(cols.min()) > 0.5 and float(cols.max()) < 2.0, cols
    assert _nearest_usage(q.codebook, z) >= 0.9 * K


def test_optvq_escapes_a_start_where_nearest_code_vq_collapses():
    """The paper's local pitfall: every code starts in one tight cluster far from the data. The nearest-code VQ
    (Wasserstein VQ with gamma = 0: VQ-VAE's losses) moves only the code nearest the data and leaves almost every
    code dead; OptVQ's balanced assignment pulls every code into the data."""
    torch.manual_seed(0)
    z = _gaussian_latents()
    vq = WassersteinVQ(K, D, gamma=0.0)
    with torch.no_grad():
        vq.embedding.copy_(_shifted_codebook())
    vq_idx = _train_codebook(vq, z, steps=120)
    opt = OptVQ(K, D)
    _set_optvq_codes(opt, _shifted_codebook())
    opt_idx = _train_codebook(opt, z, steps=120)
    assert vq_idx.unique().numel() <= 4 and _nearest_usage(vq.codebook, z) <= 4
    assert opt_idx.unique().numel() >= K - 1 and _nearest_usage(opt.codebook, z) >= 0.75 * K
    assert float(opt.codebook.detach().mean(0).norm()) < 1.0  # the cluster moved from (5, ..., 5) onto the data


def test_optvq_heads_quantize_sub_vectors_with_one_codebook():
    torch.manual_seed(0)
    q = OptVQ(K, D, num_head=2)
    z = torch.randn(2, 5, D)
    out, idx, _ = q(z)
    assert idx.shape == (2, 5, 2) and q.codebook.shape == (K, D // 2)
    assert torch.allclose(out, q.codebook[idx].reshape(2, 5, D).detach(), atol=1e-6)


# ------------------------------------------------------------------------------------------- Wasserstein VQ
def test_gaussian_w2_is_zero_for_identical_gaussians():
    g = torch.Generator().manual_seed(0)
    a = torch.randn(D, D, generator=g)
    cov, mean = a @ a.t() + 0.1 * torch.eye(D), torch.randn(D, generator=g)
    assert abs(float(gaussian_w2_squared(mean, cov, mean.clone(), cov.clone()))) < 1e-4


def test_gaussian_w2_matches_the_closed_form_by_hand():
    # 1-D: (m1 - m2)^2 + (s1 - s2)^2 = 1.5^2 + (2 - 0.5)^2 = 4.5
    w = gaussian_w2_squared(torch.tensor([1.0]), torch.tensor([[4.0]]), torch.tensor([-0.5]), torch.tensor([[0.25]]))
    assert math.isclose(float(w), 4.5, rel_tol=1e-5)
    # 2-D, diagonal: |dm|^2 + sum (sqrt a_i - sqrt b_i)^2 = (1 + 4) + (1 + 1) = 7
    w = gaussian_w2_squared(torch.zeros(2), torch.diag(torch.tensor([1.0, 9.0])), torch.tensor([1.0, 2.0]),
                            torch.diag(torch.tensor([4.0, 4.0])))
    assert math.isclose(float(w), 7.0, rel_tol=1e-5)
    # 2-D, not commuting with the identity's eigenbasis: tr(I + S - 2 S^1/2), S = [[2, 1], [1, 2]] (eigenvalues 3, 1)
    w = gaussian_w2_squared(torch.zeros(2), torch.eye(2), torch.zeros(2), torch.tensor([[2.0, 1.0], [1.0, 2.0]]))
    assert math.isclose(float(w), (1 - math.sqrt(3)) ** 2, rel_tol=1e-4)


def test_wasserstein_vq_matching_term_is_scale_free_and_feeds_the_codebook_only():
    """The paper divides both sides by the latents' largest per-dimension standard deviation: scaling latents and
    codes together leaves the term unchanged. Its gradient reaches the codebook, never the latents."""
    z = 3.0 * torch.randn(1, 256, D, generator=torch.Generator().manual_seed(0)) + 1.0
    terms = []
    for scale in (1.0, 1000.0):
        torch.manual_seed(0)  # the same codebook
        q = WassersteinVQ(K, D, beta=0.0, alpha=0.0, gamma=1.0)
        with torch.no_grad():
            q.embedding.mul_(100 * scale)
        zs = (scale * z).requires_grad_()
        _, _, loss = q(zs)
        loss.backward()
        terms.append(float(loss.detach()))
        assert (zs.grad is None or not zs.grad.any()) and q.embedding.grad.abs().sum() > 0
    assert math.isclose(terms[0], terms[1], rel_tol=1e-4), terms


def test_wasserstein_vq_training_moves_the_codebook_onto_the_latents_statistics():
    """Codebook-only training on shifted, correlated Gaussian latents from the paper's N(0, 0.01^2) codebook: the
    matching term pulls the codebook's mean and covariance onto the latents' (W2 falls ten-fold and more) and the
    codes get used; the same start without it (gamma = 0) stays far and uses few codes."""
    g = torch.Generator().manual_seed(0)
    mix = 0.5 * torch.randn(D, D, generator=g)
    shift = torch.tensor([2.0, -1.0, 0.5, 0.0, 1.0, -2.0, 0.0, 3.0])
    z = (torch.randn(N, D, generator=g) @ mix.t() + shift)[None]
    mean_z, cov_z = z[0].mean(0), torch.cov(z[0].t())

    def distance(q):
        c = q.codebook.detach()
        return float(gaussian_w2_squared(mean_z, cov_z, c.mean(0), torch.cov(c.t())).sqrt())

    result = {}
    for gamma in (0.5, 0.0):
        torch.manual_seed(1)
        q = WassersteinVQ(K, D, gamma=gamma)
        start = distance(q)
        idx = _train_codebook(q, z, steps=200)
        result[gamma] = (distance(q), idx.unique().numel())
    (w_matched, used_matched), (w_plain, used_plain) = result[0.5], result[0.0]
    assert w_matched < 0.1 * start and w_matched < 0.2 * w_plain, (start, result)
    assert used_matched >= 0.9 * K and used_plain < 0.5 * K, result


def test_wasserstein_vq_queue_holds_the_most_recent_latents():
    """The queue's running sums give the moments of exactly its last ``queue_size`` latents after it wraps; an
    evaluation forward does not feed it."""
    torch.manual_seed(0)
    q = WassersteinVQ(K, D, queue_size=100)
    batches = [torch.randn(1, 64, D) * (i + 1) for i in range(3)]
    for b in batches:
        q(b)
    recent = torch.cat([b[0] for b in batches])[-100:].double()
    mean, cov = q.latent_moments()
    assert torch.allclose(mean, recent.mean(0), atol=1e-6) and torch.allclose(cov, torch.cov(recent.t()), atol=1e-5)
    q.eval()
    q(torch.randn(1, 64, D) + 50.0)
    assert torch.allclose(q.latent_moments()[0], mean)


def test_the_zoo_trains_wasserstein_vqs_codebook_at_its_authors_rate_and_the_network_at_the_hosts():
    from hosts import build_model, quantizer_factories

    factories = quantizer_factories(64, 64, 64, residual=False)
    model, opt = build_model("paper", 3, factories["Wasserstein-VQ"], seed=0)
    network, codebook = opt.param_groups
    assert network["lr"] == 1e-3 and codebook["lr"] == 0.02
    assert [id(p) for p in codebook["params"]] == [id(model.quantizer.q.embedding)]
    _, opt = build_model("paper", 3, factories["OptVQ"], seed=0)
    assert len(opt.param_groups) == 1  # OptVQ's authors train the codebook with the network
