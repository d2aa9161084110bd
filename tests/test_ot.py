"""The OT solvers against POT and against each other."""
import numpy as np
import ot
import pytest
import torch

from vqwae.ot import KantorovichPotential, entropic_ot_value, exact_plans, semi_dual, sinkhorn_log, squared_distances
from vqwae.quantizers import PaperWassersteinQuantizer


def random_problem(g=3, n=12, k=7, d=4, seed=0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(g, n, d, generator=gen, dtype=torch.float64)
    c = torch.randn(k, d, generator=gen, dtype=torch.float64)
    pi = torch.softmax(torch.randn(g, k, generator=gen, dtype=torch.float64), -1)
    return x, c, pi


@pytest.mark.parametrize("seed", range(5))
def test_exact_matches_pot_emd2(seed):
    x, c, pi = random_problem(seed=seed)
    cost = squared_distances(x, c)
    plan, v = exact_plans(cost, pi)
    for g in range(x.shape[0]):
        ref = ot.emd2(np.full(x.shape[1], 1 / x.shape[1]), pi[g].numpy(), cost[g].numpy())
        assert abs(float((plan[g] * cost[g]).sum()) - ref) < 1e-6
    assert torch.allclose(plan.sum(-1), torch.full(plan.shape[:2], 1 / x.shape[1], dtype=plan.dtype))
    assert torch.allclose(plan.sum(-2), pi)
    assert torch.allclose(v.sum(-1), torch.zeros(3, dtype=v.dtype), atol=1e-9)


def ws_value(q, flat):
    return float(q(flat, compute_loss=True).losses["ws"])


def test_exact_quantizer_value_and_gradients_match_finite_differences():
    torch.manual_seed(0)
    q = PaperWassersteinQuantizer(num_codes=6, dim=3, num_positions=2, solver="exact", channel_last=True, ws_weight=1.0,
                                  kl_weight=0.0).double().eval()  # the WS term alone, unweighted
    with torch.no_grad():
        q.beta.copy_(torch.randn(2, 6, dtype=torch.float64))
    flat = torch.randn(5, 2, 3, dtype=torch.float64, requires_grad=True)  # (B, M, D)
    w = q(flat, compute_loss=True).losses["ws"]
    # The value equals POT's emd2 per position, summed.
    x = flat.detach().transpose(0, 1)
    ref = sum(
        ot.emd2(np.full(5, 0.2), q.pi[m].double().numpy(), squared_distances(x[m], q.embedding.detach()).numpy())
        for m in range(2)
    )
    assert abs(w.item() - ref) < 1e-6 if not w.requires_grad else abs(float(w.detach()) - ref) < 1e-6
    w.backward()
    h = 1e-6
    # latents and codebook: central differences (the plan is locally constant for a generic problem)
    for tensor, grad in ((flat, flat.grad), (q.embedding, q.embedding.grad)):
        for idx in [(0, 0, 0), (1, 1, 2), (4, 0, 1)] if tensor is flat else [(0, 0), (3, 2), (5, 1)]:
            with torch.no_grad():
                tensor[idx] += h
                up = ws_value(q, flat.detach())
                tensor[idx] -= 2 * h
                down = ws_value(q, flat.detach())
                tensor[idx] += h
            assert abs((up - down) / (2 * h) - float(grad[idx])) < 1e-4
    # pi: directional derivative along beta (softmax keeps pi on the simplex)
    for idx in [(0, 1), (1, 4)]:
        with torch.no_grad():
            q.beta[idx] += h
            up = ws_value(q, flat.detach())
            q.beta[idx] -= 2 * h
            down = ws_value(q, flat.detach())
            q.beta[idx] += h
        assert abs((up - down) / (2 * h) - float(q.beta.grad[idx])) < 1e-4


def test_sinkhorn_approaches_exact_as_epsilon_shrinks():
    x, c, pi = random_problem(seed=1, n=20, k=8)
    cost = squared_distances(x, c)
    plan, _ = exact_plans(cost, pi)
    exact = (plan * cost).sum((1, 2))
    gaps = []
    for rel_eps in (0.5, 0.1, 0.02, 0.005):
        eps = rel_eps * float(cost.mean())
        res = sinkhorn_log(cost, pi.log(), eps, max_iter=5000, tol=1e-10)
        gaps.append(float(((res.plan * cost).sum((1, 2)) - exact).abs().max()))
    assert all(a > b for a, b in zip(gaps, gaps[1:])), gaps
    assert gaps[-1] < 1e-2 * float(exact.mean())


def test_sinkhorn_marginals_and_dual_value():
    x, c, pi = random_problem(seed=2)
    cost = squared_distances(x, c)
    eps = 0.1 * float(cost.mean())
    res = sinkhorn_log(cost, pi.log(), eps, max_iter=2000, tol=1e-12)
    assert torch.allclose(res.plan.sum(-2), pi, atol=1e-8)
    assert torch.allclose(res.plan.sum(-1), torch.full_like(res.plan.sum(-1), 1 / x.shape[1]), atol=1e-8)
    # primal entropic objective <P,C> + eps KL(P || a x b) equals the dual value at the optimum
    ab = (1 / x.shape[1]) * pi.unsqueeze(1)
    primal = (res.plan * cost).sum((1, 2)) + eps * (res.plan * (res.plan / ab).log()).sum((1, 2))
    dual = entropic_ot_value(cost, pi.log(), eps, max_iter=2000, tol=1e-12)
    assert torch.allclose(primal, dual, atol=1e-8)


def test_semi_dual_is_a_lower_bound_that_tightens_with_iterations():
    torch.manual_seed(0)
    x, c, pi = (t.float() for t in random_problem(seed=3, g=4, n=32, k=16, d=4))
    cost = squared_distances(x, c)
    eps = 0.1 * float(cost.mean())
    target = entropic_ot_value(cost, pi.log(), eps, max_iter=5000, tol=1e-9).sum()
    phi = KantorovichPotential(groups=4, dim=4, hidden=32, lr=1e-2)
    values = []
    for _ in range(4):
        values.append(float(semi_dual(cost, pi.log(), phi(c), eps).sum().detach()))
        phi.ascend(cost, pi.log(), c, eps, iterations=100)
    values.append(float(semi_dual(cost, pi.log(), phi(c), eps).sum().detach()))
    assert all(v <= float(target) + 1e-4 for v in values), (values, float(target))
    assert values[-1] > values[0]
    assert float(target) - values[-1] < 0.5 * (float(target) - values[0])
